# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: nccl_env
short_description: NCCL/Gloo environment of one rank from its own rdma_facts and the fabric plan
version_added: 0.1.0
description:
  - Returns the environment map a rank container needs for the rendezvous and NCCL over RoCE,
    computed from B(this host's) C(rdma_facts) (module M(dgxspark.vllm.rdma_facts)) and the cluster-wide
    plan of the C(rdma_fabric_plan) filter (same file).
  - C(NCCL_IB_HCA) lists this host's Up HCAs whose netdev holds an address in the fabric (both Up twins
    when both are addressed, S01/S13), in PCI order, with the exact C(=) form when a plain name would
    prefix-match another device of the host (F04).
  - Single fabric subnet (TP2/TP4, spec B.3) - C(NCCL_IB_GID_INDEX) from this host's GID table (omitted,
    never empty, when none is found; F03), C(NCCL_IB_ADDR_RANGE) = the fabric CIDR.
  - Pairwise ring (TP3, spec B.3 Y3, F07, F08) - C(NCCL_IB_SUBNET_AWARE_ROUTING=1), no GID pin, no range.
  - C(NCCL_SOCKET_IFNAME), C(GLOO_SOCKET_IFNAME), C(TP_SOCKET_IFNAME), C(MN_IF_NAME) = the interface that
    holds this host's rendezvous address, C(VLLM_HOST_IP) = that address (F06).
  - Plus the fixed keys of the topology's seed block (spec B.3) merged with the lane's C(nccl) block.
  - "Helpers in this file: C(rdma_fabric_plan) (dict of host -> rdma_facts, keyword options ranks, topology,
    interface, mtu, master_addr, platform, check_hostname -> plan with topology, fabric_cidrs, rendezvous, master_addr,
    links, same_index_links, hosts, errors, warnings, info) and C(nccl_hca_parse) (an NCCL_IB_HCA value ->
    C({mode, items}); with a device list -> C({devices, warnings}))."
options:
  _input:
    description: This host's C(rdma_facts).
    type: dict
    required: true
  plan:
    description: Output of C(rdma_fabric_plan) over every rank.
    type: dict
    required: true
  host:
    description: Inventory name of this host (used in error messages).
    type: str
  fixed:
    description: Fixed NCCL keys replacing the built-in seed block (rarely needed).
    type: dict
  overrides:
    description: The lane's C(nccl) block; merged over the fixed keys, a null value removes a key.
    type: dict
author:
  - dgxspark.vllm maintainers (@dgxspark)
'''

EXAMPLES = r'''
- name: Plan the fabric from every rank's facts
  ansible.builtin.set_fact:
    fabric_plan: >-
      {{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, 'rdma_facts')))
         | dgxspark.vllm.rdma_fabric_plan(ranks=ranks, mtu=9000) }}

- name: This rank's environment
  ansible.builtin.set_fact:
    rank_env: "{{ rdma_facts | dgxspark.vllm.nccl_env(fabric_plan, host=inventory_hostname) }}"

- name: Parse a user value
  ansible.builtin.debug:
    msg: "{{ '=rocep1s0f1,roceP2p1s0f1' | dgxspark.vllm.nccl_hca_parse }}"
'''

RETURN = r'''
_value:
  description: Environment variable name -> string value.
  type: dict
  sample:
    NCCL_IB_HCA: rocep1s0f1
    NCCL_IB_GID_INDEX: "3"
    NCCL_IB_ADDR_RANGE: 198.18.11.0/24
    NCCL_SOCKET_IFNAME: enp1s0f1np1
    GLOO_SOCKET_IFNAME: enp1s0f1np1
    VLLM_HOST_IP: 198.18.11.10
'''

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import (
    RdmaError, expand_nccl_ib_hca, nccl_env, parse_nccl_ib_hca, plan_fabric)


def _plain(value):
    """Jinja hands over lazy containers; the pure code wants plain dicts/lists."""
    if isinstance(value, dict):
        return dict((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def nccl_env_filter(facts, plan, host=None, fixed=None, overrides=None):
    if not isinstance(facts, dict) or 'hcas' not in facts:
        raise AnsibleFilterError('nccl_env: input must be the rdma_facts of one host (%s)'
                                 % (host or 'unknown host'))
    try:
        return nccl_env(_plain(facts), _plain(plan), host=host, fixed=_plain(fixed), overrides=_plain(overrides))
    except RdmaError as e:
        raise AnsibleFilterError('nccl_env: %s' % e)


def rdma_fabric_plan_filter(hosts_facts, ranks=None, topology='auto', interface=None, mtu=9000,
                            master_addr=None, platform='spark', check_hostname=True):
    if not isinstance(hosts_facts, dict) or not hosts_facts:
        raise AnsibleFilterError('rdma_fabric_plan: input must map each host to its rdma_facts')
    missing = sorted(h for h, f in hosts_facts.items() if not isinstance(f, dict) or 'hcas' not in f)
    if missing:
        raise AnsibleFilterError('rdma_fabric_plan: no rdma_facts for %s; run dgxspark.vllm.rdma_facts on '
                                 'every rank first' % ', '.join(missing))
    try:
        return plan_fabric(_plain(hosts_facts), ranks=_plain(ranks), topology=topology or 'auto',
                           interface=interface or None, mtu=int(mtu) if mtu else None,
                           master_addr=master_addr or None, platform=platform or 'spark',
                           check_hostname=bool(check_hostname))
    except (RdmaError, ValueError) as e:
        raise AnsibleFilterError('rdma_fabric_plan: %s' % e)


def nccl_hca_parse_filter(value, hcas=None):
    try:
        if hcas is None:
            return parse_nccl_ib_hca(value)
        hcas = _plain(hcas)
        if hcas and isinstance(hcas[0], str):
            hcas = [{'hca': h, 'state': 'Up'} for h in hcas]
        return expand_nccl_ib_hca(value, hcas)
    except RdmaError as e:
        raise AnsibleFilterError('nccl_hca_parse: %s' % e)


class FilterModule(object):
    def filters(self):
        return {
            'nccl_env': nccl_env_filter,
            'rdma_fabric_plan': rdma_fabric_plan_filter,
            'nccl_hca_parse': nccl_hca_parse_filter,
        }
