"""module_utils/rank_node.py: one node's steps of the group lifecycle, over a fake docker CLI that creates what its
`docker run` argv says (as docker does), the captured inspect of the demo fleet's worker, and fake /proc files."""
import copy
import json
import os
import shutil
import socket

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import rank_node as R
from ansible_collections.dgxspark.vllm.plugins.module_utils import sysctl_state

from tests.unit.conftest import read_fixture

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
LAUNCH = os.path.join(ROOT, "tests", "fixtures", "watchdog", "launch")
MEMINFO = "MemTotal:       126918368 kB\nMemAvailable:   %d kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"


def _fixture(name):
    with open(os.path.join(LAUNCH, name)) as f:
        return json.load(f)


def _doctor(name, host):
    with open(os.path.join(ROOT, "tests", "fixtures", "doctor", "sim", name + ".json")) as f:
        return json.load(f)["hosts"][host]["evidence"]


class Clock(object):
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class Docker(object):
    """The docker CLI's surface DockerRank uses. `run` records a container from its argv (Cmd after the image, -e,
    -v, --restart) on top of the captured worker's inspect; `tamper` alters what docker created, as a daemon default,
    a wrapper or an edit would."""

    def __init__(self, log_text="INFO distributed_init_method=tcp://198.18.11.10:29501\n"):
        self.containers, self.calls, self.log_text = {}, [], log_text
        self.images = {"tiny/vllm:sim"}
        self.tamper = None
        self.exit_after_run = None

    def raw(self, name, running=True, exit_code=0):
        data = copy.deepcopy(_fixture("inspect-worker.json"))
        data[0]["Name"] = "/" + name
        data[0]["State"].update(Status="running" if running else "exited", Running=running, ExitCode=exit_code)
        return data

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sh":  # save logs: sh -c '...' docker name path
            name, path = argv[4], argv[5]
            if name not in self.containers:
                return 1, "", "No such container"
            with open(path, "w") as f:
                f.write(self.log_text)
            return 0, "", ""
        if argv[0] == "sync":
            return 0, "", ""
        if argv[0] == "ss":
            return 0, "", ""
        cmd = argv[1]
        if cmd == "image":
            return (0, "sha256:1\n", "") if argv[-1] in self.images else (1, "", "No such image")
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
            return self._run(argv)
        raise AssertionError("unexpected call %r" % argv)

    def _run(self, argv):
        name = argv[argv.index("--name") + 1]
        data = self.raw(name, running=self.exit_after_run is None, exit_code=self.exit_after_run or 0)
        c = data[0]
        i, env, mounts, labels, image_at = 2, [], [], {}, None
        while i < len(argv):
            a = argv[i]
            if a in ("-e", "-v", "--label", "--restart", "--name", "--network", "--ipc", "--shm-size", "--entrypoint",
                     "--ulimit", "--gpus", "--runtime", "--privileged=false", "--memory", "--pids-limit"):
                val = argv[i + 1] if i + 1 < len(argv) else ""
                if a == "-e":
                    env.append(val)
                elif a == "-v":
                    src, dst, mode = (val.split(":") + ["rw"])[:3]
                    mounts.append({"Type": "bind", "Source": src, "Destination": dst, "Mode": mode, "RW": mode != "ro"})
                elif a == "--label":
                    k, _s, v = val.partition("=")
                    labels[k] = v
                elif a == "--restart":
                    c["HostConfig"]["RestartPolicy"]["Name"] = val
                i += 2
                continue
            if a.startswith("-"):
                i += 1
                continue
            image_at = i
            break
        c["Config"].update(Image=argv[image_at], Cmd=argv[image_at + 1:], Env=env + ["PATH=/usr/bin"], Labels=labels)
        c["Mounts"] = mounts
        if self.tamper:
            self.tamper(c)
        self.containers[name] = data
        return 0, "0afbfddf9ffb0000\n", ""


def _spec():
    return _fixture("rank-worker.json")


