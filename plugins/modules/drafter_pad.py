#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: drafter_pad
short_description: Zero-pad the attention heads of a safetensors checkpoint for tensor parallelism
version_added: "0.1.0"
description:
  - Pads every C(*.self_attn.{q,k,v}_proj) weight (rows) and bias, and every C(*.self_attn.o_proj.weight)
    (columns), of a safetensors checkpoint from its released head counts to the lane's, with zero
    head blocks appended at the end (docs/tp-padding.md). The DFlash2 drafter goes from 32 query
    / 8 kv heads to 48 / 12 at tensor-parallel size 3 (catalogue drafter_heads); the simulated fleet's tiny
    Qwen3 model from 4 / 2 to 6 / 3.
  - Appending at the end is exact only when the GQA group (query heads per kv head) is kept - query
    head i still reads kv head i // group, the real heads keep their kv heads and every pad query
    head reads a pad kv head and contributes zero through the zero o_proj columns. Targets that
    change the group, do not divide by the tensor-parallel size, or shrink a dimension are refused.
  - Per-head norms (C(q_norm), C(k_norm), shape [head_dim]) and every other tensor are copied verbatim.
  - Updates C(config.json) (C(num_attention_heads), C(num_key_value_heads)) and adds a
    C(_tp<N>_head_pad) record of the released counts, which is how a padded checkpoint is recognised.
  - Files are rewritten in place, atomically; each changed file is first copied once to
    I(backup_suffix) (an existing backup is never overwritten). Weights are written before
    C(config.json), so an interrupted run is completed by the next one. Written files are 0644 and the
    directory 0755. Output is bit-identical run to run.
  - With I(verify=true) one attention layer (the lowest layer number) is computed with the released
    and the padded weights on random inputs (float64, causal GQA attention then o_proj) and the run
    fails if the maximum absolute difference exceeds I(tolerance) x max(max|reference|, 1); every pad
    block of every layer is also checked to be exactly zero.
  - When the tensor-parallel size divides the released head counts nothing is touched.
author:
  - dgxspark.vllm maintainers (@dgxspark)
