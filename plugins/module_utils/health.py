# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""Pure logic of the vLLM health gate: log phases, failure classes, /metrics, smoke verdicts.

Nothing here talks to the network or to docker; the module (plugins/modules/vllm_health.py) and
the bench harness feed it text and JSON bodies, and the unit tests feed it real captures.

Units: memory in GiB (1024**3 bytes) as vLLM prints it, KV pool in tokens, time in seconds.
Sources are cited as catalogue <id> (docs/catalogue.md) or as the shipped document that states the rule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

try:
    from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose as D
except ImportError:  # shipped beside roles/vllm_bench/files/vllm_bench.py with diagnose.py and catalogue.py
    import diagnose as D  # type: ignore

# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------

# Multi-node ranks prefix lines with "(Worker_TP<n> pid=...)"; single node "(EngineCore ...)" /
# "(APIServer ...)"; some quoted lines carry no prefix (fixtures README, vllm-logs).
_PREFIX_RE = re.compile(r"^\s*\((?P<proc>[A-Za-z_]+?)(?:_TP(?P<tp>\d+))?(?:_DP\d+)?(?:\s+pid=[^)]*)?\)\s*")
_NUM = r"[0-9][0-9,]*"


def _int(text):
    """'820,013' -> 820013 (vLLM prints token counts with thousands separators, docs/memory-plan.md)."""
    return int(text.replace(",", ""))


def split_log_lines(text):
    """Lines of a container log; tqdm bars redraw with carriage returns, so split on those too."""
    if not text:
        return []
    out = []
    for raw in re.split(r"[\r\n]+", text):
        line = raw.rstrip()
        if line:
            out.append(line)
    return out


def line_rank(line):
    """Tensor-parallel rank named by a '(Worker_TP<n> ...)' prefix, else None."""
    m = _PREFIX_RE.match(line)
    if m and m.group("tp") is not None:
        return int(m.group("tp"))
    return None


# Milestones in boot order. Each entry: (phase, regex). The phase of a rank is the phase of the
# last milestone found in its log (docs/health.md: print the phase while waiting).
_SHARDS_RE = re.compile(r"Loading (?:safetensors|pt|[A-Za-z]+) checkpoint shards:\s+(?P<pct>\d+)% Completed \| "
                        r"(?P<k>\d+)/(?P<n>\d+)")
_MILESTONES = [
    ("starting", re.compile(r"vLLM API server version|Initializing a V1 LLM engine|non-default args|"
                            r"world_size=|Starting to load model")),
    ("rendezvous", re.compile(r"(?:init_distributed_environment|distributed_init_method|"
                              r"rank \d+ in world size|world_size=\d+ rank=\d+)")),
    ("loading", re.compile(r"Loading (?:safetensors|pt|[A-Za-z]+) checkpoint shards|Loading model from|"
                           r"Loading weights with")),
    ("weights_loaded", re.compile(r"Loading weights took|Model loading took")),
    ("profiling", re.compile(r"Memory profiling|torch\.compile takes|Compiling a graph|"
                             r"Dynamo bytecode transform time|profiling run")),
    ("kv_cache", re.compile(r"Available KV cache memory|GPU KV cache size|CPU KV cache size|"
                            r"KV cache size:|# (?:GPU|CPU) blocks")),
    ("graph_capture", re.compile(r"Capturing CUDA graph|Graph capturing|Capturing (?:cudagraphs|graphs)")),
    ("engine_ready", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("api_starting", re.compile(r"Starting vLLM API server|Available routes are|Started server process")),
    ("api_up", re.compile(r"Application startup complete")),
]
PHASE_ORDER = [p for p, _r in _MILESTONES]

PHASE_TEXT = {
    "none": "no log yet",
    "starting": "starting (arguments parsed)",
    "rendezvous": "joining the tensor-parallel group",
    "loading": "loading weights",
    "weights_loaded": "weights loaded, profiling",
    "profiling": "profiling / compiling",
    "kv_cache": "KV cache allocated, warming up",
    "graph_capture": "capturing graphs",
    "engine_ready": "engine initialised, starting the API",
    "api_starting": "API server starting",
    "api_up": "API up",
    "serving": "serving",
}


def serving_phase(phase, rank):
    """The phase to print once the head's /health answers 200: the group serves.

    A headless worker never logs the engine's later milestones (profiling, KV cache and the API
    are logged by rank 0), and a long-serving rank's log tail holds only requests, so its last
    milestone would read as still booting. phase: a parse_phase() result; rank: int.
    """
    if phase.get("phase") == "api_up":
        return phase
    out = dict(phase)
    out["phase"] = "serving"
    out["text"] = "serving (headless rank; rank 0 logs the engine phases)" if rank else "serving"
    return out


def parse_phase(text):
    """Boot phase of one rank from its log: the last milestone seen, plus shard progress.

    Returns {phase, text, shards_loaded, shards_total, line}. 'shards' are read from the
    'Loading safetensors checkpoint shards: P% Completed | k/N' progress bar (docs/health.md).
    """
    phase, last_line, best = "none", None, -1
    shards = None
    lines = split_log_lines(text)
    if lines:
        phase = "starting"  # the container logs, no milestone yet
    for line in lines:
        m = _SHARDS_RE.search(line)
        if m:
            shards = (int(m.group("k")), int(m.group("n")))
        for idx, (name, rx) in enumerate(_MILESTONES):
            # a later line wins only if it is not an earlier phase (ranks interleave their lines)
            if idx >= best and rx.search(line):
                phase, best, last_line = name, idx, line
    desc = PHASE_TEXT[phase]
    if phase == "loading" and shards:
        desc = "loading shards %d/%d" % shards
    return {
        "phase": phase,
        "text": desc,
        "shards_loaded": shards[0] if shards else None,
        "shards_total": shards[1] if shards else None,
        "line": last_line,
    }


# Failure classification lives once, in the failure catalogue (catalogue.py, docs/catalogue.md) and its
# classifier (diagnose.py); this is the readiness gate's view of it. Reason classes are the catalogue's.
REASON_CLASSES = tuple(sorted(set(e["class"] for e in D.entries())))


def classify_failure(text, oom_killed=False, exit_code=None, kernel="", journal=""):
    """Reason for a rank that stopped: the best-ranked catalogue entry for its log and exit.

    The root cause comes first in the log; the cascade (EngineDeadError, tracebacks) matches only generic
    entries, which rank last. Hang signatures (class hang) are the wedge check's, not an exit's.
    Returns {reason_class, signature (the catalogue id), line, hint (the fix), cause, source, extract}.
    """
    ev = {"logs": text, "kernel": kernel, "journal": journal}
    if oom_killed or exit_code is not None:
        ev["container"] = {"exists": True, "running": False, "exit_code": exit_code, "oom_killed": bool(oom_killed)}
    matches = D.diagnose(ev, exclude_classes=("hang",))
    if not matches:
        return {"reason_class": "other", "signature": "unknown", "line": None,
                "hint": "no catalogue entry matches; read the last lines (playbooks/doctor.yml collects every node)",
                "cause": "unknown", "source": "docs/catalogue.md", "extract": {}}
    m = matches[0]
    return {"reason_class": m["class"], "signature": m["id"], "line": m["evidence"] if m["kind"] == "log" else None,
            "hint": m["fix"], "cause": m["cause"], "source": "catalogue: %s" % m["id"], "extract": m["extract"],
            "evidence": m["evidence"]}


# KV and boot figures (docs/memory-plan.md, catalogue kv_pool_below_peers, kv_pin_no_activation_reserve, docs/health.md)
_KV_PATTERNS = {
    "available_kv_cache_gib": (re.compile(r"Available KV cache memory: (?P<v>[\d.]+) GiB"), float),
    "kv_cache_tokens": (re.compile(r"(?:GPU|CPU) KV cache size: (?P<v>" + _NUM + r") tokens"), _int),
    "loading_weights_s": (re.compile(r"Loading weights took (?P<v>[\d.]+) seconds"), float),
    "init_engine_s": (re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<v>[\d.]+) s"),
                      float),
    # vLLM's own line, or NCCL's banner at NCCL_DEBUG=INFO ("NCCL INFO NCCL version 2.30.7+cuda13.0")
    "nccl_version": (re.compile(r"(?:vLLM is using nccl==|NCCL INFO NCCL version )(?P<v>\d+(?:\.\d+)+)"), str),
}
# The CPU engine sizes its KV from VLLM_CPU_KVCACHE_SPACE and logs the GiB this way (real capture,
# tests/fixtures/health/sim-cpu/tp1-ready.log); it stands in for "Available KV cache memory".
_CPU_KV_RE = re.compile(r"Explicitly set \((?P<v>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache")
_CONC_RE = re.compile(r"Maximum concurrency for (?P<len>" + _NUM + r") tokens per request: (?P<x>[\d.]+)x")
_LOAD_RE = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<s>[\d.]+) seconds")
_SUGGEST_RE = re.compile(r"--kv-cache-memory=(?P<fit>\d+)`? \((?P<fit_gib>[\d.]+) GiB\) to fit into requested memory"
                         r"(?:.*--kv-cache-memory=(?P<full>\d+)`? \((?P<full_gib>[\d.]+) GiB\) to fully utilize)?")