def _node(tmp_path, docker, clock=None, avail_kib=110 * 1048576, procs=None, settle=None, writes=None, **cfg):
    clock = clock or Clock()
    files = {"/proc/meminfo": MEMINFO % avail_kib, "/proc/swaps": "Filename Type Size Used Priority\n"}
    files.update(cfg.pop("files", {}))

    def reader(path):
        if path in files:
            return files[path] if not callable(files[path]) else files[path]()
        with open(path) as f:
            return f.read()

    def writer(path, text):
        (writes if writes is not None else []).append((path, text))

    base = {"host": "spark-sim-1", "container": "vllm_rank", "docker": "docker", "log_dir": str(tmp_path),
            "rank_spec_file": str(tmp_path / "rank.json"), "settle": settle or {}}
    base.update(cfg)
    return R.Node(base, docker, clock=clock, sleep=clock.sleep, reader=reader, writer=writer,
                  processes=procs or (lambda: []), stamp="20261204T000000Z")


# --- start: run, wait, verify ---------------------------------------------------------------------------------

def test_start_verifies_what_docker_created_against_the_rendered_spec(tmp_path):
    docker = Docker()
    res = _node(tmp_path, docker).start(_spec()["spec"], "distributed_init_method=tcp://", 900)
    assert (res["ok"], res["outcome"], res["id"]) == (True, "ready", "0afbfddf9ffb"), res
    # the captured worker's own inspect agrees with its rendered spec: env and mounts included
    want = R.rendered_launch(_spec()["spec"])
    assert want["restart"] == "no" and want["env"]["NCCL_IB_HCA"] == "rocep1s0f1"
    assert {m["container"]: m["mode"] for m in want["mounts"]}["/models/tiny-glm"] == "ro"
    from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import launch_errors
    assert launch_errors("spark-sim-1", "vllm_rank", want, _fixture("inspect-worker.json")[0]) == []


@pytest.mark.parametrize("tamper,expect", [
    (lambda c: c["State"].update(Status="restarting", Restarting=True), "state is 'restarting'"),
    (lambda c: c["HostConfig"]["RestartPolicy"].update(Name="always"), "restart policy is 'always', rendered 'no'"),
    (lambda c: c["Config"]["Env"].__setitem__(0, "GLOO_SOCKET_IFNAME=eth0"),
     "env GLOO_SOCKET_IFNAME is 'eth0', rendered 'enp1s0f1np1'"),
    (lambda c: c["Config"].update(Env=[e for e in c["Config"]["Env"] if not e.startswith("NCCL_IB_HCA=")]),
     "env NCCL_IB_HCA is '<unset>', rendered 'rocep1s0f1'"),
    (lambda c: c["Mounts"].pop(0), "mount /models/tiny-glm is missing, rendered /var/tmp/models/tiny-glm:/models/tiny-glm:ro"),
    (lambda c: c["Mounts"][0].update(RW=True), "mount /models/tiny-glm is /var/tmp/models/tiny-glm (rw), rendered"),
    (lambda c: c["Config"]["Cmd"].append("--enforce-eager"), "argv has"),
])
def test_a_launch_that_differs_fails_naming_host_item_both_values_and_the_fix(tmp_path, tamper, expect):
    docker = Docker()
    docker.tamper = tamper
    res = _node(tmp_path, docker).start(_spec()["spec"], "distributed_init_method=tcp://", 900)
    assert (res["ok"], res["outcome"]) == (False, "launch_differs")
    assert len(res["errors"]) == 1, res["errors"]
    assert res["errors"][0].startswith("spark-sim-1: rank container vllm_rank: ")
    assert expect in res["errors"][0]
    assert "Fix: re-run site.yml" in res["errors"][0]


def test_a_container_left_created_is_no_start(tmp_path):
    docker = Docker()
    docker.tamper = lambda c: c["State"].update(Status="created", Running=False)
    res = _node(tmp_path, docker).start(_spec()["spec"], "distributed_init_method=tcp://", 900)
    assert (res["ok"], res["outcome"]) == (False, "exited")
    assert res["msg"].startswith("spark-sim-1: rank vllm_rank: the container exited (status created, exit code 0)")


def test_a_json_flag_spelt_otherwise_is_as_rendered_but_another_value_is_not(tmp_path):
    spec = copy.deepcopy(_spec()["spec"])
    spec["command"] += ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']
    docker = Docker()
    docker.tamper = lambda c: c["Config"]["Cmd"].__setitem__(-1, '{"num_speculative_tokens": 2, "method": "mtp"}')
    assert _node(tmp_path, docker).start(spec, "", 10)["ok"] is True
    docker.tamper = lambda c: c["Config"]["Cmd"].__setitem__(-1, '{"num_speculative_tokens": 3, "method": "mtp"}')
    res = _node(tmp_path, docker).start(spec, "", 10)
    assert res["outcome"] == "launch_differs"
    assert "the engine's command differs from the rendered one: argv[%d] is '{\"num_speculative_tokens\": 3" % (
        len(spec["command"]) - 1) in res["msg"]


