# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""What the engine will refuse in a checkpoint's config.json, checked before any rank stops (issue 32).

vLLM derives the longest context a checkpoint supports from its config.json and refuses a larger --max-model-len at
startup ("User-specified max_model_len (...) is greater than the derived max_model_len ..."), after the old group was
already torn down. The rule, as vLLM's config code applies it: the smallest of the length keys present
(POSSIBLE_KEYS); with rope_scaling of a type other than su, longrope or llama3, times its factor (1 when absent), from
original_max_position_embeddings for yarn. VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the rank's environment lets vLLM start
anyway (with its own warning). A multimodal config's text_config is the one read when it holds the keys.

Callers: filter vllm_rank_max_model_len_errors (roles/vllm_ranks, launch guard before the spec file and any stop).
Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

POSSIBLE_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_sequence_length", "max_seq_length", "seq_len")
UNSCALED_ROPE = ("su", "longrope", "llama3")


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def derived_max_model_len(config):
    """(tokens, how) the engine derives from a config.json mapping, or (None, why) when it holds no length key."""
    cfg = config or {}
    text = cfg.get("text_config")
    if isinstance(text, dict) and any(_number(text.get(k)) is not None for k in POSSIBLE_KEYS):
        cfg = text
    found = [(cfg[k], k) for k in POSSIBLE_KEYS if _number(cfg.get(k)) is not None]
    if not found:
        return None, "config.json holds none of %s" % ", ".join(POSSIBLE_KEYS)
    value, key = min(found)
    how = "%s=%s" % (key, value)
    rope = cfg.get("rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in UNSCALED_ROPE:
            factor = _number(rope.get("factor"))
            factor = 1.0 if factor is None else factor
            if kind == "yarn" and _number(rope.get("original_max_position_embeddings")) is not None:
                value = rope["original_max_position_embeddings"]
                how = "rope_scaling yarn original_max_position_embeddings=%s" % value
            value = value * factor
            how += " x rope_scaling factor %g (%s)" % (factor, kind)
    return int(value), how


def max_model_len_errors(host, path, config, max_model_len, env=None):
    """Messages when the lane's serve.max_model_len exceeds what the engine derives from config.json at `path` on
    `host` (empty when it fits, when no length key is there, or when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set)."""
    if max_model_len is None:
        return []
    limit, how = derived_max_model_len(config)
    if limit is None or int(max_model_len) <= limit:
        return []
    if str((env or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")).strip().lower() in ("1", "true"):
        return []
    return ["%s: serve.max_model_len %d is above the %d tokens the engine derives from %s (%s): every rank would exit "
            "at startup ('User-specified max_model_len ... is greater than the derived max_model_len'), so no rank was "
            "stopped. Fix: set serve.max_model_len to at most %d in vllm_lane_overrides, or use a checkpoint whose "
            "config.json allows it" % (host, int(max_model_len), limit, path, how, limit)]
