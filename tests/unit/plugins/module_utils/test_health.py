"""plugins/module_utils/health.py against the real captures in tests/fixtures/health."""
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import health, verdict
from tests.unit.conftest import FIXTURES, read_fixture

H = "health"


def log(*parts):
    return read_fixture(H, "vllm-logs", *parts)


def load_yaml(*parts):
    with open(os.path.join(FIXTURES, H, *parts), encoding="utf-8") as f:
        return yaml.safe_load(f)


# ---- boot figures (docs/memory-plan.md, docs/health.md) ---------------------------------------------------------------

def test_boot_log_gb10_single_node_every_figure():
    b = health.parse_boot_log(log("startup", "gb10-single-node-startup.log"))
    assert b["available_kv_cache_gib"] == 50.29
    assert b["kv_cache_tokens"] == 820013
    assert b["max_concurrency"] == {"max_model_len": 786432, "factor": 1.04}
    assert b["model_loading"] == {"gib": 51.35, "seconds": 341.626621}
    assert b["free_memory_on_startup"] == {"free_gib": 112.26, "total_gib": 119.63,
                                           "utilization": 0.92, "desired_gib": 110.06}
    assert b["kv_cache_memory_suggestion"] == {"fit_bytes": 52830620611, "fit_gib": 49.2,
                                               "full_bytes": 55188796928, "full_gib": 51.4}
    assert b["memory_usage"] == {"consumed_gib": 55.99, "activation_gib": 3.78, "cuda_graph_gib": 0.94}
    assert b["init_engine_s"] == 126.24
    assert b["compilation_s"] == 47.09
    assert b["startup_complete"] is True


def test_boot_log_glm_tp2_deploy_report():
    b = health.parse_boot_log(log("startup", "glm53-tp2-deploy-report-boot.log"))
    assert b["loading_weights_s"] == 610.43
    assert b["available_kv_cache_gib"] == 7.19
    assert b["kv_cache_tokens"] == 603144
    assert b["max_concurrency"] == {"max_model_len": 262144, "factor": 2.30}
    assert b["init_engine_s"] == 147.74
    assert b["nccl_version"] == "2.30.7"
    assert b["startup_complete"] is True


@pytest.mark.parametrize("name,tokens,max_len,factor", [
    ("glm53-tp4-nvidia-laneA-kv-context.log", 3532196, 500000, 7.06),
    ("glm53-tp4-readme-kv-line.log", 3895606, 1048576, 3.72),
])
def test_combined_kv_and_concurrency_line(name, tokens, max_len, factor):
    b = health.parse_boot_log(log("startup", name))
    assert b["kv_cache_tokens"] == tokens
    assert b["max_concurrency"] == {"max_model_len": max_len, "factor": factor}


def test_model_loading_without_memory_word():
    b = health.parse_boot_log(log("startup", "glm53-tp4-nvidia-laneA-kv-context.log"))
    assert b["model_loading"] == {"gib": 43.76, "seconds": 338.654276}


@pytest.mark.parametrize("name", ["dflash2-aux-layers-eagle3-wording.log",
                                  "dflash2-aux-layers-speculative-config-wording.log"])
def test_aux_layers_both_wordings(name):
    assert health.parse_boot_log(log("startup", name))["aux_layers"] == [6, 15, 25, 34, 43]


def test_graph_capture_signature():
    sig = load_yaml("vllm-logs", "healthy-signatures.yaml")["lines"][0]
    b = health.parse_boot_log(sig["line"])
    assert b["graph_capture"] == {"seconds": sig["extract"]["graph_capture_s"],
                                  "gib": sig["extract"]["graph_memory_gib"]}


def test_f20_suggested_pin_parsed_and_pin_above_it_warns():
    b = health.parse_boot_log(log("startup", "f20-kv-suggestion-illustrative.log"))
    assert b["kv_cache_memory_suggestion"]["fit_bytes"] == 6442450944
    assert b["kv_cache_memory_suggestion"]["fit_gib"] == 6.0
    s = health.kv_pool_summary([dict(b, rank=0, host="node-a")], pin_bytes=8053063680)
    f20 = [w for w in s["warnings"] if "(catalogue kv_pin_no_activation_reserve)" in w]
    assert len(f20) == 1
    assert "8053063680 B (7.50 GiB) exceeds" in f20[0]
    assert "6442450944 B (6.0 GiB)" in f20[0]
    # the suggested value itself is fine
    ok = health.kv_pool_summary([dict(b, rank=0, host="node-a")], pin_bytes=6442450944)
    assert [w for w in ok["warnings"] if "(catalogue kv_pin_no_activation_reserve)" in w] == []


