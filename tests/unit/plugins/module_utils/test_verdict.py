"""plugins/module_utils/verdict.py: the group classifier shared by vllm_health and the watchdog.

Inputs are real captures: tests/fixtures/health/sim-cpu (the simulated fleet's /metrics after a bench),
tests/fixtures/sim/nvidia-smi (GB10 table), tests/fixtures/watchdog (/metrics pairs and nvidia-smi
samples captured on the fault fleet while serving, idle and with one rank SIGSTOPped).
"""
import datetime
import json
import os

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V
from tests.unit.conftest import FIXTURES, read_fixture

W = "watchdog"


def counters(*parts):
    return V.serving_counters(V.parse_metrics(read_fixture(*parts)))


def _scrape(running, waiting, gen):
    text = ('vllm:num_requests_running{engine="0",model_name="m"} %s\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} %s\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} %s\n' % (running, waiting, gen))
    return V.serving_counters(V.parse_metrics(text))


GROUP = [{"rank": 0, "host": "spark-flt-0", "running": True}, {"rank": 1, "host": "spark-flt-1", "running": True}]


# ---- wedge check (moved from health.py; vllm_health calls it through verdict) ----------------

def test_wedge_stalled_when_busy_and_no_tokens():
    v = V.wedge_verdict(_scrape(1, 2, 5120), _scrape(1, 2, 5120), 10)
    assert v["stalled"] is True and v["busy"] == 3 and v["generated"] == 0
    assert "1 running, 2 waiting, generation tokens unchanged at 5120 over 10 s" in v["msg"]


def test_wedge_idle_or_progressing_is_not_stalled():
    assert V.wedge_verdict(_scrape(0, 0, 5120), _scrape(0, 0, 5120), 10)["stalled"] is False
    v = V.wedge_verdict(_scrape(2, 0, 5120), _scrape(2, 0, 5388), 10)
    assert v["stalled"] is False and v["generated"] == 268


def test_wedge_without_counter_is_unknown():
    assert V.wedge_verdict({}, {}, 5)["stalled"] is None


def test_the_wedge_check_lives_here_only():
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health
    assert V.parse_metrics is health.parse_metrics  # one parser (vllm_bench imports health.py alone)
    assert not any(hasattr(health, n) for n in ("wedge_verdict", "serving_counters"))


# ---- nvidia-smi samples ------------------------------------------------------------------------

def test_gb10_table_capture_is_idle_low_power():
    s = V.parse_gpu_query(read_fixture("sim", "nvidia-smi", "gb10-table-excerpt.txt"))
    assert s == {"utilization_pct": 0.0, "power_w": 4.0, "clocks_sm_mhz": None}
    assert V.gpu_state(s) == "low"


def test_gb10_memory_query_has_no_power():
    s = V.parse_gpu_query(read_fixture("sim", "nvidia-smi", "gb10-query-memory-used-total.csv"))
    assert s["utilization_pct"] is None and s["power_w"] is None
    assert V.gpu_state(s) == "unknown"


@pytest.mark.parametrize("name,expected", [
    ("gpu-idle.csv", (0.0, 4.0, 208.0, "low")),
    ("gpu-spinning.csv", (96.0, 12.4, 2405.0, "spinning")),
    ("gpu-computing.csv", (96.0, 61.2, 2405.0, "computing")),
])
def test_stand_in_query_samples(name, expected):
    s = V.parse_gpu_query(read_fixture(W, "nvidia-smi", name))
    assert (s["utilization_pct"], s["power_w"], s["clocks_sm_mhz"], V.gpu_state(s)) == expected


def test_power_floor_and_busy_threshold_are_parameters():
    s = {"utilization_pct": 96.0, "power_w": 22.0}
    assert V.gpu_state(s) == "spinning"
    assert V.gpu_state(s, power_floor_w=20.0) == "computing"
    assert V.gpu_state(s, busy_util_pct=97.0) == "low"


