# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The whole-group restart order and plan (module_utils/verdict.py group_order, module_utils/lifecycle.py plan), shared
by vllm_ranks and the watchdog."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import group_restart_wait_s, hold_record, plan, streak_refusal
from ansible_collections.dgxspark.vllm.plugins.module_utils.verdict import group_order


def _group(name, hosts, hostvars):
    try:
        return [{"host": str(h), "rank": int(hostvars[h]["vllm_rank"])} for h in hosts]
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("%s: %s (every host needs a distinct vllm_rank 0..N-1)" % (name, e))


def vllm_group_order(hosts, hostvars):
    """hosts: inventory names; hostvars: Ansible's hostvars (each host carries vllm_rank)."""
    try:
        return group_order(_group("vllm_group_order", hosts, hostvars))
    except ValueError as e:
        raise AnsibleFilterError("vllm_group_order: %s (every host needs a distinct vllm_rank 0..N-1)" % e)


def vllm_group_plan(hosts, hostvars):
    """The whole-group restart's ordered steps (lifecycle.plan): [{verb, host, rank, head}]."""
    try:
        return plan(_group("vllm_group_plan", hosts, hostvars))
    except ValueError as e:
        raise AnsibleFilterError("vllm_group_plan: %s (every host needs a distinct vllm_rank 0..N-1)" % e)


def vllm_group_streak_refusal(stops, max_deaths, where="the saved logs on the nodes"):
    """The death-streak guard over the stop steps' results (lifecycle.streak_refusal): the refusal, or ''."""
    return streak_refusal(list(stops or []), int(max_deaths), where) or ""


def vllm_group_hold(by, now, base_s, covers="run", nodes=1, settle_s=0, worker_wait_s=0, head_wait_s=0):
    """The hold record a playbook run writes on the head (lifecycle.hold_record), its ttl covering a group restart
    (lifecycle.group_restart_wait_s over the same deadlines vllm_ranks passes its steps) when covers is group_restart."""
    try:
        wait = group_restart_wait_s(nodes, settle_s, worker_wait_s, head_wait_s) if covers == "group_restart" else 0.0
        return hold_record(by, float(now), float(base_s), covers, wait)
    except (TypeError, ValueError) as e:
        raise AnsibleFilterError("vllm_group_hold: %s" % e)


class FilterModule(object):
    def filters(self):
        return {"vllm_group_order": vllm_group_order, "vllm_group_plan": vllm_group_plan,
                "vllm_group_streak_refusal": vllm_group_streak_refusal, "vllm_group_hold": vllm_group_hold}
