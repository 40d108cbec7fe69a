"""Shipped lanes: each validates, renders for every rank with one group hash, and the sample
inventories name lanes that exist for their size. New schema keys and cross-key rules refuse bad values."""
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import deep_merge, validate_inventory, validate_lane
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import group_errors, render_rank

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
LANES = sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, "lanes")) if f.endswith(".yml"))
SHIPPED = ["sim_cpu_tp2", "sim_cpu_tp3", "tp2_dflash2", "tp2_mtp", "tp3_dflash2", "tp3_mtp", "tp4_dflash2_1m",
           "tp2_dflash2_ct", "tp3_mtp_ct", "tp3_dflash2_ct"]


def load(name):
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        return yaml.safe_load(f)


def test_the_issue_lanes_are_shipped():
    assert set(SHIPPED) <= set(LANES)


@pytest.mark.parametrize("name", LANES)
def test_every_lane_renders_one_spec_for_the_whole_group(name):
    lane = load(name)
    assert validate_lane(lane, name) == []
    fixes = [{"host": "/var/lib/dgxspark-vllm/fix/" + f["name"], "container": f["container_path"], "mode": "ro"}
             for f in lane.get("fix_files") or []]
    tp = lane["tensor_parallel_size"]
    specs = dict(("node-%d" % r, render_rank(lane, {"rank": r, "host_ip": "192.0.2.%d" % (10 + r),
                                                    "master_addr": "192.0.2.10", "kernel_fix_mounts": fixes}))
                 for r in range(tp))
    assert group_errors(specs) == []
    for r in range(tp):
        cmd = specs["node-%d" % r]["command"]
        assert cmd[cmd.index("--nnodes") + 1] == str(tp)
        assert ("--headless" in cmd) == (r > 0)
        assert cmd[cmd.index("--master-port") + 1] == str(lane["serve"]["master_port"])
        if lane["platform"] == "cpu":
            assert "--gpus" not in specs["node-%d" % r]["docker_argv"]


@pytest.mark.parametrize("inventory,lane_name", [("sample_tp2", "tp2_dflash2_ct"), ("sample_tp3", "tp3_mtp"),
                                                 ("sample_tp4", "tp4_dflash2_1m")])
def test_sample_inventories_validate_with_their_lane(inventory, lane_name):
    base = os.path.join(ROOT, "inventories", inventory)
    with open(os.path.join(base, "group_vars", "spark_cluster", "main.yml")) as f:
        assert yaml.safe_load(f)["vllm_lane"] == lane_name
    with open(os.path.join(base, "hosts.yml")) as f:
        inv = yaml.safe_load(f)
    root = inv.get("all", {}).get("children", inv).get("spark_cluster", inv.get("spark_cluster"))
    hosts = []
    for group in ("vllm_head", "vllm_workers"):
        for name, hv in (root["children"][group]["hosts"] or {}).items():
            hosts.append({"name": name, "groups": ["spark_cluster", group], "rank": hv.get("vllm_rank")})
    lane = load(lane_name)
    assert validate_lane(lane, lane_name) == []
    assert validate_inventory(hosts, lane["tensor_parallel_size"]) == []