def test_gpu_readings_become_one_series_per_node_in_base_units():
    gpus = {"spark-b": V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-spinning.csv")),
            "spark-a": V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-computing.csv")),
            # a build that gives [N/A] for the SM clock: no clock series for it, never a 0
            "spark-c": V.parse_gpu_query("0, 4.00, [N/A]\n"),
            "spark-d": None}  # a node whose agent gave no reading
    lines = V.gpu_metric_lines(gpus)
    samples = [line for line in lines if not line.startswith("#")]
    assert samples == [
        'dgxspark_vllm_gpu_utilization_ratio{host="spark-a"} 0.96',
        'dgxspark_vllm_gpu_utilization_ratio{host="spark-b"} 0.96',
        'dgxspark_vllm_gpu_utilization_ratio{host="spark-c"} 0.0',
        'dgxspark_vllm_gpu_power_watts{host="spark-a"} 61.2',
        'dgxspark_vllm_gpu_power_watts{host="spark-b"} 12.4',
        'dgxspark_vllm_gpu_power_watts{host="spark-c"} 4.0',
        'dgxspark_vllm_gpu_sm_clock_hertz{host="spark-a"} 2405000000.0',
        'dgxspark_vllm_gpu_sm_clock_hertz{host="spark-b"} 2405000000.0']
    assert "# TYPE dgxspark_vllm_gpu_power_watts gauge" in lines
    assert V.gpu_metric_lines({}) == [] and V.gpu_metric_lines(None) == []


def test_a_node_name_is_escaped_for_the_exposition_format():
    assert V.exposition_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    line = V.gpu_metric_lines({'we"ird\\': {"power_w": 5.0}})[-1]
    assert line == 'dgxspark_vllm_gpu_power_watts{host="we\\"ird\\\\"} 5.0'


# ---- group verdicts on captured pairs ----------------------------------------------------------

def _gpus(name):
    s = V.parse_gpu_query(read_fixture(W, "nvidia-smi", name))
    return {"spark-flt-0": s, "spark-flt-1": s}


def test_idle_pair():
    first, second = counters(W, "metrics", "idle-first.prom"), counters(W, "metrics", "idle-second.prom")
    v = V.classify(GROUP, True, first, second, 10, _gpus("gpu-idle.csv"))
    assert (v["verdict"], v["action"]) == ("idle", "none")


def test_progressing_pair():
    first, second = counters(W, "metrics", "progressing-first.prom"), counters(W, "metrics", "progressing-second.prom")
    v = V.classify(GROUP, True, first, second, 10, _gpus("gpu-idle.csv"))
    assert v["verdict"] == "progressing" and v["action"] == "none"
    assert v["wedge"]["generated"] == second["generation_tokens"] - first["generation_tokens"] > 0


def test_frozen_pair_at_low_power_is_wedged():
    first, second = counters(W, "metrics", "stalled-first.prom"), counters(W, "metrics", "stalled-second.prom")
    assert first["generation_tokens"] == second["generation_tokens"]
    v = V.classify(GROUP, True, first, second, 10, _gpus("gpu-spinning.csv"))
    assert (v["verdict"], v["action"]) == ("wedged", "restart_group")
    assert v["hosts"] == ["spark-flt-0", "spark-flt-1"]
    assert "spark-flt-0 spinning" in v["cause"]


def test_same_frozen_pair_at_normal_power_is_long_prefill():
    first, second = counters(W, "metrics", "stalled-first.prom"), counters(W, "metrics", "stalled-second.prom")
    gpus = _gpus("gpu-spinning.csv")
    gpus["spark-flt-1"] = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-computing.csv"))
    v = V.classify(GROUP, True, first, second, 10, gpus)
    assert (v["verdict"], v["action"]) == ("long_prefill", "none")
    assert "spark-flt-1" in v["cause"]


