# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lane schema, override merging and inventory validation (pure Python, controller side).

A lane is a known-good configuration kept as data in ``lanes/<name>.yml`` (docs/lanes.md).
Inventory variables override single keys (``vllm_lane_overrides``, deep merge); the merged
result is checked against LANE_SCHEMA so an unknown or mistyped key stops the run before any
node is touched.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

# Schema nodes: a dict maps key -> (types, required, extra); extra may hold 'choices',
# 'min', 'max', 'schema' (nested dict schema), 'elements' (schema of list items),
# 'open' (True: a dict whose keys are free, e.g. env maps), 'hint' (the rule's source and the fix,
# appended to every error about that key).
STR = (str,)
INT = (int,)
NUM = (int, float)
BOOL = (bool,)
DICT = (dict,)
LIST = (list,)
NONE = (type(None),)

# How the engine image reaches the ranks (image_sync); the role's image_sync_mode adds "verify" and ""
# (tests/unit/roles keep meta/argument_specs.yml in step with these two lists).
DISTRIBUTION_MODES = ["pull", "registry", "stream", "build"]
FANOUT_MODES = ["registry", "stream"]

MODEL_SCHEMA = {
    "repo_id": (STR, True, {}),
    "revision": (STR, False, {}),
    "allow_branch": (BOOL, False, {}),
    "host_path": (STR, True, {}),
    "container_path": (STR, True, {}),
    "served_model_name": (STR, False, {}),
    "quantization": (STR, False, {}),
    "guard_mode": (STR + NONE, False, {}),
    "heads_padding": (DICT + NONE, False, {"open": True}),
    "size_gib": (NUM, False, {"min": 0}),
}

MOUNT_SCHEMA = {
    "host": (STR, True, {}),
    "container": (STR, True, {}),
    "mode": (STR, False, {"choices": ["ro", "rw"]}),
    "when_exists": (BOOL, False, {}),
    "note": (STR, False, {}),
}

FIX_FILE_SCHEMA = {
    "name": (STR, True, {}),
    "src": (STR, True, {}),
    "sha256": (STR, True, {}),
    "container_path": (STR, True, {}),
    "marker": (STR, False, {}),
    # kernel_fix: the sha256 of the image's own file the fix was made against, the images it
    # applies to, and an explicit override of the "different version in the image" refusal.
    "base_sha256": (STR + NONE, False, {}),
    "images": (LIST, False, {"elements": STR}),
    "override": (BOOL, False, {}),
}

# image.build.stages[]: one Dockerfile of the chain (operations spec C.7 build chain).
BUILD_STAGE_SCHEMA = {
    "name": (STR, True, {}),
    "dockerfile": (STR, True, {"hint": "controller path, absolute or relative to the collection root"}),
    "tag": (STR, True, {}),
    "context": (STR, False, {"hint": "build context directory; default: the Dockerfile's directory"}),
    "build_args": (DICT, False, {"open": True}),
}

# serve.speculative_config: rendered as --speculative-config '<JSON>' (operations spec B.5 forms).
# Methods the lanes use: mtp (the checkpoint's own MTP head) and dflash (the DFlash2 drafter).
SPECULATIVE_SCHEMA = {
    "method": (STR, True, {"choices": ["mtp", "dflash"], "hint": (
        "operations spec B.5 knows mtp (the checkpoint's own MTP head) and dflash (the DFlash2 drafter, lane "
        "key 'drafter'); set one of them, or serve.speculative_config: null for no speculative decoding")}),
    "num_speculative_tokens": (INT, False, {"min": 1, "hint": (
        "k, the tokens drafted per step, must be an int >= 1 (operations spec B.5): the mtp lanes use 4, "
        "dflash takes 1..7 (the DFlash2 drafter's block_size 8 = 1 + k); set an unquoted int, e.g. "
        "num_speculative_tokens: 7")}),
    "model": (STR + NONE, False, {"hint": (
        "the drafter's container_path for dflash, null for mtp (operations spec B.5)")}),
}

