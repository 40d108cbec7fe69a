"""roles/vllm_watchdog/files: the watchdog program's config checks and the agent's verb filter.

Both are loaded from the role's files (the programs the role installs); nothing is stubbed.
"""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FILES = os.path.join(ROOT, "roles", "vllm_watchdog", "files")


def load(name):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), os.path.join(FILES, name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


WD = load("dgxspark-vllm-watchdog")
AGENT = load("dgxspark-vllm-agent")

GOOD = {"nodes": [{"host": "h", "rank": 0, "address": "198.18.20.10"}, {"host": "w", "rank": 1, "address": "198.18.20.11"}],
        "api_url": "http://198.18.20.10:8000", "state_dir": "/tmp/x", "interval_s": 30.0, "window_s": 120.0,
        "power_floor_w": 25.0, "busy_util_pct": 80.0, "max_failed_restarts": 3, "max_restarts": 6,
        "restart_window_s": 21600.0, "health_gate_timeout_s": 3600.0, "boot_wait_s": 1800.0, "confirm_cycles": 2,
        "ssh_key": "/k", "ssh_user": "vllm-watchdog", "agent": "/usr/local/sbin/dgxspark-vllm-agent",
        "rank_spec_file": "/var/lib/dgxspark-vllm/rank.json"}


def write(tmp_path, data):
    p = tmp_path / "watchdog.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_good_config_loads(tmp_path):
    assert WD.load_config(write(tmp_path, GOOD))["nodes"][1]["host"] == "w"


@pytest.mark.parametrize("mutate,needle", [
    (lambda c: "{not json", "is not valid JSON"),
    (lambda c: dict((k, v) for k, v in c.items() if k != "window_s"), "lacks window_s"),
    (lambda c: dict(c, interval_s=0), "interval_s must be a positive number, got 0"),
    (lambda c: dict(c, window_s="2m"), "window_s must be a positive number, got '2m'"),
    (lambda c: dict(c, nodes=[{"host": "h", "rank": 0}, {"host": "w", "rank": 2}]), "ranks [0, 2] are not 0..N-1"),
])
def test_bad_config_is_refused_with_the_reason(tmp_path, mutate, needle):
    with pytest.raises(ValueError) as e:
        WD.load_config(write(tmp_path, mutate(dict(GOOD))))
    assert needle in str(e.value)


def test_missing_config_exits_2_and_says_why(tmp_path, capsys):
    assert WD.main(["--config", str(tmp_path / "absent.json")]) == 2
    out = capsys.readouterr().out
    assert out.startswith("refusing to start: cannot read %s" % (tmp_path / "absent.json"))


@pytest.mark.parametrize("argv", [["status"], ["container"], ["logs", "20261201T130000Z"], ["stop", "20261201T130000Z"],
                                  ["ritual"], ["start"]])
def test_agent_accepts_its_verbs(argv):
    assert AGENT.parse_request(argv) == argv


@pytest.mark.parametrize("argv", [["id"], ["status", "extra"], ["logs"], ["stop", "x;rm -rf /"], ["start", "now"],
                                  ["logs", "../../etc/passwd"]])
def test_agent_refuses_anything_else(argv):
    with pytest.raises(ValueError) as e:
        AGENT.parse_request(argv)
    assert str(e.value).startswith("refused")


def test_agent_over_ssh_reads_the_original_command(monkeypatch):
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "stop 20261201T130000Z")
    assert AGENT.parse_request(["--ssh"]) == ["stop", "20261201T130000Z"]
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "bash -i")
    with pytest.raises(ValueError):
        AGENT.parse_request(["--ssh"])


def _doctor_capture(name, host):
    with open(os.path.join(ROOT, "tests", "fixtures", "doctor", "sim", name + ".json")) as f:
        return json.load(f)["hosts"][host]["evidence"]


