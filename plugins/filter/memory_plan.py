# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Filters of the per-rank memory plan (logic in module_utils/memory_plan.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: memory_plan
short_description: Per-rank memory plan of a lane - what fits, the KV pool and concurrency it gives
version_added: 0.2.0
author: dgxspark.vllm maintainers
description:
  - "Units: GiB = 2^30 bytes; tokens of context; bytes per token are KV bytes per token on one rank."
  - "Weights per rank = checkpoint bytes (safetensors index total_size, else the lane's checkpoint.size_gib) / TP,
     plus drafter bytes / TP, or the measured C(weights_gib_per_rank)."
  - "KV per rank: the pin (serve.kv_policy.bytes), or under the profiler gpu_memory_utilization x MemTotal minus
     weights, drafter, non-torch memory, activation peak (scaled by max_num_batched_tokens / 8192) and CUDA graphs
     (when enforce_eager is false) (catalogue kv_pin_no_activation_reserve; docs/memory-plan.md). On platform cpu the KV is
     C(container.env.VLLM_CPU_KVCACHE_SPACE) GiB, as the CPU engine allocates it."
  - "Pool: max concurrency = KV bytes / (max_model_len x b_tok + s_req); pool tokens = int(concurrency x
     max_model_len) (docs/memory-plan.md). b_tok and s_req are fitted on the seeds' published pin/pool pairs
     (module_utils/memory_plan.py CALIBRATION names them); on cpu lanes b_tok = 2 x layers x KV heads per rank x
     head_dim x 2 bytes from the checkpoint's config.json (C(model_config)), s_req = 0."
  - "Checks, each naming rank, host and the numbers: MemAvailable >= gpu_memory_utilization x MemTotal (vLLM's startup
     check, catalogue free_memory_refused); KV > 0; KV holds one request at max_model_len;
     resident memory <= MemAvailable - OS reserve. Warnings: a pin above what the profiler would leave
     (catalogue kv_pin_no_activation_reserve); a margin under C(thin_margin_gib) (catalogue kv_pool_below_peers)."
  - The pool of the group is the minimum across ranks (docs/memory-plan.md).
  - Tolerance against the seeds' published pools and the error table are in docs/memory-plan.md.
options:
  _input:
    description: The resolved lane (C(vllm_lane_spec)).
    type: dict
    required: true
  nodes:
    description:
      - Host to C(preflight_node) facts (C(mem_total_kib), C(mem_available_kib), C(swap_total_gib); GiB keys are
        used when the KiB keys are absent), or a list of such dicts carrying C(host) and C(rank).
      - Empty or omitted, or a host mapped to null (no facts read), gives the lane-only plan on a nominal GB10
        (MemTotal 121.69 GiB, MemAvailable unknown).
    type: raw
    default: null
  ranks:
    description: Host to rank (C(vllm_rank)) when C(nodes) is a mapping.
    type: dict
    default: {}
  options:
    description:
      - C(checkpoint_bytes), C(drafter_bytes) (safetensors index total_size, bytes), C(weights_gib_per_rank)
        (measured, GiB, overrides both), C(model_config) (config.json as a dict, cpu lanes), C(non_torch_gib) (4.64),
        C(activation_gib) (3.78 at 8192 batched tokens), C(cuda_graph_gib) (0.94), C(os_reserve_gib) (3.0),
        C(thin_margin_gib) (5.0), C(nominal_mem_total_gib) (121.69). Defaults in parentheses, GiB; a null value
        keeps the default.
    type: dict
    default: {}
"""

EXAMPLES = r"""
plan: "{{ vllm_lane_spec | dgxspark.vllm.memory_plan }}"      # lane only
plan_on_nodes: >-
  {{ vllm_lane_spec | dgxspark.vllm.memory_plan(
       dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'preflight_node'))),
       dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'vllm_rank')))) }}
"""

RETURN = r"""
_value:
  description:
    - C(ranks) (one row per rank - host, rank, mem_total_gib, mem_available_gib, swap_total_gib, required_free_gib,
      startup_check, kv_gib, pool_tokens, max_concurrency, resident_gib, margin_gib, errors and warnings of that
      rank), the group's C(kv_gib),
      C(pool_tokens), C(max_concurrency), C(limiting_rank), C(limiting_host) (minimum across ranks), the inputs used
      (C(weights_gib_per_rank), C(drafter_gib_per_rank), C(non_torch_gib), C(activation_gib), C(cuda_graph_gib),
      C(os_reserve_gib), C(bytes_per_token_per_rank), C(effective_bytes_per_token_per_rank), C(kv_source)),
      C(errors) (the plan cannot fit; a non-empty list must stop the run) and C(warnings).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.memory_plan import (
    MemoryPlanError,
    bringup_plan,
    compare,
    compare_lines,
    memory_plan as _plan,
    plan_id,
    plan_markdown,
)


def _nodes(nodes, ranks):
    if not nodes:
        return None
    if isinstance(nodes, list):
        return nodes
    if not isinstance(nodes, dict):
        raise AnsibleFilterError("memory_plan: nodes must be a mapping host -> preflight_node or a list, got %s"
                                 % type(nodes).__name__)
    if any(not nodes[h] for h in nodes):
        return None     # a host without preflight_node facts: the lane-only plan
    out = []
    for host in sorted(nodes):
        facts = dict(nodes[host])
        if host not in (ranks or {}):
            raise AnsibleFilterError("memory_plan: no rank for host %s (set vllm_rank)" % host)
        facts.update({"host": host, "rank": int(ranks[host])})
        out.append(facts)
    return out


def memory_plan(lane, nodes=None, ranks=None, options=None):
    try:
        return _plan(lane, _nodes(nodes, ranks), options or {})
    except MemoryPlanError as e:
        raise AnsibleFilterError(str(e))


def memory_plan_compare(plan, kv_summary):
    if not isinstance(plan, dict) or not isinstance(kv_summary, dict):
        raise AnsibleFilterError("memory_plan_compare: expects the plan and vllm_health's kv_pool (mappings)")
    result = compare(plan, kv_summary)
    result["lines"] = compare_lines(result)
    return result


def memory_plan_bringup(lane, ranks, plan=None, node_disk=None, share_mode="copy"):
    if not isinstance(ranks, dict):
        raise AnsibleFilterError("memory_plan_bringup: ranks must be a mapping host -> rank")
    hosts = [{"host": h, "rank": int(r)} for h, r in ranks.items()]
    return bringup_plan(lane, hosts, plan, node_disk, share_mode)


def memory_plan_document(lane, ranks, plan, bringup, made, measured=False, addresses=None):
    """{id, markdown}: the plan as a page (module_utils/memory_plan.py plan_markdown) and the id of the lane and
    rank layout it was made from (plan_id)."""
    if not isinstance(ranks, dict):
        raise AnsibleFilterError("memory_plan_document: ranks must be a mapping host -> rank")
    hosts = [{"host": h, "rank": int(r), "address": (addresses or {}).get(h)} for h, r in ranks.items()]
    pid = plan_id(lane, hosts)
    return {"id": pid, "markdown": plan_markdown(lane, bringup, plan, pid, str(made), bool(measured))}


class FilterModule(object):
    def filters(self):
        return {"memory_plan": memory_plan, "memory_plan_compare": memory_plan_compare,
                "memory_plan_bringup": memory_plan_bringup, "memory_plan_document": memory_plan_document}
