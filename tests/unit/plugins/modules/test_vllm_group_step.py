"""vllm_group_step: the module runs rank_node.py's step (the code the watchdog's agent runs) and writes the load record
the watchdog reads (lifecycle.phase judges it). The docker CLI is the fake of test_rank_node (it creates what its
`docker run` argv says)."""
import copy
import json
import time

import pytest

from ansible.module_utils import basic

from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle
from ansible_collections.dgxspark.vllm.plugins.modules import vllm_group_step
from tests.unit.plugins.module_utils.test_rank_node import Docker, _fixture
from tests.unit.plugins.modules.utils import run_module


@pytest.fixture
def docker(monkeypatch):
    fake = Docker()

    def run_command(module, argv, **kwargs):
        return fake(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return fake


def _step(tmp_path, **kw):
    base = {"host": "spark-sim-1", "container": "vllm_rank", "log_dir": str(tmp_path), "log_stamp": "20261204T000000Z"}
    base.update(kw)
    return run_module(vllm_group_step.main, base)


def test_start_runs_the_spec_waits_and_verifies_the_launch(docker, tmp_path):
    spec = _fixture("rank-worker.json")["spec"]
    res, failed = _step(tmp_path, step="start", spec=spec, wait_regex="distributed_init_method=tcp://", wait_timeout=30)
    assert not failed, res
    assert (res["changed"], res["outcome"], res["id"]) == (True, "ready", "0afbfddf9ffb")
    docker.tamper = lambda c: c["HostConfig"]["RestartPolicy"].update(Name="unless-stopped")
    res, failed = _step(tmp_path, step="start", spec=spec)
    assert failed and res["outcome"] == "launch_differs"
    assert "spark-sim-1: rank container vllm_rank: restart policy is 'unless-stopped', rendered 'no'" in res["msg"]


def test_stop_counts_a_death_and_check_mode_touches_nothing(docker, tmp_path):
    docker.containers["vllm_rank"] = docker.raw("vllm_rank", running=False, exit_code=1)
    res, failed = _step(tmp_path, step="stop", count_deaths=True, _ansible_check_mode=True)
    assert not failed and res["changed"] is True and "vllm_rank" in docker.containers
    res, failed = _step(tmp_path, step="stop", count_deaths=True)
    assert not failed and (res["changed"], res["removed"], res["running"], res["deaths"]) == (True, True, False, 1)
    assert res["log_path"] == str(tmp_path / "vllm_rank-20261204T000000Z.log")
    res, failed = _step(tmp_path, step="stop", count_deaths=True)
    assert not failed and (res["changed"], res["deaths"]) == (False, 1)


def test_start_for_another_container_is_refused(docker, tmp_path):
    spec = copy.deepcopy(_fixture("rank-worker.json")["spec"])
    spec["name"] = "other"
    res, failed = _step(tmp_path, step="start", spec=spec)
    assert failed and res["msg"].startswith("spark-sim-1: the spec is for container 'other', the step for 'vllm_rank'")
    assert docker.calls == []


def test_the_load_record_beside_the_rank_spec_file_makes_the_group_loading(docker, tmp_path):
    spec = tmp_path / "rank.json"
    t0 = time.time()
    res, failed = _step(tmp_path, step="load", rank_spec_file=str(spec), deadline_s=600)
    assert not failed and res["changed"] is True
    assert res["path"] == str(tmp_path / "group-load.json")
    rec = json.loads((tmp_path / "group-load.json").read_text())
    assert rec == res["record"]
    assert (rec["by"], rec["deadline_s"], rec["done"]) == ("vllm_ranks", 600.0, None)
    assert t0 <= rec["started"] <= time.time() and rec["deadline"] == rec["started"] + 600
    ranks = [{"rank": 0, "host": "h", "running": True}, {"rank": 1, "host": "w", "running": True}]
    assert lifecycle.phase(rec, rec["started"] + 30, ranks) == "loading"
    assert lifecycle.phase(rec, rec["started"] + 601, ranks) == "load_expired"
    (tmp_path / "group-load.json").unlink()
    res, failed = _step(tmp_path, step="load", rank_spec_file=str(spec), deadline_s=60, _ansible_check_mode=True)
    assert not failed and not (tmp_path / "group-load.json").exists()


def test_a_bad_load_is_refused_with_the_path_and_the_fix(docker, tmp_path):
    res, failed = _step(tmp_path, step="load", rank_spec_file=str(tmp_path / "r.json"), deadline_s=0)
    assert failed
    assert res["msg"] == ("spark-sim-1: %s: deadline_s must be positive, got 0.0. Fix: give a deadline in seconds above "
                          "0 (the lane's health.ready_timeout_s)" % (tmp_path / "group-load.json"))
    res, failed = _step(tmp_path, step="load", deadline_s=60, rank_spec_file=str(tmp_path / "no" / "rank.json"))
    assert failed and "the folder of the rank spec file does not exist. Fix: run vllm_ranks" in res["msg"]


def test_settle_reports_ok_not_changed(docker, tmp_path, monkeypatch):
    from ansible_collections.dgxspark.vllm.plugins.module_utils import rank_node
    monkeypatch.setattr(rank_node, "engine_processes", lambda: [])
    monkeypatch.setattr(rank_node.Node, "mem_available_gib", lambda self: 50.0)
    off = {"drop_caches": False, "compact": False, "min_available_gib": 10}
    res, failed = _step(tmp_path, step="settle", settle=off)
    assert not failed and (res["changed"], res["outcome"], res["mem_available_gib"]) == (False, "settled", 50.0)
    res, failed = _step(tmp_path, step="settle", settle=dict(off, min_available_gib=60, timeout_s=1, delay_s=1))
    assert failed and res["outcome"] == "not_settled"
    assert res["msg"].startswith("spark-sim-1: MemAvailable stayed at 50.00 GiB, below node_prep_settle_min_available_gib "
                                 "60 GiB after 1 s")


def test_settle_needs_no_container_and_stop_does(docker, tmp_path, monkeypatch):
    # node_prep's memory_ritual.yml runs the settle step with no rank container named (molecule node_prep verify)
    monkeypatch.setattr("ansible_collections.dgxspark.vllm.plugins.module_utils.rank_node.engine_processes", lambda: [])
    res, failed = run_module(vllm_group_step.main, {
        "step": "settle", "host": "np-0", "settle": {"min_available_gib": 0.0, "drop_caches": False,
                                                     "compact": False, "sync": False, "delay_s": 0.5}})
    assert not failed, res
    assert (res["changed"], res["ok"]) == (False, True)
    res, failed = run_module(vllm_group_step.main, {"step": "stop", "host": "np-0"})
    assert failed and res["msg"] == "step is stop but all of the following are missing: container"
