"""rdma_fabric's master-port probe (issue 11): when the one-shot listener cannot bind (errno 98), the
port_owner module (called by roles/rdma_fabric/tasks/probe.yml) says whether the listener on the port is our
own rank (the rank container's main process or a descendant) or a foreign process. Run here with real
processes, a stand-in `ss` that reports them and a stand-in `docker inspect` naming the container's main pid."""
import json
import os
import stat
import subprocess

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.modules import port_owner
from tests.unit.conftest import ROOT
from tests.unit.plugins.modules.utils import run_module

PROBE = os.path.join(ROOT, "roles", "rdma_fabric", "tasks", "probe.yml")
TASK = "Rdma_fabric | who holds the master port (head)"


def test_the_probe_calls_the_port_owner_module():
    with open(PROBE) as f:
        tasks = yaml.safe_load(f)
    (task,) = [t for t in tasks if t["name"] == TASK]
    assert task["dgxspark.vllm.port_owner"]["container"] == "{{ rdma_fabric_rank_container }}"


@pytest.fixture
def procs():
    started = []

    def spawn(argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        started.append(p)
        return p
    yield spawn
    for p in started:
        p.kill()
        p.wait()


def run_owner(tmp_path, ss_pids, docker_out, docker_rc=0):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    ss_lines = "".join('LISTEN 0 16 198.18.21.10:29501 0.0.0.0:* users:(("python3",pid=%d,fd=3))\n' % p
                       for p in ss_pids)
    (bindir / "ss").write_text("#!/bin/sh\nprintf '%%s' '%s'\n" % ss_lines)
    if docker_rc:
        docker = "#!/bin/sh\necho '%s' >&2\nexit %d\n" % (docker_out, docker_rc)
    else:  # "<running> <pid>" -> the State of `docker inspect --type container`
        running, pid = docker_out.split()
        state = json.dumps([{"Name": "/vllm_rank", "State": {"Status": "running" if running == "true" else "exited",
                                                             "Running": running == "true", "Pid": int(pid)}}])
        docker = "#!/bin/sh\necho '%s'\n" % state
    (bindir / "docker").write_text(docker)
    for name in ("ss", "docker"):
        (bindir / name).chmod(0o755 | stat.S_IEXEC)
    old = os.environ["PATH"]
    os.environ["PATH"] = "%s:%s" % (bindir, old)
    try:
        result, failed = run_module(port_owner.main, {"port": 29501, "container": "vllm_rank"})
    finally:
        os.environ["PATH"] = old
    assert not failed, result
    return result


def test_a_descendant_of_the_rank_container_is_our_own_rank(tmp_path, procs):
    parent = procs(["sh", "-c", "sleep 300 & echo $!; wait"])
    child = int(parent.stdout.readline())
    out = run_owner(tmp_path, [child], "true %d" % parent.pid)
    assert out["ours"] is True and out["foreign_pids"] == []
    assert out["pids"] == [child] and out["container_pid"] == parent.pid and out["container_running"] is True


def test_a_process_outside_the_rank_container_is_foreign(tmp_path, procs):
    listener = procs(["sleep", "300"])
    rank = procs(["sleep", "300"])
    out = run_owner(tmp_path, [listener.pid], "true %d" % rank.pid)
    assert out["ours"] is False and out["foreign_pids"] == [listener.pid]
    assert out["listeners"] == ['LISTEN 0 16 198.18.21.10:29501 0.0.0.0:* users:(("python3",pid=%d,fd=3))'
                                % listener.pid]


def test_no_rank_container_makes_any_listener_foreign(tmp_path, procs):
    listener = procs(["sleep", "300"])
    out = run_owner(tmp_path, [listener.pid], "Error: No such container: vllm_rank", docker_rc=1)
    assert out["ours"] is False and out["container_running"] is False and out["foreign_pids"] == [listener.pid]


def test_a_stopped_rank_container_does_not_vouch_for_its_old_pid(tmp_path, procs):
    parent = procs(["sh", "-c", "sleep 300 & echo $!; wait"])
    child = int(parent.stdout.readline())
    out = run_owner(tmp_path, [child], "false %d" % parent.pid)
    assert out["ours"] is False


def test_a_listener_ss_cannot_attribute_is_not_ours(tmp_path):
    out = run_owner(tmp_path, [], "true 4242")
    assert out["ours"] is False and out["listeners"] == []


def test_the_assert_accepts_errno_98_only_with_our_rank():
    with open(PROBE) as f:
        tasks = yaml.safe_load(f)
    (check,) = [t for t in tasks if t["name"].startswith("Rdma_fabric | every worker reached the master")]
    that = check["ansible.builtin.assert"]["that"]
    assert "_rdma_fabric_owner.ours | default(false)" in that
    assert "is held by another process, not by the rank container" in check["ansible.builtin.assert"]["fail_msg"]
