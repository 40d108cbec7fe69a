"""plugins/module_utils/memory_plan.py: the seeds' published pools and per-rank figures, the refusals,
and the compare-after-boot path on captured boot logs.

Tolerances (docs/memory-plan.md explains each):
- pools of the pairs the calibration was fitted on: 0.1 % (rounding of the fitted constants);
- held-out pinned pools: 12 % (one calibration per speculative method; the earlier DFlash2 build of T2
  and the field report run ~9 % heavier per token, Y3's TP3 DFlash2 with its padded drafter 11 %);
- the profiler-sized pool: 10 % (activation peak and non-torch memory come from another GB10 boot,
  the weights per rank from another fleet's load);
- weights per rank from checkpoint size / TP against what the engine logged: 10 % (the size counts
  tensors vLLM does not load at TP2/TP4 and misses the TP3 head padding).
"""
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import health
from ansible_collections.dgxspark.vllm.plugins.module_utils import memory_plan as mp
from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import parse_meminfo
from tests.unit.conftest import ROOT, read_fixture

GIB = 1024 ** 3
PUBLISHED = yaml.safe_load(read_fixture("kv-sizing", "published-pools.yaml"))
REPO = {"nvidia": "nvidia/GLM-5.3-Flash-NVFP4", "redhat": "RedHatAI/GLM-5.3-Flash-NVFP4",
        "libertai": "LibertAIDAI/GLM-5.3-Flash-NVFP4"}
TOLERANCE_PCT = {"fit": 0.1, "held_out": 12.0}