_FREE_RE = re.compile(r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. "
                      r"Desired GPU memory utilization is \((?P<util>[\d.]+), (?P<desired>[\d.]+) GiB\)")
# The same line splits the non-KV usage the profiler subtracts (memory plan inputs, catalogue kv_pin_no_activation_reserve).
_USAGE_RE = re.compile(r"Actual usage is (?P<consumed>[\d.]+) GiB for consumed memory \(weights \+ non-torch\), "
                       r"(?P<act>[\d.]+) GiB for peak activation, and (?P<graph>[\d.]+) GiB for CUDAGraph memory")
_GRAPH_RE = re.compile(r"Graph capturing finished in (?P<s>\d+) secs, took (?P<gib>[\d.]+) GiB")
_AUX_RE = re.compile(r"auxiliary layers from [^:]*: \((?P<t>[\d,\s]+)\)")
_COMPILE_RE = re.compile(r"\(compilation: (?P<s>[\d.]+) s\)")
# catalogue negative_cuda_graph_estimate: on unified memory the graph-capture estimate can come out negative and enlarge the KV pool
# (catalogue negative_cuda_graph_estimate); the same log prints the pin that would fit.
_GRAPH_EST_RE = re.compile(r"Estimated CUDA graph memory: (?P<v>-?[\d.]+) GiB")
_PIN_RE = re.compile(r"--kv-cache-memory=(?P<b>\d+)")
# catalogue nccl_no_net_plugin: NCCL's NET line (NCCL_DEBUG=INFO) names the transport; the plugin failure prints at WARN too
# (catalogue nccl_no_net_plugin, nccl_socket_fallback).
_NET_RE = re.compile(r"NET/(?P<a>IB|Socket)\s*: Using|Using network (?P<b>IB|Socket)\b")
_NO_NET_RE = re.compile(r"Failed to initialize any NET plugin")


