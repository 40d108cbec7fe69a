# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""One classifier for a serving tensor-parallel group, shared by vllm_health and the watchdog.

Pure functions, standard library plus health.py's /metrics parser: the vllm_watchdog role copies the
collection's module_utils to the head, where the watchdog program imports this file.

Inputs: Prometheus text of the head's /metrics (two scrapes a window apart), each rank container's
liveness, the head's /health answer and one `nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm
--format=csv,noheader,nounits` sample per node. Units: seconds, watts, percent, tokens.

Verdicts (catalogue gpu_low_power; docs/health.md; docs/watchdog.md):
  head_down    the head's container is not running or its /health does not answer 200
  rank_dead    a worker rank's container is not running (or its node does not answer)
  wedged       requests running or waiting, generation tokens frozen across the window and no GPU above
               the power floor (a collective spin-wait: 96 % utilisation at ~10-22 W on GB10, catalogue uvm_livelock)
  long_prefill the same frozen counters while a GPU draws normal power: compute, leave it alone
  idle         no request running or waiting
  progressing  generation tokens grew across the window
The first three restart the whole group (catalogue worker_orphaned); the others change nothing.

The restart order (teardown head first, start from the highest rank down, head last, catalogue rendezvous_timeout) and the
strike rules (docs/watchdog.md: give up after N failed restarts in a row, never crash-loop) live here too, so
vllm_ranks and the watchdog follow one implementation.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils.health import metric_sum, parse_metrics  # noqa: F401 pylint: disable=unused-import
from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import gpu_stuck_low_power

# GB10 defaults (catalogue gpu_low_power): a busy GPU under 25 W is spinning, not computing (a wedged
# collective or the UVM livelock reads 96 % at ~10-22 W; real decode draws 47-78 W).
DEFAULT_POWER_FLOOR_W = 25.0
DEFAULT_BUSY_UTIL_PCT = 80.0
DEFAULT_WINDOW_S = 120.0

VERDICTS = ("progressing", "idle", "long_prefill", "wedged", "rank_dead", "head_down", "livelock", "unknown")
# verdicts classify() gives that restart the group ('livelock' comes from livelock_watch, while a group loads)
RESTART_VERDICTS = ("wedged", "rank_dead", "head_down")


RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GEN_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"


def serving_counters(samples):
    """The gauges and counters the wedge check reads (docs/health.md)."""
    return {"running": metric_sum(samples, RUNNING), "waiting": metric_sum(samples, WAITING),
            "generation_tokens": metric_sum(samples, GEN_TOKENS),
            "prompt_tokens": metric_sum(samples, PROMPT_TOKENS),
            "kv_cache_usage": metric_sum(samples, "vllm:kv_cache_usage_perc")}


def wedge_verdict(first, second, interval_s):
    """Stalled when requests are running or waiting and no token was generated between scrapes.

    `first`/`second` are serving_counters() of two scrapes `interval_s` apart. /health answers 200
    while a collective is wedged (docs/health.md), so this is the check that catches it.
    """
    busy = max(second.get("running") or 0, 0) + max(second.get("waiting") or 0, 0)
    g1, g2 = first.get("generation_tokens"), second.get("generation_tokens")
    if g1 is None or g2 is None:
        return {"stalled": None, "busy": busy, "generated": None, "interval_s": interval_s,
                "msg": "vllm:generation_tokens_total missing from /metrics; wedge check not possible"}
    generated = g2 - g1
    stalled = busy > 0 and generated <= 0
    if stalled:
        msg = ("stalled: %d running, %d waiting, generation tokens unchanged at %d over %s s "
               "(a rank is wedged in a collective: tear down every rank, catalogue worker_orphaned)"
               % (second.get("running") or 0, second.get("waiting") or 0, g2, interval_s))
    else:
        msg = "%d tokens generated in %s s with %d requests in flight" % (generated, interval_s, busy)
    return {"stalled": stalled, "busy": busy, "generated": generated, "interval_s": interval_s, "msg": msg}


# --------------------------------------------------------------------------------------------
# nvidia-smi samples
# --------------------------------------------------------------------------------------------

GPU_QUERY_FIELDS = ("utilization.gpu", "power.draw", "clocks.sm")
# The GPU row of the table: "| N/A   36C    P8              4W /  N/A  | Not Supported  |      0%      Default |"
_TABLE_RE = re.compile(r"\|\s*\S+\s+\d+C\s+P\d+\s+(?P<power>[0-9.]+)W\s*/[^|]*\|[^|]*\|\s*(?P<util>\d+)%")


def _num(text):
    text = (text or "").strip()
    # GB10 prints "[N/A]" for fields it does not report (memory.*, power.limit)
    m = re.match(r"^(-?[0-9]+(?:\.[0-9]+)?)", text)
    return float(m.group(1)) if m else None


# What the watchdog's agent asks every cycle (gpu_query_argv(nvidia_smi, WATCH_QUERY_FIELDS)); parse_gpu_query reads it.
WATCH_QUERY_FIELDS = ("utilization.gpu", "power.draw", "clocks.sm")


def parse_gpu_query(text):
    """`nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm --format=csv,noheader,nounits`
    -> {utilization_pct, power_w, clocks_sm_mhz} of the first GPU (a Spark has one); None when the
    text holds no line. Units in the values ("96 %", "14.20 W") are tolerated; "[N/A]" gives None."""
    table = _TABLE_RE.search(text or "")
    if table:  # the default table (a person's paste, or a build without --query-gpu)
        return {"utilization_pct": float(table.group("util")), "power_w": float(table.group("power")),
                "clocks_sm_mhz": None}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.lower().startswith("utilization"):
            continue
        parts = [p.strip() for p in line.split(",")]
        parts += [""] * (3 - len(parts))
        return {"utilization_pct": _num(parts[0]), "power_w": _num(parts[1]), "clocks_sm_mhz": _num(parts[2])}
    return None


def gpu_state(sample, power_floor_w=DEFAULT_POWER_FLOOR_W, busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """'computing' (power at or above the floor), 'spinning' (utilisation >= busy_util_pct below the
    floor: the spin-wait of catalogue uvm_livelock), 'low' (below the floor, not busy) or 'unknown' (no reading)."""
    if not sample or sample.get("power_w") is None:
        return "unknown"
    if sample["power_w"] >= power_floor_w:
        return "computing"
    util = sample.get("utilization_pct")
    if util is not None and util >= busy_util_pct:
        return "spinning"
    return "low"


# The watchdog's GPU readings as Prometheus metrics (node-exporter's textfile collector on the head reads them): one
# series per node and figure, labelled host (the scrape's own node label names the head), in Prometheus base units
# (a 0-1 ratio, watts, hertz); a figure nvidia-smi gave as [N/A] has no series rather than a made-up 0.
GPU_METRICS = (
    ("utilization_pct", "dgxspark_vllm_gpu_utilization_ratio", "GPU utilisation (0-1) at the watchdog's last look.",
     0.01),
    ("power_w", "dgxspark_vllm_gpu_power_watts", "GPU power draw (W) at the watchdog's last look.", 1.0),
    ("clocks_sm_mhz", "dgxspark_vllm_gpu_sm_clock_hertz", "GPU SM clock (Hz) at the watchdog's last look.", 1e6),
)


def exposition_label(value):
    """A label value of Prometheus's text exposition format: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def gpu_metric_lines(gpus):
    """{node: parse_gpu_query result or None} -> the exposition lines (HELP, TYPE, one sample per node that has
    the figure), nodes sorted; a figure no node has is left out whole."""
    lines = []
    for key, name, text, scale in GPU_METRICS:
        samples = ['%s{host="%s"} %s' % (name, exposition_label(node), repr(round(sample[key] * scale, 6)))
                   for node, sample in sorted((gpus or {}).items()) if sample and sample.get(key) is not None]
        if samples:
            lines += ["# HELP %s %s" % (name, text), "# TYPE %s gauge" % name] + samples
    return lines


# --------------------------------------------------------------------------------------------
# The canary under power (catalogue gpu_low_power): is the engine really computing?
# --------------------------------------------------------------------------------------------

# sampled once a second on every node while a canary request (or a compute canary) runs
CANARY_QUERY_FIELDS = ("utilization.gpu", "pstate", "clocks.sm", "clocks.applications.graphics", "power.draw",
                       "temperature.gpu", "clocks_throttle_reasons.active")
_SAMPLE_KEYS = {"utilization.gpu": "utilization_pct", "pstate": "pstate", "clocks.sm": "clocks_sm_mhz",
                "clocks.applications.graphics": "clocks_app_mhz", "power.draw": "power_w",
                "temperature.gpu": "temperature_c", "clocks_throttle_reasons.active": "throttle_active"}


def parse_gpu_samples(text, fields=CANARY_QUERY_FIELDS):
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` lines (one per sample) -> list of dicts
    (utilization_pct, pstate, clocks_sm_mhz, clocks_app_mhz, power_w, temperature_c, throttle_active as int).
    '[N/A]' and 'Not Supported' give None; a line with another number of fields is skipped."""
    out = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields) or not line.strip():
            continue
        row = {}
        for field, value in zip(fields, parts):
            key = _SAMPLE_KEYS.get(field, field)
            if key == "pstate":
                row[key] = value if re.match(r"^P\d+$", value) else None
            elif key == "throttle_active":
                row[key] = int(value, 16) if re.match(r"^0x[0-9a-fA-F]+$", value) else None
            else:
                row[key] = _num(value)
        out.append(row)
    return out


def _median(values):
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2.0


# Caller: roles/vllm_health (module gpu_samples on every node while the head runs the smoke and canary, filter
# gpu_canary_verdict); the doctor's classifier takes the same rule through diagnose.gpu_stuck_low_power.
def canary_power_verdict(samples_by_host, power_floor_w=DEFAULT_POWER_FLOOR_W, busy_util_pct=DEFAULT_BUSY_UTIL_PCT,
                         slow_pct=15.0):
    """Per node, the GPU under a canary: computing, or not (a classifier input, catalogue gpu_low_power).

    samples_by_host: {host: parse_gpu_samples() taken while the canary ran}. Medians decide:
      stuck_low_power  the catalogue gpu_low_power rule (diagnose.gpu_stuck_low_power): busy, SM clock under half the
                       applications clock, under 30 W, no throttle reason: AC power removal needed
      not_computing    busy below the power floor (gpu_state 'spinning'): the engine waits, it does not compute
      computing        at or above the floor; a computing node whose SM clock is more than slow_pct % below
                       the median of the computing nodes is named a slow rank (every TP rank waits for it)
      idle / unknown   not busy, or no reading
    Returns {by_host: {host: {state, medians...}}, facts: {host: {gpu_stuck_low_power: text}} (diagnose's fact),
    failures, warnings}; messages name host, the figures and the fix.
    """
    by_host, facts, failures, warnings = {}, {}, [], []
    for host in sorted(samples_by_host or {}):
        rows = samples_by_host[host] or []
        med = gpu_medians({host: rows})[host] or dict.fromkeys(GPU_MEDIAN_KEYS)
        throttles = [r.get("throttle_active") for r in rows if r.get("throttle_active") is not None]
        throttle = max(throttles) if throttles else None
        stuck = gpu_stuck_low_power(med["utilization_pct"], med["clocks_sm_mhz"], med["clocks_app_mhz"],
                                    med["power_w"], throttle)
        state = gpu_state(med, power_floor_w, busy_util_pct) if rows else "unknown"
        if stuck:
            state = "stuck_low_power"
            facts[host] = {"gpu_stuck_low_power": stuck}
            failures.append("%s: GPU stuck in a low-power state under the canary (%s, %d samples, no throttle reason; "
                            "catalogue gpu_low_power); every rank waits for this node. Fix: remove AC power from %s "
                            "(a reboot is not enough), then re-run" % (host, stuck, len(rows), host))
        elif state == "spinning":
            state = "not_computing"
            failures.append("%s: the GPU reads %s %% busy at %s W under the canary, below the %s W floor: the engine "
                            "is not computing (a collective spin-wait; catalogue gpu_low_power). Fix: restart the group "
                            "(playbooks/restart.yml) and read the ranks' logs" % (
                                host, _fmt_num(med["utilization_pct"]), _fmt_num(med["power_w"]),
                                _fmt_num(power_floor_w)))
        elif state == "low":
            state = "idle"
        by_host[host] = dict(med, state=state, samples=len(rows), throttle_active=throttle)
    computing = dict((h, v["clocks_sm_mhz"]) for h, v in by_host.items()
                     if v["state"] == "computing" and v["clocks_sm_mhz"])
    if len(computing) > 1:
        fleet = _median(list(computing.values()))
        for host in sorted(computing):
            if computing[host] < fleet * (1 - slow_pct / 100.0):
                warnings.append("%s: SM clock %s MHz under the canary, %d %% below the nodes' median %s MHz: a slow "
                                "rank (catalogue gpu_low_power). Fix: check its clocks and power (nvidia-smi -q -d "
                                "PERFORMANCE) and any -lgc cap" % (
                                    host, _fmt_num(computing[host]), round(100 * (1 - computing[host] / fleet)),
                                    _fmt_num(fleet)))
    return {"by_host": by_host, "facts": facts, "failures": failures, "warnings": warnings}


def _fmt_num(v):
    return "%g" % v if v is not None else "?"


# --------------------------------------------------------------------------------------------
# The group verdict
# --------------------------------------------------------------------------------------------


_DOCKER_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$")


def docker_time_s(stamp):
    """Docker's State.StartedAt / FinishedAt (RFC 3339 in UTC, nanoseconds with trailing zeros trimmed) as epoch
    seconds; None for Docker's zero time (0001-01-01T00:00:00Z, never finished) or anything else."""
    m = _DOCKER_TIME_RE.match(stamp or "")
    if not m or m.group(1).startswith("0001-"):
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2) or 0)


