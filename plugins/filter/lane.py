# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Filters over lanes and the inventory's rank layout (logic in module_utils/lane.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import (
    deep_merge,
    value_type,
    validate_inventory,
    validate_lane,
)


def lane_merge(lane, overrides):
    if not isinstance(lane, dict):
        raise AnsibleFilterError("lane_merge: the lane must be a mapping, got %s" % value_type(lane))
    if overrides in (None, ""):
        return deep_merge(lane, {})
    if not isinstance(overrides, dict):
        raise AnsibleFilterError("lane_merge: vllm_lane_overrides must be a mapping of lane keys, got %s"
                                 % value_type(overrides))
    return deep_merge(lane, overrides)


def lane_errors(lane, name=None):
    return validate_lane(lane, name)


def inventory_errors(hosts, tensor_parallel_size, head_group="vllm_head", workers_group="vllm_workers"):
    if not isinstance(hosts, list):
        raise AnsibleFilterError("inventory_errors: expected a list of hosts, got %s" % value_type(hosts))
    return validate_inventory(hosts, tensor_parallel_size, head_group, workers_group)


class FilterModule(object):
    def filters(self):
        return {
            "lane_merge": lane_merge,
            "lane_errors": lane_errors,
            "inventory_errors": inventory_errors,
        }
