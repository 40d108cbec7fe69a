# -*- coding: utf-8 -*-
"""The sockets' subnet (issue 30, fabric class): one interface per host in it, and the kernel's egress to every peer
leaves through it. Inputs: the captured ibdev2netdev of a two-node outer-port pair, a cabled f0 node and a
three-node ring (tests/fixtures/rdma/ibdev2netdev), the two-twin /29 `ip -br addr` capture, addresses written in
`ip -br addr` form, and `ip -j route get` answers in iproute2's JSON shape. Near misses that must stay quiet: the
dual-rail twins of one port in one subnet (a known-good layout), twins in two /29s, a pinned interface, a management
address outside the subnet, a route through the twin rail."""

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.nccl_env import rdma_fabric_egress_errors
from ansible_collections.dgxspark.vllm.plugins.module_utils import rdma as R
from tests.unit.conftest import read_fixture
from tests.unit.plugins.module_utils.test_rdma import brief_host

OUTER = read_fixture('rdma', 'ibdev2netdev', 'spark-2node-outer-port-f1-up.txt')
RING = read_fixture('rdma', 'ibdev2netdev', 'spark-3node-ring-all-up.txt')


def plan(hosts, **kw):
    ranks = dict((h, i) for i, h in enumerate(sorted(hosts)))
    return R.plan_fabric(hosts, ranks=ranks, mtu=None, platform='cpu', **kw)


def route(dev, dst, src=None, gateway=None):
    r = {'dst': dst, 'dev': dev, 'flags': [], 'uid': 0, 'cache': []}
    if src:
        r['prefsrc'] = src
    if gateway:
        r['gateway'] = gateway
    return json.dumps([r])


def test_a_management_address_in_the_socket_subnet_is_refused_naming_both_and_the_fix():
    a = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.1/24\nenP7s7 UP 10.10.0.50/24\n')
    b = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.2/24\nenP7s7 UP 192.0.2.11/24\n')
    p = plan({'node-a': a, 'node-b': b})
    assert p['rendezvous']['cidr'] == '10.10.0.0/24' and p['hosts']['node-a']['rendezvous_netdev'] == 'enp1s0f1np1'
    assert p['hosts']['node-a']['errors'] == [
        'node-a: 2 UP interfaces hold addresses in the socket subnet 10.10.0.0/24 (enp1s0f1np1 10.10.0.1, enP7s7 '
        '10.10.0.50); the sockets use enp1s0f1np1 but the kernel may send a peer through enP7s7. Fix: remove the '
        'extra address (ip addr del 10.10.0.50/24 dev enP7s7), or pin rdma_fabric_interface: enp1s0f1np1']
    assert p['hosts']['node-b']['errors'] == []  # its management address is outside the subnet