def parse_boot_log(text):
    """Figures of one rank's boot log (docs/memory-plan.md, docs/health.md); absent lines give None.

    Keys: available_kv_cache_gib (GiB), kv_cache_tokens (tokens), max_concurrency {max_model_len,
    factor}, model_loading {gib, seconds}, loading_weights_s, init_engine_s, compilation_s,
    free_memory_on_startup {free_gib, total_gib, utilization, desired_gib},
    memory_usage {consumed_gib (weights + non-torch), activation_gib, cuda_graph_gib},
    kv_cache_memory_suggestion {fit_bytes, fit_gib, full_bytes, full_gib} (catalogue kv_pin_no_activation_reserve),
    graph_capture {seconds, gib}, aux_layers (list, matched on the tuple), nccl_version,
    startup_complete (bool), tp_ranks_seen (ranks named by Worker_TP prefixes).
    """
    out = dict((k, None) for k in _KV_PATTERNS)
    out.update({"max_concurrency": None, "model_loading": None, "compilation_s": None,
                "free_memory_on_startup": None, "kv_cache_memory_suggestion": None, "memory_usage": None,
                "graph_capture": None, "aux_layers": None, "startup_complete": False,
                "kv_by_rank": {}, "cuda_graph_estimate_gib": None, "kv_cache_memory_pin_bytes": None,
                "nccl_net": None})
    ranks = set()
    for line in split_log_lines(text):
        rank = line_rank(line)
        if rank is not None:
            ranks.add(rank)
        for key, (rx, conv) in _KV_PATTERNS.items():
            m = rx.search(line)
            if m:
                out[key] = conv(m.group("v"))
                if key == "available_kv_cache_gib" and rank is not None:
                    out["kv_by_rank"][rank] = conv(m.group("v"))
        m = _CPU_KV_RE.search(line)
        if m and out["available_kv_cache_gib"] is None:
            out["available_kv_cache_gib"] = float(m.group("v"))
        m = _CONC_RE.search(line)
        if m:
            out["max_concurrency"] = {"max_model_len": _int(m.group("len")), "factor": float(m.group("x"))}
        m = _LOAD_RE.search(line)
        if m:
            out["model_loading"] = {"gib": float(m.group("gib")), "seconds": float(m.group("s"))}
        m = _COMPILE_RE.search(line)
        if m and "init engine" in line:
            out["compilation_s"] = float(m.group("s"))
        m = _SUGGEST_RE.search(line)
        if m:
            out["kv_cache_memory_suggestion"] = {
                "fit_bytes": int(m.group("fit")), "fit_gib": float(m.group("fit_gib")),
                "full_bytes": int(m.group("full")) if m.group("full") else None,
                "full_gib": float(m.group("full_gib")) if m.group("full_gib") else None}
        m = _FREE_RE.search(line)
        if m:
            out["free_memory_on_startup"] = {
                "free_gib": float(m.group("free")), "total_gib": float(m.group("total")),
                "utilization": float(m.group("util")), "desired_gib": float(m.group("desired"))}
        m = _USAGE_RE.search(line)
        if m:
            out["memory_usage"] = {"consumed_gib": float(m.group("consumed")),
                                   "activation_gib": float(m.group("act")), "cuda_graph_gib": float(m.group("graph"))}
        m = _GRAPH_RE.search(line)
        if m:
            out["graph_capture"] = {"seconds": int(m.group("s")), "gib": float(m.group("gib"))}
        m = _AUX_RE.search(line)
        if m:
            out["aux_layers"] = [int(x) for x in m.group("t").replace(" ", "").split(",") if x]
        if "Application startup complete" in line:
            out["startup_complete"] = True
        m = _GRAPH_EST_RE.search(line)
        if m:
            out["cuda_graph_estimate_gib"] = float(m.group("v"))
        m = _PIN_RE.search(line)
        if m and out["kv_cache_memory_pin_bytes"] is None:
            out["kv_cache_memory_pin_bytes"] = int(m.group("b"))
        m = _NET_RE.search(line)
        if m and (out["nccl_net"] or {}).get("transport") != "Socket":
            out["nccl_net"] = {"transport": m.group("a") or m.group("b"), "line": line.strip()}
        if _NO_NET_RE.search(line):
            out["nccl_net"] = {"transport": None, "line": line.strip()}
    out["tp_ranks_seen"] = sorted(ranks)
    return out


def boot_findings(boot, host, rdma_expected=False):
    """Failures and warnings of one rank's boot figures (parse_boot_log) before the group is declared ready.

    catalogue negative_cuda_graph_estimate: a negative CUDA-graph estimate fails; the over-allocation is the logged KV pool minus the pin the
    same log suggests (GiB). catalogue nccl_no_net_plugin: with RDMA expected (the lane passes /dev/infiniband), a Socket transport
    or no NET plugin fails; no NET line at all only warns (NCCL prints it at NCCL_DEBUG=INFO, lanes run WARN).
    Returns {"failures": [str], "warnings": [str]}.
    """
    failures, warnings = [], []
    est = boot.get("cuda_graph_estimate_gib")
    if est is not None and est < 0:
        kv = boot.get("available_kv_cache_gib")
        pin = (boot.get("kv_cache_memory_suggestion") or {}).get("fit_bytes") or boot.get("kv_cache_memory_pin_bytes")
        if kv is not None and pin:
            pin_gib = pin / float(1 << 30)
            size = "KV over-allocated by ~%.1f GiB: %.2f vs %.2f GiB suggested" % (kv - pin_gib, kv, pin_gib)
            fix = "pin serve.kv_policy {mode: pin, bytes: %d} (--kv-cache-memory, the value this log suggests)" % pin
        else:
            size = "KV pool %s GiB sized with it" % (kv if kv is not None else "(not logged)")
            fix = "pin --kv-cache-memory (serve.kv_policy mode pin) below the logged pool"
        failures.append("%s: negative CUDA-graph memory estimate (%.2f GiB); %s. Fix: %s, relaunch and run the "
                        "long-prompt gate (vllm_bench) (catalogue negative_cuda_graph_estimate)" % (host, est, size, fix))
    net = boot.get("nccl_net")
    if rdma_expected:
        if net and net["transport"] is None:
            failures.append("%s: NCCL found no NET plugin although the lane passes /dev/infiniband (%r). Fix: check "
                            "/dev/infiniband on the node and docker inspect Devices of the rank (catalogue "
                            "nccl_no_net_plugin)" % (host, net["line"]))
        elif net and net["transport"] == "Socket":
            failures.append("%s: NCCL runs on sockets, not RDMA, although the lane passes /dev/infiniband (%r). "
                            "Fix: give the rank /dev/infiniband, memlock -1 and IPC_LOCK and check NCCL_IB_HCA "
                            "(catalogue nccl_socket_fallback)" % (host, net["line"]))
        elif not net:
            warnings.append("%s: no NCCL NET line in the rank log, so the transport is not proven (NCCL prints it "
                            "at NCCL_DEBUG=INFO; set it in container.env for one boot to check, catalogue "
                            "nccl_socket_fallback)" % host)
    return {"failures": failures, "warnings": warnings}


