# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The group's lifecycle (design.md section 8): pure decisions and one ordered restart procedure.

Standard library only: the vllm_watchdog role copies this file to the nodes, where the watchdog program
runs `restart()` over its agents. The procedure runs over a small node interface (`Nodes` below), so it is
unit-tested with a fake one.

Order (catalogue rendezvous_timeout, worker_orphaned): every node ready; stop every rank, head first, each
rank's log saved before removal; memory ritual and settle gate on every node (with the head's port guard);
start the workers from the highest rank down, the head last, each start verified (launch_errors); record the
load (start time and deadline, in a file that survives the watchdog's restart); the health gate, failed at
once by a rank that exits while the group loads.

Decisions: facts (a rank container that exited, a node that rebooted) act in the same cycle; probes (/health,
canary, /metrics) act after confirmation; a group inside its loading deadline whose ranks run is `loading`
and is left alone; an incident's cause is the first failure observed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import time

try:
    from ansible_collections.dgxspark.vllm.plugins.module_utils.verdict import group_order
except ImportError:  # pragma: no cover - the watchdog's lib dir always holds the package
    from verdict import group_order  # type: ignore

LOAD_RECORD_NAME = "group-load.json"
INCIDENT_LOG_NAME = "incidents.jsonl"
# A container state that is a fact (docker says so), not a probe that may be flaky.
EXITED_STATES = ("exited", "dead", "created", "restarting", "removing", "paused")


# --------------------------------------------------------------------------------------------
# A playbook run's hold on the watchdog (state_dir/hold.json; docs/watchdog.md "A run's hold")
# --------------------------------------------------------------------------------------------

HOLD_NAME = "hold.json"
HOLD_COVERS = ("run", "group_restart")


def group_restart_wait_s(nodes, settle_s, worker_wait_s, head_wait_s):
    """The longest a whole-group restart (plan()) may wait on its nodes: a settle on every node, each worker's
    ready line, the head's; the steps run one after the other, so the deadlines add up."""
    nodes = int(nodes)
    if nodes < 1:
        raise ValueError("a group has at least one node, got %r" % nodes)
    return nodes * float(settle_s) + (nodes - 1) * float(worker_wait_s) + float(head_wait_s)


def hold_record(by, now, base_s, covers="run", restart_wait_s=0.0):
    """The hold a run writes (and writes again at each renewal): it lapses base_s seconds after it was written, or,
    before a stretch of the run that cannot renew it (covers 'group_restart': the ranks play), base_s plus that
    stretch's own deadlines - no longer than the run itself would wait there."""
    base_s = float(base_s)
    if base_s <= 0:
        raise ValueError("the hold's ttl must be positive, got %r" % base_s)
    if covers not in HOLD_COVERS:
        raise ValueError("covers must be one of %s, got %r" % (", ".join(HOLD_COVERS), covers))
    ttl_s = base_s + (float(restart_wait_s) if covers == "group_restart" else 0.0)
    return {"by": str(by), "since": float(now), "ttl_s": ttl_s, "covers": covers, "expires": float(now) + ttl_s}


def hold_state(hold, now):
    """Whether a hold read from hold.json holds the watchdog at `now`: (held, remaining_s, why).

    Missing or damaged (not an object, since/ttl_s not numbers, ttl_s <= 0): not held. A hold never lasts more than
    its ttl_s from now, so a clock stepped back (since in the future) cannot stretch it."""
    if hold is None:
        return False, 0.0, "no hold"
    if not isinstance(hold, dict):
        return False, 0.0, "damaged hold (not a JSON object): ignored"
    try:
        since, ttl_s = float(hold["since"]), float(hold["ttl_s"])
    except (KeyError, TypeError, ValueError):
        return False, 0.0, "damaged hold (since, ttl_s): ignored"
    if not (math.isfinite(since) and math.isfinite(ttl_s)) or ttl_s <= 0:
        return False, 0.0, "damaged hold (since %r, ttl_s %r): ignored" % (hold.get("since"), hold.get("ttl_s"))
    remaining = min(since + ttl_s - float(now), ttl_s)
    if remaining <= 0:
        return False, 0.0, "hold by %s lapsed %.0f s ago" % (hold.get("by", "?"), float(now) - since - ttl_s)
    return True, remaining, "held by a playbook run (%s), %.0f s left" % (hold.get("by", "?"), remaining)


# --------------------------------------------------------------------------------------------
# The loading record: on the head, beside the rank spec file vllm_ranks writes
# --------------------------------------------------------------------------------------------

def load_record_path(rank_spec_file):
    """The one path of the record, derived from the rank spec file (vllm_ranks and the watchdog both know it)."""
    return os.path.join(os.path.dirname(rank_spec_file), LOAD_RECORD_NAME)


def load_record(started, deadline_s, by):
    """A load begun at `started` (epoch s) that must serve within deadline_s seconds."""
    deadline_s = float(deadline_s)
    if deadline_s <= 0:
        raise ValueError("deadline_s must be positive, got %r" % deadline_s)
    return {"started": float(started), "deadline": float(started) + deadline_s, "deadline_s": deadline_s,
            "by": str(by), "done": None}


def write_json(path, data):
    """Write atomically (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.rename(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def phase(record, now, ranks):
    """The group's phase from the load record and the ranks ([{rank, host, running}], running None when the
    node did not answer): 'exited' (a rank container is not running: a fact), 'loading' (inside the deadline,
    every rank running), 'load_expired' (the deadline passed and the load never served), or 'steady'."""
    if [r for r in ranks if r.get("running") is False]:
        return "exited"
    if not record or record.get("done"):
        return "steady"
    if now >= float(record.get("deadline") or 0):
        return "load_expired"
    if all(r.get("running") is True for r in ranks):
        return "loading"
    return "steady"


def decide(verdict, group_phase, pending, confirm_cycles):
    """What the watchdog does this cycle. verdict: verdict.classify()'s dict; pending: restart verdicts seen in
    the cycles before this one. Returns (action, pending): action 'restart_group' (at once for a fact, an
    expired load or a loading livelock, after confirm_cycles for a probe), 'confirm', 'wait' (a load inside its deadline) or 'none'."""
    if group_phase == "loading":
        return "wait", 0
    if group_phase in ("exited", "load_expired", "livelock"):
        return "restart_group", 0
    if verdict.get("action") != "restart_group":
        return "none", 0
    pending += 1
    return ("restart_group" if pending >= confirm_cycles else "confirm"), pending


def canary_wedged(streak, needed, gpu_states):
    """N canaries in a row that failed or timed out while /health answers 200: wedged, unless a GPU draws power
    at or above the floor (verdict.gpu_state 'computing': a long prefill). Returns a cause or None."""
    if needed <= 0 or streak < needed:
        return None
    computing = sorted(h for h, st in (gpu_states or {}).items() if st == "computing")
    if computing:
        return None
    return ("%d canaries in a row failed or timed out while /health answers 200 and no GPU draws power at or "
            "above the floor (%s): the engine is wedged behind its /health"
            % (streak, ", ".join("%s %s" % (h, s) for h, s in sorted((gpu_states or {}).items())) or "no GPU reading"))


# --------------------------------------------------------------------------------------------
# Incidents: the first cause wins; one JSON line per event on the head
# --------------------------------------------------------------------------------------------

def open_incident(incident, now, cause, hosts=None):
    """The incident in progress, opened at the first failure observed; a later cause never replaces it.
    hosts: the hosts the cause names (verdict.classify's `hosts`), kept so the diagnoses of a restart can be
    ordered root cause first (cause_first). Returns (incident, opened_now)."""
    if incident:
        return incident, False
    return {"start": now, "cause": cause, "hosts": list(hosts or []), "actions": []}, True


def start_event(incident):
    """The log line that opens an incident."""
    return {"event": "start", "time": incident["start"], "cause": incident["cause"], "hosts": incident.get("hosts") or []}


def action_event(incident, now, action, detail, **extra):
    """The log line of one action in an incident (a restart begun, its result with the saved log paths)."""
    incident.setdefault("actions", []).append(action)
    return dict(extra, event="action", time=now, action=action, detail=detail, cause=incident["cause"])


def close_incident(incident, now):
    """The end event of an incident: seconds without service from its first failure."""
    return {"event": "end", "time": now, "start": incident["start"], "cause": incident["cause"],
            "hosts": incident.get("hosts") or [], "actions": len(incident.get("actions") or []),
            "seconds_without_service": round(now - float(incident["start"]), 1)}


def append_incident(path, event):
    with open(path, "a") as f:
        f.write(json.dumps(event, sort_keys=True) + "\n")


def cause_first(diagnoses, hosts):
    """The diagnoses of a restart (named(): 'host: what: line') with those of the first cause's hosts first, the
    others in their order (the head is stopped first, so its 'rank 0 had stopped' would otherwise lead when a worker
    that became unreachable took it down)."""
    prefixes = tuple("%s: " % h for h in hosts or [])
    if not prefixes:
        return list(diagnoses)
    return [d for d in diagnoses if d.startswith(prefixes)] + [d for d in diagnoses if not d.startswith(prefixes)]


def parse_incident_log(text):
    """The events of incidents.jsonl (one JSON object a line); a line cut short (a crash mid-write, or a log read
    from its tail) is skipped."""
    out = []
    for line in (text or "").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") in ("start", "action", "end"):
            out.append(ev)
    return out


def incidents(events):
    """Incidents from the log's events, oldest first: [{start, cause, hosts, actions: [{time, action, detail}],
    end (None while open), seconds_without_service (None while open)}]. A log read from its tail may begin inside
    an incident: its start is then taken from the end line (or, while open, its first action line)."""
    out, cur = [], None

    def new(ev, start):
        return {"start": float(start), "cause": ev.get("cause") or "", "hosts": list(ev.get("hosts") or []),
                "actions": [], "end": None, "seconds_without_service": None}
    for ev in events:
        kind, t = ev.get("event"), float(ev.get("time") or 0)
        if kind == "start":
            if cur is not None:  # its end was never written (the state was lost): it ended when this one began
                cur.update(end=t, seconds_without_service=round(t - cur["start"], 1))
            cur = new(ev, t)
            out.append(cur)
        elif kind == "action":
            if cur is None:
                cur = new(ev, t)
                out.append(cur)
            cur["actions"].append({"time": t, "action": ev.get("action"), "detail": ev.get("detail")})
        elif kind == "end":
            if cur is None:
                cur = new(ev, t)
                out.append(cur)
            if ev.get("start") is not None:  # the end line carries the first failure's time: it wins
                cur["start"] = float(ev["start"])
            cur.update(end=t, seconds_without_service=round(t - cur["start"], 1))
            cur = None
    return out


def availability(incs, now, span_s=86400.0):
    """The share of the last span_s seconds outside every incident (an open one lasts until now): {span_s,
    down_s, availability_pct, incidents (how many overlap the span)}. Only what the log records counts: time
    the watchdog did not watch (not installed, stopped, paused before an incident) counts as serving."""
    since = now - float(span_s)
    down, seen = 0.0, 0
    for inc in incs:
        end = now if inc.get("end") is None else min(float(inc["end"]), now)
        part = end - max(float(inc["start"]), since)
        if part > 0:
            down += part
            seen += 1
    down = min(down, float(span_s))
    return {"span_s": float(span_s), "down_s": round(down, 1), "incidents": seen,
            "availability_pct": round(100.0 * (1.0 - down / float(span_s)), 3)}


def _utc(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))


def readable_incident(inc, now):
    """One incident for people: times in UTC, each action on one line, an open one's seconds so far."""
    open_ = inc.get("end") is None
    return {"start": _utc(inc["start"]), "first_cause": inc.get("cause") or "", "hosts": inc.get("hosts") or [],
            "actions": ["%s %s %s" % (_utc(a["time"]), a.get("action"), a.get("detail") if a.get("detail") is not None
                                      else "") for a in inc.get("actions") or []],
            "end": "open" if open_ else _utc(inc["end"]),
            "seconds_without_service": round(now - float(inc["start"]), 1) if open_ else inc["seconds_without_service"]}