def lane_file(name):
    with open(os.path.join(ROOT, "lanes", name + ".yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def seed_lane(p, kv_policy):
    spec = None if p["method"] == "none" else {"method": p["method"],
                                               "num_speculative_tokens": 7 if p["method"] == "dflash" else 4}
    return {"name": p["name"], "platform": "spark", "tensor_parallel_size": p["tp"],
            "checkpoint": {"repo_id": REPO[p["checkpoint"]], "size_gib": 185},
            "serve": {"max_model_len": p["max_model_len"], "kv_cache_dtype": "fp8", "kv_policy": kv_policy,
                      "speculative_config": spec, "gpu_memory_utilization": p.get("gpu_memory_utilization", 0.85),
                      "enforce_eager": True, "max_num_batched_tokens": 8192}}


def err_pct(pred, pub):
    return (pred - pub) / float(pub) * 100.0


@pytest.mark.parametrize("p", PUBLISHED["pools"], ids=[p["name"] for p in PUBLISHED["pools"]])
def test_pinned_pools_of_the_seeds(p):
    plan = mp.memory_plan(seed_lane(p, {"mode": "pin", "bytes": p["pin_bytes"]}))
    assert plan["errors"] == []
    assert abs(err_pct(plan["pool_tokens"], p["pool"])) <= TOLERANCE_PCT[p["use"]], plan["pool_tokens"]
    # pool = int(max_concurrency x max_model_len) (docs/memory-plan.md), every rank the same under a pin
    assert len(plan["ranks"]) == p["tp"]
    assert len(set(r["pool_tokens"] for r in plan["ranks"])) == 1


def test_named_figures_of_the_issue():
    by = dict((p["name"], p) for p in PUBLISHED["pools"])
    tp3 = mp.memory_plan(seed_lane(by["TP3 MTP-4 512K (Y3)"], {"mode": "pin", "bytes": 11523000000}))
    assert tp3["kv_gib"] == 10.73 and tp3["pool_tokens"] == 1540230    # published 1,505,849: +2.3 %
    tp4 = mp.memory_plan(seed_lane(by["TP4 DFlash2 1M (T4 earlier anchor)"], {"mode": "pin", "bytes": 16 * GIB}))
    assert tp4["pool_tokens"] == 2596970                                # published 2,622,494: -1.0 %
    # bytes per token per rank at 262,144 tokens: 6,962 without speculation, 8,793 with MTP-4 (docs/memory-plan.md)
    none = mp.memory_plan(seed_lane(by["TP3 no spec 262K (Y3)"], {"mode": "pin", "bytes": 1}))
    mtp = mp.memory_plan(seed_lane(by["TP3 MTP-4 262K (Y3)"], {"mode": "pin", "bytes": 1}))
    assert abs(none["effective_bytes_per_token_per_rank"] - 6962) / 6962 < 0.001
    assert abs(mtp["effective_bytes_per_token_per_rank"] - 8793) / 8793 < 0.001
    # the docs/memory-plan.md trap: the apparent bytes/token falls with context (7,651 at 512K published)
    assert 7400 < tp3["effective_bytes_per_token_per_rank"] < 7700


def test_profiler_sized_pool_tp2_dflash2_581040():
    p = PUBLISHED["profiler"][0]
    boot = health.parse_boot_log(read_fixture("node", "gb10-single-node-startup.log"))
    usage, free = boot["memory_usage"], boot["free_memory_on_startup"]
    options = {"weights_gib_per_rank": p["weights_gib_per_rank"],
               "non_torch_gib": round(usage["consumed_gib"] - boot["model_loading"]["gib"], 2),
               "activation_gib": usage["activation_gib"]}
    node = {"host": "gb10", "rank": 0, "mem_total_gib": free["total_gib"], "mem_available_gib": free["free_gib"]}
    plan = mp.memory_plan(seed_lane(p, {"mode": "profiler"}), [node], options)
    assert options["non_torch_gib"] == 4.64
    assert plan["kv_gib"] == 4.77 and plan["pool_tokens"] == 538826
    assert abs(err_pct(plan["pool_tokens"], p["pool"])) <= 10.0          # -7.3 %
    assert plan["errors"] == [] and plan["ranks"][0]["startup_check"] is True


@pytest.mark.parametrize("w", PUBLISHED["weights"], ids=[w["name"] for w in PUBLISHED["weights"]])
def test_weights_per_rank_from_checkpoint_size(w):
    lane = {"name": "w", "platform": "spark", "tensor_parallel_size": w["tp"],
            "checkpoint": {"repo_id": REPO["redhat"], "size_gib": w["checkpoint_gib"]},
            "serve": {"max_model_len": 262144, "kv_cache_dtype": "fp8", "kv_policy": {"mode": "pin", "bytes": GIB},
                      "enforce_eager": True}}
    plan = mp.memory_plan(lane)
    assert plan["weights_gib_per_rank"] == round(w["checkpoint_gib"] / w["tp"], 2)
    assert abs(err_pct(plan["weights_gib_per_rank"], w["logged_gib"])) <= 10.0


def test_index_total_size_overrides_the_lane_size():
    lane = lane_file("tp3_mtp")
    plan = mp.memory_plan(lane, options={"checkpoint_bytes": 194659631104})   # 181.29 GiB
    assert plan["weights_gib_per_rank"] == 60.43
    assert plan["weights_source"] == "safetensors index total_size / TP 3"


def _node(host, rank, meminfo_text):
    m = parse_meminfo(meminfo_text)
    return {"host": host, "rank": rank, "mem_total_kib": m["MemTotal"], "mem_available_kib": m["MemAvailable"],
            "swap_total_gib": round(m["SwapTotal"] / 1048576.0, 2)}


def test_refuses_a_pin_that_cannot_fit_names_rank_and_numbers():
    # catalogue free_memory_refused's node (MemTotal 121.69 GiB, MemAvailable 104.46 GiB) under lane tp2_mtp with its pin raised to 16 GiB
    lane = lane_file("tp2_mtp")
    lane["serve"]["kv_policy"]["bytes"] = 16 * GIB
    meminfo = read_fixture("node", "f17-node-meminfo-constructed.txt")
    plan = mp.memory_plan(lane, [_node("spark-a", 0, meminfo), _node("spark-b", 1, meminfo)])
    fit = [e for e in plan["errors"] if "cannot fit" in e]
    assert len(fit) == 2
    assert fit[1] == (
        "rank 1 (spark-b): cannot fit: needs 116.92 GiB (weights 92.50 + drafter 0.00 + non-torch 4.64 + KV 16.00 "
        "+ activation 3.78 + CUDA graphs 0.00) but MemAvailable 104.46 GiB less the OS reserve 3.00 GiB leaves "
        "101.46 GiB: short by 15.46 GiB. Fix: no pin leaves room for one request at max_model_len 262144 (2.15 GiB) "
        "here: free memory on spark-b, lower serve.max_model_len or use a lane with a larger tensor-parallel size")
    # the same node at TP4: a 40 GiB pin leaves a thin 1.52 GiB, 44 GiB is refused with the largest pin that fits
    lane = lane_file("tp4_dflash2_1m")
    lane["serve"]["kv_policy"]["bytes"] = 40 * GIB
    plan = mp.memory_plan(lane, [_node("spark-%d" % r, r, meminfo) for r in range(4)])
    assert plan["errors"] == [] and plan["ranks"][3]["margin_gib"] == 1.52
    assert "rank 3 (spark-3): thin margin: 1.52 GiB left after the plan" in " ".join(plan["warnings"])
    lane["serve"]["kv_policy"]["bytes"] = 44 * GIB
    plan = mp.memory_plan(lane, [_node("spark-%d" % r, r, meminfo) for r in range(4)])
    assert plan["errors"][0].endswith("short by 2.48 GiB. Fix: lower serve.kv_policy.bytes to at most 44581760573 "
                                      "(41.52 GiB) in vllm_lane_overrides, or free memory on spark-0")


def test_refuses_a_utilization_above_free_memory_f17():
    lane = lane_file("tp2_mtp")
    lane["serve"]["gpu_memory_utilization"] = 0.87
    meminfo = read_fixture("node", "f17-node-meminfo-constructed.txt")
    plan = mp.memory_plan(lane, [_node("spark-a", 0, meminfo), _node("spark-b", 1, meminfo)])
    assert plan["errors"][0].startswith("rank 0 (spark-a): MemAvailable 104.46 GiB is below gpu_memory_utilization "
                                        "0.87 x MemTotal 121.69 GiB = 105.87 GiB")
    assert "lower serve.gpu_memory_utilization to 0.85" in plan["errors"][0]


def test_cpu_lane_kv_is_vllm_cpu_kvcache_space_and_pool_from_config():
    """The captured TP1 boot (1.0 GiB, 2,097,152 tokens, 4096x) is reproduced exactly."""
    lane = lane_file("sim_cpu_tp2")
    cfg = {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 32, "torch_dtype": "bfloat16"}
    lane["tensor_parallel_size"] = 1
    plan = mp.memory_plan(lane, options={"model_config": cfg})
    boot = health.parse_boot_log(read_fixture("health", "sim-cpu", "tp1-ready.log"))
    assert plan["kv_gib"] == boot["available_kv_cache_gib"] == 1.0
    assert plan["pool_tokens"] == boot["kv_cache_tokens"] == 2097152
    assert plan["max_concurrency"] == boot["max_concurrency"]["factor"] == 4096.0
    lane["tensor_parallel_size"] = 2     # one KV head per rank: twice the tokens
    assert mp.memory_plan(lane, options={"model_config": cfg})["pool_tokens"] == 4194304


def test_compare_after_boot_on_captured_logs():
    """Prediction of lane tp2_dflash2 (8 GiB pin) beside catalogue kv_pool_below_peers's two rank logs and a TP2 boot's pool line."""
    plan = mp.memory_plan(lane_file("tp2_dflash2"))
    ranks = [dict(health.parse_boot_log(read_fixture("health", "vllm-logs", "per-rank", f)), rank=r, host=h)
             for r, h, f in ((0, "node-a", "f16-node-a-worker-tp0.log"), (1, "node-b", "f16-node-b-worker-tp1.log"))]
    ranks[0].update(dict((k, v) for k, v in health.parse_boot_log(
        read_fixture("health", "vllm-logs", "startup", "glm53-tp2-deploy-report-boot.log")).items()
        if k in ("kv_cache_tokens", "max_concurrency")))
    summary = health.kv_pool_summary(ranks)
    cmp_ = mp.compare(plan, summary)
    assert [(r["rank"], r["predicted_kv_gib"], r["logged_kv_gib"], r["error_pct"]) for r in cmp_["per_rank"]] == [
        (0, 8.0, 8.54, -6.3), (1, 8.0, 5.54, 44.4)]
    assert cmp_["pool_tokens"] == {"predicted": 715511, "logged": 603144, "error_pct": 18.6}
    assert cmp_["max_concurrency"] == {"predicted": 2.73, "logged": 2.3, "error_pct": 18.7}
    assert mp.compare_lines(cmp_) == [
        "rank 0 (node-a): KV predicted 8.00 GiB, logged 8.54 GiB, error -6.3 %",
        "rank 1 (node-b): KV predicted 8.00 GiB, logged 5.54 GiB, error +44.4 %",
        "pool: predicted 715,511 tokens, logged 603,144 tokens, error +18.6 %",
        "max concurrency: predicted 2.73x, logged 2.30x, error +18.7 %"]


def test_thin_margin_and_f20_warnings_name_the_rank():
    lane = lane_file("tp2_mtp")
    node = {"host": "spark-a", "rank": 0, "mem_total_gib": 121.69, "mem_available_gib": 112.0}
    plan = mp.memory_plan(lane, [node, dict(node, host="spark-b", rank=1)])
    assert plan["errors"] == []
    assert any(w.startswith("rank 1 (spark-b): thin margin: ") for w in plan["warnings"])
    assert any(w.startswith("rank 0 (spark-a): KV pin 4.14 GiB is above") for w in plan["warnings"])


def test_bad_inputs_are_refused_with_the_item():
    with pytest.raises(mp.MemoryPlanError, match="expected the resolved lane"):
        mp.memory_plan("tp2_mtp")
    lane = lane_file("tp2_mtp")
    lane["serve"]["speculative_config"] = {"method": "ngram"}
    with pytest.raises(mp.MemoryPlanError, match="no KV calibration for speculative method 'ngram'"):
        mp.memory_plan(lane)
    with pytest.raises(mp.MemoryPlanError, match="concurrency must be positive"):
        mp.kv_cache_bytes(524288, 0, 8793)
    assert mp.kv_cache_bytes(524288, 2.5, 8793) == 11525160960


def test_bringup_plan_lane_only_tp3():
    lane = lane_file("tp3_mtp")
    plan = mp.memory_plan(lane)
    b = mp.bringup_plan(lane, [{"host": "a", "rank": 0}, {"host": "b", "rank": 1}, {"host": "c", "rank": 2}], plan)
    head, worker = b["nodes"][0], b["nodes"][1]
    assert head["role"] == "head: serves the API on port 8045, rendezvous on 29531"
    assert [(t["what"], t["gib"]) for t in worker["transfers"]] == [
        ("image glm53:sm121-v8", 45), ("checkpoint LibertAIDAI/GLM-5.3-Flash-NVFP4", 182), ("fix files (5)", 0)]
    assert worker["disk"] == {"path": "/var/tmp/models/GLM-5.3-Flash-NVFP4-libertai", "need_gib": 230,
                              "free_gib": None, "ok": None}
    assert [p["seconds"] for p in b["phases"]][-3:] == [479, 170, None]
    assert "  to transfer: 227.0 GiB" in b["lines"]


def test_report_lines_for_the_cpu_engine_from_its_captured_boot():
    """The report's memory_plan lines for a CPU lane, from the real vllm-cpu boot log (TP1 capture) read by
    vllm_health's parser: prediction (VLLM_CPU_KVCACHE_SPACE, pool from config.json geometry) equals the log."""
    lane = lane_file("sim_cpu_tp2")
    lane["tensor_parallel_size"] = 1
    cfg = {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 32}
    plan = mp.memory_plan(lane, [{"host": "sim-0", "rank": 0, "mem_total_gib": 23.54, "mem_available_gib": 20.0}],
                          {"model_config": cfg})
    boot = dict(health.parse_boot_log(read_fixture("health", "sim-cpu", "tp1-ready.log")), rank=0, host="sim-0")
    lines = mp.compare_lines(mp.compare(plan, health.kv_pool_summary([boot])))
    assert lines == ["rank 0 (sim-0): KV predicted 1.00 GiB, logged 1.00 GiB, error +0.0 %",
                     "pool: predicted 2,097,152 tokens, logged 2,097,152 tokens, error +0.0 %",
                     "max concurrency: predicted 4096.00x, logged 4096.00x, error +0.0 %"]
    assert plan["ranks"][0]["margin_gib"] == 15.99     # 20.0 - 3.0 reserve - 1.0 KV - 0.01 weights
    assert plan["ranks"][0]["free_at_peak_gib"] == 18.99  # what MemAvailable reads after the claim: margin + reserve