def test_sim_bench_capture_is_idle_against_itself():
    c = counters("health", "sim-cpu", "metrics-after-bench.prom")
    v = V.classify(GROUP, True, c, c, 30, {})
    assert v["verdict"] == "idle" and c["generation_tokens"] > 0


def test_head_down_and_rank_dead_come_before_metrics():
    down = [dict(GROUP[0], running=False), GROUP[1]]
    v = V.classify(down, False, None, None, 10)
    assert (v["verdict"], v["hosts"], v["action"]) == ("head_down", ["spark-flt-0"], "restart_group")
    dead = [GROUP[0], dict(GROUP[1], running=False)]
    v = V.classify(dead, True, None, None, 10)
    assert (v["verdict"], v["hosts"]) == ("rank_dead", ["spark-flt-1"])
    gone = [GROUP[0], dict(GROUP[1], running=None)]
    assert "node unreachable" in V.classify(gone, True, None, None, 10)["cause"]
    v = V.classify(GROUP, False, None, None, 10)
    assert v["verdict"] == "head_down" and "/health" in v["cause"]


def _worker_killed_finished_at():
    """FinishedAt of the worker SIGKILLed on the TP3 fleet (the doctor's capture, exit code 137)."""
    with open(os.path.join(FIXTURES, "doctor", "sim", "worker_killed.json")) as f:
        return json.load(f)["hosts"]["spark-tp3-2"]["evidence"]["container"]["finished_at"]


def test_docker_time_on_captured_stamps():
    stamp = _worker_killed_finished_at()
    assert stamp == "2026-12-01T13:53:13.590232445Z"
    want = (datetime.datetime(2026, 12, 1, 13, 53, 13, tzinfo=datetime.timezone.utc).timestamp() + 0.590232445)
    assert abs(V.docker_time_s(stamp) - want) < 1e-6
    # nanoseconds with trailing zeros trimmed (RFC 3339 as Docker prints it) and none at all
    assert V.docker_time_s("2026-12-01T13:53:15.2Z") - V.docker_time_s("2026-12-01T13:53:15Z") == pytest.approx(0.2)
    assert V.docker_time_s("0001-01-01T00:00:00Z") is None  # a running container's FinishedAt
    assert V.docker_time_s("") is None and V.docker_time_s(None) is None


def test_worker_that_stopped_before_the_head_is_the_cause():
    """SIGKILL of the worker takes the head's engine down within seconds: when the watchdog's next cycle finds both
    stopped, the rank that stopped first (FinishedAt) is named, not the head."""
    worker_end = V.docker_time_s(_worker_killed_finished_at())
    both = [dict(GROUP[0], running=False, finished_s=worker_end + 1.6),
            dict(GROUP[1], running=False, finished_s=worker_end)]
    v = V.classify(both, False, None, None, 10)
    assert (v["verdict"], v["hosts"], v["action"]) == ("rank_dead", ["spark-flt-1"], "restart_group")
    assert v["cause"] == ("rank 1 on spark-flt-1 is not running; the head's rank stopped after it (a tensor-parallel "
                          "group cannot lose a rank, catalogue worker_orphaned)")
    # the head stopped first, or a time is unknown: the head is named as before
    both[0]["finished_s"] = worker_end - 1.0
    assert V.classify(both, False, None, None, 10)["verdict"] == "head_down"
    both[0]["finished_s"] = None
    assert V.classify(both, False, None, None, 10)["hosts"] == ["spark-flt-0"]