def test_watchdog_names_the_cause_or_the_last_lines():
    ev = _doctor_capture("worker_killed", "spark-tp3-2")
    from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import explain
    res = {"diagnosis": explain(ev["logs"], ev["container"])}
    from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import named as lc_named
    named = lc_named("spark-tp3-2", res, "rank 2 had stopped (exit code 137)")
    assert named.startswith("spark-tp3-2: rank 2 had stopped (exit code 137): The rank container ended with SIGKILL")
    assert named.endswith("catalogue: rank_killed")
    res = {"diagnosis": "", "tail": ["a", "vllm: error: unrecognized arguments: --no-such-flag"]}
    assert lc_named("w", res, "rank 1 did not come up (exited)") == (
        "w: rank 1 did not come up (exited): no catalogue entry matches; last lines: a | "
        "vllm: error: unrecognized arguments: --no-such-flag")


def _module_utils_imports(path):
    import ast
    prefix = "ansible_collections.dgxspark.vllm.plugins.module_utils"
    out = set()
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(prefix):
                rest = node.module[len(prefix):].lstrip(".")
                out.update([rest.split(".")[0]] if rest else [a.name for a in node.names])
            elif node.module == "catalogue":
                out.add("catalogue")
    return out


def test_the_role_ships_every_module_util_the_programs_import():
    import yaml
    with open(os.path.join(ROOT, "roles", "vllm_watchdog", "vars", "main.yml")) as f:
        shipped = set(yaml.safe_load(f)["_vllm_watchdog_module_utils"])
    todo = set()
    for prog in ("dgxspark-vllm-watchdog", "dgxspark-vllm-agent"):
        todo |= _module_utils_imports(os.path.join(FILES, prog))
    assert todo == {"verdict", "health", "lifecycle", "docker_rank", "rank_node", "sysctl_state"}
    closure = set()
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo |= _module_utils_imports(os.path.join(ROOT, "plugins", "module_utils", name + ".py"))
    assert closure == shipped


def _observe_with(monkeypatch, tmp_path, worker_outcome):
    """One observe() of the real Watchdog class: the head's agent answers 'running', the worker's call ends
    as worker_outcome ('timeout' or an SSH return code); /health and /metrics answer as a serving head."""
    import subprocess
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health, lifecycle, verdict
    cfg = dict(GOOD, state_dir=str(tmp_path))
    running = json.dumps({"ok": True, "container": {"running": True, "exit_code": 0}})

    def fake_run(argv, **kw):
        if argv[0] != "ssh":
            return subprocess.CompletedProcess(argv, 0, running.encode(), b"")
        if worker_outcome == "timeout":
            raise subprocess.TimeoutExpired(argv, kw.get("timeout"))
        return subprocess.CompletedProcess(argv, worker_outcome, b"", b"ssh: connect to host: No route to host")
    monkeypatch.setattr(WD.subprocess, "run", fake_run)
    wd = WD.Watchdog(cfg, verdict, health, lifecycle)
    monkeypatch.setattr(wd, "http", lambda path, body=None, timeout=10: (200, "" if path == "/metrics" else "{}"))
    v, statuses = wd.observe()
    return v, statuses["w"]


def test_a_slow_status_is_not_a_dead_rank(monkeypatch, tmp_path):
    v, st = _observe_with(monkeypatch, tmp_path, "timeout")
    assert st["slow"] is True and not st.get("unreachable")
    assert (v["verdict"], v["action"]) == ("unknown", "none")
    assert v["cause"] == "agent error: w: status timed out after 60 s"


def test_an_unreachable_worker_is_a_dead_rank(monkeypatch, tmp_path):
    v, st = _observe_with(monkeypatch, tmp_path, 255)
    assert st["unreachable"] is True
    assert (v["verdict"], v["action"]) == ("rank_dead", "restart_group")
    assert v["cause"].startswith("rank 1 on w does not answer (node unreachable)")


