# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""KV-cache pin per rank from docs/memory-plan.md formula (logic in module_utils/memory_plan.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: kv_cache_bytes
short_description: KV-cache pin per rank, in bytes, from context length, concurrency and bytes per token
version_added: 0.1.0
author: dgxspark.vllm maintainers
description:
  - "Returns C(max_model_len) (tokens per request) x C(concurrency) (requests held at full context)
     x C(bytes_per_token_per_rank) (bytes of KV per token on one rank), rounded down to whole bytes.
     This is the value passed as C(--kv-cache-memory) (bytes, not GiB)."
  - "Source: docs/memory-plan.md (Y3 recipe: 524288 x 2.5 x 8793 = 11525160960). Measure bytes per token
     at the target max_model_len: the reported pool inflates with --max-model-len (docs/memory-plan.md trap)."
  - Fails when an input is missing, not a number or not positive.
options:
  _input:
    description: C(max_model_len) in tokens.
    type: int
    required: true
  concurrency:
    description: Requests at full context the pool must hold (may be fractional, e.g. 2.5).
    type: float
    required: true
  bytes_per_token_per_rank:
    description: KV bytes per token on one rank (e.g. 8793 for MTP-4 at TP3, docs/memory-plan.md).
    type: float
    required: true
"""

EXAMPLES = r"""
pin: "{{ 524288 | dgxspark.vllm.kv_cache_bytes(2.5, 8793) }}"   # 11525160960
"""

RETURN = r"""
_value:
  description: The pin in bytes per rank.
  type: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.memory_plan import MemoryPlanError, kv_cache_bytes as _kv


def kv_cache_bytes(max_model_len, concurrency, bytes_per_token_per_rank):
    try:
        return _kv(max_model_len, concurrency, bytes_per_token_per_rank)
    except MemoryPlanError as e:
        raise AnsibleFilterError(str(e))


# Public for lane authors (docs/lanes.md: the pin formula); the roles call module_utils/memory_plan directly.
class FilterModule(object):
    def filters(self):
        return {"kv_cache_bytes": kv_cache_bytes}