# ---- KV pool across ranks (catalogue kv_pool_below_peers) -------------------------------------------------------------

def test_f16_pool_is_the_minimum_across_ranks():
    a = dict(health.parse_boot_log(log("per-rank", "f16-node-a-worker-tp0.log")), rank=0, host="node-a")
    b = dict(health.parse_boot_log(log("per-rank", "f16-node-b-worker-tp1.log")), rank=1, host="node-b")
    assert a["tp_ranks_seen"] == [0] and b["tp_ranks_seen"] == [1]
    s = health.kv_pool_summary([a, b], spread_warn_gib=2.0)
    assert s["effective_kv_gib"] == 5.54
    assert s["limiting_rank"] == 1
    assert s["limiting_host"] == "node-b"
    assert s["spread_gib"] == 3.00
    assert s["warnings"] == ["KV headroom spread 3.00 GiB across ranks exceeds 2.00 GiB: rank 1 (node-b) "
                             "limits the pool at 5.54 GiB (catalogue kv_pool_below_peers)"]
    # below the threshold: no warning
    assert health.kv_pool_summary([a, b], spread_warn_gib=3.5)["warnings"] == []


def test_f16_one_log_holding_both_rank_prefixes_is_split_by_rank():
    text = log("per-rank", "f16-node-a-worker-tp0.log") + log("per-rank", "f16-node-b-worker-tp1.log")
    b = health.parse_boot_log(text)
    assert b["kv_by_rank"] == {0: 8.54, 1: 5.54}
    s = health.kv_pool_summary([dict(b, rank=0, host="node-a")])
    assert (s["effective_kv_gib"], s["limiting_rank"]) == (5.54, 1)


def test_pool_tokens_taken_from_the_head_line_not_recomputed():
    head = dict(health.parse_boot_log(log("startup", "glm53-tp2-deploy-report-boot.log")), rank=0, host="a")
    worker = dict(health.parse_boot_log(log("per-rank", "f16-node-b-worker-tp1.log")), rank=1, host="b")
    s = health.kv_pool_summary([worker, head])
    assert s["pool_tokens"] == 603144
    assert s["pool_source"] == "rank 0 log"
    assert s["effective_kv_gib"] == 5.54


def test_rank_without_kv_line_is_reported():
    s = health.kv_pool_summary([{"rank": 1, "host": "node-b", "available_kv_cache_gib": None}])
    assert s["effective_kv_gib"] is None
    assert "rank 1 (node-b): no 'Available KV cache memory' line" in s["warnings"][0]


# ---- phases (docs/health.md) ---------------------------------------------------------------------------

def test_phase_of_a_complete_boot_is_api_up():
    p = health.parse_phase(log("startup", "gb10-single-node-startup.log"))
    assert p["phase"] == "api_up"
    assert p["line"].endswith("Application startup complete.")


def test_phase_progression_cut_at_each_milestone():
    lines = log("startup", "glm53-tp2-deploy-report-boot.log").splitlines()
    seen = []
    for i in range(1, len(lines) + 1):
        seen.append(health.parse_phase("\n".join(lines[:i]))["phase"])
    # backend lines, nccl line, weights, KV memory, pool, concurrency, init engine, API
    assert health.parse_phase("")["phase"] == "none"
    assert seen == ["starting", "starting", "starting", "starting", "weights_loaded", "kv_cache", "kv_cache", "kv_cache",
                    "engine_ready", "api_up"]


