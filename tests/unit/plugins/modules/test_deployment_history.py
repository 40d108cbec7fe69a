# -*- coding: utf-8 -*-
"""Deployment history (module_utils/history.py, module deployment_history) from real inputs: the sim_cpu_tp2 lane
and a rank container read through the vllm_health module from a captured `docker inspect`."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os
import stat

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import history as H
from ansible_collections.dgxspark.vllm.plugins.modules import deployment_history, vllm_health
from tests.unit.conftest import FIXTURES, ROOT, read_fixture
from tests.unit.plugins.modules.utils import run_module

INSPECT_DOCKER = """#!/bin/sh
d=%(dir)s
case "$1" in
  inspect) cat "$d/inspect.json" ;;
  logs) echo "(INFO) Application startup complete." ;;
esac
"""
CAPTURE = json.loads(read_fixture("launch-lines", "captured", "docker-inspect-running.json"))
# the lane file the fixture was made from, kept beside it so the shipped lane can change (README)
FIXTURE_LANE = os.path.join(ROOT, "tests", "fixtures", "history", "lane-sim_cpu_tp2.yml")


def lane(max_model_len=None, path=os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")):
    with open(path) as f:
        spec = yaml.safe_load(f)
    if max_model_len is not None:
        spec["serve"]["max_model_len"] = max_model_len
    return spec


def container(tmp_path, spec_hash=None):
    """The `container` the vllm_health module returns for the captured inspect (optionally another spec label)."""
    cap = copy.deepcopy(CAPTURE)
    if spec_hash:
        cap[0]["Config"]["Labels"]["dgxspark.vllm.spec-hash"] = spec_hash
    (tmp_path / "inspect.json").write_text(json.dumps(cap))
    path = tmp_path / "docker"
    path.write_text(INSPECT_DOCKER % {"dir": str(tmp_path)})
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": str(path), "timeout_s": 1,
                                                "poll_s": 1})
    assert not failed, res
    return res["container"]


def rows(tmp_path, spec_hash=None):
    c = container(tmp_path, spec_hash)
    return [{"host": "spark-sim-1", "rank": 1, "container": c}, {"host": "spark-sim-0", "rank": 0, "container": c}]


GATE = {"mode": "full", "ok": True, "restarted": True, "ready_after_s": 41, "report": "reports/health-x.json"}


def record(tmp_path, **kw):
    args = {"dir": str(tmp_path / "hist"), "lane": lane(), "ranks": rows(tmp_path), "gate": GATE,
            "recorded": "2026-12-06T12:00:00Z"}
    args.update(kw)
    return run_module(deployment_history.main, args)


def test_the_health_module_reports_what_the_rank_runs(tmp_path):
    c = container(tmp_path)
    assert c["image_id"] == CAPTURE[0]["Image"]
    assert c["spec_hash"] == CAPTURE[0]["Config"]["Labels"]["dgxspark.vllm.spec-hash"] == "0f1e2d"


def test_entry_from_the_lane_and_the_gate_rows(tmp_path):
    spec = lane()
    entry = H.build_entry(spec, rows(tmp_path), GATE, "2026-12-06T12:00:00Z",
                          verified={"checkpoint_manifest_sha256": "ab" * 32,
                                    "fix_files": [{"name": spec["fix_files"][0]["name"], "sha256": "cd" * 32}]})
    assert [n["rank"] for n in entry["nodes"]] == [0, 1]
    assert entry["nodes"][0] == {"host": "spark-sim-0", "rank": 0, "container": "vllm_rank",
                                 "image_id": CAPTURE[0]["Image"], "spec_hash": "0f1e2d"}
    assert entry["lane"]["name"] == "sim_cpu_tp2" and entry["lane"]["max_model_len"] == spec["serve"]["max_model_len"]
    assert entry["lane"]["sha256"] == H.canonical_sha256(spec)
    assert entry["checkpoint"] == {"repo_id": spec["checkpoint"]["repo_id"], "revision": spec["checkpoint"]["revision"],
                                   "manifest_sha256": "ab" * 32}
    assert entry["drafter"] is None  # sim_cpu_tp2 has none
    assert entry["fix_files"] == [{"name": spec["fix_files"][0]["name"], "sha256": spec["fix_files"][0]["sha256"],
                                   "verified_sha256": "cd" * 32}]
    # the identity: the lane and what each rank runs, not the time nor the report
    later = H.build_entry(spec, rows(tmp_path), dict(GATE, report="other"), "2026-12-07T00:00:00Z")
    assert later["id"] == entry["id"]
    assert H.build_entry(lane(1024), rows(tmp_path), GATE, "t")["id"] != entry["id"]
    assert H.build_entry(spec, rows(tmp_path, "ffee00"), GATE, "t")["id"] != entry["id"]


@pytest.mark.parametrize("bad,why", [({}, "vllm_lane_spec"), (None, "vllm_lane_spec")])
def test_entry_refuses_a_missing_lane(tmp_path, bad, why):
    with pytest.raises(ValueError, match=why):
        H.build_entry(bad, rows(tmp_path), GATE, "t")
    with pytest.raises(ValueError, match="no rank rows"):
        H.build_entry(lane(), [], GATE, "t")


def test_record_once_then_nothing_for_the_same_deployment(tmp_path):
    res, failed = record(tmp_path)
    assert not failed and res["changed"] and res["recorded"] and res["total"] == 1
    path = tmp_path / "hist" / "deployments.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "hist").st_mode) == 0o700
    on_disk, problems = H.parse(path.read_text())
    assert problems == [] and on_disk == [res["entry"]]
    # a second gate of the same deployment (a re-run that changed nothing): ok, no line added
    res2, failed = record(tmp_path, recorded="2026-12-06T13:00:00Z")
    assert not failed and not res2["changed"] and not res2["recorded"]
    assert res2["last_known_good"]["recorded"] == "2026-12-06T12:00:00Z"
    assert len(path.read_text().splitlines()) == 1


def test_a_changed_serve_argument_appends_and_becomes_the_last_known_good(tmp_path):
    first, _f = record(tmp_path)
    second, failed = record(tmp_path, lane=lane(1024), recorded="2026-12-06T14:00:00Z")
    assert not failed and second["recorded"] and second["total"] == 2
    assert second["last_known_good"]["id"] == second["entry"]["id"] != first["entry"]["id"]
    listed, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(tmp_path / "hist")})
    assert not failed and not listed["changed"]
    assert [e["id"] for e in listed["entries"]] == [second["entry"]["id"], first["entry"]["id"]]
    assert [e["last_known_good"] for e in listed["entries"]] == [True, False]
    assert listed["entries"][0]["ranks"] == ["spark-sim-0:0 image %s spec 0f1e2d" % CAPTURE[0]["Image"][:19],
                                             "spark-sim-1:1 image %s spec 0f1e2d" % CAPTURE[0]["Image"][:19]]


def test_retention_keeps_the_newest(tmp_path):
    ids = []
    for n, mml in enumerate((256, 384, 512)):
        res, failed = record(tmp_path, lane=lane(mml), keep=2, recorded="2026-12-06T1%d:00:00Z" % n)
        assert not failed
        ids.append(res["entry"]["id"])
    on_disk, _p = H.parse((tmp_path / "hist" / "deployments.jsonl").read_text())
    assert [e["id"] for e in on_disk] == ids[1:]
    assert H.retain(on_disk, 1) == on_disk[-1:]
    with pytest.raises(ValueError):
        H.retain(on_disk, 0)
    res, failed = record(tmp_path, lane=lane(512), keep=1001)
    assert failed and "1-1000" in res["msg"]


def test_check_mode_writes_nothing(tmp_path):
    res, failed = record(tmp_path, _ansible_check_mode=True)
    assert not failed and res["changed"] and res["recorded"]
    assert not (tmp_path / "hist").exists()


def test_a_damaged_file_is_read_without_a_traceback_and_repaired_on_record(tmp_path):
    text = read_fixture("history", "deployments-damaged.jsonl")
    entries, problems = H.parse(text)
    assert len(entries) == 2
    assert [p.split(":")[0] for p in problems] == ["line 3", "line 4", "line 5"]
    assert "not JSON" in problems[0] and "not a JSON object" in problems[1]
    assert problems[2] == "line 5: lacks recorded, lane, nodes"
    assert H.last_known_good(entries)["lane"]["max_model_len"] == 1024
    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "deployments.jsonl").write_text(text)
    listed, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(hist), "count": 1})
    assert not failed and listed["total"] == 2 and listed["problems"] == problems
    assert len(listed["entries"]) == 1 and listed["entries"][0]["id"] == entries[-1]["id"]
    # the fixture's entries were made from these same inputs (README): the same deployment records nothing
    res, failed = record(tmp_path, lane=lane(1024, FIXTURE_LANE), ranks=fixture_rows(tmp_path))
    assert not failed and not res["recorded"] and res["entry"]["id"] == entries[-1]["id"]
    # a new deployment rewrites the file without the damaged lines and keeps a copy of it
    res, failed = record(tmp_path, lane=lane(256), ranks=fixture_rows(tmp_path))
    assert not failed and res["recorded"] and res["total"] == 3
    assert (hist / "deployments.jsonl.damaged").read_text() == text
    after, problems = H.parse((hist / "deployments.jsonl").read_text())
    assert problems == [] and [e["id"] for e in after] == [e["id"] for e in entries] + [res["entry"]["id"]]


def fixture_rows(tmp_path):
    """The fixture's rank rows: hosts spark-sim-0/1, each with the captured container (README)."""
    return [{"host": "spark-sim-%d" % r, "rank": r, "container": container(tmp_path)} for r in (0, 1)]


