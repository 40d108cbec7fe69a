"""The watchdog on the fault fleet (issue 16): real faults, the real service under systemd, no person.

A module fixture installs the watchdog with short cycles (site.yml --tags vllm_watchdog: 3 s cycle, 10 s
window) on the serving fleet. Each scenario injects one fault and waits for the watchdog alone to bring
the group back; detection and recovery seconds are read from the watchdog's own journal lines and
recorded in reports/faults/watchdog_*.json (never asserted). The simulated nodes have no GPU: the
nvidia-smi stand-in prints what /run/sim/gpu.json on a node says (utilization, power); the GB10 power
signature itself is untested here. At the end the watchdog is turned off again (the other scenarios
inject faults the watchdog would repair).

Order: a serving group left alone, kill the head container, SIGKILL the worker rank, the head killed while a fault
persists on the worker, to the give-up (three strikes, the diagnosis through the catalogue) and the documented
reset, a frozen engine at normal then low power, a reboot of the head's node container, the worker's node powered off
and back (one restart that waits for it, the incident naming the worker). Each records its seconds
with the machine's load average. The issue's seventh scenario, a lane with an API key, rides on the API-key
test of test_30_security.py (its keyed run installs the watchdog with these short cycles), so the key's restart
pair serves both.

Monitoring (issue 33) rides on the first restart: vllm_monitoring is installed on the same fleet (Prometheus and
node-exporter from the node image's Debian packages, 5 s scrapes), every scrape target is seen up, each node's GPU
figure equals what its nvidia-smi prints, every recording rule the lane can feed (so every dashboard panel) has
data, and the killed head's VllmEndpointDown is seen firing and then resolved; the units are stopped after it.

It runs before test_50_doctor (file order): the fleet test_40_tags leaves serving needs no repair deploy, and
the doctor scenarios after it meet a head whose saved logs hold the cascades these restarts caused, which doctor
reports as past incidents of a serving rank, never as its state.

`make test` (CI) runs every scenario; `make test-watchdog` runs this file alone. Figures and how often each has
passed: docs/watchdog.md.
"""
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse

import pytest
import yaml

from conftest import (ROOT, WATCHDOG_FAST, WATCHDOG_SERVICE, WATCHDOG_STATE_DIR, ensure_serving, http_json,
                      node_docker, node_sh, record, set_gpu, start_playbook, watchdog_journal, watchdog_state)

pytestmark = [pytest.mark.e2e]

STATE_DIR = WATCHDOG_STATE_DIR
SERVICE = WATCHDOG_SERVICE
FAST = WATCHDOG_FAST
state = watchdog_state
journal = watchdog_journal


def assert_group_restarted_in_order(fleet, before, lines):
    """Whole group, in order: every rank is a new container; the worker started before the head."""
    after = fleet.ranks()
    for node in fleet.nodes:
        assert after[node]["running"] and after[node]["id"] != before[node]["id"], (node, before[node], after[node])
    assert after[fleet.worker]["started"] < after[fleet.head]["started"], after
    starts = [m for _t, m in lines if m.startswith("step=start")]
    assert [m.split()[1] for m in starts] == ["host=%s" % fleet.worker, "host=%s" % fleet.head], starts


def _record(name, **fields):
    """reports/faults/<name>.json with the machine's load average beside the seconds."""
    with open("/proc/loadavg") as f:
        fields["load"] = f.read().split()[:3]
    return record(name, **fields)


def head_sh(fleet, script, check=True, timeout=120):
    return node_sh(fleet.head, script, check=check, timeout=timeout)


def first_line(lines, *words):
    for t, m in lines:
        if all(w in m for w in words):
            return t, m
    return None, None


def _plan_line(fleet):
    workers = sorted(fleet.workers, key=lambda h: fleet.rank[h])
    steps = ([("ready", h) for h in [fleet.head] + workers] + [("stop", h) for h in [fleet.head] + workers]
             + [("streak", fleet.head)] + [("settle", h) for h in [fleet.head] + workers]
             + [("start", h) for h in list(reversed(workers)) + [fleet.head]] + [("load", fleet.head)])
    return ",".join("%s:%s" % s for s in steps)


def wait_for(pred, timeout, step=2.0, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))


def wait_restart_done(fleet, since, timeout):
    """The first `result=` line after `since` (the end of one group restart)."""
    def done():
        t, m = first_line(journal(fleet, since), "result=")
        return (t, m) if t else None
    return wait_for(done, timeout, 3, "the watchdog's restart result")