def test_phase_once_serving_headless_worker_and_long_serving_head():
    # A worker's own log stops at its weights (the TP2 report's boot cut before the KV line); once the
    # head's /health answers 200 it is serving, not "profiling".
    lines = log("startup", "glm53-tp2-deploy-report-boot.log").splitlines()
    worker = health.parse_phase("\n".join(lines[:5]))
    assert (worker["phase"], worker["text"]) == ("weights_loaded", "weights loaded, profiling")
    serving = health.serving_phase(worker, 1)
    assert (serving["phase"], serving["text"]) == ("serving", "serving (headless rank; rank 0 logs the engine phases)")
    assert serving["line"] == worker["line"]
    # a long-serving head whose log tail holds only requests
    tail = health.parse_phase('INFO:     198.18.10.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert tail["phase"] == "starting"
    assert health.serving_phase(tail, 0)["text"] == "serving"
    # a complete boot keeps its milestone
    up = health.parse_phase(log("startup", "gb10-single-node-startup.log"))
    assert health.serving_phase(up, 0) == up


def test_phase_loading_shards_k_of_n_from_progress_bar():
    regex = load_yaml("vllm-logs", "healthy-signatures.yaml")["glm_boot_regexes"][4]
    assert regex.startswith("Loading safetensors checkpoint shards")
    bar = ("(Worker_TP1 pid=88) Loading safetensors checkpoint shards:  40% Completed | 48/120 [03:10<04:45, "
           "3.96s/it]\r(Worker_TP1 pid=88) Loading safetensors checkpoint shards:  41% Completed | 49/120 "
           "[03:14<04:41, 3.96s/it]")
    p = health.parse_phase(bar)
    assert (p["phase"], p["shards_loaded"], p["shards_total"]) == ("loading", 49, 120)
    assert p["text"] == "loading shards 49/120"


def test_phase_graph_capture():
    sig = load_yaml("vllm-logs", "healthy-signatures.yaml")["lines"][0]["line"]
    text = log("per-rank", "f16-node-a-worker-tp0.log") + sig
    assert health.parse_phase(text)["phase"] == "graph_capture"


# ---- failure classes (docs/health.md) ------------------------------------------------------------------

@pytest.mark.parametrize("path,cls,sig,extract", [
    (("vllm-logs", "errors", "free-memory-less-than-desired.log"), "free_memory_check", "free_memory_refused",
     {"free": "104.46", "total": "121.69", "util": "0.87", "desired": "105.87"}),
    (("vllm-logs", "errors", "kv-cache-needed-exceeds-available.log"), "free_memory_check", "kv_cache_too_small",
     {"max_seq_len": "524288", "needed": "33.62", "available": "10.73"}),
    (("kernel-logs", "nvrm-nv-err-no-memory.log"), "out_of_memory", "nvrm_no_memory", {}),
    (("vllm-logs", "errors", "drafter-view-setstorage-out-of-bounds.log"), "out_of_memory",
     "setstorage_out_of_bounds", {"required": "13587251200", "available": "377487360"}),
    (("vllm-logs", "errors", "nccl-unhandled-system-error.log"), "collective_init", "nccl_error", {}),
    (("vllm-logs", "errors", "gloo-unable-to-find-address.log"), "collective_init", "gloo_no_address",
     {"ifname": "enp1s0f1np1"}),
    (("vllm-logs", "errors", "gloo-connectfullmesh-loopback-refused.log"), "collective_init", "gloo_fullmesh",
     {"remote": "127.0.0.1"}),
    (("vllm-logs", "errors", "ibv-modify-qp-110-connection-timed-out.log"), "collective_init", "ibv_modify_qp",
     {"errno": "110", "dev": "rocep1s0f0", "port": "1"}),
    (("vllm-logs", "errors", "hostname-loopback-fallback.log"), "collective_init", "loopback_fallback", {}),
    (("vllm-logs", "errors", "default-chat-template-not-allowed.log"), "missing_file", "no_chat_template", {}),
    (("vllm-logs", "errors", "persistent-topk-oversubscribe.log"), "fix_file", "topk_wall", {}),
    (("vllm-logs", "errors", "dflash-drafter-heads-not-divisible.log"), "config", "drafter_heads", {}),
])
def test_reason_class_from_captured_line(path, cls, sig, extract):
    r = health.classify_failure(read_fixture(H, *path))
    assert (r["reason_class"], r["signature"]) == (cls, sig)
    assert r["reason_class"] in health.REASON_CLASSES
    assert r["line"] in read_fixture(H, *path)
    for k, v in extract.items():
        assert r["extract"][k] == v


def test_root_cause_wins_over_the_cascade():
    text = (read_fixture(H, "vllm-logs", "errors", "gloo-unable-to-find-address.log")
            + "Traceback (most recent call last):\nvllm.v1.engine.exceptions.EngineDeadError: dead\n"
            + read_fixture(H, "vllm-logs", "errors", "nccl-unhandled-system-error.log"))
    r = health.classify_failure(text)
    assert r["signature"] == "gloo_no_address"


def test_missing_file_class():
    line = "FileNotFoundError: [Errno 2] No such file or directory: '/models/glm/model-00049-of-00120.safetensors'"
    r = health.classify_failure(line)
    assert (r["reason_class"], r["signature"]) == ("missing_file", "file_not_found")


def test_oom_killed_flag_and_exit_codes():
    assert health.classify_failure("", oom_killed=True)["reason_class"] == "out_of_memory"
    killed = health.classify_failure("Triton is installed, but doesn't include CPU backend. Disabling Triton.",
                                     exit_code=137)
    assert (killed["reason_class"], killed["signature"]) == ("process", "rank_killed")
    assert killed["source"] == "catalogue: rank_killed"
    r = health.classify_failure("INFO all fine", exit_code=0)
    assert r["signature"] == "worker_orphaned" and "workers first" in r["hint"]


def test_shm_broadcast_hang_is_not_a_failure_class():
    # a hang signature (repeats every minute); the wedge check reports it, not the exit classifier
    text = read_fixture(H, "vllm-logs", "errors", "shm-broadcast-no-block-60s.log")
    assert health.classify_failure(text)["signature"] == "unknown"
    # the doctor sees it: the catalogue names it (class hang)
    from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose
    assert diagnose.diagnose({"logs": text})[0]["id"] == "uvm_livelock"


# ---- /metrics (docs/health.md, tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom) ----------------------------

def test_metrics_s08_counters_and_created_ignored():
    exp = load_yaml("metrics", "glm53-spec-decode-7pos.expected.yaml")
    samples = health.parse_metrics(read_fixture(H, "metrics", "glm53-spec-decode-7pos.prom"))
    assert not [s for s in samples if s["name"].endswith("_created")]
    c = health.spec_decode_counters(samples)
    assert c["drafts"] == exp["raw"]["drafts_total"]
    assert c["draft_tokens"] == exp["raw"]["draft_tokens_total"]
    assert c["accepted"] == exp["raw"]["accepted_tokens_total"]
    assert [c["per_position"][p] for p in range(7)] == exp["raw"]["accepted_tokens_per_pos_total"]
    assert samples[0]["labels"] == exp["labels"]


def test_metrics_s08_derived_cumulative():
    exp = load_yaml("metrics", "glm53-spec-decode-7pos.expected.yaml")["derived"]
    c = health.spec_decode_counters(health.parse_metrics(read_fixture(H, "metrics", "glm53-spec-decode-7pos.prom")))
    s = health.spec_decode_stats(c)
    assert s["acceptance_rate"] == exp["acceptance_rate"] == 0.3775
    assert s["mean_acceptance_length"] == exp["mean_acceptance_length"] == 3.63
    assert s["accepted_per_draft"] == exp["accepted_per_draft"]
    assert s["draft_tokens_per_draft"] == exp["draft_tokens_per_draft"]
    assert s["num_positions"] == exp["num_positions"]
    assert s["per_position_rate"] == [exp["per_position_rate"][p] for p in range(7)]
    assert s["per_position_sum"] == 29746 and s["per_position_sum_matches"] is True
    assert s["warnings"] == []


def test_metrics_lane_a_specacc_summary_lines_skipped():
    exp = load_yaml("metrics", "glm53-tp4-nvidia-laneA-specacc.expected.yaml")
    samples = health.parse_metrics(read_fixture(H, "metrics", "glm53-tp4-nvidia-laneA-specacc.txt"))
    assert len(samples) == 4
    s = health.spec_decode_stats(health.spec_decode_counters(samples))
    assert round(s["acceptance_rate"], 3) == exp["derived"]["acceptance_rate"]
    assert round(s["accepted_per_draft"], 2) == exp["derived"]["accepted_per_draft"]
    assert round(s["mean_acceptance_length"], 2) == exp["derived"]["tokens_per_step"]
    assert s["draft_tokens_per_draft"] == exp["derived"]["draft_tokens_per_draft"]
    assert s["per_position_accepted"] == [exp["raw"]["accepted_tokens_per_pos_total_in_file"][0]]


def test_spec_decode_deltas_between_two_scrapes():
    """S08 as the second scrape, lane A's numbers scaled down as nothing: build the first scrape by
    subtracting a known amount from tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom, so the delta is exact."""
    after = health.spec_decode_counters(health.parse_metrics(read_fixture(H, "metrics",
                                                                          "glm53-spec-decode-7pos.prom")))
    before = {"drafts": 1325.0, "draft_tokens": 8806.0, "accepted": 4746.0,
              "per_position": {0: 856.0, 1: 1387.0, 2: 677.0, 3: 480.0, 4: 608.0, 5: 73.0, 6: 665.0}}
    s = health.spec_decode_stats(after, before)
    assert (s["drafts"], s["draft_tokens"], s["accepted"]) == (10000.0, 70000.0, 25000.0)
    assert s["acceptance_rate"] == round(25000 / 70000, 4) == 0.3571
    assert s["mean_acceptance_length"] == 3.5
    assert s["per_position_accepted"] == [8000.0, 5000.0, 4000.0, 3000.0, 2000.0, 2000.0, 1000.0]
    assert s["per_position_rate"] == [0.8, 0.5, 0.4, 0.3, 0.2, 0.2, 0.1]


def test_acceptance_exactly_one_warns():
    s = health.spec_decode_stats({"drafts": 10.0, "draft_tokens": 70.0, "accepted": 70.0, "per_position": {}})
    assert s["acceptance_rate"] == 1.0
    assert "#53030" in s["warnings"][0]


def test_no_drafter_metrics():
    s = health.spec_decode_stats(health.spec_decode_counters(health.parse_metrics("vllm:num_requests_running 0\n")))
    assert s["present"] is False and s["acceptance_rate"] is None


# ---- smoke verdicts (catalogue reasoning_empty_content, tool_parser_zero_arg) --------------------------------------------------------------

def test_f14_length_with_reasoning_is_retry_not_dead():
    body = load_yaml("api", "f14-chat-completion-length-empty-content.yaml")
    exp = load_yaml("api", "f14-chat-completion-length-empty-content.expected.yaml")
    v = health.evaluate_chat(body)
    assert v["ok"] is exp["expected"]["smoke_passes"]
    assert v["action"] == "retry"
    assert v["reasoning_field"] == "reasoning"
    assert v["reasoning_chars"] == len("The user asks 17 × 23 ...")
    assert v["finish_reason"] == exp["parsed"]["finish_reason"]


def test_f14_reasoning_content_field_is_read_too():
    body = {"choices": [{"message": {"content": "", "reasoning_content": "thinking"}, "finish_reason": "length"}]}
    v = health.evaluate_chat(body)
    assert (v["action"], v["reasoning_field"]) == ("retry", "reasoning_content")


def test_f14_closing_think_tag_in_content_flags_parser():
    raw = load_yaml("api", "f14-completions-raw-text.yaml")
    assert raw["expected"]["contains_closing_think_only"] is True
    body = {"choices": [{"message": {"content": raw["text"]}, "finish_reason": "stop"}]}
    v = health.evaluate_chat(body, reasoning_parser="glm45")
    assert (v["ok"], v["issue"]) == (False, "think_tag_in_content")
    assert "reasoning parser (glm45)" in v["msg"] and "glm47" in v["msg"]


def test_f14_non_empty_content_passes_and_empty_without_reasoning_fails():
    ok = health.evaluate_chat({"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]})
    assert ok["ok"] is True and ok["action"] == "pass"
    bad = health.evaluate_chat({"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]})
    assert (bad["action"], bad["issue"]) == ("fail", "empty_content")


def test_f14_default_kwargs_enable_thinking_false_warns():
    w = health.default_kwargs_warnings({"enable_thinking": False}, "glm47")
    assert len(w) == 1 and "catalogue reasoning_empty_content" in w[0]
    assert health.default_kwargs_warnings({"enable_thinking": True}, "glm47") == []


def _tool_body(name, arguments):
    return {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]},
        "finish_reason": "tool_calls"}]}


def test_f21_zero_arg_tool_pass_and_failures():
    req = load_yaml("api", "f21-tool-request-zero-arg.yaml")
    exp = load_yaml("api", "f21-tool-request-zero-arg.expected.yaml")
    name = req["tools"][0]["function"]["name"]
    assert "get_time" in exp["expected"]["pass_if"][0]
    ok = health.evaluate_tool_call(_tool_body(name, "{}"), name, {}, "glm47")
    assert ok["ok"] is True and ok["arguments"] == {}
    # the catalogue tool_parser_zero_arg failure: the parser dropped the call, the client sees plain content
    dropped = {"choices": [{"message": {"content": "<tool_call>get_time</tool_call>"}, "finish_reason": "stop"}]}
    bad = health.evaluate_tool_call(dropped, name, {}, "glm47")
    assert bad["ok"] is False and bad["issue"] == "no_tool_call"
    assert "tool-call parser glm47 failed" in bad["msg"]
    notjson = health.evaluate_tool_call(_tool_body(name, "None"), name, {}, "glm47")
    assert notjson["issue"] == "arguments_not_json"


def test_f21_tool_with_arguments():
    ok = health.evaluate_tool_call(_tool_body("get_weather", '{"city": "Berlin"}'), "get_weather", {"city": "x"})
    assert ok["ok"] is True and ok["arguments"] == {"city": "Berlin"}
    miss = health.evaluate_tool_call(_tool_body("get_weather", "{}"), "get_weather", {"city": "x"}, "glm47")
    assert miss["issue"] == "missing_arguments" and "city" in miss["msg"]


def test_canary_and_replacement_chars():
    assert health.evaluate_canary({"choices": [{"text": "2"}], "usage": {"completion_tokens": 1}})["ok"] is True
    assert health.evaluate_canary({"object": "error"})["ok"] is False
    assert health.count_replacement_chars(u"ab\ufffd\ufffdc") == 2


def test_real_cpu_engine_capture_killed_rank():
    """A rank killed with `docker kill` during boot on the real CPU engine: exit 137, OOMKilled false."""
    import json as _json
    state = _json.loads(read_fixture(H, "sim-cpu", "rank1-killed.state.json"))
    r = health.classify_failure(read_fixture(H, "sim-cpu", "rank1-killed.log"), oom_killed=state["OOMKilled"],
                                exit_code=state["ExitCode"])
    assert (state["ExitCode"], state["OOMKilled"]) == (137, False)
    assert (r["reason_class"], r["signature"]) == ("process", "rank_killed")


def test_real_cpu_engine_capture_phase_starting():
    p = health.parse_phase(read_fixture(H, "sim-cpu", "rank0-boot-starting.log"))
    assert p["phase"] == "starting"
    assert "non-default args" in p["line"]


def test_real_cpu_engine_ready_log():
    """A complete boot of the real CPU engine (TP1, tiny-glm): phase, pool and the CPU KV line."""
    text = read_fixture(H, "sim-cpu", "tp1-ready.log")
    p = health.parse_phase(text)
    assert p["phase"] == "api_up" and p["line"] == "INFO:     Application startup complete."
    b = health.parse_boot_log(text)
    assert b["kv_cache_tokens"] == 2097152
    assert b["max_concurrency"] == {"max_model_len": 512, "factor": 4096.0}
    assert b["available_kv_cache_gib"] == 1.0          # "Explicitly set (1.0/23.54) GiB for KV cache"
    assert b["init_engine_s"] == 0.80
    assert b["loading_weights_s"] == 0.03
    assert b["startup_complete"] is True
    assert health.classify_failure(text)["signature"] == "unknown"  # a healthy boot has no failure line


def test_real_cpu_engine_metrics_and_chat():
    samples = health.parse_metrics(read_fixture(H, "sim-cpu", "metrics-after-bench.prom"))
    assert not [s for s in samples if s["name"].endswith("_created")]
    c = verdict.serving_counters(samples)
    assert (c["running"], c["waiting"], c["generation_tokens"], c["prompt_tokens"]) == (0.0, 0.0, 465.0, 1461.0)
    assert health.spec_decode_stats(health.spec_decode_counters(samples))["present"] is False
    import json as _json
    v = health.evaluate_chat(_json.loads(read_fixture(H, "sim-cpu", "chat-completion.json")))
    assert (v["ok"], v["finish_reason"], v["reasoning_field"]) == (True, "length", None)


# ---------------------------------------------------------------- boot findings (catalogue negative_cuda_graph_estimate, nccl_no_net_plugin)

def test_g10_negative_graph_estimate_fails_with_the_over_allocation():
    boot = health.parse_boot_log(read_fixture("health", "vllm-logs", "errors", "negative-cuda-graph-estimate-gb10.log"))
    assert boot["cuda_graph_estimate_gib"] == -10.33
    assert boot["kv_cache_memory_pin_bytes"] == 23031691981
    got = health.boot_findings(boot, "node-b")
    assert got["warnings"] == []
    [msg] = got["failures"]
    # 32.09 GiB logged vs 23031691981 B = 21.45 GiB suggested (the source states both): ~10.6 GiB over
    assert msg.startswith("node-b: negative CUDA-graph memory estimate (-10.33 GiB); "
                          "KV over-allocated by ~10.6 GiB: 32.09 vs 21.45 GiB suggested")
    assert "bytes: 23031691981" in msg and "catalogue negative_cuda_graph_estimate" in msg


def test_g10_healthy_gb10_boot_has_no_finding():
    boot = health.parse_boot_log(read_fixture("health", "vllm-logs", "startup", "gb10-single-node-startup.log"))
    assert boot["cuda_graph_estimate_gib"] is None
    assert boot["kv_cache_memory_pin_bytes"] == 52830620611  # the first (fit) suggestion
    assert health.boot_findings(boot, "node-a", rdma_expected=False) == {"failures": [], "warnings": []}


def test_g04_dual_rail_ib_line_passes():
    boot = health.parse_boot_log(read_fixture("doctor", "logs", "spark-2node-dual-rail-healthy.log"))
    assert boot["nccl_net"]["transport"] == "IB"
    assert "rocep1s0f1:1/RoCE" in boot["nccl_net"]["line"]
    assert health.boot_findings(boot, "node-a", rdma_expected=True) == {"failures": [], "warnings": []}


def test_g04_no_net_plugin_fails_when_rdma_is_expected():
    boot = health.parse_boot_log(read_fixture("health", "vllm-logs", "errors", "nccl-no-net-plugin.log"))
    assert boot["nccl_net"] == {"transport": None, "line": "NCCL WARN Failed to initialize any NET plugin"}
    [msg] = health.boot_findings(boot, "node-b", rdma_expected=True)["failures"]
    assert msg.startswith("node-b: NCCL found no NET plugin") and "catalogue nccl_no_net_plugin" in msg


def test_g04_socket_transport_fails_and_names_the_line():
    boot = health.parse_boot_log(read_fixture("health", "vllm-logs", "errors", "nccl-net-socket-fallback.log"))
    assert boot["nccl_net"]["transport"] == "Socket"
    [msg] = health.boot_findings(boot, "node-b", rdma_expected=True)["failures"]
    assert "node-b: NCCL runs on sockets" in msg and "NET/Socket : Using [0]enp1s0f1np1" in msg
    # the CPU lanes pass no /dev/infiniband: the transport is not judged there
    assert health.boot_findings(boot, "node-b", rdma_expected=False)["failures"] == []


def test_g04_no_net_line_only_warns():
    boot = health.parse_boot_log(read_fixture("health", "sim-cpu", "tp1-ready.log"))
    assert boot["nccl_net"] is None
    got = health.boot_findings(boot, "spark-sim-1", rdma_expected=True)
    assert got["failures"] == [] and len(got["warnings"]) == 1 and "NCCL_DEBUG=INFO" in got["warnings"][0]


# ---------------------------------------------------------------- corruption probe (catalogue token_corruption)

def _json_fixture(*parts):
    import json
    return json.loads(read_fixture(*parts))


def test_corruption_counts_u_fffd_in_a_captured_answer_and_fails():
    body = _json_fixture("health", "sim-cpu", "api", "korean-probe.json")
    n = health.count_replacement_chars(health.message_text(body))
    assert n == 1  # random weights: one byte fragment in the reasoning text
    got = health.evaluate_corruption([n, 0, 0], "RedHatAI/GLM-5.3-Flash-NVFP4")
    assert got["ok"] is False and got["counts"] == [1, 0, 0]
    assert got["msg"].startswith("corruption probe: U+FFFD 1 / 0 / 0 over 3 passes (Korean prompt, temperature 0, "
                                 "0 expected) from checkpoint RedHatAI/GLM-5.3-Flash-NVFP4")
    assert "catalogue token_corruption" in got["msg"]


def test_corruption_report_figures_and_clean_passes():
    # the TP2 report's ModelOpt counts fail, its compressed-tensors counts pass
    assert health.evaluate_corruption([4, 9, 8])["msg"].startswith("corruption probe: U+FFFD 4 / 9 / 8 over 3 passes")
    clean = _json_fixture("health", "sim-cpu", "api", "chat-enable-thinking-false.json")
    n = health.count_replacement_chars(health.message_text(clean))
    assert n == 0
    assert health.evaluate_corruption([n, n, n]) == {"ok": True, "counts": [0, 0, 0],
                                                     "msg": "corruption probe: U+FFFD 0 / 0 / 0 over 3 passes"}
    bad = health.evaluate_corruption([0, "HTTP 500: boom", 0])
    assert bad["ok"] is False and bad["counts"] == [0, None, 0] and "a pass failed: HTTP 500: boom" in bad["msg"]


def test_message_text_reads_tool_call_arguments_too():
    body = _json_fixture("health", "sim-cpu", "api", "tool-auto-get-weather.json")
    assert health.count_replacement_chars(health.message_text(body)) == 7
    assert health.chat_message(body)["content"] is None


# ---------------------------------------------------------------- tool smoke well-formedness (catalogue tool_call_mangled)

def test_sim_tool_answer_is_well_formed_non_streamed_and_streamed():
    body = _json_fixture("health", "sim-cpu", "api", "tool-auto-get-weather.json")
    got = health.evaluate_tool_message(body, ["get_weather"], tool_call_parser="glm47")
    assert got == {"ok": True, "msg": "non-streamed answer well-formed: finish_reason length, 0 tool call(s)"}
    streamed, deltas = health.assemble_stream(read_fixture("health", "sim-cpu", "api", "tool-auto-get-weather-stream.sse"))
    assert deltas == 0
    # the folded stream carries the same text as the non-streamed answer (temperature 0, same request)
    assert streamed["choices"][0]["message"]["reasoning"] == body["choices"][0]["message"]["reasoning"]
    assert streamed["choices"][0]["finish_reason"] == "length"
    got = health.evaluate_tool_message(streamed, ["get_weather"], streamed=True, tool_call_deltas=deltas)
    assert got["ok"] is True and got["msg"].startswith("streamed answer well-formed")
    # what is not judged: the model did not call the tool; with judge "call" that fails
    assert health.evaluate_tool_call(body, "get_weather", {"city": "Berlin"}, "glm47")["issue"] == "no_tool_call"


def test_g12_stream_ending_tool_calls_without_deltas_fails():
    body, deltas = health.assemble_stream(read_fixture("health", "api", "g12-stream-end-tool-calls-without-deltas.sse"))
    assert deltas == 0
    got = health.evaluate_tool_message(body, ["get_time"], streamed=True, tool_call_deltas=deltas,
                                       tool_call_parser="glm47")
    assert got["ok"] is False
    assert got["msg"] == ("streamed answer is malformed (tool-call parser glm47, catalogue tool_parser_zero_arg): "
                          "finish_reason tool_calls without any tool call; finish_reason tool_calls but no "
                          "delta.tool_calls in the stream")


def test_g12_name_fused_with_markup_fails():
    body = _json_fixture("health", "api", "g12-name-fused-with-markup.json")
    got = health.evaluate_tool_message(body, ["run_command"], tool_call_parser="glm47")
    assert got["ok"] is False and "(tool-call markup in the name)" in got["msg"]
    assert "not one of the offered tools ['run_command']" in got["msg"]


def test_g11_empty_arguments_are_well_formed_but_fail_the_call_judge():
    body = _json_fixture("health", "api", "g11-parsed-empty-arguments.json")
    assert health.evaluate_tool_message(body, ["search"])["ok"] is True
    got = health.evaluate_tool_call(body, "search", {"query": "how many vacation days left"}, "glm47")
    assert got["ok"] is False and "lacks argument(s)" in got["msg"] and "glm47" in got["msg"]


def test_stream_that_is_not_sse_is_refused():
    with pytest.raises(ValueError, match="no data chunk"):
        health.assemble_stream('{"error": "not a stream"}')
