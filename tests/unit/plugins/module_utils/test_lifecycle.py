"""module_utils/lifecycle.py: the ordered restart over a fake node interface, and the pure decisions."""
import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle as L

GROUP = [{"host": "w2", "rank": 2}, {"host": "h", "rank": 0}, {"host": "w1", "rank": 1}]
TIMINGS = {"ready_s": 30.0, "gate_s": 100.0}


class Clock(object):
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class FakeNodes(L.Nodes):
    """Records every call; answers come from per-host overrides."""

    def __init__(self, clock, serving_after=3, **over):
        self.clock, self.calls, self.records, self.over = clock, [], [], over
        self.serving_after, self.serving_calls = serving_after, 0
        self.up = {}

    def _ans(self, verb, host, default):
        ans = self.over.get(verb, {}).get(host, default)
        return ans(self) if callable(ans) else ans

    def ready(self, host):
        self.calls.append(("ready", host))
        return self._ans("ready", host, {"ok": True, "msg": "rank_spec,image,files"})

    def stop(self, host, stamp):
        self.calls.append(("stop", host))
        self.up[host] = False
        return self._ans("stop", host, {"ok": True, "log_path": "/var/log/r-%s.log" % stamp, "running": True})

    def settle(self, host):
        self.calls.append(("settle", host))
        return self._ans("settle", host, {"ok": True})

    def start(self, host):
        self.calls.append(("start", host))
        self.up[host] = True
        return self._ans("start", host, {"ok": True, "outcome": "ready"})

    def running(self, host):
        return self._ans("running", host, {"ok": True, "container": {"running": self.up.get(host, False)}})

    def serving(self):
        self.serving_calls += 1
        return self.serving_calls >= self.serving_after, "canary"

    def loading(self, record):
        self.records.append(record)


def run(nodes, clock):
    lines = []
    res = L.restart(nodes, GROUP, "head_down: test", "20261204T000000Z", TIMINGS, lines.append, clock, clock.sleep)
    return res, lines


def test_order_head_stopped_first_workers_from_the_highest_rank_head_last():
    clock = Clock()
    nodes = FakeNodes(clock)
    res, lines = run(nodes, clock)
    assert res["ok"] is True and res["failure"] is None
    assert nodes.calls == [("ready", "h"), ("ready", "w1"), ("ready", "w2"),
                           ("stop", "h"), ("stop", "w1"), ("stop", "w2"),
                           ("settle", "h"), ("settle", "w1"), ("settle", "w2"),
                           ("start", "w2"), ("start", "w1"), ("start", "h")]
    assert res["steps"][-1] == ("health_gate", "h", True)
    assert res["evidence"] == ["h:/var/log/r-20261204T000000Z.log", "w1:/var/log/r-20261204T000000Z.log",
                               "w2:/var/log/r-20261204T000000Z.log"]
    # the log line gives the plan (lifecycle.plan, the steps vllm_ranks runs too)
    assert lines[0] == ("action=restart_group stamp=20261204T000000Z cause=head_down: test order=ready:h,ready:w1,"
                        "ready:w2,stop:h,stop:w1,stop:w2,streak:h,settle:h,settle:w1,settle:w2,start:w2,start:w1,"
                        "start:h,load:h")
    # the old load ends, the new one is recorded with the gate's deadline after the head's start, then served
    assert nodes.records[0] is None and nodes.records[-1] is None
    rec = nodes.records[1]
    assert (rec["deadline_s"], rec["deadline"] - rec["started"], rec["by"], rec["done"]) == (100.0, 100.0, "watchdog", None)


def test_a_failing_guard_starts_no_rank():
    clock = Clock()
    taken = {"ok": False, "outcome": "port_taken", "msg": "h: TCP port 8000 (lane serve.api_port) is in use"}
    nodes = FakeNodes(clock, settle={"h": taken})
    res, lines = run(nodes, clock)
    assert res["ok"] is False
    assert res["failure"] == "settled on h failed: h: TCP port 8000 (lane serve.api_port) is in use"
    assert not [c for c in nodes.calls if c[0] == "start"]
    assert ("settle", "w1") not in nodes.calls
    assert "step=settled host=h ok=False h: TCP port 8000" in lines[-1]