LANE_SCHEMA = {
    "name": (STR, True, {}),
    "description": (STR, True, {}),
    "platform": (STR, True, {"choices": ["spark", "cpu"]}),
    "tensor_parallel_size": (INT, True, {"min": 1, "max": 8}),
    "source": (STR, False, {}),
    "image": (DICT, True, {"schema": {
        "reference": (STR, True, {}),
        "distribution": (STR, False, {"choices": DISTRIBUTION_MODES}),
        "expected_digest": (STR + NONE, False, {}),
        "expected_fingerprint": (STR + NONE, False, {}),
        "fingerprint_files": (LIST, False, {"elements": STR}),
        "fingerprint_packages": (LIST, False, {"elements": STR}),
        "vllm_pkg_dir": (STR, False, {}),
        "size_gib": (NUM, False, {"min": 0}),
        # distribution build: the Dockerfile chain built on the head, then fanned out (issue 6)
        "build": (DICT + NONE, False, {"schema": {
            "stages": (LIST, True, {"elements": BUILD_STAGE_SCHEMA}),
            "fanout": (STR, False, {"choices": FANOUT_MODES}),
        }}),
    }}),
    "checkpoint": (DICT, True, {"schema": MODEL_SCHEMA}),
    "drafter": (DICT + NONE, False, {"schema": MODEL_SCHEMA}),
    "padding": (DICT, False, {"schema": {
        "config_targets": (DICT, False, {"open": True}),
        "hf_overrides": (BOOL, False, {}),
    }}),
    "fix_files": (LIST, False, {"elements": FIX_FILE_SCHEMA}),
    "container": (DICT, True, {"schema": {
        "name": (STR, True, {}),
        "gpus": (STR + NONE, False, {}),
        "network": (STR, False, {"choices": ["host"]}),
        "ipc": (STR, False, {"choices": ["host", "private", "shareable"]}),
        "shm_size": (STR, False, {}),
        "memory": (STR + NONE, False, {}),
        "restart": (STR, False, {"choices": ["no"]}),
        "ulimits": (LIST, False, {"elements": STR}),
        "cap_add": (LIST, False, {"elements": STR}),
        "devices": (LIST, False, {"elements": STR}),
        "mounts": (LIST, False, {"elements": MOUNT_SCHEMA}),
        "env": (DICT, False, {"open": True}),
        "entrypoint": (LIST + NONE, False, {"elements": STR}),
        "cache_dir": (STR, False, {}),
    }}),
    "nccl": (DICT, False, {"open": True}),
    "serve": (DICT, True, {"schema": {
        "api_port": (INT, True, {"min": 1, "max": 65535}),
        "master_port": (INT, True, {"min": 1, "max": 65535}),
        "host": (STR, False, {}),
        "max_model_len": (INT, True, {"min": 1}),
        "max_num_seqs": (INT, False, {"min": 1}),
        "max_num_batched_tokens": (INT + NONE, False, {"min": 1}),
        "block_size": (INT + NONE, False, {"min": 1}),
        "gpu_memory_utilization": (NUM + NONE, False, {"min": 0.05, "max": 0.99}),
        "kv_cache_dtype": (STR + NONE, False, {}),
        "kv_policy": (DICT, False, {"schema": {
            "mode": (STR, True, {"choices": ["profiler", "pin"]}),
            "bytes": (INT + NONE, False, {"min": 1}),
            "concurrency": (NUM + NONE, False, {"min": 0}),
            "bytes_per_token_per_rank": (INT + NUM + NONE, False, {"min": 0}),
            # The CLI spelling: the launchers use the prefix --kv-cache-memory (spec B.4).
            "flag": (STR, False, {"choices": ["--kv-cache-memory", "--kv-cache-memory-bytes"]}),
            "note": (STR, False, {}),
        }}),
        "enforce_eager": (BOOL, False, {}),
        "trust_remote_code": (BOOL, False, {}),
        "speculative_config": (DICT + NONE, False, {"schema": SPECULATIVE_SCHEMA}),
        "tool_call_parser": (STR + NONE, False, {}),
        "enable_auto_tool_choice": (BOOL, False, {}),
        "reasoning_parser": (STR + NONE, False, {}),
        "default_chat_template_kwargs": (DICT + NONE, False, {"open": True}),
        "chat_template": (STR + NONE, False, {}),
        "extra_args": (LIST, False, {"elements": STR}),
        # Added for the seed lanes' launch lines (operations spec B.4/B.5, docs/lanes.md):
        "api_args_on_workers": (BOOL, False, {}),
        "pipeline_parallel_size": (INT + NONE, False, {"min": 1}),
        "moe_backend": (STR + NONE, False, {}),
        "compilation_config": (DICT + NONE, False, {"open": True}),
        "limit_mm_per_prompt": (DICT + NONE, False, {"open": True}),
        "mm_encoder_tp_mode": (STR + NONE, False, {"choices": ["data", "weights"]}),
    }}),
    "health": (DICT, False, {"schema": {
        "ready_timeout_s": (INT, False, {"min": 1}),
        "smoke_max_tokens": (INT, False, {"min": 1}),
        "tool_smoke": (BOOL, False, {}),
    }}),
    "requirements": (DICT, False, {"schema": {
        "swap_required": (BOOL, False, {}),
        "driver_min": (INT + NONE, False, {"min": 0}),
        "gpu_name": (STR + NONE, False, {}),
        "disk_gib": (NUM + DICT, False, {"min": 0, "open": True}),
        "mem_total_gib_min": (NUM + NONE, False, {"min": 0}),
    }}),
}