requirements:
  - Python 3 on the host that owns the files. numpy is optional - it makes the check fast; without it the
    check runs in plain Python, which is refused (missing numpy) for layers too large to finish in about
    half a minute (the real DFlash2 drafter's hidden size 4096 needs numpy or I(verify=false)).
options:
  path:
    description: Checkpoint directory holding C(config.json) and C(*.safetensors) (and optionally C(model.safetensors.index.json)).
    type: path
    required: true
  tensor_parallel_size:
    description: Tensor-parallel size of the lane.
    type: int
    required: true
  num_attention_heads:
    description: Target number of query heads (the lane's C(heads_padding.num_attention_heads)).
    type: int
    required: true
  num_key_value_heads:
    description: Target number of kv heads (the lane's C(heads_padding.num_key_value_heads)).
    type: int
    required: true
  expect_num_attention_heads:
    description: Refuse a source whose released query head count differs (32 for the DFlash2 drafter, docs/tp-padding.md).
    type: int
  expect_num_key_value_heads:
    description: Refuse a source whose released kv head count differs (8 for the DFlash2 drafter).
    type: int
  backup_suffix:
    description: Suffix of the one-time backups of the files this module rewrites.
    type: str
    default: .orig
  verify:
    description: Run the numerical equivalence check and the zero-pad check (also in check mode, in memory).
    type: bool
    default: true
  tolerance:
    description: Relative tolerance of the check, against max(max|reference output|, 1) (docs/tp-padding.md uses 1e-4).
    type: float
    default: 0.0001
  seed:
    description: Seed of the random input (16 tokens x hidden_size) of the check.
    type: int
    default: 0
  checksum:
    description: Return the sha256 of C(config.json) and of each rewritten safetensors file, to compare copies across nodes.
    type: bool
    default: true
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - numpy has no bfloat16, so the safetensors library cannot hand a bf16 checkpoint to numpy, and the nodes
    may not have numpy at all. This module reads and writes the safetensors format itself with the standard
    library (an 8-byte header length, a JSON header, raw data, the same byte layout the safetensors library
    writes) and pads tensors as bytes; zero bits are 0.0 in every float format. bf16 is widened to float only
    for the check.
  - Quantised attention tensors (scales next to C(q_proj.weight)) are refused.
  - Sources - docs/tp-padding.md (Y3 C(scripts/pad-dflash2-drafter.py)), catalogue drafter_heads, docs/tp-padding.md.
"""

EXAMPLES = r"""
- name: Pad the DFlash2 drafter 32/8 -> 48/12 for tensor-parallel size 3
  dgxspark.vllm.drafter_pad:
    path: /var/tmp/models/dflash2-draft
    tensor_parallel_size: 3
    num_attention_heads: 48
    num_key_value_heads: 12
    expect_num_attention_heads: 32
    expect_num_key_value_heads: 8
  register: drafter_pad_result

- name: Pad the simulated fleet's tiny model 4/2 -> 6/3
  dgxspark.vllm.drafter_pad:
    path: /var/tmp/models/tiny-glm
    tensor_parallel_size: 3
    num_attention_heads: 6
    num_key_value_heads: 3
"""

RETURN = r"""
msg:
  description: One line, e.g. C(padded 32/8 -> 48/12 heads in 1 file(s), verify max|diff| 0.000e+00 (tp=3)).
  returned: always
  type: str
state:
  description: C(pad) (written, or would be in check mode), C(at_target) (already padded) or
    C(divides) (tensor-parallel size divides the released heads; untouched).
  returned: always
  type: str
geometry:
  description: Released and target heads, GQA group, head_dim and hidden size.
  returned: always
  type: dict
  sample: {q: 32, kv: 8, target_q: 48, target_kv: 12, group: 4, head_dim: 128, hidden: 4096}
tensors:
  description: Attention tensors changed (or already at target), each C({name, file, dtype, from, to}) with shapes.
  returned: always
  type: list
  elements: dict
files:
  description: Files rewritten by this run (relative to I(path)); empty when nothing changed.
  returned: always
  type: list
  elements: str
verify:
  description: C({layer, max_abs_diff, output_scale, tolerance, limit, reference, engine, pads_zero, passed});
    C(engine) is C(numpy) or C(python); C(reference)
    is C(backup) (released weights read from the backups or the source) or C(sliced) (no backup - the padded
    weights cut back to the released heads).
  returned: when verify is true and the heads are padded or at target
  type: dict
sha256:
  description: sha256 of C(config.json) and of each safetensors file holding attention tensors.
  returned: when checksum is true
  type: dict
"""

import json
import os
import re
import shutil
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import (
    DTYPE_BYTES, PaddingError, as_matrix, cut_bytes, dump_config, heads_plan, list_safetensors, pad_bytes,
    padded_config, read_header, tensor_bytes, tensor_pad_spec, verify_cost, verify_layer,
    write_safetensors)
from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import sha256_file

try:
    import numpy as np
    HAS_NUMPY = True
    NUMPY_IMPORT_ERROR = None
except ImportError:
    np = None
    HAS_NUMPY = False
    NUMPY_IMPORT_ERROR = traceback.format_exc()

INDEX = "model.safetensors.index.json"
LAYER_RE = re.compile(r"^(.*?)(\d+)\.self_attn\.")
PY_VERIFY_BUDGET = 3e8  # multiply-adds; about half a minute in plain Python
LAYER_TENSORS = {"q": "q_proj.weight", "k": "k_proj.weight", "v": "v_proj.weight", "o": "o_proj.weight",
                 "q_bias": "q_proj.bias", "k_bias": "k_proj.bias", "v_bias": "v_proj.bias",
                 "q_norm": "q_norm.weight", "k_norm": "k_norm.weight"}


def scan(directory, geo, suffix=""):
    """{file: {'header','meta','start','path','specs': {name: spec}}} for every safetensors file."""
    out = {}
    for fname in list_safetensors(directory):
        path = os.path.join(directory, fname + suffix)
        if not os.path.exists(path):
            continue
        header, meta, start = read_header(path)
        specs = {}
        for name, info in header.items():
            spec = tensor_pad_spec(name, info["shape"], geo)
            if spec is not None:
                specs[name] = spec
        out[fname] = {"header": header, "meta": meta, "start": start, "specs": specs, "path": path}
    return out


def file_state(fname, entry):
    states = set(s[3] for s in entry["specs"].values())
    if len(states) > 1:
        raise PaddingError("%s: some attention tensors are padded and others are not (%s are); restore it from "
                           "its backup and run drafter_pad again" % (fname, ", ".join(
                               sorted(n for n, s in entry["specs"].items() if s[3] == "at_target"))[:400]))
    return states.pop() if states else None


def padded_tensors(entry):
    """{name: (dtype, shape, source)} of one file after padding; unchanged tensors are copied from disk."""
    out = {}
    for name, info in entry["header"].items():
        spec = entry["specs"].get(name)
        shape = [int(d) for d in info["shape"]]
        if spec is not None and spec[3] == "pad":
            axis, _src, dst, _state = spec
            data = pad_bytes(tensor_bytes(entry["path"], entry["start"], info), shape, axis, dst,
                             DTYPE_BYTES[info["dtype"]])
            shape[axis] = dst
            out[name] = (info["dtype"], shape, data)
        else:
            b, e = info["data_offsets"]
            out[name] = (info["dtype"], shape, (entry["path"], entry["start"] + b, e - b))
    return out


def layer_prefix(files):
    best = None
    for entry in files.values():
        for name in entry["specs"]:
            m = LAYER_RE.match(name)
            if m and (best is None or int(m.group(2)) < best[0]):
                best = (int(m.group(2)), "%s%s.self_attn." % (m.group(1), m.group(2)))
    return best


def layer_raw(files, prefix):
    """{key: (dtype, shape, bytes)} of one attention layer as stored."""
    out = {}
    for key, suffix in LAYER_TENSORS.items():
        name = prefix + suffix
        for entry in files.values():
            if name in entry["header"]:
                info = entry["header"][name]
                out[key] = (info["dtype"], [int(d) for d in info["shape"]],
                            tensor_bytes(entry["path"], entry["start"], info))
                break
        else:
            if key in ("q", "k", "v", "o"):
                raise PaddingError("tensor %s not found; cannot verify the layer" % name)
    return out


def transform_layer(raw, geo, pad):
    """Pad (pad=True) or cut back (pad=False) one layer's raw tensors to the other geometry."""
    hd = geo["head_dim"]
    heads = {"q": ("q", "target_q"), "k": ("kv", "target_kv"), "v": ("kv", "target_kv"), "o": ("q", "target_q"),
             "q_bias": ("q", "target_q"), "k_bias": ("kv", "target_kv"), "v_bias": ("kv", "target_kv")}
    out = dict(raw)
    for key, (src_key, dst_key) in heads.items():
        if key not in raw:
            continue
        dtype, shape, data = raw[key]
        axis = 1 if key == "o" else 0
        n = (geo[dst_key] if pad else geo[src_key]) * hd
        if pad:
            data = pad_bytes(data, shape, axis, n, DTYPE_BYTES[dtype])
        else:
            data = cut_bytes(data, shape, axis, n, DTYPE_BYTES[dtype])[0]
        shape = list(shape)
        shape[axis] = n
        out[key] = (dtype, shape, data)
    return out


def floats(raw):
    return dict((k, as_matrix(np, dtype, shape, data)) for k, (dtype, shape, data) in raw.items())


def nonzero_pads(files):
    """Names of padded attention tensors whose pad block is not all zero bits."""
    bad = []
    for entry in files.values():
        for name, (axis, src, dst, _state) in entry["specs"].items():
            info = entry["header"][name]
            if int(info["shape"][axis]) != dst:
                continue
            tail = cut_bytes(tensor_bytes(entry["path"], entry["start"], info), info["shape"], axis, src,
                             DTYPE_BYTES[info["dtype"]])[1]
            if tail.count(0) != len(tail):
                bad.append(name)
    return sorted(bad)


def write_atomic(module, directory, fname, writer):
    fd, tmp = tempfile.mkstemp(prefix=".%s." % fname, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
        os.chmod(tmp, 0o644)
    except Exception:
        os.unlink(tmp)
        raise
    module.atomic_move(tmp, os.path.join(directory, fname))
    os.chmod(os.path.join(directory, fname), 0o644)


def backup_once(directory, fname, suffix):
    src = os.path.join(directory, fname)
    if not os.path.exists(src + suffix):
        shutil.copy2(src, src + suffix)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            tensor_parallel_size=dict(type="int", required=True),
            num_attention_heads=dict(type="int", required=True),
            num_key_value_heads=dict(type="int", required=True, no_log=False),
            expect_num_attention_heads=dict(type="int"),
            expect_num_key_value_heads=dict(type="int", no_log=False),
            backup_suffix=dict(type="str", default=".orig"),
            verify=dict(type="bool", default=True),
            tolerance=dict(type="float", default=1e-4),
            seed=dict(type="int", default=0),
            checksum=dict(type="bool", default=True),
        ),
        required_together=[("expect_num_attention_heads", "expect_num_key_value_heads")],
        supports_check_mode=True,
    )
    p = module.params
    directory = p["path"]
    tp = p["tensor_parallel_size"]
    suffix = p["backup_suffix"]
    cfg_path = os.path.join(directory, "config.json")
    try:
        with open(cfg_path, "rb") as f:
            config = json.loads(f.read().decode("utf-8"))
    except (IOError, OSError, ValueError) as e:
        module.fail_json(msg="%s: cannot read the checkpoint config (%s); check the lane's host_path" % (cfg_path, e))
    if not isinstance(config, dict):
        module.fail_json(msg="%s: a JSON %s, not an object; restore the drafter's config.json (the lane's "
                             "drafter.host_path)" % (cfg_path, type(config).__name__))

    result = dict(changed=False, files=[], tensors=[], path=directory)
    todo = []
    try:
        geo = heads_plan(config, p["num_attention_heads"], p["num_key_value_heads"], tp,
                         p["expect_num_attention_heads"], p["expect_num_key_value_heads"], path=cfg_path)
        geo_keys = ("q", "kv", "target_q", "target_kv", "group", "head_dim", "hidden")
        result["geometry"] = dict((k, geo[k]) for k in geo_keys)
        result["state"] = geo["state"]
        if geo["state"] == "divides":
            result["msg"] = ("tensor-parallel size %d divides the released %d/%d heads; unchanged"
                             % (tp, geo["q"], geo["kv"]))
            module.exit_json(**result)
        if p["verify"] and not HAS_NUMPY and verify_cost(geo) > PY_VERIFY_BUDGET:
            module.fail_json(msg=missing_required_lib("numpy", reason="to verify a layer of hidden size %d (or set "
                                                                      "verify: false)" % geo["hidden"]),
                             exception=NUMPY_IMPORT_ERROR, **result)

        files = scan(directory, geo)
        for fname, entry in sorted(files.items()):
            state = file_state(fname, entry)
            if state == "pad":
                if geo["state"] == "at_target":
                    raise PaddingError("%s says %d/%d heads but %s still holds unpadded attention tensors; restore "
                                       "the released checkpoint from the %s backups and run drafter_pad again"
                                       % (cfg_path, geo["target_q"], geo["target_kv"], fname, suffix))
                todo.append(fname)
            for name, (axis, src, dst, _s) in sorted(entry["specs"].items()):
                shape = [int(d) for d in entry["header"][name]["shape"]]
                result["tensors"].append({"name": name, "file": fname, "dtype": entry["header"][name]["dtype"],
                                          "from": shape[:axis] + [src] + shape[axis + 1:],
                                          "to": shape[:axis] + [dst] + shape[axis + 1:]})
        if not result["tensors"]:
            raise PaddingError("%s: no *.self_attn.{q,k,v,o}_proj tensors in %s; nothing to pad"
                               % (directory, ", ".join(sorted(files)) or "no safetensors file"))
        first = layer_prefix(files)
        changed = geo["state"] == "pad"

        # Reference weights of the first layer: the released files (before writing, or their backups).
        reference = None
        if p["verify"] and first is not None:
            if changed:
                reference = ("backup", layer_raw(files, first[1]))
            else:
                try:
                    backups = scan(directory, dict(geo, state="pad"), suffix)
                    reference = ("backup", layer_raw(backups, first[1])) if backups else None
                except PaddingError:
                    reference = None
                if reference is not None and reference[1]["q"][1][0] != geo["q"] * geo["head_dim"]:
                    reference = None

        if changed:
            result["changed"] = True
            result["files"] = list(todo) + ["config.json"]
            if os.path.exists(os.path.join(directory, INDEX)):
                result["files"].append(INDEX)
            if module._diff:
                result["diff"] = dict(
                    before_header=cfg_path, after_header=cfg_path,
                    before="num_attention_heads: %d\nnum_key_value_heads: %d\n" % (
                        geo["current_q"], geo["current_kv"]),
                    after="num_attention_heads: %d\nnum_key_value_heads: %d\n_tp%d_head_pad: {num_attention_heads: "
                          "%d, num_key_value_heads: %d}\n" % (geo["target_q"], geo["target_kv"], tp, geo["q"],
                                                              geo["kv"]))

        if changed and not module.check_mode:
            # Weights first, config.json last: the config is the marker of a finished pad.
            for fname in todo:
                backup_once(directory, fname, suffix)
                tensors = padded_tensors(files[fname])
                meta = files[fname]["meta"] or {"format": "pt"}
                write_atomic(module, directory, fname, lambda f, t=tensors, m=meta: write_safetensors(f, t, m))
            index_path = os.path.join(directory, INDEX)
            if os.path.exists(index_path):
                with open(index_path, "rb") as f:
                    index = json.loads(f.read().decode("utf-8"))
                total = 0
                for fname in list_safetensors(directory):
                    header = read_header(os.path.join(directory, fname))[0]
                    total += sum(i["data_offsets"][1] - i["data_offsets"][0] for i in header.values())
                meta = index.get("metadata")
                if isinstance(meta, dict) and "total_size" in meta and meta["total_size"] != total:
                    backup_once(directory, INDEX, suffix)
                    meta["total_size"] = total
                    data = dump_config(index).encode("utf-8")
                    write_atomic(module, directory, INDEX, lambda f, d=data: f.write(d))
            backup_once(directory, "config.json", suffix)
            data = dump_config(padded_config(config, geo, tp)).encode("utf-8")
            write_atomic(module, directory, "config.json", lambda f, d=data: f.write(d))
            if os.stat(directory).st_mode & 0o777 != 0o755:
                os.chmod(directory, 0o755)
            files = scan(directory, geo)

        if p["verify"] and first is not None:
            if changed and module.check_mode:
                padded_raw = transform_layer(reference[1], geo, pad=True)
                zero_bad = []
            else:
                padded_raw = layer_raw(files, first[1])
                zero_bad = nonzero_pads(files)
            if reference is None:
                reference = ("sliced", transform_layer(padded_raw, geo, pad=False))
            diff, scale = verify_layer(np, floats(reference[1]), floats(padded_raw), geo, seed=p["seed"])
            limit = p["tolerance"] * max(scale, 1.0)
            result["verify"] = {"layer": first[1].rstrip("."), "max_abs_diff": diff, "output_scale": scale,
                                "tolerance": p["tolerance"], "limit": limit, "reference": reference[0],
                                "engine": "numpy" if HAS_NUMPY else "python",
                                "pads_zero": not zero_bad, "passed": diff <= limit and not zero_bad}
            if zero_bad:
                raise PaddingError("%s: pad blocks are not zero in %s; restore the backups and run drafter_pad again"
                                   % (directory, ", ".join(zero_bad[:8])))
            if diff > limit:
                raise PaddingError("%s: layer %s output differs after padding: max|ref-padded| = %.3e > %.3e "
                                   "(tolerance %g x max(%.3e, 1)); the padding layout is wrong"
                                   % (directory, first[1].rstrip("."), diff, limit, p["tolerance"], scale))
        if p["checksum"]:
            sums = {"config.json": sha256_file(cfg_path)}
            for fname, entry in files.items():
                if entry["specs"]:
                    sums[fname] = sha256_file(entry["path"])
            result["sha256"] = sums
    except PaddingError as e:
        module.fail_json(msg=str(e), **result)
    except (IOError, OSError) as e:
        module.fail_json(msg="%s: %s; is the checkpoint directory writable on this host (weights owner)?"
                         % (directory, e), **result)

    verify_txt = ""
    if "verify" in result:
        verify_txt = ", verify max|diff| %.3e at output scale %.3e" % (
            result["verify"]["max_abs_diff"], result["verify"]["output_scale"])
    if result["changed"]:
        result["msg"] = "padded %d/%d -> %d/%d heads in %d file(s)%s (tp=%d)" % (
            geo["q"], geo["kv"], geo["target_q"], geo["target_kv"], len(todo), verify_txt, tp)
    else:
        result["msg"] = "already padded: %d/%d -> %d/%d heads%s (tp=%d)" % (
            geo["q"], geo["kv"], geo["target_q"], geo["target_kv"], verify_txt, tp)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
