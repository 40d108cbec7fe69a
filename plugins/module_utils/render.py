# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Render one rank's container from a lane and that host's own facts (pure Python).

Sources (docs/lanes.md cites each lane value):
  catalogue ray_placement (mp executor: --nnodes/--node-rank/--master-addr/--master-port, --headless on
  ranks > 0), catalogue worker_orphaned (--restart no), docs/lanes.md (docker flags), docs/lanes.md (mounts), docs/lanes.md (environment), docs/lanes.md (the
  `vllm serve` line and how lanes differ), docs/tp-padding.md (runtime --hf-overrides for TP3), docs/memory-plan.md (KV pin formula),
  catalogue kv_pin_no_activation_reserve (a pin above vLLM's own suggestion drops the activation reserve).

Per-host values (VLLM_HOST_IP, the NCCL/Gloo device names, --node-rank, --headless and the API
arguments when only the head serves) are left out of the spec hash, so the hashes of all ranks of
one group are equal exactly when their image, flags, mounts, environment and arguments agree.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils import memory_plan as _memory_plan

LABEL_PREFIX = "dgxspark.vllm."
HASH_LABEL = LABEL_PREFIX + "spec-hash"

# Environment keys whose value is computed from each host's own facts (docs/lanes.md,
# catalogue nccl_wrong_gid, gloo_no_address): they may differ between ranks of a healthy group.
PER_HOST_ENV = (
    "VLLM_HOST_IP",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "MN_IF_NAME",
    "B12X_ROCE_HCA",
    "B12X_ROCE_GID_INDEX",
)

DEFAULT_KV_FLAG = "--kv-cache-memory"

# API key (vllm_api_key): the head reads it from a root-owned 0600 file bound read-only here, into
# VLLM_API_KEY, then execs vLLM (vllm/entrypoints/serve/middleware/register.py reads that variable when
# --api-key is absent), so neither the argv, the container's Config.Env nor vLLM's "non-default args"
# log line holds it. Only a salted, slow fingerprint of the key enters the spec hash.
API_KEY_CONTAINER_FILE = "/run/secrets/dgxspark-vllm-api-key"
API_KEY_SHELL = "/bin/sh"
# A lane without container.entrypoint relies on the image's ENTRYPOINT, `vllm serve` in vllm/vllm-openai.
API_KEY_DEFAULT_ENTRYPOINT = ["vllm", "serve"]
API_KEY_WRAPPER = (
    'VLLM_API_KEY="$(cat "$DGXSPARK_API_KEY_FILE")" || exit 64; '
    '[ -n "$VLLM_API_KEY" ] || { echo "dgxspark.vllm: the API key file $DGXSPARK_API_KEY_FILE is empty" >&2; exit 64; }; '
    'export VLLM_API_KEY; exec "$@"'
)
_API_KEY_SALT = b"dgxspark.vllm.api-key.v1"
_SUGGESTION_RE = re.compile(r"Replace gpu_memory_utilization config with `?--kv-cache-memory=(\d+)`?")


# Every flag _serve_args can emit, with vLLM's short aliases and --model: lane serve.extra_args must not
# repeat one (vLLM keeps the last value silently, so the lane's own key would be overridden unseen).
MANAGED_FLAGS = (
    "--served-model-name", "--host", "--port", "--trust-remote-code", "--tensor-parallel-size", "-tp",
    "--pipeline-parallel-size", "-pp", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
    "--block-size", "--moe-backend", "--speculative-config", "--kv-cache-dtype", "--kv-cache-memory",
    "--kv-cache-memory-bytes", "--enforce-eager", "--compilation-config", "-O", "--max-num-batched-tokens",
    "--tool-call-parser", "--enable-auto-tool-choice", "--reasoning-parser", "--default-chat-template-kwargs",
    "--chat-template", "--limit-mm-per-prompt", "--hf-overrides", "--mm-encoder-tp-mode",
    "--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless",
    "--model", "--api-key",
)


def managed_flag(arg):
    """The managed flag an extra argument repeats, or None: '--max_model_len=8' -> '--max-model-len'.

    vLLM's parser reads '_' as '-' in flag names and '--no-X' as the negation of a boolean '--X'.
    """
    if not isinstance(arg, str) or not arg.startswith("-"):
        return None
    flag = arg.split("=", 1)[0]
    if flag.startswith("--"):
        flag = "--" + flag[2:].replace("_", "-")
    if flag.startswith("--no-") and "--" + flag[5:] in MANAGED_FLAGS:
        return "--" + flag[5:]
    if flag.startswith("-O") and flag != "-O" and not flag.startswith("--"):
        return "-O"
    return flag if flag in MANAGED_FLAGS else None


def lane_mount_targets(lane):
    """Container directories the lane itself mounts: checkpoint, drafter and container.mounts (docs/lanes.md)."""
    targets = []
    for key in ("checkpoint", "drafter"):
        model = lane.get(key) or {}
        if model.get("container_path"):
            targets.append(model["container_path"])
    for item in (lane.get("container") or {}).get("mounts") or []:
        if isinstance(item, dict) and item.get("container"):
            targets.append(item["container"])
    return targets


def under_mount(path, targets):
    """The mount target that holds path, or None."""
    for target in targets:
        base = target.rstrip("/") or "/"
        if path == base or path.startswith(base.rstrip("/") + "/"):
            return target
    return None


class RenderError(Exception):
    """Bad lane or host facts; the message names the item and the fix."""


def _drop_none(value):
    if isinstance(value, dict):
        return dict((k, _drop_none(v)) for k, v in value.items() if v is not None)
    return value


def _json(value):
    # vLLM parses these flags as JSON; compact separators reproduce the launch lines (docs/lanes.md).
    # A null key is dropped: an inventory override cannot delete a key from a deep-merged lane.
    return json.dumps(_drop_none(value), separators=(",", ":"))


def _num(value):
    """CLI spelling of a number: 0.85 stays '0.85', 6 stays '6'."""
    if isinstance(value, bool):
        raise RenderError("expected a number, got bool %r" % value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def kv_cache_bytes(max_model_len, concurrency, bytes_per_token_per_rank):
    """KV pin per rank in bytes (docs/memory-plan.md); the formula lives in module_utils/memory_plan.py."""
    try:
        return _memory_plan.kv_cache_bytes(max_model_len, concurrency, bytes_per_token_per_rank)
    except _memory_plan.MemoryPlanError as e:
        raise RenderError(str(e))


def api_key_fingerprint(key):
    """A fingerprint of the API key for the spec hash ('' when there is no key); never the key.

    PBKDF2-HMAC-SHA256 with a fixed salt and 200000 rounds: equal keys give equal fingerprints (a changed
    key restarts the group), and the label on the container is no cheap dictionary oracle for a weak key.
    """
    if key is None or key == "":
        return ""
    if not isinstance(key, str):
        raise RenderError("vllm_api_key must be a string, got %s" % type(key).__name__)
    digest = hashlib.pbkdf2_hmac("sha256", key.encode("utf-8"), _API_KEY_SALT, 200000)
    return "pbkdf2-sha256:" + digest.hex()[:32]


def kv_pin(lane):
    """The KV pin in bytes, or None when the profiler sizes the pool (docs/memory-plan.md)."""
    serve = lane.get("serve") or {}
    policy = serve.get("kv_policy") or {"mode": "profiler"}
    if policy.get("mode", "profiler") == "profiler":
        return None
    if policy.get("bytes"):
        return int(policy["bytes"])
    if policy.get("concurrency") and policy.get("bytes_per_token_per_rank"):
        return kv_cache_bytes(serve.get("max_model_len"), policy["concurrency"], policy["bytes_per_token_per_rank"])
    raise RenderError("serve.kv_policy: mode 'pin' needs bytes, or concurrency and bytes_per_token_per_rank")


def suggested_kv_bytes(log_text):
    """The last `--kv-cache-memory=N` vLLM suggests in its startup log (catalogue kv_pin_no_activation_reserve), or None."""
    found = _SUGGESTION_RE.findall(log_text or "")
    return int(found[-1]) if found else None


def kv_pin_warning(pin_bytes, log_text):
    """A warning when a pin exceeds the value vLLM suggests 'to fit into requested memory' (catalogue kv_pin_no_activation_reserve)."""
    suggested = suggested_kv_bytes(log_text)
    if pin_bytes is None or suggested is None or int(pin_bytes) <= suggested:
        return None
    return ("KV pin %d bytes (%.2f GiB) exceeds the %d bytes (%.2f GiB) vLLM suggests in its startup log; a pin "
            "above it drops the activation reserve and the first long prompt can kill the engine (catalogue kv_pin_no_activation_reserve; "
            "docs/memory-plan.md). Lower serve.kv_policy.bytes to at most %d."
            % (int(pin_bytes), int(pin_bytes) / 1024.0 ** 3, suggested, suggested / 1024.0 ** 3, suggested))


def hf_overrides(targets):
    """Runtime --hf-overrides from the lane's padding targets (catalogue drafter_heads, Y3 serve.sh).

    A key directly under text_config is written both at top level and inside text_config; deeper keys
    (e.g. text_config.linear_attn_config.num_heads) exist only on disk; a key without a dot is top level.
    """
    top, text = {}, {}
    for key, value in (targets or {}).items():
        parts = key.split(".")
        if len(parts) == 1:
            top[key] = value
        elif len(parts) == 2 and parts[0] == "text_config":
            top[parts[1]] = value
            text[parts[1]] = value
    if text:
        top["text_config"] = text
    return top


def _mount(item, where):
    if not isinstance(item, dict) or not item.get("host") or not item.get("container"):
        raise RenderError("%s: a mount needs 'host' and 'container', got %r" % (where, item))
    return {"host": item["host"], "container": item["container"], "mode": item.get("mode") or "rw"}


def _mounts(lane, host):
    container = lane["container"]
    ckpt = lane["checkpoint"]
    mounts = [{"host": ckpt["host_path"], "container": ckpt["container_path"], "mode": "ro"}]
    cache_dir = host.get("cache_dir")
    lane_cache = container.get("cache_dir")
    for idx, item in enumerate(container.get("mounts") or []):
        m = _mount(item, "lane container.mounts[%d]" % idx)
        if cache_dir and lane_cache and (m["host"] == lane_cache or m["host"].startswith(lane_cache.rstrip("/") + "/")):
            m["host"] = cache_dir.rstrip("/") + m["host"][len(lane_cache.rstrip("/")):]
        mounts.append(m)
    fix_mounts = host.get("kernel_fix_mounts")
    fix_files = lane.get("fix_files") or []
    if fix_files and fix_mounts is None:
        raise RenderError("the lane needs fix files (%s) but the kernel_fix_mounts fact is not set on this host; "
                          "run the kernel_fix role first (site.yml, or add --tags kernel_fix)"
                          % ", ".join(f["name"] for f in fix_files))
    for idx, item in enumerate(fix_mounts or []):
        mounts.append(_mount(item, "fact kernel_fix_mounts[%d]" % idx))
    covered = set(m["container"] for m in mounts)
    missing = [f["name"] for f in fix_files if f["container_path"] not in covered]
    if missing:
        raise RenderError("kernel_fix_mounts has no mount for the lane's fix files %s; re-run the kernel_fix role"
                          % ", ".join(missing))
    drafter = lane.get("drafter")
    if drafter:
        mounts.append({"host": drafter["host_path"], "container": drafter["container_path"], "mode": "ro"})
    seen = {}
    for m in mounts:
        if m["container"] in seen and seen[m["container"]] != m["host"]:
            raise RenderError("two mounts target %s (%s and %s); keep one (lane container.mounts or kernel_fix)"
                              % (m["container"], seen[m["container"]], m["host"]))
        seen[m["container"]] = m["host"]
    return mounts


def _docker_flags(lane):
    """`docker run` flags in the launchers' order (docs/lanes.md); env, mounts and labels come later."""
    c = lane["container"]
    argv = ["docker", "run"]
    if c.get("gpus"):
        argv += ["--gpus", c["gpus"]]
    argv += ["-d", "--name", c["name"], "--restart", c.get("restart") or "no"]
    if c.get("network"):
        argv += ["--network", c["network"]]
    if c.get("ipc"):
        argv += ["--ipc", c["ipc"]]
    if c.get("shm_size"):
        argv += ["--shm-size", c["shm_size"]]
    for item in c.get("ulimits") or []:
        argv += ["--ulimit", item]
    for item in c.get("cap_add") or []:
        argv += ["--cap-add", item]
    for item in c.get("devices") or []:
        argv += ["--device", item]
    if c.get("memory"):
        # --memory-swap equal to --memory: no swap for the container (docs/lanes.md).
        argv += ["--memory", c["memory"], "--memory-swap", c["memory"]]
    entrypoint = c.get("entrypoint") or []
    if entrypoint:
        argv += ["--entrypoint", entrypoint[0]]
    return argv


def _serve_args(lane, rank, tp, master_addr):
    """The `vllm serve` arguments (after the image), in the T2 launcher's order (docs/lanes.md)."""
    s = lane["serve"]
    ckpt = lane["checkpoint"]
    api_here = rank == 0 or s.get("api_args_on_workers", False)
    args = [ckpt["container_path"]]
    if ckpt.get("served_model_name"):
        args += ["--served-model-name", ckpt["served_model_name"]]
    if api_here:
        if s.get("host"):
            args += ["--host", s["host"]]
        args += ["--port", str(s["api_port"])]
    if s.get("trust_remote_code"):
        args.append("--trust-remote-code")
    args += ["--tensor-parallel-size", str(tp)]
    if s.get("pipeline_parallel_size") is not None:
        args += ["--pipeline-parallel-size", str(s["pipeline_parallel_size"])]
    if s.get("gpu_memory_utilization") is not None:
        args += ["--gpu-memory-utilization", _num(s["gpu_memory_utilization"])]
    args += ["--max-model-len", str(s["max_model_len"])]
    if s.get("max_num_seqs") is not None:
        args += ["--max-num-seqs", str(s["max_num_seqs"])]
    if s.get("block_size") is not None:
        args += ["--block-size", str(s["block_size"])]
    if s.get("moe_backend"):
        args += ["--moe-backend", s["moe_backend"]]
    if s.get("speculative_config"):
        args += ["--speculative-config", _json(s["speculative_config"])]
    if s.get("kv_cache_dtype"):
        args += ["--kv-cache-dtype", s["kv_cache_dtype"]]
    pin = kv_pin(lane)
    if pin is not None:
        args += [(s.get("kv_policy") or {}).get("flag") or DEFAULT_KV_FLAG, str(pin)]
    if s.get("enforce_eager"):
        args.append("--enforce-eager")
    if s.get("compilation_config"):
        args += ["--compilation-config", _json(s["compilation_config"])]
    if s.get("max_num_batched_tokens") is not None:
        args += ["--max-num-batched-tokens", str(s["max_num_batched_tokens"])]
    if s.get("tool_call_parser"):
        args += ["--tool-call-parser", s["tool_call_parser"]]
    if s.get("enable_auto_tool_choice"):
        args.append("--enable-auto-tool-choice")
    if s.get("reasoning_parser"):
        args += ["--reasoning-parser", s["reasoning_parser"]]
    if s.get("default_chat_template_kwargs"):
        args += ["--default-chat-template-kwargs", _json(s["default_chat_template_kwargs"])]
    if s.get("chat_template"):
        args += ["--chat-template", s["chat_template"]]
    if s.get("limit_mm_per_prompt"):
        args += ["--limit-mm-per-prompt", _json(s["limit_mm_per_prompt"])]
    padding = lane.get("padding") or {}
    if padding.get("hf_overrides") and padding.get("config_targets"):
        args += ["--hf-overrides", _json(hf_overrides(padding["config_targets"]))]
    if s.get("mm_encoder_tp_mode"):
        args += ["--mm-encoder-tp-mode", s["mm_encoder_tp_mode"]]
    args += list(s.get("extra_args") or [])
    args += ["--distributed-executor-backend", "mp", "--nnodes", str(tp), "--node-rank", str(rank),
             "--master-addr", master_addr, "--master-port", str(s["master_port"])]
    if rank > 0:
        args.append("--headless")
    return args


def _check_host(lane, host):
    rank = host.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise RenderError("rank must be an integer (vllm_rank), got %r" % (rank,))
    tp = lane["tensor_parallel_size"]
    if host.get("tensor_parallel_size") not in (None, tp):
        raise RenderError("tensor-parallel size %r of this host differs from the lane's %d"
                          % (host.get("tensor_parallel_size"), tp))
    if not 0 <= rank < tp:
        raise RenderError("rank %d is outside 0..%d for tensor-parallel size %d" % (rank, tp - 1, tp))
    for key, fact in (("host_ip", "rdma_fabric_host_ip"), ("master_addr", "rdma_fabric_master_addr")):
        if not host.get(key):
            raise RenderError("%s is not set (fact %s); run the rdma_fabric role (it is tagged vllm_ranks too)"
                              % (key, fact))
    env = host.get("fabric_env") or {}
    if not isinstance(env, dict):
        raise RenderError("rdma_fabric_env must be a mapping, got %r" % (env,))
    return rank, tp


def render_rank(lane, host):
    """Render one rank.

    lane: the resolved lane (vllm_lane_spec). host: {rank, host_ip, master_addr, fabric_env (dict),
    kernel_fix_mounts (list or None), cache_dir (optional), tensor_parallel_size (optional),
    hostname (optional, label only)}.
    Returns {name, image, docker_argv, mounts, env, devices, ulimits, shm_size, command, labels,
    per_host, hashed, spec_hash, kv_cache_bytes}.
    """
    rank, tp = _check_host(lane, host)
    c = lane["container"]
    env = {}
    for key, value in (c.get("env") or {}).items():
        env[key] = str(value)
    env["VLLM_HOST_IP"] = str(host["host_ip"])
    for key, value in (host.get("fabric_env") or {}).items():
        env[key] = str(value)
    mounts = _mounts(lane, host)
    command = list((c.get("entrypoint") or [])[1:]) + _serve_args(lane, rank, tp, str(host["master_addr"]))
    docker_argv = _docker_flags(lane)
    spec = {
        "name": c["name"],
        "image": lane["image"]["reference"],
        "docker_argv": docker_argv,
        "mounts": mounts,
        "env": env,
        "devices": list(c.get("devices") or []),
        "ulimits": list(c.get("ulimits") or []),
        "shm_size": c.get("shm_size"),
        "command": command,
        "kv_cache_bytes": kv_pin(lane),
    }
    fingerprint = host.get("api_key_fingerprint") or ""
    if fingerprint:
        key_file = host.get("api_key_file") if rank == 0 else None
        if rank == 0 and not key_file:
            raise RenderError("the API key is set but api_key_file (the head's secret file) is not; "
                              "the vllm_ranks role passes vllm_ranks_api_key_file")
        spec["api_key"] = {"fingerprint": fingerprint, "host_file": key_file, "container_file": API_KEY_CONTAINER_FILE,
                           "entrypoint": list(c.get("entrypoint") or API_KEY_DEFAULT_ENTRYPOINT)}
    spec["hashed"] = hashed_view(spec, lane)
    spec["spec_hash"] = spec_hash(spec["hashed"])
    spec["per_host"] = dict((k, env[k]) for k in PER_HOST_ENV if k in env)
    spec["per_host"]["rank"] = rank
    spec["labels"] = {
        HASH_LABEL: spec["spec_hash"],
        LABEL_PREFIX + "lane": lane.get("name", ""),
        LABEL_PREFIX + "rank": str(rank),
        LABEL_PREFIX + "tensor-parallel-size": str(tp),
        # The hashed view itself, so a later run can name the keys that changed (module diff).
        LABEL_PREFIX + "spec": json.dumps(spec["hashed"], sort_keys=True, separators=(",", ":")),
    }
    return spec


def _strip_per_host_args(command, api_on_workers):
    out, skip = [], 0
    drop_with_value = {"--node-rank"}
    if not api_on_workers:
        drop_with_value |= {"--host", "--port"}
    for idx, arg in enumerate(command):
        if skip:
            skip -= 1
            continue
        if arg in drop_with_value:
            skip = 1
            continue
        if arg == "--headless":
            continue
        out.append(arg)
    return out


def hashed_view(spec, lane):
    """What the spec hash covers: everything except per-host values."""
    api_on_workers = bool((lane.get("serve") or {}).get("api_args_on_workers", False))
    hashed = {
        "image": spec["image"],
        "name": spec["name"],
        "docker_argv": spec["docker_argv"],
        "mounts": sorted(spec["mounts"], key=lambda m: (m["container"], m["host"])),
        "env": dict((k, v) for k, v in spec["env"].items() if k not in PER_HOST_ENV),
        "command": _strip_per_host_args(spec["command"], api_on_workers),
    }
    # Only when a key is set: a keyless group keeps the hash it had before this option existed.
    if (spec.get("api_key") or {}).get("fingerprint"):
        hashed["api_key_fingerprint"] = spec["api_key"]["fingerprint"]
    return hashed


def spec_hash(hashed):
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def run_argv(spec, docker="docker"):
    """The complete `docker run` argv: flags, -v, -e, --label, image, command.

    With an API key file (the head, spec["api_key"]["host_file"]) the file is bound read-only and the
    entrypoint becomes a shell that reads it into VLLM_API_KEY and execs the lane's entrypoint: the
    argv carries the file's path, never the key.
    """
    flags = list(spec["docker_argv"][1:])
    command = list(spec["command"])
    key = spec.get("api_key") or {}
    if key.get("host_file"):
        entry = list(key.get("entrypoint") or API_KEY_DEFAULT_ENTRYPOINT)
        if "--entrypoint" in flags:
            idx = flags.index("--entrypoint")
            flags[idx + 1] = API_KEY_SHELL
            # The lane's entrypoint[1:] already leads the command; entrypoint[0] was the flag's value.
            command = [entry[0]] + command
        else:
            flags += ["--entrypoint", API_KEY_SHELL]
            command = entry + command
        command = ["-c", API_KEY_WRAPPER, "vllm-rank"] + command
    argv = [docker] + flags
    for m in spec["mounts"]:
        argv += ["-v", "%s:%s:%s" % (m["host"], m["container"], m["mode"])]
    if key.get("host_file"):
        argv += ["-v", "%s:%s:ro" % (key["host_file"], key["container_file"])]
    for name in spec["env"]:
        argv += ["-e", "%s=%s" % (name, spec["env"][name])]
    if key.get("host_file"):
        argv += ["-e", "DGXSPARK_API_KEY_FILE=%s" % key["container_file"]]
    for name in sorted(spec.get("labels") or {}):
        argv += ["--label", "%s=%s" % (name, spec["labels"][name])]
    return argv + [spec["image"]] + command


def _flatten(value, path, out):
    if isinstance(value, dict):
        for key in value:
            _flatten(value[key], "%s.%s" % (path, key) if path else str(key), out)
    elif isinstance(value, list) and path in ("docker_argv", "command"):
        out[path] = " ".join(value)
    elif isinstance(value, list):
        out[path] = json.dumps(value, sort_keys=True)
    else:
        out[path] = value
    return out


def group_errors(specs):
    """Compare the rendered specs of one group: {host: spec} -> list of errors (empty when equal).

    Each error names the differing key and every host's value, so the fix is visible.
    """
    hashes = dict((h, s.get("spec_hash")) for h, s in specs.items())
    if len(set(hashes.values())) <= 1:
        return []
    flat = dict((h, _flatten(copy.deepcopy(s["hashed"]), "", {})) for h, s in specs.items())
    keys = set()
    for f in flat.values():
        keys |= set(f)
    errors = []
    for key in sorted(keys):
        values = dict((h, flat[h].get(key, "<absent>")) for h in sorted(flat))
        if len(set(json.dumps(v, sort_keys=True) for v in values.values())) > 1:
            errors.append("ranks differ in %s: %s" % (key, "; ".join("%s=%s" % (h, values[h]) for h in sorted(values))))
    if not errors:
        errors.append("spec hashes differ (%s) although no key differs; re-render every rank"
                      % ", ".join("%s=%s" % (h, hashes[h][:12]) for h in sorted(hashes)))
    return errors
