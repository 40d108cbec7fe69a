# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""rdma_link_facts module: sysfs from the fake trees in tests/fixtures/rdma/link/sysfs, ethtool and dmesg replaced by
stand-in scripts printing the captures. Not run on a node here (no ConnectX-7 on the build machine)."""
import os
import stat

from ansible_collections.dgxspark.vllm.plugins.modules import rdma_link_facts
from tests.unit.conftest import FIXTURES, fake_sysfs
from tests.unit.plugins.modules.utils import run_module

LINK = os.path.join(FIXTURES, 'rdma', 'link')


def stand_in(tmp_path, name, body):
    p = tmp_path / name
    p.write_text('#!/bin/sh\n' + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def sysfs(tmp_path, tree):
    return fake_sysfs(tmp_path, tree)


def tools(tmp_path, ethtool_by_netdev, log, uptime='5000.00 9100.00\n'):
    cases = ''.join('  %s) grep -v "^#" %s ;;\n' % (nd, os.path.join(LINK, 'ethtool', f))
                    for nd, f in ethtool_by_netdev.items())
    eth = stand_in(tmp_path, 'ethtool', 'case "$1" in\n%s  *) echo "no such device $1" >&2; exit 75 ;;\nesac\n' % cases)
    dmesg = stand_in(tmp_path, 'dmesg', 'grep -v "^#" %s\n' % os.path.join(LINK, 'kernel-logs', log))
    up = tmp_path / 'uptime'
    up.write_text(uptime)
    return eth, dmesg, str(up)


def test_full_width_node_every_hca(tmp_path):
    eth, dmesg, up = tools(tmp_path, {'enp1s0f1np1': 'spark-enp1s0f1np1-200g.txt',
                                      'enP2p1s0f1np1': 'spark-enp1s0f1np1-100g.txt'}, 'spark-boot-gen5-x4.log')
    result, failed = run_module(rdma_link_facts.main, {
        'sysfs_root': sysfs(tmp_path, 'gen5-x4-full'), 'ethtool_cmd': eth, 'kernel_log_cmd': dmesg,
        'uptime_path': up})
    assert not failed and result['changed'] is False
    facts = result['ansible_facts']['rdma_link_facts']
    assert facts == result['rdma_link_facts'] and facts['uptime_s'] == 5000.0
    assert sorted(facts['hcas']) == ['roceP2p1s0f1', 'rocep1s0f1']
    a = facts['hcas']['rocep1s0f1']
    assert (a['pci_address'], a['netdev'], a['ethtool']['speed_mbps'], a['ethtool']['link_detected']) == (
        '0000:01:00.1', 'enp1s0f1np1', 200000, True)
    assert a['pcie'] == {'current_gts': 32.0, 'current_width': 4, 'max_gts': 32.0, 'max_width': 4}
    assert a['kernel']['lines'][1].endswith('126.028 Gb/s available PCIe bandwidth (32.0 GT/s PCIe x4 link)')
    b = facts['hcas']['roceP2p1s0f1']
    assert (b['pci_address'], b['ethtool']['speed_mbps']) == ('0002:01:00.1', 100000)
    assert b['kernel']['lines'] == ['[   12.902113] mlx5_core 0002:01:00.1 enP2p1s0f1np1: Link up']


def test_x2_half_named_hca_only(tmp_path):
    eth, dmesg, up = tools(tmp_path, {'enP2p1s0f1np1': 'spark-enp1s0f1np1-200g.txt'}, 'spark-x2-of-x4-limited.log')
    result, failed = run_module(rdma_link_facts.main, {
        'hcas': ['roceP2p1s0f1'], 'sysfs_root': sysfs(tmp_path, 'x2-of-x4'), 'ethtool_cmd': eth,
        'kernel_log_cmd': dmesg, 'uptime_path': up, '_ansible_check_mode': True})
    assert not failed
    h = result['rdma_link_facts']['hcas']['roceP2p1s0f1']
    assert (h['pcie']['current_width'], h['pcie']['max_width']) == (2, 4)
    assert [(l['width'], l['capable_width']) for l in h['kernel']['pcie_limited']] == [(2, 4)]


def test_missing_ethtool_names_the_fix(tmp_path):
    dmesg, up = tools(tmp_path, {}, 'spark-boot-gen5-x4.log')[1:]
    result, failed = run_module(rdma_link_facts.main, {
        'sysfs_root': sysfs(tmp_path, 'gen5-x4-full'), 'ethtool_cmd': str(tmp_path / 'nope' / 'ethtool'),
        'kernel_log_cmd': dmesg, 'uptime_path': up})
    assert failed and result['msg'] == ('ethtool not found on this host (%s); install the ethtool package or point '
                                        'ethtool_cmd at it' % (tmp_path / 'nope' / 'ethtool'))


def test_a_failing_kernel_log_command_says_become(tmp_path):
    eth, up = tools(tmp_path, {}, 'spark-boot-gen5-x4.log')[0::2]
    dmesg = stand_in(tmp_path, 'dmesg-denied', 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2\n'
                     'exit 1\n')
    result, failed = run_module(rdma_link_facts.main, {
        'sysfs_root': sysfs(tmp_path, 'gen5-x4-full'), 'ethtool_cmd': eth, 'kernel_log_cmd': dmesg,
        'uptime_path': up})
    assert failed and result['msg'].endswith('(rc=1): dmesg: read kernel buffer failed: Operation not permitted; run '
                                             'with become when kernel.dmesg_restrict is 1')
