import copy
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import (
    deep_merge,
    validate_inventory,
    validate_lane,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
LANES = os.path.join(ROOT, "lanes")


def load(name):
    with open(os.path.join(LANES, name + ".yml")) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("name", sorted(f[:-4] for f in os.listdir(LANES) if f.endswith(".yml")))
def test_every_shipped_lane_is_valid(name):
    assert validate_lane(load(name), name) == []


def test_deep_merge_replaces_single_keys_and_keeps_the_rest():
    lane = load("sim_cpu_tp2")
    merged = deep_merge(lane, {"serve": {"max_model_len": 1024}, "container": {"env": {"X": "1"}}})
    assert merged["serve"]["max_model_len"] == 1024
    assert merged["serve"]["api_port"] == lane["serve"]["api_port"]
    assert merged["container"]["env"]["X"] == "1"
    assert merged["container"]["env"]["HF_HUB_OFFLINE"] == "1"
    assert lane["serve"]["max_model_len"] == 512, "the loaded lane must not be mutated"


@pytest.mark.parametrize("override,message", [
    ({"tensor_parallel_size": "2"}, "lane sim_cpu_tp2: tensor_parallel_size: expected int, got string ('2')"),
    ({"tensor_parallel_size": True}, "lane sim_cpu_tp2: tensor_parallel_size: expected int, got bool (True)"),
    ({"tensor_parallel_size": 0}, "lane sim_cpu_tp2: tensor_parallel_size: 0 is below the minimum 1"),
    ({"platform": "gpu"}, "lane sim_cpu_tp2: platform: 'gpu' is not one of spark, cpu"),
    ({"serve": {"gpu_memory_utilization": 1.2}},
     "lane sim_cpu_tp2: serve.gpu_memory_utilization: 1.2 is above the maximum 0.99"),
    ({"serve": {"api_port": 70000}}, "lane sim_cpu_tp2: serve.api_port: 70000 is above the maximum 65535"),
    ({"serve": {"master_port": 8000}},
     "lane sim_cpu_tp2: serve.master_port: equals serve.api_port (8000); the rendezvous needs its own port"),
    ({"container": {"mounts": [{"host": "/a"}]}}, "lane sim_cpu_tp2: container.mounts[0].container: required key missing"),
    ({"container": {"mounts": [{"host": "/a", "container": "/b", "mode": "rx"}]}},
     "lane sim_cpu_tp2: container.mounts[0].mode: 'rx' is not one of ro, rw"),
    ({"serve": {"extra_args": ["--x", 3]}}, "lane sim_cpu_tp2: serve.extra_args[1]: expected str, got int (3)"),
    ({"serve": {"kv_policy": {"mode": "pin"}}}, "lane sim_cpu_tp2: serve.kv_policy.bytes: required when mode is 'pin'"),
    ({"imag": {}}, "lane sim_cpu_tp2: imag: unknown key (known: "),
])
def test_bad_lane_values_are_named(override, message):
    errors = validate_lane(deep_merge(load("sim_cpu_tp2"), override), "sim_cpu_tp2")
    assert any(e.startswith(message) for e in errors), errors


def test_dflash_k_above_7_is_refused():
    lane = deep_merge(load("sim_cpu_tp2"), {
        "drafter": {"repo_id": "x/d", "host_path": "/d", "container_path": "/models/d"},
        "serve": {"speculative_config": {"method": "dflash", "model": "/models/d", "num_speculative_tokens": 8}}})
    assert validate_lane(lane, "sim_cpu_tp2") == [
        "lane sim_cpu_tp2: serve.speculative_config.num_speculative_tokens: 8 is above 7; the DFlash2 drafter's "
        "block_size 8 must equal 1 + k (docs/lanes.md). Use k <= 7."]


def test_dflash_without_drafter_is_refused():
    spec = {"method": "dflash", "num_speculative_tokens": 7}
    lane = deep_merge(load("sim_cpu_tp2"), {"serve": {"speculative_config": spec}})
    assert validate_lane(lane) == [
        "lane sim_cpu_tp2: serve.speculative_config: method dflash needs a drafter (lane key 'drafter')"]


def test_dflash_without_k_is_refused():
    lane = deep_merge(load("tp2_dflash2"), {"serve": {"speculative_config": {"num_speculative_tokens": None}}})
    assert validate_lane(lane, "tp2_dflash2") == [
        "lane tp2_dflash2: serve.speculative_config.num_speculative_tokens: expected int, got null (None); k, the "
        "tokens drafted per step, must be an int >= 1 (docs/lanes.md): the mtp lanes use 4, dflash takes 1..7 "
        "(the DFlash2 drafter's block_size 8 = 1 + k); set an unquoted int, e.g. num_speculative_tokens: 7"]
    del lane["serve"]["speculative_config"]["num_speculative_tokens"]
    assert validate_lane(lane, "tp2_dflash2") == [
        "lane tp2_dflash2: serve.speculative_config.num_speculative_tokens: required for method dflash; the DFlash2 "
        "drafter's block_size 8 must equal 1 + k (docs/lanes.md). Set num_speculative_tokens: 7."]


@pytest.mark.parametrize("lane_name,override,message", [
    # the nvidia checkpoint (guard_mode dflash2): MTP head BF16 (docs/weights.md)
    ("tp2_dflash2", {"drafter": None, "serve": {"speculative_config": {"method": "mtp", "model": None}}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized "
     "(checkpoint.repo_id 'nvidia/GLM-5.3-Flash-NVFP4', guard_mode dflash2;"),
    # an nvidia/* repo without a guard mode is refused by its repo_id
    ("tp2_mtp", {"checkpoint": {"repo_id": "nvidia/GLM-5.3-Flash-NVFP4", "guard_mode": None}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized "
     "(checkpoint.repo_id 'nvidia/GLM-5.3-Flash-NVFP4', guard_mode null;"),
    ("tp2_mtp", {"checkpoint": {"guard_mode": "dflash2"}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized "
     "(checkpoint.repo_id 'RedHatAI/GLM-5.3-Flash-NVFP4', guard_mode dflash2;"),
    ("tp2_dflash2", {"serve": {"kv_policy": {"bytes": 110 * 1024 ** 3}}},
     "serve.kv_policy.bytes: 118111600640 (110 GiB) is not below the node memory the lane requires "
     "(requirements.mem_total_gib_min 110 GiB);"),
    ("tp2_dflash2", {"serve": {"kv_policy": {"bytes": 4445787956}}, "requirements": {"mem_total_gib_min": 4.1}},
     "serve.kv_policy.bytes: 4445787956 (4.14 GiB) is not below the node memory the lane requires "
     "(requirements.mem_total_gib_min 4.1 GiB);"),
])
def test_cross_key_rules(lane_name, override, message):
    errors = validate_lane(deep_merge(load(lane_name), override), lane_name)
    assert [e for e in errors if e.startswith("lane %s: %s" % (lane_name, message))] == errors and errors, errors


@pytest.mark.parametrize("lane_name,override", [
    ("tp2_dflash2", {"serve": {"kv_policy": {"bytes": 109 * 1024 ** 3}}}),  # below the node figure
    ("tp2_dflash2", {"requirements": {"mem_total_gib_min": None}}),  # no node figure, no comparison
    ("tp3_mtp", {}),  # LibertAIDAI checkpoint, guard_mode null: mtp is fine
    ("tp2_mtp", {"serve": {"speculative_config": {"num_speculative_tokens": 1}}}),
])
def test_cross_key_rules_accept(lane_name, override):
    assert validate_lane(deep_merge(load(lane_name), override), lane_name) == []


def test_lane_name_must_match_file():
    assert validate_lane(load("sim_cpu_tp2"), "other") == [
        "lane other: name: 'sim_cpu_tp2' does not match the lane file name 'other'"]


def test_missing_required_section():
    lane = copy.deepcopy(load("sim_cpu_tp2"))
    del lane["serve"]
    assert validate_lane(lane) == ["lane sim_cpu_tp2: serve: required key missing"]


def _hosts(*ranks):
    out = []
    for i, r in enumerate(ranks):
        out.append({"name": "node-%s" % "abcd"[i], "groups": ["spark_cluster", "vllm_head" if i == 0 else "vllm_workers"],
                    "rank": r})
    return out


def test_valid_layouts():
    assert validate_inventory(_hosts(0, 1), 2) == []
    assert validate_inventory(_hosts(0, 2, 1), 3) == []
    assert validate_inventory(_hosts(0, 3, 1, 2), 4) == []


def test_layout_errors_are_exact():
    assert validate_inventory(_hosts(0, 1, 1), 3) == ["vllm_rank 1: used by node-b, node-c; every rank must be unique"]
    assert validate_inventory(_hosts(0, 1), 3) == [
        "group spark_cluster has 2 hosts but the lane's tensor_parallel_size is 3; "
        "add or remove hosts, or pick a lane for 2 nodes"]
    assert validate_inventory(_hosts(0, 5), 2) == [
        "vllm_rank values are [0, 5]; with 2 hosts they must be exactly 0..1 (missing [1], out of range [5])"]


@pytest.mark.parametrize("override,message", [
    ({"serve": {"kv_cache_dtype": "fp4"}}, "serve.kv_cache_dtype: 'fp4' is not one of auto, bfloat16, fp8,"),
    ({"serve": {"max_model_len": 10 ** 12}}, "serve.max_model_len: 1000000000000 is above the maximum 1048576"),
    ({"checkpoint": {"host_path": "rel/path"}}, "checkpoint.host_path: 'rel/path' is not an absolute path"),
    ({"container": {"memory": "512"}}, "container.memory: '512' is not a size with a unit (e.g. 32g; a bare number "
     "is bytes to docker) (kind size); write e.g. 32g; docker --memory and --memory-swap"),
    ({"container": {"name": "a b"}}, "container.name: 'a b' is not a Docker container name"),
    ({"container": {"env": {"A": None}}}, "container.env.A: expected str or int or float, got null (None)"),
    ({"serve": {"extra_args": ["--kv-cache-dtype=fp8"]}},
     "serve.extra_args[0]: '--kv-cache-dtype=fp8' repeats --kv-cache-dtype"),
    ({"serve": {"chat_template": "/srv/t.jinja"}}, "serve.chat_template: '/srv/t.jinja' is under no directory"),
])
def test_issue19_schema_classes(override, message):
    errors = validate_lane(deep_merge(load("sim_cpu_tp2"), override), "sim_cpu_tp2")
    assert any(e.startswith("lane sim_cpu_tp2: " + message) for e in errors), errors


def test_mtp_k_range_is_per_method():
    lane = load("tp2_mtp")
    assert validate_lane(deep_merge(lane, {"serve": {"speculative_config": {"num_speculative_tokens": 7}}})) == []
    errors = validate_lane(deep_merge(lane, {"serve": {"speculative_config": {"num_speculative_tokens": 100}}}))
    assert errors == ["lane tp2_mtp: serve.speculative_config.num_speculative_tokens: 100 is above the maximum 7; mtp "
                      "runs the checkpoint's single MTP layer k times; the lanes ship k=4 and runs used 2..4, "
                      "acceptance falls with every position (docs/lanes.md). Set num_speculative_tokens in 1..7"]


def test_nvfp4_kv_with_dflash2_needs_the_flag_at_tp2_only():
    bad = {"serve": {"kv_cache_dtype": "nvfp4_ds_mla"}}
    assert validate_lane(deep_merge(load("tp2_dflash2"), bad))[0].startswith(
        "lane tp2_dflash2: serve.kv_cache_dtype: nvfp4_ds_mla with speculative method dflash at tensor_parallel_size 2")
    assert validate_lane(deep_merge(load("tp2_dflash2"), dict(bad, allow_nvfp4_kv_dflash2_tp2=True))) == []
    assert validate_lane(deep_merge(load("tp3_dflash2"), bad)) == []