def rdma_devices_findings(inspect_obj, host, rdma_expected=False):
    """Does the running rank really hold the RDMA devices the lane passes? (catalogue nccl_no_net_plugin)
    inspect_obj: one object of `docker inspect --type container` (the raw JSON).

    With rdma_expected (the lane's container.devices names /dev/infiniband): HostConfig.Devices must map a
    host path /dev/infiniband or /dev/infiniband/* (uverbs, rdma_cm) unless the container is privileged; without
    it the rank reaches NCCL with no verbs device, so NCCL finds no NET plugin or runs on sockets. memlock not
    unlimited or no IPC_LOCK capability only warns (verbs memory registration may fail under load).
    Without rdma_expected (the simulated lanes: no RDMA) nothing is checked; devices are still returned.
    Returns {"devices": [host path], "checked": bool, "failures": [str], "warnings": [str]}.
    """
    hc = (inspect_obj or {}).get("HostConfig") or {}
    devices = [d.get("PathOnHost") or "" for d in hc.get("Devices") or []]
    out = {"devices": devices, "checked": bool(rdma_expected), "failures": [], "warnings": []}
    if not rdma_expected:
        return out
    name = ((inspect_obj or {}).get("Name") or "").lstrip("/") or "the rank container"
    privileged = bool(hc.get("Privileged"))
    ib = [d for d in devices if d == "/dev/infiniband" or d.startswith("/dev/infiniband/")]
    if not ib and not privileged:
        out["failures"].append(
            "%s: container %s runs without /dev/infiniband (docker inspect HostConfig.Devices: %s) although the lane "
            "passes it; NCCL then finds no NET plugin or falls back to sockets. Fix: check that /dev/infiniband "
            "exists on %s (ls /sys/class/infiniband) and that the rank starts with --device /dev/infiniband "
            "(the lane's container.devices), then restart the group (catalogue nccl_no_net_plugin)"
            % (host, name, json.dumps(devices), host))
    memlock = [u for u in hc.get("Ulimits") or [] if u.get("Name") == "memlock"]
    if not privileged and not any(u.get("Soft") == -1 and u.get("Hard") == -1 for u in memlock):
        out["warnings"].append(
            "%s: container %s has memlock %s, not unlimited: RDMA memory registration can fail under load. Fix: "
            "run the rank with --ulimit memlock=-1 (catalogue nccl_no_net_plugin)"
            % (host, name, "%s/%s" % (memlock[0].get("Soft"), memlock[0].get("Hard")) if memlock else "default"))
    caps = [c.upper().replace("CAP_", "") for c in hc.get("CapAdd") or []]
    if not privileged and "IPC_LOCK" not in caps and "ALL" not in caps:
        out["warnings"].append(
            "%s: container %s lacks the IPC_LOCK capability (CapAdd %s): RDMA memory registration can fail. Fix: "
            "run the rank with --cap-add IPC_LOCK (catalogue nccl_no_net_plugin)" % (host, name, json.dumps(hc.get("CapAdd"))))
    return out


def nccl_version_agreement(ranks, expected=None):
    """Every rank must run one NCCL (catalogue nccl_version_skew), read from its boot log.

    ranks: [{rank, host, nccl_version}] (parse_boot_log figures with the rank's identity); expected: the lane's
    pinned NCCL version, if any. More than one version across the ranks fails, naming each rank's host and
    version; so does a version other than the pin. A rank that logged none while others did is a warning
    (vLLM logs the line at INFO; a rank restarted with another log level may not). No rank logging one (the
    CPU engine has no NCCL) gives neither. Returns {by_rank: {rank: version}, versions, failures, warnings}.
    """
    rows = sorted(ranks or [], key=lambda r: int(r.get("rank", 0)))
    by_rank = dict((int(r.get("rank", 0)), r.get("nccl_version")) for r in rows)
    seen = sorted(set(v for v in by_rank.values() if v))
    out = {"by_rank": by_rank, "versions": seen, "failures": [], "warnings": []}
    if not seen:
        return out

    def who(r):
        return "rank %s on %s: %s" % (r.get("rank"), r.get("host") or "?", r.get("nccl_version") or "not logged")
    if len(seen) > 1:
        out["failures"].append(
            "NCCL differs across ranks (%s); ranks with different NCCL builds fail in ncclCommInitRank or corrupt "
            "collectives (catalogue nccl_version_skew). Fix: run one image on every rank (image_sync; with "
            "image.expected_packages pinning nvidia-nccl-cu13) and restart the group" % "; ".join(who(r) for r in rows))
    if expected:
        off = [r for r in rows if r.get("nccl_version") and r["nccl_version"] != str(expected)]
        if off:
            out["failures"].append(
                "NCCL %s expected (lane image.expected_packages) but %s (catalogue nccl_version_skew). Fix: rebuild "
                "the image with the NCCL pin restored (pip check) and redistribute it (image_sync)"
                % (expected, "; ".join(who(r) for r in off)))
    silent = [r for r in rows if not r.get("nccl_version")]
    if silent:
        out["warnings"].append("no NCCL version line in the log of %s, so its NCCL is not compared (catalogue "
                               "nccl_version_skew)" % ", ".join("rank %s on %s" % (r.get("rank"), r.get("host"))
                                                                for r in silent))
    return out


