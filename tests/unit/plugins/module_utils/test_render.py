"""Renderer rules (module_utils/render.py): per-host values, hash scope, group comparison, KV policy,
and the errors a bad input gets (the padding guard lives in tp_pad)."""
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import deep_merge
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import (
    RenderError,
    group_errors,
    hf_overrides,
    kv_cache_bytes,
    kv_pin,
    kv_pin_warning,
    render_rank,
    run_argv,
    suggested_kv_bytes,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")


def lane(name, overrides=None):
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        return deep_merge(yaml.safe_load(f), overrides or {})


def sim_mounts(name="sim_cpu_tp2"):
    """The mounts kernel_fix publishes for a lane's fix files (its layout: /var/lib/dgxspark-vllm/fixes/<name>)."""
    return [{"host": "/var/lib/dgxspark-vllm/fixes/" + f["name"], "container": f["container_path"], "mode": "ro"}
            for f in lane(name).get("fix_files") or []]


def sim_host(rank, ip=None, **kw):
    host = {"rank": rank, "host_ip": ip or "198.18.11.1%d" % rank, "master_addr": "198.18.11.10",
            "fabric_env": {"GLOO_SOCKET_IFNAME": "enp1s0f1np1"}, "kernel_fix_mounts": sim_mounts()}
    host.update(kw)
    return host


def read(*parts):
    with open(os.path.join(FIX, *parts)) as f:
        return f.read()


# --- KV policy (catalogue kv_pin_no_activation_reserve; docs/memory-plan.md) ---------------------------------------

def test_kv_cache_bytes_reproduces_the_tp3_recipe():
    data = yaml.safe_load(read("kv-sizing", "tp3-kv-cache-memory-formula.yaml"))
    i = data["input"]
    assert kv_cache_bytes(i["max_model_len"], i["target_concurrency"], i["bytes_per_token_per_rank"]) \
        == data["expected"]["product"] == 11525160960


@pytest.mark.parametrize("args,message", [
    ((0, 2.5, 8793), "kv_cache_bytes: max_model_len must be positive, got 0"),
    ((524288, "2.5", 8793), "kv_cache_bytes: concurrency must be a number, got '2.5'"),
    ((524288, 2.5, True), "kv_cache_bytes: bytes_per_token_per_rank must be a number, got True"),
])
def test_kv_cache_bytes_rejects_bad_inputs(args, message):
    with pytest.raises(RenderError) as e:
        kv_cache_bytes(*args)
    assert str(e.value) == message


def test_profiler_lane_passes_no_pin_and_pin_lane_passes_bytes():
    sim = render_rank(lane("sim_cpu_tp2"), sim_host(0))
    assert not any(a.startswith("--kv-cache-memory") for a in sim["command"]) and sim["kv_cache_bytes"] is None
    t2 = lane("tp2_dflash2")
    assert kv_pin(t2) == 8589934592
    formula = lane("tp3_mtp", {"serve": {"kv_policy": {"bytes": None}}})
    assert kv_pin(formula) == 11525160960  # falls back to the formula inputs the lane documents


def test_pin_above_vllms_suggestion_warns():
    log = read("kv-sizing", "f20-kv-suggestion-illustrative.log")
    assert suggested_kv_bytes(log) == 6442450944
    assert kv_pin_warning(8053063680, log) == (
        "KV pin 8053063680 bytes (7.50 GiB) exceeds the 6442450944 bytes (6.00 GiB) vLLM suggests in its startup "
        "log; a pin above it drops the activation reserve and the first long prompt can kill the engine (catalogue "
        "kv_pin_no_activation_reserve; docs/memory-plan.md). Lower serve.kv_policy.bytes to at most 6442450944.")
    assert kv_pin_warning(6442450944, log) is None


def test_suggestion_is_read_from_a_real_gb10_startup_line():
    # the real line offers two values; the first one is the 'fit into requested memory' one
    assert suggested_kv_bytes(read("kv-sizing", "gb10-single-node-startup.log")) == 52830620611


# --- per-host values and the spec hash ----------------------------------------------------------

def test_head_gets_api_args_and_workers_get_headless_on_the_sim_lane():
    the_lane = lane("sim_cpu_tp3")
    head, worker = render_rank(the_lane, sim_host(0)), render_rank(the_lane, sim_host(2))
    assert head["command"][:2] == ["serve", "/models/tiny-glm"]
    assert "--port" in head["command"] and "--host" in head["command"] and "--headless" not in head["command"]
    assert "--port" not in worker["command"] and worker["command"][-1] == "--headless"
    assert worker["command"][worker["command"].index("--node-rank") + 1] == "2"
    assert head["spec_hash"] == worker["spec_hash"]
    assert head["env"]["VLLM_HOST_IP"] == "198.18.11.10" and worker["env"]["VLLM_HOST_IP"] == "198.18.11.12"


def test_no_gpu_flags_without_container_gpus():
    the_lane = lane("sim_cpu_tp2")
    entrypoint = the_lane["container"].get("entrypoint") or []
    sim = render_rank(the_lane, sim_host(0))
    assert sim["docker_argv"] == ["docker", "run", "-d", "--name", "vllm_rank", "--restart", "no",
                                  "--network", "host", "--ipc", "host", "--shm-size", "1g"] + (
        ["--entrypoint", entrypoint[0]] if entrypoint else [])


def test_a_real_difference_changes_the_hash_and_is_named_with_hosts():
    the_lane = lane("sim_cpu_tp2")
    a = render_rank(the_lane, sim_host(0))
    b = render_rank(lane("sim_cpu_tp2", {"container": {"env": {"HF_HUB_OFFLINE": "0"}}}), sim_host(1))
    assert a["spec_hash"] != b["spec_hash"]
    assert group_errors({"spark-sim-0": a, "spark-sim-1": b}) == [
        "ranks differ in env.HF_HUB_OFFLINE: spark-sim-0=1; spark-sim-1=0"]


def test_per_host_nccl_device_names_do_not_split_the_group():
    the_lane = lane("tp2_dflash2")
    fix = [{"host": "/opt/fix/k.py", "container": the_lane["fix_files"][0]["container_path"], "mode": "ro"}]
    a = render_rank(the_lane, {"rank": 0, "host_ip": "10.0.0.1", "master_addr": "10.0.0.1", "kernel_fix_mounts": fix,
                               "fabric_env": {"NCCL_IB_HCA": "rocep1s0f0", "NCCL_IB_GID_INDEX": "3"}})
    b = render_rank(the_lane, {"rank": 1, "host_ip": "10.0.0.2", "master_addr": "10.0.0.1", "kernel_fix_mounts": fix,
                               "fabric_env": {"NCCL_IB_HCA": "roceP2p1s0f1", "NCCL_IB_GID_INDEX": "5"}})
    assert group_errors({"a": a, "b": b}) == []
    c = render_rank(the_lane, {"rank": 1, "host_ip": "10.0.0.2", "master_addr": "10.0.0.9", "kernel_fix_mounts": fix,
                               "fabric_env": {}})
    errors = group_errors({"a": a, "c": c})
    assert len(errors) == 1 and errors[0].startswith("ranks differ in command: a=")


def test_run_argv_puts_mounts_env_labels_then_image_and_command():
    spec = render_rank(lane("sim_cpu_tp3"), sim_host(1))
    argv = run_argv(spec)
    image_at = argv.index("dgxspark-sim/vllm-cpu:0.32.0")
    assert argv[image_at + 1:] == spec["command"]
    assert "-v" in argv and "/var/tmp/models/tiny-glm:/models/tiny-glm:ro" in argv
    assert "VLLM_HOST_IP=198.18.11.11" in argv
    assert argv[argv.index("--entrypoint") + 1] == "vllm"


def test_cache_dir_fact_moves_the_cache_mounts():
    spec = render_rank(lane("tp4_dflash2_1m"), {
        "rank": 0, "host_ip": "10.0.0.1", "master_addr": "10.0.0.1", "cache_dir": "/data/cache",
        "kernel_fix_mounts": [{"host": "/f", "container": lane("tp4_dflash2_1m")["fix_files"][0]["container_path"]}]})
    assert {"host": "/data/cache", "container": "/cache", "mode": "rw"} in spec["mounts"]


# --- refusals -----------------------------------------------------------------------------------

@pytest.mark.parametrize("host,message", [
    ({"rank": "1"}, "rank must be an integer (vllm_rank), got '1'"),
    ({"rank": 3}, "rank 3 is outside 0..1 for tensor-parallel size 2"),
    ({"host_ip": ""}, "host_ip is not set (fact rdma_fabric_host_ip); run the rdma_fabric role (it is tagged "
                      "vllm_ranks too)"),
    ({"tensor_parallel_size": 3}, "tensor-parallel size 3 of this host differs from the lane's 2"),
    ({"kernel_fix_mounts": sim_mounts() + [{"host": "/x", "container": "/models/tiny-glm"}]},
     "two mounts target /models/tiny-glm (/var/tmp/models/tiny-glm and /x); keep one (lane container.mounts or "
     "kernel_fix)"),
])
def test_bad_host_facts_are_refused(host, message):
    facts = sim_host(0)
    facts.update(host)
    with pytest.raises(RenderError) as e:
        render_rank(lane("sim_cpu_tp2"), facts)
    assert str(e.value) == message


def test_fix_files_need_their_mounts():
    with pytest.raises(RenderError) as e:
        render_rank(lane("tp2_dflash2"), {"rank": 0, "host_ip": "a", "master_addr": "a", "kernel_fix_mounts": None})
    assert str(e.value) == ("the lane needs fix files (sparse_attn_indexer_kpool) but the kernel_fix_mounts fact is "
                            "not set on this host; run the kernel_fix role first (site.yml, or add --tags kernel_fix)")
    with pytest.raises(RenderError) as e:
        render_rank(lane("tp2_dflash2"), {"rank": 0, "host_ip": "a", "master_addr": "a", "kernel_fix_mounts": []})
    assert str(e.value) == ("kernel_fix_mounts has no mount for the lane's fix files sparse_attn_indexer_kpool; "
                            "re-run the kernel_fix role")


# --- padding (catalogue drafter_heads; docs/tp-padding.md) ----------------------------------------------------------

def test_hf_overrides_mirror_text_config_keys_and_skip_deeper_ones():
    assert hf_overrides({"num_attention_heads": 6}) == {"num_attention_heads": 6}
    assert hf_overrides({"text_config.linear_attn_config.num_heads": 66}) == {}
