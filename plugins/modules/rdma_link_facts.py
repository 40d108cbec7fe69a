#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: rdma_link_facts
short_description: Read the PCIe link, ethtool and kernel log of each RoCE HCA (facts for the bandwidth classes)
version_added: 0.1.0
description:
  - For every HCA under O(sysfs_root)C(/class/infiniband) (or those in O(hcas)) it follows C(device) to the HCA's PCI
    device, reads its address (C(PCI_SLOT_NAME) in C(uevent)), its netdev (C(device/net/)) and the PCIe link files
    C(current_link_speed), C(current_link_width), C(max_link_speed), C(max_link_width).
  - Runs C(ethtool <netdev>) (argv, C(LANG=C)) and reads C(Speed) and C(Link detected).
  - Runs the kernel log command once (C(dmesg) by default) and keeps, per HCA, the mlx5_core lines naming its PCI
    address or netdev, and the port module lines naming no device. A PCIe "available PCIe bandwidth, limited by" line,
    link down/up events, cable events and firmware health errors are counted; events older than O(recent_s) before
    the node's uptime (C(/proc/uptime)) are history and not counted.
  - The parsers are C(bandwidth.parse_pcie_link), C(parse_ethtool) and C(parse_mlx5_kernel_log) in module_utils; the
    classes they feed (C(classify_rail)) are described in C(docs/rdma.md). Untested on GB10 hardware; the parsing is
    tested on the captures in C(tests/fixtures/rdma/link).
  - Read-only; returns the same data in check mode.
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  hcas:
    description:
      - HCA names to read. Empty reads every HCA under O(sysfs_root)C(/class/infiniband).
    type: list
    elements: str
    default: []
  sysfs_root:
    description:
      - Directory that stands for C(/sys).
    type: path
    default: /sys
  ethtool_cmd:
    description:
      - The ethtool binary (package C(ethtool)); called as C(<ethtool_cmd> <netdev>).
    type: str
    default: ethtool
  kernel_log_cmd:
    description:
      - Command printing the kernel log with C([seconds since boot]) stamps, split like a shell word list.
        C(dmesg) needs root when C(kernel.dmesg_restrict) is 1.
    type: str
    default: dmesg
  uptime_path:
    description:
      - File whose first number is the uptime in seconds.
    type: path
    default: /proc/uptime
  recent_s:
    description:
      - Seconds before now within which a kernel event counts; older ones are returned as history.
    type: int
    default: 3600
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.attributes.facts
attributes:
  facts:
    support: full
notes:
  - A missing ethtool or kernel log command fails naming the tool and the fix. An HCA without a PCI device link or
    without a netdev is returned with null values for what could not be read.
'''

EXAMPLES = r'''
- name: Read the link facts of every HCA
  dgxspark.vllm.rdma_link_facts:
  become: true

- name: Read two HCAs only
  dgxspark.vllm.rdma_link_facts:
    hcas: [rocep1s0f1, roceP2p1s0f1]
  register: links
'''

RETURN = r'''
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    rdma_link_facts:
      description: Also returned at the top level as RV(rdma_link_facts).
      type: dict
      returned: always
      contains:
        hcas:
          description:
            - By HCA name, C({pci_address, netdev, pcie, ethtool, kernel}).
            - C(pcie) is C({current_gts, current_width, max_gts, max_width}) (GT/s per lane, lanes; null when
              unreadable).
            - C(ethtool) is C({netdev, speed_mbps, link_detected, duplex, port}), null without a netdev.
            - C(kernel) is C({pcie_limited, link_down, link_up, cable_errors, health_errors, history, lines}).
          type: dict
          returned: always
          sample:
            rocep1s0f1:
              pci_address: "0000:01:00.1"
              netdev: enp1s0f1np1
              pcie: {current_gts: 32.0, current_width: 4, max_gts: 32.0, max_width: 4}
              ethtool: {netdev: enp1s0f1np1, speed_mbps: 200000, link_detected: true, duplex: Full,
                        port: Direct Attach Copper}
              kernel: {pcie_limited: [], link_down: 0, link_up: 0, cable_errors: [], health_errors: [], history: [],
                       lines: []}
        uptime_s:
          description: The node's uptime in seconds when read (null when O(uptime_path) is unreadable).
          type: float
          returned: always
