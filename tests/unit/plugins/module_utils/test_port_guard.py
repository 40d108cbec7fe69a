"""The head's launch guard (module_utils/docker_rank.py listen_argv, port_guard_errors; catalogue port_taken),
shared by vllm_ranks (filters vllm_rank_listen_argv, vllm_rank_port_guard_errors) and the watchdog's agent."""
import os
import shutil
import socket
import subprocess

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import docker_rank as D
from tests.unit.conftest import ROOT

TAKEN = open(os.path.join(ROOT, "tests", "fixtures", "node", "ss-listen-taken.txt")).read()


def test_listen_argv_is_one_port_with_its_process():
    assert D.listen_argv("8000") == ["ss", "-H", "-l", "-t", "-n", "-p", "sport = :8000"]
    assert D.HEAD_PORT_KEYS == ("api_port", "master_port")


def test_a_taken_port_is_named_with_its_process_and_the_fix():
    errs = D.port_guard_errors("spark-a", [{"key": "api_port", "port": 18765, "stdout": TAKEN},
                                           {"key": "master_port", "port": 29501, "stdout": ""}])
    assert len(errs) == 1
    assert errs[0].startswith("spark-a: TCP port 18765 (lane serve.api_port) is in use although every rank of the "
                              "group was removed: LISTEN 0      5      127.0.0.1:18765")
    assert 'users:(("python3",pid=29375,fd=3))' in errs[0]
    assert "ss -ltnp 'sport = :18765' on spark-a" in errs[0]
    assert "vllm_lane_overrides.serve.api_port" in errs[0] and "catalogue port_taken" in errs[0]


def test_free_ports_pass():
    assert D.port_guard_errors("spark-a", [{"key": "api_port", "port": 8000, "stdout": "\n"},
                                           {"key": "master_port", "port": 29501, "stdout": ""}]) == []


@pytest.mark.skipif(not shutil.which("ss"), reason="iproute2 ss is not installed on this machine")
def test_the_argv_sees_a_real_listener_and_then_a_free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        out = subprocess.run(D.listen_argv(port), capture_output=True, text=True, check=True).stdout
        errs = D.port_guard_errors("h", [{"key": "master_port", "port": port, "stdout": out}])
        assert len(errs) == 1 and "127.0.0.1:%d" % port in errs[0], (out, errs)
    finally:
        s.close()
    out = subprocess.run(D.listen_argv(port), capture_output=True, text=True, check=True).stdout
    assert D.port_guard_errors("h", [{"key": "master_port", "port": port, "stdout": out}]) == []
