# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Lane schema, override merging and inventory validation (pure Python, controller side).

A lane is a known-good configuration kept as data in ``lanes/<name>.yml`` (docs/lanes.md).
Inventory variables override single keys (``vllm_lane_overrides``, deep merge); the merged
result is checked against LANE_SCHEMA so an unknown or mistyped key stops the run before any
node is touched.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils import kinds
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import lane_mount_targets, managed_flag, under_mount

try:
    import jsonschema
    HAS_JSONSCHEMA = True
except ImportError:  # the controller's requirements.txt installs it
    HAS_JSONSCHEMA = False


# --- Building blocks of LANE_SCHEMA (JSON Schema draft 2020-12) -------------------------------------
# "x-hint" (our keyword, ignored by the validator) is the rule's source and the fix, appended to
# every error about that key.

# Every string leaf names its kind ("x-kind", the rules of module_utils/kinds.py) or an enum; no leaf carries
# its own "pattern" (tests/unit/test_kinds_declared.py walks the schema for one).

# How the engine image reaches the ranks (image_sync); the role's image_sync_mode adds "verify" and ""
# (tests/unit/roles keep meta/argument_specs.yml in step with these two lists).
DISTRIBUTION_MODES = ["pull", "registry", "stream", "build"]
FANOUT_MODES = ["registry", "stream"]

# KV-cache dtypes vLLM accepts for --kv-cache-dtype (vllm/config/cache.py CacheDType), plus
# nvfp4_ds_mla, the NVFP4 MLA layout of the patched GB10 images (docs/lanes.md KV-dtype lanes).
KV_CACHE_DTYPES = ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla"]
NVFP4_KV_DTYPES = ("nvfp4_ds_mla",)
# The checkpoint's max_position_embeddings (1,048,576, GLM-5.3-Flash config.json); vLLM refuses a
# longer max_model_len unless told to override the model's own limit.
MAX_MODEL_LEN = 1048576
# MTP runs the checkpoint's single MTP layer k times; the lanes ship k=4 and runs used 2..4
# (docs/lanes.md); acceptance falls with every position, so k stays within 1..7.
MTP_K_MAX = 7
DFLASH_K_MAX = 7


def _t(types, hint=None, **extra):
    node = {"type": types}
    if hint:
        node["x-hint"] = hint
    node.update(extra)
    return node


def _s(hint=None, **extra):
    return _t("string", hint, **extra)


def _k(kind, types="string", hint=None, **extra):
    """A leaf checked by its kind (module_utils/kinds.py)."""
    return _t(types, hint, **dict(extra, **{"x-kind": kind}))


def _path(what, nullable=False):
    return _t(["string", "null"] if nullable else "string",
              "%s: an absolute path without ':' or whitespace (docker -v reads ':' as a field separator)" % what,
              **{"x-kind": "abs_path"})


def _obj(props, required=(), types="object", hint=None, **extra):
    node = {"type": types, "properties": props, "additionalProperties": False}
    if required:
        node["required"] = list(required)
    if hint:
        node["x-hint"] = hint
    node.update(extra)
    return node


def _list(items, types="array"):
    return {"type": types, "items": items}


def _map(values):
    """A mapping with free keys (env maps, JSON-valued flags)."""
    return {"type": "object", "additionalProperties": values}


_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_ANY_MAP = {"type": "object"}
_ANY_MAP_OR_NULL = {"type": ["object", "null"]}

MODEL_SCHEMA = _obj({
    "repo_id": _s("a Hugging Face repo id, owner/name", **{"x-kind": "hf_repo"}),
    "revision": _k({"kind": "hf_revision", "empty": True}),
    "allow_branch": _BOOL,
    "host_path": _path("host_path"),
    "container_path": _path("container_path"),
    "served_model_name": _k("model_name", hint="--served-model-name, the model id clients send"),
    # a family or a format (checkpoint_guard reads the checkpoint's own files; modelopt is served only when named)
    "quantization": _s("one of nvfp4, fp8, mxfp8, none, bf16, bfloat16, float32, modelopt, compressed-tensors",
                       enum=["nvfp4", "fp8", "mxfp8", "none", "bf16", "bfloat16", "float32", "modelopt",
                             "compressed-tensors"]),
    "guard_mode": _t(["string", "null"], **{"x-kind": "token"}),
    "heads_padding": _ANY_MAP_OR_NULL,
    "size_gib": _t("number", minimum=0),
}, required=("repo_id", "host_path", "container_path"))

