# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole-group restart order (module_utils/verdict.py group_order), shared by vllm_ranks and the watchdog."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.verdict import group_order


def vllm_group_order(hosts, hostvars):
    """hosts: inventory names; hostvars: Ansible's hostvars (each host carries vllm_rank)."""
    try:
        return group_order([{"host": str(h), "rank": int(hostvars[h]["vllm_rank"])} for h in hosts])
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("vllm_group_order: %s (every host needs a distinct vllm_rank 0..N-1)" % e)


class FilterModule(object):
    def filters(self):
        return {"vllm_group_order": vllm_group_order}
