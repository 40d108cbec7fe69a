"""The failure catalogue's test: every entry matches a captured input, no entry matches a healthy one.

Captures: tests/fixtures/doctor/captures.yml (each names its public source and whether it is verbatim,
reconstructed from the stated facts, or captured on this project's machines).
"""
import json
import os
import re

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import catalogue as C
from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose as D

from tests.unit.conftest import FIXTURES, ROOT, read_fixture

with open(os.path.join(FIXTURES, "doctor", "captures.yml"), encoding="utf-8") as _f:
    CAPTURES = yaml.safe_load(_f)

KEYS = ("id", "class", "title", "matchers", "cause", "fix", "source", "refs")
KINDS = ("log", "kernel", "journal", "api", "exit", "state")


def _text(cap, key):
    if cap.get(key + "_file"):
        return read_fixture(*cap[key + "_file"].split("/"))
    return cap.get(key, "")


def _state(path):
    with open(os.path.join(FIXTURES, *path.split("/")), encoding="utf-8") as f:
        s = json.load(f)
    return {"exists": True, "running": s["Running"], "exit_code": s["ExitCode"], "oom_killed": s["OOMKilled"]}


def evidence(cap):
    """Evidence as doctor builds it for one host, from a capture."""
    raw = dict(cap.get("raw") or {})
    for key, path in (cap.get("raw_files") or {}).items():
        raw[key] = read_fixture(*path.split("/"))
    ev = {"logs": _text(cap, "logs"), "kernel": _text(cap, "kernel"), "journal": _text(cap, "journal"),
          "api": _text(cap, "api"), "facts": D.node_facts(raw)}
    if cap.get("state_file"):
        ev["container"] = _state(cap["state_file"])
    elif cap.get("container"):
        ev["container"] = cap["container"]
    fleet = cap.get("fleet")
    if fleet:
        raws = dict((h, {"logs": read_fixture(*p.split("/"))}) for h, p in fleet["logs_files"].items())
        ev["facts"].update(D.fleet_facts(raws, fleet["head"])[fleet["host"]])
        ev["logs"] = raws[fleet["host"]]["logs"]
    return ev


def test_entries_are_pure_data_with_every_key():
    ids = [e["id"] for e in C.CATALOGUE]
    assert len(ids) == len(set(ids))
    for e in C.CATALOGUE:
        assert set(KEYS) <= set(e), e["id"]
        assert re.match(r"^[a-z0-9_]+$", e["id"]), e["id"]
        assert e["matchers"] and set(e["matchers"]) <= set(KINDS), e["id"]
        assert e["source"] and all(isinstance(s, str) and s for s in e["source"]), e["id"]
        for kind in ("log", "kernel", "journal", "api"):
            for rx in e["matchers"].get(kind, []):
                re.compile(rx)


def test_refs_point_at_one_entry_each():
    seen = {}
    for e in C.CATALOGUE:
        for ref in e["refs"]:
            assert ref not in seen, "%s cited by %s and %s" % (ref, seen[ref], e["id"])
            seen[ref] = e["id"]


@pytest.mark.parametrize("cap", CAPTURES["failures"], ids=[c["name"] for c in CAPTURES["failures"]])
def test_capture_matches_its_entries_best_first(cap):
    got = [m["id"] for m in D.diagnose(evidence(cap))]
    assert got, cap["name"]
    assert got[0] == cap["expect"][0], got
    assert set(cap["expect"]) <= set(got), got
    assert cap["form"] in ("verbatim", "reconstructed", "captured")


def test_every_entry_matches_a_captured_input():
    matched = set()
    for cap in CAPTURES["failures"]:
        matched.update(m["id"] for m in D.diagnose(evidence(cap)))
    missing = [e["id"] for e in C.CATALOGUE if e["id"] not in matched]
    # node-state entries the simulated fleet captured (tests/fixtures/doctor/sim) are proven in test_doctor
    sim = set()
    for name in os.listdir(os.path.join(FIXTURES, "doctor", "sim")):
        if name.endswith(".expected.yaml"):
            with open(os.path.join(FIXTURES, "doctor", "sim", name), encoding="utf-8") as f:
                sim.update(h["top"] for h in yaml.safe_load(f)["hosts"].values() if h.get("top"))
    assert [i for i in missing if i not in sim] == []


@pytest.mark.parametrize("cap", CAPTURES["healthy"], ids=[c["name"] for c in CAPTURES["healthy"]])
def test_no_entry_matches_a_healthy_capture(cap):
    assert D.diagnose(evidence(cap)) == []


def test_generic_entries_rank_below_specific_ones():
    text = ("RuntimeError: NCCL error: unhandled system error\n"
            + read_fixture("health", "vllm-logs", "errors", "gloo-unable-to-find-address.log"))
    got = [m["id"] for m in D.diagnose({"logs": text})]
    assert got[0] == "gloo_no_address" and got[-1] == "engine_dead", got


def test_state_ops():
    assert D.node_facts({"sysctl": {"vm.min_free_kbytes": "4194304"}})["vm.min_free_kbytes"] == 4194304
    assert D.hca_prefix_extra("roce", ["rocep1s0f0", "roceP2p1s0f1", "mlx5_0"]) == ["roceP2p1s0f1", "rocep1s0f0"]
    assert D.hca_prefix_extra("=rocep1s0f1", ["rocep1s0f1", "rocep1s0f10"]) == []
    assert D.hca_prefix_extra("rocep1s0f1:1", ["rocep1s0f1", "rocep1s0f10"]) == ["rocep1s0f10"]


def test_generated_doc_is_fresh():
    """docs/catalogue.md is tools/catalogue_doc.py's output for the current catalogue (re-run it when this fails)."""
    import importlib.util
    root = ROOT
    spec = importlib.util.spec_from_file_location("catalogue_doc", os.path.join(root, "tools", "catalogue_doc.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with open(os.path.join(root, "docs", "catalogue.md"), encoding="utf-8") as f:
        assert f.read() == tool.render(C.CATALOGUE)
    for e in C.CATALOGUE:
        assert "## %s\n" % e["id"] in tool.render(C.CATALOGUE)