def classify(ranks, head_health, first, second, window_s, gpus=None,
             power_floor_w=DEFAULT_POWER_FLOOR_W, busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """Verdict of a group that is expected to serve.

    ranks: [{rank, host, running, finished_s}] with running True/False, or None when the node did not answer;
    finished_s (optional) is the container's FinishedAt as epoch seconds (docker_time_s), None when unknown.
    head_health: True when the head's /health answered 200. first/second: serving_counters() of the
    scrapes at the start and end of the window (window_s seconds apart), None when not scraped.
    gpus: {host: parse_gpu_query() sample}.
    Returns {verdict, cause, action ('restart_group' | 'none'), hosts, wedge, gpu_states}.
    """
    gpus = gpus or {}
    states = dict((h, gpu_state(s, power_floor_w, busy_util_pct)) for h, s in gpus.items())
    out = {"hosts": [], "wedge": None, "gpu_states": states}

    def done(verdict, cause, hosts=None):
        out.update(verdict=verdict, cause=cause, hosts=hosts or [],
                   action="restart_group" if verdict in RESTART_VERDICTS else "none")
        return out

    by_rank = sorted(ranks, key=lambda r: int(r["rank"]))
    head = [r for r in by_rank if int(r["rank"]) == 0]
    dead = [r for r in by_rank[1:] if r.get("running") is not True]
    if not head or head[0].get("running") is not True:
        # A killed worker takes the head's engine down within seconds: when both have stopped, the rank that
        # stopped first is the cause (both FinishedAt known). A worker whose node does not answer beside a head
        # rank that stopped is named first too: the head's rank cannot power a node off, losing a peer ends the
        # head's engine (issue 28: a powered-off worker was blamed on the head). Otherwise the head is named.
        head_end = head[0].get("finished_s") if head else None
        head_stopped = bool(head) and head[0].get("running") is False
        dead = [r for r in dead if (head_stopped and r.get("running") is None) or (
            head_end is not None and r.get("finished_s") is not None and r["finished_s"] < head_end)]
        if not dead:
            h = head[0]["host"] if head else "?"
            what = "does not answer" if head and head[0].get("running") is None else "is not running"
            return done("head_down", "the head's rank container on %s %s" % (h, what), [h])
    if dead:
        causes = ["rank %s on %s %s" % (r["rank"], r["host"], "does not answer (node unreachable)"
                                        if r.get("running") is None else "is not running") for r in dead]
        after = ("; the head's rank stopped after it" if all(r.get("running") is False for r in dead) else
                 "; the head's rank has stopped too") if head and head[0].get("running") is not True else ""
        return done("rank_dead", "; ".join(causes) + after +
                    " (a tensor-parallel group cannot lose a rank, catalogue worker_orphaned)", [r["host"] for r in dead])
    if head_health is not True:
        return done("head_down", "the head's /health does not answer 200 on %s" % head[0]["host"], [head[0]["host"]])
    if first is None or second is None:
        return done("unknown", "no /metrics pair yet")
    stall = stall_verdict(first, second, window_s, gpus, power_floor_w, busy_util_pct)
    out["wedge"] = stall["wedge"]
    return done(stall["verdict"], stall["cause"], stall["hosts"])


# Callers: classify (the watchdog) and roles/vllm_health (filter gpu_stall_verdict, module vllm_health mode=metrics):
# the health gate and the watchdog judge a stall by this one rule (issue 28).
def stall_verdict(first, second, window_s, gpus=None, power_floor_w=DEFAULT_POWER_FLOOR_W,
                  busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """Is a serving engine stalled? first/second: serving_counters() window_s seconds apart; gpus: {host: sample}
    (parse_gpu_query(), or gpu_medians() of a series). Generation tokens frozen with requests in flight is 'wedged'
    unless a GPU draws power at or above power_floor_w ('long_prefill': it computes, no action). Returns
    {verdict (unknown | idle | progressing | long_prefill | wedged), cause, hosts, wedge, gpu_states}."""
    states = dict((h, gpu_state(s, power_floor_w, busy_util_pct)) for h, s in (gpus or {}).items())
    wedge = wedge_verdict(first, second, window_s)
    out = {"wedge": wedge, "gpu_states": states, "hosts": []}
    if wedge["stalled"] is None:
        return dict(out, verdict="unknown", cause=wedge["msg"])
    if not wedge["stalled"]:
        if wedge["busy"] <= 0 and (wedge["generated"] or 0) <= 0:
            return dict(out, verdict="idle", cause="no request running or waiting")
        return dict(out, verdict="progressing", cause=wedge["msg"])
    computing = sorted(h for h, st in states.items() if st == "computing")
    if computing:
        return dict(out, verdict="long_prefill", cause=(
            "generation tokens frozen for %s s with %d request(s) in flight, but %s draw(s) power at or above %s W: "
            "the GPU computes (a long prefill), no action"
            % (_fmt_num(window_s), wedge["busy"], ", ".join(computing), _fmt_num(power_floor_w))))
    low = sorted(h for h, st in states.items() if st in ("spinning", "low"))
    return dict(out, verdict="wedged", hosts=low, cause=(
        "generation tokens frozen at %s for %s s with %d request(s) in flight and every GPU below %s W (%s): a rank "
        "is stuck in a collective (tear down every rank, catalogue worker_orphaned)"
        % (_fmt_num((second or {}).get("generation_tokens")), _fmt_num(window_s), wedge["busy"], _fmt_num(power_floor_w),
           ", ".join("%s %s" % (h, states[h]) for h in low) or "no GPU reading")))


GPU_MEDIAN_KEYS = ("utilization_pct", "clocks_sm_mhz", "clocks_app_mhz", "power_w")


def gpu_medians(samples_by_host):
    """{host: [samples of parse_gpu_samples()]} -> {host: medians of utilization_pct, clocks_sm_mhz, clocks_app_mhz,
    power_w} (None where no sample had the field); a host without samples maps to {} (gpu_state 'unknown')."""
    return dict((h, dict((k, _median([r.get(k) for r in (rows or [])])) for k in GPU_MEDIAN_KEYS) if rows else {})
                for h, rows in (samples_by_host or {}).items())


# The frozen-load rule (catalogue uvm_livelock): two samples of loaded shards and GPU power a window apart; the
# watchdog takes them each cycle while a group loads (livelock_watch).
def loading_livelock(shards_first, shards_second, window_s, gpu_sample,
                     power_floor_w=DEFAULT_POWER_FLOOR_W, busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """UVM livelock during loading (field case: shard loading frozen, GPU ~96 % at ~10 W, catalogue uvm_livelock, issue
    table row 5): shard progress (loaded shard count) unchanged over window_s while the node's GPU
    spins. Slow progress or an I/O stall at normal power is not a livelock.
    Returns {livelock: bool, msg}."""
    st = gpu_state(gpu_sample, power_floor_w, busy_util_pct)
    frozen = shards_first is not None and shards_second is not None and shards_second <= shards_first
    if frozen and st == "spinning":
        return {"livelock": True, "msg": "shard progress frozen at %s for %s s while the GPU reads %s %% at %s W "
                "(UVM livelock signature)" % (shards_second, window_s, gpu_sample.get("utilization_pct"),
                                              gpu_sample.get("power_w"))}
    why = "shards moved %s -> %s" % (shards_first, shards_second) if not frozen else "GPU %s" % st
    return {"livelock": False, "msg": "no livelock: %s" % why}


def livelock_watch(marks, now, boots, gpus, window_s, power_floor_w=DEFAULT_POWER_FLOOR_W,
                   busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """One cycle of the loading-livelock watch over a loading group (catalogue uvm_livelock).
    marks: {host: [since, shards_loaded]} from the cycle before ({} at the start of a load); now: seconds;
    boots: {host: {phase, shards_loaded}} from each rank's log (health.parse_phase); gpus: {host: GPU sample}.
    A host whose loaded shard count has not moved for window_s seconds while its GPU spins (busy at idle power:
    loading_livelock) is livelocked; one that moves, is past 'loading', or has no shard count is not. A host
    without a reading this cycle (its agent or log read failed) keeps its mark: a slow node is not a fresh start.
    vLLM prints the shard bar on the first rank only, so in practice this watches the head's load.
    Returns (marks for the next cycle, cause or None, [livelocked hosts])."""
    new, hit = {}, []
    for host, mark in (marks or {}).items():
        boot = (boots or {}).get(host)
        if not boot or boot.get("phase") in ("unknown", None):
            new[host] = mark
    for host in sorted(boots or {}):
        boot = boots[host] or {}
        loaded = boot.get("shards_loaded")
        if boot.get("phase") != "loading" or loaded is None:
            continue
        since, seen = (marks or {}).get(host) or (now, loaded)
        if loaded != seen:
            since, seen = now, loaded
        new[host] = [since, seen]
        if window_s and now - since >= window_s:
            res = loading_livelock(seen, loaded, int(round(now - since)), (gpus or {}).get(host) or {},
                                   power_floor_w, busy_util_pct)
            if res["livelock"]:
                hit.append((host, res["msg"]))
    if not hit:
        return new, None, []
    cause = ("loading livelock on %s: stop every rank at once, logs saved (catalogue uvm_livelock: check swap with "
             "`swapon --show` and vm.swappiness, docs/node-prep.md)" % "; ".join("%s %s" % h for h in hit))
    return new, cause, [h for h, _msg in hit]


# --------------------------------------------------------------------------------------------
# The restart sequence (catalogue rendezvous_timeout, worker_orphaned): one order for vllm_ranks and the watchdog
# --------------------------------------------------------------------------------------------


def group_order(hosts):
    """hosts: [{host, rank}] (or {host: rank}). Returns {teardown, start, head}: teardown head first
    then ascending ranks; start from the highest rank down with the head last. Duplicate or missing
    ranks raise ValueError (a group is 0..N-1)."""
    if isinstance(hosts, dict):
        hosts = [{"host": h, "rank": r} for h, r in hosts.items()]
    ordered = sorted(hosts, key=lambda x: int(x["rank"]))
    ranks = [int(x["rank"]) for x in ordered]
    if ranks != list(range(len(ranks))):
        raise ValueError("ranks %s are not 0..%d" % (ranks, len(ranks) - 1))
    names = [x["host"] for x in ordered]
    return {"teardown": names, "start": list(reversed(names)), "head": names[0] if names else None}


# --------------------------------------------------------------------------------------------
# Strikes (docs/watchdog.md): N failed restarts in a row, or M restarts within a window, then give up
# --------------------------------------------------------------------------------------------


def may_restart(restart_times, now, max_restarts, window_s):
    """None when a restart is allowed now, else the reason to give up instead (M restarts in window)."""
    recent = [t for t in restart_times if now - t < window_s]
    if max_restarts and len(recent) >= max_restarts:
        return ("%d restarts within %d s (limit %d): the group keeps failing; never crash-loop"
                % (len(recent), window_s, max_restarts))
    return None


def record_restart(state, now, ok, max_failed):
    """Update {strikes, restarts_total, restart_times, last_restart} after one restart; returns
    (new_state, give_up_reason or None). strikes counts failed restarts in a row; a success clears it."""
    new = dict(state)
    new["restarts_total"] = int(state.get("restarts_total") or 0) + 1
    new["restart_times"] = list(state.get("restart_times") or []) + [now]
    new["last_restart"] = now
    new["strikes"] = 0 if ok else int(state.get("strikes") or 0) + 1
    reason = None
    if not ok and max_failed and new["strikes"] >= max_failed:
        reason = "%d failed restarts in a row (limit %d): stop and diagnose" % (new["strikes"], max_failed)
    return new, reason


# nvidia-smi's refusal of a field it does not know (a driver that renamed clocks_throttle_reasons.* to
# clocks_event_reasons.*, or the simulated nodes' stand-in, which has no applications clock)
_FIELD_REFUSED_RE = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')


def refused_gpu_field(stderr):
    """The field name nvidia-smi --query-gpu refused, from its error text; None for any other error."""
    m = _FIELD_REFUSED_RE.search(stderr or "")
    return m.group("field") if m else None


def gpu_query_argv(nvidia_smi, fields):
    """argv of one sample of the canary query (csv, no header, no units: parse_gpu_samples reads it)."""
    return [nvidia_smi, "--query-gpu=%s" % ",".join(fields), "--format=csv,noheader,nounits"]
