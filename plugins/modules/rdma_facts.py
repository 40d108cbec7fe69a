#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: rdma_facts
short_description: Discover RoCE HCAs, their netdevs, addresses, MTU and RoCE v2 GID index
version_added: 0.1.0
description:
  - Runs C(ibdev2netdev), C(ip -j addr) and C(ip -j link) on the node (with C(LANG=C)) and reads the
    GID tables under O(sysfs_root)C(/class/infiniband/<hca>/ports/<port>/{gids,gid_attrs/types}/<i>).
  - For every HCA it reports the netdev, the link state, the first usable IPv4 (not loopback, not a
    169.254 autoconf address, capture tests/fixtures/rdma/ip/unconfigured-spark-node-a.ip-br-addr.txt), MTU, operstate
    and the RoCE v2 GID index whose GID is the IPv4-mapped form of that address (catalogue nccl_wrong_gid; docs/rdma.md). The index is looked up on
    every run because it is not stable across reboots.
  - Also reports C(CmaTotal) from O(meminfo_path) (catalogue cma_zero), the running kernel, and what the
    host name resolves to (catalogue gloo_fullmesh).
  - Read-only; returns the same data in check mode.
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  sysfs_root:
    description:
      - Directory that stands for C(/sys). The simulated fleet sets V(/opt/sim/sys).
    type: path
    default: /sys
  ibdev2netdev_cmd:
    description:
      - Command printing C(<hca> port <n> ==> <netdev> (Up|Down)) lines (package C(infiniband-diags) /
        C(rdma-core) on DGX OS). Split like a shell word list, so it may carry arguments.
    type: str
    default: ibdev2netdev
  ip_cmd:
    description:
      - The iproute2 C(ip) command; called as C(<ip_cmd> -j addr) and C(<ip_cmd> -j link).
    type: str
    default: ip
  meminfo_path:
    description:
      - File read for C(CmaTotal) (kB).
    type: path
    default: /proc/meminfo
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.attributes.facts
attributes:
  facts:
    support: full
notes:
  - A missing tool fails with the package to install; malformed output fails quoting the line.
  - Rules and their sources (catalogue nccl_wrong_gid, cma_zero, gloo_fullmesh; docs/rdma.md) are tabled in C(docs/rdma.md).
'''

EXAMPLES = r'''
- name: Discover the fabric of this node
  dgxspark.vllm.rdma_facts:

- name: Read a simulated sysfs tree
  dgxspark.vllm.rdma_facts:
    sysfs_root: /opt/sim/sys
  register: fabric

- name: Show the RoCE v2 GID index of each Up HCA
  ansible.builtin.debug:
    msg: "{{ item.hca }} -> {{ item.roce_v2_gid_index }}"
  loop: "{{ ansible_facts.rdma_facts.hcas | selectattr('state', 'eq', 'Up') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    rdma_facts:
      description: The fabric of this node. Also returned at the top level as RV(rdma_facts).
      type: dict
      returned: always
      contains:
        hcas:
          description:
            - One entry per C(ibdev2netdev) line, in PCI order (domain, bus, slot, function).
            - Keys C(hca), C(port) (int), C(netdev), C(state) (V(Up) or V(Down)), C(twin) (the other PCIe
              half of the same physical port, or null), C(ipv4), C(prefixlen), C(cidr) (the netdev's first
              usable IPv4, or null), C(mtu) (bytes), C(operstate), C(roce_v2_gid_index) (int or null),
              C(gids) (non-zero GID entries C({index, gid, type})).
          type: list
          elements: dict
          returned: always
          sample:
            - hca: rocep1s0f1
              port: 1
              netdev: enp1s0f1np1
              state: Up
              twin: roceP2p1s0f1
              ipv4: 198.18.11.10
              prefixlen: 24
              cidr: 198.18.11.0/24
              mtu: 9000
              operstate: UP
              roce_v2_gid_index: 3
              gids:
                - {index: 3, gid: "0000:0000:0000:0000:0000:ffff:c612:0b0a", type: RoCE v2}
        netdevs:
          description:
            - Every interface C(ip) reports, by name; C({ifname, operstate, mtu, flags, ipv4, ipv6}).
            - C(ipv4) is a list of C({address, prefixlen, cidr, scope}); C(ipv6) a list of C(addr/len) strings.
          type: dict
          returned: always
        cma_total_kib:
          description: C(CmaTotal) in KiB, or null when the line is absent.
          type: int
          returned: always
        kernel:
          description: Running kernel release (C(uname -r)).
          type: str
          returned: always
        hostname:
          description: The node's host name.
          type: str
          returned: always
        hostname_ipv4:
          description: IPv4 addresses the host name resolves to, resolver order (a loopback first entry is catalogue gloo_fullmesh).
          type: list
          elements: str
          returned: always
