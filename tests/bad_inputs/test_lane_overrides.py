"""Malformed `vllm_lane_overrides` are refused by playbooks/validate.yml before any node is touched.

One ansible-playbook run per case; rules live in plugins/module_utils/lane.py (LANE_SCHEMA for
types/ranges/unknown keys, _semantic_errors for rules across keys). The expected text is the
message the operator reads, so a reworded or lost rule fails here.
"""
import pytest

from .conftest import assert_refused_untouched, run_playbook, write_inventory

GIB = 1024 ** 3
CPU2 = ("sim_cpu_tp2", 2)
CPU3 = ("sim_cpu_tp3", 3)
DF2 = ("tp2_dflash2", 2)  # nvidia checkpoint + DFlash2 k=7, 8 GiB KV pin
MTP2 = ("tp2_mtp", 2)

# (id, (lane, hosts), overrides, expected message fragment)
CASES = [
    # image
    ("image-reference-int", CPU2, {"image": {"reference": 5}}, "image.reference: expected str, got int (5)"),
    ("image-distribution-unknown", CPU2, {"image": {"distribution": "torrent"}},
     "image.distribution: 'torrent' is not one of pull, registry, stream, build"),
    ("image-digest-pin-prefix-only", CPU2, {"image": {"expected_digest": "4def0ef644cb2e98"}},
     "image.expected_digest: '4def0ef644cb2e98' is not 'sha256:' + 64 lowercase hex"),
    ("image-build-without-stages", CPU2, {"image": {"distribution": "build"}},
     "image.build: distribution build needs image.build.stages"),
    ("image-build-chain-ends-elsewhere", CPU2,
     {"image": {"distribution": "build", "build": {"stages": [
         {"name": "v1", "dockerfile": "docker/Dockerfile.v1", "tag": "dgxspark-sim/vllm-cpu:v1"}]}}},
     "image.build.stages: the last stage 'v1' produces 'dgxspark-sim/vllm-cpu:v1', not image.reference "
     "'dgxspark-sim/vllm-cpu:0.32.0'"),
    ("image-build-stage-misspelt-key", CPU2,
     {"image": {"build": {"stages": [{"name": "v1", "dockerfile": "d", "tag": "t", "from": "x"}]}}},
     "image.build.stages[0].from: unknown key (known: build_args, context, dockerfile, name, tag)"),
    ("image-size-negative", CPU2, {"image": {"size_gib": -1}}, "image.size_gib: -1 is below the minimum 0"),
    ("image-fingerprint-file-int", CPU2, {"image": {"fingerprint_files": [1]}},
     "image.fingerprint_files[0]: expected str, got int (1)"),
    ("image-unknown-key", CPU2, {"image": {"tag": "latest"}}, "image.tag: unknown key (known: build, distribution,"),
    # checkpoint / drafter
    ("checkpoint-repo-id-null", CPU2, {"checkpoint": {"repo_id": None}},
     "checkpoint.repo_id: expected str, got null (None)"),
    ("checkpoint-misspelt-key", CPU2, {"checkpoint": {"revison": "main"}}, "checkpoint.revison: unknown key"),
    ("checkpoint-heads-padding-list", CPU2, {"checkpoint": {"heads_padding": [64]}},
     "checkpoint.heads_padding: expected dict or null, got list ([64])"),
    ("heads-padding-unknown-key", CPU2, {"checkpoint": {"heads_padding": {"num_heads": 8}}},
     "checkpoint.heads_padding.num_heads: unknown key (known: num_attention_heads, num_key_value_heads)"),
    ("heads-padding-not-divisible-tp3", CPU3, {"checkpoint": {"heads_padding": {"num_attention_heads": 8}}},
     "checkpoint.heads_padding.num_attention_heads: 8 must be an integer that divides by tensor_parallel_size 3"),
    ("drafter-as-string", DF2, {"drafter": "incoai/GLM-5.3-Flash-DFlash2"},
     "drafter: expected dict or null, got string ('incoai/GLM-5.3-Flash-DFlash2')"),
    ("drafter-container-path-null", DF2, {"drafter": {"container_path": None}},
     "drafter.container_path: expected str, got null (None)"),
    # speculative decoding across keys (operations spec B.5)
    ("dflash2-k8", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": 8}}},
     "serve.speculative_config.num_speculative_tokens: 8 is above 7; the DFlash2 drafter's block_size 8 must "
     "equal 1 + k (operations spec B.5). Use k <= 7."),
    ("dflash-without-drafter", DF2, {"drafter": None},
     "serve.speculative_config: method dflash needs a drafter (lane key 'drafter')"),
    ("dflash-model-not-drafter-mount", DF2, {"serve": {"speculative_config": {"model": "/models/other-draft"}}},
     "serve.speculative_config.model: '/models/other-draft' is not the drafter's container_path "
     "'/models/dflash2-draft'; the drafter is mounted there"),
    ("mtp-on-no-mtp-checkpoint", MTP2, {"checkpoint": {"guard_mode": "no_mtp"}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is not quantized (guard_mode no_mtp, "
     "operations spec B.5 nvidia checkpoint); use a dflash lane"),
    ("speculative-config-list", CPU2, {"serve": {"speculative_config": ["dflash"]}},
     "serve.speculative_config: expected dict or null, got list (['dflash'])"),
    ("mtp-on-nvidia-checkpoint", DF2,
     {"drafter": None, "serve": {"speculative_config": {"method": "mtp", "model": None, "num_speculative_tokens": 4}}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized (checkpoint.repo_id "
     "'nvidia/GLM-5.3-Flash-NVFP4', guard_mode dflash2; operations spec B.5 nvidia checkpoint, G19); use method "
     "dflash with a drafter (as lane tp2_dflash2 does) or a checkpoint whose MTP head is quantized (lane tp2_mtp)"),
    ("spec-k-as-string", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": "7"}}},
     "serve.speculative_config.num_speculative_tokens: expected int, got string ('7'); k, the tokens drafted per "
     "step, must be an int >= 1 (operations spec B.5): the mtp lanes use 4, dflash takes 1..7 (the DFlash2 "
     "drafter's block_size 8 = 1 + k); set an unquoted int, e.g. num_speculative_tokens: 7"),
    ("dflash-k-zero", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": 0}}},
     "serve.speculative_config.num_speculative_tokens: 0 is below the minimum 1; k, the tokens drafted per step, "
     "must be an int >= 1 (operations spec B.5)"),
    ("spec-method-unknown", MTP2, {"serve": {"speculative_config": {"method": "eagle9"}}},
     "serve.speculative_config.method: 'eagle9' is not one of mtp, dflash; operations spec B.5 knows mtp (the "
     "checkpoint's own MTP head) and dflash (the DFlash2 drafter, lane key 'drafter'); set one of them, or "
     "serve.speculative_config: null for no speculative decoding"),
    ("spec-unknown-key", MTP2, {"serve": {"speculative_config": {"num_lookahead": 2}}},
     "serve.speculative_config.num_lookahead: unknown key (known: method, model, num_speculative_tokens)"),
    # container
    ("container-restart-always", CPU2, {"container": {"restart": "always"}},
     "container.restart: 'always' is not one of no"),
    ("container-network-bridge", CPU2, {"container": {"network": "bridge"}},
     "container.network: 'bridge' is not one of host"),
    ("container-mount-mode-rwx", CPU2, {"container": {"mounts": [{"host": "/a", "container": "/b", "mode": "rwx"}]}},
     "container.mounts[0].mode: 'rwx' is not one of ro, rw"),
    ("container-mount-as-string", CPU2, {"container": {"mounts": ["/a:/b"]}},
     "container.mounts[0]: expected dict, got string"),
    ("container-env-list", CPU2, {"container": {"env": ["HF_HUB_OFFLINE=1"]}},
     "container.env: expected dict, got list (['HF_HUB_OFFLINE=1'])"),
    ("gpus-on-cpu-lane", CPU2, {"container": {"gpus": "all"}},
     "container.gpus/devices: GPU or RDMA devices on platform 'cpu'; the simulated fleet has none "
     "(set gpus: null, devices: [])"),
    ("infiniband-on-cpu-lane", CPU2, {"container": {"devices": ["/dev/infiniband:/dev/infiniband"]}},
     "container.gpus/devices: GPU or RDMA devices on platform 'cpu'"),
    # serve
    ("api-port-equals-master-port", CPU2, {"serve": {"master_port": 8000}},
     "serve.master_port: equals serve.api_port (8000); the rendezvous needs its own port"),
    ("api-port-above-65535", CPU2, {"serve": {"api_port": 70000}}, "serve.api_port: 70000 is above the maximum 65535"),
    ("gpu-mem-util-above-max", DF2, {"serve": {"gpu_memory_utilization": 1.2}},
     "serve.gpu_memory_utilization: 1.2 is above the maximum 0.99"),
    ("gpu-mem-util-below-min", DF2, {"serve": {"gpu_memory_utilization": 0.01}},
     "serve.gpu_memory_utilization: 0.01 is below the minimum 0.05"),
    ("max-model-len-zero", CPU2, {"serve": {"max_model_len": 0}}, "serve.max_model_len: 0 is below the minimum 1"),
    ("enforce-eager-string", CPU2, {"serve": {"enforce_eager": "yes"}},
     "serve.enforce_eager: expected bool, got string ('yes')"),
    ("extra-args-string", CPU2, {"serve": {"extra_args": "--foo"}},
     "serve.extra_args: expected list, got string ('--foo')"),
    ("mm-encoder-tp-mode-unknown", CPU2, {"serve": {"mm_encoder_tp_mode": "tensor"}},
     "serve.mm_encoder_tp_mode: 'tensor' is not one of data, weights"),
    # kv_policy (operations spec E.2)
    ("kv-mode-unknown", CPU2, {"serve": {"kv_policy": {"mode": "auto"}}},
     "serve.kv_policy.mode: 'auto' is not one of profiler, pin"),
    ("kv-pin-without-bytes", CPU2, {"serve": {"kv_policy": {"mode": "pin"}}},
     "serve.kv_policy.bytes: required when mode is 'pin'"),
    ("kv-profiler-with-bytes", DF2, {"serve": {"kv_policy": {"mode": "profiler"}}},
     "serve.kv_policy.bytes: set but mode is 'profiler'; use mode 'pin' to pass --kv-cache-memory, or drop bytes "
     "(operations spec E.2)"),
    ("kv-flag-unknown", DF2, {"serve": {"kv_policy": {"flag": "--kv-cache-bytes"}}},
     "serve.kv_policy.flag: '--kv-cache-bytes' is not one of --kv-cache-memory, --kv-cache-memory-bytes"),
    ("kv-bytes-negative", DF2, {"serve": {"kv_policy": {"bytes": -1}}}, "serve.kv_policy.bytes: -1 is below the minimum 1"),
    ("kv-pin-above-node-memory", DF2, {"serve": {"kv_policy": {"bytes": 200 * GIB}}},
     "serve.kv_policy.bytes: 214748364800 (200 GiB) is not below the node memory the lane requires "
     "(requirements.mem_total_gib_min 110 GiB); a KV pin per rank must leave room for the weights, activations and "
     "the OS (operations spec E.2). Pin fewer bytes (the spark lanes pin 4-24 GiB, 8 GiB = 8589934592) or correct "
     "requirements.mem_total_gib_min"),
    # health / requirements
    ("health-timeout-zero", CPU2, {"health": {"ready_timeout_s": 0}}, "health.ready_timeout_s: 0 is below the minimum 1"),
    ("health-tool-smoke-string", CPU2, {"health": {"tool_smoke": "no"}},
     "health.tool_smoke: expected bool, got string ('no')"),
    ("health-unknown-key", CPU2, {"health": {"timeout": 60}}, "health.timeout: unknown key"),
    ("mem-total-negative", CPU2, {"requirements": {"mem_total_gib_min": -1}},
     "requirements.mem_total_gib_min: -1 is below the minimum 0"),
    ("disk-gib-string", CPU2, {"requirements": {"disk_gib": "lots"}},
     "requirements.disk_gib: expected int or float or dict, got string ('lots')"),
    ("swap-required-string", CPU2, {"requirements": {"swap_required": "true"}},
     "requirements.swap_required: expected bool, got string ('true')"),
    # padding (operations spec D.2)
    ("padding-target-not-divisible", CPU2, {"padding": {"config_targets": {"num_attention_heads": 7}}},
     "padding.config_targets.num_attention_heads: 7 does not divide by tensor_parallel_size 2; pad to a multiple "
     "of it (operations spec D.2)"),
    ("padding-target-string", CPU3, {"padding": {"config_targets": {"num_attention_heads": "9"}}},
     "padding.config_targets.num_attention_heads: expected a positive int, got '9'"),
    ("padding-hf-overrides-string", CPU2, {"padding": {"hf_overrides": "yes"}},
     "padding.hf_overrides: expected bool, got string ('yes')"),
    # fix_files
    ("fix-file-without-sha256", CPU2, {"fix_files": [{"name": "x", "src": "files/x.py", "container_path": "/x.py"}]},
     "fix_files[0].sha256: required key missing"),
    ("fix-files-mapping", CPU2, {"fix_files": {"name": "x"}}, "fix_files: expected list, got mapping"),
    # top level
    ("platform-unknown", CPU2, {"platform": "gpu"}, "platform: 'gpu' is not one of spark, cpu"),
    ("tp-size-zero", CPU2, {"tensor_parallel_size": 0}, "tensor_parallel_size: 0 is below the minimum 1"),
    ("name-override", CPU2, {"name": "tp2_custom"}, "name: 'tp2_custom' does not match the lane file name 'sim_cpu_tp2'"),
    ("unknown-top-level-key", CPU2, {"nccl_env": {"NCCL_DEBUG": "INFO"}}, "nccl_env: unknown key"),
    ("nccl-string", CPU2, {"nccl": "IB"}, "nccl: expected dict, got string ('IB')"),
]


def _run(tmp_path, lane_hosts, overrides):
    lane, hosts = lane_hosts
    inv = write_inventory(tmp_path, hosts, {"vllm_lane": lane, "vllm_lane_overrides": overrides})
    return run_playbook(inv, "playbooks/validate.yml")


@pytest.mark.parametrize("case,lane_hosts,overrides,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_override_is_refused(tmp_path, case, lane_hosts, overrides, expected):
    rc, out = _run(tmp_path, lane_hosts, overrides)
    assert_refused_untouched(rc, out, expected)
    assert "the lane is invalid (fix the lane file or vllm_lane_overrides)" in out