rdma_link_facts:
  description: Same as RV(ansible_facts.rdma_link_facts), for C(register).
  returned: always
  type: dict
'''

import os
import shlex

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.bandwidth import (
    parse_ethtool, parse_mlx5_kernel_log, parse_pcie_link)

_PCIE_FILES = ('current_link_speed', 'current_link_width', 'max_link_speed', 'max_link_width')


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def _exe(module, cmd, what, fix):
    argv = shlex.split(cmd)
    exe = argv[0] if argv and os.path.sep in argv[0] else (module.get_bin_path(argv[0]) if argv else None)
    if not exe or not os.path.exists(exe):
        module.fail_json(msg='%s not found on this host (%s); %s' % (what, cmd, fix))
    return [exe] + argv[1:]


def hca_device(sysfs_root, hca):
    """(pci_address, netdev, {pcie file: text}) of one HCA from a sysfs tree."""
    dev = os.path.join(sysfs_root, 'class', 'infiniband', hca, 'device')
    address = None
    for line in (_read(os.path.join(dev, 'uevent')) or '').splitlines():
        if line.startswith('PCI_SLOT_NAME='):
            address = line.split('=', 1)[1].strip()
    nets = sorted(os.listdir(os.path.join(dev, 'net'))) if os.path.isdir(os.path.join(dev, 'net')) else []
    files = dict((f, _read(os.path.join(dev, f))) for f in _PCIE_FILES)
    return address, (nets[0] if nets else None), files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hcas=dict(type='list', elements='str', default=[]),
            sysfs_root=dict(type='path', default='/sys'),
            ethtool_cmd=dict(type='str', default='ethtool'),
            kernel_log_cmd=dict(type='str', default='dmesg'),
            uptime_path=dict(type='path', default='/proc/uptime'),
            recent_s=dict(type='int', default=3600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    env = {'LANG': 'C', 'LC_ALL': 'C'}
    ib = os.path.join(p['sysfs_root'], 'class', 'infiniband')
    hcas = p['hcas'] or (sorted(os.listdir(ib)) if os.path.isdir(ib) else [])
    ethtool = _exe(module, p['ethtool_cmd'], 'ethtool', 'install the ethtool package or point ethtool_cmd at it')
    klog = _exe(module, p['kernel_log_cmd'], 'the kernel log command',
                'point kernel_log_cmd at dmesg (run with become when kernel.dmesg_restrict is 1)')
    rc, log, err = module.run_command(klog, environ_update=env)
    if rc != 0:
        module.fail_json(msg='%s failed (rc=%d): %s; run with become when kernel.dmesg_restrict is 1' % (
            ' '.join(klog), rc, (err or log).strip()), rc=rc)
    uptime = None
    try:
        uptime = float((_read(p['uptime_path']) or '').split()[0])
    except (IndexError, ValueError):
        pass
    out = {}
    for hca in hcas:
        address, netdev, files = hca_device(p['sysfs_root'], hca)
        eth = None
        if netdev:
            rc, text, err = module.run_command(ethtool + [netdev], environ_update=env)
            if rc != 0:
                module.fail_json(msg='%s %s failed (rc=%d): %s' % (ethtool[0], netdev, rc, (err or text).strip()), rc=rc)
            eth = parse_ethtool(text)
        out[hca] = {'pci_address': address, 'netdev': netdev, 'pcie': parse_pcie_link(files), 'ethtool': eth,
                    'kernel': parse_mlx5_kernel_log(log, address, netdev, uptime, p['recent_s'])}
    facts = {'hcas': out, 'uptime_s': uptime}
    module.exit_json(changed=False, rdma_link_facts=facts, ansible_facts={'rdma_link_facts': facts})


if __name__ == '__main__':
    main()