rdma_facts:
  description: Same as RV(ansible_facts.rdma_facts), for C(register).
  returned: always
  type: dict
'''

import os
import shlex
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import (
    RdmaError, build_host_facts, merge_netdevs, parse_cma_total_kib, parse_ibdev2netdev,
    parse_ip_json_addr, parse_ip_json_link, read_gid_table)

_FIX = {
    'ibdev2netdev': 'install it (DGX OS: package "infiniband-diags"/"rdma-core" or the MLNX OFED tools) '
                    'or point ibdev2netdev_cmd (role: rdma_fabric_ibdev2netdev_cmd) at it',
    'ip': 'install iproute2 or point ip_cmd at the ip binary',
}


def _run(module, cmd, args, tool):
    argv = shlex.split(cmd)
    if not argv:
        module.fail_json(msg='%s command is empty; %s' % (tool, _FIX[tool]))
    exe = argv[0] if os.path.sep in argv[0] else module.get_bin_path(argv[0])
    if not exe or not os.path.exists(exe):
        module.fail_json(msg='%s not found on this host (%s); %s' % (tool, argv[0], _FIX[tool]))
    full = [exe] + argv[1:] + args
    rc, out, err = module.run_command(full, environ_update={'LANG': 'C', 'LC_ALL': 'C'})
    if rc != 0:
        module.fail_json(msg='%s failed (rc=%d): %s' % (' '.join(full), rc, (err or out).strip()),
                         rc=rc, stdout=out, stderr=err)
    return out


def _resolve_hostname():
    """The node's host name and the IPv4 addresses it resolves to, in resolver order (catalogue gloo_fullmesh)."""
    name = socket.gethostname()
    out = []
    try:
        for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM):
            if info[4][0] not in out:
                out.append(info[4][0])
    except socket.error:
        pass
    return name, out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type='path', default='/sys'),
            ibdev2netdev_cmd=dict(type='str', default='ibdev2netdev'),
            ip_cmd=dict(type='str', default='ip'),
            meminfo_path=dict(type='path', default='/proc/meminfo'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    ibdev_out = _run(module, p['ibdev2netdev_cmd'], [], 'ibdev2netdev')
    addr_out = _run(module, p['ip_cmd'], ['-j', 'addr'], 'ip')
    link_out = _run(module, p['ip_cmd'], ['-j', 'link'], 'ip')
    try:
        rows = parse_ibdev2netdev(ibdev_out)
        netdevs = merge_netdevs(parse_ip_json_link(link_out), parse_ip_json_addr(addr_out))
        tables = dict(((r['hca'], r['port']), read_gid_table(p['sysfs_root'], r['hca'], r['port'])) for r in rows)
        cma = None
        if os.path.exists(p['meminfo_path']):
            with open(p['meminfo_path']) as f:
                cma = parse_cma_total_kib(f.read())
        name, resolved = _resolve_hostname()
        facts = build_host_facts(rows, netdevs, tables, cma_total_kib=cma, kernel=os.uname()[2],
                                 hostname=name, hostname_ipv4=resolved)
    except RdmaError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, rdma_facts=facts, ansible_facts={'rdma_facts': facts})


if __name__ == '__main__':
    main()