def test_an_unreadable_or_missing_file(tmp_path):
    listed, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(tmp_path / "none")})
    assert not failed and listed["total"] == 0 and listed["entries"] == [] and listed["last_known_good"] is None
    assert H.parse("") == ([], [])
    assert H.listing([], 5) == []


def test_fixture_dir_is_documented():
    assert os.path.exists(os.path.join(FIXTURES, "history", "README.md"))


def _bench_module(name, *path):
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_report(tmp_path):
    """A real report.json: roles/vllm_bench's harness run against the molecule stub API (as test_bench.py does)."""
    from tests.unit.plugins.module_utils import test_bench as tb  # pylint: disable=import-outside-toplevel
    server, _state = tb.stub.serve(tb.answers())
    try:
        out = tmp_path / "bench"
        out.mkdir()
        report = tb.bench.run(tb.config("http://127.0.0.1:%d" % server.server_address[1]), str(out))
    finally:
        server.shutdown()
    assert report["ok"] is True and report["lane"] == "sim_cpu_tp2", report["failures"]
    return report, str(out / "report.json")


def test_a_passing_bench_is_kept_on_the_deployment_that_serves_and_is_the_decode_baseline(tmp_path):
    first, _f = record(tmp_path)
    report, path = bench_report(tmp_path)
    rate = report["results"]["decode"]["decode_tok_s_median"]
    args = {"state": "benched", "dir": str(tmp_path / "hist"), "bench_report": report, "bench_report_path": path}
    res, failed = run_module(deployment_history.main, args)
    assert not failed and res["changed"], res
    assert res["bench"] == {"report": path, "generated": report["generated"], "lane": "sim_cpu_tp2",
                            "decode_tok_s_median": rate, "ttft_s_median": report["results"]["decode"]["ttft_s_median"]}
    on_disk, problems = H.parse((tmp_path / "hist" / "deployments.jsonl").read_text())
    # the same deployment (same id, one line), now carrying the figures
    assert problems == [] and len(on_disk) == 1 and on_disk[0]["id"] == first["entry"]["id"]
    assert on_disk[0]["bench"]["decode_tok_s_median"] == rate > 0
    again, failed = run_module(deployment_history.main, args)
    assert not failed and not again["changed"]
    listed, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(tmp_path / "hist"),
                                                          "lane_name": "sim_cpu_tp2"})
    assert not failed and listed["decode_baseline"] == rate
    other, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(tmp_path / "hist"),
                                                         "lane_name": "tp2_dflash2"})
    assert not failed and other["decode_baseline"] is None  # another lane's figure says nothing of this one
    # a new deployment (a changed serve argument) starts without figures: no baseline until it is benchmarked
    record(tmp_path, lane=lane(1024), recorded="2026-12-06T14:00:00Z")
    listed, failed = run_module(deployment_history.main, {"state": "listed", "dir": str(tmp_path / "hist"),
                                                          "lane_name": "sim_cpu_tp2"})
    assert not failed and listed["decode_baseline"] is None and listed["last_known_good"]["bench"] is None