def logs_saved(fleet, stamp):
    out = {}
    for node in fleet.nodes:
        _rc, files, _e = node_sh(node, "ls %s | grep -- '-%s.log$' || true" % (fleet.rank_log_dir, stamp))
        out[node] = files.split()
    return out


@pytest.fixture(scope="module")
def watched(fleet, tmp_path_factory):
    ensure_serving(fleet, tmp_path_factory.mktemp("wd_repair"))
    run = start_playbook("site.yml", tmp_path_factory.mktemp("wd_install"), extravars=FAST,
                         cmdline=["--tags", "vllm_watchdog"])
    assert run.rc == 0, run.output[-6000:]
    # A state left by an earlier session (a give-up, strikes) is cleared the documented way.
    reset = start_playbook("playbooks/watchdog.yml", tmp_path_factory.mktemp("wd_reset"),
                           extravars={"vllm_watchdog_action": "reset"})
    assert reset.rc == 0, reset.output[-4000:]
    wait_for(lambda: state(fleet).get("mode") == "watching", 120, 2, "the watchdog watching")
    yield fleet
    for node in fleet.nodes:
        set_gpu(fleet, node)
    off = start_playbook("site.yml", tmp_path_factory.mktemp("wd_off"), cmdline=["--tags", "vllm_watchdog"])
    assert off.rc == 0, off.output[-4000:]


def test_installed_and_a_serving_group_is_left_alone(watched, tmp_path):
    fleet = watched
    _rc, active, _e = head_sh(fleet, "systemctl is-active %s; systemctl is-enabled %s" % (SERVICE, SERVICE), check=False)
    assert active.split() == ["active", "enabled"]
    before = fleet.ranks()
    t0 = time.time()
    time.sleep(12)
    lines = journal(fleet, t0)
    verdicts = [m for _t, m in lines if m.startswith("verdict=")]
    assert len(verdicts) >= 3, lines
    assert all("action=none" in m for m in verdicts), verdicts
    assert all(m.split()[0] in ("verdict=idle", "verdict=progressing", "verdict=unknown") for m in verdicts), verdicts
    assert "canary=canary answered" in verdicts[-1]
    after = fleet.ranks()
    assert [(after[n]["id"], after[n]["started_at"]) for n in fleet.nodes] == \
        [(before[n]["id"], before[n]["started_at"]) for n in fleet.nodes]
    _rc, prom, _e = head_sh(fleet, "cat %s/dgxspark_vllm_watchdog.prom" % STATE_DIR)
    assert 'dgxspark_vllm_watchdog_state{state="watching"} 1' in prom
    assert "dgxspark_vllm_watchdog_strikes 0" in prom
    # The dedicated key runs the agent's verbs only: anything else is refused by the forced command.
    _rc, out, _e = head_sh(fleet, "ssh -i /etc/dgxspark-vllm-watchdog/id_ed25519 -o BatchMode=yes "
                                  "-o UserKnownHostsFile=%s/known_hosts vllm-watchdog@%s id" % (
                                      STATE_DIR, fleet.address[fleet.worker]), check=False)
    assert json.loads(out)["ok"] is False and "refused" in json.loads(out)["error"]
    # A second run of the role changes nothing.
    again = start_playbook("site.yml", tmp_path, extravars=FAST, cmdline=["--tags", "vllm_watchdog"])
    assert again.rc == 0 and sum(again.stats.get("changed", {}).values()) == 0, \
        [(e["event_data"]["host"], e["event_data"]["task"]) for e in again.changed()]


# vllm_monitoring on the same fleet (issue 33): Prometheus from the node image's Debian packages on the head, the
# shortest scrape interval its kind allows and a short `for`, so the kill below is seen firing and resolving.
MONITOR = {"vllm_monitoring_enabled": True, "vllm_monitoring_scrape_interval_s": 5, "vllm_monitoring_down_for_s": 6}
MON_ROLE = os.path.join(ROOT, "roles", "vllm_monitoring")


def prom_url(fleet, path):
    """A URL of the Prometheus vllm_monitoring runs on the head (its default port)."""
    return "http://%s:9090%s" % (fleet.address[fleet.head], path)


def prom(fleet, expr):
    """An instant query to Prometheus's HTTP API on the head: the result vector."""
    status, body = http_json(prom_url(fleet, "/api/v1/query?" + urllib.parse.urlencode({"query": expr})), timeout=30)
    assert status == 200 and body["status"] == "success", body
    return body["data"]["result"]