MOUNT_SCHEMA = _obj({
    "host": _path("host"),
    "container": _path("container"),
    "mode": _s(enum=["ro", "rw"]),
    "when_exists": _BOOL,
    "note": _s(**{"x-kind": "raw_text"}),
}, required=("host", "container"))

FIX_FILE_SCHEMA = _obj({
    "name": _k("item_name", hint="it names the fix file on the nodes"),
    "src": _k("fix_source", hint="a controller path, an http(s) or file URL, or image:<glob> for a file taken from "
              "the image"),
    "sha256": _k({"kind": "sha256", "empty": True}, ["string", "null"],
                 hint="the sha256sum of src; '' for a file taken from the image (its own hash becomes the pin); "
                 "null for a file each user fetches and pins (vllm_fix_file_sha256), with source: saying where"),
    # where a file the collection cannot ship comes from (validate prints it; a null sha256 requires it)
    "source": _obj({
        "project": _s(**{"x-kind": "raw_text"}),
        "path": _s(**{"x-kind": "raw_text"}),
        "ref": _s(**{"x-kind": "raw_text"}),
        "how": _s(**{"x-kind": "raw_text"}),
    }, required=("project", "path")),
    "container_path": _path("container_path"),
    "marker": _s(**{"x-kind": "raw_text"}),
    # kernel_fix: the sha256 of the image's own file the fix was made against, the images it
    # applies to, and an explicit override of the "different version in the image" refusal.
    "base_sha256": _k("sha256", ["string", "null"]),
    "images": _list(_k("image_selector")),
    "override": _BOOL,
}, required=("name", "src", "sha256", "container_path"))

# image.build.stages[]: one Dockerfile of the chain (catalogue image_differs build chain).
BUILD_STAGE_SCHEMA = _obj({
    "name": _k("item_name", hint="it names the stage's build directory on the head"),
    "dockerfile": _k("source_path", hint="controller path, absolute or relative to the collection root"),
    "tag": _s("an image reference, e.g. glm53:sm121-v12", **{"x-kind": "image_ref"}),
    "context": _k("source_path", hint="build context directory; default: the Dockerfile's directory"),
    "build_args": _map({"type": ["string", "integer", "number"], "x-kind": "env_value"}),
}, required=("name", "dockerfile", "tag"))

_SPEC_HINT = ("k, the tokens drafted per step, must be an int >= 1 (docs/lanes.md): the mtp lanes use 4, "
              "dflash takes 1..7 (the DFlash2 drafter's block_size 8 = 1 + k); set an unquoted int, e.g. "
              "num_speculative_tokens: 7")

# serve.speculative_config: rendered as --speculative-config '<JSON>' (docs/lanes.md forms).
# Methods the lanes use: mtp (the checkpoint's own MTP head) and dflash (the DFlash2 drafter).
SPECULATIVE_SCHEMA = _obj({
    "method": _s("docs/lanes.md knows mtp (the checkpoint's own MTP head) and dflash (the DFlash2 drafter, "
                 "lane key 'drafter'); set one of them, or serve.speculative_config: null for no speculative "
                 "decoding", enum=["mtp", "dflash"]),
    "num_speculative_tokens": _t("integer", _SPEC_HINT, minimum=1),
    "model": _t(["string", "null"], "the drafter's container_path for dflash, null for mtp (docs/lanes.md)",
                **{"x-kind": "abs_path"}),
}, required=("method",), types=["object", "null"], allOf=[
    # Per method (docs/lanes.md): mtp drafts with the checkpoint's own head, k in 1..7.
    {"if": {"properties": {"method": {"const": "mtp"}}, "required": ["method"]},
     "then": {"properties": {
         "num_speculative_tokens": {"maximum": MTP_K_MAX, "x-hint": (
             "mtp runs the checkpoint's single MTP layer k times; the lanes ship k=4 and runs used 2..4, "
             "acceptance falls with every position (docs/lanes.md). Set num_speculative_tokens in 1..%d"
             % MTP_K_MAX)},
         "model": {"type": "null", "x-hint": "mtp drafts with the checkpoint's own head; set model: null"}}}},
])