def test_a_node_that_never_settles_fails_before_any_start():
    clock = Clock()
    stuck = {"ok": False, "msg": "not settled after 360 s: MemAvailable 3.1 GiB (floor 100), 1 engine process(es) left"}
    nodes = FakeNodes(clock, settle={"w2": stuck})
    res, _lines = run(nodes, clock)
    assert res["failure"].startswith("settled on w2 failed: not settled after 360 s")
    assert [c for c in nodes.calls if c[0] == "start"] == []


def test_a_node_never_ready_is_waited_for_then_nothing_is_touched():
    clock = Clock()
    waited = []
    nodes = FakeNodes(clock, ready={"w1": {"ok": False, "error": "ssh: No route to host"}})
    res = L.restart(nodes, GROUP, "rank_dead", "S", TIMINGS, lambda m: None, clock, clock.sleep, waiting=waited.append)
    assert res["failure"] == "nodes not ready after 30.0 s: w1: ssh: No route to host"
    assert [c for c in nodes.calls if c[0] != "ready"] == []
    assert waited and waited[0] == ["w1: ssh: No route to host"]


def test_a_failed_worker_start_never_starts_the_head_and_names_the_cause():
    clock = Clock()
    bad = {"ok": False, "outcome": "exited", "diagnosis": "", "tail": ["vllm: error: unrecognized arguments: --x"]}
    nodes = FakeNodes(clock, start={"w1": bad})
    res, _lines = run(nodes, clock)
    assert [c[1] for c in nodes.calls if c[0] == "start"] == ["w2", "w1"]
    assert res["failure"] == "start on w1 failed: exited"
    assert res["diagnoses"] == ["w1: rank 1 did not come up (exited): no catalogue entry matches; last lines: "
                                "vllm: error: unrecognized arguments: --x"]


def test_the_diagnosis_names_the_outcome_when_the_start_carries_its_message():
    # what rank_node.start returns for a refused flag (its msg repeats host and container): the diagnosis line names
    # the outcome once, the failure keeps the message (the fault suite's give-up reads both)
    clock = Clock()
    bad = {"ok": False, "outcome": "exited", "diagnosis": "", "tail": ["vllm: error: unrecognized arguments: --x"],
           "msg": "w1: rank vllm_rank: the container exited (status exited, exit code 2) after docker run"}
    nodes = FakeNodes(clock, start={"w1": bad})
    res, _lines = run(nodes, clock)
    assert res["diagnoses"] == ["w1: rank 1 did not come up (exited): no catalogue entry matches; last lines: "
                                "vllm: error: unrecognized arguments: --x"]
    assert res["failure"] == "start on w1 failed: " + bad["msg"]


def test_a_rank_that_exits_during_the_load_fails_the_gate_at_once():
    clock = Clock()
    nodes = FakeNodes(clock, serving_after=10 ** 6)

    def w1_state(n):
        # running for the first 10 s of the load, then exited with 137
        return {"ok": True, "container": {"running": clock.t < t_started + 10, "exit_code": 137}}
    nodes.over["running"] = {"w1": w1_state}
    t_started = clock.t
    res, _lines = run(nodes, clock)
    assert res["failure"] == "rank on w1 stopped while the group loaded (exit code 137)"
    assert clock.t - t_started < 20  # well before the 100 s deadline
    assert nodes.records[-1] is None  # the load ended: a restarted watchdog does not wait for it


def test_the_gate_times_out_after_its_deadline():
    clock = Clock()
    nodes = FakeNodes(clock, serving_after=10 ** 6)
    t0 = clock.t
    res, _lines = run(nodes, clock)
    assert res["failure"] == "the head's /health did not answer 200 within 100.0 s"
    assert 100 <= clock.t - t0 <= 104


def test_a_stopped_rank_found_at_teardown_is_diagnosed():
    clock = Clock()
    nodes = FakeNodes(clock, stop={"w1": {"ok": True, "log_path": "/l", "running": False, "exit_code": 137,
                                          "diagnosis": "The rank container ended with SIGKILL. catalogue: rank_killed"}})
    res, _lines = run(nodes, clock)
    assert res["diagnoses"] == ["w1: rank 1 had stopped (exit code 137): The rank container ended with SIGKILL. "
                                "catalogue: rank_killed"]