def kv_pool_summary(ranks, spread_warn_gib=2.0, pin_bytes=None):
    """KV pool across ranks (docs/memory-plan.md minimum-across-ranks trap, catalogue kv_pool_below_peers; pin check catalogue kv_pin_no_activation_reserve).

    ranks: list of {rank, host, available_kv_cache_gib, kv_cache_tokens, max_concurrency,
    kv_cache_memory_suggestion} (parse_boot_log output plus rank/host). A rank whose log carries
    per-rank prefixes for several ranks (single container view) is expanded from kv_by_rank.
    Returns {per_rank, effective_kv_gib, limiting_rank, limiting_host, spread_gib, warnings,
    pool_tokens, max_concurrency, pool_source}. pool_tokens is the head's "GPU KV cache size"
    line, which already reflects the minimum; it is never recomputed from GiB (catalogue kv_pool_below_peers).
    """
    per_rank = []
    for r in ranks:
        by_rank = r.get("kv_by_rank") or {}
        if len(by_rank) > 1:
            for rk, gib in sorted(by_rank.items()):
                per_rank.append({"rank": int(rk), "host": r.get("host"), "available_kv_cache_gib": gib})
        else:
            per_rank.append({"rank": r.get("rank"), "host": r.get("host"),
                             "available_kv_cache_gib": r.get("available_kv_cache_gib")})
    warnings = []
    known = [p for p in per_rank if p["available_kv_cache_gib"] is not None]
    missing = [p for p in per_rank if p["available_kv_cache_gib"] is None]
    for p in missing:
        warnings.append("rank %s (%s): no 'Available KV cache memory' line in its log; the minimum across ranks "
                        "cannot be confirmed (docs/memory-plan.md)" % (p["rank"], p["host"]))
    eff = lim = spread = None
    if known:
        lim = min(known, key=lambda p: (p["available_kv_cache_gib"], p["rank"] if p["rank"] is not None else 0))
        eff = lim["available_kv_cache_gib"]
        spread = round(max(p["available_kv_cache_gib"] for p in known) - eff, 2)
        if spread > spread_warn_gib:
            warnings.append("KV headroom spread %.2f GiB across ranks exceeds %.2f GiB: rank %s (%s) limits the pool "
                            "at %.2f GiB (catalogue kv_pool_below_peers)" % (spread, spread_warn_gib, lim["rank"], lim["host"], eff))
    head = None
    for r in ranks:
        if r.get("rank") == 0:
            head = r
    pool = conc = None
    src = None
    for r in ([head] if head else []) + [x for x in ranks if x is not head]:
        if r and r.get("kv_cache_tokens") is not None:
            pool, conc, src = r["kv_cache_tokens"], r.get("max_concurrency"), "rank %s log" % r.get("rank")
            break
    suggestion = None
    for r in ([head] if head else []) + list(ranks):
        if r and r.get("kv_cache_memory_suggestion"):
            suggestion = r["kv_cache_memory_suggestion"]
            break
    if pin_bytes and suggestion and int(pin_bytes) > suggestion["fit_bytes"]:
        warnings.append("pinned --kv-cache-memory %d B (%.2f GiB) exceeds vLLM's 'fit into requested memory' value "
                        "%d B (%.1f GiB): the activation reserve is gone, long prompts will kill the engine (catalogue kv_pin_no_activation_reserve)"
                        % (int(pin_bytes), int(pin_bytes) / 1024.0 ** 3, suggestion["fit_bytes"],
                           suggestion["fit_gib"]))
    return {"per_rank": per_rank, "effective_kv_gib": eff,
            "limiting_rank": lim["rank"] if lim else None, "limiting_host": lim["host"] if lim else None,
            "spread_gib": spread, "pool_tokens": pool, "max_concurrency": conc, "pool_source": src,
            "suggested_pin": suggestion, "pin_bytes": int(pin_bytes) if pin_bytes else None,
            "warnings": warnings}


# --------------------------------------------------------------------------------------------
# /metrics (Prometheus text, docs/health.md). The serving counters and the wedge check live in verdict.py (shared
# with the watchdog); this parser stays here because vllm_bench imports health.py alone.
# --------------------------------------------------------------------------------------------

_SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
                        r"(?:\s+\d+)?\s*$")