def alerts_page(fleet, png):
    """Prometheus's alerts page (the Debian package's server-rendered UI) in headless Chromium: a screenshot saved
    at png, and the page's DOM returned."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: bash tools/host-deps.sh installs it"
    # Debian's package serves the classic UI under /classic (its / redirects there; /alerts is a 404)
    url = prom_url(fleet, "/classic/alerts")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server", "--hide-scrollbars"]
    os.makedirs(os.path.dirname(png), exist_ok=True)
    subprocess.run(flags + ["--window-size=1280,1200", "--screenshot=" + png, url], capture_output=True,
                   timeout=120, check=True)
    return subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120,
                          check=True).stdout


def stop_monitoring(fleet):
    for node in fleet.nodes:
        node_sh(node, "systemctl disable --now prometheus prometheus-node-exporter 2>/dev/null || true", check=False)


@pytest.fixture(scope="module")
def monitored(watched, tmp_path_factory):
    run = start_playbook("site.yml", tmp_path_factory.mktemp("mon_install"), extravars=MONITOR,
                         cmdline=["--tags", "vllm_monitoring"])
    assert run.rc == 0, run.output[-6000:]
    yield watched
    stop_monitoring(watched)  # the scenarios after these pay no scrape every 5 s


def _recorded(fleet):
    """{record: expected to have data}: every recording rule of the role; spec-decode ones only on a lane that
    drafts (vLLM exposes no spec-decode counter without a draft model)."""
    with open(os.path.join(MON_ROLE, "files", "dgxspark-vllm-recording.yml")) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    drafts = bool(fleet.lane["serve"].get("speculative_config"))
    return dict((r["record"], drafts or "spec_decode" not in r["expr"]) for r in rules)


def test_prometheus_scrapes_the_engine_the_nodes_and_the_watchdog(monitored, tmp_path):
    fleet = monitored
    again = start_playbook("site.yml", tmp_path, extravars=MONITOR, cmdline=["--tags", "vllm_monitoring"])
    assert again.rc == 0 and sum(again.stats.get("changed", {}).values()) == 0, \
        [(e["event_data"]["host"], e["event_data"]["task"]) for e in again.changed()]
    for _i in range(3):
        fleet.chat()  # tokens for the rate, latency and TTFT rules
    targets = {}

    def all_up():
        _status, body = http_json(prom_url(fleet, "/api/v1/targets?state=active"), timeout=30)
        targets.clear()
        for t in body["data"]["activeTargets"]:
            targets.setdefault(t["labels"]["job"], []).append((t["labels"].get("node"), t["health"]))
        return all(h == "up" for ts in targets.values() for _n, h in ts)
    wait_for(all_up, 90, 2, "every scrape target up")
    assert sorted(targets["vllm"]) == [(fleet.head, "up")]
    assert sorted(targets["node"]) == sorted((n, "up") for n in fleet.nodes)
    # VllmDecodeSlow follows the head's history: its threshold is the ratio times what a passing benchmark measured
    # on the deployment that serves, and there is no such rule when none did (a run that skipped the benchmark)
    from ansible_collections.dgxspark.vllm.plugins.module_utils import history as H  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "roles", "shared_defaults", "defaults", "main.yml")) as f:
        history_dir = yaml.safe_load(f)["vllm_health_history_dir"]
    _rc, text, _e = node_sh(fleet.head, "cat %s/%s" % (history_dir, H.FILE_NAME))
    baseline = H.decode_baseline(H.last_known_good(H.parse(text)[0]), fleet.lane["name"])
    _status, body = http_json(prom_url(fleet, "/api/v1/rules?type=alert"), timeout=30)
    slow = [r["query"] for g in body["data"]["groups"] for r in g["rules"] if r["name"] == "VllmDecodeSlow"]
    with open(os.path.join(MON_ROLE, "defaults", "main.yml")) as f:
        ratio = yaml.safe_load(f)["vllm_monitoring_decode_min_ratio"]
    assert len(slow) == (0 if baseline is None else 1), (baseline, slow)
    assert all(q.endswith("< %s" % (baseline * ratio)) for q in slow), (baseline, slow)
    # the watchdog's textfile through the head's node-exporter (watching again once the runs above released their
    # hold), and each node's GPU as its nvidia-smi reads now
    wait_for(lambda: [r["metric"]["node"] for r in prom(fleet, 'dgxspark_vllm_watchdog_state{state="watching"} == 1')]
             == [fleet.head], 60, 2, "the watchdog's state watching, through node-exporter")
    power = {}
    for node in fleet.nodes:
        _rc, out, _e = node_sh(node, "nvidia-smi --query-gpu=power.draw --format=csv,noheader,nounits")
        power[node] = float(out.split()[0])
    wait_for(lambda: sorted(r["metric"].get("host") for r in prom(fleet, "dgxspark_vllm:gpu_power:watts"))
             == sorted(fleet.nodes), 60, 2, "a GPU power series per node")
    seen_power = dict((r["metric"]["host"], float(r["value"][1])) for r in prom(fleet, "dgxspark_vllm:gpu_power:watts"))
    assert seen_power == power
    # every recording rule (so every dashboard panel, which draws only these) has data; the empty ones are exactly
    # those the lane cannot feed
    want = _recorded(fleet)
    samples = {}

    def recorded():
        samples.clear()
        samples.update((name, prom(fleet, name)) for name in want)
        return all(bool(samples[n]) == has for n, has in want.items())
    wait_for(recorded, 120, 3, "data for every recording rule the lane feeds")
    with open(os.path.join(MON_ROLE, "files", "grafana-dashboard.json")) as f:
        panels = json.load(f)["panels"]
    values = dict((p["title"], [(t["expr"], [(s["metric"], s["value"][1]) for s in samples[t["expr"]]][:3])
                                for t in p["targets"]]) for p in panels)
    assert float(samples["dgxspark_vllm:requests_running:sum"][0]["value"][1]) >= 0
    record("monitoring_scrape", targets=targets, panels=values, decode_baseline=baseline, decode_slow=slow,
           empty=sorted(n for n, has in want.items() if not has))


def assert_acted_at_once(fleet, rec, verdict):
    """The first cycle that sees the fact (a rank container not running) acts: its verdict line is the restart, no
    confirm cycle. A cycle that read the containers just before the kill and /health just after sees only the probe
    and confirms: that line is not the fact's."""
    verdicts = [m for _t, m in journal(fleet, rec["t_fault"]) if "verdict=" in m and " action=" in m]
    seen = [m for m in verdicts if "verdict=%s " % verdict in m and "is not running" in m]
    assert seen and "verdict=%s action=restart_group" % verdict in seen[0], verdicts[:4]