def test_the_canary_is_the_shared_request_of_several_tokens(monkeypatch, tmp_path):
    """The watchdog's canary body is health.canary_request (vllm_health sends the same): never a one-token prompt."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health, lifecycle, verdict
    wd = WD.Watchdog(dict(GOOD, state_dir=str(tmp_path), model="tiny-glm"), verdict, health, lifecycle)
    sent = []
    monkeypatch.setattr(wd, "http", lambda path, body=None, timeout=10: sent.append((path, body)) or (200, "{}"))
    assert wd.canary() == {"ok": True, "status": 200, "msg": "canary answered"}
    assert sent == [("/v1/completions", {"model": "tiny-glm", "prompt": "Reply with one word: ready",
                                         "max_tokens": 1, "temperature": 0})]


def test_a_reset_request_clears_strikes_and_lifts_a_give_up(tmp_path, capsys):
    """playbooks/watchdog.yml action=reset writes <state_dir>/reset; the next cycle takes it."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health, lifecycle, verdict
    (tmp_path / "state.json").write_text(json.dumps({"strikes": 1, "restart_times": [1.0, 2.0], "mode": "watching",
                                                     "last_restart_end": 3.0}))
    wd = WD.Watchdog(dict(GOOD, state_dir=str(tmp_path)), verdict, health, lifecycle)
    assert wd.take_reset() is False and wd.state["strikes"] == 1
    (tmp_path / "gave-up.json").write_text("{}")
    (tmp_path / "reset").write_text("reset by test\n")
    assert wd.take_reset() is True
    assert (wd.state["strikes"], wd.state["restart_times"], wd.state["last_restart_end"]) == (0, [], None)
    assert not (tmp_path / "reset").exists() and not (tmp_path / "gave-up.json").exists()
    assert json.loads((tmp_path / "state.json").read_text())["strikes"] == 0
    assert "dgxspark_vllm_watchdog_strikes 0" in (tmp_path / "dgxspark_vllm_watchdog.prom").read_text()
    assert "action=reset cause=reset by a person" in capsys.readouterr().out