LANE_SCHEMA = _obj({
    "name": _k("lane_name"),
    "description": _s(**{"x-kind": "raw_text"}),
    "platform": _s(enum=["spark", "cpu"]),
    "tensor_parallel_size": _t("integer", minimum=1, maximum=8),
    "source": _s(**{"x-kind": "raw_text"}),
    "allow_nvfp4_kv_dflash2_tp2": _t("boolean", (
        "true accepts kv_cache_dtype nvfp4_ds_mla with dflash at tensor-parallel 2, which the TP2 report "
        "found to kill rank 0 on prompts that need chunked prefill")),
    "image": _obj({
        "reference": _s("an image reference, e.g. ghcr.io/owner/name:tag", **{"x-kind": "image_ref"}),
        "distribution": _s(enum=DISTRIBUTION_MODES),
        "expected_digest": _t(["string", "null"], **{"x-kind": "text"}),  # its form: check_digest_pins
        "expected_fingerprint": _t(["string", "null"], **{"x-kind": "text"}),
        # absolute, or relative to vllm_pkg_dir's parent (roles/image_sync/tasks/main.yml)
        "fingerprint_files": _list(_k("image_path")),
        "fingerprint_packages": _list(_k("package_name")),
        # versions a dependency install must not move (catalogue nccl_version_skew)
        "expected_packages": {"type": ["object", "null"], "propertyNames": {"x-kind": "package_name"},
                              "additionalProperties": _k("package_version")},
        "vllm_pkg_dir": _path("vllm_pkg_dir"),
        "size_gib": _t("number", minimum=0),
        # the CUDA the image's toolchain needs, for images whose ptxas / CUDA_VERSION the probe cannot read
        # (catalogue image_cuda_newer_than_driver)
        "cuda_version": _k("cuda_version", ["string", "null"]),
        # distribution build: the Dockerfile chain built on the head, then fanned out (issue 6)
        "build": _obj({
            "stages": _list(BUILD_STAGE_SCHEMA),
            "fanout": _s(enum=FANOUT_MODES),
        }, required=("stages",), types=["object", "null"]),
    }, required=("reference",)),
    "checkpoint": MODEL_SCHEMA,
    "drafter": dict(MODEL_SCHEMA, type=["object", "null"]),
    "padding": _obj({
        "config_targets": _ANY_MAP,
        "hf_overrides": _BOOL,
    }),
    "fix_files": _list(FIX_FILE_SCHEMA),
    "container": _obj({
        "name": _s("a container name: letters, digits and _ . - (Docker's rule)", **{"x-kind": "container_name"}),
        "gpus": _k("docker_gpus", ["string", "null"]),
        "network": _s(enum=["host"]),
        "ipc": _s(enum=["host", "private", "shareable"]),
        "shm_size": _k("size", hint="docker --shm-size"),
        "memory": _k("size", ["string", "null"], "docker --memory and --memory-swap"),
        "restart": _s(enum=["no"]),
        "ulimits": _list(_k("ulimit")),
        "cap_add": _list(_k("capability")),
        "devices": _list(_k("device")),
        "mounts": _list(MOUNT_SCHEMA),
        "env": {"type": "object", "propertyNames": {"x-kind": "env_name"}, "additionalProperties": _t(
            ["string", "number"],
            "write the value as a string, e.g. \"1\" (null would reach the container as 'None', a bool as 'True')",
            **{"x-kind": "env_value"})},
        "entrypoint": _list(_k("command_word"), types=["array", "null"]),
        "cache_dir": _path("cache_dir"),
    }, required=("name",)),
    "nccl": _ANY_MAP,
    "serve": _obj({
        "api_port": _t("integer", minimum=1, maximum=65535),
        "master_port": _t("integer", minimum=1, maximum=65535),
        "host": _s("an address to bind, e.g. 0.0.0.0", **{"x-kind": "host"}),
        "max_model_len": _t("integer", (
            "tokens per request; at most the checkpoint's max_position_embeddings %d" % MAX_MODEL_LEN),
            minimum=1, maximum=MAX_MODEL_LEN),
        "max_num_seqs": _t("integer", minimum=1),
        "max_num_batched_tokens": _t(["integer", "null"], minimum=1),
        "block_size": _t(["integer", "null"], minimum=1),
        "gpu_memory_utilization": _t(["number", "null"], minimum=0.05, maximum=0.99),
        "kv_cache_dtype": _t(["string", "null"], "the values vLLM's --kv-cache-dtype accepts; the lanes ship fp8_e4m3",
                             enum=KV_CACHE_DTYPES + [None]),
        "kv_policy": _obj({
            "mode": _s(enum=["profiler", "pin"]),
            "bytes": _t(["integer", "null"], minimum=1),
            "concurrency": _t(["number", "null"], minimum=0),
            "bytes_per_token_per_rank": _t(["number", "null"], minimum=0),
            # The CLI spelling: the launchers use the prefix --kv-cache-memory (docs/lanes.md).
            "flag": _s(enum=["--kv-cache-memory", "--kv-cache-memory-bytes"]),
            "note": _s(**{"x-kind": "raw_text"}),
        }, required=("mode",)),
        "enforce_eager": _BOOL,
        "trust_remote_code": _BOOL,
        "speculative_config": SPECULATIVE_SCHEMA,
        "tool_call_parser": _t(["string", "null"], **{"x-kind": "token"}),
        "enable_auto_tool_choice": _BOOL,
        "reasoning_parser": _t(["string", "null"], **{"x-kind": "token"}),
        "default_chat_template_kwargs": _ANY_MAP_OR_NULL,
        "chat_template": _path("chat_template (a path inside the container)", nullable=True),
        "extra_args": _list({"type": "string", "x-kind": "text"}),
        # Added for the seed lanes' launch lines (docs/lanes.md):
        "api_args_on_workers": _BOOL,
        "pipeline_parallel_size": _t(["integer", "null"], minimum=1),
        "moe_backend": _t(["string", "null"], **{"x-kind": "token"}),
        "compilation_config": _ANY_MAP_OR_NULL,
        "limit_mm_per_prompt": _ANY_MAP_OR_NULL,
        "mm_encoder_tp_mode": _t(["string", "null"], enum=["data", "weights", None]),
    }, required=("api_port", "master_port", "max_model_len")),
    "health": _obj({
        "ready_timeout_s": _t("integer", minimum=1),
        "smoke_max_tokens": _t("integer", minimum=1),
        "tool_smoke": _BOOL,
        # call: the expected tool call; wellformed: accepted and well-formed only (random weights, sim lanes)
        "tool_smoke_judge": _t("string", enum=["call", "wellformed"]),
        "smoke_chat_template_kwargs": _ANY_MAP_OR_NULL,
        # catalogue token_corruption: passes of the Korean probe at temperature 0, tokens per pass
        "corruption_probe": _t(["object", "null"], properties={
            "passes": _t("integer", minimum=1, maximum=10), "max_tokens": _t("integer", minimum=16, maximum=2048)},
            additionalProperties=False, required=["passes"]),
    }),
    "requirements": _obj({
        "swap_required": _BOOL,
        "driver_min": _t(["integer", "null"], minimum=0),
        "gpu_name": _t(["string", "null"], **{"x-kind": "text"}),
        "disk_gib": _t(["number", "object"], minimum=0),
        "mem_total_gib_min": _t(["number", "null"], minimum=0),
    }),
}, required=("name", "description", "platform", "tensor_parallel_size", "image", "checkpoint", "container",
             "serve"))


