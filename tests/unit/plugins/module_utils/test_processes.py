"""The one engine-process rule (module_utils/processes.py) on process listings laid out as /proc trees.

Captures: tests/fixtures/node/ps-leftover-engine-after-relaunch.txt (a worker whose relaunch failed: a leftover
EngineCore and Worker_TP1 among helpers that only mention vLLM or the rank), ps-serving-rank-with-helpers.txt (a
head serving: the engine belongs to the running rank), nvidia-smi-compute-apps-leftover.csv (what the driver
says the leftovers hold).
"""
import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import processes as P

from tests.unit.captures import proc_tree_from_ps
from tests.unit.conftest import read_fixture

LEFTOVER = read_fixture("node", "ps-leftover-engine-after-relaunch.txt")
SERVING = read_fixture("node", "ps-serving-rank-with-helpers.txt")
APPS = read_fixture("node", "nvidia-smi-compute-apps-leftover.csv")
RANK_ID = "3f2a9c0d81b4e6f7a5c2d9e0b1f4a7c8d3e6f9a2b5c8d1e4f7a0b3c6d9e2f5a8"


def _procs(tmp_path, text, cgroups=None):
    proc_tree_from_ps(text, tmp_path / "proc", cgroups)
    return P.read_processes(str(tmp_path / "proc"), me=-1)


def test_the_leftovers_are_named_with_pid_and_the_memory_the_driver_says_they_hold(tmp_path):
    procs = _procs(tmp_path, LEFTOVER)
    assert len(procs) == 10
    held = P.engine_processes(procs, P.parse_compute_apps(APPS))
    assert [(h["pid"], h["name"], h["rss_gib"], h["gpu_gib"], h["gib"]) for h in held] == [
        (4242, "VLLM::EngineCore", 0.94, 59.94, 59.94),
        (4301, "VLLM::Worker_TP1", 0.52, 0.5, 0.52)]
    assert P.describe(held) == "VLLM::EngineCore pid 4242 (59.94 GiB), VLLM::Worker_TP1 pid 4301 (0.52 GiB)"
    assert P.held_gib(held) == 60.46


def test_without_the_gpu_figures_the_resident_set_is_the_figure(tmp_path):
    held = P.engine_processes(_procs(tmp_path, LEFTOVER))
    assert P.describe(held) == "VLLM::EngineCore pid 4242 (0.94 GiB), VLLM::Worker_TP1 pid 4301 (0.52 GiB)"


def test_helpers_that_mention_vllm_or_the_rank_are_never_engines(tmp_path):
    """tail -F of the rank log, an exporter with --rank vllm_rank, grep VLLM::EngineCore, the project's agent, ps."""
    procs = _procs(tmp_path, LEFTOVER)
    held = set(h["pid"] for h in P.engine_processes(procs))
    helpers = dict((p["pid"], p["comm"]) for p in procs if p["pid"] not in held)
    assert helpers == {1: "systemd", 812: "systemd-journal", 1377: "dockerd", 2210: "tail", 2291: "python3",
                       5120: "grep", 5133: "dgxspark-vllm-a", 5140: "ps"}
    assert any("vllm_rank" in " ".join(p["argv"]) for p in procs if p["pid"] == 2210)
    assert any("VLLM::EngineCore" in " ".join(p["argv"]) for p in procs if p["pid"] == 5120)


def test_a_running_ranks_own_engine_is_not_a_leftover(tmp_path):
    scope = "0::/system.slice/docker-%s.scope" % RANK_ID
    procs = _procs(tmp_path, SERVING, cgroups={3001: scope, 3190: scope, 3210: scope})
    assert P.engine_processes(procs, own_container=RANK_ID[:12]) == []
    # the same processes once that rank is gone (or outside its container) are the holders, front end included
    held = P.engine_processes(procs)
    assert [(h["pid"], h["name"], h["gib"]) for h in held] == [
        (3001, "vllm", 0.77), (3190, "VLLM::EngineCore", 88.75), (3210, "VLLM::Worker_TP0", 88.5)]
    assert "vllm-exporter" not in P.describe(held) and "journalctl" not in P.describe(held)


@pytest.mark.parametrize("comm, argv, name", [
    ("VLLM::Worker_TP", ["VLLM::Worker_TP3"], "VLLM::Worker_TP3"),
    ("VLLM::Worker_PP", ["VLLM::Worker_PP0_TP1"], "VLLM::Worker_PP0_TP1"),
    ("VLLM::EngineCor", ["VLLM::EngineCore_DP0"], "VLLM::EngineCore_DP0"),
    ("VLLM::APIServer", ["VLLM::APIServer_0"], "VLLM::APIServer_0"),
    # setproctitle pads the old argv area: the title is the first word
    ("VLLM::EngineCor", ["VLLM::EngineCore                      "], "VLLM::EngineCore"),
    # a zombie or an unreadable cmdline: the kernel's 15-byte name is what there is
    ("VLLM::Worker_TP", [], "VLLM::Worker_TP"),
    ("vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "/models/m"], "vllm"),
])
def test_engine_names(comm, argv, name):
    assert P.engine_name(comm, argv) == name


@pytest.mark.parametrize("comm, argv", [
    ("tail", ["tail", "-F", "/var/log/dgxspark-vllm/vllm_rank-1.log"]),
    ("python3", ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]),  # no title yet: not by argv
    ("python3", ["python3", "VLLM::EngineCore"]),
    ("vllm-exporter", ["/usr/local/bin/vllm-exporter"]),
    ("vllm_bench.py", ["python3", "vllm_bench.py"]),
    ("VLLM::", ["VLLM::"]),
    ("VLLM-EngineCore", ["VLLM-EngineCore"]),
    ("docker", ["docker", "logs", "-f", "vllm_rank"]),
    ("bash", ["bash", "-c", "pgrep -f VLLM::Worker_TP0"]),
    ("dgxspark-vllm-a", ["/usr/bin/python3", "/usr/local/sbin/dgxspark-vllm-agent", "status"]),
    ("", []),
])
def test_near_misses_are_not_engines(comm, argv):
    assert P.engine_name(comm, argv) is None


def test_compute_apps_lines_it_cannot_read_are_skipped():
    assert P.parse_compute_apps(APPS) == {4242: 61383, 4301: 512}
    assert P.parse_compute_apps("No running processes found\n") == {}
    assert P.parse_compute_apps("4242, VLLM::EngineCore, [N/A]\n") == {}
    assert P.describe([{"pid": 7, "name": "vllm", "gib": None}]) == "vllm pid 7 (memory unknown)"


def test_a_process_that_ends_while_read_is_skipped(tmp_path):
    (tmp_path / "77").mkdir()  # no comm: gone between listdir and open
    (tmp_path / "self").mkdir()
    assert P.read_processes(str(tmp_path), me=-1) == []
    assert P.read_processes(str(tmp_path / "missing")) == []
