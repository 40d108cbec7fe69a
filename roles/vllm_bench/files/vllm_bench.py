# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""Benchmark harness of dgxspark.vllm (role vllm_bench), run on the controller against the head.

Standard library only (matplotlib optional for the plot). Usage:

    vllm_bench.py --config config.json --out-dir reports/<UTC timestamp>

config.json (written by the role): base_url, model, lane, platform, sizes {...}, deployed {...},
published {...} (roles/vllm_bench/README.md for this lane, spark lanes only), health_report (optional).
Writes report.json, report.md and throughput.png (tok/s against concurrency) into --out-dir and
exits 0 when every request succeeded, 1 otherwise (quality figures such as the needle are reported,
not judged, on lanes marked so).

Measurements and their sources (catalogue topk_wall; docs/health.md):
- decode: streamed chat, temperature 0; TTFT at the first delta that carries content or reasoning;
  decode tok/s = (completion_tokens - 1) / (end - first token), completion_tokens from `usage`
  (never from counting chunks: with speculative decoding one chunk carries several tokens).
- sweep: for each concurrency C, `rounds` waves of C parallel requests (prompts salted against the
  prefix cache); aggregate tok/s = sum(completion tokens) / sum(wave wall time); per-stream tok/s =
  mean of tokens / wall of each request; failures counted.
- spec-decode: /metrics before and after the sweep; acceptance = accepted / draft tokens, mean
  acceptance length = 1 + accepted / drafts, per position = accepted at p / drafts.
- long prompt (catalogue topk_wall): one prompt above the lane's target (32K on GLM lanes), 200 with non-empty
  output, then /health 200 and a short chat still fine.
- needle: filler around `SECRET RECORD: NEEDLE-<hex>`, sized with /tokenize; pass when the answer
  contains the secret.
- corruption probe: a Korean prompt at temperature 0, count of U+FFFD in the output (0 expected).
- tool calls (catalogue tool_call_mangled): the health gate's acceptance (health.tool_smoke) at the deployed concurrency, non-streamed
  and streamed; judged as calls on spark lanes, as well-formed messages on random-weight lanes.