def _x_kind(validator, spec, instance, schema):
    """Our keyword: the value is checked by its kind (module_utils/kinds.py), the same rules as every option."""
    if instance is None:
        return
    try:
        kinds.check(spec, _plain(instance))
    except kinds.Refusal as e:
        yield jsonschema.ValidationError("%s (kind %s); %s" % (e.rule, kinds.normalise(spec)[0], e.fix))


def _strict_integer(checker, instance):
    # JSON Schema counts 131072.0 as an integer; a lane means an int there
    return isinstance(instance, int) and not isinstance(instance, bool)


def _strict_number(checker, instance):
    return (isinstance(instance, (int, float)) and not isinstance(instance, bool)
            and not (isinstance(instance, float) and (math.isnan(instance) or math.isinf(instance))))


if HAS_JSONSCHEMA:
    _LaneValidator = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        validators={"x-kind": _x_kind},
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
            {"integer": _strict_integer, "number": _strict_number}))
    _VALIDATOR = _LaneValidator(LANE_SCHEMA)
else:
    _VALIDATOR = None


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


_JSON_TYPE_NAMES = {"string": "str", "integer": "int", "number": "int or float", "boolean": "bool",
                    "object": "dict", "array": "list", "null": "null"}


def _where(path):
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[%d]" % part
        else:
            out += ("." if out else "") + str(part)
    return out


def _hint(schema):
    return "; " + schema["x-hint"] if isinstance(schema, dict) and schema.get("x-hint") else ""