GIB = 1024 ** 3


def _gib(nbytes):
    """Bytes as GiB for a message: 214748364800 -> '200', 4445787956 -> '4.14'."""
    return ("%.2f" % (nbytes / float(GIB))).rstrip("0").rstrip(".")


def value_type(value):
    """Plain type name of a value (Ansible wraps strings in tagged subclasses)."""
    for t, n in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"),
                 (dict, "mapping"), (list, "list"), (type(None), "null")):
        if isinstance(value, t):
            return n
    return type(value).__name__


def _type_name(types):
    names = {str: "str", int: "int", float: "float", bool: "bool", dict: "dict",
             list: "list", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _is_type(value, types):
    # bool is an int in Python; a lane that says 'true' where a number belongs is an error.
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def _check(value, schema, path, errors):
    for key in sorted(value):
        if key not in schema:
            errors.append("%s%s: unknown key (known: %s)" % (
                path, key, ", ".join(sorted(schema))))
    for key, (types, required, extra) in schema.items():
        where = path + key
        hint = "; " + extra["hint"] if extra.get("hint") else ""
        if key not in value:
            if required:
                errors.append("%s: required key missing%s" % (where, hint))
            continue
        item = value[key]
        if not _is_type(item, types):
            errors.append("%s: expected %s, got %s (%r)%s" % (
                where, _type_name(types), value_type(item), item, hint))
            continue
        if "choices" in extra and item not in extra["choices"]:
            errors.append("%s: %r is not one of %s%s" % (
                where, item, ", ".join(map(str, extra["choices"])), hint))
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if "min" in extra and item < extra["min"]:
                errors.append("%s: %r is below the minimum %r%s" % (where, item, extra["min"], hint))
            if "max" in extra and item > extra["max"]:
                errors.append("%s: %r is above the maximum %r%s" % (where, item, extra["max"], hint))
        if isinstance(item, dict) and "schema" in extra:
            _check(item, extra["schema"], where + ".", errors)
        if isinstance(item, list) and "elements" in extra:
            elements = extra["elements"]
            for idx, element in enumerate(item):
                if isinstance(elements, dict):
                    if not isinstance(element, dict):
                        errors.append("%s[%d]: expected dict, got %s" % (where, idx, value_type(element)))
                    else:
                        _check(element, elements, "%s[%d]." % (where, idx), errors)
                elif not _is_type(element, elements):
                    errors.append("%s[%d]: expected %s, got %s (%r)" % (
                        where, idx, _type_name(elements), value_type(element), element))


def deep_merge(base, override):
    """Return base with override merged in: dicts merge key by key, anything else replaces."""
    result = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _semantic_errors(lane):
    """Rules across keys (operations spec B.5, field cases F12/F20)."""
    errors = []
    serve = lane.get("serve") or {}
    spec = serve.get("speculative_config") or {}
    method = spec.get("method")
    k = spec.get("num_speculative_tokens")
    if method == "dflash":
        # The DFlash2 drafter's block_size is 8 and must equal 1 + k (operations spec B.5).
        if isinstance(k, int) and not isinstance(k, bool) and k > 7:
            errors.append("serve.speculative_config.num_speculative_tokens: %d is above 7; the DFlash2 drafter's "
                          "block_size 8 must equal 1 + k (operations spec B.5). Use k <= 7." % k)
        if k is None:
            errors.append("serve.speculative_config.num_speculative_tokens: required for method dflash; the "
                          "DFlash2 drafter's block_size 8 must equal 1 + k (operations spec B.5). "
                          "Set num_speculative_tokens: 7.")
        if not lane.get("drafter"):
            errors.append("serve.speculative_config: method dflash needs a drafter (lane key 'drafter')")
    checkpoint = lane.get("checkpoint") or {}
    guard_mode = checkpoint.get("guard_mode")
    repo_id = checkpoint.get("repo_id") or ""
    if method == "mtp" and guard_mode == "no_mtp":
        errors.append("serve.speculative_config: method mtp on a checkpoint whose MTP head is not quantized "
                      "(guard_mode no_mtp, operations spec B.5 nvidia checkpoint); use a dflash lane")
    elif method == "mtp" and (guard_mode == "dflash2" or repo_id.startswith("nvidia/")):
        # The nvidia NVFP4 checkpoint ships its MTP head (layer 45) in BF16 without scale tensors (G19);
        # checkpoint_guard refuses it on the node, this refuses it before any node is touched.
        errors.append("serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized "
                      "(checkpoint.repo_id %r, guard_mode %s; operations spec B.5 nvidia checkpoint, G19); use "
                      "method dflash with a drafter (as lane tp2_dflash2 does) or a checkpoint whose MTP head is "
                      "quantized (lane tp2_mtp)" % (repo_id, guard_mode if guard_mode is not None else "null"))
    image = lane.get("image") or {}
    digest = image.get("expected_digest")
    if digest is not None and not re.match(r"^sha256:[0-9a-f]{64}$", str(digest)):
        errors.append("image.expected_digest: %r is not 'sha256:' + 64 lowercase hex; copy the part after '@' of "
                      "the image's RepoDigests entry, or set null" % (digest,))
    if image.get("distribution") == "build":
        stages = (image.get("build") or {}).get("stages") or []
        if not stages:
            errors.append("image.build: distribution build needs image.build.stages (the Dockerfile chain, in "
                          "build order, the last stage producing image.reference)")
        elif stages[-1].get("tag") != image.get("reference"):
            errors.append("image.build.stages: the last stage '%s' produces %r, not image.reference %r"
                          % (stages[-1].get("name"), stages[-1].get("tag"), image.get("reference")))
    if serve.get("api_port") is not None and serve.get("api_port") == serve.get("master_port"):
        errors.append("serve.master_port: equals serve.api_port (%s); the rendezvous needs its own port"
                      % serve.get("api_port"))
    policy = serve.get("kv_policy") or {}
    if policy.get("mode") == "pin" and not policy.get("bytes"):
        errors.append("serve.kv_policy.bytes: required when mode is 'pin'")
    pin = policy.get("bytes")
    mem_min = (lane.get("requirements") or {}).get("mem_total_gib_min")
    if isinstance(pin, int) and not isinstance(pin, bool) and isinstance(mem_min, (int, float)) \
            and not isinstance(mem_min, bool) and mem_min > 0 and pin / GIB >= mem_min:
        # The pin is KV cache per rank; on a GB10 it shares the node's unified memory with the weights
        # shard, the drafter, activations and the OS (operations spec E.2).
        errors.append("serve.kv_policy.bytes: %d (%s GiB) is not below the node memory the lane requires "
                      "(requirements.mem_total_gib_min %s GiB); a KV pin per rank must leave room for the weights, "
                      "activations and the OS (operations spec E.2). Pin fewer bytes (the spark lanes pin 4-24 GiB, "
                      "8 GiB = 8589934592) or correct requirements.mem_total_gib_min"
                      % (pin, _gib(pin), _gib(mem_min * GIB)))
    if policy.get("mode") == "profiler" and policy.get("bytes"):
        errors.append("serve.kv_policy.bytes: set but mode is 'profiler'; use mode 'pin' to pass "
                      "--kv-cache-memory, or drop bytes (operations spec E.2)")
    container = lane.get("container") or {}
    if lane.get("platform") == "cpu" and (container.get("gpus") or "/dev/infiniband" in " ".join(
            container.get("devices") or [])):
        errors.append("container.gpus/devices: GPU or RDMA devices on platform 'cpu'; the simulated fleet has "
                      "none (set gpus: null, devices: [])")
    drafter = lane.get("drafter") or {}
    if method == "dflash" and drafter and spec.get("model") not in (None, drafter.get("container_path")):
        errors.append("serve.speculative_config.model: %r is not the drafter's container_path %r; the drafter is "
                      "mounted there" % (spec.get("model"), drafter.get("container_path")))
    for where, model in (("checkpoint", lane.get("checkpoint") or {}), ("drafter", drafter)):
        pad = model.get("heads_padding") or {}
        for key in sorted(pad):
            value = pad[key]
            if key not in ("num_attention_heads", "num_key_value_heads"):
                errors.append("%s.heads_padding.%s: unknown key (known: num_attention_heads, num_key_value_heads)"
                              % (where, key))
            elif isinstance(value, bool) or not isinstance(value, int) or value % lane.get(
                    "tensor_parallel_size", 1):
                errors.append("%s.heads_padding.%s: %r must be an integer that divides by tensor_parallel_size %r"
                              % (where, key, value, lane.get("tensor_parallel_size")))
    targets = (lane.get("padding") or {}).get("config_targets") or {}
    for key in sorted(targets):
        value = targets[key]
        tp = lane.get("tensor_parallel_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append("padding.config_targets.%s: expected a positive int, got %r" % (key, value))
        elif isinstance(tp, int) and tp > 0 and value % tp:
            errors.append("padding.config_targets.%s: %d does not divide by tensor_parallel_size %d; pad to a "
                          "multiple of it (operations spec D.2)" % (key, value, tp))
    return errors


def validate_lane(lane, name=None):
    """Return a list of human-readable errors (empty when the lane is valid)."""
    if not isinstance(lane, dict):
        return ["lane %s: expected a mapping, got %s" % (name or "?", value_type(lane))]
    errors = []
    _check(lane, LANE_SCHEMA, "", errors)
    if name is not None and lane.get("name") not in (None, name):
        errors.append("name: %r does not match the lane file name %r" % (lane.get("name"), name))
    if not errors:
        errors.extend(_semantic_errors(lane))
    prefix = "lane %s: " % (name or lane.get("name") or "?")
    return [prefix + e for e in errors]


def validate_inventory(hosts, lane_tp, head_group="vllm_head", workers_group="vllm_workers"):
    """Check the rank layout of an inventory.

    hosts: list of dicts {name, groups (list of group names), rank (raw value or None)}
    lane_tp: the lane's tensor-parallel size (int).
    Returns a list of errors, each naming the host or group and the fix.
    """
    errors = []
    heads = [h["name"] for h in hosts if head_group in h.get("groups", [])]
    workers = [h["name"] for h in hosts if workers_group in h.get("groups", [])]
    if len(heads) != 1:
        errors.append("group %s has %d hosts (%s); it must hold exactly one host, rank 0"
                      % (head_group, len(heads), ", ".join(heads) or "none"))
    for name in sorted(set(heads) & set(workers)):
        errors.append("host %s: is in both %s and %s; put it in one of them" % (name, head_group, workers_group))
    ranks = {}
    for h in hosts:
        rank = h.get("rank")
        if rank is None:
            errors.append("host %s: vllm_rank is not set; set it in host_vars (0 for the head, 1..N-1 for workers)"
                          % h["name"])
            continue
        if isinstance(rank, bool) or not isinstance(rank, int):
            errors.append("host %s: vllm_rank must be an integer, got %s %r; write it unquoted, e.g. vllm_rank: 1"
                          % (h["name"], value_type(rank), str(rank) if isinstance(rank, str) else rank))
            continue
        ranks.setdefault(rank, []).append(h["name"])
    for rank, names in sorted(ranks.items()):
        if len(names) > 1:
            errors.append("vllm_rank %d: used by %s; every rank must be unique" % (rank, ", ".join(sorted(names))))
    n = len(hosts)
    if isinstance(lane_tp, int) and n != lane_tp:
        errors.append("group spark_cluster has %d hosts but the lane's tensor_parallel_size is %d; "
                      "add or remove hosts, or pick a lane for %d nodes" % (n, lane_tp, n))
    expected = set(range(n))
    if ranks and not errors:
        missing = sorted(expected - set(ranks))
        extra = sorted(set(ranks) - expected)
        if missing or extra:
            errors.append("vllm_rank values are %s; with %d hosts they must be exactly 0..%d (missing %s%s)"
                          % (sorted(ranks), n, n - 1, missing or "none",
                             ", out of range %s" % extra if extra else ""))
    for name in heads:
        rank = next((h.get("rank") for h in hosts if h["name"] == name), None)
        if isinstance(rank, int) and not isinstance(rank, bool) and rank != 0:
            errors.append("host %s: is the head (%s) but has vllm_rank %d; the head must be rank 0"
                          % (name, head_group, rank))
    for name in workers:
        rank = next((h.get("rank") for h in hosts if h["name"] == name), None)
        if rank == 0 and not isinstance(rank, bool):
            errors.append("host %s: is a worker (%s) but has vllm_rank 0; rank 0 is the head" % (name, workers_group))
    size = max(n, lane_tp if isinstance(lane_tp, int) else 0)
    if size >= 2 and not workers:
        errors.append("group %s is empty; a tensor-parallel group of %d needs %d workers (ranks 1..%d)"
                      % (workers_group, size, size - 1, size - 1))
    return errors
