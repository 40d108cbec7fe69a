"""Malformed `vllm_lane_overrides` are refused by playbooks/validate.yml before any node is touched.

All cases in one ansible-playbook run, one host per case (each host fails with its own message); rules live in plugins/module_utils/lane.py (LANE_SCHEMA for
types/ranges/unknown keys, _semantic_errors for rules across keys). The expected text is the
message the operator reads, so a reworded or lost rule fails here.
"""
import pytest

from .conftest import assert_batched, assert_refused_untouched, host_messages, host_name, run_playbook, write_case_inventory

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
    ("image-unknown-key", CPU2, {"image": {"tag": "latest"}}, "image.tag: unknown key (known: build, cuda_version, distribution,"),
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
    # speculative decoding across keys (docs/lanes.md)
    ("dflash2-k8", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": 8}}},
     "serve.speculative_config.num_speculative_tokens: 8 is above 7; the DFlash2 drafter's block_size 8 must "
     "equal 1 + k (docs/lanes.md). Use k <= 7."),
    ("dflash-without-drafter", DF2, {"drafter": None},
     "serve.speculative_config: method dflash needs a drafter (lane key 'drafter')"),
    ("dflash-model-not-drafter-mount", DF2, {"serve": {"speculative_config": {"model": "/models/other-draft"}}},
     "serve.speculative_config.model: '/models/other-draft' is not the drafter's container_path "
     "'/models/dflash2-draft'; the drafter is mounted there"),
    ("mtp-on-no-mtp-checkpoint", MTP2, {"checkpoint": {"guard_mode": "no_mtp"}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is not quantized (guard_mode no_mtp, "
     "docs/lanes.md nvidia checkpoint); use a dflash lane"),
    ("speculative-config-list", CPU2, {"serve": {"speculative_config": ["dflash"]}},
     "serve.speculative_config: expected dict or null, got list (['dflash'])"),
    ("mtp-on-nvidia-checkpoint", DF2,
     {"drafter": None, "serve": {"speculative_config": {"method": "mtp", "model": None, "num_speculative_tokens": 4}}},
     "serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized (checkpoint.repo_id "
     "'nvidia/GLM-5.3-Flash-NVFP4', guard_mode dflash2; docs/weights.md, the nvidia checkpoint); use method "
     "dflash with a drafter (as lane tp2_dflash2 does) or a checkpoint whose MTP head is quantized (lane tp2_mtp)"),
    ("spec-k-as-string", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": "7"}}},
     "serve.speculative_config.num_speculative_tokens: expected int, got string ('7'); k, the tokens drafted per "
     "step, must be an int >= 1 (docs/lanes.md): the mtp lanes use 4, dflash takes 1..7 (the DFlash2 "
     "drafter's block_size 8 = 1 + k); set an unquoted int, e.g. num_speculative_tokens: 7"),
    ("dflash-k-zero", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": 0}}},
     "serve.speculative_config.num_speculative_tokens: 0 is below the minimum 1; k, the tokens drafted per step, "
     "must be an int >= 1 (docs/lanes.md)"),
    ("spec-method-unknown", MTP2, {"serve": {"speculative_config": {"method": "eagle9"}}},
     "serve.speculative_config.method: 'eagle9' is not one of mtp, dflash; docs/lanes.md knows mtp (the "
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
    # kv_policy (docs/memory-plan.md)
    ("kv-mode-unknown", CPU2, {"serve": {"kv_policy": {"mode": "auto"}}},
     "serve.kv_policy.mode: 'auto' is not one of profiler, pin"),
    ("kv-pin-without-bytes", CPU2, {"serve": {"kv_policy": {"mode": "pin"}}},
     "serve.kv_policy.bytes: required when mode is 'pin'"),
    ("kv-profiler-with-bytes", DF2, {"serve": {"kv_policy": {"mode": "profiler"}}},
     "serve.kv_policy.bytes: set but mode is 'profiler'; use mode 'pin' to pass --kv-cache-memory, or drop bytes "
     "(docs/memory-plan.md)"),
    ("kv-flag-unknown", DF2, {"serve": {"kv_policy": {"flag": "--kv-cache-bytes"}}},
     "serve.kv_policy.flag: '--kv-cache-bytes' is not one of --kv-cache-memory, --kv-cache-memory-bytes"),
    ("kv-bytes-negative", DF2, {"serve": {"kv_policy": {"bytes": -1}}}, "serve.kv_policy.bytes: -1 is below the minimum 1"),
    ("kv-pin-above-node-memory", DF2, {"serve": {"kv_policy": {"bytes": 200 * GIB}}},
     "serve.kv_policy.bytes: 214748364800 (200 GiB) is not below the node memory the lane requires "
     "(requirements.mem_total_gib_min 110 GiB); a KV pin per rank must leave room for the weights, activations and "
     "the OS (docs/memory-plan.md). Pin fewer bytes (the spark lanes pin 4-24 GiB, 8 GiB = 8589934592) or correct "
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
    # padding (catalogue drafter_heads)
    ("padding-target-not-divisible", CPU2, {"padding": {"config_targets": {"num_attention_heads": 7}}},
     "padding.config_targets.num_attention_heads: 7 does not divide by tensor_parallel_size 2; pad to a multiple "
     "of it (catalogue drafter_heads)"),
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


# Classes of issue 19: one schema (plugins/module_utils/lane.py LANE_SCHEMA, jsonschema) and its cross-key rules.
MANAGED = "which the renderer sets from the lane's own keys (docs/lanes.md); set the lane key instead"
SCHEMA_CASES = [
    # kv-cache dtype: the values vLLM's --kv-cache-dtype accepts
    ("kv-dtype-unknown", "kv-dtype", CPU2, {"serve": {"kv_cache_dtype": "int4"}},
     "serve.kv_cache_dtype: 'int4' is not one of auto, bfloat16, fp8, fp8_e4m3"),
    ("kv-dtype-case", "kv-dtype", CPU2, {"serve": {"kv_cache_dtype": "FP8"}},
     "serve.kv_cache_dtype: 'FP8' is not one of auto"),
    ("kv-dtype-int", "kv-dtype", CPU2, {"serve": {"kv_cache_dtype": 8}},
     "serve.kv_cache_dtype: expected str or null, got int (8)"),
    # max_model_len range
    ("max-model-len-1e12", "max-model-len", CPU2, {"serve": {"max_model_len": 10 ** 12}},
     "serve.max_model_len: 1000000000000 is above the maximum 1048576; tokens per request; at most the "
     "checkpoint's max_position_embeddings 1048576"),
    ("max-model-len-negative", "max-model-len", CPU2, {"serve": {"max_model_len": -512}},
     "serve.max_model_len: -512 is below the minimum 1"),
    ("max-model-len-float", "max-model-len", CPU2, {"serve": {"max_model_len": 512.5}},
     "serve.max_model_len: expected int, got float (512.5)"),
    ("max-model-len-string", "max-model-len", CPU2, {"serve": {"max_model_len": "32k"}},
     "serve.max_model_len: expected int, got string ('32k')"),
    # host and container paths: absolute, no ':' and no whitespace
    ("host-path-relative", "path", CPU2, {"checkpoint": {"host_path": "models/tiny-glm"}},
     "checkpoint.host_path: 'models/tiny-glm' is not an absolute path of letters, digits and _ . @ + ~ -"),
    ("host-path-colon", "path", CPU2, {"checkpoint": {"host_path": "/var/tmp/m:/etc"}},
     "checkpoint.host_path: '/var/tmp/m:/etc' is not an absolute path of letters, digits and _ . @ + ~ - (no spaces, "
     "quotes, '%', '$', ':', ',' or '=') (kind abs_path); write an absolute path such as /var/lib/dgxspark-vllm; "
     "host_path: an absolute path without ':' or whitespace (docker -v reads ':' as a field separator)"),
    ("host-path-space", "path", CPU2, {"checkpoint": {"host_path": "/var/tmp/my models"}},
     "checkpoint.host_path: '/var/tmp/my models' is not an absolute path of letters, digits and _ . @ + ~ -"),
    ("host-path-dotdot", "path", CPU2, {"checkpoint": {"host_path": "/var/tmp/../../etc"}},
     "checkpoint.host_path: '/var/tmp/../../etc' holds a '.' or '..' segment"),
    ("mount-host-named-volume", "path", CPU2, {"container": {"mounts": [{"host": "vllmcache", "container": "/c"}]}},
     "container.mounts[0].host: 'vllmcache' is not an absolute path of letters, digits and _ . @ + ~ -"),
    ("mount-container-colon", "path", CPU2,
     {"container": {"mounts": [{"host": "/var/tmp/c", "container": "/c:ro,z"}]}},
     "container.mounts[0].container: '/c:ro,z' is not an absolute path of letters, digits and _ . @ + ~ -"),
    ("cache-dir-relative", "path", CPU2, {"container": {"cache_dir": "cache"}},
     "container.cache_dir: 'cache' is not an absolute path of letters, digits and _ . @ + ~ -"),
    ("chat-template-relative", "path", CPU2, {"serve": {"chat_template": "chat.jinja"}},
     "serve.chat_template: 'chat.jinja' is not an absolute path of letters, digits and _ . @ + ~ -"),
    # names that become container, file or image names
    ("container-name-slash", "name", CPU2, {"container": {"name": "vllm/rank"}},
     "container.name: 'vllm/rank' is not a Docker container name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 128) "
     "(kind container_name); use a name like vllm_rank; a container name"),
    ("container-name-shell", "name", CPU2, {"container": {"name": "x;rm -rf /"}}, "container.name: 'x;rm -rf /' is not a Docker container name"),
    ("container-name-dash-first", "name", CPU2, {"container": {"name": "-v"}}, "container.name: '-v' is not a Docker container name"),
    ("fix-file-name-path", "name", CPU2, {"fix_files": [{"name": "../x.py", "src": "files/x.py", "sha256": "",
                                                         "container_path": "/x.py"}]},
     "fix_files[0].name: '../x.py' is not a name of letters, digits and _ . - (starting with a letter or digit, at "
     "most 128; no '/') (kind item_name); e.g. sparse_attn_indexer_kpool or glm53-v12; it names the fix file"),
    ("build-stage-name-subst", "name", CPU2, {"image": {"build": {"stages": [
        {"name": "$(id)", "dockerfile": "d", "tag": "dgxspark-sim/vllm-cpu:0.32.0"}]}}},
     "image.build.stages[0].name: '$(id)' is not a name of letters, digits and _ . - (starting with a letter or "
     "digit, at most 128; no '/') (kind item_name)"),
    ("image-ref-space", "name", CPU2, {"image": {"reference": "vllm cpu:1"}}, "image.reference: 'vllm cpu:1' is not an image reference"),
    ("image-ref-uppercase-path", "name", CPU2, {"image": {"reference": "Dgx/Vllm:1"}},
     "image.reference: 'Dgx/Vllm:1' is not an image reference"),
    ("served-name-space", "name", CPU2, {"checkpoint": {"served_model_name": "tiny glm"}},
     "checkpoint.served_model_name: 'tiny glm' is not a served model name (letters, digits and _ . / -, starting "
     "with a letter or digit, at most 128) (kind model_name); e.g. glm-5.3-flash"),
    # memory sizes need a unit
    ("shm-size-no-unit", "mem-size", CPU2, {"container": {"shm_size": "1073741824"}},
     "container.shm_size: '1073741824' is not a size with a unit (e.g. 32g; a bare number is bytes to docker) "
     "(kind size); write e.g. 32g; docker --shm-size"),
    ("shm-size-int", "mem-size", CPU2, {"container": {"shm_size": 32}}, "container.shm_size: expected str, got int (32)"),
    ("memory-no-unit", "mem-size", CPU2, {"container": {"memory": "112"}}, "container.memory: '112' is not a size with a unit"),
    ("memory-word", "mem-size", CPU2, {"container": {"memory": "lots"}}, "container.memory: 'lots' is not a size with a unit"),
    # docker flags, package pins and fix sources: each leaf by its kind (plugins/module_utils/kinds.py)
    ("expected-packages-key", "lane-kind", CPU2, {"image": {"expected_packages": {"torch 2": "2.13.0"}}},
     "image.expected_packages: key 'torch 2' is not a Python distribution name (letters, digits and _ . -, starting "
     "and ending with a letter or digit) (kind package_name); e.g. nvidia-nccl-cu13"),
    ("cuda-version-major-only", "lane-kind", CPU2, {"image": {"cuda_version": "13"}},
     "image.cuda_version: '13' is not a CUDA version X.Y or X.Y.Z (ASCII digits) (kind cuda_version); e.g. 13.0"),
    ("cap-add-all", "lane-kind", CPU2, {"container": {"cap_add": ["ALL"]}},
     "container.cap_add[0]: 'ALL' is not a Linux capability name (capabilities(7), upper case, CAP_ optional; ALL is "
     "refused) (kind capability); write e.g. IPC_LOCK"),
    ("ulimit-soft-above-hard", "lane-kind", CPU2, {"container": {"ulimits": ["nofile=4096:1024"]}},
     "container.ulimits[0]: 'nofile=4096:1024' has a soft limit above its hard limit (kind ulimit)"),
    ("gpus-device-list", "lane-kind", CPU2, {"container": {"gpus": "device=0,1"}},
     "container.gpus: 'device=0,1' is not a docker --gpus value (all, a count, or device=<index>) (kind docker_gpus)"),
    ("entrypoint-shell-line", "lane-kind", CPU2, {"container": {"entrypoint": ["sh -c id"]}},
     "container.entrypoint[0]: 'sh -c id' is not one command-line word"),
    ("device-dotdot", "lane-kind", CPU2, {"container": {"devices": ["/dev/../etc/shadow"]}},
     "container.devices[0]: '/dev/../etc/shadow' holds a '.' or '..' segment or '//' (kind device)"),
    ("fix-src-subst", "lane-kind", CPU2, {"fix_files": [{"name": "x", "src": "$(id)", "sha256": "",
                                                         "container_path": "/x.py"}]},
     "fix_files[0].src: '$(id)' is not a controller path"),
    # ports in range and distinct
    ("api-port-zero", "port", CPU2, {"serve": {"api_port": 0}}, "serve.api_port: 0 is below the minimum 1"),
    ("master-port-string", "port", CPU2, {"serve": {"master_port": "29501"}},
     "serve.master_port: expected int, got string ('29501')"),
    ("master-port-above", "port", CPU2, {"serve": {"master_port": 65536}},
     "serve.master_port: 65536 is above the maximum 65535"),
    ("ports-equal-29501", "port", CPU2, {"serve": {"api_port": 29501}},
     "serve.master_port: equals serve.api_port (29501); the rendezvous needs its own port"),
    # speculative config per method
    ("mtp-k-100", "speculative", MTP2, {"serve": {"speculative_config": {"num_speculative_tokens": 100}}},
     "serve.speculative_config.num_speculative_tokens: 100 is above the maximum 7; mtp runs the checkpoint's single "
     "MTP layer k times; the lanes ship k=4 and runs used 2..4, acceptance falls with every position "
     "(docs/lanes.md). Set num_speculative_tokens in 1..7"),
    ("mtp-k-8", "speculative", MTP2, {"serve": {"speculative_config": {"num_speculative_tokens": 8}}},
     "serve.speculative_config.num_speculative_tokens: 8 is above the maximum 7; mtp runs"),
    ("mtp-with-drafter-model", "speculative", MTP2, {"serve": {"speculative_config": {"model": "/models/x"}}},
     "serve.speculative_config.model: expected null, got string ('/models/x'); mtp drafts with the checkpoint's "
     "own head; set model: null"),
    ("dflash-k-100", "speculative", DF2, {"serve": {"speculative_config": {"num_speculative_tokens": 100}}},
     "serve.speculative_config.num_speculative_tokens: 100 is above 7"),
    ("spec-method-missing", "speculative", MTP2, {"serve": {"speculative_config": {"method": None}}},
     "serve.speculative_config.method: expected str, got null (None)"),
    # env values
    ("env-null", "env", CPU2, {"container": {"env": {"HF_HUB_OFFLINE": None}}},
     "container.env.HF_HUB_OFFLINE: expected str or int or float, got null (None); write the value as a "
     "string, e.g. \"1\" (null would reach the container as 'None', a bool as 'True')"),
    ("env-bool", "env", CPU2, {"container": {"env": {"TORCH_COMPILE_DISABLE": True}}},
     "container.env.TORCH_COMPILE_DISABLE: expected str or int or float, got bool (True)"),
    ("env-list", "env", CPU2, {"container": {"env": {"X": ["a"]}}}, "container.env.X: expected str or int or float, got list"),
    ("env-name-dash", "env", CPU2, {"container": {"env": {"MY-VAR": "1"}}}, "container.env: key 'MY-VAR' is not an environment variable name"),
    # extra_args never repeat a managed flag
    ("extra-max-model-len", "extra-args", CPU2, {"serve": {"extra_args": ["--max-model-len", "4096"]}},
     "serve.extra_args[0]: '--max-model-len' repeats --max-model-len, " + MANAGED),
    ("extra-underscore-equals", "extra-args", CPU2, {"serve": {"extra_args": ["--max_model_len=4096"]}},
     "serve.extra_args[0]: '--max_model_len=4096' repeats --max-model-len"),
    ("extra-tp-alias", "extra-args", CPU2, {"serve": {"extra_args": ["-tp", "4"]}}, "serve.extra_args[0]: '-tp' repeats -tp"),
    ("extra-no-enforce-eager", "extra-args", CPU2, {"serve": {"extra_args": ["--no-enforce-eager"]}},
     "serve.extra_args[0]: '--no-enforce-eager' repeats --enforce-eager"),
    ("extra-master-port", "extra-args", CPU2, {"serve": {"extra_args": ["--swap-space", "4", "--master-port=1"]}},
     "serve.extra_args[2]: '--master-port=1' repeats --master-port"),
    ("extra-api-key", "extra-args", CPU2, {"serve": {"extra_args": ["--api-key", "sk"]}},
     "serve.extra_args[0]: '--api-key' repeats --api-key"),
    # chat template under a mounted path
    ("chat-template-unmounted", "chat-template", CPU2, {"serve": {"chat_template": "/templates/chat.jinja"}},
     "serve.chat_template: '/templates/chat.jinja' is under no directory the container mounts (/models/tiny-glm, "
     "/cache); put the template in the checkpoint directory (/models/tiny-glm/...) or add a container.mounts entry "
     "for it"),
    ("chat-template-sibling-prefix", "chat-template", CPU2, {"serve": {"chat_template": "/models/tiny-glm2/t.jinja"}},
     "serve.chat_template: '/models/tiny-glm2/t.jinja' is under no directory the container mounts"),
    ("chat-template-drafter-gone", "chat-template", DF2, {"drafter": None, "serve": {
        "speculative_config": None, "chat_template": "/models/dflash2-draft/t.jinja"}},
     "serve.chat_template: '/models/dflash2-draft/t.jinja' is under no directory the container mounts"),
    # NVFP4 KV cache with DFlash2 at TP2 (TP2 report status table)
    ("nvfp4-kv-dflash2-tp2", "nvfp4-kv-dflash2-tp2", DF2, {"serve": {"kv_cache_dtype": "nvfp4_ds_mla"}},
     "serve.kv_cache_dtype: nvfp4_ds_mla with speculative method dflash at tensor_parallel_size 2 kills the rank-0 "
     "worker on any prompt that needs chunked prefill (> ~3K tokens; TP2 report status table, docs/lanes.md "
     "KV-dtype lanes). Use kv_cache_dtype fp8_e4m3 (every lane ships it), or set allow_nvfp4_kv_dflash2_tp2: true "
     "to run it anyway"),
    ("nvfp4-kv-dflash2-tp2-allow-false", "nvfp4-kv-dflash2-tp2", DF2,
     {"allow_nvfp4_kv_dflash2_tp2": False, "serve": {"kv_cache_dtype": "nvfp4_ds_mla"}},
     "serve.kv_cache_dtype: nvfp4_ds_mla with speculative method dflash at tensor_parallel_size 2 kills"),
    ("nvfp4-allow-string", "nvfp4-kv-dflash2-tp2", DF2,
     {"allow_nvfp4_kv_dflash2_tp2": "yes", "serve": {"kv_cache_dtype": "nvfp4_ds_mla"}},
     "allow_nvfp4_kv_dflash2_tp2: expected bool, got string ('yes')"),
]
ALL_CASES = [(c[0], "earlier", c[1], c[2], c[3]) for c in CASES] + SCHEMA_CASES


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Every case in one ansible-playbook run: one host per case, each with its own lane and overrides."""
    assert_batched()
    tmp = tmp_path_factory.mktemp("lane-overrides")
    cases = dict((c[0], {"vllm_lane": c[2][0], "vllm_lane_overrides": c[3]}) for c in ALL_CASES)
    inv = write_case_inventory(tmp, cases, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "playbooks/validate.yml")
    return rc, out, host_messages(out)


@pytest.mark.parametrize("case,klass,lane_hosts,overrides,expected", ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_bad_override_is_refused(batch, case, klass, lane_hosts, overrides, expected):
    rc, out, messages = batch
    assert_refused_untouched(rc, out, expected)
    mine = messages.get(host_name(case), "")
    assert "host %s: the lane is invalid (fix the lane file or vllm_lane_overrides)" % host_name(case) in mine, mine
    assert expected in mine, mine


def test_allowed_nvfp4_kv_with_dflash2_at_tp2_and_the_other_sizes_pass(tmp_path):
    """The lane flag lets the known-broken combination through; at TP3/TP4 it is not refused at all."""
    cases = {
        "allowed-tp2": {"vllm_lane": "tp2_dflash2", "vllm_lane_overrides": {
            "allow_nvfp4_kv_dflash2_tp2": True, "serve": {"kv_cache_dtype": "nvfp4_ds_mla"}}},
        "tp3-dflash2": {"vllm_lane": "tp3_dflash2", "vllm_lane_overrides": {"serve": {"kv_cache_dtype": "nvfp4_ds_mla"}}},
    }
    inv = write_case_inventory(tmp_path, cases, {"vllm_lane": "tp2_dflash2"})
    rc, out = run_playbook(inv, "playbooks/validate.yml")
    # Both lanes pass the schema; the run then stops at the layout (two lanes in one group), on the controller.
    assert_refused_untouched(rc, out, "use another vllm_lane than")
    assert "the lane is invalid" not in out, out