def test_a_start_that_exits_names_the_catalogue_cause_and_is_no_launch_check(tmp_path):
    ev = _doctor("worker_killed", "spark-tp3-2")
    docker = Docker(log_text=ev["logs"])
    docker.exit_after_run = 137
    res = _node(tmp_path, docker).start(_spec()["spec"], "distributed_init_method=tcp://", 900)
    assert (res["ok"], res["outcome"]) == (False, "exited")
    assert res["msg"].startswith("spark-sim-1: rank vllm_rank: the container exited (status exited, exit code 137)")
    assert res["diagnosis"].endswith("catalogue: rank_killed")


def test_a_leftover_container_is_logged_then_replaced(tmp_path):
    docker = Docker()
    docker.containers["vllm_rank"] = docker.raw("vllm_rank", running=False, exit_code=1)
    assert _node(tmp_path, docker).start(_spec()["spec"], "", 10)["ok"] is True
    verbs = [c[1] if c[0] == "docker" else c[0] for c in docker.calls]
    assert verbs[:4] == ["inspect", "sh", "rm", "run"]
    assert (tmp_path / "vllm_rank-20261204T000000Z.log").exists()


def test_a_start_that_never_logs_its_line_times_out(tmp_path):
    docker = Docker(log_text="INFO loading\n")
    clock = Clock()
    res = _node(tmp_path, docker, clock=clock).start(_spec()["spec"], "distributed_init_method=tcp://", 30)
    assert (res["ok"], res["outcome"]) == (False, "timeout")
    assert "no line matching 'distributed_init_method=tcp://' within 30 s" in res["msg"]
    assert clock.t >= 1030.0


# --- stop: log first, cause named, deaths counted ----------------------------------------------------------------

def test_stop_of_a_killed_rank_saves_the_log_names_the_cause_and_counts_a_death(tmp_path):
    ev = _doctor("worker_killed", "spark-tp3-2")
    docker = Docker(log_text=ev["logs"])
    docker.containers["vllm_rank"] = docker.raw("vllm_rank", running=False, exit_code=137)
    node = _node(tmp_path, docker)
    res = node.stop(count=True)
    assert (res["ok"], res["removed"], res["running"], res["exit_code"], res["deaths"]) == (True, True, False, 137, 1)
    assert res["diagnosis"].startswith("The rank container ended with SIGKILL")
    assert res["log_path"] == str(tmp_path / "vllm_rank-20261204T000000Z.log")
    assert open(res["log_path"]).read() == ev["logs"]
    # the log is saved before the removal
    verbs = [c[1] if c[0] == "docker" else c[0] for c in docker.calls]
    assert verbs.index("sh") < verbs.index("rm")
    assert (tmp_path / "vllm_rank.deaths").read_text() == "1\n"
    # found running next time: the streak ends
    docker.containers["vllm_rank"] = docker.raw("vllm_rank")
    assert node.stop(count=True)["deaths"] == 0


def test_stop_without_a_container_changes_nothing_and_keeps_the_count(tmp_path):
    (tmp_path / "vllm_rank.deaths").write_text("2\n")
    res = _node(tmp_path, Docker()).stop(count=True)
    assert (res["ok"], res["changed"], res["log_path"], res["deaths"], res["running"]) == (True, False, None, 2, None)
    assert _node(tmp_path, Docker()).stop(count=True, reset_deaths=True)["deaths"] == 0


def test_logs_only_keeps_the_container(tmp_path):
    docker = Docker()
    docker.containers["vllm_rank"] = docker.raw("vllm_rank")
    res = _node(tmp_path, docker).stop(remove=False)
    assert (res["removed"], res["running"], res["diagnosis"]) == (False, True, "")
    assert "vllm_rank" in docker.containers


# --- settle: ritual, gate, port guard ------------------------------------------------------------------------------

def test_settle_runs_the_ritual_then_passes_at_the_floor(tmp_path):
    writes = []
    docker = Docker()
    res = _node(tmp_path, docker, writes=writes, settle={"min_available_gib": 100, "timeout_s": 60}).settle()
    assert (res["ok"], res["outcome"], res["mem_available_gib"]) == (True, "settled", 110.0)
    assert writes == [("/proc/sys/vm/drop_caches", "3"), ("/proc/sys/vm/compact_memory", "1")]
    assert ["sync"] in docker.calls