def incident_report(text, now, last=5, span_s=86400.0):
    """What playbooks/watchdog.yml status and doctor print from the head's incidents.jsonl: the last `last`
    incidents (the open one included; readable_incident), whether the last is open, and the availability over
    span_s with one line saying it."""
    incs = incidents(parse_incident_log(text))
    av = availability(incs, now, span_s)
    av["line"] = "%.3f %% over the last %.0f h (%.0f s without service in %d incident%s; from the incident log)" % (
        av["availability_pct"], av["span_s"] / 3600.0, av["down_s"], av["incidents"], "" if av["incidents"] == 1 else "s")
    return {"incidents": [readable_incident(i, now) for i in (incs[-int(last):] if int(last) > 0 else [])],
            "open": bool(incs and incs[-1]["end"] is None), "availability": av}


# --------------------------------------------------------------------------------------------
# Cooldown and minimum uptime: when a restart may begin (beside the strikes and the restart window)
# --------------------------------------------------------------------------------------------

def restart_hold(now, last_end, serving_since, cooldown_s, min_uptime_s, fact):
    """None when a restart may begin now, else {until, wait_s, reason}.

    last_end: when the previous restart ended (served or failed; None: none yet); serving_since: when the group
    last began serving (a load that served; None: unknown, as after the watchdog's own install); fact: the cause is
    a rank container that is not running or a load past its deadline (lifecycle.phase), not a probe.
    The cooldown holds every restart until cooldown_s after the previous one ended. The minimum uptime holds a
    probe's restart (/health, canary, /metrics) until the group has served min_uptime_s; a fact is not held by it
    (a dead rank is no warm-up effect), only by the cooldown. 0 turns either off; the boundary itself is allowed."""
    holds = []
    if cooldown_s and float(cooldown_s) > 0 and last_end is not None and now < float(last_end) + float(cooldown_s):
        holds.append((float(last_end) + float(cooldown_s), "cooldown: the last restart ended %.0f s ago, %.0f s "
                      "between restarts (vllm_watchdog_restart_cooldown_s)" % (now - float(last_end), float(cooldown_s))))
    if not fact and min_uptime_s and float(min_uptime_s) > 0 and serving_since is not None and \
            now < float(serving_since) + float(min_uptime_s):
        holds.append((float(serving_since) + float(min_uptime_s), "minimum uptime: the group serves since %.0f s, a "
                      "probe may restart it after %.0f s (vllm_watchdog_min_uptime_s)"
                      % (now - float(serving_since), float(min_uptime_s))))
    if not holds:
        return None
    until = max(h[0] for h in holds)
    return {"until": until, "wait_s": round(until - now, 1), "reason": "; ".join(h[1] for h in holds)}