def _schema_messages(error):
    """One jsonschema error as our messages: key path, the value, the rule and the fix."""
    path = list(error.absolute_path)
    where = _where(path)
    value = error.instance
    kind = error.validator
    hint = _hint(error.schema)
    if kind == "required":
        props = error.schema.get("properties") or {}
        return ["%s: required key missing%s" % (_where(path + [key]), _hint(props.get(key)))
                for key in error.validator_value if isinstance(value, dict) and key not in value]
    if kind == "additionalProperties" and error.validator_value is False:
        known = sorted(error.schema.get("properties") or {})
        return ["%s: unknown key (known: %s)" % (_where(path + [key]), ", ".join(known))
                for key in sorted(value) if key not in known]
    if kind == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return ["%s: expected %s, got %s (%r)%s" % (
            where, " or ".join(_JSON_TYPE_NAMES.get(t, t) for t in types), value_type(value), _plain(value), hint)]
    if kind == "enum":
        return ["%s: %r is not one of %s%s" % (
            where, _plain(value), ", ".join(str(c) for c in error.validator_value if c is not None), hint)]
    if kind == "const":
        return ["%s: %r must be %r%s" % (where, _plain(value), error.validator_value, hint)]
    if kind == "minimum":
        return ["%s: %r is below the minimum %r%s" % (where, _plain(value), error.validator_value, hint)]
    if kind == "maximum":
        return ["%s: %r is above the maximum %r%s" % (where, _plain(value), error.validator_value, hint)]
    if kind == "x-kind":
        # a mapping's key (propertyNames) is named as a key: the path is the mapping's
        what = "key " if list(error.relative_schema_path)[-2:] == ["propertyNames", "x-kind"] else ""
        return ["%s: %s%r %s%s" % (where, what, _plain(value), error.message, hint)]
    # allOf/if-then and anything else: the validator's own words, with the path.
    return ["%s: %s%s" % (where or "lane", error.message, hint)]


