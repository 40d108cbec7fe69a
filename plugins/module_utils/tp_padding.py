# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Tensor-parallel padding logic shared by tp_config_pad, drafter_pad and the tp_pad role.

Pure Python; numpy is imported only inside the functions that touch tensors, so the
config half (tp_config_pad) stays stdlib-only on the target.

Sources (docs/tp-padding.md, the TP3 field report): the geometry; config.json padding (lcm(tp, 64)
width rule, ceil-to-tp head rule, backup and idempotence); DFlash2 drafter 32q/8kv -> 48q/12kv
(zero head blocks appended at the end, GQA ratio kept, numerical verification); catalogue
drafter_heads (drafter heads must divide by tp; 36/9 divides but does not boot).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import re
import struct

ALIGN = 64  # NVFP4 16-value blocks and Marlin tiles stay aligned on multiples of 64 (docs/tp-padding.md)

STATE_AT_TARGET = "at_target"
STATE_NEEDS_PAD = "needs_pad"
STATE_INCONSISTENT = "inconsistent"
STATE_ABSENT = "absent"


class PaddingError(Exception):
    """A refusal with a message naming the file, the key or tensor, both values and the fix."""


# ---------------------------------------------------------------------------------------------
# candidates (explain / check lane targets only; the lane's targets are what gets written)
# ---------------------------------------------------------------------------------------------

def lcm(a, b):
    return a * b // math.gcd(a, b)