# ---------------------------------------------------------------------------------- decisions

RUN = [{"rank": 0, "host": "h", "running": True}, {"rank": 1, "host": "w", "running": True}]


def test_phase():
    rec = L.load_record(100.0, 600, "vllm_ranks")
    assert L.phase(rec, 200.0, RUN) == "loading"
    assert L.phase(rec, 700.0, RUN) == "load_expired"
    assert L.phase(dict(rec, done=300.0), 200.0, RUN) == "steady"
    assert L.phase(None, 200.0, RUN) == "steady"
    dead = [RUN[0], dict(RUN[1], running=False)]
    assert L.phase(rec, 200.0, dead) == "exited"  # a rank that exits during a load: act
    away = [RUN[0], dict(RUN[1], running=None)]
    assert L.phase(rec, 200.0, away) == "steady"  # unreachable is a probe, not a fact


@pytest.mark.parametrize("verdict,phase_,pending,want", [
    ({"action": "restart_group"}, "loading", 1, ("wait", 0)),       # /health not up yet while loading
    ({"action": "restart_group"}, "exited", 0, ("restart_group", 0)),  # a fact: at once
    ({"action": "none"}, "load_expired", 0, ("restart_group", 0)),
    ({"action": "restart_group"}, "steady", 0, ("confirm", 1)),     # a probe: confirm first
    ({"action": "restart_group"}, "steady", 1, ("restart_group", 2)),
    ({"action": "none"}, "steady", 1, ("none", 0)),
])
def test_decide(verdict, phase_, pending, want):
    assert L.decide(verdict, phase_, pending, 2) == want


def test_load_record_refuses_a_non_positive_deadline():
    with pytest.raises(ValueError) as e:
        L.load_record(1.0, 0, "x")
    assert "deadline_s must be positive, got 0.0" in str(e.value)


def test_load_record_path_is_beside_the_rank_spec_file():
    assert L.load_record_path("/var/lib/dgxspark-vllm/rank.json") == "/var/lib/dgxspark-vllm/group-load.json"


def test_canary_wedged():
    assert L.canary_wedged(2, 3, {"h": "spinning"}) is None
    assert L.canary_wedged(3, 3, {"h": "computing", "w": "spinning"}) is None  # a long prefill
    why = L.canary_wedged(3, 3, {"h": "spinning", "w": "low"})
    assert why.startswith("3 canaries in a row failed or timed out while /health answers 200")
    assert "(h spinning, w low)" in why
    assert L.canary_wedged(9, 0, {}) is None  # off


def test_incident_keeps_the_first_cause(tmp_path):
    inc, new = L.open_incident(None, 10.0, "rank_dead: rank 1 on w does not answer (node unreachable)", ["w"])
    assert new
    inc2, new2 = L.open_incident(inc, 40.0, "head_down: the head's rank container on h is not running", ["h"])
    assert inc2 is inc and not new2
    assert L.action_event(inc, 50.0, "restart_group", "20261204T000000Z")["cause"].startswith("rank_dead: rank 1 on w")
    end = L.close_incident(inc, 190.0)
    assert end == {"event": "end", "time": 190.0, "start": 10.0, "actions": 1, "seconds_without_service": 180.0,
                   "cause": "rank_dead: rank 1 on w does not answer (node unreachable)", "hosts": ["w"]}
    log = tmp_path / "incidents.jsonl"
    L.append_incident(str(log), {"event": "start", "time": 10.0})
    L.append_incident(str(log), end)
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == ["start", "end"]


# ---------------------------------------------------------------------------------- launch verification