def _restart_scenario(fleet, name, inject, expect_verdict):
    before = fleet.ranks()
    t_fault = time.time()
    inject()
    # a loaded machine has taken 591 s from the fault to serving (docs/watchdog.md): the wait leaves room
    t_end, result = wait_restart_done(fleet, t_fault, 900)
    lines = journal(fleet, t_fault)
    t_detect, verdict_line = first_line(lines, "verdict=%s" % expect_verdict)
    assert t_detect, lines
    t_act, action = first_line(lines, "action=restart_group stamp=")
    # the one plan (lifecycle.plan, the steps vllm_ranks runs too), head first to stop, head last to start
    assert action and action.endswith(" order=%s" % _plan_line(fleet)), (action, lines)
    assert "result=serving" in result, result
    assert_group_restarted_in_order(fleet, before, lines)
    stamp = action.split("stamp=")[1].split()[0]
    saved = logs_saved(fleet, stamp)
    assert all(saved[n] for n in fleet.nodes), saved
    fleet.chat()
    t_serving = time.time()
    st = state(fleet)
    assert st["strikes"] == 0 and st["last_restart_ok"] is True
    return _record("watchdog_" + name, fault=name, t_fault=t_fault, verdict=expect_verdict, verdict_line=verdict_line,
                   detected_s=round(t_detect - t_fault, 1), restart_started_s=round(t_act - t_fault, 1),
                   serving_again_s=round(t_end - t_fault, 1), chat_ok_s=round(t_serving - t_fault, 1),
                   logs_kept=saved, strikes=st["strikes"], restarts_total=st["restarts_total"])


