# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Filters of the node checks (roles preflight, node_prep); logic in module_utils/node_checks.py and, for the
userspace OOM killers' floors, module_utils/oom_floors.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import (
    NodeCheckError,
    cache_host_dirs,
    disk_needs,
    node_checks,
    node_warnings,
    parse_meminfo,
    swap_cycle_plan,
    swap_verdict,
    sysctl_effective_verdict,
    sysctl_overrides,
    utilization_verdict,
    version_satisfies,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.oom_floors import DEFAULT_MARGIN_GIB, killer_floor_errors


def _guard(name, func, *args):
    try:
        return func(*args)
    except NodeCheckError as e:
        raise AnsibleFilterError("%s: %s" % (name, e))


def _mapping(name, what, value):
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s: %s must be a mapping, got %s" % (name, what, type(value).__name__))
    return value


def node_preflight_checks(node, lane_spec, host):
    _mapping("node_preflight_checks", "preflight_node", node)
    _mapping("node_preflight_checks", "vllm_lane_spec", lane_spec)
    return _guard("node_preflight_checks", node_checks, str(host), node, lane_spec)


def node_preflight_warnings(node, host):
    return node_warnings(str(host), _mapping("node_preflight_warnings", "preflight_node", node))


def node_oom_floor_errors(node, free_at_peak_gib, host, margin_gib=DEFAULT_MARGIN_GIB):
    """preflight_node's oom_floors against the memory plan's free_at_peak_gib of this rank (None: not judged)."""
    node = _mapping("node_oom_floor_errors", "preflight_node", node)
    if free_at_peak_gib is None:
        return []
    return _guard("node_oom_floor_errors", killer_floor_errors, str(host), node.get("oom_floors") or [],
                  float(free_at_peak_gib), float(margin_gib))


def node_utilization_verdict(nodes, requested, margin_gib=0):
    _mapping("node_utilization_verdict", "the host -> preflight_node map", nodes)
    return _guard("node_utilization_verdict", utilization_verdict, nodes, requested, margin_gib)


def node_disk_needs(lane_spec):
    return _guard("node_disk_needs", disk_needs, _mapping("node_disk_needs", "vllm_lane_spec", lane_spec))


def node_cache_dirs(lane_spec):
    return cache_host_dirs(_mapping("node_cache_dirs", "vllm_lane_spec", lane_spec))


def node_meminfo(text):
    return parse_meminfo(str(text))


def node_version_satisfies(version, spec):
    return _guard("node_version_satisfies", version_satisfies, str(version), str(spec))


def node_sysctl_overrides(grep_text, host, key, want, ours):
    return sysctl_overrides(str(host), str(key), want, str(ours), str(grep_text))


def node_sysctl_effective_verdict(effective, host, key, want, applied):
    return sysctl_effective_verdict(str(host), str(key), want, effective, bool(applied))


def node_swap_verdict(meminfo_text, host, required):
    return swap_verdict(str(host), parse_meminfo(str(meminfo_text)), bool(required))


def node_swap_cycle_plan(meminfo_text):
    action, used, reason = swap_cycle_plan(parse_meminfo(str(meminfo_text)))
    return {"action": action, "used_kib": used, "reason": reason}


class FilterModule(object):
    def filters(self):
        return {
            "node_preflight_checks": node_preflight_checks,
            "node_preflight_warnings": node_preflight_warnings,
            "node_oom_floor_errors": node_oom_floor_errors,
            "node_utilization_verdict": node_utilization_verdict,
            "node_disk_needs": node_disk_needs,
            "node_cache_dirs": node_cache_dirs,
            "node_meminfo": node_meminfo,
            "node_version_satisfies": node_version_satisfies,
            "node_sysctl_overrides": node_sysctl_overrides,
            "node_sysctl_effective_verdict": node_sysctl_effective_verdict,
            "node_swap_verdict": node_swap_verdict,
            "node_swap_cycle_plan": node_swap_cycle_plan,
        }
