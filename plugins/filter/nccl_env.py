# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: nccl_env.yml, rdma_fabric_plan.yml, nccl_hca_parse.yml, rdma_fabric_netplan.yml and
# rdma_fabric_egress_errors.yml beside this file
# (one per filter).

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import (
    RdmaError, egress_errors, expand_nccl_ib_hca, nccl_env, netplan_fabric, parse_nccl_ib_hca, parse_route_get,
    plan_fabric)


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
                            master_addr=None, platform='spark', check_hostname=True, fabric_cidr=None):
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
                           check_hostname=bool(check_hostname), fabric_cidr=fabric_cidr or None)
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


def rdma_fabric_netplan_filter(facts, netdevs, mtu, addresses=False, host=None):
    if not isinstance(facts, dict) or 'netdevs' not in facts:
        raise AnsibleFilterError('rdma_fabric_netplan: input must be the rdma_facts of one host (%s)'
                                 % (host or 'unknown host'))
    try:
        return netplan_fabric(_plain(facts), _plain(netdevs) or [], int(mtu) if mtu else None, bool(addresses))
    except (RdmaError, ValueError) as e:
        raise AnsibleFilterError('rdma_fabric_netplan on %s: %s' % (host or 'unknown host', e))


def rdma_fabric_egress_errors(results, plan, host):
    """results: the loop results of `ip -j route get <peer's rendezvous address>` (item = the peer's host)."""
    try:
        view = plan['hosts'][host]
        routes = [{'peer': r['item'], 'address': plan['hosts'][r['item']]['rendezvous_ip'],
                   'route': parse_route_get(r.get('stdout'))}
                  for r in _plain(results) or [] if not r.get('skipped')]
        return egress_errors(host, view['rendezvous_netdev'], routes, view.get('fabric_netdevs') or [])
    except (RdmaError, KeyError, TypeError) as e:
        raise AnsibleFilterError('rdma_fabric_egress_errors on %s: %s (input: the loop results of ip -j route get '
                                 'over the peers, item the peer host)' % (host, e))


# nccl_hca_parse is public for operators checking an NCCL_IB_HCA value by hand (docs/rdma.md section 4); the roles
# build the value themselves through nccl_env.
class FilterModule(object):
    def filters(self):
        return {
            'nccl_env': nccl_env_filter,
            'rdma_fabric_plan': rdma_fabric_plan_filter,
            'nccl_hca_parse': nccl_hca_parse_filter,
            'rdma_fabric_netplan': rdma_fabric_netplan_filter,
            'rdma_fabric_egress_errors': rdma_fabric_egress_errors,
        }
