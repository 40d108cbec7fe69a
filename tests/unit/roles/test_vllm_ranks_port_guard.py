"""vllm_ranks' launch guard (roles/vllm_ranks/tasks/converge.yml, its two 'Launch guard' tasks) run with
ansible-playbook on localhost against a real listener: the head is refused naming host, port, process and fix;
free ports pass; a worker is never checked. The rule is module_utils/docker_rank.py's (test_port_guard.py)."""
import os
import shutil
import socket

import pytest
import yaml

from tests.unit.conftest import ROOT, run_local_play

CONVERGE = os.path.join(ROOT, "roles", "vllm_ranks", "tasks", "converge.yml")
pytestmark = pytest.mark.skipif(not shutil.which("ss"), reason="iproute2 ss is not installed on this machine")


def _guard_tasks():
    with open(CONVERGE) as f:
        tasks = yaml.safe_load(f)
    guard = [t for t in tasks if t.get("name", "").startswith(("Vllm_ranks | Launch guard | List listeners",
                                                               "Vllm_ranks | Launch guard | The head's ports"))]
    assert [t["name"] for t in guard] == ["Vllm_ranks | Launch guard | List listeners on the head's API and master ports",
                                          "Vllm_ranks | Launch guard | The head's ports must be free before any rank starts"]
    return guard


def _run(tmp_path, rank, api_port, master_port):
    rc, tasks, tail = run_local_play(tmp_path, ["spark-a"], {
        "vllm_rank": rank, "vllm_lane_spec": {"serve": {"api_port": api_port, "master_port": master_port}}},
        _guard_tasks())
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
    res = tasks["Vllm_ranks | Launch guard | The head's ports must be free before any rank starts"]
    assert res["failed"], res
    assert res["msg"].startswith("spark-a: TCP port %d (lane serve.api_port) is in use although every rank of the "
                                 "group was removed: LISTEN" % port), res["msg"]
    assert "python" in res["msg"] and "Fix: stop that process" in res["msg"] and "no rank was started" in res["msg"]
    assert "serve.master_port" not in res["msg"]
    rc, tasks = _run(tmp_path / "free", 0, port, free_port)
    assert rc == 0, tasks
    assert not tasks["Vllm_ranks | Launch guard | The head's ports must be free before any rank starts"].get("failed")


def test_a_worker_is_not_checked(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        rc, tasks = _run(tmp_path, 1, s.getsockname()[1], 1)
    finally:
        s.close()
    assert rc == 0, tasks
    assert tasks["Vllm_ranks | Launch guard | List listeners on the head's API and master ports"].get("skipped")