def test_kill_head_container_group_restarted_worker_first(monitored):
    fleet = monitored
    png = os.path.join(ROOT, "reports", "faults", "prometheus-alerts-kill-head.png")
    page = {}

    def kill_and_look():
        node_docker(fleet.head, "kill", fleet.container)
        # while the group is down: the alert fires, and the alerts page shows it (the restart takes far longer)
        wait_for(lambda: prom(fleet, 'ALERTS{alertname="VllmEndpointDown",alertstate="firing"}'), 120, 2,
                 "VllmEndpointDown firing")
        page["dom"] = alerts_page(fleet, png)
    rec = _restart_scenario(fleet, "kill_head", kill_and_look, "head_down")
    # the page lists every alerting rule Prometheus loaded, and the firing one with its active alert
    rules = http_json(prom_url(fleet, "/api/v1/rules?type=alert"), timeout=30)[1]
    names = sorted(r["name"] for g in rules["data"]["groups"] for r in g["rules"])
    assert "VllmEndpointDown" in names and "VllmRankDead" in names, names
    missing = [n for n in names if "<b>%s</b>" % n not in page["dom"]]
    assert not missing, (missing, page["dom"][:2000])
    assert "<b>VllmEndpointDown</b> (1 active)" in page["dom"]
    assert int(re.search(r"Firing \((\d+)\)", page["dom"]).group(1)) >= 1
    assert os.path.getsize(png) > 10000  # a rendered page, not an error stub
    assert rec["serving_again_s"] > 0
    # a stopped container is a fact (lifecycle.decide): the first cycle that sees it acts, no confirm cycle (its
    # seconds are recorded, never asserted: a timed assertion fails on a loaded machine)
    assert_acted_at_once(fleet, rec, "head_down")
    # Prometheus saw the endpoint down long enough to fire VllmEndpointDown, and the alert resolved once it served
    window = "%ds" % (time.time() - rec["t_fault"] + 30)
    fired = prom(fleet, 'max_over_time(ALERTS{alertname="VllmEndpointDown",alertstate="firing"}[%s])' % window)
    assert [r["value"][1] for r in fired] == ["1"], fired
    wait_for(lambda: not prom(fleet, 'ALERTS{alertname="VllmEndpointDown"}'), 60, 2, "VllmEndpointDown resolved")
    # the restart's count reaches Prometheus after the watchdog's next write, a node-exporter scrape and a rule run
    restarts = []

    def counted():
        restarts[:] = prom(fleet, "dgxspark_vllm:watchdog_restarts:increase1h")
        return restarts and float(restarts[0]["value"][1]) > 0
    wait_for(counted, 90, 3, "the restart counted by dgxspark_vllm:watchdog_restarts:increase1h")
    alerts = prom(fleet, 'max_over_time(ALERTS{alertstate="firing"}[%s])' % window)
    record("monitoring_kill_head", fired=sorted(set(r["metric"]["alertname"] for r in alerts)),
           restarts_increase1h=restarts[0]["value"][1], alert_rules=names, screenshot=png)
    stop_monitoring(fleet)


def test_watchdog_restarted_while_the_group_it_started_loads_no_second_restart(watched):
    """Issue 28's first case: the head's rank killed, the watchdog restarts the group, and while the new group
    loads the watchdog's own service is restarted. The new instance finds the load record inside its deadline
    with every rank running: it waits (action=wait), never a second restart, and the group serves."""
    fleet = watched
    before = fleet.ranks()
    t_fault = time.time()
    node_docker(fleet.head, "kill", fleet.container)

    def head_started():
        t, m = first_line(journal(fleet, t_fault), "step=start host=%s" % fleet.head)
        return (t, m) if t else None
    wait_for(head_started, 600, 1, "the head's start inside the watchdog's restart")

    def new_load():
        _rc, out, _e = head_sh(fleet, "cat /var/lib/dgxspark-vllm/group-load.json", check=False)
        try:
            rec = json.loads(out)
        except ValueError:
            return None
        return rec if rec["started"] >= t_fault and rec["done"] is None else None
    record = wait_for(new_load, 30, 0.5, "the load record of the watchdog's restart")
    assert record["by"] == "watchdog" and record["deadline_s"] == FAST["vllm_watchdog_health_gate_timeout_s"], record
    t_svc = time.time()
    head_sh(fleet, "systemctl restart %s" % SERVICE)

    def served():
        _rc, out, _e = head_sh(fleet, "cat /var/lib/dgxspark-vllm/group-load.json", check=False)
        try:
            return json.loads(out).get("done")
        except ValueError:
            return None
    wait_for(served, 900, 3, "the load marked served by the restarted watchdog")
    t_serving = time.time()
    fleet.chat()
    time.sleep(6)  # two more cycles: nothing happens once it serves
    lines = journal(fleet, t_fault)
    attempts = [m for _t, m in lines if "action=restart_group stamp=" in m]
    assert len(attempts) == 1, attempts
    t_boot, boot = first_line(journal(fleet, t_svc), "boot verdict=")
    assert boot and "action=wait cause=loading since" in boot and "started by watchdog" in boot, boot
    after = fleet.ranks()
    assert all(after[n]["running"] and after[n]["id"] != before[n]["id"] for n in fleet.nodes), after
    t_detect, _v = first_line(lines, "verdict=head_down")
    t_act, _a = first_line(lines, "action=restart_group stamp=")
    _record("watchdog_restarted_during_load", fault="head's rank killed, then the watchdog's service restarted while "
            "the new group loads", verdict="head_down, then loading", boot_line=boot,
            detected_s=round(t_detect - t_fault, 1), restart_started_s=round(t_act - t_fault, 1),
            service_restarted_s=round(t_svc - t_fault, 1), serving_again_s=round(t_serving - t_fault, 1),
            restarts=len(attempts))


