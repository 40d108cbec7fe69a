"""docker_cli (the one docker client) and the group decision of docker_rank, on captured `docker inspect` output."""
import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import docker_cli as dc
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import group_restart
from tests.unit.captures import parse_inspect
from tests.unit.conftest import read_fixture


def captured(state):
    return read_fixture("launch-lines", "captured", "docker-inspect-%s.json" % state)


def test_parse_container_reads_the_captured_running_rank():
    info = dc.parse_container(dc.load_inspect(captured("running")))
    assert info["name"] == "vr-capture" and info["running"] is True and info["status"] == "running"
    assert info["exit_code"] == 0 and info["finished_at"] == "0001-01-01T00:00:00Z"
    assert info["labels"]["dgxspark.vllm.spec-hash"] == "0f1e2d"
    assert info["env"] == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    assert info["mounts"] == [] and info["error"] is None


def test_parse_image_reads_layers_and_size_of_the_captured_engine_image():
    text = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    raw = json.loads(text)[0]
    info = dc.parse_image(dc.load_inspect(text))
    assert info["id"] == raw["Id"] and info["size"] == raw["Size"] and info["size"] > 0
    assert info["layers"] == raw["RootFS"]["Layers"] and len(info["layers"]) > 3


def test_empty_inspect_is_absent():
    assert dc.load_inspect("[]") is None and dc.parse_container(None) is None and dc.parse_image(None) is None


class Runner(object):
    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        return self.answers[argv[1]]


def test_cli_inspects_with_argv_and_maps_no_such_to_none():
    run = Runner({"inspect": (1, "[]\n", "Error response from daemon: No such container: vllm_glm53")})
    assert dc.DockerCLI(run, "/usr/bin/docker").inspect_container("vllm_glm53") is None
    assert run.calls == [["/usr/bin/docker", "inspect", "--type", "container", "vllm_glm53"]]


def test_cli_other_failures_raise_with_rc_and_stderr():
    run = Runner({"image": (1, "", "permission denied while trying to connect to the Docker daemon socket")})
    with pytest.raises(dc.DockerError) as e:
        dc.DockerCLI(run).inspect_image("registry:2")
    assert e.value.rc == 1 and "permission denied" in str(e.value) and "registry:2" in str(e.value)


def test_merged_logs_pass_values_as_positional_arguments_only():
    run = Runner({"-c": (0, "INFO a\nTraceback b\n", "")})
    text = dc.DockerCLI(run, "docker").merged_logs("rank'; rm -rf /", tail=50)
    assert text == "INFO a\nTraceback b\n"
    assert run.calls == [["sh", "-c", dc.MERGED_LOGS_SCRIPT, "docker", "--tail", "50", "rank'; rm -rf /"]]


def _rank(state, want="0f1e2d", drift=None):
    info = parse_inspect(captured(state))
    return {"running": info["running"], "spec_hash": info["spec_hash"], "want_hash": want, "fix_drift": drift or []}


def test_group_keeps_running_ranks_with_the_wanted_spec():
    d = group_restart({"spark-sim-0": _rank("running"), "spark-sim-1": _rank("running")})
    assert d == {"restart": False, "down": [], "stale": [], "fix_stale": []}


def test_one_exited_rank_restarts_the_group():
    d = group_restart({"spark-sim-0": _rank("running"), "spark-sim-1": _rank("exited")}, restart_on_change=False)
    assert d["restart"] is True and d["down"] == ["spark-sim-1"] and d["stale"] == []


def test_changed_spec_restarts_only_with_restart_on_change():
    ranks = {"spark-sim-0": _rank("running", want="aa11"), "spark-sim-1": _rank("running", want="aa11")}
    assert group_restart(ranks)["stale"] == ["spark-sim-0", "spark-sim-1"]
    assert group_restart(ranks)["restart"] is True
    assert group_restart(ranks, restart_on_change=False)["restart"] is False


def test_fix_drift_and_force():
    ranks = {"a": _rank("running"), "b": _rank("running", drift=["b: /x differs"])}
    assert group_restart(ranks)["fix_stale"] == ["b"] and group_restart(ranks)["restart"] is True
    assert group_restart({"a": _rank("running")}, force=True)["restart"] is True
