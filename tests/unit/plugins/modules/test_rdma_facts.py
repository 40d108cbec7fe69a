"""rdma_facts module: real commands replaced by stand-in scripts printing the fixture captures."""
import os
import stat

from ansible_collections.dgxspark.vllm.plugins.modules import rdma_facts
from tests.unit.conftest import FIXTURES
from tests.unit.plugins.modules.utils import run_module

FLEET = os.path.join(FIXTURES, 'rdma', 'fleets')


def stand_in(tmp_path, name, body):
    p = tmp_path / name
    p.write_text('#!/bin/sh\n' + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def node_tools(tmp_path, fleet, node):
    d = os.path.join(FLEET, fleet, node)
    ibdev = stand_in(tmp_path, 'ibdev2netdev', 'cat %s/ibdev2netdev.txt\n' % d)
    ip = stand_in(tmp_path, 'ip', 'test "$1" = -j || exit 2\ncat %s/ip-j-"$2".json\n' % d)
    return d, ibdev, ip


def test_t2_node_a_facts(tmp_path):
    d, ibdev, ip = node_tools(tmp_path, 't2', 'node-a')
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal:       127535504 kB\nCmaTotal:              0 kB\n')
    result, failed = run_module(rdma_facts.main, {
        'sysfs_root': os.path.join(d, 'sys'), 'ibdev2netdev_cmd': ibdev, 'ip_cmd': ip,
        'meminfo_path': str(meminfo)})
    assert not failed and result['changed'] is False
    facts = result['ansible_facts']['rdma_facts']
    assert facts == result['rdma_facts']
    assert [h['hca'] for h in facts['hcas']] == ['rocep1s0f0', 'rocep1s0f1', 'roceP2p1s0f0', 'roceP2p1s0f1']
    h = facts['hcas'][0]
    assert {k: h[k] for k in ('hca', 'port', 'netdev', 'state', 'twin', 'ipv4', 'prefixlen', 'cidr', 'mtu',
                              'operstate', 'roce_v2_gid_index')} == {
        'hca': 'rocep1s0f0', 'port': 1, 'netdev': 'enp1s0f0np0', 'state': 'Up', 'twin': 'roceP2p1s0f0',
        'ipv4': '192.168.192.2', 'prefixlen': 24, 'cidr': '192.168.192.0/24', 'mtu': 9000, 'operstate': 'UP',
        'roce_v2_gid_index': 3}
    twin = facts['hcas'][2]
    assert (twin['state'], twin['ipv4'], twin['roce_v2_gid_index']) == ('Up', None, None)
    assert facts['netdevs']['enP7s7']['ipv4'][0]['address'] == '192.0.2.10'
    assert facts['cma_total_kib'] == 0


def test_check_mode_returns_the_same_facts(tmp_path):
    d, ibdev, ip = node_tools(tmp_path, 'y3', 'node-c')
    args = {'sysfs_root': os.path.join(d, 'sys'), 'ibdev2netdev_cmd': ibdev, 'ip_cmd': ip}
    normal, _ = run_module(rdma_facts.main, args)
    checked, failed = run_module(rdma_facts.main, dict(args, _ansible_check_mode=True))
    assert not failed and checked['rdma_facts'] == normal['rdma_facts']
    assert [h['roce_v2_gid_index'] for h in normal['rdma_facts']['hcas']] == [3, 3, 3, 3]


def test_missing_tool_names_the_fix(tmp_path):
    result, failed = run_module(rdma_facts.main, {'ibdev2netdev_cmd': str(tmp_path / 'nope' / 'ibdev2netdev')})
    assert failed
    assert result['msg'] == (
        'ibdev2netdev not found on this host (%s); install it (DGX OS: package "infiniband-diags"/"rdma-core" or '
        'the MLNX OFED tools) or point ibdev2netdev_cmd (role: rdma_fabric_ibdev2netdev_cmd) at it'
        % (tmp_path / 'nope' / 'ibdev2netdev'))


def test_malformed_output_quotes_the_line(tmp_path):
    ibdev = stand_in(tmp_path, 'ibdev2netdev', 'echo "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)"\necho "garbage here"\n')
    ip = stand_in(tmp_path, 'ip', 'echo "[]"\n')
    result, failed = run_module(rdma_facts.main, {'ibdev2netdev_cmd': ibdev, 'ip_cmd': ip,
                                                  'sysfs_root': str(tmp_path)})
    assert failed
    assert result['msg'] == "ibdev2netdev line 2 is not '<hca> port <n> ==> <netdev> (Up|Down)': 'garbage here'"


def test_failing_command_reports_rc_and_stderr(tmp_path):
    ibdev = stand_in(tmp_path, 'ibdev2netdev', 'echo "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)"\n')
    ip = stand_in(tmp_path, 'ip', 'echo "Option \\"-j\\" is unknown" >&2\nexit 255\n')
    result, failed = run_module(rdma_facts.main, {'ibdev2netdev_cmd': ibdev, 'ip_cmd': ip})
    assert failed and result['rc'] == 255
    assert result['msg'] == '%s -j addr failed (rc=255): Option "-j" is unknown' % ip
