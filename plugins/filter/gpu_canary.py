# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The GPU under a canary on every node (module_utils/verdict.py canary_power_verdict, catalogue gpu_low_power)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.verdict import (
    DEFAULT_BUSY_UTIL_PCT, DEFAULT_POWER_FLOOR_W, canary_power_verdict, gpu_medians, stall_verdict)


def gpu_canary_verdict(samples_by_host, power_floor_w=DEFAULT_POWER_FLOOR_W, slow_pct=15.0):
    """samples_by_host: {host: the samples list of module gpu_samples}."""
    if not isinstance(samples_by_host, dict):
        raise AnsibleFilterError("gpu_canary_verdict: expects {host: samples}, got %s" % type(samples_by_host).__name__)
    try:
        return canary_power_verdict(dict((str(h), list(v or [])) for h, v in samples_by_host.items()),
                                    power_floor_w=float(power_floor_w), slow_pct=float(slow_pct))
    except (TypeError, ValueError, AttributeError) as e:
        raise AnsibleFilterError("gpu_canary_verdict: %s (each host's value is the samples list of gpu_samples)" % e)


def gpu_stall_verdict(metrics, samples_by_host=None, power_floor_w=DEFAULT_POWER_FLOOR_W,
                      busy_util_pct=DEFAULT_BUSY_UTIL_PCT):
    """metrics: the C(metrics) return of vllm_health mode=metrics; samples_by_host: {host: gpu_samples' samples}
    taken across the same window. The watchdog's stall rule (verdict.stall_verdict) on each node's medians."""
    if not isinstance(metrics, dict) or not isinstance(metrics.get("wedge"), dict):
        raise AnsibleFilterError("gpu_stall_verdict: expects the metrics return of vllm_health mode=metrics")
    if samples_by_host is not None and not isinstance(samples_by_host, dict):
        raise AnsibleFilterError("gpu_stall_verdict: samples_by_host must be {host: samples}, got %s"
                                 % type(samples_by_host).__name__)
    try:
        gpus = gpu_medians(dict((str(h), list(v or [])) for h, v in (samples_by_host or {}).items()))
        return stall_verdict(metrics.get("first"), metrics.get("second"), metrics["wedge"].get("interval_s"), gpus,
                             power_floor_w=float(power_floor_w), busy_util_pct=float(busy_util_pct))
    except (TypeError, ValueError, AttributeError) as e:
        raise AnsibleFilterError("gpu_stall_verdict: %s (each host's value is the samples list of gpu_samples)" % e)


class FilterModule(object):
    def filters(self):
        return {"gpu_canary_verdict": gpu_canary_verdict, "gpu_stall_verdict": gpu_stall_verdict}