# --------------------------------------------------------------------------------------------
# Launch verification: what docker created against what was rendered
# --------------------------------------------------------------------------------------------

def _jsonish(text):
    if isinstance(text, str) and text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def same_argv(want, got):
    """argv equal item by item; a JSON-valued item (a flag such as --speculative-config) compared as JSON."""
    if len(want or []) != len(got or []):
        return False
    return all(a == b or _jsonish(a) == _jsonish(b) for a, b in zip(want, got))


def launch_errors(host, name, want, raw):
    """want: {restart, command, env, mounts} as rendered (rank_node.rendered_launch); raw: one `docker inspect --type container` object (None: missing).
    Returns one message per mismatch naming host, item, both values and the fix; [] when the launch is as
    rendered."""
    fix = ("Fix: re-run site.yml (it recreates the rank from the rendered spec) and check that nothing on %s "
           "edits the container or the docker daemon's defaults" % host)
    if not raw:
        return ["%s: rank container %s does not exist after its start. %s" % (host, name, fix)]
    out = []
    state = raw.get("State") or {}
    status = state.get("Status") or ""
    if status != "running" or state.get("Restarting"):
        out.append("%s: rank container %s: state is %r, want 'running' (exit code %s). %s"
                   % (host, name, status, state.get("ExitCode"), fix))
    policy = ((raw.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
    if policy != (want.get("restart") or "no"):
        out.append("%s: rank container %s: restart policy is %r, rendered %r (catalogue worker_orphaned: a rank "
                   "docker restarts alone rejoins no group). %s"
                   % (host, name, policy, want.get("restart") or "no", fix))
    cmd = (raw.get("Config") or {}).get("Cmd") or []
    if not same_argv(want.get("command") or [], cmd):
        diff = [(i, a, b) for i, (a, b) in enumerate(zip(want["command"], cmd)) if a != b and _jsonish(a) != _jsonish(b)]
        where = ("argv[%d] is %r, rendered %r" % (diff[0][0], diff[0][2], diff[0][1]) if diff else
                 "argv has %d items, rendered %d" % (len(cmd), len(want["command"])))
        out.append("%s: rank container %s: the engine's command differs from the rendered one: %s. %s"
                   % (host, name, where, fix))
    # env: every rendered variable with its value (the image adds its own, which are not ours to judge)
    have_env = dict(e.partition("=")[::2] for e in (raw.get("Config") or {}).get("Env") or [])
    for key in sorted(want.get("env") or {}):
        if have_env.get(key) != want["env"][key]:
            out.append("%s: rank container %s: env %s is %r, rendered %r. %s"
                       % (host, name, key, have_env.get(key, "<unset>"), want["env"][key], fix))
    # mounts: every rendered bind at its place, read-only where rendered so
    have_mounts = dict((m.get("Destination"), m) for m in raw.get("Mounts") or [])
    for m in want.get("mounts") or []:
        got = have_mounts.get(m["container"])
        ro = "ro" in str(m.get("mode") or "").split(",")
        if not got or got.get("Source") != m["host"] or bool(got.get("RW", True)) == ro:
            out.append("%s: rank container %s: mount %s is %s, rendered %s:%s:%s. %s" % (
                host, name, m["container"], "%s (%s)" % (got.get("Source"), "rw" if got.get("RW", True) else "ro")
                if got else "missing", m["host"], m["container"], m.get("mode") or "rw", fix))
    return out


# --------------------------------------------------------------------------------------------
# The ordered restart over a node interface
# --------------------------------------------------------------------------------------------

class Nodes(object):
    """What restart() needs; every host method returns a dict with 'ok' (and 'msg'/'error' when not)."""

    def ready(self, host):  # pragma: no cover - interface
        raise NotImplementedError

    def stop(self, host, stamp):  # save the log, then remove: {ok, log_path, running, exit_code, diagnosis}
        raise NotImplementedError  # pragma: no cover

    def settle(self, host):  # memory ritual, settle gate and (head) port guard
        raise NotImplementedError  # pragma: no cover

    def start(self, host):  # start, wait for the ready line, verify the launch: {ok, outcome, diagnosis, tail}
        raise NotImplementedError  # pragma: no cover

    def running(self, host):  # {container: {running, exit_code}} or {unreachable: True}
        raise NotImplementedError  # pragma: no cover

    def serving(self):  # the head's /health at 200 and a canary answered: (bool, msg)
        raise NotImplementedError  # pragma: no cover

    def loading(self, record):  # write the load record (None: the load ended)
        raise NotImplementedError  # pragma: no cover

    # Optional: load_watch(hosts) -> the cause of a loading livelock, or None; the health gate asks it at each check.


def _why(res):
    return res.get("error") or res.get("msg") or res.get("outcome") or "no answer"


def named(host, res, what):
    """'host: what: <catalogue line>', or the last log lines when no catalogue entry matches."""
    if res.get("diagnosis"):
        return "%s: %s: %s" % (host, what, res["diagnosis"])
    tail = " | ".join((res.get("tail") or [])[-3:])
    return "%s: %s: no catalogue entry matches%s" % (host, what, "; last lines: %s" % tail if tail else "")


def wait_ready(nodes, hosts, timeout_s, log, clock=time.time, sleep=time.sleep, waiting=None, poll_s=10.0):
    """Every node answers and is ready (readiness checks), within timeout_s; None, or the failure."""
    deadline = clock() + timeout_s
    while True:
        bad, good = [], []
        for host in hosts:
            st = nodes.ready(host)
            if st.get("ok"):
                good.append((host, st.get("msg") or ""))
            else:
                bad.append("%s: %s" % (host, _why(st)))
        if not bad:
            for host, checks in good:
                log("step=ready host=%s ok=True checks=%s" % (host, checks))
            return None
        if clock() >= deadline:
            return "nodes not ready after %s s: %s" % (timeout_s, " | ".join(bad))
        if waiting:
            waiting(bad)
        sleep(poll_s)


def health_gate(nodes, hosts, timeout_s, clock=time.time, sleep=time.sleep, check_every_s=5.0, poll_s=2.0,
                watch=None):
    """Serving within timeout_s; a rank that exits meanwhile fails the gate at once, and so does what watch(hosts)
    names (the loading-livelock watch, verdict.livelock_watch). None, or the failure."""
    deadline = clock() + timeout_s
    last = None
    while clock() < deadline:
        ok, _msg = nodes.serving()
        if ok:
            return None
        if last is None or clock() - last >= check_every_s:
            last = clock()
            for host in hosts:
                st = nodes.running(host)
                c = st.get("container")
                if "container" in st and not (c or {}).get("running"):
                    return "rank on %s stopped while the group loaded (exit code %s)" % (host, (c or {}).get("exit_code"))
            why = watch(hosts) if watch else None
            if why:
                return why
        sleep(poll_s)
    return "the head's /health did not answer 200 within %s s" % timeout_s


def plan(group):
    """The whole-group restart as ordered steps, the one sequence vllm_ranks (through its step loop) and the
    watchdog (restart below) both run. group: [{host, rank}]. Each step is {verb, host, rank}; verbs:
      ready   every node answers and holds what a rank needs (rank_node.Node.ready)
      stop    every rank removed, head first, its log saved first (rank_node.Node.stop)
      streak  the death-streak guard over the stops (streak_refusal), once, on the head
      settle  memory ritual and settle gate on every node, the head's port guard (rank_node.Node.settle)
      start   the workers from the highest rank down, the head last, each verified (rank_node.Node.start)
      load    the load and its deadline recorded on the head (load_record), then the health gate"""
    order = group_order(group)
    rank = dict((g["host"], int(g["rank"])) for g in group)
    steps = [("ready", h) for h in order["teardown"]]
    steps += [("stop", h) for h in order["teardown"]]
    steps.append(("streak", order["head"]))
    steps += [("settle", h) for h in order["teardown"]]
    steps += [("start", h) for h in order["start"]]
    steps.append(("load", order["head"]))
    return [{"verb": v, "host": h, "rank": rank[h], "head": h == order["head"]} for v, h in steps]


def streak_refusal(stops, max_deaths, where="the saved logs on the nodes"):
    """The death-streak guard (catalogue worker_orphaned: diagnose, do not crash-loop): stops are the stop steps'
    results ({host, deaths, log_path, last_errors}); a message when a rank died unexplained max_deaths or more
    times in a row (max_deaths 0: off), else None."""
    if not max_deaths or int(max_deaths) <= 0:
        return None
    dead = [s for s in stops if s.get("deaths") is not None and int(s["deaths"]) >= int(max_deaths)]
    if not dead:
        return None
    named = "; ".join("%s: %s deaths, log %s, last errors: %s" % (
        s["host"], s["deaths"], s.get("log_path") or "none", " | ".join((s.get("last_errors") or [])[-3:]) or "none")
        for s in dead)
    return ("stopping: these ranks died unexplained %d or more times in a row (catalogue worker_orphaned: diagnose, "
            "do not crash-loop): %s. Their saved logs are in %s. After fixing the cause, run again with "
            "-e vllm_ranks_reset_deaths=true." % (int(max_deaths), named, where))


def restart(nodes, group, cause, stamp, timings, log, clock=time.time, sleep=time.sleep, waiting=None, by="watchdog"):
    """The whole-group restart: plan(group) run over a node interface. group: [{host, rank}]; timings: {ready_s,
    gate_s, max_deaths (optional)}. Returns {ok, failure, evidence, diagnoses, steps}: steps lists (verb, host, ok)
    in the order run."""
    steps = plan(group)
    ready_hosts = [s["host"] for s in steps if s["verb"] == "ready"]
    out = {"ok": False, "failure": None, "evidence": [], "diagnoses": [], "steps": []}
    log("action=restart_group stamp=%s cause=%s order=%s" % (
        stamp, cause, ",".join("%s:%s" % (s["verb"], s["host"]) for s in steps)))

    def step(verb, host, res, what=None):
        out["steps"].append((verb, host, bool(res.get("ok"))))
        log("step=%s host=%s ok=%s %s%s" % (verb, host, res.get("ok"), _why(res) if not res.get("ok") else
                                            (res.get("msg") or res.get("outcome") or ""),
                                            " diagnosis=%s" % res["diagnosis"] if res.get("diagnosis") else ""))
        if not res.get("ok"):
            if what:
                out["diagnoses"].append(named(host, res, what))
            return "%s on %s failed: %s" % (verb, host, _why(res))
        return None

    failure, stops = None, []
    for s in steps:
        verb, host = s["verb"], s["host"]
        if verb == "ready":
            if host != ready_hosts[0]:
                continue  # every node is waited for together
            failure = wait_ready(nodes, ready_hosts, timings["ready_s"], log, clock, sleep, waiting)
            if failure is None:
                nodes.loading(None)  # the old load, if any, ends with its ranks
        elif verb == "stop":
            res = nodes.stop(host, stamp)
            stops.append(dict(res, host=host))
            if res.get("log_path"):
                out["evidence"].append("%s:%s" % (host, res["log_path"]))
            if res.get("running") is False:  # what the catalogue says of a rank found stopped
                out["diagnoses"].append(named(host, res, "rank %s had stopped (exit code %s)" % (
                    s["rank"], res.get("exit_code"))))
            failure = step("stop", host, res)
        elif verb == "streak":
            refusal = streak_refusal(stops, timings.get("max_deaths") or 0)
            failure = refusal and step("streak", host, {"ok": False, "msg": refusal})
        elif verb == "settle":
            failure = step("settled", host, nodes.settle(host))
        elif verb == "start":
            res = nodes.start(host)
            # the diagnosis names the outcome (exited, timeout ...); the failure keeps the step's full message
            failure = step("start", host, res, "rank %s did not come up (%s)" % (s["rank"], res.get("outcome") or _why(res)))
        elif verb == "load":
            nodes.loading(load_record(clock(), timings["gate_s"], by))
            failure = health_gate(nodes, list(ready_hosts), timings["gate_s"], clock, sleep,
                                  watch=getattr(nodes, "load_watch", None))
            out["steps"].append(("health_gate", host, failure is None))
            log("step=health_gate host=%s ok=%s %s" % (host, failure is None, failure or ""))
            nodes.loading(None)
        if failure:
            break
    out.update(ok=failure is None, failure=failure)
    return out
