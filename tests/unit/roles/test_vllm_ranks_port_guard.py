"""vllm_ranks' launch guard, the head's `settle` step of the group lifecycle (roles/vllm_ranks/tasks/step.yml, the
vllm_group_step module, module_utils/rank_node.py), run with ansible-playbook on localhost against a real listener:
the head is refused naming host, port, process and fix; free ports pass; a worker is never checked. The rule is
module_utils/docker_rank.py's (test_port_guard.py); the watchdog's agent runs the same step."""
import os
import shutil
import socket

import pytest
import yaml

from tests.unit.conftest import ROOT, run_local_play

STEP = os.path.join(ROOT, "roles", "vllm_ranks", "tasks", "step.yml")
pytestmark = pytest.mark.skipif(not shutil.which("ss"), reason="iproute2 ss is not installed on this machine")
NAME = "Vllm_ranks | Step settle rank %d on spark-a"


def _step_task():
    with open(STEP) as f:
        tasks = yaml.safe_load(f)
    assert tasks[0]["dgxspark.vllm.vllm_group_step"]["step"] == "{{ _vllm_ranks_step.verb }}"
    return [tasks[0]]


def _run(tmp_path, rank, api_port, master_port):
    play_vars = {
        "_vllm_ranks_step": {"verb": "settle", "host": "spark-a", "rank": rank, "head": rank == 0},
        "vllm_rank": rank, "vllm_lane_spec": {"serve": {"api_port": api_port, "master_port": master_port}},
        "vllm_ranks_docker": "docker",
        "vllm_ranks_log_dir": str(tmp_path / "logs"), "_vllm_ranks_stamp": "20261204T000000Z",
        "vllm_ranks_reset_deaths": False, "vllm_ranks_worker_wait_regex": "x", "vllm_ranks_head_wait_regex": "",
        "vllm_ranks_worker_wait_timeout": 900, "vllm_ranks_head_wait_timeout": 600, "vllm_ranks_port_guard": True,
        # the ritual off: this machine's caches are never dropped by a unit test
        "vllm_ranks_memory_ritual": False, "vllm_ranks_spec_file": ""}
    rc, tasks, tail = run_local_play(tmp_path, ["spark-a"], play_vars, _step_task(),
                                     host_vars={"vllm_ranks_spec": {"name": "vllm_rank"}})
    assert tasks, tail
    return rc, dict((name, hosts["spark-a"]) for name, hosts in tasks.items())


def test_head_refused_on_a_taken_port_and_passes_when_free(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    free_port = free.getsockname()[1]
    free.close()
    try:
        rc, tasks = _run(tmp_path / "taken", 0, port, free_port)
    finally:
        s.close()
    assert rc == 2
    res = tasks[NAME % 0]
    assert res["failed"] and res["outcome"] == "port_taken", res
    assert res["msg"].startswith("spark-a: TCP port %d (lane serve.api_port) is in use although every rank of the "
                                 "group was removed: LISTEN" % port), res["msg"]
    with open("/proc/self/comm") as f:  # the holder is this test's process: "python" under xdist, "pytest" alone
        holder = f.read().strip()
    assert '(("%s",pid=%d,' % (holder, os.getpid()) in res["msg"], res["msg"]
    assert "Fix: stop that process" in res["msg"] and "no rank was started" in res["msg"]
    assert "serve.master_port" not in res["msg"]
    rc, tasks = _run(tmp_path / "free", 0, port, free_port)
    assert rc == 0, tasks
    assert not tasks[NAME % 0].get("failed")
    assert tasks[NAME % 0]["outcome"] == "settled" and tasks[NAME % 0]["changed"] is False


def test_a_worker_is_not_checked(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        rc, tasks = _run(tmp_path, 1, s.getsockname()[1], 1)
    finally:
        s.close()
    assert rc == 0, tasks
    assert tasks[NAME % 1]["outcome"] == "settled" and not tasks[NAME % 1].get("failed")