_LABEL_RE = re.compile(r'(?P<k>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus exposition text -> list of {name, labels, value}.

    Comments, blank lines and anything that is not a sample line (e.g. the indented summary lines
    a lane script appends, docs/health.md) are skipped; '_created' samples are timestamps, not counter
    values, and are dropped (tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom).
    """
    samples = []
    for raw in (text or "").splitlines():
        if not raw or raw[0] in "# \t":
            continue
        m = _SAMPLE_RE.match(raw.strip())
        if not m:
            continue
        name = m.group("name")
        if name.endswith("_created"):
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict((lm.group("k"), lm.group("v")) for lm in _LABEL_RE.finditer(m.group("labels") or ""))
        samples.append({"name": name, "labels": labels, "value": value})
    return samples


def metric_sum(samples, name, **match):
    """Sum of a metric's samples whose labels include `match`; None when the metric is absent."""
    total, seen = 0.0, False
    for s in samples:
        if s["name"] != name:
            continue
        if any(s["labels"].get(k) != v for k, v in match.items()):
            continue
        total += s["value"]
        seen = True
    return total if seen else None


SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def spec_decode_counters(samples):
    """Speculative-decoding counters (docs/health.md) from parsed samples: drafts, draft_tokens, accepted,
    per_position {pos: accepted}. None values when the server runs without a drafter."""
    per_pos = {}
    for s in samples:
        if s["name"] == SPEC_PER_POS and "position" in s["labels"]:
            pos = int(s["labels"]["position"])
            per_pos[pos] = per_pos.get(pos, 0.0) + s["value"]
    return {"drafts": metric_sum(samples, SPEC_DRAFTS),
            "draft_tokens": metric_sum(samples, SPEC_DRAFT_TOKENS),
            "accepted": metric_sum(samples, SPEC_ACCEPTED),
            "per_position": per_pos}


def _ratio(a, b, nd):
    if a is None or not b:
        return None
    return round(a / b, nd)


def spec_decode_stats(after, before=None, ndigits=4):
    """Acceptance figures from two scrapes (deltas) or one (cumulative since start), docs/health.md.

    acceptance_rate = accepted / draft_tokens; accepted_per_draft = accepted / drafts;
    mean_acceptance_length = 1 + accepted_per_draft (tokens per step);
    per_position_rate[p] = accepted_at_p / drafts; draft_tokens_per_draft = draft_tokens / drafts.
    `after`/`before` are counter dicts from spec_decode_counters().
    """
    def delta(key):
        a = after.get(key)
        if a is None:
            return None
        b = (before or {}).get(key) or 0.0
        return a - b

    drafts, draft_tokens, accepted = delta("drafts"), delta("draft_tokens"), delta("accepted")
    b_pos = (before or {}).get("per_position") or {}
    per_pos = dict((int(p), v - b_pos.get(p, 0.0)) for p, v in sorted((after.get("per_position") or {}).items()))
    apd = _ratio(accepted, drafts, 6)
    pos_sum = sum(per_pos.values()) if per_pos else None
    warnings = []
    rate = _ratio(accepted, draft_tokens, ndigits)
    if rate is not None and rate >= 0.999 and drafts:
        warnings.append("acceptance is exactly 1.00: the CUDA-graph + spec-decode bug (vLLM #53030, catalogue eagle3_interface)")
    elif rate is not None and rate <= 0.16 and drafts:
        warnings.append("acceptance %.3f near 0.15: the drafter's aux-layer capture may be broken (catalogue eagle3_interface); "
                        "check on a fixed code prompt" % rate)
    return {
        "present": drafts is not None,
        "drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted,
        "acceptance_rate": rate,
        "accepted_per_draft": round(apd, ndigits) if apd is not None else None,
        "mean_acceptance_length": round(1 + apd, 2) if apd is not None else None,
        "draft_tokens_per_draft": _ratio(draft_tokens, drafts, 2),
        "num_positions": len(per_pos),
        "per_position_accepted": [per_pos[p] for p in sorted(per_pos)],
        "per_position_rate": [round(per_pos[p] / drafts, 3) if drafts else None for p in sorted(per_pos)],
        "per_position_sum": pos_sum,
        "per_position_sum_matches": (pos_sum == accepted) if (per_pos and accepted is not None
                                                              and len(per_pos) > 1) else None,
        "warnings": warnings,
    }


# --------------------------------------------------------------------------------------------
# Smoke verdicts (docs/health.md, catalogue reasoning_empty_content, tool_parser_zero_arg)
# --------------------------------------------------------------------------------------------

THINK_CLOSE = "</think>"


def chat_message(body):
    """First choice's message fields: content, reasoning (either field), finish_reason, tool_calls."""
    choices = (body or {}).get("choices") or []
    if not choices:
        return {"content": None, "reasoning": None, "reasoning_field": None, "finish_reason": None,
                "tool_calls": []}
    ch = choices[0] or {}
    msg = ch.get("message") or {}
    reasoning, field = None, None
    # This build returns `reasoning`; others `reasoning_content` (catalogue reasoning_empty_content): read both.
    for key in ("reasoning", "reasoning_content"):
        if msg.get(key):
            reasoning, field = msg[key], key
            break
    return {"content": msg.get("content"), "reasoning": reasoning, "reasoning_field": field,
            "finish_reason": ch.get("finish_reason"), "tool_calls": msg.get("tool_calls") or []}


def evaluate_chat(body, reasoning_parser=None):
    """Verdict on one chat completion (catalogue reasoning_empty_content).

    Returns {ok, action, issue, msg, content_chars, reasoning_chars, reasoning_field, finish_reason}.
    action: 'pass' | 'retry' (length cut with reasoning present: not a dead model) | 'fail'.
    """
    m = chat_message(body)
    content = m["content"] or ""
    reasoning = m["reasoning"] or ""
    res = {"content_chars": len(content), "reasoning_chars": len(reasoning),
           "reasoning_field": m["reasoning_field"], "finish_reason": m["finish_reason"],
           "content_excerpt": content[:120]}
    if THINK_CLOSE in content:
        res.update(ok=False, action="fail", issue="think_tag_in_content",
                   msg="'%s' inside content: the reasoning parser%s does not split reasoning from content; "
                       "with a template that prefills <think> use glm47, not glm45 (catalogue reasoning_empty_content)"
                       % (THINK_CLOSE, " (%s)" % reasoning_parser if reasoning_parser else ""))
        return res
    if content.strip():
        res.update(ok=True, action="pass", issue=None, msg="content %d chars, finish_reason %s"
                   % (len(content), m["finish_reason"]))
        return res
    if m["finish_reason"] == "length" and reasoning:
        res.update(ok=False, action="retry", issue="reasoning_used_all_tokens",
                   msg="empty content, finish_reason length, %d chars of reasoning (%s): the reasoning ate "
                       "max_tokens; retry with more tokens and reasoning_effort low (catalogue reasoning_empty_content)"
                       % (len(reasoning), m["reasoning_field"]))
        return res
    if not (body or {}).get("choices"):
        res.update(ok=False, action="fail", issue="no_choices", msg="response has no choices: %s"
                   % json.dumps(body)[:200])
        return res
    res.update(ok=False, action="fail", issue="empty_content",
               msg="empty content (finish_reason %s, no reasoning): the model produced nothing" % m["finish_reason"])
    return res


def evaluate_tool_call(body, expected_name, expected_args=None, tool_call_parser=None):
    """Verdict on a tool-call smoke (catalogue tool_parser_zero_arg, docs/health.md).

    Passes when tool_calls[0].function.name == expected_name and its arguments parse as a JSON
    object; with expected_args=={} the object must be empty, otherwise it must hold every key of
    expected_args. Else a tool-call parser failure naming the lane's parser.
    """
    m = chat_message(body)
    parser = tool_call_parser or "(none set)"
    calls = m["tool_calls"]
    res = {"finish_reason": m["finish_reason"], "tool": expected_name, "arguments": None}
    if not calls:
        res.update(ok=False, issue="no_tool_call",
                   msg="no tool call for '%s' (finish_reason %s): tool-call parser %s failed or auto tool choice is "
                       "off; look for 'Failed to extract tool call spec' in the head's log (catalogue tool_parser_zero_arg)"
                       % (expected_name, m["finish_reason"], parser))
        return res
    fn = (calls[0] or {}).get("function") or {}
    name = fn.get("name")
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    res["arguments"] = args
    if name != expected_name:
        res.update(ok=False, issue="wrong_tool",
                   msg="tool call names '%s', expected '%s' (tool-call parser %s, catalogue tool_parser_zero_arg)" % (name, expected_name, parser))
        return res
    if not isinstance(args, dict):
        res.update(ok=False, issue="arguments_not_json",
                   msg="arguments of '%s' do not parse as a JSON object: %r (tool-call parser %s, catalogue tool_parser_zero_arg)"
                       % (name, raw, parser))
        return res
    if expected_args is not None and expected_args == {} and args != {}:
        res.update(ok=False, issue="unexpected_arguments",
                   msg="zero-argument tool '%s' returned arguments %s (tool-call parser %s, catalogue tool_parser_zero_arg)"
                       % (name, json.dumps(args), parser))
        return res
    missing = [k for k in (expected_args or {}) if k not in args]
    if missing:
        res.update(ok=False, issue="missing_arguments",
                   msg="tool '%s' lacks argument(s) %s: got %s (tool-call parser %s, catalogue tool_parser_zero_arg)"
                       % (name, ", ".join(missing), json.dumps(args), parser))
        return res
    res.update(ok=True, issue=None, msg="tool call %s(%s)" % (name, json.dumps(args, sort_keys=True)))
    return res


# Tool calls at the deployed concurrency, streamed and not (catalogue tool_call_mangled). GLM's tool-call markup must never leak
# into a name or into content; a stream that ends with finish_reason tool_calls must have carried the calls.
_TOOL_MARKUP = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")


def assemble_stream(text):
    """Fold an SSE chat-completion stream into the body a non-streamed request returns.

    Returns (body, tool_call_deltas): deltas of content / reasoning / reasoning_content are concatenated; tool
    calls are merged by index (id and name from their first delta, argument fragments concatenated).
    """
    content, reasoning, finish, role = [], [], None, None
    calls, deltas, chunks = {}, 0, 0
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ValueError("stream chunk is not JSON: %r" % data[:120])
        chunks += 1
        for ch in chunk.get("choices") or []:
            d = ch.get("delta") or {}
            role = role or d.get("role")
            if d.get("content"):
                content.append(d["content"])
            for key in ("reasoning", "reasoning_content"):
                if d.get(key):
                    reasoning.append(d[key])
            for tc in d.get("tool_calls") or []:
                deltas += 1
                empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                slot = calls.setdefault(tc.get("index", 0), empty)
                slot["id"] = slot["id"] or tc.get("id")
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    if not chunks:
        raise ValueError("no data chunk in the stream: %r" % (text or "")[:120])
    msg = {"role": role or "assistant", "content": "".join(content) if content else None,
           "reasoning": "".join(reasoning) if reasoning else None,
           "tool_calls": [calls[i] for i in sorted(calls)]}
    return {"choices": [{"index": 0, "message": msg, "finish_reason": finish}]}, deltas


# The tool-call acceptance both the health gate (module vllm_health) and the bench (vllm_bench.py) send (catalogue
# tool_parser_zero_arg, tool_call_mangled): a zero-argument tool and one with a required argument.
TOOL_SMOKE_CASES = (
    ("get_time", {}, "What time is it?", {"type": "object", "properties": {}}),
    ("get_weather", {"city": "Berlin"}, "What is the weather in Berlin? Use the tool.",
     {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
)


def tool_answer_verdict(answer, name, args, streamed, judge="call", tool_call_parser=None, redact=None):
    """One answer (status, parsed JSON, raw text) to a tool request: well-formed always; with judge 'call' also the
    expected call and arguments. redact(text) hides secrets in an HTTP error body."""
    status, parsed, text = answer
    if status != 200:
        body = (text or "")[:300]
        return {"ok": False, "http_status": status, "msg": "HTTP %s: %s" % (status, redact(body) if redact else body)}
    deltas = None
    if streamed:
        try:
            parsed, deltas = assemble_stream(text)
        except ValueError as e:
            return {"ok": False, "http_status": status, "msg": "streamed: %s" % e}
    v = evaluate_tool_message(parsed, [name], streamed, deltas, tool_call_parser)
    if v["ok"] and judge == "call":
        v = evaluate_tool_call(parsed, name, args, tool_call_parser)
        if not v["ok"] and streamed:
            v["msg"] = "streamed: " + v["msg"]
    v["http_status"] = status
    return v


def tool_smoke(post, make_body, concurrency, judge="call", tool_call_parser=None, redact=None, pool=None):
    """Each TOOL_SMOKE_CASES tool sent `concurrency` times at once, non-streamed then streamed (the deployed
    concurrency: the parser drops arguments only under load, catalogue tool_call_mangled).

    post(body) -> (status, parsed JSON or None, raw text); make_body(question, tools_spec, streamed) -> the request
    body; pool(n) -> an executor with map() (default a ThreadPoolExecutor of n workers).
    Returns {rows: [{tool, streamed, concurrency, failed, ok, judge, http_status, msg}], failures: [str]}."""
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor as pool  # noqa: N813 pylint: disable=import-outside-toplevel
    n = max(1, int(concurrency))
    rows, failures = [], []
    for name, args, question, schema in TOOL_SMOKE_CASES:
        spec = [{"type": "function", "function": {"name": name, "description": "tool smoke", "parameters": schema}}]
        for streamed in (False, True):
            body = make_body(question, spec, streamed)
            with pool(n) as ex:
                answers = list(ex.map(lambda _i: post(body), range(n)))
            verdicts = [tool_answer_verdict(a, name, args, streamed, judge, tool_call_parser, redact) for a in answers]
            bad = [v for v in verdicts if not v["ok"]]
            how = "%s, %d concurrent" % ("streamed" if streamed else "non-streamed", n)
            rows.append({"tool": name, "streamed": streamed, "concurrency": n, "failed": len(bad), "ok": not bad,
                         "judge": judge, "http_status": sorted(set(v["http_status"] for v in verdicts), key=str),
                         "msg": bad[0]["msg"] if bad else verdicts[0]["msg"]})
            if bad:
                failures.append("tool %s (%s): %d of %d failed; first: %s" % (name, how, len(bad), n, bad[0]["msg"]))
    return {"rows": rows, "failures": failures}


def evaluate_tool_message(body, offered, streamed=False, tool_call_deltas=None, tool_call_parser=None):
    """Is the answer to a tool request a well-formed assistant message (catalogue tool_call_mangled)? Judges what random weights allow.

    Checks: one choice; role assistant; finish_reason one of stop, length, tool_calls; content and reasoning are
    strings or null without GLM tool markup; every tool call has type function, a name among the offered tools
    and arguments that parse as a JSON object; finish_reason tool_calls comes with calls (and, streamed, with
    at least one delta.tool_calls). Does not judge whether the model chose to call a tool or its argument values.
    """
    parser = tool_call_parser or "(none set)"
    how = "streamed" if streamed else "non-streamed"
    choices = (body or {}).get("choices")
    if not isinstance(choices, list) or len(choices) != 1:
        return {"ok": False, "msg": "%s: expected one choice, got %s" % (how, json.dumps(body)[:200])}
    msg = (choices[0] or {}).get("message") or {}
    finish = choices[0].get("finish_reason")
    problems = []
    if msg.get("role") != "assistant":
        problems.append("role %r, not assistant" % msg.get("role"))
    if finish not in ("stop", "length", "tool_calls"):
        problems.append("finish_reason %r" % finish)
    for key in ("content", "reasoning", "reasoning_content"):
        val = msg.get(key)
        if val is not None and not isinstance(val, str):
            problems.append("%s is %s, not a string" % (key, type(val).__name__))
        elif val and any(t in val for t in ("<tool_call>", "<arg_key>", "<arg_value>")) and key == "content":
            problems.append("tool-call markup in content: %r" % val[:120])
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        problems.append("tool_calls is not a list")
        calls = []
    for i, call in enumerate(calls):
        fn = (call or {}).get("function") or {}
        name = fn.get("name")
        if (call or {}).get("type", "function") != "function":
            problems.append("tool_calls[%d].type %r" % (i, call.get("type")))
        if not isinstance(name, str) or name not in offered:
            problems.append("tool_calls[%d] names %r, not one of the offered tools %s%s"
                            % (i, name, sorted(offered), " (tool-call markup in the name)"
                               if isinstance(name, str) and any(t in name for t in _TOOL_MARKUP) else ""))
        try:
            args = json.loads(fn.get("arguments") or "{}")
            if not isinstance(args, dict):
                raise ValueError("not an object")
        except ValueError:
            problems.append("tool_calls[%d] arguments do not parse as a JSON object: %r" % (i, fn.get("arguments")))
    if finish == "tool_calls" and not calls:
        problems.append("finish_reason tool_calls without any tool call")
    if streamed and finish == "tool_calls" and not tool_call_deltas:
        problems.append("finish_reason tool_calls but no delta.tool_calls in the stream")
    if problems:
        return {"ok": False, "msg": "%s answer is malformed (tool-call parser %s, catalogue tool_parser_zero_arg): %s"
                % (how, parser, "; ".join(problems))}
    return {"ok": True, "msg": "%s answer well-formed: finish_reason %s, %d tool call(s)" % (how, finish, len(calls))}


# Several tokens, not one: a one-token prompt as the first request after a start killed every rank of the
# simulated fleet's two-node CPU engine (EngineCore "Worker proc died unexpectedly", reproduced three times);
# a short sentence is what the canaries of the field reports send as well.
CANARY_PROMPT = "Reply with one word: ready"


def canary_request(model):
    """Body of the canary: POST /v1/completions, one completion token, greedy (vllm_health, the watchdog)."""
    return {"model": model, "prompt": CANARY_PROMPT, "max_tokens": 1, "temperature": 0}


def evaluate_canary(body):
    """The 1-token /v1/completions canary (docs/watchdog.md): 200 with one choice carrying a text field."""
    choices = (body or {}).get("choices") or []
    if choices and isinstance(choices[0], dict) and "text" in choices[0]:
        usage = (body or {}).get("usage") or {}
        return {"ok": True, "msg": "canary answered %r (%s completion tokens)"
                % (choices[0]["text"], usage.get("completion_tokens"))}
    return {"ok": False, "msg": "canary returned no choice: %s" % json.dumps(body)[:200]}


def default_kwargs_warnings(default_chat_template_kwargs, reasoning_parser):
    """catalogue reasoning_empty_content: enable_thinking false as a server default does not stop GLM thinking with the stock template."""
    kw = default_chat_template_kwargs or {}
    out = []
    if kw.get("enable_thinking") is False:
        out.append("default chat-template kwargs set enable_thinking false (reasoning parser %s): with a template "
                   "that prefills <think> this does not stop thinking, it only merges reasoning into content "
                   "(catalogue reasoning_empty_content)" % (reasoning_parser or "none"))
    return out


def count_replacement_chars(text):
    """U+FFFD count of a corruption probe (docs/health.md, T2 Hangul probe; 0 expected)."""
    return (text or "").count(u"\ufffd")


# The corruption probe (catalogue token_corruption): a Korean prompt at temperature 0, non-streaming, several
# passes. Corrupted token ids decode to U+FFFD; Hangul makes them visible where English hides them.
CORRUPTION_PROBE_PROMPT = (u"\ud55c\uad6d\uc5b4\ub85c\ub9cc \ub2f5\ud558\uc138\uc694. "
                           u"\uc11c\uc6b8\uc758 \uc0ac\uacc4\uc808\uc744 \ub2e4\uc12f "
                           u"\ubb38\uc7a5\uc73c\ub85c \uc124\uba85\ud574 \uc8fc\uc138\uc694.")


def message_text(body):
    """Every generated string of the first choice: content, reasoning and tool-call arguments."""
    m = chat_message(body)
    parts = [m["content"] or "", m["reasoning"] or ""]
    for call in m["tool_calls"]:
        fn = (call or {}).get("function") or {}
        parts.append(str(fn.get("arguments") or ""))
    return "".join(parts)


def evaluate_corruption(passes, checkpoint=None):
    """Verdict of the corruption probe. passes: one entry per pass, the U+FFFD count of the answer or, for a pass
    that got no answer, a string saying why. Any U+FFFD (or a failed pass) fails, with the count per pass."""
    counts = [p if isinstance(p, int) else None for p in passes]
    shown = " / ".join(str(c) if c is not None else "error" for c in counts)
    what = (" from checkpoint %s" % checkpoint) if checkpoint else ""
    errors = [p for p in passes if not isinstance(p, int)]
    if errors:
        return {"ok": False, "counts": counts,
                "msg": "corruption probe: %s U+FFFD over %d passes; a pass failed: %s" % (shown, len(passes), errors[0])}
    if any(counts):
        return {"ok": False, "counts": counts,
                "msg": "corruption probe: U+FFFD %s over %d passes (Korean prompt, temperature 0, 0 expected)%s: the "
                       "engine emits corrupted token ids. Fix: serve a compressed-tensors checkpoint (the lane's *_ct "
                       "variant, RedHatAI/GLM-5.3-Flash-NVFP4) (catalogue token_corruption)" % (shown, len(passes), what)}
    return {"ok": True, "counts": counts, "msg": "corruption probe: U+FFFD %s over %d passes" % (shown, len(passes))}