def test_an_unreachable_worker_beside_a_stopped_head_is_the_cause():
    """Issue 28: a worker node powered off, the head's rank ended after it; the first cycle that sees both (no
    FinishedAt for a node that does not answer) names the worker, not the head."""
    head_end = V.docker_time_s(_worker_killed_finished_at())
    ranks = [dict(GROUP[0], running=False, finished_s=head_end), dict(GROUP[1], running=None, finished_s=None)]
    v = V.classify(ranks, False, None, None, 10)
    assert (v["verdict"], v["hosts"], v["action"]) == ("rank_dead", ["spark-flt-1"], "restart_group")
    assert v["cause"] == ("rank 1 on spark-flt-1 does not answer (node unreachable); the head's rank has stopped too "
                          "(a tensor-parallel group cannot lose a rank, catalogue worker_orphaned)")
    # a head whose own node does not answer is the head's fault, whatever the worker says
    ranks[0]["running"] = None
    assert V.classify(ranks, False, None, None, 10)["hosts"] == ["spark-flt-0"]


def test_no_metrics_pair_yet_is_unknown_no_action():
    v = V.classify(GROUP, True, None, None, 10)
    assert (v["verdict"], v["action"]) == ("unknown", "none")


# ---- loading livelock --------------------------------------------------------------------------

def test_loading_livelock_needs_frozen_shards_and_spin():
    spin = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-spinning.csv"))
    busy = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-computing.csv"))
    assert V.loading_livelock(48, 48, 120, spin)["livelock"] is True
    assert V.loading_livelock(48, 49, 120, spin)["livelock"] is False     # slow progress
    assert V.loading_livelock(48, 48, 120, busy)["livelock"] is False     # I/O stall at normal power


def _boot(log_text):
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H
    p = H.parse_phase(log_text)
    return {"phase": p["phase"], "shards_loaded": p["shards_loaded"]}


# a rank's log while its shard loader redraws its bar (tqdm, carriage returns), as `docker logs --tail` gives it
_LOADING = ("INFO 12-06 10:01:02 [gpu_model_runner.py:2338] Starting to load model /models/glm\n"
            "Loading safetensors checkpoint shards:   0% Completed | 0/120 [00:00<?, ?it/s]\r"
            "Loading safetensors checkpoint shards:  40% Completed | {}/120 [02:11<03:10, 2.1s/it]\n")


@pytest.mark.parametrize("hosts,window", [(["spark-a", "spark-b"], 300), (["n0", "n1", "n2", "n3"], 120)])
def test_livelock_watch_acts_on_frozen_shards_with_a_spinning_gpu_only(hosts, window):
    spin = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-spinning.csv"))
    busy = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-computing.csv"))
    stuck = hosts[-1]
    gpus = dict((h, busy) for h in hosts)
    gpus[stuck] = spin
    marks, t0 = {}, 1000.0
    # cycles 30 s apart: every host but the stuck one loads a shard per cycle
    for i in range(int(window / 30) + 2):
        now = t0 + 30 * i
        boots = dict((h, _boot(_LOADING.format(48 if h == stuck else 48 + i))) for h in hosts)
        marks, cause, bad = V.livelock_watch(marks, now, boots, gpus, window)
        if now - t0 < window:
            assert cause is None and bad == [], (i, cause)
        else:
            break
    assert bad == [stuck] and marks[stuck] == [t0, 48]
    assert cause.startswith("loading livelock on %s shard progress frozen at 48 for %d s while the GPU reads 96.0 %% "
                            "at 12.4 W" % (stuck, now - t0)) and "uvm_livelock" in cause
    # the same freeze at normal power (an I/O stall) and slow progress are left to the loading deadline
    gpus[stuck] = busy
    assert V.livelock_watch(marks, now, boots, gpus, window)[1] is None
    gpus[stuck] = spin
    boots[stuck] = _boot(_LOADING.format(49))
    marks2, cause, bad = V.livelock_watch(marks, now, boots, gpus, window)
    assert cause is None and marks2[stuck] == [now, 49]


