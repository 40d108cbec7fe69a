"""docker_inspect against a docker CLI stand-in that prints the captured `docker inspect` outputs."""
import json
from unittest import mock

from ansible.module_utils import basic

from ansible_collections.dgxspark.vllm.plugins.modules import docker_inspect
from tests.unit.conftest import read_fixture
from tests.unit.plugins.modules.utils import run_module

RUNNING = read_fixture("launch-lines", "captured", "docker-inspect-running.json")
IMAGE = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")


def _run(answers, args):
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        return answers[argv[-1]]
    with mock.patch.object(basic.AnsibleModule, "run_command", run_command):
        result, failed = run_module(docker_inspect.main, args)
    return result, failed, calls


def test_reads_a_container_and_an_image_and_reports_absent_ones_as_null():
    result, failed, calls = _run({
        "vr-capture": (0, RUNNING, ""),
        "dgxspark-registry": (1, "[]", "Error response from daemon: No such container: dgxspark-registry"),
        "dgxspark-sim/vllm-cpu:0.32.0": (0, IMAGE, ""),
        "registry:2": (1, "[]", "Error response from daemon: No such image: registry:2"),
    }, {"containers": ["vr-capture", "dgxspark-registry"], "images": ["dgxspark-sim/vllm-cpu:0.32.0", "registry:2"]})
    assert not failed and result["changed"] is False
    c = result["containers"]["vr-capture"]
    assert c["running"] is True and c["labels"]["dgxspark.vllm.spec-hash"] == "0f1e2d"
    assert c["env"]["LANG"] == "C.UTF-8" and c["image_id"] == json.loads(RUNNING)[0]["Image"]
    assert result["containers"]["dgxspark-registry"] is None and result["images"]["registry:2"] is None
    assert result["images"]["dgxspark-sim/vllm-cpu:0.32.0"]["id"] == json.loads(IMAGE)[0]["Id"]
    assert calls[0] == ["docker", "inspect", "--type", "container", "vr-capture"]
    assert calls[2] == ["docker", "image", "inspect", "dgxspark-sim/vllm-cpu:0.32.0"]


def test_a_daemon_it_cannot_reach_fails_with_the_fix():
    denied = "permission denied while trying to connect to the Docker daemon socket"
    result, failed, calls = _run({"x": (1, "", denied)}, {"containers": ["x"]})
    assert failed and calls == [["docker", "inspect", "--type", "container", "x"]]
    assert result["msg"] == ("docker inspect container x failed (rc 1): permission denied while trying to connect to "
                             "the Docker daemon socket. Fix: check that the deploy user can run docker on this node")