"""
from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import uuid
from urllib.error import HTTPError, URLError
from urllib.request import ProxyHandler, Request, build_opener

# health.py beside this file is plugins/module_utils/health.py (one copy of the metric and U+FFFD rules).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import health as H  # noqa: E402 pylint: disable=wrong-import-position

# Calls to the fleet bypass any proxy (conventions: use_proxy false for local services).
_OPENER = build_opener(ProxyHandler({}))

CODE_PROMPTS = [
    "Write a Python function that merges two sorted lists into one sorted list, with a docstring and tests.",
    "Write a SQL query that returns the ten customers with the highest total order value in 2025.",
    "Explain, step by step, how a hash map handles collisions, then implement one in Python.",
    "Write a bash script that rotates log files older than seven days and compresses them.",
    "Write a JSON schema for a user profile with name, email, age and a list of addresses.",
    "Implement binary search in C and explain its complexity.",
]
KOREAN_PROMPT = u"\ud55c\uad6d\uc758 \uc0ac\uacc4\uc808\uc5d0 \ub300\ud574 \uc138 \ubb38\uc7a5\uc73c\ub85c \uc124\uba85\ud574 \uc8fc\uc138\uc694."
FILLER = ("The quarterly logistics review covered warehouse throughput, delivery windows, fuel costs and the "
          "maintenance schedule of the regional fleet. ")


# ---- HTTP -----------------------------------------------------------------------------------

# Headers of every request; main() adds `Authorization: Bearer <key>` from --api-key-file (vllm_api_key).
# The key is read from a file, never from the argv or the config, so reports and process lists never hold it.
HEADERS = {"Content-Type": "application/json"}


def load_api_key(path):
    """The API key in a file (trailing newline stripped); empty file -> no key."""
    with open(path) as f:
        return f.read().strip()


def request(method, url, body=None, timeout=300):
    """(status, parsed JSON or text, seconds)."""
    data = json.dumps(body).encode("utf-8") if body is not None else None
    req = Request(url, data=data, method=method, headers=dict(HEADERS))
    t0 = time.time()
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
            status = resp.status
    except HTTPError as e:
        text = e.read().decode("utf-8", "replace")
        status = e.code
    except (URLError, OSError, ValueError) as e:
        return None, str(e), time.time() - t0
    try:
        return status, json.loads(text), time.time() - t0
    except ValueError:
        return status, text, time.time() - t0


def chat_body(cfg, prompt, max_tokens, temperature=0.0, stream=False, extra=None):
    body = {"model": cfg["model"], "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": temperature}
    if cfg["sizes"].get("chat_template_kwargs"):
        body["chat_template_kwargs"] = cfg["sizes"]["chat_template_kwargs"]
    if cfg["sizes"].get("ignore_eos"):
        body["ignore_eos"] = True  # the random sim model would stop at EOS after a few tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra or {})
    return body


def stream_chat(cfg, prompt, max_tokens, timeout=600):
    """One streamed chat: {ok, ttft_s, total_s, completion_tokens, decode_tok_s, finish_reason, text}."""
    url = cfg["base_url"].rstrip("/") + "/v1/chat/completions"
    data = json.dumps(chat_body(cfg, prompt, max_tokens, stream=True)).encode("utf-8")
    req = Request(url, data=data, method="POST", headers=dict(HEADERS))
    t0 = time.time()
    first = None
    usage = None
    finish = None
    parts = []
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    ev = json.loads(payload)
                except ValueError:
                    continue
                if ev.get("usage"):
                    usage = ev["usage"]
                for ch in ev.get("choices") or []:
                    delta = ch.get("delta") or {}
                    piece = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    if piece:
                        if first is None:
                            first = time.time()
                        parts.append(delta.get("content") or "")
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
    except (HTTPError, URLError, OSError, ValueError) as e:
        return {"ok": False, "error": str(e)}
    end = time.time()
    tokens = (usage or {}).get("completion_tokens")
    res = {"ok": first is not None and tokens is not None, "ttft_s": round(first - t0, 4) if first else None,
           "total_s": round(end - t0, 4), "completion_tokens": tokens, "finish_reason": finish,
           "text_chars": len("".join(parts))}
    res["decode_tok_s"] = decode_rate(tokens, first, end)
    if not res["ok"]:
        res["error"] = "no token streamed" if first is None else "no usage in the stream (stream_options)"
    return res


def decode_rate(completion_tokens, first_token_at, end):
    """(completion_tokens - 1) / (end - first token), docs/health.md; None when not measurable."""
    if not completion_tokens or first_token_at is None or completion_tokens < 2 or end <= first_token_at:
        return None
    return round((completion_tokens - 1) / (end - first_token_at), 2)


def median(values):
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


# ---- measurements ---------------------------------------------------------------------------

def bench_decode(cfg):
    s = cfg["sizes"]
    runs = [stream_chat(cfg, s.get("decode_prompt") or CODE_PROMPTS[0], s["decode_max_tokens"])
            for _run in range(s["decode_runs"])]
    return {"prompt": s.get("decode_prompt") or CODE_PROMPTS[0], "max_tokens": s["decode_max_tokens"],
            "temperature": 0, "runs": runs,
            "decode_tok_s_median": median([r.get("decode_tok_s") for r in runs]),
            "ttft_s_median": median([r.get("ttft_s") for r in runs]),
            "failures": sum(1 for r in runs if not r["ok"])}


def one_request(cfg, prompt, max_tokens, temperature, out, idx):
    url = cfg["base_url"].rstrip("/") + "/v1/chat/completions"
    status, body, secs = request("POST", url, chat_body(cfg, prompt, max_tokens, temperature), timeout=900)
    tokens = None
    if status == 200 and isinstance(body, dict):
        tokens = (body.get("usage") or {}).get("completion_tokens")
    out[idx] = {"ok": status == 200 and bool(tokens), "status": status, "seconds": round(secs, 3),
                "completion_tokens": tokens,
                "error": None if status == 200 else (str(body)[:200] if body else "no answer")}


def sweep_level(cfg, c, rounds, max_tokens, temperature):
    waves = []
    for _round in range(rounds):
        out = [None] * c
        threads = []
        t0 = time.time()
        for i in range(c):
            prompt = "%s [run %08x]" % (CODE_PROMPTS[i % len(CODE_PROMPTS)], random.getrandbits(32))
            th = threading.Thread(target=one_request, args=(cfg, prompt, max_tokens, temperature, out, i))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        waves.append({"wall_s": time.time() - t0, "requests": out})
    return aggregate_level(c, waves)


def aggregate_level(c, waves):
    """Aggregate tok/s = sum tokens / sum wave wall; per-stream = mean(tokens_i / seconds_i) (docs/health.md)."""
    reqs = [r for w in waves for r in w["requests"]]
    ok = [r for r in reqs if r["ok"]]
    tokens = sum(r["completion_tokens"] for r in ok)
    wall = sum(w["wall_s"] for w in waves)
    per_stream = [r["completion_tokens"] / r["seconds"] for r in ok if r["seconds"] > 0]
    return {"concurrency": c, "requests": len(reqs), "failures": len(reqs) - len(ok),
            "completion_tokens": tokens, "wall_s": round(wall, 3),
            "aggregate_tok_s": round(tokens / wall, 2) if wall > 0 and ok else None,
            "per_stream_tok_s": round(sum(per_stream) / len(per_stream), 2) if per_stream else None,
            "errors": sorted(set(r["error"] for r in reqs if r["error"]))[:3]}


def bench_sweep(cfg):
    s = cfg["sizes"]
    return [sweep_level(cfg, c, s["sweep_rounds"], s["sweep_max_tokens"], s.get("sweep_temperature", 1.0))
            for c in s["sweep_levels"]]


def scrape_metrics(cfg):
    status, text, _s = request("GET", cfg["base_url"].rstrip("/") + "/metrics", timeout=30)
    return text if status == 200 and isinstance(text, str) else None


def token_count(cfg, prompt):
    base = cfg["base_url"].rstrip("/")
    status, body, _s = request("POST", base + "/tokenize", {"model": cfg["model"], "prompt": prompt}, timeout=120)
    if status == 200 and isinstance(body, dict) and "count" in body:
        return body["count"]
    return None


def build_prompt(cfg, target_tokens, head="", tail=""):
    """Repeat FILLER until the prompt is at most target_tokens (/tokenize, as the needle script does, docs/health.md)."""
    per_rep = token_count(cfg, FILLER * 10)
    if per_rep is None:
        # no /tokenize: assume ~1.3 tokens per word
        reps = max(1, int(target_tokens / (len(FILLER.split()) * 1.3)))
        return head + FILLER * reps + tail, None
    per_rep = max(1.0, per_rep / 10.0)
    lo, hi = 1, int(target_tokens / per_rep) + 2
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        prompt = head + FILLER * mid + tail
        n = token_count(cfg, prompt)
        if n is not None and n <= target_tokens:
            best = (prompt, n)
            lo = mid + 1
        else:
            hi = mid - 1
    return best if best else (head + FILLER + tail, token_count(cfg, head + FILLER + tail))


def bench_long_prompt(cfg):
    """catalogue topk_wall: one prompt above the lane's target, then /health and a short chat must still be fine."""
    s = cfg["sizes"]
    base = cfg["base_url"].rstrip("/")
    prompt, n = build_prompt(cfg, s["long_prompt_tokens"], tail="\n\nSummarise the text above in one sentence.")
    status, body, secs = request("POST", base + "/v1/chat/completions",
                                 chat_body(cfg, prompt, s["long_prompt_max_tokens"]), timeout=3600)
    msg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
    out_text = (msg.get("content") or "") + (msg.get("reasoning") or msg.get("reasoning_content") or "")
    usage = (body or {}).get("usage") if isinstance(body, dict) else None
    h_status, _b, _s = request("GET", base + "/health", timeout=30)
    c_status, c_body, _s = request("POST", base + "/v1/chat/completions", chat_body(cfg, "2+2=?", 16), timeout=300)
    short_ok = c_status == 200 and isinstance(c_body, dict) and bool(c_body.get("choices"))
    return {"target_tokens": s["long_prompt_tokens"], "prompt_tokens": (usage or {}).get("prompt_tokens") or n,
            "status": status, "seconds": round(secs, 2), "output_chars": len(out_text),
            "prefill_tok_s": round(((usage or {}).get("prompt_tokens") or 0) / secs, 1) if status == 200 else None,
            "health_after": h_status, "short_chat_after": short_ok,
            "ok": status == 200 and bool(out_text) and h_status == 200 and short_ok,
            "error": None if status == 200 else str(body)[:300]}