def test_settle_waits_for_the_memory_to_come_back(tmp_path):
    clock = Clock()
    readings = iter([60, 80, 104, 104])
    node = _node(tmp_path, Docker(), clock=clock, settle={"min_available_gib": 100, "timeout_s": 60, "delay_s": 5},
                 files={"/proc/meminfo": lambda: MEMINFO % (next(readings) * 1048576)})
    res = node.settle()
    assert res["ok"] is True and res["mem_available_gib"] == 104.0
    assert clock.t == 1010.0


def test_settle_that_never_reaches_the_floor_names_the_node_the_figures_and_the_fix(tmp_path):
    clock = Clock()
    node = _node(tmp_path, Docker(), clock=clock, avail_kib=int(3.1 * 1048576),
                 settle={"min_available_gib": 100000, "timeout_s": 2, "delay_s": 1})
    res = node.settle()
    assert (res["ok"], res["outcome"]) == (False, "not_settled")
    assert res["msg"].startswith("spark-sim-1: MemAvailable stayed at 3.10 GiB, below "
                                 "node_prep_settle_min_available_gib 100000 GiB after 2 s")
    assert "Fix: stop what still holds memory on this node" in res["msg"]


def test_settle_waits_for_the_old_groups_engine_processes(tmp_path):
    clock = Clock()
    left = [{"pid": 4301, "name": "VLLM::Worker_TP1", "gib": 0.52}]
    node = _node(tmp_path, Docker(), clock=clock, procs=lambda: left if clock.t < 1006 else [],
                 settle={"timeout_s": 60, "delay_s": 2})
    assert node.settle()["ok"] is True and clock.t == 1006.0


def test_settle_names_every_holder_and_frees_them_never_a_lower_utilization(tmp_path):
    """The leftover capture (ps listing laid out as /proc, processes.py's reader): the EngineCore and Worker_TP1 are
    named with PID and GiB, the tail, exporter, grep and agent beside them are not; MemAvailable stayed low."""
    from tests.unit.captures import proc_tree_from_ps
    proc_tree_from_ps(read_fixture("node", "ps-leftover-engine-after-relaunch.txt"), tmp_path / "proc")
    held = R.engine_processes(str(tmp_path / "proc"), me=-1)
    res = _node(tmp_path, Docker(), clock=Clock(), procs=lambda: held, avail_kib=int(58.4 * 1048576),
                settle={"timeout_s": 4, "delay_s": 2, "min_available_gib": 100}).settle()
    assert (res["ok"], res["outcome"]) == (False, "engine_memory_held")
    assert res["msg"] == (
        "spark-sim-1: 2 engine process(es) of the old group still run after 4 s and hold memory: VLLM::EngineCore pid "
        "4242 (0.94 GiB), VLLM::Worker_TP1 pid 4301 (0.52 GiB); MemAvailable stayed at 58.40 GiB, below "
        "node_prep_settle_min_available_gib 100 GiB (docs/node-prep.md settle gate; catalogue engine_memory_held). "
        "Fix: stop them (kill 4242 4301; kill -9 if they do not exit), or reboot the node when they do not go, then "
        "re-run.")
    assert "utilization" not in res["msg"] and "tail" not in res["msg"] and "exporter" not in res["msg"]
    # memory back above the floor but the engine still there: named all the same, no MemAvailable clause
    res = _node(tmp_path, Docker(), clock=Clock(), procs=lambda: held[:1],
                settle={"timeout_s": 2, "delay_s": 1, "min_available_gib": None}).settle()
    assert res["outcome"] == "engine_memory_held"
    assert "1 engine process(es) of the old group still run after 2 s and hold memory: VLLM::EngineCore pid 4242 " \
        "(0.94 GiB) (docs" in res["msg"]


def test_settle_does_not_wait_for_helpers_that_mention_the_rank(tmp_path):
    """The serving capture with the rank gone: only its helpers are left (tail -F of the rank log, an exporter named
    vllm-exporter, journalctl --grep VLLM::Worker_TP0); the gate passes at once instead of waiting its timeout."""
    from tests.unit.captures import proc_tree_from_ps
    text = read_fixture("node", "ps-serving-rank-with-helpers.txt")
    helpers = "\n".join(l for l in text.splitlines() if not any(w in l for w in (" 3001 ", " 3190 ", " 3210 ")))
    proc_tree_from_ps(helpers, tmp_path / "proc")
    clock = Clock()
    res = _node(tmp_path, Docker(), clock=clock, procs=lambda: R.engine_processes(str(tmp_path / "proc"), me=-1),
                settle={"timeout_s": 60, "delay_s": 2}).settle()
    assert res["ok"] is True and clock.t == 1000.0


