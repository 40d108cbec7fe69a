# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Per-rank memory plan: what fits, the KV pool it gives, and the bring-up plan (pure Python).

Units: GiB = 2**30 bytes (what vLLM, ``free -h`` and /proc/meminfo/1024**2 print); GB = 10**9 bytes
(only where a source writes GB, e.g. the 11.523 GB pin = 11523000000 bytes). Tokens are tokens of
context; bytes per token are KV bytes per token held on ONE rank.

The formulas (docs/memory-plan.md gives the derivation and the error table):

  weights per rank (GiB)   = checkpoint bytes / TP  (the safetensors index metadata.total_size, or the
                             lane's checkpoint.size_gib), + drafter bytes / TP; or a measured figure
                             (the engine's "Model loading took X GiB") when one is given.
  KV bytes per request     R(L) = L x b_tok + s_req       (docs/memory-plan.md trap: the pool's
                             apparent bytes/token falls as max_model_len grows, 8,797 at 262K vs
                             7,651 at 512K; a fixed per-request state explains it)
  max concurrency          = KV bytes per rank / R(max_model_len)
  pool tokens              = int(max concurrency x max_model_len)   (vLLM kv_cache_utils, docs/memory-plan.md)
  KV (pin)                 = serve.kv_policy.bytes
  KV (profiler)            = gpu_memory_utilization x MemTotal - (weights + drafter + non-torch
                             + activation peak + CUDA graphs)                      (catalogue kv_pin_no_activation_reserve; docs/memory-plan.md)
  startup check            MemAvailable >= gpu_memory_utilization x MemTotal        (catalogue free_memory_refused, min_free_kbytes_raised)
  resident per rank        = weights + drafter + non-torch + KV + activation + CUDA graphs
  margin per rank          = MemAvailable - OS reserve - resident   (profiler: - utilization x MemTotal)

Calibration of b_tok / s_req (CALIBRATION below) comes from the seeds' published pin/pool pairs; each
entry names the pairs it was fitted on, the others are held out and reproduced by tests/unit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import required_gib

GIB = 1024 ** 3
GB = 1000 ** 3
KIB_PER_GIB = 1024 ** 2


class MemoryPlanError(Exception):
    """Bad input to the plan; the message names the item and the fix."""


# b_tok: KV bytes per token per rank that grow with context; s_req: bytes per request per rank that
# do not (state of the linear-attention layers). Fitted per speculative method on fp8 KV.
CALIBRATION = {
    "mtp": {
        "b_tok": 6171.0, "s_req": 687.0e6,
        "source": "fitted on Y3 TP3 MTP-4 262K (4.38 GiB pin, 534,635 tokens = 8,793 B/token/rank) and "
                  "T4 TP4 MTP 1M (16 GiB pin, 2,516,582 tokens); docs/memory-plan.md; roles/vllm_bench/README.md",
    },
    "none": {
        "b_tok": 4340.0, "s_req": 687.0e6,
        "source": "Y3 TP3 no speculation 262K (4.38 GiB pin, 675,219 tokens = 6,962 B/token/rank), "
                  "with MTP's per-request state (one published pair only); docs/memory-plan.md; roles/vllm_bench/README.md",
    },
    "dflash": {
        "b_tok": 5655.0, "s_req": 1007.0e6,
        "source": "fitted on T2 TP2 DFlash2 262K (6 GiB pin, 678,661 tokens) and T4 TP4 DFlash2 1M eager "
                  "(24 GiB pin, 3,895,606 tokens); docs/memory-plan.md; roles/vllm_bench/README.md",
    },
}
# The nvidia checkpoint's KV layout is heavier: the same 6 GiB pin at TP2 gives 536,832 tokens
# against RedHat's 678,661 (docs/lanes.md table, docs/memory-plan.md T2m) -> x 1.2642 on both terms.
NVIDIA_LAYOUT_FACTOR = 678661.0 / 536832.0
# bf16 KV stores twice the bytes of fp8 per token (docs/memory-plan.md: fp8 NoPE MLA 512 B/token/layer, bf16 1152
# with the rope part); applied to b_tok only.
BF16_FACTOR = 2.0

# Defaults of the per-rank budget, all GiB. From one captured GB10 boot (tests/fixtures/node/
# gb10-single-node-startup.log): "Actual usage is 55.99 GiB for consumed memory (weights + non-torch),
# 3.78 GiB for peak activation, and 0.94 GiB for CUDAGraph memory" with "Model loading took 51.35 GiB".
DEFAULTS = {
    "non_torch_gib": 4.64,            # 55.99 - 51.35
    "activation_gib": 3.78,           # peak activation at max_num_batched_tokens 8192 (scaled linearly)
    "activation_ref_batched_tokens": 8192,
    "cuda_graph_gib": 0.94,           # only when the lane captures graphs (enforce_eager false)
    "os_reserve_gib": 3.0,            # docs/memory-plan.md: a 3 GB anti-OOM floor on MemAvailable killed the engine
    "thin_margin_gib": 5.0,           # catalogue kv_pool_below_peers / docs/memory-plan.md: worker ranks profile 3-5 GiB less than the head
    "nominal_mem_total_gib": 121.69,  # a GB10's MemTotal as vLLM saw it in catalogue free_memory_refused (lane-only plans)
}

# Boot phases of real fleets (seconds), for the plan's rough durations (roles/vllm_bench/README.md).
BOOT_FIGURES = {
    2: {"load_s": 610, "init_s": 148,
        "source": "a two-Spark TP2 deployment's first boot: weights loaded in 610 s, engine init 148 s (docs/memory-plan.md)"},
    3: {"load_s": 479, "init_s": 170,
        "source": "a three-Spark TP3 deployment: weights loaded in 462-479 s plus 170 s warmup (docs/memory-plan.md)"},
    4: {"load_s": 780, "init_s": 96,
        "source": "a four-Spark TP4 deployment: about 13 min of loading plus 96 s of CUDA graph capture "
                  "(docs/memory-plan.md)"},
}


def _num(value, name, minimum=None, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise MemoryPlanError("memory_plan: %s must be a number, got %r" % (name, value))
    if minimum is not None and value < minimum:
        raise MemoryPlanError("memory_plan: %s must be >= %s, got %r" % (name, minimum, value))
    return value


def kv_cache_bytes(max_model_len, concurrency, bytes_per_token_per_rank):
    """KV pin per rank in bytes: max_model_len (tokens/request) x concurrency (requests) x bytes/token/rank.

    Operations docs/memory-plan.md (Y3 recipe): 524288 x 2.5 x 8793 = 11525160960, rounded down to whole bytes.
    """
    for name, value in (("max_model_len", max_model_len), ("concurrency", concurrency),
                        ("bytes_per_token_per_rank", bytes_per_token_per_rank)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MemoryPlanError("kv_cache_bytes: %s must be a number, got %r" % (name, value))
        if value <= 0:
            raise MemoryPlanError("kv_cache_bytes: %s must be positive, got %r" % (name, value))
    return int(max_model_len * concurrency * bytes_per_token_per_rank)


def gib(nbytes):
    return nbytes / float(GIB)


def _r2(value):
    return None if value is None else round(float(value), 2)


def spec_method(lane):
    spec = (lane.get("serve") or {}).get("speculative_config") or {}
    method = spec.get("method")
    if not method:
        return "none"
    if method in ("dflash", "eagle3", "dflash2"):
        return "dflash"
    return "mtp" if method in ("mtp", "glm_mtp", "deepseek_mtp") else method


def kv_terms(lane, model_config=None):
    """(b_tok, s_req, source) per rank for the lane: bytes per token and bytes per request."""
    tp = int(lane.get("tensor_parallel_size") or 1)
    if lane.get("platform") == "cpu":
        cfg = model_config or {}
        layers, kvh, hd = cfg.get("num_hidden_layers"), cfg.get("num_key_value_heads"), cfg.get("head_dim")
        if hd is None and cfg.get("hidden_size") and cfg.get("num_attention_heads"):
            hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        if not (layers and kvh and hd):
            return None, None, "needs the checkpoint's config.json (num_hidden_layers, num_key_value_heads, head_dim)"
        width = 4 if str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16") == "float32" else 2
        b_tok = 2 * layers * int(math.ceil(kvh / float(tp))) * hd * width
        return float(b_tok), 0.0, ("K and V: 2 x %d layers x %d KV heads per rank x head_dim %d x %d bytes "
                                   "(config.json, standard attention)" % (layers, int(math.ceil(kvh / float(tp))),
                                                                          hd, width))
    method = spec_method(lane)
    cal = CALIBRATION.get(method)
    if cal is None:
        raise MemoryPlanError("memory_plan: no KV calibration for speculative method %r (known: %s)"
                              % (method, ", ".join(sorted(CALIBRATION))))
    b_tok, s_req, src = cal["b_tok"], cal["s_req"], cal["source"]
    dtype = str((lane.get("serve") or {}).get("kv_cache_dtype") or "auto")
    if not dtype.startswith("fp8"):
        b_tok *= BF16_FACTOR
        src += "; x%.0f per token for %s KV (not fp8)" % (BF16_FACTOR, dtype)
    if str((lane.get("checkpoint") or {}).get("repo_id") or "").startswith("nvidia/"):
        b_tok *= NVIDIA_LAYOUT_FACTOR
        s_req *= NVIDIA_LAYOUT_FACTOR
        src += "; x%.4f for the nvidia checkpoint's KV layout" % NVIDIA_LAYOUT_FACTOR
    return b_tok, s_req, src


def pool_from_kv(kv_bytes, max_model_len, b_tok, s_req):
    """(max_concurrency, pool_tokens) for KV bytes per rank at max_model_len (vLLM: int(conc x len))."""
    if kv_bytes is None or b_tok is None or kv_bytes <= 0:
        return None, None
    per_request = max_model_len * b_tok + s_req
    conc = kv_bytes / per_request
    return conc, int(conc * max_model_len)


def _model_bytes(model, given_bytes, tp):
    if not model:
        return 0.0, "none"
    if given_bytes is not None:
        return _num(given_bytes, "checkpoint bytes", 0) / tp, "safetensors index total_size / TP %d" % tp
    size = model.get("size_gib")
    if size is None:
        return None, "unknown (no size_gib in the lane and no safetensors index)"
    return float(size) * GIB / tp, "lane size_gib %s / TP %d" % (size, tp)


def _opt(options, key):
    value = options.get(key)
    return DEFAULTS[key] if value is None else _num(value, key, 0)


def memory_plan(lane, nodes=None, options=None):
    """The per-rank memory plan of a lane, optionally on measured nodes.

    lane: the resolved lane (vllm_lane_spec). nodes: list of {host, rank, mem_total_gib,
    mem_available_gib, swap_total_gib} (preflight_node facts; KiB keys mem_total_kib/mem_available_kib
    are used exactly when present), or None for the lane-only plan (a nominal GB10, no MemAvailable).
    options: checkpoint_bytes, drafter_bytes (index total_size), weights_gib_per_rank (measured),
    model_config (cpu lanes), and any DEFAULTS key.
    Returns a dict (see the filter's RETURN): per-rank rows, the pool (minimum across ranks), errors
    (cannot fit; each names rank, host and numbers) and warnings (thin margins, catalogue kv_pin_no_activation_reserve).
    """
    if not isinstance(lane, dict) or not lane.get("serve"):
        raise MemoryPlanError("memory_plan: expected the resolved lane (vllm_lane_spec), got %r" % (type(lane).__name__,))
    options = dict(options or {})
    serve = lane["serve"]
    tp = int(lane.get("tensor_parallel_size") or 1)
    length = int(serve["max_model_len"])
    cpu = lane.get("platform") == "cpu"
    policy = serve.get("kv_policy") or {"mode": "profiler"}
    gmu = serve.get("gpu_memory_utilization")
    errors, warnings = [], []

    if options.get("weights_gib_per_rank") is not None:
        weights_b = _num(options["weights_gib_per_rank"], "weights_gib_per_rank", 0) * GIB
        weights_src = "measured: %s GiB per rank" % options["weights_gib_per_rank"]
        drafter_b, drafter_src = 0.0, "included in the measured weights"
    else:
        weights_b, weights_src = _model_bytes(lane.get("checkpoint"), options.get("checkpoint_bytes"), tp)
        drafter_b, drafter_src = _model_bytes(lane.get("drafter"), options.get("drafter_bytes"), tp)
    b_tok, s_req, kv_src = kv_terms(lane, options.get("model_config"))

    if cpu:
        non_torch = activation = graphs = 0.0
        env = (lane.get("container") or {}).get("env") or {}
        space = env.get("VLLM_CPU_KVCACHE_SPACE")
        kv_mode = "cpu"
        kv_fixed = _num(space, "container.env.VLLM_CPU_KVCACHE_SPACE", 0) * GIB if space not in (None, "") else None
        if kv_fixed is None:
            warnings.append("container.env.VLLM_CPU_KVCACHE_SPACE is not set: the CPU engine's KV size is not "
                            "predicted")
    else:
        non_torch = _opt(options, "non_torch_gib") * GIB
        mnbt = serve.get("max_num_batched_tokens") or DEFAULTS["activation_ref_batched_tokens"]
        activation = _opt(options, "activation_gib") * GIB * mnbt / float(DEFAULTS["activation_ref_batched_tokens"])
        graphs = 0.0 if serve.get("enforce_eager", False) else _opt(options, "cuda_graph_gib") * GIB
        kv_mode = policy.get("mode", "profiler")
        kv_fixed = None
        if kv_mode == "pin":
            kv_fixed = policy.get("bytes")
            if not kv_fixed and policy.get("concurrency") and policy.get("bytes_per_token_per_rank"):
                kv_fixed = kv_cache_bytes(length, policy["concurrency"], policy["bytes_per_token_per_rank"])
            kv_fixed = float(kv_fixed) if kv_fixed else None
    os_reserve = _opt(options, "os_reserve_gib") * GIB
    thin = _opt(options, "thin_margin_gib") * GIB
    nonkv = (weights_b or 0.0) + (drafter_b or 0.0) + non_torch + activation + graphs

    lane_only = not nodes
    if lane_only:
        total = None if cpu else _opt(options, "nominal_mem_total_gib")
        nodes = [{"host": None, "rank": r, "mem_total_gib": total, "mem_available_gib": None,
                  "swap_total_gib": None} for r in range(tp)]
    rows = []
    for node in sorted(nodes, key=lambda n: (n.get("rank") if n.get("rank") is not None else 99, n.get("host"))):
        host, rank = node.get("host"), node.get("rank")
        who = "rank %s (%s)" % (rank, host) if host else "rank %s" % rank
        if node.get("mem_total_kib"):
            total_b = float(node["mem_total_kib"]) * 1024
        else:
            total_b = None if node.get("mem_total_gib") is None else float(node["mem_total_gib"]) * GIB
        if node.get("mem_available_kib"):
            avail_b = float(node["mem_available_kib"]) * 1024
        else:
            avail_b = None if node.get("mem_available_gib") is None else float(node["mem_available_gib"]) * GIB
        row = {"host": host, "rank": rank, "mem_total_gib": _r2(gib(total_b)) if total_b else None,
               "mem_available_gib": _r2(gib(avail_b)) if avail_b is not None else None,
               "swap_total_gib": node.get("swap_total_gib"), "startup_check": None, "required_free_gib": None}
        if kv_mode == "profiler" and not cpu:
            if gmu is None:
                raise MemoryPlanError("memory_plan: kv_policy profiler needs serve.gpu_memory_utilization")
            kv = gmu * total_b - nonkv if total_b else None
            fit_b = kv
        else:
            kv = kv_fixed
            fit_b = (gmu * total_b - nonkv) if (gmu is not None and total_b and not cpu) else None
        row["kv_gib"] = _r2(gib(kv)) if kv is not None else None
        conc, pool = pool_from_kv(kv, length, b_tok, s_req)
        row["max_concurrency"] = round(conc, 2) if conc is not None else None
        row["pool_tokens"] = pool
        resident = nonkv + (kv if kv and kv > 0 else 0.0)
        row["resident_gib"] = _r2(gib(resident))
        if gmu is not None and total_b and not cpu:
            need = required_gib(gmu, gib(total_b))
            row["required_free_gib"] = need
            if avail_b is not None:
                row["startup_check"] = gib(avail_b) >= need
                if not row["startup_check"]:
                    errors.append("%s: MemAvailable %.2f GiB is below gpu_memory_utilization %s x MemTotal %.2f GiB "
                                  "= %.2f GiB: vLLM refuses to start ('Free memory on device ... less than desired', "
                                  "catalogue free_memory_refused). Fix: lower serve.gpu_memory_utilization to %.2f or free memory on %s"
                                  % (who, gib(avail_b), gmu, gib(total_b), need,
                                     math.floor(gib(avail_b) / gib(total_b) * 100) / 100.0, host or "the node"))
        if kv is not None and kv <= 0:
            errors.append("%s: no memory left for the KV cache: %s x MemTotal %.2f GiB = %.2f GiB minus weights %.2f, "
                          "drafter %.2f, non-torch %.2f, activation %.2f, CUDA graphs %.2f GiB is %.2f GiB. Fix: a "
                          "larger tensor-parallel size or a higher gpu_memory_utilization"
                          % (who, gmu, gib(total_b), gmu * gib(total_b), gib(weights_b or 0), gib(drafter_b or 0),
                             gib(non_torch), gib(activation), gib(graphs), gib(kv)))
        elif kv is not None and b_tok is not None and kv < length * b_tok + s_req:
            errors.append("%s: KV %.2f GiB holds less than one request at max_model_len %d (needs %.2f GiB): vLLM "
                          "refuses to boot ('To serve at least one request ...', catalogue kv_cache_too_small). Fix: lower serve.max_model_len "
                          "or raise the KV" % (who, gib(kv), length, gib(length * b_tok + s_req)))
        if fit_b is not None and kv_mode == "pin" and kv is not None and kv > fit_b:
            warnings.append("%s: KV pin %.2f GiB is above what the profiler would leave at gpu_memory_utilization "
                            "%s (%.2f GiB): the activation reserve (%.2f GiB) is not kept and the first long prompt "
                            "can kill the engine (catalogue kv_pin_no_activation_reserve; docs/memory-plan.md). "
                            "Advice: keep the pin if the lane's recorded runs served your longest prompts; otherwise "
                            "lower serve.kv_policy.bytes to at most %d (%.2f GiB) in vllm_lane_overrides, or use "
                            "kv_policy mode profiler"
                            % (who, gib(kv), gmu, gib(fit_b), gib(activation), int(fit_b), gib(fit_b)))
        margin = None
        if avail_b is not None:
            claim = gmu * total_b if (kv_mode == "profiler" and not cpu) else resident
            margin = avail_b - os_reserve - claim
            if margin < 0:
                one = length * b_tok + s_req if b_tok is not None else 0.0
                room = kv + margin if kv else 0.0
                if kv_mode in ("pin", "cpu") and kv and room >= one:
                    fix = ("lower serve.kv_policy.bytes to at most %d (%.2f GiB) in vllm_lane_overrides, or free "
                           "memory on %s" % (int(room), gib(room), host or "the node"))
                elif kv_mode in ("pin", "cpu") and kv:
                    fix = ("no pin leaves room for one request at max_model_len %d (%.2f GiB) here: free memory on "
                           "%s, lower serve.max_model_len or use a lane with a larger tensor-parallel size"
                           % (length, gib(one), host or "the node"))
                else:
                    fix = "lower serve.gpu_memory_utilization or free memory on %s" % (host or "the node")
                errors.append("%s: cannot fit: needs %.2f GiB (weights %.2f + drafter %.2f + non-torch %.2f + KV %.2f "
                              "+ activation %.2f + CUDA graphs %.2f) but MemAvailable %.2f GiB less the OS reserve "
                              "%.2f GiB leaves %.2f GiB: short by %.2f GiB. Fix: %s"
                              % (who, gib(claim), gib(weights_b or 0), gib(drafter_b or 0), gib(non_torch),
                                 gib(kv or 0), gib(activation), gib(graphs), gib(avail_b), gib(os_reserve),
                                 gib(avail_b - os_reserve), gib(-margin), fix))
            elif margin < thin:
                warnings.append("%s: thin margin: %.2f GiB left after the plan (threshold %.2f GiB; worker ranks "
                                "have profiled 3-5 GiB less than the head, catalogue kv_pool_below_peers)" % (who, gib(margin), gib(thin)))
        row["margin_gib"] = _r2(gib(margin)) if margin is not None else None
        # what MemAvailable reads once the rank has claimed its share: a userspace OOM killer's floor must stay below
        row["free_at_peak_gib"] = _r2(gib(margin + os_reserve)) if margin is not None else None
        rows.append(row)

    for row in rows:
        who = "rank %s (%s):" % (row["rank"], row["host"]) if row["host"] else "rank %s:" % row["rank"]
        row["errors"] = [e for e in errors if e.startswith(who)]
        row["warnings"] = [w for w in warnings if w.startswith(who)]
    known = [r for r in rows if r["kv_gib"] is not None]
    lim = min(known, key=lambda r: r["kv_gib"]) if known else None
    return {
        "lane": lane.get("name"), "platform": lane.get("platform"), "tensor_parallel_size": tp,
        "max_model_len": length, "lane_only": lane_only, "units": "GiB = 2^30 bytes",
        "kv_policy": kv_mode, "gpu_memory_utilization": gmu,
        "weights_gib_per_rank": _r2(gib(weights_b)) if weights_b is not None else None, "weights_source": weights_src,
        "drafter_gib_per_rank": _r2(gib(drafter_b)) if drafter_b is not None else None, "drafter_source": drafter_src,
        "non_torch_gib": _r2(gib(non_torch)), "activation_gib": _r2(gib(activation)),
        "cuda_graph_gib": _r2(gib(graphs)), "os_reserve_gib": _r2(gib(os_reserve)),
        "bytes_per_token_per_rank": round(b_tok, 1) if b_tok is not None else None,
        "effective_bytes_per_token_per_rank": round(b_tok + s_req / float(length), 1) if b_tok is not None else None,
        "bytes_per_request_fixed": int(s_req) if s_req is not None else None, "kv_source": kv_src,
        "ranks": rows,
        "kv_gib": lim["kv_gib"] if lim else None, "limiting_rank": lim["rank"] if lim else None,
        "limiting_host": lim["host"] if lim else None,
        "pool_tokens": lim["pool_tokens"] if lim else None,
        "max_concurrency": lim["max_concurrency"] if lim else None,
        "errors": errors, "warnings": warnings,
    }


def _err_pct(predicted, measured):
    if predicted is None or not measured:
        return None
    return round((float(predicted) - float(measured)) / float(measured) * 100.0, 1)


def compare(plan, measured):
    """Prediction beside what the ranks logged (health.kv_pool_summary output), with the error in %.

    KV GiB per rank (each rank's 'Available KV cache memory' or the CPU engine's 'Explicitly set (x/y) GiB'),
    the pool ('GPU/CPU KV cache size: N tokens') and 'Maximum concurrency for L tokens per request: kx'.
    error_pct = (predicted - logged) / logged x 100.
    """
    pred_by_rank = dict((r["rank"], r) for r in plan.get("ranks") or [])
    rows = []
    for m in (measured or {}).get("per_rank") or []:
        p = pred_by_rank.get(m.get("rank")) or {}
        rows.append({"rank": m.get("rank"), "host": m.get("host"), "predicted_kv_gib": p.get("kv_gib"),
                     "logged_kv_gib": m.get("available_kv_cache_gib"),
                     "error_pct": _err_pct(p.get("kv_gib"), m.get("available_kv_cache_gib"))})
    conc = (measured or {}).get("max_concurrency") or {}
    return {
        "per_rank": rows,
        "pool_tokens": {"predicted": plan.get("pool_tokens"), "logged": (measured or {}).get("pool_tokens"),
                        "error_pct": _err_pct(plan.get("pool_tokens"), (measured or {}).get("pool_tokens"))},
        "max_concurrency": {"predicted": plan.get("max_concurrency"), "logged": conc.get("factor"),
                            "error_pct": _err_pct(plan.get("max_concurrency"), conc.get("factor"))},
    }


def compare_lines(comparison):
    """Report lines: one per rank, then pool and concurrency ('n/a' where a side is missing)."""
    def f(v, fmt):
        return "n/a" if v is None else fmt % v

    def tok(v):
        return "n/a" if v is None else "{:,}".format(v)

    lines = []
    for r in comparison.get("per_rank") or []:
        lines.append("rank %s (%s): KV predicted %s GiB, logged %s GiB, error %s"
                     % (r["rank"], r["host"], f(r["predicted_kv_gib"], "%.2f"), f(r["logged_kv_gib"], "%.2f"),
                        f(r["error_pct"], "%+.1f %%")))
    p, c = comparison.get("pool_tokens") or {}, comparison.get("max_concurrency") or {}
    lines.append("pool: predicted %s tokens, logged %s tokens, error %s"
                 % (tok(p.get("predicted")), tok(p.get("logged")), f(p.get("error_pct"), "%+.1f %%")))
    lines.append("max concurrency: predicted %s, logged %s, error %s"
                 % (f(c.get("predicted"), "%.2fx"), f(c.get("logged"), "%.2fx"), f(c.get("error_pct"), "%+.1f %%")))
    return lines


def bringup_plan(lane, hosts, plan=None, node_disk=None, share_mode="copy"):
    """What the bring-up will do on each node, before anything starts.

    hosts: list of {host, rank}; rank 0 is the head (serves the API). plan: memory_plan() output (its
    rows are matched by rank). node_disk: {host: {path: {free_gib}}} from preflight_node.disk, or None
    (lane-only). share_mode: model_weights_share_mode (copy: every node holds the checkpoint; nfs:
    only the owner does). Sizes are the lane's size_gib (GiB). Durations: BOOT_FIGURES (seconds, the
    seeds' recorded boots); the transfers have none (they depend on the links).
    Returns {nodes: [...], phases: [...], lines: [...]}: lines are what the playbooks print.
    """
    image = lane.get("image") or {}
    ckpt = lane.get("checkpoint") or {}
    drafter = lane.get("drafter") or {}
    serve = lane.get("serve") or {}
    tp = int(lane.get("tensor_parallel_size") or 1)
    req = lane.get("requirements") or {}
    need = req.get("disk_gib")
    dist = image.get("distribution") or "pull"
    rows_by_rank = dict((r["rank"], r) for r in (plan or {}).get("ranks") or [])
    nodes, lines = [], []
    for h in sorted(hosts, key=lambda x: x["rank"]):
        head = h["rank"] == 0
        items = []
        img_how = ("pull from its registry" if dist == "pull" else
                   ("build here (the head), then serve to the others" if dist == "build"
                    else "on the head first (pulled or built here), then served to the others")
                   if head else "from the head (%s)" % dist)
        items.append({"what": "image %s" % image.get("reference"), "gib": image.get("size_gib"), "how": img_how})
        for name, model in (("checkpoint", ckpt), ("drafter", drafter)):
            if not model:
                continue
            if head:
                how = "download %s from the hub to %s" % (model.get("repo_id"), model.get("host_path"))
            elif share_mode == "nfs" and name == "checkpoint":
                how = "NFS mount from the head (no local copy)"
            else:
                how = "copy from the head to %s" % model.get("host_path")
            gib_ = 0 if (share_mode == "nfs" and not head and name == "checkpoint") else model.get("size_gib")
            items.append({"what": "%s %s" % (name, model.get("repo_id")), "gib": gib_, "how": how})
        fixes = [f["name"] for f in lane.get("fix_files") or []]
        if fixes:
            items.append({"what": "fix files (%d)" % len(fixes), "gib": 0, "how": "from the controller: %s"
                          % ", ".join(fixes)})
        disk = None
        if isinstance(need, (int, float)) and not isinstance(need, bool):
            free = ((node_disk or {}).get(h["host"]) or {}).get(ckpt.get("host_path"), {}).get("free_gib")
            disk = {"path": ckpt.get("host_path"), "need_gib": need, "free_gib": free,
                    "ok": None if free is None else free >= need}
        mem = rows_by_rank.get(h["rank"]) or {}
        role = ("head: serves the API on port %s, rendezvous on %s" % (serve.get("api_port"), serve.get("master_port"))
                if head else "worker (--headless), joins the head's port %s" % serve.get("master_port"))
        node = {"host": h["host"], "rank": h["rank"], "role": role, "transfers": items, "disk": disk,
                "memory": mem}
        nodes.append(node)
        total = sum(float(i["gib"] or 0) for i in items)
        lines.append("%s (rank %s, %s)" % (h["host"], h["rank"], role))
        for i in items:
            lines.append("  %s: %s GiB, %s" % (i["what"], i["gib"] if i["gib"] is not None else "?", i["how"]))
        lines.append("  to transfer: %.1f GiB" % total)
        if disk:
            lines.append("  disk at %s: needs %s GiB, free %s" % (
                disk["path"], disk["need_gib"], "%s GiB" % disk["free_gib"] if disk["free_gib"] is not None
                else "(read under site.yml --check)"))
        if mem:
            lines.append("  memory: weights %s + drafter %s GiB, KV %s GiB, pool %s tokens, %s x %s tokens, margin %s"
                         % ((plan or {}).get("weights_gib_per_rank"), (plan or {}).get("drafter_gib_per_rank"),
                            mem.get("kv_gib"), "{:,}".format(mem["pool_tokens"]) if mem.get("pool_tokens") else "n/a",
                            mem.get("max_concurrency"), (plan or {}).get("max_model_len"),
                            "%s GiB" % mem["margin_gib"] if mem.get("margin_gib") is not None
                            else "(needs MemAvailable: site.yml --check)"))
    boot = BOOT_FIGURES.get(tp) if lane.get("platform") != "cpu" else None
    phases = [
        {"phase": "preflight, node_prep, rdma_fabric", "seconds": None},
        {"phase": "image_sync (%s GiB)" % image.get("size_gib"), "seconds": None},
        {"phase": "kernel_fix", "seconds": None},
    ]
    drafter_note = " + drafter %s GiB" % drafter.get("size_gib") if drafter else ""
    phases.append({"phase": "model_weights (%s GiB%s)" % (ckpt.get("size_gib"), drafter_note), "seconds": None})
    if (lane.get("padding") or {}).get("config_targets"):
        phases.append({"phase": "tp_pad", "seconds": None})
    phases += [
        {"phase": "vllm_ranks: workers first, then the head; weights load",
         "seconds": boot["load_s"] if boot else None},
        {"phase": "engine init (profile, KV cache, warmup)", "seconds": boot["init_s"] if boot else None},
        {"phase": "vllm_health, vllm_bench", "seconds": None},
    ]
    lines.append("phases, in order%s:" % (" (durations: %s)" % boot["source"] if boot else ""))
    for n, p in enumerate(phases, 1):
        lines.append("  %d. %s%s" % (n, p["phase"], ", ~%d s" % p["seconds"] if p["seconds"] else ""))
    return {"nodes": nodes, "phases": phases, "lines": lines}


# --------------------------------------------------------------------------------------------
# The plan as a document (issue 31): one Markdown page, saved under the user's output directory with an id
# --------------------------------------------------------------------------------------------

def plan_id(lane, hosts):
    """A short id of what the plan was made from: the resolved lane and the rank layout (host, rank, address).
    The same lane and inventory give the same id; any change to either gives another."""
    import hashlib
    import json
    layout = sorted([str(h.get("host")), int(h.get("rank")), str(h.get("address") or "")] for h in hosts)
    blob = json.dumps({"lane": lane, "layout": layout}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def _cell(value, unit=""):
    if value is None:
        return "?"
    if isinstance(value, float):
        value = "%g" % value
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 10000:
        value = "{:,}".format(value)
    return "%s%s" % (value, unit)


def plan_markdown(lane, bringup, plan, pid, made, measured):
    """The bring-up plan as a Markdown page: a table with one row per node, the transfers, the phases with their
    expected durations and sources, what each label means, and every warning with its advice.
    bringup: bringup_plan() output; plan: memory_plan() output; measured: whether MemAvailable and disk were read
    on the nodes (site.yml) or the plan is the lane's alone (validate.yml, a nominal GB10)."""
    serve = lane.get("serve") or {}
    out = ["# Bring-up plan %s" % pid, "",
           "Lane `%s` at tensor-parallel size %s (%s), made %s from %s. A run whose lane or inventory differs gets "
           "another id." % (lane.get("name"), lane.get("tensor_parallel_size"), lane.get("platform"), made,
                            "the nodes' measured memory and disk (site.yml)" if measured
                            else "the lane alone, on a nominal GB10 (validate.yml: no node was contacted)"), "",
           "| node | rank | role | to transfer (GiB) | disk need / free (GiB) | KV (GiB) | pool (tokens) | "
           "concurrency at max_model_len | margin (GiB) | ports |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for n in bringup["nodes"]:
        mem, disk = n.get("memory") or {}, n.get("disk") or {}
        moved = sum(float(i["gib"] or 0) for i in n["transfers"])
        ports = ("API %s, rendezvous %s" % (serve.get("api_port"), serve.get("master_port")) if n["rank"] == 0
                 else "joins %s" % serve.get("master_port"))
        out.append("| %s | %s | %s | %.1f | %s / %s | %s | %s | %s | %s | %s |" % (
            n["host"], n["rank"], "head" if n["rank"] == 0 else "worker (--headless)", moved,
            _cell(disk.get("need_gib")), _cell(disk.get("free_gib")) if measured else "not read",
            _cell(mem.get("kv_gib")), _cell(mem.get("pool_tokens")), _cell(mem.get("max_concurrency"), "x"),
            _cell(mem.get("margin_gib")) if measured else "not read", ports))
    out += ["", "## Transfers", ""]
    for n in bringup["nodes"]:
        for i in n["transfers"]:
            out.append("- %s: %s, %s GiB, %s" % (n["host"], i["what"], _cell(i["gib"]), i["how"]))
    out += ["", "## Phases, in order", "", "| # | phase | expected |", "|---|---|---|"]
    for k, p in enumerate(bringup["phases"], 1):
        out.append("| %d | %s | %s |" % (k, p["phase"], "~%d s" % p["seconds"] if p["seconds"] else
                                         "depends on the links and disks (not predicted)"))
    boot = BOOT_FIGURES.get(int(lane.get("tensor_parallel_size") or 0)) if lane.get("platform") != "cpu" else None
    if boot:
        out += ["", "Expected durations come from %s." % boot["source"]]
    out += ["", "## What the columns mean", "",
            "- KV: the GiB of KV cache each rank gets (%s); pool: the tokens that KV holds (the head's "
            "`GPU KV cache size` line once it boots); concurrency: how many requests of max_model_len %s tokens fit "
            "at once." % ((plan or {}).get("kv_source") or "the lane's KV policy", _cell(serve.get("max_model_len"))),
            "- margin: MemAvailable left on the node after the rank's weights, KV and reserves; below 5 GiB the plan "
            "warns (workers profile 3-5 GiB less than the head).",
            "- disk need / free: what the lane's files take on the checkpoint's disk and what the node has free.",
            "- Every figure and rule: docs/memory-plan.md (memory, KV, pool), docs/lanes.md (the lane), "
            "docs/catalogue.md (the failure named in a warning)."]
    warnings = list((plan or {}).get("warnings") or [])
    out += ["", "## Warnings", ""] + (["- %s" % w for w in warnings] if warnings else ["None."])
    return "\n".join(out) + "\n"