def test_the_metrics_file_carries_each_nodes_gpu_figures_and_promtool_accepts_it(tmp_path):
    """The textfile node-exporter serves: the watchdog's state and, from the last verdict, each node's GPU figures
    (verdict.gpu_metric_lines), checked by `promtool check metrics` where the prometheus package is installed."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health, lifecycle, verdict
    wd = WD.Watchdog(dict(GOOD, state_dir=str(tmp_path)), verdict, health, lifecycle)
    gpus = {"h": verdict.parse_gpu_query("96, 12.40, 2405\n"), "w": verdict.parse_gpu_query("0, 4.00, 208\n")}
    wd.save_state("watching", {"verdict": "idle", "gpus": gpus})
    text = (tmp_path / "dgxspark_vllm_watchdog.prom").read_text()
    assert 'dgxspark_vllm_watchdog_verdict{verdict="idle"} 1' in text
    assert 'dgxspark_vllm_gpu_power_watts{host="h"} 12.4\ndgxspark_vllm_gpu_power_watts{host="w"} 4.0' in text
    assert 'dgxspark_vllm_gpu_sm_clock_hertz{host="w"} 208000000.0' in text
    promtool = shutil.which("promtool")
    if promtool:
        res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                             check=False)
        assert res.returncode == 0, res.stdout + res.stderr
    wd.save_state("restarting")  # the verdict stays the last one seen, and so do its GPU figures
    assert "dgxspark_vllm_gpu_power_watts" in (tmp_path / "dgxspark_vllm_watchdog.prom").read_text()


def test_agent_gpu_sample_asks_what_the_head_parses(monkeypatch):
    """The agent's nvidia-smi argv is verdict.gpu_query_argv of WATCH_QUERY_FIELDS; the head parses its answer with
    verdict.parse_gpu_query (the shape of the simulated nodes' stand-in at low power)."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V
    seen = []
    monkeypatch.setattr(AGENT, "run", lambda argv, timeout=600: (seen.append(argv) or (0, "96, 12.40, 208\n", "")))
    out = AGENT.gpu_sample({"nvidia_smi": "/usr/bin/nvidia-smi"})
    assert seen == [["/usr/bin/nvidia-smi", "--query-gpu=utilization.gpu,power.draw,clocks.sm",
                     "--format=csv,noheader,nounits"]]
    assert V.parse_gpu_query(out) == {"utilization_pct": 96.0, "power_w": 12.4, "clocks_sm_mhz": 208.0}


def _wd(monkeypatch, tmp_path, containers, health=200, canary=200, boots=None, gpu=None, **cfg):
    """The real Watchdog over fake agents: containers {host: running True/False/None (unreachable)}; the restart
    itself is recorded, not run (lifecycle.restart has its own tests)."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H, lifecycle, verdict
    spec = tmp_path / "rank.json"
    wd = WD.Watchdog(dict(GOOD, state_dir=str(tmp_path), rank_spec_file=str(spec), canary_timeout_s=1, **cfg),
                     verdict, H, lifecycle)

    def agent(node, verb, *args, **kw):
        up = containers[node["host"]]
        if up is None:
            return {"ok": False, "unreachable": True, "error": "rc 255"}
        return {"ok": True, "container": {"running": up, "exit_code": 0 if up else 137},
                "boot": (boots or {}).get(node["host"]), "gpu": (gpu or {}).get(node["host"])}

    def http(path, body=None, timeout=10):
        if path == "/health":
            return health, ""
        if path == "/metrics":
            return None, "refused"
        return canary, "{}"
    restarts = []
    monkeypatch.setattr(wd, "agent", agent)
    monkeypatch.setattr(wd, "http", http)
    monkeypatch.setattr(wd, "restart_group", lambda cause: restarts.append(cause) or True)
    return wd, restarts, spec


def test_boot_during_a_load_inside_its_deadline_waits(monkeypatch, tmp_path, capsys):
    """The issue's first case: the service restarted while the group it started loads; /health does not answer yet."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle
    import time
    wd, restarts, spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, health=None)
    lifecycle.write_json(lifecycle.load_record_path(str(spec)), lifecycle.load_record(time.time() - 30, 600, "watchdog"))
    wd.boot()
    for _i in range(3):
        wd.cycle()
    assert restarts == []
    out = capsys.readouterr().out
    assert "boot verdict=head_down action=wait cause=loading since 30 s (started by watchdog), deadline in 570 s" in out


def test_a_load_past_its_deadline_is_restarted_at_once(monkeypatch, tmp_path):
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle
    import time
    wd, restarts, spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, health=None)
    lifecycle.write_json(lifecycle.load_record_path(str(spec)), lifecycle.load_record(time.time() - 700, 600, "vllm_ranks"))
    wd.cycle()
    assert len(restarts) == 1
    assert restarts[0].startswith("head_down: the load started 700 s ago by vllm_ranks did not serve by its deadline")


def _shards(k):
    return "Loading safetensors checkpoint shards:  40% Completed | {}/120 [02:11<03:10, 2.1s/it]\n".format(k)