def ceil_to(value, multiple):
    return -(-value // multiple) * multiple


def is_head_key(key):
    """Head counts ('...heads', '...num_heads') use the ceil-to-tp rule; anything else is a width."""
    return key.rsplit(".", 1)[-1].endswith("heads")


def candidate(key, value, tp):
    """Candidate padded value for one key (docs/tp-padding.md).

    heads: ceil(value / tp) * tp (64 -> 66 at tp 3); widths: smallest multiple of lcm(tp, 64)
    that is >= value (2048 -> 2112 at tp 3). Both are the identity when tp already divides.
    """
    if value % tp == 0:
        return value
    if is_head_key(key):
        return ceil_to(value, tp)
    return ceil_to(value, lcm(tp, ALIGN))


def head_pad_candidate(num_heads, num_kv_heads, tp):
    """Smallest (q, kv) that keeps the GQA ratio and divides by tp: (32, 8) -> (36, 9) at tp 3.

    Only an explanation: catalogue drafter_heads shows 36/9 divides but does not boot with the
    TP3 KV layout; the lane asks for 48/12 (exact page fit, docs/tp-padding.md).
    """
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        raise PaddingError("num_attention_heads %d is not a multiple of num_key_value_heads %d"
                           % (num_heads, num_kv_heads))
    group = num_heads // num_kv_heads
    kv = ceil_to(num_kv_heads, tp)
    return kv * group, kv


# ---------------------------------------------------------------------------------------------
# dotted keys
# ---------------------------------------------------------------------------------------------

_MISSING = object()


def get_dotted(data, key, default=_MISSING):
    """Return data['a']['b'] for 'a.b'; default (or KeyError) when a level is missing."""
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is _MISSING:
                raise KeyError(key)
            return default
        node = node[part]
    return node


def set_dotted(data, key, value, create=False):
    """Set a dotted key in place. Never creates levels; creates the last key only with create=True."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    if parts[-1] not in node and not create:
        raise KeyError(key)
    node[parts[-1]] = value


# Keys the pad writes even when the released file lacks them, provided their parent dict exists.
# The runtime reads text_config.linear_num_heads (KDA heads per rank); the reference pad script sets it
# to the padded head count unconditionally (docs/tp-padding.md). Only linear_attn_config.num_heads is conditional.
WRITTEN_WHEN_ABSENT = ("text_config.linear_num_heads",)


def creatable(config, key):
    """True when key is written even if absent and its parent dict exists in config."""
    if key not in WRITTEN_WHEN_ABSENT:
        return False
    parent = key.rsplit(".", 1)[0] if "." in key else None
    return parent is None or isinstance(get_dotted(config, parent, None), dict)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# config.json plan (tp_config_pad)
# ---------------------------------------------------------------------------------------------

def config_plan(config, targets, tp, original=None, path="config.json"):
    """Plan the padding of one config.json.

    config: the parsed file; targets: {dotted key: int}; tp: tensor-parallel size;
    original: the parsed backup (config.json.orig) when one exists, else None.
    Returns a dict:
      action: 'divides' (tp divides the released geometry: leave the file alone),
              'at_target' (already padded), 'pad' (write targets), 'empty' (no targets);
      keys: {key: {current, target, original, candidate, state}} (state: at_target,
            needs_pad, inconsistent, absent);
      drift: keys that differ from the backup although tp divides (only for 'divides').
    Raises PaddingError for an inconsistent or half-padded file, a target that does not divide
    by tp, or a target below the released value; the message names file, key and both values.
    """
    if not _is_int(tp) or tp < 1:
        raise PaddingError("tensor_parallel_size must be a positive integer, got %r" % (tp,))
    keys = {}
    plan = {"path": path, "tensor_parallel_size": tp, "keys": keys, "drift": []}
    if not targets:
        plan["action"] = "empty"
        return plan
    for key in targets:
        target = targets[key]
        if not _is_int(target) or target < 1:
            raise PaddingError("%s: target for %s must be a positive integer, got %r (lane padding.config_targets)"
                               % (path, key, target))
        current = get_dotted(config, key, None)
        released = current if original is None else get_dotted(original, key, current)
        entry = {"current": current, "target": target, "original": released, "candidate": None,
                 "state": STATE_ABSENT}
        keys[key] = entry
        if current is None:
            if creatable(config, key):
                entry["create"] = True  # decided below, once the geometry says whether tp pads at all
            continue  # e.g. linear_attn_config.num_heads only where that dict exists (docs/tp-padding.md)
        if not _is_int(current) or not _is_int(released):
            raise PaddingError("%s: %s is %r, not an integer; this key cannot be padded" % (path, key, current))
        entry["candidate"] = candidate(key, released, tp)
        entry["state"] = None
    present = dict((k, v) for k, v in keys.items() if v["state"] != STATE_ABSENT)
    created = dict((k, v) for k, v in keys.items() if v.get("create"))
    if not present:
        for v in created.values():
            v.pop("create")
        plan["action"] = "empty"
        return plan

    # The geometry is judged on the released values (the backup once one exists), so a file
    # padded for tp 3 is still recognised as padded, and tp 2/4 leave any file alone (docs/tp-padding.md).
    # Without a backup, keys already at target next to keys that are not mean a partial pad,
    # never a released geometry: skip the shortcut so the file is refused below.
    at = [k for k, v in present.items() if v["current"] == v["target"]]
    partial = original is None and at and len(at) != len(present)
    if not partial and all(v["original"] % tp == 0 for v in present.values()):
        plan["action"] = "divides"
        plan["drift"] = sorted(k for k, v in present.items() if v["current"] != v["original"])
        for v in present.values():
            v["state"] = STATE_AT_TARGET if v["current"] == v["original"] else STATE_INCONSISTENT
        for v in created.values():
            v.pop("create")  # tp divides: nothing is padded, so nothing is created either
        return plan

    for key, v in created.items():
        # Not in the released file: the lane's target is written as is (docs/tp-padding.md, padded head count).
        if v["target"] % tp:
            raise PaddingError("%s: target %d for %s does not divide by tensor-parallel size %d; fix the lane's "
                               "padding.config_targets (the padded head count, docs/tp-padding.md)"
                               % (path, v["target"], key, tp))
        v["state"] = STATE_NEEDS_PAD

    problems = []
    for key, v in present.items():
        target, current, released = v["target"], v["current"], v["original"]
        if target % tp:
            raise PaddingError("%s: target %d for %s does not divide by tensor-parallel size %d; fix the lane's "
                               "padding.config_targets (candidate %d, docs/tp-padding.md)"
                               % (path, target, key, tp, v["candidate"]))
        if target < released:
            raise PaddingError("%s: target %d for %s is below the released value %d; padding never shrinks "
                               "a dimension, fix the lane's padding.config_targets" % (path, target, key, released))
        if current == target:
            v["state"] = STATE_AT_TARGET
        elif current == released and (original is not None or current % tp):
            v["state"] = STATE_NEEDS_PAD
        else:
            # Divides by tp but is neither the released value nor the target: another tool padded it.
            v["state"] = STATE_INCONSISTENT
            problems.append("%s is %d on disk but the lane's target is %d (released value %s)"
                            % (key, current, target,
                               released if original is not None else "unknown: no backup"))
    states = set(v["state"] for v in present.values())
    if not problems and states == set([STATE_AT_TARGET, STATE_NEEDS_PAD]):
        for key, v in present.items():
            if v["state"] == STATE_AT_TARGET:
                problems.append("%s is already %d (target %d)" % (key, v["current"], v["target"]))
            else:
                problems.append("%s is still %d (target %d)" % (key, v["current"], v["target"]))
                v["state"] = STATE_INCONSISTENT
    if problems:
        raise PaddingError("%s is padded inconsistently at tensor-parallel size %d: %s. Restore the released file "
                           "(cp %s.orig %s, if that backup is the released config) and run tp_config_pad again"
                           % (path, tp, "; ".join(sorted(problems)), path, path))
    plan["action"] = "at_target" if states == set([STATE_AT_TARGET]) and not created else "pad"
    return plan


def apply_plan(config, plan):
    """Return the keys changed ({key: (before, after)}) after writing the targets into config."""
    changed = {}
    if plan["action"] != "pad":
        return changed
    for key, v in plan["keys"].items():
        if v["state"] == STATE_NEEDS_PAD:
            set_dotted(config, key, v["target"], create=bool(v.get("create")))
            changed[key] = (v["current"], v["target"])
    return changed


# Keys vLLM splits across ranks (catalogue drafter_heads; docs/tp-padding.md); absent ones are skipped by the guard.
GUARD_KEYS = [
    "num_attention_heads", "num_key_value_heads", "linear_num_heads", "moe_intermediate_size",
    "text_config.num_attention_heads", "text_config.num_key_value_heads", "text_config.linear_num_heads",
    "text_config.linear_attn_config.num_heads", "text_config.moe_intermediate_size",
]


def divisibility(config, keys, tp):
    """Keys whose value tp does not split: [(key, value)], absent keys skipped (launch guard).

    kv head counts below tp are fine when tp is a multiple of them: vLLM replicates kv heads.
    """
    bad = []
    for key in keys:
        value = get_dotted(config, key, None)
        if not _is_int(value) or value <= 0:
            continue
        if key.rsplit(".", 1)[-1] == "num_key_value_heads" and value < tp and tp % value == 0:
            continue
        if value % tp:
            bad.append((key, value))
    return bad


def hf_overrides(targets):
    """The runtime --hf-overrides companion of a config pad (docs/tp-padding.md, Y3 serve.sh).

    Keys directly in text_config (or at top level) go both to the top level and into text_config;
    deeper keys (linear_attn_config.num_heads) are read only at config construction and stay on disk.
    """
    top, text = {}, {}
    for key in sorted(targets):
        parts = key.split(".")
        if len(parts) == 1:
            top[parts[0]] = targets[key]
        elif len(parts) == 2 and parts[0] == "text_config":
            top[parts[1]] = targets[key]
            text[parts[1]] = targets[key]
    if text:
        top["text_config"] = text
    return top


def dump_config(config):
    """Serialise like the reference script (docs/tp-padding.md): 2-space indent, key order kept, final newline."""
    return json.dumps(config, indent=2) + "\n"


def diff_lines(values):
    """'key: value' lines for Ansible's diff, in target order."""
    return "".join("%s: %s\n" % (k, json.dumps(v)) for k, v in values)


# ---------------------------------------------------------------------------------------------
# heads plan (drafter_pad): zero head blocks appended at the end (docs/tp-padding.md)
# ---------------------------------------------------------------------------------------------

ATTN_RE = re.compile(r"(?:^|\.)self_attn\.(q_proj|k_proj|v_proj|o_proj)\.(\w+)$")
HEAD_RECORD_KEY = "_tp%d_head_pad"
HEAD_RECORD_RE = re.compile(r"^_tp\d+_head_pad$")


def find_head_record(config):
    """(key, record) of a '_tp<N>_head_pad' block left by a previous pad, else (None, None)."""
    for key, value in config.items():
        if HEAD_RECORD_RE.match(key) and isinstance(value, dict):
            return key, value
    return None, None


def heads_plan(config, target_q, target_kv, tp, expect_q=None, expect_kv=None, path="config.json"):
    """Check a (q, kv) -> (target_q, target_kv) head pad and return its geometry.

    Rules (catalogue drafter_heads; docs/tp-padding.md): both targets divide by tp; the GQA group size (q per kv head) is kept,
    so appending at the end keeps q head i on kv head i // group and every pad q head reads a
    pad kv head; the source is the expected unpadded geometry when expect_* is given.
    The released counts come from the '_tp<N>_head_pad' record once a pad was written.
    Returns {state, q, kv, target_q, target_kv, group, head_dim, hidden}; state is 'divides'
    (tp divides the released heads: leave the files alone), 'at_target' or 'pad'.
    """
    if not isinstance(config, dict):
        raise PaddingError("%s: the config is a JSON %s, not an object; restore the checkpoint's config.json"
                           % (path, type(config).__name__))
    q = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads", q)
    hidden = config.get("hidden_size")
    if not (_is_int(q) and _is_int(kv) and _is_int(hidden)):
        raise PaddingError("%s: num_attention_heads, num_key_value_heads and hidden_size must be integers "
                           "(got %r, %r, %r)" % (path, q, kv, hidden))
    if q <= 0 or kv <= 0 or hidden <= 0:
        raise PaddingError("%s: num_attention_heads %d, num_key_value_heads %d and hidden_size %d must be positive; "
                           "the config is damaged, restore the checkpoint's config.json" % (path, q, kv, hidden))
    rkey, record = find_head_record(config)
    orig_q, orig_kv = q, kv
    if record is not None:
        orig_q, orig_kv = record.get("num_attention_heads"), record.get("num_key_value_heads")
        if not (_is_int(orig_q) and _is_int(orig_kv)) or orig_q <= 0 or orig_kv <= 0:
            raise PaddingError("%s: %s record is malformed: %r" % (path, rkey, record))
    head_dim = config.get("head_dim") or hidden // orig_q
    geo = {"state": "pad", "q": orig_q, "kv": orig_kv, "current_q": q, "current_kv": kv,
           "target_q": target_q, "target_kv": target_kv, "head_dim": head_dim, "hidden": hidden,
           "record_key": rkey}
    if expect_q is not None and (orig_q, orig_kv) != (expect_q, expect_kv):
        raise PaddingError("%s: expected an unpadded %d/%d checkpoint (num_attention_heads/num_key_value_heads), "
                           "found %d/%d; restore the released files (docs/tp-padding.md refuses any other source)"
                           % (path, expect_q, expect_kv, orig_q, orig_kv))
    if orig_kv <= 0 or orig_q % orig_kv:
        raise PaddingError("%s: %d query heads are not a multiple of %d kv heads" % (path, orig_q, orig_kv))
    geo["group"] = orig_q // orig_kv
    if orig_q % tp == 0 and orig_kv % tp == 0:
        geo["state"] = "divides"
        return geo
    for name, value in (("num_attention_heads", target_q), ("num_key_value_heads", target_kv)):
        if not _is_int(value) or value % tp:
            raise PaddingError("%s: target %s %r does not divide by tensor-parallel size %d; fix the lane's "
                               "heads_padding" % (path, name, value, tp))
    if target_q < orig_q or target_kv < orig_kv or target_q != target_kv * geo["group"]:
        raise PaddingError("%s: target %d/%d does not keep the GQA group of %d query heads per kv head of the "
                           "%d/%d source (appending at the end is exact only then); use %d/%d for the smallest "
                           "pad at tensor-parallel size %d, or a multiple of it"
                           % ((path, target_q, target_kv, geo["group"], orig_q, orig_kv)
                              + head_pad_candidate(orig_q, orig_kv, tp) + (tp,)))
    if (q, kv) == (target_q, target_kv):
        geo["state"] = "at_target"
    elif (q, kv) != (orig_q, orig_kv):
        raise PaddingError("%s: heads are %d/%d, neither the released %d/%d nor the target %d/%d; restore the "
                           "released checkpoint and run drafter_pad again"
                           % (path, q, kv, orig_q, orig_kv, target_q, target_kv))
    return geo


def padded_config(config, geo, tp):
    """The config with target heads and a record of the original counts (docs/tp-padding.md '_tp3_head_pad')."""
    out = dict(config)
    out["num_attention_heads"] = geo["target_q"]
    out["num_key_value_heads"] = geo["target_kv"]
    out[HEAD_RECORD_KEY % tp] = {
        "num_attention_heads": geo["q"],
        "num_key_value_heads": geo["kv"],
        "tensor_parallel_size": tp,
        "note": "zero head blocks appended at the end of q/k/v_proj rows and o_proj columns (dgxspark.vllm.drafter_pad)",
    }
    return out


def tensor_pad_spec(name, shape, geo):
    """How one tensor changes: None (copy verbatim), or (axis, from_len, to_len, state).

    state is 'pad' or 'at_target'. Raises PaddingError for an attention tensor whose shape is
    neither the source nor the target, or a suffix it cannot pad (quantisation scales).
    """
    m = ATTN_RE.search(name)
    if not m:
        return None
    proj, suffix = m.groups()
    hd = geo["head_dim"]
    heads = {"q_proj": (geo["q"], geo["target_q"]), "k_proj": (geo["kv"], geo["target_kv"]),
             "v_proj": (geo["kv"], geo["target_kv"]), "o_proj": (geo["q"], geo["target_q"])}[proj]
    if suffix not in ("weight", "bias"):
        raise PaddingError("tensor %s: cannot pad '%s' tensors (quantised attention?); drafter_pad handles "
                           "weight and bias only" % (name, suffix))
    if proj == "o_proj":
        if suffix == "bias":
            return None  # o_proj bias is per output feature (hidden), not per head
        axis = 1
    else:
        axis = 0
    if len(shape) <= axis:
        raise PaddingError("tensor %s: shape %s has no axis %d" % (name, list(shape), axis))
    src, dst = heads[0] * hd, heads[1] * hd
    if shape[axis] == dst:
        return (axis, src, dst, "at_target")
    if shape[axis] == src:
        return (axis, src, dst, "pad")
    raise PaddingError("tensor %s: axis %d is %d, expected %d (source %d heads x %d) or %d (target)"
                       % (name, axis, shape[axis], src, heads[0], hd, dst))


# ---------------------------------------------------------------------------------------------
# safetensors codec, stdlib only. numpy has no bfloat16 (safetensors.numpy cannot load a bf16
# drafter) and the nodes may have no numpy at all; padding only appends zero bits, which is 0.0
# in every float format, so tensors are handled as bytes and decoded only for verification.
# ---------------------------------------------------------------------------------------------

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
_COPY_CHUNK = 16 << 20


def _prod(values):
    out = 1
    for v in values:
        out *= int(v)
    return out


def header_of(path):
    """The safetensors framing: (header JSON object with __metadata__ as stored, data start offset).

    Checks the 8-byte length and that the header is a JSON object, nothing about the tensors; the one reader
    of the format for tp_pad and model_weights' read check (module weights_read_check).
    """
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise PaddingError("%s: not a safetensors file (short header)" % path)
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise PaddingError("%s: not a safetensors file (header length %d)" % (path, n))
        blob = f.read(n)
    try:
        header = json.loads(blob.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise PaddingError("%s: not a safetensors file: its %d-byte header is not JSON (%s); re-download the shard "
                           "(model_weights) and check its sha256" % (path, n, e))
    if not isinstance(header, dict):
        raise PaddingError("%s: not a safetensors file: its header is a JSON %s, not an object; re-download the shard"
                           % (path, type(header).__name__))
    return header, 8 + n


def read_header(path):
    """Return (header dict without __metadata__, metadata dict, data start offset)."""
    header, start = header_of(path)
    meta = header.pop("__metadata__", None) or {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise PaddingError("%s: tensor %s has a malformed header entry %r; re-download the shard" % (path, name, info))
        if info.get("dtype") not in DTYPE_BYTES:
            raise PaddingError("%s: tensor %s has unsupported dtype %r" % (path, name, info.get("dtype")))
    return header, meta, start


def tensor_bytes(path, start, info):
    b, e = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(start + b)
        data = f.read(e - b)
    if len(data) != e - b:
        raise PaddingError("%s: truncated tensor data" % path)
    return data


def pad_bytes(data, shape, axis, to_len, itemsize):
    """Append zero blocks along axis 0 (rows) or 1 (columns of a 2-D tensor) up to to_len."""
    shape = [int(d) for d in shape]
    if axis == 0:
        return data + b"\0" * ((to_len - shape[0]) * itemsize * _prod(shape[1:]))
    width = shape[1] * itemsize
    extra = b"\0" * ((to_len - shape[1]) * itemsize)
    return b"".join(data[r * width:(r + 1) * width] + extra for r in range(shape[0]))


def cut_bytes(data, shape, axis, to_len, itemsize):
    """The inverse of pad_bytes: keep the first to_len entries along axis; returns (kept, tail)."""
    shape = [int(d) for d in shape]
    if axis == 0:
        row = itemsize * _prod(shape[1:])
        return data[:to_len * row], data[to_len * row:]
    width = shape[1] * itemsize
    keep = to_len * itemsize
    rows = [data[r * width:(r + 1) * width] for r in range(shape[0])]
    return b"".join(r[:keep] for r in rows), b"".join(r[keep:] for r in rows)


def write_safetensors(fileobj, tensors, metadata):
    """Write {name: (dtype, shape, source)} deterministically; source is bytes or (path, offset, length).

    Same layout as the safetensors library: larger dtypes first, then by name; JSON header
    without spaces, padded with spaces to a multiple of 8 bytes. Returns bytes written.
    """
    order = sorted(tensors, key=lambda k: (-DTYPE_BYTES[tensors[k][0]], k))
    header = {}
    if metadata:
        header["__metadata__"] = dict((str(k), str(v)) for k, v in sorted(metadata.items()))
    offset = 0
    for name in order:
        dtype, shape, source = tensors[name]
        size = len(source) if isinstance(source, bytes) else source[2]
        if size != _prod(shape) * DTYPE_BYTES[dtype]:
            raise PaddingError("tensor %s: %d bytes for shape %s %s" % (name, size, list(shape), dtype))
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * ((8 - len(blob) % 8) % 8)
    fileobj.write(struct.pack("<Q", len(blob)))
    fileobj.write(blob)
    for name in order:
        source = tensors[name][2]
        if isinstance(source, bytes):
            fileobj.write(source)
            continue
        path, at, left = source
        with open(path, "rb") as f:
            f.seek(at)
            while left:
                chunk = f.read(min(left, _COPY_CHUNK))
                if not chunk:
                    raise PaddingError("%s: truncated tensor data" % path)
                fileobj.write(chunk)
                left -= len(chunk)
    return 8 + len(blob) + offset


def decode_floats(data, dtype):
    """Little-endian tensor bytes -> list of Python floats (BF16 via the upper half of float32)."""
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % (len(data) // 2), data)
        return list(struct.unpack("<%df" % len(halves), struct.pack("<%dI" % len(halves), *[h << 16 for h in halves])))
    fmt = {"F16": "e", "F32": "f", "F64": "d"}.get(dtype)
    if fmt is None:
        raise PaddingError("cannot verify attention tensors of dtype %s" % dtype)
    return list(struct.unpack("<%d%s" % (len(data) // DTYPE_BYTES[dtype], fmt), data))


def as_matrix(np, dtype, shape, data):
    """Float64 weights for verification: a numpy array, or (np None) a list of rows / a flat list."""
    if np is not None:
        if dtype == "BF16":
            arr = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in ("F16", "F32", "F64"):
            arr = np.frombuffer(data, dtype={"F16": "<f2", "F32": "<f4", "F64": "<f8"}[dtype])
        else:
            raise PaddingError("cannot verify attention tensors of dtype %s" % dtype)
        return arr.astype(np.float64).reshape([int(d) for d in shape])
    flat = decode_floats(data, dtype)
    if len(shape) == 1:
        return flat
    cols = int(shape[1])
    return [flat[r * cols:(r + 1) * cols] for r in range(int(shape[0]))]


# ---------------------------------------------------------------------------------------------
# verification: one attention layer with the original and the padded weights (docs/tp-padding.md)
# ---------------------------------------------------------------------------------------------

def attention_forward(np, x, w, n_heads, n_kv, head_dim, eps=1e-6):
    """GQA self-attention with a causal mask, then o_proj; float64 numpy.

    w: {'q','k','v','o'} weights, optional 'q_bias','k_bias','v_bias','q_norm','k_norm'.
    kv heads are repeated in place (repeat_interleave), so q head i reads kv head i // group,
    the layout vLLM and transformers use.
    """
    seq = x.shape[0]

    def proj(name):
        out = x @ w[name].T
        if (name + "_bias") in w:
            out = out + w[name + "_bias"]
        return out

    q = proj("q").reshape(seq, n_heads, head_dim)
    k = proj("k").reshape(seq, n_kv, head_dim)
    v = proj("v").reshape(seq, n_kv, head_dim)
    for name, t in (("q_norm", q), ("k_norm", k)):
        if name in w:  # Qwen3 per-head RMSNorm over head_dim: a zero head stays zero
            t *= w[name] / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + eps)
    group = n_heads // n_kv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    mask = np.triu(np.ones((seq, seq), dtype=bool), 1)
    scores = np.where(mask[None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    ctx = np.einsum("hqk,khd->qhd", probs, v).reshape(seq, n_heads * head_dim)
    return ctx @ w["o"].T


def attention_forward_py(x, w, n_heads, n_kv, head_dim, eps=1e-6):
    """The same computation in plain Python (nodes without numpy; small layers only)."""
    def matvec(rows, vec, bias=None):
        out = [sum(a * b for a, b in zip(row, vec)) for row in rows]
        return [o + c for o, c in zip(out, bias)] if bias is not None else out

    def heads(vec, n, norm):
        hs = [vec[h * head_dim:(h + 1) * head_dim] for h in range(n)]
        if norm is not None:
            hs = [[a * g / math.sqrt(sum(b * b for b in h) / head_dim + eps) for a, g in zip(h, norm)] for h in hs]
        return hs

    group = n_heads // n_kv
    qs = [heads(matvec(w["q"], t, w.get("q_bias")), n_heads, w.get("q_norm")) for t in x]
    ks = [heads(matvec(w["k"], t, w.get("k_bias")), n_kv, w.get("k_norm")) for t in x]
    vs = [heads(matvec(w["v"], t, w.get("v_bias")), n_kv, None) for t in x]
    out = []
    for i in range(len(x)):
        ctx = []
        for h in range(n_heads):
            g = h // group
            s = [sum(a * b for a, b in zip(qs[i][h], ks[j][g])) / math.sqrt(head_dim) for j in range(i + 1)]
            top = max(s)
            e = [math.exp(v - top) for v in s]
            tot = sum(e)
            ctx.extend(sum(e[j] / tot * vs[j][g][d] for j in range(i + 1)) for d in range(head_dim))
        out.append(matvec(w["o"], ctx))
    return out


def verify_inputs(hidden, seed=0, seq=16):
    """Random inputs (seq x hidden, standard normal) from Python's own generator: both paths agree."""
    import random
    rnd = random.Random(seed)
    return [[rnd.gauss(0.0, 1.0) for dummy in range(hidden)] for dummy in range(seq)]


def verify_layer(np, original, padded, geo, seed=0, seq=16):
    """Run the layer with both weight sets (from as_matrix); return (max_abs_diff, output_scale)."""
    x = verify_inputs(geo["hidden"], seed, seq)
    if np is not None:
        xa = np.asarray(x, dtype=np.float64)
        ref = attention_forward(np, xa, original, geo["q"], geo["kv"], geo["head_dim"])
        out = attention_forward(np, xa, padded, geo["target_q"], geo["target_kv"], geo["head_dim"])
        return float(np.max(np.abs(ref - out))), float(np.max(np.abs(ref)))
    ref = attention_forward_py(x, original, geo["q"], geo["kv"], geo["head_dim"])
    out = attention_forward_py(x, padded, geo["target_q"], geo["target_kv"], geo["head_dim"])
    diff = max(abs(a - b) for ra, rb in zip(ref, out) for a, b in zip(ra, rb))
    return diff, max(abs(a) for row in ref for a in row)


def verify_cost(geo, seq=16):
    """Multiply-adds of one verification (both runs); pure Python manages about 1e7 per second."""
    hd, hidden = geo["head_dim"], geo["hidden"]
    total = 0
    for q, kv in ((geo["q"], geo["kv"]), (geo["target_q"], geo["target_kv"])):
        total += seq * hidden * (q + 2 * kv) * hd + seq * q * hd * hidden + seq * seq * q * hd
    return total


def list_safetensors(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