def test_sigkill_worker_rank_whole_group_restarted(watched):
    fleet = watched
    rec = _restart_scenario(fleet, "kill_worker",
                            lambda: node_docker(fleet.worker, "kill", "-s", "KILL", fleet.container), "rank_dead")
    assert rec["serving_again_s"] > 0
    assert_acted_at_once(fleet, rec, "rank_dead")  # a fact: at once
    # the catalogue (diagnose.explain, run by the worker's agent on the log it saved) names the cause
    lines = journal(fleet, rec["t_fault"])
    _t, stop = first_line(lines, "step=stop host=%s" % fleet.worker)
    assert stop and stop.endswith("catalogue: rank_killed"), lines


def test_head_killed_with_a_persistent_fault_three_strikes_then_give_up(watched, tmp_path):
    """The head's rank is killed while a fault persists on the worker: head_down, three whole-group restarts
    that never start the head (the worker, started first, exits each time), a give-up file naming the cause
    through the catalogue, no fourth attempt; after the fix, the documented reset brings the group back
    worker-first. (make test-watchdog also kills the head of a healthy group alone.)"""
    fleet = watched
    # The persistent fault: the worker's rank spec carries a flag vLLM refuses, so every start of that rank
    # exits (a bad local edit). The file is backed up and restored after the give-up.
    spec = "/var/lib/dgxspark-vllm/rank.json"
    before = fleet.ranks()
    node_sh(fleet.worker, "cp -p %s %s.test-backup" % (spec, spec))
    node_sh(fleet.worker, "python3 -c \"import json; p='%s'; d=json.load(open(p)); "
                          "d['spec']['command'].append('--no-such-flag'); json.dump(d, open(p, 'w'))\"" % spec)
    try:
        t0 = time.time()
        node_docker(fleet.head, "kill", fleet.container)
        wait_for(lambda: head_sh(fleet, "test -f %s/gave-up.json" % STATE_DIR, check=False)[0] == 0, 1500, 5,
                 "the give-up file")
        t_gave_up = time.time()
        _rc, out, _e = head_sh(fleet, "cat %s/gave-up.json" % STATE_DIR)
        gave = json.loads(out)
        assert "3 failed restarts in a row" in gave["reason"], gave
        assert gave["strikes"] == 3 and gave["evidence"], gave
        # the cause, through the catalogue's explain on the failed start (no entry matches a refused flag: the
        # note says so and quotes the rank's last lines)
        assert [d for d in gave["diagnosis"] if d.startswith("%s: rank 1 did not come up (exited): " % fleet.worker)
                and "--no-such-flag" in d], gave
        time.sleep(15)  # five cycles: no fourth attempt
        lines = journal(fleet, t0)
        t_detect, _verdict = first_line(lines, "verdict=head_down")
        assert t_detect, lines
        attempts = [m for _t, m in lines if "action=restart_group stamp=" in m]
        assert len(attempts) == 3, attempts
        assert all(m.endswith(" order=%s" % _plan_line(fleet)) for m in attempts), attempts
        assert [m for _t, m in lines if "action=give_up" in m]
        # workers first, head last: the head is never started while the worker's start fails
        starts = [m.split()[1] for _t, m in lines if m.startswith("step=start")]
        assert starts and set(starts) == {"host=%s" % fleet.worker}, starts
        stamps = [m.split("stamp=")[1].split()[0] for m in attempts]
        kept = dict((s, logs_saved(fleet, s)) for s in stamps)
        # every attempt saved every rank it removed: both ranks on the first, then the worker's failed start
        assert all(kept[stamps[0]][n] for n in fleet.nodes), kept
        assert all(kept[s][fleet.worker] for s in stamps), kept
        st = state(fleet)
        assert st["mode"] == "gave_up" and st["strikes"] == 3
        _rc, prom, _e = head_sh(fleet, "cat %s/dgxspark_vllm_watchdog.prom" % STATE_DIR)
        assert "dgxspark_vllm_watchdog_gave_up 1" in prom
    finally:
        node_sh(fleet.worker, "mv %s.test-backup %s" % (spec, spec))
    # The documented reset after the fix: the watchdog acts again and brings the group back, worker first.
    t_reset = time.time()
    run = start_playbook("playbooks/watchdog.yml", tmp_path, extravars={"vllm_watchdog_action": "reset"})
    assert run.rc == 0, run.output[-4000:]
    t_end, result = wait_restart_done(fleet, t_reset, 900)
    assert "result=serving" in result, result
    assert_group_restarted_in_order(fleet, before, journal(fleet, t_reset))
    fleet.chat()
    st = wait_for(lambda: state(fleet).get("mode") == "watching" and state(fleet), 60, 2, "the watchdog watching")
    assert st["strikes"] == 0, st
    _record("watchdog_give_up", fault="head's rank killed while the worker's rank spec carries a flag vLLM refuses "
            "(persists)", verdict="head_down", detected_s=round(t_detect - t0, 1), attempts=len(attempts),
            gave_up_s=round(t_gave_up - t0, 1), gave_up=gave, logs_kept=kept, strikes=3,
            reset_to_serving_s=round(t_end - t_reset, 1))


