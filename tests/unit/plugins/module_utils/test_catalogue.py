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

from tests.unit.captures import processes_from_ps
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
    if cap.get("processes_file"):  # a `ps` listing, as doctor_collect's /proc records
        raw["processes"] = processes_from_ps(read_fixture(*cap["processes_file"].split("/")))
    if cap.get("state_file") or cap.get("container"):
        raw.setdefault("container", cap.get("container") or {"running": _state(cap["state_file"])["running"]})
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


def _capture(name):
    return [c for c in CAPTURES["failures"] + CAPTURES["healthy"] if c["name"] == name][0]


def test_memory_held_by_a_leftover_is_named_and_replaces_free_memory_refused():
    """The relaunch's refusal with a leftover EngineCore and Worker_TP1: the holder entry, with every holder named,
    and not free_memory_refused (whose fix lowers the utilization); its own fix never lowers it."""
    ev = evidence(_capture("relaunch refused free memory while the old group's EngineCore holds it"))
    assert ev["facts"]["engine_memory_held"] == (
        "VLLM::EngineCore pid 4242 (59.94 GiB), VLLM::Worker_TP1 pid 4301 (0.52 GiB) hold 60.46 GiB with the rank "
        "stopped; MemAvailable 58.41 of 121.69 GiB")
    got = D.diagnose(ev)
    assert got[0]["id"] == "engine_memory_held" and "free_memory_refused" not in [m["id"] for m in got]
    assert got[0]["evidence"].startswith("engine_memory_held: VLLM::EngineCore pid 4242 (59.94 GiB)")
    fix = D.entry("engine_memory_held")["fix"]
    assert "kill <pid>" in fix and "reboot" in fix and "lower" not in fix.lower()
    # without the holder the same refusal is free_memory_refused, as before
    assert [m["id"] for m in D.diagnose(dict(ev, facts={}))][0] == "free_memory_refused"


@pytest.mark.parametrize("running, procs, held", [
    (False, "leftover", True),    # the rank stopped, its engine still there
    (True, "leftover", False),    # the rank runs: its engine processes are its own
    (False, "helpers", False),    # only a tail -F, an exporter and a journalctl that mention the rank
    (False, None, False),         # no process list collected (an older doctor_collect)
])
def test_leftover_engines_only_with_the_rank_stopped_and_by_name(running, procs, held):
    listing = {"leftover": "ps-leftover-engine-after-relaunch.txt", "helpers": "ps-helpers-only.txt"}.get(procs)
    raw = {"container": {"exists": True, "running": running}}
    if listing:
        raw["processes"] = processes_from_ps(read_fixture("node", listing))
    assert ("engine_memory_held" in D.node_facts(raw)) is held


def test_userspace_oom_killer_states_the_real_exit_code():
    e = D.entry("userspace_oom_killer")
    assert "exits 143 (128 + SIGTERM)" in e["cause"] and "137 only when" in e["cause"]
    got = D.diagnose(evidence(_capture("earlyoom's SIGTERM ended the rank (exit 143)")))
    assert [m["id"] for m in got] == ["userspace_oom_killer"]
    assert got[0]["evidence"].startswith("earlyoom[377]: sending SIGTERM to process 4242")