def _plain(value):
    """Builtin copy of a value for repr(): Ansible's tagged str/int subclasses print like the builtins."""
    for t in (bool, int, float, str):
        if isinstance(value, t):
            return t(value)
    if isinstance(value, dict):
        return dict((_plain(k), _plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def schema_errors(lane):
    """Errors of the lane against LANE_SCHEMA, sorted by key path."""
    out = []
    for error in sorted(_VALIDATOR.iter_errors(lane), key=lambda e: [str(p) for p in e.absolute_path]):
        if error.validator in ("allOf", "if", "then"):
            continue
        for message in _schema_messages(error):
            if message not in out:
                out.append(message)
    return out


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
    """Rules across keys (catalogue drafter_heads, kv_pin_no_activation_reserve; docs/lanes.md)."""
    errors = []
    serve = lane.get("serve") or {}
    spec = serve.get("speculative_config") or {}
    method = spec.get("method")
    k = spec.get("num_speculative_tokens")
    if method == "dflash":
        # The DFlash2 drafter's block_size is 8 and must equal 1 + k (docs/lanes.md).
        if isinstance(k, int) and not isinstance(k, bool) and k > 7:
            errors.append("serve.speculative_config.num_speculative_tokens: %d is above 7; the DFlash2 drafter's "
                          "block_size 8 must equal 1 + k (docs/lanes.md). Use k <= 7." % k)
        if k is None:
            errors.append("serve.speculative_config.num_speculative_tokens: required for method dflash; the "
                          "DFlash2 drafter's block_size 8 must equal 1 + k (docs/lanes.md). "
                          "Set num_speculative_tokens: 7.")
        if not lane.get("drafter"):
            errors.append("serve.speculative_config: method dflash needs a drafter (lane key 'drafter')")
    checkpoint = lane.get("checkpoint") or {}
    guard_mode = checkpoint.get("guard_mode")
    repo_id = checkpoint.get("repo_id") or ""
    if method == "mtp" and guard_mode == "no_mtp":
        errors.append("serve.speculative_config: method mtp on a checkpoint whose MTP head is not quantized "
                      "(guard_mode no_mtp, docs/lanes.md nvidia checkpoint); use a dflash lane")
    elif method == "mtp" and (guard_mode == "dflash2" or repo_id.startswith("nvidia/")):
        # The nvidia NVFP4 checkpoint ships its MTP head (layer 45) in BF16 without scale tensors (docs/weights.md);
        # checkpoint_guard refuses it on the node, this refuses it before any node is touched.
        errors.append("serve.speculative_config: method mtp on a checkpoint whose MTP head is BF16, not quantized "
                      "(checkpoint.repo_id %r, guard_mode %s; docs/weights.md, the nvidia checkpoint); use "
                      "method dflash with a drafter (as lane tp2_dflash2 does) or a checkpoint whose MTP head is "
                      "quantized (lane tp2_mtp)" % (repo_id, guard_mode if guard_mode is not None else "null"))
    for i, item in enumerate(lane.get("fix_files") or []):
        # '' takes the image's own hash as the pin; a controller or URL file needs a pin, or null and a source
        # so that each user fetches, checks and pins it (validate refuses until then)
        where = "fix_files[%d] (%s)" % (i, item.get("name"))
        if item.get("sha256") == "" and not str(item.get("src", "")).startswith("image:"):
            errors.append("%s: sha256 '' is only for an image: source; pin the file (sha256sum), or, for a file "
                          "each user fetches, write sha256: null and source: {project, path, how}" % where)
        if item.get("sha256") is None and not item.get("source"):
            errors.append("%s: sha256 null (the user pins it) needs source: {project, path, how} saying where "
                          "to get the file" % where)
    image = lane.get("image") or {}
    digest = image.get("expected_digest")
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)):
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
        # shard, the drafter, activations and the OS (docs/memory-plan.md).
        errors.append("serve.kv_policy.bytes: %d (%s GiB) is not below the node memory the lane requires "
                      "(requirements.mem_total_gib_min %s GiB); a KV pin per rank must leave room for the weights, "
                      "activations and the OS (docs/memory-plan.md). Pin fewer bytes (the spark lanes pin 4-24 GiB, "
                      "8 GiB = 8589934592) or correct requirements.mem_total_gib_min"
                      % (pin, _gib(pin), _gib(mem_min * GIB)))
    if policy.get("mode") == "profiler" and policy.get("bytes"):
        errors.append("serve.kv_policy.bytes: set but mode is 'profiler'; use mode 'pin' to pass "
                      "--kv-cache-memory, or drop bytes (docs/memory-plan.md)")
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
    extra = serve.get("extra_args") or []
    for idx, arg in enumerate(extra):
        flag = managed_flag(arg)
        if flag:
            errors.append("serve.extra_args[%d]: %r repeats %s, which the renderer sets from the lane's own keys "
                          "(docs/lanes.md); set the lane key instead and drop it from extra_args" % (idx, arg, flag))
    template = serve.get("chat_template")
    mounts = lane_mount_targets(lane)
    if template and not under_mount(template, mounts):
        errors.append("serve.chat_template: %r is under no directory the container mounts (%s); put the template in "
                      "the checkpoint directory (%s/...) or add a container.mounts entry for it"
                      % (template, ", ".join(mounts), (lane.get("checkpoint") or {}).get("container_path")))
    kv_dtype = serve.get("kv_cache_dtype")
    if kv_dtype in NVFP4_KV_DTYPES and method == "dflash" and lane.get("tensor_parallel_size") == 2 \
            and lane.get("allow_nvfp4_kv_dflash2_tp2") is not True:
        errors.append("serve.kv_cache_dtype: %s with speculative method dflash at tensor_parallel_size 2 kills the "
                      "rank-0 worker on any prompt that needs chunked prefill (> ~3K tokens; TP2 report status table, "
                      "docs/lanes.md KV-dtype lanes). Use kv_cache_dtype fp8_e4m3 (every lane ships it), or "
                      "set allow_nvfp4_kv_dflash2_tp2: true to run it anyway" % kv_dtype)
    targets = (lane.get("padding") or {}).get("config_targets") or {}
    for key in sorted(targets):
        value = targets[key]
        tp = lane.get("tensor_parallel_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append("padding.config_targets.%s: expected a positive int, got %r" % (key, value))
        elif isinstance(tp, int) and tp > 0 and value % tp:
            errors.append("padding.config_targets.%s: %d does not divide by tensor_parallel_size %d; pad to a "
                          "multiple of it (catalogue drafter_heads)" % (key, value, tp))
    return errors


def validate_lane(lane, name=None):
    """Return a list of human-readable errors (empty when the lane is valid)."""
    if not isinstance(lane, dict):
        return ["lane %s: expected a mapping, got %s" % (name or "?", value_type(lane))]
    if not HAS_JSONSCHEMA:
        return ["lane %s: the controller lacks the Python package jsonschema; pip install -r requirements.txt"
                % (name or "?")]
    errors = schema_errors(lane)
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