def _stop_engine(fleet, node, sig):
    _rc, out, _e = node_docker(node, "top", fleet.container, "-eo", "pid")
    pids = [p for p in out.split()[1:] if p.isdigit()]
    assert pids
    node_sh(node, "kill -%s %s" % (sig, " ".join(pids)))
    return pids


def _running(fleet):
    """vllm:num_requests_running on the head's /metrics (0 when it does not answer)."""
    try:
        _status, text = http_json(fleet.base_url + "/metrics", timeout=10)
    except (urllib.error.URLError, OSError, ValueError):
        return 0
    lines = [ln for ln in str(text).splitlines() if ln.startswith("vllm:num_requests_running")]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def _in_flight(fleet, n=4):
    def one():
        try:
            http_json(fleet.base_url + "/v1/completions", {"model": fleet.model, "prompt": "count: 1 2 3",
                                                           "max_tokens": 480, "ignore_eos": True, "temperature": 0}, timeout=600)
        except (urllib.error.URLError, OSError, ValueError):
            pass
    threads = [threading.Thread(target=one, daemon=True) for _i in range(n)]
    for t in threads:
        t.start()
    return threads


def test_frozen_engine_long_prefill_at_normal_power_then_wedged_at_low_power(watched):
    fleet = watched
    for node in fleet.nodes:
        set_gpu(fleet, node, utilization_gpu="96", power_draw="61.20", clocks_sm="2405")
    before = fleet.ranks()
    _in_flight(fleet)
    # the engine is stopped while requests are in flight, read from its own /metrics (a fixed sleep let short
    # requests finish first on a quiet machine: the verdict was then idle, never long_prefill)
    wait_for(lambda: _running(fleet) > 0, 60, 0.2, "requests running on the engine")
    t_stop = time.time()
    _stop_engine(fleet, fleet.worker, "STOP")
    assert _running(fleet) > 0, "the requests finished before the engine was stopped"
    # Same frozen counters at normal power: long prefill, no action, for two windows. A cycle lasts up to the
    # canary's timeout (30 s) while the engine is frozen, so the verdict is waited for, then two more windows.

    def long_prefill():
        t, m = first_line(journal(fleet, t_stop), "verdict=long_prefill")
        return (t, m) if t else None
    t_lp, lp = wait_for(long_prefill, 150, 3, "a long_prefill verdict")
    assert "action=none" in lp, lp
    time.sleep(20)
    lines = journal(fleet, t_stop)
    assert not [m for _t, m in lines if "action=restart_group" in m or "verdict=wedged" in m], lines
    now = fleet.ranks()
    assert [(now[n]["id"], now[n]["started_at"]) for n in fleet.nodes] == \
        [(before[n]["id"], before[n]["started_at"]) for n in fleet.nodes]
    # Now the GPUs spin at low power: wedged, whole group restarted.
    for node in fleet.nodes:
        set_gpu(fleet, node, utilization_gpu="96", power_draw="12.40", clocks_sm="2405")
    rec = _restart_scenario(fleet, "wedged", lambda: None, "wedged")
    for node in fleet.nodes:
        set_gpu(fleet, node)
    _record("watchdog_long_prefill", fault="SIGSTOP on the worker's engine, GPU at 61.2 W", verdict="long_prefill",
            detected_s=round(t_lp - t_stop, 1), action="none", restarted=False)
    assert rec["verdict"] == "wedged"