def test_settle_refuses_a_swap_cycle_that_cannot_fit(tmp_path):
    meminfo = "MemAvailable: 1000 kB\nSwapTotal: 8000 kB\nSwapFree: 2000 kB\n"
    docker = Docker()
    res = _node(tmp_path, docker, settle={"swap_cycle": True}, files={"/proc/meminfo": meminfo}).settle()
    assert (res["ok"], res["outcome"]) == (False, "swap_refused")
    assert res["msg"].startswith("spark-sim-1: cannot cycle swap before launch: 6000 kB swapped out but only 1000 kB")
    assert ["swapoff", "-a"] not in docker.calls


def test_settle_off_touches_no_sysctl_and_waits_for_nothing(tmp_path):
    writes, docker = [], Docker()
    off = {"sync": False, "drop_caches": False, "compact": False, "min_available_gib": None, "engine_processes": False}
    res = _node(tmp_path, docker, writes=writes, settle=off, procs=lambda: [{"pid": 1, "cmd": "vllm serve"}]).settle()
    assert res["ok"] is True and writes == [] and ["sync"] not in docker.calls


def test_settle_on_the_head_refuses_a_taken_port_before_any_start(tmp_path):
    """A real listener: the same ss argv vllm_ranks used (docker_rank.listen_argv)."""
    import subprocess
    if not shutil.which("ss"):
        pytest.skip("iproute2 ss is not installed on this machine")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]

    def run(argv):
        if argv[0] == "ss":
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
            return p.returncode, p.stdout, p.stderr
        return 0, "", ""
    try:
        node = _node(tmp_path, run)
        res = node.settle({"api_port": port, "master_port": 1})
        assert (res["ok"], res["outcome"]) == (False, "port_taken"), res
        assert res["msg"].startswith("spark-sim-1: TCP port %d (lane serve.api_port) is in use" % port)
        assert "port 1 " not in res["msg"]
        assert node.settle({})["ok"] is True  # a worker names no port
    finally:
        s.close()
    assert node.settle({"api_port": port})["ok"] is True


# --- ready --------------------------------------------------------------------------------------------------------

def test_ready_names_a_missing_image_and_missing_mounted_files(tmp_path):
    spec = copy.deepcopy(_spec()["spec"])
    res = _node(tmp_path, Docker()).ready(spec=spec)
    bad = dict((c["check"], c["msg"]) for c in res["checks"] if not c["ok"])
    assert res["ok"] is False
    assert bad["image"] == "image %s missing" % spec["image"]
    assert bad["files"].startswith("missing: /var/tmp/models/tiny-glm")
    for m in spec["mounts"]:
        m["host"] = str(tmp_path)
    docker = Docker()
    docker.images.add(spec["image"])
    assert _node(tmp_path, docker).ready(spec=spec)["ok"] is True


def test_ready_reads_the_rank_spec_file_and_names_it_when_missing(tmp_path):
    res = _node(tmp_path, Docker()).ready()
    assert res["ok"] is False and res["checks"][0]["check"] == "rank_spec"
    assert res["msg"].startswith("rank_spec: %s: " % (tmp_path / "rank.json"))


def test_ready_judges_swappiness_with_node_preps_check(tmp_path):
    """node_prep's sysctl_state.sysctl_holds on a node laid out from the grep capture: a later vendor file that
    overrides node_prep's is named, not just the kernel value."""
    from tests.unit.plugins.module_utils.test_sysctl_state import OURS, _node as sysctl_node
    root = sysctl_node(tmp_path / "bad", kernel="60")

    def holds(*a):
        return sysctl_state.sysctl_holds(*a, root=root)
    node = _node(tmp_path, Docker(), host="spark-a", ready={"swappiness": 0, "sysctl_file": OURS})
    swp = [c for c in node.ready(sysctl_holds=holds)["checks"] if c["check"] == "swappiness"]
    assert len(swp) == 1 and swp[0]["ok"] is False
    assert swp[0]["msg"].startswith(
        "spark-a: /usr/lib/sysctl.d/99-zzz-vendor-tuning.conf sets vm.swappiness = 10 after %s (vm.swappiness = 0)" % OURS)