def test_a_bench_is_not_kept_when_it_failed_or_has_nothing_to_attach_to(tmp_path):
    report, path = bench_report(tmp_path)
    # nothing recorded yet (verify.yml on a fleet whose gate never recorded): a warning, no file
    res, failed = run_module(deployment_history.main, {"state": "benched", "dir": str(tmp_path / "hist"),
                                                       "bench_report": report, "bench_report_path": path})
    assert not failed and not res["changed"] and res["bench"] is None
    assert not (tmp_path / "hist").exists()
    record(tmp_path)
    failed_report = dict(report, ok=False, failures=["decode: no token"])
    res, failed = run_module(deployment_history.main, {"state": "benched", "dir": str(tmp_path / "hist"),
                                                       "bench_report": failed_report, "bench_report_path": path})
    assert failed and "did not pass" in res["msg"] and "deployments.jsonl" in res["msg"]
    res, failed = run_module(deployment_history.main, {"state": "benched", "dir": str(tmp_path / "hist"),
                                                       "bench_report": dict(report, lane="tp2_dflash2"),
                                                       "bench_report_path": path})
    assert not failed and not res["changed"] and res["bench"] is None
    assert H.last_known_good(H.parse((tmp_path / "hist" / "deployments.jsonl").read_text())[0])["bench"] is None
    for bad in ({"ok": True, "results": {"decode": {"decode_tok_s_median": 0}}},
                {"ok": True, "results": {"decode": {"decode_tok_s_median": float("nan")}}},
                {"ok": True, "results": {}}, {"ok": "yes"}, None):
        with pytest.raises(ValueError):
            H.bench_summary(bad, path)