def test_a_third_node_with_wifi_in_the_subnet_is_named_alone():
    # H02's shape on the third rank of a single-subnet fleet: a Wi-Fi interface holding an address in the fabric subnet
    hosts = dict(('node-%s' % n, brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.%d/24\n' % i))
                 for n, i in (('a', 1), ('b', 2)))
    hosts['node-c'] = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.3/24\nwlP9s9 UP 10.10.0.23/24\n')
    p = plan(hosts)
    assert [h for h in sorted(hosts) if p['hosts'][h]['errors']] == ['node-c']
    assert 'ip addr del 10.10.0.23/24 dev wlP9s9' in p['hosts']['node-c']['errors'][0]
    assert p['hosts']['node-c']['errors'][0].startswith('node-c: 2 UP interfaces hold addresses in the socket subnet')


def test_pinned_interface_or_dual_rail_twins_or_two_slash29_twins_stay_quiet():
    a = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.1/24\nenP7s7 UP 10.10.0.50/24\n')
    b = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.2/24\n')
    assert plan({'node-a': a, 'node-b': b}, interface='enp1s0f1np1')['hosts']['node-a']['errors'] == []
    # both twins of the f1 port in one subnet: the known-good dual-rail layout
    a = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.1/24\nenP2p1s0f1np1 UP 10.10.0.11/24\n')
    b = brief_host(OUTER, 'enp1s0f1np1 UP 10.10.0.2/24\nenP2p1s0f1np1 UP 10.10.0.12/24\n')
    p = plan({'node-a': a, 'node-b': b})
    assert p['hosts']['node-a']['fabric_netdevs'] == ['enp1s0f1np1', 'enP2p1s0f1np1']
    assert [p['hosts'][h]['errors'] for h in ('node-a', 'node-b')] == [[], []]
    # twins in two /29s (captured): two subnets, one interface each
    twins = read_fixture('rdma', 'ip', 'two-twin-slash29-node-a.ip-br-addr.txt')
    facts = brief_host(read_fixture('rdma', 'ibdev2netdev', 'spark-node-cabled-f0-up.txt'), twins)
    assert R.socket_subnet_errors('node-a', facts, '172.31.5.0/29', 'enp1s0f0np0') == []


def test_parse_route_get_and_its_errors():
    assert R.parse_route_get(route('enP7s7', '10.10.0.2', '192.0.2.10', '192.0.2.1')) == {
        'dst': '10.10.0.2', 'dev': 'enP7s7', 'gateway': '192.0.2.1', 'prefsrc': '192.0.2.10'}
    for bad, what in (('', 'not JSON'), ('[]', 'no route'), ('[{"dst": "x"}]', 'no route')):
        with pytest.raises(R.RdmaError, match=what):
            R.parse_route_get(bad)


def test_a_host_route_through_management_is_refused_and_the_rails_are_not():
    good = {'peer': 'node-b', 'address': '10.10.0.2', 'route': R.parse_route_get(route('enp1s0f1np1', '10.10.0.2',
                                                                                       '10.10.0.1'))}
    stale = {'peer': 'node-c', 'address': '10.10.0.3',
             'route': R.parse_route_get(route('enP7s7', '10.10.0.3', '192.0.2.10', '192.0.2.1'))}
    assert R.egress_errors('node-a', 'enp1s0f1np1', [good]) == []
    assert R.egress_errors('node-a', 'enp1s0f1np1', [good, stale]) == [
        'node-a: the kernel sends node-c (10.10.0.3, rendezvous peer) out of enP7s7 via 192.0.2.1, not the socket '
        'interface enp1s0f1np1 (`ip route get 10.10.0.3`: dev enP7s7 via 192.0.2.1 src 192.0.2.10): a route sends the '
        'peer elsewhere. Fix: find it with `ip route show to match 10.10.0.3`, delete it (ip route del 10.10.0.3 ...) '
        'and remove it from the netplan or NetworkManager config that adds it']
    twin = {'peer': 'node-b', 'address': '10.10.0.2', 'route': R.parse_route_get(route('enP2p1s0f1np1', '10.10.0.2'))}
    assert R.egress_errors('node-a', 'enp1s0f1np1', [twin], rails=['enp1s0f1np1', 'enP2p1s0f1np1']) == []
    # a management rendezvous (ring): the fabric rails are not the sockets' interface
    assert len(R.egress_errors('node-a', 'enP7s7', [twin], rails=['enp1s0f1np1', 'enP2p1s0f1np1'])) == 1


def test_the_filter_reads_the_loop_results_of_the_role():
    hosts = {'node-a': brief_host(RING, 'enp1s0f0np0 UP 10.0.12.1/24\nenp1s0f1np1 UP 10.0.13.1/24\n'
                                        'enP7s7 UP 192.0.2.10/24\n'),
             'node-b': brief_host(RING, 'enp1s0f0np0 UP 10.0.23.2/24\nenp1s0f1np1 UP 10.0.12.2/24\n'
                                        'enP7s7 UP 192.0.2.11/24\n'),
             'node-c': brief_host(RING, 'enp1s0f0np0 UP 10.0.13.3/24\nenp1s0f1np1 UP 10.0.23.3/24\n'
                                        'enP7s7 UP 192.0.2.12/24\n')}
    p = plan(hosts)
    assert (p['topology'], p['rendezvous']['network']) == ('ring', 'management')
    results = [{'item': 'node-b', 'rc': 0, 'stdout': route('enP7s7', '192.0.2.11', '192.0.2.10')},
               {'item': 'node-c', 'rc': 0, 'stdout': route('enp1s0f1np1', '192.0.2.12', '10.0.13.1', '10.0.13.3')},
               {'item': 'node-a', 'skipped': True}]
    errors = rdma_fabric_egress_errors(results, p, 'node-a')
    assert len(errors) == 1 and errors[0].startswith('node-a: the kernel sends node-c (192.0.2.12, rendezvous peer) '
                                                     'out of enp1s0f1np1 via 10.0.13.3, not the socket interface enP7s7')
    with pytest.raises(AnsibleFilterError, match='rdma_fabric_egress_errors on node-a: .*not JSON'):
        rdma_fabric_egress_errors([{'item': 'node-b', 'stdout': 'Error: any valid prefix is expected'}], p, 'node-a')