@pytest.mark.parametrize("power,restarted", [("12.40", True), ("61.20", False)])
def test_a_loading_livelock_stops_the_group_at_once_inside_its_deadline(monkeypatch, tmp_path, capsys,
                                                                        power, restarted):
    """Shards frozen on the worker while its GPU spins at idle power: a fact, restarted in that cycle though the
    load is inside its deadline; the same freeze at normal power (an I/O stall) waits for the deadline."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H, lifecycle
    import time
    boots = {"h": {"phase": "loading", "shards_loaded": 60}, "w": {"phase": "loading", "shards_loaded": 48}}
    wd, restarts, spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, health=None, boots=boots,
                             gpu={"h": "96, 61.20, 2405\n", "w": "96, %s, 2405\n" % power}, livelock_window_s=120)
    lifecycle.write_json(lifecycle.load_record_path(str(spec)), lifecycle.load_record(time.time() - 400, 1800, "watchdog"))
    wd.cycle()
    assert restarts == [] and sorted(wd.shard_marks) == ["h", "w"]
    # two minutes later (the marks aged by hand): the head moved on, the worker did not
    wd.shard_marks = dict((h, [t - 130, k]) for h, (t, k) in wd.shard_marks.items())
    boots["h"] = dict(H.parse_phase(_shards(61)), phase="loading")
    wd.cycle()
    out = capsys.readouterr().out
    if restarted:
        assert len(restarts) == 1 and restarts[0].startswith(
            "livelock: loading livelock on w shard progress frozen at 48 for 130 s while the GPU reads 96.0 % at 12.4 W")
        assert "verdict=livelock action=restart_group" in out
    else:
        assert restarts == [] and "action=wait cause=loading since 4" in out.splitlines()[-1]


def test_a_rank_that_exited_is_restarted_in_the_same_cycle(monkeypatch, tmp_path):
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, {"h": True, "w": False})
    assert wd.exited_rank() == "w"
    wd.cycle()
    assert restarts == ["rank_dead: rank 1 on w is not running (a tensor-parallel group cannot lose a rank, "
                        "catalogue worker_orphaned)"]


def test_an_unreachable_worker_is_confirmed_and_stays_the_first_cause(monkeypatch, tmp_path):
    """The issue's second case: the worker powered off, then the head died after it; the incident names the worker."""
    containers = {"h": True, "w": None}
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, containers)
    wd.cycle()
    assert restarts == []  # a probe: one confirm cycle first
    containers["h"] = False
    wd.cycle()
    assert restarts == ["rank_dead: rank 1 on w does not answer (node unreachable) (a tensor-parallel group cannot "
                        "lose a rank, catalogue worker_orphaned)"]
    events = [json.loads(x) for x in (tmp_path / "incidents.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start"]
    assert events[0]["cause"].startswith("rank_dead: rank 1 on w does not answer")


def test_canaries_failing_at_health_200_and_low_power_are_wedged(monkeypatch, tmp_path, capsys):
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, canary=None, canary_failures=3)
    for _i in range(3):
        wd.cycle()
    assert restarts == []  # the third failed canary gives the verdict, then one confirm cycle (a probe)
    wd.cycle()
    # the incident's cause is the first one seen (at the third canary)
    assert len(restarts) == 1 and restarts[0].startswith("wedged: 3 canaries in a row failed or timed out")
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0:2] for line in out[:3]] == [["verdict=unknown", "action=none"]] * 2 + [
        ["verdict=wedged", "action=confirm"]]


def test_a_stopped_head_beside_an_unreachable_worker_restarts_at_once_naming_the_worker(monkeypatch, tmp_path):
    """The first cycle after a worker powered off finds the head's rank already ended: a fact (act at once), and
    the cause is the worker (verdict.classify), with its host kept in the incident (root cause first)."""
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, {"h": False, "w": None})
    wd.cycle()
    assert restarts == ["rank_dead: rank 1 on w does not answer (node unreachable); the head's rank has stopped too "
                        "(a tensor-parallel group cannot lose a rank, catalogue worker_orphaned)"]
    start = json.loads((tmp_path / "incidents.jsonl").read_text().splitlines()[0])
    assert (start["event"], start["hosts"]) == ("start", ["w"])