def test_livelock_watch_stays_quiet_before_the_bar_after_the_load_and_when_off():
    spin = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-spinning.csv"))
    old = {"a": [0.0, 5]}
    # no progress bar yet (the JIT or the rendezvous), a finished load, an unreadable log, no GPU reading
    for boot in ({"phase": "starting", "shards_loaded": None}, _boot("INFO Starting to load model /m\n"),
                 _boot(_LOADING.format(5) + "INFO Loading weights took 310.2 seconds\nINFO Application startup complete.\n"),
                 {"phase": "unknown", "error": "DockerError"}):
        assert V.livelock_watch(old, 1000.0, {"a": boot}, {"a": spin}, 300)[1] is None, boot
    assert V.livelock_watch(old, 1000.0, {"a": _boot(_LOADING.format(5))}, {}, 300)[1] is None
    assert V.livelock_watch(old, 1000.0, {"a": _boot(_LOADING.format(5))}, {"a": spin}, 0)[1] is None
    assert V.livelock_watch(old, 1000.0, {"a": _boot(_LOADING.format(5))}, {"a": spin}, 300)[2] == ["a"]


# ---- order and strikes ------------------------------------------------------------------------

def test_group_order_tp3():
    o = V.group_order({"n2": 2, "n0": 0, "n1": 1})
    assert o == {"teardown": ["n0", "n1", "n2"], "start": ["n2", "n1", "n0"], "head": "n0"}
    with pytest.raises(ValueError):
        V.group_order({"a": 0, "b": 2})


def test_three_failed_restarts_give_up_success_clears():
    st, now = {}, 1000.0
    st, why = V.record_restart(st, now, False, 3)
    st, why = V.record_restart(st, now + 60, False, 3)
    assert st["strikes"] == 2 and why is None
    ok, why_ok = V.record_restart(st, now + 120, True, 3)
    assert ok["strikes"] == 0 and why_ok is None and ok["restarts_total"] == 3
    st, why = V.record_restart(st, now + 120, False, 3)
    assert st["strikes"] == 3 and "3 failed restarts in a row" in why


def test_restarts_within_window():
    times = [0.0, 100.0, 200.0]
    assert "3 restarts within 3600 s" in V.may_restart(times, 300.0, 3, 3600)
    assert V.may_restart(times, 3700.0, 3, 3600) is None


def test_module_imports_only_stdlib_health_and_diagnose():
    with open(os.path.join(FIXTURES, "..", "..", "plugins", "module_utils", "verdict.py")) as f:
        src = f.read()
    imports = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert imports == ["from __future__ import absolute_import, division, print_function", "import calendar",
                       "import re", "import time",
                       "from ansible_collections.dgxspark.vllm.plugins.module_utils.health import metric_sum, "
                       "parse_metrics  # noqa: F401 pylint: disable=unused-import",
                       # the catalogue gpu_low_power rule lives once, in diagnose.py (itself standard library only)
                       "from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import gpu_stuck_low_power"]


def test_livelock_watch_keeps_the_mark_of_a_host_without_a_reading():
    spin = V.parse_gpu_query(read_fixture(W, "nvidia-smi", "gpu-spinning.csv"))
    marks = {"h": [1000.0, 48]}
    # an agent that timed out (no boot), then a log that could not be read: the mark stands, the window goes on
    marks, cause, _bad = V.livelock_watch(marks, 1100.0, {}, {}, 300)
    assert marks == {"h": [1000.0, 48]} and cause is None
    marks, cause, _bad = V.livelock_watch(marks, 1200.0, {"h": {"phase": "unknown", "error": "DockerError"}}, {}, 300)
    assert marks == {"h": [1000.0, 48]} and cause is None
    marks, cause, bad = V.livelock_watch(marks, 1310.0, {"h": _boot(_LOADING.format(48))}, {"h": spin}, 300)
    assert bad == ["h"] and "frozen at 48 for 310 s" in cause
    # a host read past loading drops its mark
    past = {"h": {"phase": "api_up", "shards_loaded": 120}}
    marks, cause, _bad = V.livelock_watch({"h": [1000.0, 48]}, 1310.0, past, {"h": spin}, 300)
    assert marks == {} and cause is None