def bench_needle(cfg):
    s = cfg["sizes"]
    secret = "NEEDLE-" + uuid.uuid4().hex.upper()[:12]
    question = ("\n\nSomewhere above is a line starting with 'SECRET RECORD:'. Reply with the value after it "
                "and nothing else.")
    half = max(1, s["needle_tokens"] // 2)
    head_prompt, _n = build_prompt(cfg, half)
    prompt, n = build_prompt(cfg, s["needle_tokens"], head=head_prompt + "\nSECRET RECORD: %s\n" % secret,
                             tail=question)
    status, body, secs = request("POST", cfg["base_url"].rstrip("/") + "/v1/chat/completions",
                                 chat_body(cfg, prompt, s["needle_max_tokens"]), timeout=3600)
    msg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
    content = msg.get("content") or ""
    reasoning = msg.get("reasoning") or msg.get("reasoning_content") or ""
    return {"target_tokens": s["needle_tokens"], "prompt_tokens": n, "status": status, "seconds": round(secs, 2),
            "secret": secret, "exact_match": content.strip() == secret,
            "contains_secret": secret in content or secret in reasoning,
            "ok": status == 200, "judged": bool(s.get("needle_must_pass")),
            "answer_excerpt": content[:160]}


def bench_corruption(cfg):
    s = cfg["sizes"]
    passes = []
    for _pass in range(s["corruption_passes"]):
        status, body, _secs = request("POST", cfg["base_url"].rstrip("/") + "/v1/chat/completions",
                                      chat_body(cfg, s.get("corruption_prompt") or KOREAN_PROMPT,
                                                s["corruption_max_tokens"]), timeout=600)
        msg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
        text = (msg.get("content") or "") + (msg.get("reasoning") or msg.get("reasoning_content") or "")
        passes.append({"status": status, "chars": len(text), "replacement_chars": H.count_replacement_chars(text)})
    return {"prompt": s.get("corruption_prompt") or KOREAN_PROMPT, "temperature": 0, "passes": passes,
            "replacement_chars": [p["replacement_chars"] for p in passes],
            "ok": all(p["status"] == 200 for p in passes)}


# ---- tool calls at the deployed concurrency (catalogue tool_call_mangled): health.tool_smoke, the health gate's own code ----

def bench_tools(cfg):
    """The health gate's tool acceptance (health.TOOL_SMOKE_CASES) at the deployed concurrency, non-streamed and
    streamed. cfg["tools"]: {concurrency, judge ('call' or 'wellformed'), tool_call_parser, max_tokens}."""
    t = cfg["tools"]
    url = cfg["base_url"].rstrip("/") + "/v1/chat/completions"

    def post(body):
        status, data, _secs = request("POST", url, body, timeout=600)
        if isinstance(data, (dict, list)):
            return status, data, json.dumps(data)
        return status, None, data

    def make_body(question, spec, streamed):
        body = chat_body(cfg, question, int(t.get("max_tokens") or 256), stream=False,
                         extra={"tools": spec, "tool_choice": "auto"})
        body.pop("ignore_eos", None)  # a tool call ends the message; never force tokens past it
        if streamed:
            body["stream"] = True
        return body
    out = H.tool_smoke(post, make_body, t.get("concurrency") or 1, t.get("judge") or "call", t.get("tool_call_parser"))
    out["judge"] = t.get("judge") or "call"
    out["concurrency"] = max(1, int(t.get("concurrency") or 1))
    return out


# ---- spec decode (docs/health.md): the formulas of plugins/module_utils/health.py, shipped beside this file ----

def spec_counters(text):
    return H.spec_decode_counters(H.parse_metrics(text or ""))


def spec_delta(before, after):
    if not after or after["drafts"] is None:
        return {"present": False}
    return H.spec_decode_stats(after, before)


# ---- report ---------------------------------------------------------------------------------

def fmt(v, nd=2):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return ("%." + str(nd) + "f") % v
    return str(v)


def render_markdown(rep):
    d = rep.get("deployed") or {}
    lines = ["# vLLM benchmark: lane %s" % rep["lane"], "",
             "Generated %s against `%s` (model `%s`, platform %s). Formulas: docs/health.md."
             % (rep["generated"], rep["base_url"], rep["model"], rep["platform"]), "",
             "## What was deployed", "",
             "| item | value |", "|---|---|"]
    for key in ("lane", "tensor_parallel_size", "image", "image_fingerprint", "checkpoint_repo", "checkpoint_revision",
                "weights_manifest_sha256", "drafter", "drafter_revision", "max_model_len", "kv_policy"):
        if key in d:
            lines.append("| %s | `%s` |" % (key, d[key] if d[key] not in (None, "") else "n/a"))
    kv = (rep.get("health") or {}).get("kv_pool") or {}
    if kv.get("per_rank"):
        lines += ["", "KV cache per rank (from every rank's log; the pool is built from the minimum, catalogue kv_pool_below_peers):", "",
                  "| rank | host | available KV (GiB) |", "|---|---|---|"]
        for r in kv["per_rank"]:
            lines.append("| %s | %s | %s |" % (r.get("rank"), r.get("host"), fmt(r.get("available_kv_cache_gib"))))
        lines.append("")
        lines.append("Effective KV %s GiB (rank %s), spread %s GiB; pool %s tokens (%s)."
                     % (fmt(kv.get("effective_kv_gib")), fmt(kv.get("limiting_rank")), fmt(kv.get("spread_gib")),
                        fmt(kv.get("pool_tokens")), kv.get("pool_source") or "no pool line"))
    r = rep["results"]
    pub = rep.get("published") or {}
    dec = r.get("decode") or {}
    lines += ["", "## Single stream", "",
              "| figure | measured | published |", "|---|---|---|",
              "| decode tok/s (median of %d, %d tokens, temp 0) | %s | %s |"
              % (len(dec.get("runs") or []), dec.get("max_tokens") or 0, fmt(dec.get("decode_tok_s_median")),
                 fmt(pub.get("single_stream_tok_s"))),
              "| TTFT s (median) | %s | %s |" % (fmt(dec.get("ttft_s_median"), 3), fmt(pub.get("ttft_s"), 3))]
    if pub.get("source"):
        lines += ["", "Published figures: %s." % pub["source"]]
    sweep = r.get("sweep") or []
    if sweep:
        pub_agg = pub.get("aggregate_tok_s") or {}
        lines += ["", "## Concurrency sweep", "",
                  "| C | aggregate tok/s | per-stream tok/s | failures | published aggregate |", "|---|---|---|---|---|"]
        for lv in sweep:
            lines.append("| %d | %s | %s | %d/%d | %s |" % (
                lv["concurrency"], fmt(lv["aggregate_tok_s"]), fmt(lv["per_stream_tok_s"]), lv["failures"],
                lv["requests"], fmt(pub_agg.get(str(lv["concurrency"]), pub_agg.get(lv["concurrency"])))))
    sd = r.get("spec_decode") or {}
    lines += ["", "## Speculative decoding", ""]
    if sd.get("present"):
        lines += ["Acceptance %s, mean acceptance length %s (published: %s / %s); per position %s."
                  % (fmt(sd.get("acceptance_rate"), 4), fmt(sd.get("mean_acceptance_length")),
                     fmt(pub.get("acceptance_rate"), 3), fmt(pub.get("mean_acceptance_length")),
                     ", ".join(fmt(x, 3) for x in sd.get("per_position_rate") or []))]
    else:
        lines += ["No drafter on this lane (no spec-decode counters in /metrics)."]
    lp = r.get("long_prompt") or {}
    nd = r.get("needle") or {}
    cp = r.get("corruption") or {}
    lines += ["", "## Long context and output quality", "",
              "| check | result |", "|---|---|",
              "| long prompt %s tokens (catalogue topk_wall): status, /health after, short chat after | %s, %s, %s (%s s) |"
              % (fmt(lp.get("prompt_tokens")), fmt(lp.get("status")), fmt(lp.get("health_after")),
                 fmt(lp.get("short_chat_after")), fmt(lp.get("seconds"))),
              "| needle at %s tokens: contains secret / exact | %s / %s%s |"
              % (fmt(nd.get("prompt_tokens")), fmt(nd.get("contains_secret")), fmt(nd.get("exact_match")),
                 "" if nd.get("judged") else " (not judged on this lane)"),
              "| corruption probe (Korean, temp 0): U+FFFD per pass | %s |"
              % "/".join(str(x) for x in cp.get("replacement_chars") or [])]
    tc = r.get("tool_calls")
    if tc:
        lines += ["", "## Tool calls at the deployed concurrency (judge: %s)" % tc.get("judge"), "",
                  "| tool | streamed | concurrent | failed | result |", "|---|---|---|---|---|"]
        for row in tc.get("rows") or []:
            lines.append("| %s | %s | %d | %d | %s |" % (row["tool"], "yes" if row["streamed"] else "no",
                                                         row["concurrency"], row["failed"], row["msg"]))
    if rep.get("failures"):
        lines += ["", "## Failures", ""] + ["- %s" % f for f in rep["failures"]]
    if rep.get("notes"):
        lines += ["", "## Notes", ""] + ["- %s" % n for n in rep["notes"]]
    return "\n".join(lines) + "\n"


def plot(rep, path):
    """tok/s against concurrency; returns a note when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "throughput.png skipped: matplotlib is not installed on the controller (pip install matplotlib)"
    sweep = [lv for lv in rep["results"].get("sweep") or [] if lv.get("aggregate_tok_s") is not None]
    if not sweep:
        return "throughput.png skipped: no successful sweep level"
    cs = [lv["concurrency"] for lv in sweep]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(cs, [lv["aggregate_tok_s"] for lv in sweep], marker="o", label="aggregate (measured)")
    ax.plot(cs, [lv["per_stream_tok_s"] for lv in sweep], marker="s", label="per stream (measured)")
    pub = (rep.get("published") or {}).get("aggregate_tok_s") or {}
    pub_pts = [(c, pub.get(str(c), pub.get(c))) for c in sorted(set(int(k) for k in pub))] if pub else []
    if pub_pts:
        ax.plot([c for c, _v in pub_pts], [v for _c, v in pub_pts], linestyle="--", marker="x",
                label="aggregate (published)")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("tokens/s")
    ax.set_title("lane %s" % rep["lane"])
    ax.set_xticks(cs)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def run(cfg, out_dir):
    s = cfg["sizes"]
    base = cfg["base_url"].rstrip("/")
    failures, notes = [], []
    status, _b, _s = request("GET", base + "/health", timeout=30)
    if status != 200:
        raise SystemExit("vllm_bench: %s/health answers %s; run the vllm_health role first" % (base, status))
    request("POST", base + "/v1/chat/completions", chat_body(cfg, "warm up", 8), timeout=600)
    results = {}
    t0 = time.time()
    results["decode"] = bench_decode(cfg)
    if results["decode"]["failures"]:
        failures.append("decode: %d of %d streamed runs failed: %s" % (
            results["decode"]["failures"], len(results["decode"]["runs"]),
            [r.get("error") for r in results["decode"]["runs"] if not r["ok"]][:2]))
    m_before = spec_counters(scrape_metrics(cfg))
    results["sweep"] = bench_sweep(cfg)
    m_after = spec_counters(scrape_metrics(cfg))
    results["spec_decode"] = spec_delta(m_before, m_after)
    for lv in results["sweep"]:
        if lv["failures"]:
            failures.append("sweep C%d: %d of %d requests failed: %s"
                            % (lv["concurrency"], lv["failures"], lv["requests"], lv["errors"]))
    if s.get("long_prompt_tokens"):
        results["long_prompt"] = bench_long_prompt(cfg)
        if not results["long_prompt"]["ok"]:
            failures.append("long prompt (%s tokens): status %s, /health after %s, short chat after %s (catalogue topk_wall)" % (
                results["long_prompt"]["prompt_tokens"], results["long_prompt"]["status"],
                results["long_prompt"]["health_after"], results["long_prompt"]["short_chat_after"]))
    if s.get("needle_tokens"):
        results["needle"] = bench_needle(cfg)
        nd = results["needle"]
        if not nd["ok"]:
            failures.append("needle: HTTP %s" % nd["status"])
        elif nd["judged"] and not nd["contains_secret"]:
            failures.append("needle at %s tokens: the answer does not contain %s" % (nd["prompt_tokens"],
                                                                                     nd["secret"]))
        elif not nd["judged"]:
            notes.append("needle retrieval is reported, not judged, on this lane (random-weight model)")
    if s.get("corruption_passes"):
        results["corruption"] = bench_corruption(cfg)
        if not results["corruption"]["ok"]:
            failures.append("corruption probe: a request failed")
        elif any(results["corruption"]["replacement_chars"]) and s.get("corruption_judged", True):
            failures.append("corruption probe: U+FFFD in the output %s (docs/weights.md)" % results["corruption"]
                            ["replacement_chars"])
    if (cfg.get("tools") or {}).get("enabled"):
        results["tool_calls"] = bench_tools(cfg)
        failures += ["tool calls: " + f for f in results["tool_calls"]["failures"]]
        if results["tool_calls"]["judge"] == "wellformed":
            notes.append("tool calls judged well-formed only (random-weight model): that each request is accepted "
                         "and parsed into a well-formed message, not that the model calls the right tool with the "
                         "right arguments (blank arguments under load, mangled streamed names: catalogue tool_call_mangled, "
                         "judged on spark lanes)")
    results["seconds"] = round(time.time() - t0, 1)
    if cfg.get("platform") != "spark":
        notes.append("published figures (roles/vllm_bench/README.md) are compared on spark lanes only")
    rep = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "lane": cfg["lane"],
           "platform": cfg.get("platform"), "base_url": base, "model": cfg["model"], "sizes": s,
           "deployed": cfg.get("deployed") or {}, "health": cfg.get("health_report") or {},
           "published": cfg.get("published") if cfg.get("platform") == "spark" else {},
           "results": results, "failures": failures, "notes": notes, "ok": not failures}
    note = plot(rep, os.path.join(out_dir, "throughput.png"))
    if note:
        rep["notes"].append(note)
    rep["files"] = sorted(["report.json", "report.md"] + ([] if note else ["throughput.png"]))
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(rep, f, indent=2, sort_keys=True)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(render_markdown(rep))
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description="dgxspark.vllm benchmark harness (role vllm_bench)")
    ap.add_argument("--config", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--api-key-file", help="file holding the head's API key (sent as Authorization: Bearer)")
    a = ap.parse_args(argv)
    if a.api_key_file:
        key = load_api_key(a.api_key_file)
        if key:
            HEADERS["Authorization"] = "Bearer " + key
    with open(a.config) as f:
        cfg = json.load(f)
    if not str(cfg.get("base_url", "")).startswith(("http://", "https://")):
        raise SystemExit("vllm_bench: base_url %r must be http(s)://<head>:<port>" % cfg.get("base_url"))
    os.makedirs(a.out_dir, exist_ok=True)
    rep = run(cfg, a.out_dir)
    print(json.dumps({"ok": rep["ok"], "failures": rep["failures"], "notes": rep["notes"],
                      "out_dir": a.out_dir, "seconds": rep["results"]["seconds"]}))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