def _restarting_wd(monkeypatch, tmp_path, worker_back_after=1, **cfg):
    """The real Watchdog and the real lifecycle.restart over fake agents answering in the shapes rank_node gives
    (agent verbs status, stop, ritual, start, container). The worker's node does not answer its first
    `worker_back_after` status calls (powered off), then answers ready; both ranks are found stopped at the teardown."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H, lifecycle, verdict
    from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import explain
    ev = _doctor_capture("worker_killed", "spark-tp3-2")
    up = {"h": False, "w": False}
    calls = {"w_status": 0}
    wd = WD.Watchdog(dict(GOOD, state_dir=str(tmp_path), rank_spec_file=str(tmp_path / "rank.json"),
                          canary_timeout_s=1, **cfg), verdict, H, lifecycle)

    def agent(node, verb, *args, **kw):
        host = node["host"]
        if verb == "status" and host == "w":
            calls["w_status"] += 1
            if calls["w_status"] <= worker_back_after:
                return {"ok": False, "unreachable": True, "error": "status rc 255: ssh: connect to host w: No route to host"}
        if verb in ("status", "container"):
            return {"ok": True, "error": None, "container": {"running": up[host], "exit_code": 0 if up[host] else 137},
                    "ready": {"ok": True, "checks": [{"check": "rank_spec", "ok": True, "msg": "present"}],
                              "msg": "rank_spec: present"}}
        if verb == "stop":
            diag = ("The head died; a headless worker either exits 0 or waits on a dead TCPStore. catalogue: head_died"
                    if host == "h" else explain(ev["logs"], ev["container"]))
            return {"ok": True, "log_path": "/var/log/dgxspark-vllm/vllm_rank-%s.log" % args[0], "removed": True,
                    "running": False, "exit_code": 0 if host == "h" else 137, "status": "exited", "diagnosis": diag,
                    "last_errors": [], "deaths": None, "changed": True, "msg": "removed vllm_rank"}
        if verb == "ritual":
            return {"ok": True, "msg": "settled"}
        if verb == "start":
            up[host] = True
            return {"ok": True, "outcome": "ready", "msg": "ready line seen"}
        raise AssertionError(verb)

    def http(path, body=None, timeout=10):
        if path == "/metrics":
            return None, "refused"
        return (200, "{}") if up["h"] else (None, "connection refused")
    monkeypatch.setattr(wd, "agent", agent)
    monkeypatch.setattr(wd, "http", http)
    return wd


def test_the_result_line_names_the_first_cause_and_its_diagnosis_first(monkeypatch, tmp_path, capsys):
    """Issue 28's powered-off worker: the head's rank ended after it. The restart stops the head first, so its
    'rank 0 had stopped' came first and the result line blamed the head; now the worker leads."""
    wd = _restarting_wd(monkeypatch, tmp_path)
    wd.cycle()
    out = capsys.readouterr().out
    result = [x for x in out.splitlines() if x.startswith("result=")]
    assert len(result) == 1, out
    assert result[0].startswith("result=serving first_cause=rank_dead: rank 1 on w does not answer (node unreachable)")
    diagnosis = result[0].split(" diagnosis=", 1)[1].split(" | ")
    assert [d.split(":")[0] for d in diagnosis] == ["w", "h"]
    assert diagnosis[0].startswith("w: rank 1 had stopped (exit code 137): The rank container ended with SIGKILL")
    assert wd.state["last_diagnosis"] == diagnosis
    events = [json.loads(x) for x in (tmp_path / "incidents.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "action", "action", "end"]
    assert {e["cause"] for e in events} == {result[0].split("first_cause=")[1].split(" restart_s=")[0]}
    assert wd.state["serving_since"] == wd.state["last_restart_end"] and "incident" not in wd.state


def test_a_fact_inside_the_cooldown_is_held_then_acted_on(monkeypatch, tmp_path, capsys):
    """A rank that exited 20 s after the last restart ended, cooldown 60 s: logged as held, no restart; once the
    cooldown is over (the end moved back past it), the same fact restarts the group without a confirm cycle."""
    import time
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, {"h": True, "w": False}, restart_cooldown_s=60, min_uptime_s=300)
    wd.state.update(last_restart_end=time.time() - 20, serving_since=time.time() - 20)
    wd.cycle()
    assert restarts == []
    hold = wd.state["hold"]
    assert 39 < hold["wait_s"] <= 40 and wd.hold_until == hold["until"]
    assert "minimum uptime" not in hold["reason"]  # a fact: the cooldown only
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("action=hold")][0]
    assert line.startswith("action=hold cause=rank_dead: rank 1 on w is not running")
    assert "hold=cooldown: the last restart ended 20 s ago, 60 s between restarts" in line
    wd.state["last_restart_end"] = time.time() - 60.5
    wd.cycle()
    assert len(restarts) == 1 and restarts[0].startswith("rank_dead: rank 1 on w is not running")
    assert wd.hold_until is None and "hold" not in wd.state


def test_a_probe_on_a_young_group_waits_for_the_minimum_uptime(monkeypatch, tmp_path, capsys):
    """/health down on a group that began serving 100 s ago (minimum uptime 300 s, cooldown off): confirmed, then
    held; with the uptime reached it restarts; with 0 it never holds."""
    import time
    wd, restarts, _spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, health=None, restart_cooldown_s=0,
                              min_uptime_s=300)
    wd.state["serving_since"] = time.time() - 100
    wd.cycle()
    wd.cycle()
    assert restarts == [] and 199 < wd.state["hold"]["wait_s"] <= 200
    assert "hold=minimum uptime: the group serves since 100 s" in capsys.readouterr().out
    wd.state["serving_since"] = time.time() - 301
    wd.cycle()
    assert restarts == ["head_down: the head's /health does not answer 200 on h"]
    (tmp_path / "off").mkdir()
    wd2, restarts2, _spec = _wd(monkeypatch, tmp_path / "off", {"h": True, "w": True}, health=None,
                                restart_cooldown_s=0, min_uptime_s=0)
    wd2.state["serving_since"] = time.time() - 1
    wd2.cycle()
    wd2.cycle()
    assert restarts2 == ["head_down: the head's /health does not answer 200 on h"]


@pytest.mark.parametrize("key,value", [("restart_cooldown_s", -1), ("min_uptime_s", "5m")])
def test_a_bad_cooldown_or_uptime_is_refused(tmp_path, key, value):
    with pytest.raises(ValueError) as e:
        WD.load_config(write(tmp_path, dict(GOOD, **{key: value})))
    assert "%s must be a number of seconds, 0 or more, got %r" % (key, value) in str(e.value)


def test_the_restart_gate_watches_its_own_load_through_the_agents(monkeypatch, tmp_path):
    """AgentNodes.load_watch: the health gate of the watchdog's own restart asks the agents' status at most once per
    cycle interval and names a livelock from their shard progress and GPU samples."""
    import time
    boots = {"h": {"phase": "loading", "shards_loaded": 48}, "w": {"phase": "starting", "shards_loaded": None}}
    wd, _restarts, _spec = _wd(monkeypatch, tmp_path, {"h": True, "w": True}, health=None, boots=boots,
                               gpu={"h": "96, 12.40, 2405\n", "w": "96, 12.40, 2405\n"}, livelock_window_s=120)
    nodes = WD.AgentNodes(wd)
    assert nodes.load_watch(["h", "w"]) is None and nodes.marks == {"h": [nodes.marks["h"][0], 48]}
    assert nodes.load_watch(["h", "w"]) is None  # inside the cycle interval: no status asked
    nodes.marks["h"][0] -= 130  # two minutes later
    nodes.watched -= wd.cfg["interval_s"]
    why = nodes.load_watch(["h", "w"])
    assert why.startswith("loading livelock on h shard progress frozen at 48 for 130 s") and " w " not in why
    off = WD.AgentNodes(_wd(monkeypatch, tmp_path, {"h": True, "w": True}, boots=boots, livelock_window_s=0)[0])
    assert off.load_watch(["h", "w"]) is None and off.marks == {}
    assert time.time() - nodes.watched < 5