def test_ready_checks_the_fabric_mtu(tmp_path):
    node = _node(tmp_path, Docker(), ready={"mtu": {"enp1s0f1np1": 9000}},
                 files={"/sys/class/net/enp1s0f1np1/mtu": "1500\n"})
    mtu = [c for c in node.ready()["checks"] if c["check"] == "mtu"]
    assert mtu == [{"check": "mtu", "ok": False, "msg": "enp1s0f1np1 MTU 1500 (needs 9000)"}]


# --- engine processes ---------------------------------------------------------------------------------------------

def test_engine_processes_reads_a_proc_tree(tmp_path):
    for pid, comm, cmd in ((10, "vllm", b"/usr/bin/python3\0/usr/local/bin/vllm\0serve\0/models/m"),
                           (11, "sshd", b"/usr/sbin/sshd\0-D"), (12, "VLLM::EngineCor", b"VLLM::EngineCore"),
                           (13, "dgxspark-vllm-a", b"python3\0/usr/local/sbin/dgxspark-vllm-agent\0status"),
                           (14, "tail", b"tail\0-F\0/var/log/dgxspark-vllm/vllm-rank0.log")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(cmd)
    (tmp_path / "self").mkdir()
    got = [(p["pid"], p["name"]) for p in R.engine_processes(str(tmp_path), me=1)]
    assert got == [(10, "vllm"), (12, "VLLM::EngineCore")]


def test_boot_progress_reads_the_end_of_the_log_for_the_shard_count(tmp_path):
    docker = Docker()
    docker.log_text = ("INFO Starting to load model /models/glm\n"
                       "Loading safetensors checkpoint shards:   0% Completed | 0/7 [00:00<?, ?it/s]\r"
                       "Loading safetensors checkpoint shards:  57% Completed | 4/7 [01:02<00:47, 15.9s/it]")
    assert _node(tmp_path, docker).boot_progress() == {"phase": "loading", "shards_loaded": 4, "shards_total": 7}
    assert docker.calls[-1] == ["docker", "logs", "--tail", "400", "vllm_rank"]
    docker.log_text = "INFO Starting to load model /models/glm\n"
    assert _node(tmp_path, docker).boot_progress(tail=50)["shards_loaded"] is None
    assert docker.calls[-1][2:4] == ["--tail", "50"]


def test_boot_progress_past_loading_is_kept_per_container_start_and_not_read_again(tmp_path):
    docker = Docker()
    memo = str(tmp_path / "boot.json")
    writes = []

    def kept():  # the node's file as its writer left it
        texts = [t for p, t in writes if p == memo]
        if not texts:
            raise IOError("no such file")
        return texts[-1]
    node = _node(tmp_path, docker, writes=writes, files={memo: kept})
    loading = ("INFO Starting to load model /models/glm\n"
               "Loading safetensors checkpoint shards:  57% Completed | 4/7 [01:02<00:47, 15.9s/it]\n")
    docker.log_text = loading
    assert node.boot_progress(started_at="t1", memo=memo)["phase"] == "loading"
    assert writes == []  # still loading: the next status reads the log again

    def reads():
        return len([c for c in docker.calls if c[1:2] == ["logs"]])
    before = reads()
    docker.log_text = loading + "INFO Loading weights took 91.20 seconds\n"
    done = node.boot_progress(started_at="t1", memo=memo)
    assert done == {"phase": "weights_loaded", "shards_loaded": 4, "shards_total": 7} and reads() == before + 1
    docker.log_text = "INFO 127.0.0.1 - POST /v1/chat/completions 200\n" * 3  # the tail now holds requests only
    assert node.boot_progress(started_at="t1", memo=memo) == done and reads() == before + 1
    # a new start of the container (another StartedAt) is read from its log
    docker.log_text = loading
    assert node.boot_progress(started_at="t2", memo=memo)["phase"] == "loading" and reads() == before + 2
    # a damaged memo, or none asked for, reads the log
    writes.append((memo, "{not json"))
    assert node.boot_progress(started_at="t2", memo=memo)["phase"] == "loading" and reads() == before + 3
    assert node.boot_progress()["phase"] == "loading" and reads() == before + 4