def _raw(status="running", restarting=False, policy="no", cmd=None):
    return {"State": {"Status": status, "Restarting": restarting, "ExitCode": 0},
            "HostConfig": {"RestartPolicy": {"Name": policy}},
            "Config": {"Cmd": cmd if cmd is not None else [
                "/models/m", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']}}


WANT = {"restart": "no", "command": ["/models/m", "--speculative-config", '{"num_speculative_tokens":2,"method":"mtp"}']}


def test_launch_as_rendered_json_flag_compared_as_json():
    assert L.launch_errors("h", "vllm-rank", WANT, _raw()) == []


def test_launch_mismatches_name_host_item_both_values_and_the_fix():
    errs = L.launch_errors("spark-b", "vllm-rank", WANT, _raw(status="created", policy="always", cmd=[
        "/models/m", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']))
    assert len(errs) == 3
    assert errs[0].startswith("spark-b: rank container vllm-rank: state is 'created', want 'running'")
    assert errs[1].startswith("spark-b: rank container vllm-rank: restart policy is 'always', rendered 'no'")
    assert ("argv[2] is '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}', rendered "
            "'{\"num_speculative_tokens\":2,\"method\":\"mtp\"}'") in errs[2]
    assert all("Fix: re-run site.yml" in e for e in errs)
    restarting = L.launch_errors("h", "r", WANT, _raw(status="restarting", restarting=True))
    assert len(restarting) == 1 and "state is 'restarting'" in restarting[0]
    assert L.launch_errors("h", "r", WANT, None)[0].startswith("h: rank container r does not exist after its start")
    short = L.launch_errors("h", "r", WANT, _raw(cmd=["/models/m"]))
    assert "argv has 1 items, rendered 3" in short[0]


def test_plan_is_the_one_sequence_for_any_group_size():
    for size in (2, 3, 4):
        group = [{"host": "n%d" % r, "rank": r} for r in reversed(range(size))]
        steps = L.plan(group)
        hosts = ["n%d" % r for r in range(size)]
        assert [(s["verb"], s["host"]) for s in steps] == (
            [("ready", h) for h in hosts] + [("stop", h) for h in hosts] + [("streak", "n0")]
            + [("settle", h) for h in hosts] + [("start", h) for h in reversed(hosts)] + [("load", "n0")])
        assert [s["head"] for s in steps if s["verb"] == "settle"] == [True] + [False] * (size - 1)
        assert [s["rank"] for s in steps if s["verb"] == "start"] == list(reversed(range(size)))
    with pytest.raises(ValueError):
        L.plan([{"host": "a", "rank": 0}, {"host": "b", "rank": 2}])


def test_streak_refusal_names_every_rank_at_the_limit_and_only_those():
    stops = [{"host": "h", "deaths": 0, "log_path": "/l/h.log"},
             {"host": "w1", "deaths": 2, "log_path": "/l/w1.log", "last_errors": ["a", "NCCL error: unhandled system error"]},
             {"host": "w2", "deaths": None, "log_path": None}]
    msg = L.streak_refusal(stops, 2, "/var/log/dgxspark-vllm")
    assert msg.startswith("stopping: these ranks died unexplained 2 or more times in a row")
    assert "w1: 2 deaths, log /l/w1.log, last errors: a | NCCL error: unhandled system error" in msg
    assert "h: 0 deaths" not in msg and "w2:" not in msg
    assert L.streak_refusal(stops, 3) is None
    assert L.streak_refusal(stops, 0) is None
    assert L.streak_refusal([], 2) is None


def test_a_death_streak_stops_the_restart_after_every_stop_and_before_any_settle():
    clock = Clock()
    nodes = FakeNodes(clock, stop={"w1": {"ok": True, "log_path": "/l", "running": False, "exit_code": 1, "deaths": 2}})
    res = L.restart(nodes, GROUP, "rank_dead", "S", dict(TIMINGS, max_deaths=2), lambda m: None, clock, clock.sleep)
    assert res["ok"] is False and res["failure"].startswith("streak on h failed: stopping: these ranks died")
    assert [c for c in nodes.calls if c[0] == "stop"] == [("stop", "h"), ("stop", "w1"), ("stop", "w2")]
    assert [c for c in nodes.calls if c[0] in ("settle", "start")] == []


# ---------------------------------------------------------------------------------- cooldown and minimum uptime

@pytest.mark.parametrize("now,fact,held", [
    (1059.9, True, True),    # 59.9 s after the end: inside a 60 s cooldown, a fact too
    (1060.0, True, False),   # the boundary itself is allowed
    (1060.1, False, False),  # just over; the group served 60.1 s, the 30 s minimum uptime is over too
])
def test_cooldown_boundaries(now, fact, held):
    hold = L.restart_hold(now, 1000.0, 1000.0, 60, 30, fact)
    assert (hold is not None) == held
    if held:
        assert hold["until"] == 1060.0 and hold["wait_s"] == 0.1
        assert hold["reason"].startswith("cooldown: the last restart ended 60 s ago, 60 s between restarts")


@pytest.mark.parametrize("now,fact,want_until", [
    (1299.9, False, 1300.0),  # a probe 299.9 s after the group began serving: held until 300 s
    (1300.0, False, None),    # at 300 s: allowed
    (1300.1, False, None),
    (1100.0, True, None),     # a fact (a rank exited) is not held by the minimum uptime
])
def test_minimum_uptime_boundaries(now, fact, want_until):
    hold = L.restart_hold(now, None, 1000.0, 60, 300, fact)
    assert (hold and hold["until"]) == want_until
    if want_until:
        assert "minimum uptime: the group serves since 300 s, a probe may restart it after 300 s" in hold["reason"]


def test_zero_turns_each_hold_off_and_unknown_times_hold_nothing():
    assert L.restart_hold(1001.0, 1000.0, 1000.0, 0, 0, False) is None
    assert L.restart_hold(1001.0, 1000.0, 1000.0, 0, 300, True) is None       # cooldown off, a fact
    assert L.restart_hold(1001.0, 1000.0, None, 0, 300, False) is None        # never seen serving
    assert L.restart_hold(1001.0, None, 1000.0, 60, 0, False) is None         # no restart yet
    both = L.restart_hold(1010.0, 1000.0, 990.0, 60, 300, False)
    assert both["until"] == 1290.0 and both["reason"].count("; ") == 1        # the later of the two, both named


# ---------------------------------------------------------------------------------- root cause first, incident log

def test_diagnoses_name_the_first_cause_first():
    # the shapes restart() gives: the head is stopped first, so its line comes first
    diagnoses = [L.named("h", {"diagnosis": "The head died; the worker's log names the cause. catalogue: head_died"},
                         "rank 0 had stopped (exit code 0)"),
                 L.named("w", {"diagnosis": "", "tail": ["NCCL WARN net: connection closed"]},
                         "rank 1 had stopped (exit code 255)")]
    assert L.cause_first(diagnoses, ["w"]) == [diagnoses[1], diagnoses[0]]
    assert L.cause_first(diagnoses, []) == diagnoses
    assert L.cause_first(diagnoses, ["w1"]) == diagnoses  # 'w1: ' is not 'w: '


DAY = 86400.0
NOW = 1000000.0


def _log(tmp_path):
    """incidents.jsonl as the program writes it (lifecycle's event builders): one incident before the day, one
    across its start, one inside it, one still open; the file begins with a line cut short."""
    path = str(tmp_path / "incidents.jsonl")
    with open(path, "w") as f:
        f.write('cause": "cut", "time": 1}\n')
    for start, end, cause, hosts in [(800000.0, 800100.0, "head_down: old", ["h"]),
                                     (NOW - DAY - 1000, NOW - DAY + 5400, "rank_dead: rank 1 on w does not answer", ["w"]),
                                     (950000.0, 950400.0, "wedged: frozen", ["h", "w"]),
                                     (NOW - 1000, None, "head_down: the head's /health does not answer 200 on h", ["h"])]:
        inc, _new = L.open_incident(None, start, cause, hosts)
        L.append_incident(path, L.start_event(inc))
        L.append_incident(path, L.action_event(inc, start + 10, "restart_group", "20261204T000000Z"))
        if end is not None:
            L.append_incident(path, L.action_event(inc, end - 5, "result", "serving", evidence=["h:/var/log/x.log"]))
            L.append_incident(path, L.close_incident(inc, end))
    with open(path) as f:
        return f.read()


def test_incidents_from_the_log(tmp_path):
    incs = L.incidents(L.parse_incident_log(_log(tmp_path)))
    assert [(i["start"], i["end"], i["seconds_without_service"]) for i in incs] == [
        (800000.0, 800100.0, 100.0), (NOW - DAY - 1000, NOW - DAY + 5400, 6400.0), (950000.0, 950400.0, 400.0),
        (NOW - 1000, None, None)]
    assert incs[1]["cause"] == "rank_dead: rank 1 on w does not answer" and incs[1]["hosts"] == ["w"]
    assert [a["action"] for a in incs[2]["actions"]] == ["restart_group", "result"]
    assert incs[3]["actions"] == [{"time": NOW - 990, "action": "restart_group", "detail": "20261204T000000Z"}]


def test_availability_over_the_last_day(tmp_path):
    rep = L.incident_report(_log(tmp_path), NOW, last=2)
    # across the day's start 5400 s count, 400 s inside, the open one 1000 s until now; the old one none
    assert rep["availability"] == {"span_s": DAY, "down_s": 6800.0, "incidents": 3,
                                   "availability_pct": round(100 * (1 - 6800.0 / DAY), 3),
                                   "line": "92.130 % over the last 24 h (6800 s without service in 3 incidents; "
                                           "from the incident log)"}
    assert rep["open"] is True
    # 950000 is 1970-01-11T23:53:20Z; the open one started at 999000 (1970-01-12T13:30:00Z)
    assert rep["incidents"] == [
        {"start": "1970-01-11T23:53:20Z", "first_cause": "wedged: frozen", "hosts": ["h", "w"],
         "actions": ["1970-01-11T23:53:30Z restart_group 20261204T000000Z", "1970-01-11T23:59:55Z result serving"],
         "end": "1970-01-12T00:00:00Z", "seconds_without_service": 400.0},
        {"start": "1970-01-12T13:30:00Z", "first_cause": "head_down: the head's /health does not answer 200 on h",
         "hosts": ["h"], "actions": ["1970-01-12T13:30:10Z restart_group 20261204T000000Z"], "end": "open",
         "seconds_without_service": 1000.0}]


def test_no_incident_is_full_availability_and_a_log_read_from_its_tail(tmp_path):
    rep = L.incident_report("", NOW)
    assert rep == {"incidents": [], "open": False,
                   "availability": {"span_s": DAY, "down_s": 0.0, "incidents": 0, "availability_pct": 100.0,
                                    "line": "100.000 % over the last 24 h (0 s without service in 0 incidents; "
                                            "from the incident log)"}}
    # a tail that begins after an incident's start line: its start comes from the end line
    tail = "\n".join(_log(tmp_path).splitlines()[-5:])
    incs = L.incidents(L.parse_incident_log(tail))
    assert [(i["start"], i["end"]) for i in incs] == [(950000.0, 950400.0), (NOW - 1000, None)]


class WatchedNodes(FakeNodes):
    """A group that never serves; load_watch names a livelock at its n-th call (the watchdog's AgentNodes)."""

    def __init__(self, clock, livelock_at=None):
        super(WatchedNodes, self).__init__(clock, serving_after=10 ** 6)
        self.livelock_at, self.watches = livelock_at, []

    def load_watch(self, hosts):
        self.watches.append((self.clock(), list(hosts)))
        if self.livelock_at is not None and len(self.watches) >= self.livelock_at:
            return "loading livelock on h shard progress frozen at 48 for 300 s"
        return None


def test_the_restart_gate_fails_at_the_watch_livelock_not_at_its_timeout():
    clock = Clock()
    nodes = WatchedNodes(clock, livelock_at=4)
    res, lines = run(nodes, clock)
    assert res["ok"] is False and res["failure"] == "loading livelock on h shard progress frozen at 48 for 300 s"
    # asked at every rank check (5 s apart) with every host of the group; the gate ended long before its 100 s
    assert [h for _t, h in nodes.watches] == [["h", "w1", "w2"]] * 4
    assert nodes.watches[-1][0] - nodes.watches[0][0] <= 3 * 6.0 and clock() < 1000.0 + TIMINGS["gate_s"]
    assert res["steps"][-1] == ("health_gate", "h", False)
    assert nodes.records[-1] is None  # the load record is closed
    # without a livelock the same gate runs to its timeout
    clock2 = Clock()
    quiet = WatchedNodes(clock2)
    res2, _lines2 = run(quiet, clock2)
    assert res2["failure"] == "the head's /health did not answer 200 within 100.0 s" and len(quiet.watches) > 10