def test_node_reboot_group_comes_back_in_order(watched):
    """Restart the head's node container (a reboot): the watchdog starts at boot with it, waits until every
    node answers and is ready, then restarts the whole group worker-first with no person."""
    fleet = watched
    before = fleet.ranks()
    t0 = time.time()
    subprocess.run(["docker", "restart", fleet.head], check=True, capture_output=True, timeout=300)
    t_up = time.time()
    # the rebooted node's journal starts empty: the first result line after the boot ends the restart
    t_end, result = wait_restart_done(fleet, t0, 900)
    lines = journal(fleet, t0)
    assert first_line(lines, "start nodes=")[0], lines
    t_act, action = first_line(lines, "action=restart_group stamp=")
    assert action and "head_down" in action, lines
    assert "result=serving" in result, result
    assert_group_restarted_in_order(fleet, before, lines)
    # every node's readiness (rank spec, image, mounted files; swap, swappiness, MTU when the lane asks) was
    # checked after the boot and before any rank was touched
    ready = [(t, m) for t, m in lines if m.startswith("step=ready")]
    assert sorted(m.split()[1] for _t, m in ready) == sorted("host=%s" % n for n in fleet.nodes), lines
    assert all("rank_spec,image,files" in m for _t, m in ready), ready
    assert max(t for t, _m in ready) <= first_line(lines, "step=stop")[0], lines
    stamp = action.split("stamp=")[1].split()[0]
    saved = logs_saved(fleet, stamp)
    assert saved[fleet.worker], saved
    fleet.chat()
    st = state(fleet)
    assert st["strikes"] == 0 and st["last_restart_ok"] is True
    _record("watchdog_reboot", fault="docker restart of the head's node container", verdict="head_down",
            verdict_line=action, node_back_s=round(t_up - t0, 1), restart_started_s=round(t_act - t0, 1),
            serving_again_s=round(t_end - t0, 1), logs_kept=saved, strikes=st["strikes"])


def test_worker_node_powered_off_then_back_one_restart_naming_the_worker(watched):
    """Issue 28's second case: the worker's node is powered off (its node container killed, no clean stop) for
    longer than a confirm window, then powered on. The watchdog names the worker, not the head whose rank dies or
    hangs after it; its one group restart waits for the node to answer (no strike spent while it is away) and
    brings the group back worker first. The incident log's first cause is the worker."""
    fleet = watched
    before = fleet.ranks()
    away_s = 3 * FAST["vllm_watchdog_window_s"]  # well past a confirm window (2 cycles of 3 s)
    t_fault = time.time()
    subprocess.run(["docker", "kill", fleet.worker], check=True, capture_output=True, timeout=120)
    try:
        def named():
            t, m = first_line(journal(fleet, t_fault), "verdict=", "on %s" % fleet.worker, "unreachable")
            return (t, m) if t else None
        t_detect, verdict_line = wait_for(named, 300, 2, "a verdict naming the powered-off worker")
        time.sleep(max(0.0, away_s - (time.time() - t_fault)))
        away = state(fleet)
        assert away.get("strikes", 0) == 0, away  # waiting for a node spends no strike
        lines_away = journal(fleet, t_fault)
        assert not [m for _t, m in lines_away if m.startswith("result=")], lines_away  # nothing finished while away
    finally:
        t_on = time.time()
        subprocess.run(["docker", "start", fleet.worker], check=True, capture_output=True, timeout=300)
    t_end, result = wait_restart_done(fleet, t_fault, 900)
    assert "result=serving" in result, result
    lines = journal(fleet, t_fault)
    attempts = [(t, m) for t, m in lines if "action=restart_group stamp=" in m]
    assert len(attempts) == 1, attempts
    assert fleet.worker in attempts[0][1] and "unreachable" in attempts[0][1], attempts
    waits = [m for _t, m in lines if m.startswith("action=wait_for_nodes")]
    assert waits and all(fleet.worker in m for m in waits), waits
    assert_group_restarted_in_order(fleet, before, lines)
    _rc, text, _e = head_sh(fleet, "cat %s/incidents.jsonl" % STATE_DIR)
    events = [json.loads(x) for x in text.splitlines() if x.strip()]
    starts = [e for e in events if e["event"] == "start" and e["time"] >= t_fault - 1]
    assert len(starts) == 1 and starts[0]["hosts"] == [fleet.worker], starts
    assert fleet.worker in starts[0]["cause"] and "unreachable" in starts[0]["cause"], starts
    ends = [e for e in events if e["event"] == "end" and e["start"] == starts[0]["time"]]
    assert len(ends) == 1 and ends[0]["actions"] >= 2, ends  # the restart and its result
    fleet.chat()
    st = state(fleet)
    assert st["strikes"] == 0 and st["last_restart_ok"] is True, st
    _record("watchdog_worker_powered_off", fault="docker kill of the worker's node container for %d s, then docker "
            "start" % away_s, verdict_line=verdict_line, detected_s=round(t_detect - t_fault, 1),
            powered_on_s=round(t_on - t_fault, 1), restart_started_s=round(attempts[0][0] - t_fault, 1),
            serving_again_s=round(t_end - t_fault, 1), restarts=len(attempts), waits=len(waits),
            seconds_without_service=ends[0]["seconds_without_service"], strikes=st["strikes"])