@pytest.mark.parametrize("override,message", [
    ({"serve": {"kv_policy": {"mode": "pin", "bytes": 1, "flag": "--kv-cache"}}},
     "lane tp2_dflash2: serve.kv_policy.flag: '--kv-cache' is not one of --kv-cache-memory, --kv-cache-memory-bytes"),
    ({"serve": {"kv_policy": {"mode": "profiler"}}},
     "lane tp2_dflash2: serve.kv_policy.bytes: set but mode is 'profiler'; use mode 'pin' to pass --kv-cache-memory, "
     "or drop bytes (docs/memory-plan.md)"),
    ({"serve": {"api_args_on_workers": "yes"}},
     "lane tp2_dflash2: serve.api_args_on_workers: expected bool, got string ('yes')"),
    ({"serve": {"limit_mm_per_prompt": "image=2"}},
     "lane tp2_dflash2: serve.limit_mm_per_prompt: expected dict or null, got string ('image=2')"),
    ({"serve": {"mm_encoder_tp_mode": "replicate"}},
     "lane tp2_dflash2: serve.mm_encoder_tp_mode: 'replicate' is not one of data, weights"),
    ({"serve": {"pipeline_parallel_size": 0}}, "lane tp2_dflash2: serve.pipeline_parallel_size: 0 is below the minimum 1"),
    ({"serve": {"speculative_config": {"model": "/models/other-draft"}}},
     "lane tp2_dflash2: serve.speculative_config.model: '/models/other-draft' is not the drafter's container_path "
     "'/models/dflash2-draft'; the drafter is mounted there"),
    ({"platform": "cpu"},
     "lane tp2_dflash2: container.gpus/devices: GPU or RDMA devices on platform 'cpu'; the simulated fleet has none "
     "(set gpus: null, devices: [])"),
    ({"drafter": {"heads_padding": {"num_attention_heads": 36, "num_kv_heads": 9}}},
     "lane tp2_dflash2: drafter.heads_padding.num_kv_heads: unknown key (known: num_attention_heads, "
     "num_key_value_heads)"),
    ({"drafter": {"heads_padding": {"num_attention_heads": 45}}},
     "lane tp2_dflash2: drafter.heads_padding.num_attention_heads: 45 must be an integer that divides by "
     "tensor_parallel_size 2"),
    ({"padding": {"config_targets": {"text_config.num_attention_heads": 65}}},
     "lane tp2_dflash2: padding.config_targets.text_config.num_attention_heads: 65 does not divide by "
     "tensor_parallel_size 2; pad to a multiple of it (catalogue drafter_heads)"),
    ({"padding": {"config_targets": {"text_config.moe_intermediate_size": "2112"}}},
     "lane tp2_dflash2: padding.config_targets.text_config.moe_intermediate_size: expected a positive int, got '2112'"),
    ({"serve": {"compilation_config": ["FULL"]}},
     "lane tp2_dflash2: serve.compilation_config: expected dict or null, got list (['FULL'])"),
])
def test_bad_overrides_of_a_seed_lane_are_named(override, message):
    errors = validate_lane(deep_merge(load("tp2_dflash2"), override), "tp2_dflash2")
    assert message in errors, errors


def test_docs_table_names_every_lane_and_every_serve_key():
    with open(os.path.join(ROOT, "docs", "lanes.md")) as f:
        doc = f.read()
    for name in LANES:
        assert "`%s`" % name in doc, name
    from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import LANE_SCHEMA
    for key in LANE_SCHEMA["properties"]["serve"]["properties"]:
        assert "`%s`" % key in doc, "serve.%s is not documented in docs/lanes.md" % key


def test_every_spark_lane_has_a_compressed_tensors_variant_and_a_corruption_probe():
    """catalogue token_corruption: ModelOpt only where a lane says so, a compressed-tensors lane beside each."""
    spark = [load(n) for n in LANES if load(n)["platform"] == "spark"]
    ct = [lane for lane in spark if lane["checkpoint"]["quantization"] == "compressed-tensors"]
    for lane in spark:
        assert lane["checkpoint"]["quantization"] in ("modelopt", "compressed-tensors"), lane["name"]
        assert lane["health"]["corruption_probe"]["passes"] == 3, lane["name"]
        twin = [c for c in ct if c["tensor_parallel_size"] == lane["tensor_parallel_size"]
                and (c["serve"]["speculative_config"] or {}).get("method")
                == (lane["serve"]["speculative_config"] or {}).get("method")]
        assert twin, "%s has no compressed-tensors variant" % lane["name"]
    for name in ("tp2_dflash2_ct", "tp3_mtp_ct", "tp3_dflash2_ct"):
        lane, base = load(name), load(name[:-3])
        assert lane["checkpoint"]["repo_id"] == "RedHatAI/GLM-5.3-Flash-NVFP4"
        # the variant changes the checkpoint only: image, flags, padding and fix files are the base lane's
        for key in ("image", "serve", "container", "padding", "fix_files", "drafter"):
            assert lane[key] == base[key], (name, key)


def test_sim_lanes_run_the_production_parser_flags():
    for name in ("sim_cpu_tp2", "sim_cpu_tp3"):
        lane = load(name)
        cmd = render_rank(lane, {"rank": 0, "host_ip": "192.0.2.10", "master_addr": "192.0.2.10",
                                 "kernel_fix_mounts": [{"host": "/f", "container": f["container_path"], "mode": "ro"}
                                                       for f in lane["fix_files"]]})["command"]
        assert cmd[cmd.index("--tool-call-parser") + 1] == "glm47"
        assert cmd[cmd.index("--reasoning-parser") + 1] == "glm45"
        assert "--enable-auto-tool-choice" in cmd
        assert lane["health"]["tool_smoke"] is True and lane["health"]["tool_smoke_judge"] == "wellformed"
        assert "corruption_probe" not in lane["health"]  # random weights emit U+FFFD by themselves
