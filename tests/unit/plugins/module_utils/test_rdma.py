"""module_utils/rdma.py against the real captures in tests/fixtures/rdma (fixtures/README)."""
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import rdma as R
from tests.unit.conftest import FIXTURES, read_fixture
from tests.unit import captures as C

RD = os.path.join(FIXTURES, 'rdma')


def fx(*parts):
    return read_fixture('rdma', *parts)


def yml(*parts):
    with open(os.path.join(RD, *parts)) as f:
        return yaml.safe_load(f)


# ------------------------------------------------------------------ ibdev2netdev

def test_ibdev2netdev_s01_two_node_outer_port():
    rows = R.parse_ibdev2netdev(fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt'))
    assert rows == [
        {'hca': 'roceP2p1s0f0', 'port': 1, 'netdev': 'enP2p1s0f0np0', 'state': 'Down'},
        {'hca': 'roceP2p1s0f1', 'port': 1, 'netdev': 'enP2p1s0f1np1', 'state': 'Up'},
        {'hca': 'rocep1s0f0', 'port': 1, 'netdev': 'enp1s0f0np0', 'state': 'Down'},
        {'hca': 'rocep1s0f1', 'port': 1, 'netdev': 'enp1s0f1np1', 'state': 'Up'},
    ]
    names = [r['hca'] for r in rows]
    assert R.twin_of('rocep1s0f1', names) == 'roceP2p1s0f1'
    assert R.twin_of('roceP2p1s0f0', names) == 'rocep1s0f0'


def test_ibdev2netdev_cabled_f0_and_ring_and_mellanox():
    def up(text):
        return sorted(r['hca'] for r in R.parse_ibdev2netdev(text) if r['state'] == 'Up')

    assert up(fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')) == ['roceP2p1s0f0', 'rocep1s0f0']
    assert up(fx('ibdev2netdev', 'spark-3node-ring-all-up.txt')) == [
        'roceP2p1s0f0', 'roceP2p1s0f1', 'rocep1s0f0', 'rocep1s0f1']
    rows = R.parse_ibdev2netdev(fx('ibdev2netdev', 'mellanox-server-mixed-ib-eth.txt'))
    assert [(r['hca'], r['netdev'], r['state']) for r in rows] == [
        ('mlx5_0', 'ib0', 'Down'), ('mlx5_1', 'ib1', 'Up'),
        ('mlx5_2', 'enp23s0f0', 'Up'), ('mlx5_3', 'enp23s0f1', 'Down')]


def test_ibdev2netdev_verbose_form_and_malformed_line():
    rows = R.parse_ibdev2netdev('mlx5_0 (MT4129 - MCX75310AAS) fw 28.39.1002 port 1 (ACTIVE) ==> ib0 (Up)\n')
    assert rows == [{'hca': 'mlx5_0', 'port': 1, 'netdev': 'ib0', 'state': 'Up'}]
    with pytest.raises(R.RdmaError) as e:
        R.parse_ibdev2netdev('rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)\nrocep1s0f1 port 1 -> enp1s0f1np1 Up\n')
    assert str(e.value) == ("ibdev2netdev line 2 is not '<hca> port <n> ==> <netdev> (Up|Down)': "
                            "'rocep1s0f1 port 1 -> enp1s0f1np1 Up'")


def test_device_order_is_pci_order():
    names = ['roceP2p1s0f1', 'rocep1s0f1', 'roceP2p1s0f0', 'rocep1s0f0', 'mlx5_10', 'mlx5_2']
    assert sorted(names, key=R.device_sort_key) == [
        'rocep1s0f0', 'rocep1s0f1', 'roceP2p1s0f0', 'roceP2p1s0f1', 'mlx5_2', 'mlx5_10']
    assert R.port_index('enp1s0f1np1') == 1 and R.port_index('enP2p1s0f0np0') == 0


# ------------------------------------------------------------------ ip

def test_ip_brief_addr_s04_unconfigured_spark():
    nd = C.parse_ip_brief_addr(fx('ip', 'unconfigured-spark-node-a.ip-br-addr.txt'))
    assert sorted(nd) == ['docker0', 'enP2p1s0f0np0', 'enP2p1s0f1np1', 'enP7s7', 'enp1s0f0np0',
                          'enp1s0f1np1', 'lo', 'wlP9s9']
    assert nd['enP7s7']['ipv4'] == [{'address': '192.0.2.163', 'prefixlen': 24, 'cidr': '192.0.2.0/24'}]
    assert nd['enP7s7']['ipv6'] == ['fe80::xxxx/64']  # masked token kept opaque
    assert nd['enp1s0f1np1']['operstate'] == 'UP'
    assert nd['enp1s0f1np1']['ipv4'][0]['address'] == '169.254.12.34'
    assert nd['enP2p1s0f1np1']['ipv4'] == []
    # Up is not "configured": no fabric port has a usable IPv4
    usable = [n for n in ('enp1s0f0np0', 'enp1s0f1np1', 'enP2p1s0f0np0', 'enP2p1s0f1np1')
              if nd[n]['operstate'] == 'UP' and R.usable_ipv4(nd[n])]
    assert usable == []
    assert R.usable_ipv4(nd['enP7s7'])['cidr'] == '192.0.2.0/24'


def test_ip_brief_link_s04_flags():
    nd = C.parse_ip_brief_link(fx('ip', 'unconfigured-spark-node-a.ip-br-link.txt'))
    assert nd['enp1s0f0np0']['flags'] == ['NO-CARRIER', 'BROADCAST', 'MULTICAST', 'UP']
    assert nd['enP2p1s0f1np1']['operstate'] == 'UP'
    assert nd['enp1s0f1np1']['flags'] == ['BROADCAST', 'MULTICAST', 'UP', 'LOWER_UP']


def test_ip_brief_addr_two_twin_slash29_ignores_metric():
    nd = C.parse_ip_brief_addr(fx('ip', 'two-twin-slash29-node-a.ip-br-addr.txt'))
    assert nd['enP7s7']['ipv4'] == [{'address': '192.0.2.100', 'prefixlen': 23, 'cidr': '192.0.2.0/23'}]
    assert nd['enp1s0f0np0']['ipv4'][0]['cidr'] == '172.31.5.0/29'
    assert nd['enP2p1s0f0np0']['ipv4'][0]['cidr'] == '172.31.5.8/29'
    assert nd['enp1s0f1np1'] == {'ifname': 'enp1s0f1np1', 'operstate': 'DOWN', 'mtu': None, 'flags': [],
                                 'ipv4': [], 'ipv6': []}


def test_ip_addr_show_ring_readme_mtu_1500():
    nd = C.parse_ip_addr_show(fx('ip', 'ring-readme-example.ip-addr-show-enp1s0f1np1.txt'))
    dev = nd['enp1s0f1np1']
    assert (dev['mtu'], dev['operstate'], dev['flags']) == (1500, 'UP', ['BROADCAST', 'MULTICAST', 'UP', 'LOWER_UP'])
    assert dev['ipv4'] == [{'address': '192.168.1.1', 'prefixlen': 24, 'cidr': '192.168.1.0/24', 'scope': 'link'}]


def test_ip_json_addr_and_link_merge():
    d = os.path.join(RD, 'fleets', 't2', 'node-a')
    with open(os.path.join(d, 'ip-j-addr.json')) as f:
        addr = R.parse_ip_json_addr(f.read())
    with open(os.path.join(d, 'ip-j-link.json')) as f:
        link = R.parse_ip_json_link(f.read())
    nd = R.merge_netdevs(link, addr)
    assert nd['enp1s0f0np0']['mtu'] == 9000
    assert nd['enp1s0f0np0']['ipv4'] == [{'address': '192.168.192.2', 'prefixlen': 24,
                                          'cidr': '192.168.192.0/24', 'scope': 'global'}]
    assert nd['enp1s0f1np1']['operstate'] == 'DOWN'


def test_ip_json_malformed_quotes_line():
    with pytest.raises(R.RdmaError) as e:
        R.parse_ip_json_addr('[{"ifname": "eth0",\n "mtu": 1500 "operstate": "UP"}]')
    assert "at line 2: ' \"mtu\": 1500 \"operstate\": \"UP\"}]'" in str(e.value)
    with pytest.raises(R.RdmaError) as e:
        R.parse_ip_json_link('[{"mtu": 1500}]')
    assert str(e.value) == 'ip -j link entry has no ifname: \'{"mtu": 1500}\''
    with pytest.raises(R.RdmaError) as e:
        C.parse_ip_brief_addr('enp1s0f0np0\n')
    assert str(e.value) == "ip -br addr line has no state column: 'enp1s0f0np0'"


# ------------------------------------------------------------------ GID tables

def test_gid_f03_per_node_index():
    exp = yml('sysfs-gids', 'f03-gid-index-per-node', 'expected.yaml')
    root = os.path.join(RD, 'sysfs-gids', 'f03-gid-index-per-node')
    for node, ip in exp['input']['fabric_ipv4'].items():
        for hca, want in exp['expected']['gid_index'][node].items():
            table = R.read_gid_table(os.path.join(root, node), hca)
            assert R.select_roce_v2_gid_index(table, ip) == want, (node, hca)
    a = R.read_gid_table(os.path.join(root, 'node-a'), 'rocep1s0f1')
    assert a[0] == {'index': 3, 'gid': 'fe80:0000:0000:0000:xxxx:xxxx:xxxx:xxxx', 'type': 'RoCE v2'}
    assert R.gid_ipv4(a[0]['gid']) is None and R.gid_ipv4(a[1]['gid']) == '10.10.0.1'
    # the file the source does not give: gids/3 exists, gid_attrs/types/3 does not
    b = R.read_gid_table(os.path.join(root, 'node-b'), 'roceP2p1s0f1')
    assert b == [{'index': 3, 'gid': '0000:0000:0000:0000:0000:0000:0000:0000', 'type': None}]


def test_gid_f03_all_zero_rail_fails_naming_node_and_hca():
    exp = yml('sysfs-gids', 'f03-gid-index-per-node', 'expected.yaml')
    root = os.path.join(RD, 'sysfs-gids', 'f03-gid-index-per-node', 'node-b')
    rows = [{'hca': h, 'port': 1, 'netdev': n, 'state': 'Up'}
            for h, n in (('rocep1s0f1', 'enp1s0f1np1'), ('roceP2p1s0f1', 'enP2p1s0f1np1'))]
    netdevs = {'enp1s0f1np1': {'ifname': 'enp1s0f1np1', 'operstate': 'UP', 'mtu': 9000, 'flags': [],
                               'ipv4': [{'address': '10.10.0.2', 'prefixlen': 24, 'cidr': '10.10.0.0/24'}],
                               'ipv6': []}}
    facts = R.build_host_facts(rows, netdevs, dict((r['hca'], R.read_gid_table(root, r['hca'])) for r in rows))
    index = [h for h in facts['hcas'] if h['hca'] == 'rocep1s0f1'][0]['roce_v2_gid_index']
    assert index == 3
    errors = R.check_gid_index('node-b', facts, exp['input']['nccl_ib_hca'], index)
    want = exp['expected']['preflight_failure']
    assert errors == ['%s %s: GID index 3 holds an all-zero GID (no address on enP2p1s0f1np1); give '
                      'enP2p1s0f1np1 an address in the fabric or drop roceP2p1s0f1 from NCCL_IB_HCA'
                      % (want['node'], want['hca'])]


def test_gid_i3_show_gids_v1_v2():
    exp = yml('sysfs-gids', 'i3-show-gids-roce-v1-v2', 'expected.yaml')
    table = R.read_gid_table(os.path.join(RD, 'sysfs-gids', 'i3-show-gids-roce-v1-v2', 'node-a'), 'rocep1s0f0')
    assert R.gid_ipv4(table[0]['gid']) == exp['expected']['ipv4_from_gid']
    assert R.select_roce_v2_gid_index(table, exp['expected']['ipv4_from_gid']) == \
        exp['expected']['gid_index']['node-a']['rocep1s0f0']
    assert R.select_roce_v2_gid_index(table, '192.168.100.11') is None


def test_gid_table_missing_dir_is_empty(tmp_path):
    assert R.read_gid_table(str(tmp_path), 'rocep1s0f0') == []


# ------------------------------------------------------------------ NCCL_IB_HCA (catalogue nccl_hca_prefix)

def test_f04_parse_spark_values():
    data = yml('nccl-env', 'f04-nccl-ib-hca-values.yaml')
    for case in data['spark_values']['cases']:
        got = R.parse_nccl_ib_hca(case['value'])
        want = dict((k, case['expected'][k]) for k in ('mode', 'items'))
        assert got == want, case['env_line']
        if 'expands_to' in case['expected']:
            hcas = [dict(r, state=r['state']) for r in
                    R.parse_ibdev2netdev(fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt'))]
            out = R.expand_nccl_ib_hca(case['value'], hcas)
            assert out['devices'] == case['expected']['expands_to']
            assert out['warnings'] == ['NCCL_IB_HCA=roce also matches Down HCAs rocep1s0f0, roceP2p1s0f0 '
                                       '(Down ports are included implicitly); list the Up HCAs explicitly']


def test_f04_mellanox_prefix_trap_and_exact_form():
    data = yml('nccl-env', 'f04-nccl-ib-hca-values.yaml')['mellanox_host']
    devices = fx('nccl-env', 'f04-mlx5-class-infiniband-ls.txt').split()
    assert devices == data['devices']
    assert R.match_nccl_ib_hca('mlx5_1', devices) == data['expected']['plain_value_mlx5_1_matches']
    assert R.render_nccl_ib_hca(data['wanted'], devices) == data['expected']['emitted_value']
    assert R.match_nccl_ib_hca(data['expected']['emitted_value'], devices) == data['wanted']
    # no other device starts with rocep1s0f0: the plain form is exact already (golden T2 line)
    assert R.render_nccl_ib_hca(['rocep1s0f0'], ['rocep1s0f0', 'rocep1s0f1', 'roceP2p1s0f0']) == 'rocep1s0f0'
    assert R.match_nccl_ib_hca('^roceP2p1s0f0,roceP2p1s0f1', data['devices'] + ['roceP2p1s0f0']) == \
        ['mlx5_0', 'mlx5_1', 'mlx5_10', 'mlx5_11']
    assert R.match_nccl_ib_hca('rocep1s0f1', ['rocep1s0f1', 'roceP2p1s0f1']) == ['rocep1s0f1']  # case-sensitive


@pytest.mark.parametrize('value,msg', [
    ('', 'NCCL_IB_HCA is empty; list the HCAs (e.g. rocep1s0f1) or unset it'),
    ('rocep1s0f0,,rocep1s0f1', 'NCCL_IB_HCA=rocep1s0f0,,rocep1s0f1: empty or misplaced item \'\'; '
                               'use "[^][=]dev[:port],dev..."'),
    ('rocep1s0f1:x', "NCCL_IB_HCA=rocep1s0f1:x: bad port in 'rocep1s0f1:x'; use dev:<number>"),
])
def test_f04_parse_errors(value, msg):
    with pytest.raises(R.RdmaError) as e:
        R.parse_nccl_ib_hca(value)
    assert str(e.value) == msg


def test_f04_exclude_exact():
    assert R.parse_nccl_ib_hca('^=mlx5_1') == {'mode': 'exclude_exact', 'items': [{'device': 'mlx5_1'}]}
    assert R.match_nccl_ib_hca('^=mlx5_1', ['mlx5_0', 'mlx5_1', 'mlx5_10']) == ['mlx5_0', 'mlx5_10']


# ------------------------------------------------------------------ host facts, topology

def brief_host(ibdev_text, addr_text, sysfs_root=None, link_text=None):
    rows = R.parse_ibdev2netdev(ibdev_text)
    nd = C.parse_ip_brief_addr(addr_text)
    if link_text:
        nd = R.merge_netdevs(C.parse_ip_brief_link(link_text), nd)
    tables = dict(((r['hca'], r['port']), R.read_gid_table(sysfs_root, r['hca'], r['port']) if sysfs_root else [])
                  for r in rows)
    return R.build_host_facts(rows, nd, tables)


def test_s04_unconfigured_spark_has_no_fabric():
    facts = brief_host(fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt'),
                       fx('ip', 'unconfigured-spark-node-a.ip-br-addr.txt'),
                       link_text=fx('ip', 'unconfigured-spark-node-a.ip-br-link.txt'))
    by = dict((h['hca'], h) for h in facts['hcas'])
    assert [h['hca'] for h in facts['hcas']] == ['rocep1s0f0', 'rocep1s0f1', 'roceP2p1s0f0', 'roceP2p1s0f1']
    assert (by['rocep1s0f1']['state'], by['rocep1s0f1']['ipv4'], by['rocep1s0f1']['twin']) == \
        ('Up', None, 'roceP2p1s0f1')
    assert R.fabric_candidates(facts) == []
    other = brief_host(fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt'),
                       'enp1s0f1np1 UP 10.10.0.1/24\nenP7s7 UP 192.0.2.164/24\n')
    plan = R.plan_fabric({'node-a': facts, 'node-b': other}, ranks={'node-a': 0, 'node-b': 1}, mtu=None)
    assert plan['topology'] == 'none'
    assert plan['errors'][0] == ('node-a: no Up RoCE netdev with an IPv4 (Up HCAs: rocep1s0f1, roceP2p1s0f1); '
                                 'cable a fabric port and give its netdev an address (169.254 autoconf does '
                                 'not count), then rerun')


def test_fabric_port_down_with_its_address_is_named_with_the_fix():
    # `ip link set enp1s0f1np1 down` on a cabled, addressed node (fault suite): the address stays, the port is DOWN.
    ibdev = 'rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)\n'
    down = brief_host(ibdev, 'enp1s0f1np1 DOWN 198.18.21.11/24\nenP7s7 UP 198.18.20.11/24\n')
    up = brief_host('rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n', 'enp1s0f1np1 UP 198.18.21.10/24\n'
                    'enP7s7 UP 198.18.20.10/24\n')
    plan = R.plan_fabric({'node-a': up, 'node-b': down}, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['errors'][0] == ('node-b: no Up RoCE netdev with an IPv4 (Up HCAs: none); rocep1s0f1 ==> enp1s0f1np1 '
                                 'holds 198.18.21.11 but is DOWN: bring it up (ip link set enp1s0f1np1 up) and check '
                                 'its cable; cable a fabric port and give its netdev an address (169.254 autoconf '
                                 'does not count), then rerun')


def test_f06_socket_iface_follows_the_address_and_pin_without_address_fails():
    exp = {'socket_ifname_node_a': 'enp1s0f0np0', 'reject_rendered_value': 'enp1s0f1np1'}
    ibdev = fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')
    a = brief_host(ibdev, fx('ip', 'f06-node-a.ip-br-4-addr.txt'))
    b = brief_host(ibdev, 'enp1s0f0np0      UP             10.10.1.2/24\nenp1s0f1np1      DOWN\n')
    hosts = {'node-a': a, 'node-b': b}
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['errors'] == []
    env = R.nccl_env(a, plan, host='node-a')
    assert [env[k] for k in ('GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'NCCL_SOCKET_IFNAME')] == \
        [exp['socket_ifname_node_a']] * 3
    pinned = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu',
                           interface=exp['reject_rendered_value'])
    assert pinned['hosts']['node-a']['errors'] == [
        'node-a: interface enp1s0f1np1 (rdma_fabric_interface) is DOWN with no IPv4; GLOO/TP/NCCL sockets '
        'would fail with "Unable to find address" (catalogue gloo_no_address): bring it up with an IPv4 or pin the interface '
        'that holds the address']
    assert pinned['rendezvous'] is None
    assert pinned['errors'] == [
        'no subnet is shared by every rank to host the rendezvous (TCPStore/Gloo): node-a (enp1s0f1np1 is DOWN, '
        'no IPv4), node-b (enp1s0f1np1 is DOWN, no IPv4); give every rank an address on one common network '
        '(fabric or management) on enp1s0f1np1']


def ring_hosts(nodes):
    ibdev = fx('ibdev2netdev', 'spark-3node-ring-all-up.txt')
    return dict((n, brief_host(ibdev, '\n'.join('%s UP %s' % (i, a) for i, a in ifs.items()) + '\n'))
                for n, ifs in nodes.items())


def test_f08_triangle_rendezvous_on_management():
    case = yml('topology', 'f08-3node-triangle-rendezvous.yaml')
    hosts = ring_hosts(case['input']['nodes'])
    ranks = dict((n, i) for i, n in enumerate(case['input']['rank_order']))
    plan = R.plan_fabric(hosts, ranks=ranks, mtu=None)
    assert plan['topology'] == 'ring' and plan['errors'] == []
    assert plan['master_addr'] == case['expected']['master_addr']
    assert plan['rendezvous'] == {'cidr': '192.0.2.0/24', 'network': 'management', 'interface': None}
    for node, iface in case['expected']['GLOO_SOCKET_IFNAME'].items():
        env = R.nccl_env(hosts[node], plan, host=node)
        assert env['GLOO_SOCKET_IFNAME'] == iface
        assert env['NCCL_IB_SUBNET_AWARE_ROUTING'] == case['expected']['NCCL_IB_SUBNET_AWARE_ROUTING']
        # the Up HCAs that carry a ring address (the twins hold none in this input)
        assert env['NCCL_IB_HCA'] == 'rocep1s0f0,rocep1s0f1'
        assert 'NCCL_IB_GID_INDEX' not in env and 'NCCL_IB_ADDR_RANGE' not in env
    bad = R.plan_fabric(hosts, ranks=ranks, mtu=None, master_addr=case['input']['requested_master_addr'])
    assert case['expected']['reject_requested_master_addr'] is True
    assert bad['errors'] == ['master address 192.168.0.1 is not reachable from node-c (no address in its '
                             'subnet); use 192.0.2.36 (node-a enP7s7, a subnet every rank shares)']


def test_f08_no_shared_network_refused_naming_hosts():
    case = yml('topology', 'f08-3node-triangle-rendezvous.yaml')
    nodes = dict((n, dict((i, a) for i, a in ifs.items() if i != 'enP7s7'))
                 for n, ifs in case['input']['nodes'].items())
    plan = R.plan_fabric(ring_hosts(nodes), ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None)
    assert plan['errors'] == ['no subnet is shared by every rank to host the rendezvous (TCPStore/Gloo) among '
                              'node-a, node-b, node-c; give every rank an address on one common network '
                              '(fabric or management)']
    assert plan['master_addr'] is None


def test_f07_same_index_links_reported():
    case = yml('topology', 'f07-3node-same-index-cabling.yaml')
    nodes = {}
    for link in case['input']['links']:
        for end in (link['a'], link['b']):
            nodes.setdefault(end['node'], {'enP7s7': '192.0.2.%d/24' % (40 + len(nodes))})[end['ifname']] = end['addr']
    plan = R.plan_fabric(ring_hosts(nodes), ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None)
    assert plan['topology'] == 'ring' and plan['errors'] == []
    got = [{'subnet': s['subnet'], 'ends': ['%s %s' % (e['host'], e['netdev']) for e in s['ends']],
            'pattern': s['pattern']} for s in plan['same_index_links']]
    assert got == case['expected']['same_index_links']
    assert plan['warnings'][0] == ('link 192.168.0.0/24 joins the same port index on both ends (node-a enp1s0f0np0 '
                                   '<-> node-b enp1s0f0np0, p0<->p0); recable p0<->p1 as in the ring playbook '
                                   '(NCCL_IB_SUBNET_AWARE_ROUTING=1 is set)')


def test_f07_cma_zero_refused_on_spark_naming_kernel():
    case = yml('topology', 'f07-3node-same-index-cabling.yaml')
    cma = R.parse_cma_total_kib(fx('meminfo', 'proc-meminfo-cmatotal-0kb-excerpt.txt'))
    assert cma == 0
    nodes = {}
    for link in case['input']['links']:
        for end in (link['a'], link['b']):
            nodes.setdefault(end['node'], {'enP7s7': '192.0.2.%d/24' % (40 + len(nodes))})[end['ifname']] = end['addr']
    hosts = ring_hosts(nodes)
    hosts['node-b'].update(cma_total_kib=cma, kernel=case['input']['node-b']['kernel'])
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None)
    assert plan['hosts']['node-b']['errors'] == [
        'node-b: CmaTotal is 0 kB on kernel 7.0.0-1019-nvidia; ibv_reg_mr fails with ENOMEM (catalogue cma_zero): boot a '
        'kernel with CMA (e.g. 6.17.0-1031-nvidia)']
    cpu = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None, platform='cpu')
    assert cpu['hosts']['node-b']['errors'] == [] and cpu['info'][0].endswith('[informational on cpu lanes]')


def test_s02_ring_netplan_links_all_cross_index():
    exp_links = {
        '192.168.0.0/24': ['node-a enp1s0f0np0', 'node-b enp1s0f1np1'],
        '192.168.1.0/24': ['node-a enP2p1s0f0np0', 'node-b enP2p1s0f1np1'],
        '192.168.2.0/24': ['node-a enp1s0f1np1', 'node-c enp1s0f0np0'],
        '192.168.3.0/24': ['node-a enP2p1s0f1np1', 'node-c enP2p1s0f0np0'],
        '192.168.4.0/24': ['node-b enp1s0f0np0', 'node-c enp1s0f1np1'],
        '192.168.5.0/24': ['node-b enP2p1s0f0np0', 'node-c enP2p1s0f1np1'],
    }
    netplan = yml('ip', 'spark-3node-ring-netplan-addresses.yaml')
    plan = R.plan_fabric(ring_hosts(netplan), ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None)
    assert dict((l['subnet'], ['%s %s' % (e['host'], e['netdev']) for e in l['ends']]) for l in plan['links']) \
        == exp_links
    assert plan['same_index_links'] == []
    # fabric only, no management network: nothing can host the rendezvous
    assert plan['master_addr'] is None and len(plan['errors']) == 1


def test_mtu_s02_default_1500_reported_per_host():
    show = C.parse_ip_addr_show(fx('ip', 'ring-readme-example.ip-addr-show-enp1s0f1np1.txt'))
    ibdev = fx('ibdev2netdev', 'spark-3node-ring-all-up.txt')
    a = R.build_host_facts(R.parse_ibdev2netdev(ibdev), show, {})
    b_dev = C.parse_ip_addr_show(
        '4: enp1s0f1np1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP group default qlen 1000\n'
        '    inet 192.168.1.2/24 brd 192.168.1.255 scope link noprefixroute enp1s0f1np1\n')
    b = R.build_host_facts(R.parse_ibdev2netdev(ibdev), b_dev, {})
    plan = R.plan_fabric({'node-a': a, 'node-b': b}, ranks={'node-a': 0, 'node-b': 1}, platform='cpu')
    assert plan['topology'] == 'single_subnet'
    # only the offender is named (node-b is at 9000), with both values and the command that fixes it
    assert plan['errors'] == ['fabric MTU must be 9000 on every rank: node-a enp1s0f1np1 has MTU 1500 (want 9000). '
                              'Fix: on node-a: ip link set dev enp1s0f1np1 mtu 9000, persist it (netplan/nmcli) '
                              'and check with `ping -M do -s 8972 <peer>`']
    assert plan['mtus'] == {'node-a enp1s0f1np1': 1500, 'node-b enp1s0f1np1': 9000}


def test_hca_list_length_mismatch_single_subnet(tmp_path):
    ibdev = fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt')
    a = brief_host(ibdev, 'enp1s0f1np1 UP 10.10.0.1/24\nenP2p1s0f1np1 UP 10.10.0.11/24\n')
    b = brief_host(ibdev, 'enp1s0f1np1 UP 10.10.0.2/24\nenP2p1s0f1np1 UP fe80::xxxx/64\n')
    plan = R.plan_fabric({'node-a': a, 'node-b': b}, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['errors'] == ['NCCL_IB_HCA lists differ in length across ranks without subnet-aware routing '
                              '(node-a=rocep1s0f1,roceP2p1s0f1; node-b=rocep1s0f1); NCCL pairs devices by index: '
                              'give every rank the same number of fabric HCAs']


def test_s13_dual_rail_lists_both_twins_with_per_host_gid(tmp_path):
    # tests/fixtures/rdma/nccl-logs/spark-2node-dual-rail-healthy.log: both twins of the f1 port carry traffic; each host's GID index comes from its own table
    ibdev = fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt')
    hosts = {}
    for node, ips, idx in (('node-a', ('10.10.0.2', '10.10.0.12'), 3), ('node-b', ('10.10.0.1', '10.10.0.11'), 4)):
        root = tmp_path / node
        for hca, ip in zip(('rocep1s0f1', 'roceP2p1s0f1'), ips):
            base = root / 'class' / 'infiniband' / hca / 'ports' / '1'
            (base / 'gids').mkdir(parents=True)
            (base / 'gid_attrs' / 'types').mkdir(parents=True)
            mapped = '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % tuple(int(o) for o in ip.split('.'))
            (base / 'gids' / str(idx)).write_text(mapped + '\n')
            (base / 'gid_attrs' / 'types' / str(idx)).write_text('RoCE v2\n')
        hosts[node] = brief_host(ibdev, 'enp1s0f1np1 UP %s/24\nenP2p1s0f1np1 UP %s/24\n' % ips, str(root))
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None)
    assert plan['errors'] == []
    env_a = R.nccl_env(hosts['node-a'], plan, host='node-a')
    env_b = R.nccl_env(hosts['node-b'], plan, host='node-b')
    assert env_a['NCCL_IB_HCA'] == env_b['NCCL_IB_HCA'] == 'rocep1s0f1,roceP2p1s0f1'
    assert (env_a['NCCL_IB_GID_INDEX'], env_b['NCCL_IB_GID_INDEX']) == ('3', '4')
    assert (env_a['GLOO_SOCKET_IFNAME'], env_a['VLLM_HOST_IP']) == ('enp1s0f1np1', '10.10.0.2')
    assert env_a['NCCL_IB_ADDR_RANGE'] == '10.10.0.0/24'


def test_gid_missing_is_error_on_spark_info_on_cpu():
    ibdev = fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')
    hosts = {'node-a': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.1/24\n'),
             'node-b': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.2/24\n')}
    spark = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None)
    assert spark['hosts']['node-b']['errors'] == [
        'node-b: no RoCE v2 GID for the fabric address on rocep1s0f0; check `show_gids` / the sysfs GID table '
        'and that the netdev holds its IPv4 (catalogue nccl_wrong_gid)']
    cpu = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert cpu['hosts']['node-b']['errors'] == []
    env = R.nccl_env(hosts['node-b'], cpu, host='node-b')
    assert 'NCCL_IB_GID_INDEX' not in env  # omitted, never empty (catalogue nccl_wrong_gid)


def test_nccl_env_refuses_lane_setting_derived_keys():
    ibdev = fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')
    hosts = {'node-a': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.1/24\n'),
             'node-b': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.2/24\n')}
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    with pytest.raises(R.RdmaError) as e:
        R.nccl_env(hosts['node-a'], plan, overrides={'GLOO_SOCKET_IFNAME': 'enp1s0f1np1'})
    assert str(e.value) == ("the lane sets GLOO_SOCKET_IFNAME, which must come from each host's own facts (catalogue gloo_no_address); "
                            "remove them from the lane's nccl block")
    env = R.nccl_env(hosts['node-a'], plan, overrides={'NCCL_DEBUG': 'INFO', 'NCCL_CROSS_NIC': None})
    assert env['NCCL_DEBUG'] == 'INFO' and 'NCCL_CROSS_NIC' not in env


def test_f26_hosts_file_fixture_resolves_to_loopback():
    # the role's catalogue gloo_fullmesh check reads `getent ahostsv4 <hostname>`; this is the input it refuses
    lines = [l.split() for l in fx('node-prep', 'f26-node-b-etc-hosts.txt').splitlines() if l.strip()]
    resolved = [ip for ip, *names in lines if 'node-b' in names]
    assert resolved == ['127.0.1.1'] and R.is_loopback_address(resolved[0])
    assert not R.is_loopback_address('192.0.2.37')


def test_f26_loopback_hostname_is_refused_with_the_fix():
    ibdev = fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')
    lines = [l.split() for l in fx('node-prep', 'f26-node-b-etc-hosts.txt').splitlines() if l.strip()]
    hosts = {'node-a': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.1/24\n'),
             'node-b': brief_host(ibdev, 'enp1s0f0np0 UP 10.10.0.2/24\n')}
    hosts['node-b'].update(hostname='node-b', hostname_ipv4=[ip for ip, *n in lines if 'node-b' in n])
    hosts['node-a'].update(hostname='node-a', hostname_ipv4=['10.10.0.1'])
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['hosts']['node-a']['errors'] == []
    assert plan['hosts']['node-b']['errors'] == [
        'node-b: host name node-b resolves to 127.0.1.1 (loopback), so Gloo/TCPStore can bind to loopback and '
        'peers get "Connection refused" (catalogue gloo_fullmesh): map node-b to 10.10.0.2 in /etc/hosts instead of 127.0.1.1']


def test_s13_nccl_log_parse_and_match_with_rendered_env(tmp_path):
    seen = R.parse_nccl_log(fx('nccl-logs', 'spark-2node-dual-rail-healthy.log'))
    assert seen['node-a'] == {
        'ib_hca_env': 'roce',
        'devices': [{'dev': 'rocep1s0f1', 'port': 1, 'link': 'RoCE'}, {'dev': 'roceP2p1s0f1', 'port': 1, 'link': 'RoCE'}],
        'flags': ['RO'], 'oob': {'ifname': 'enp1s0f1np1', 'ipv4': '10.10.0.2'}, 'gid_index': 3}
    assert seen['node-b']['oob'] == {'ifname': 'enp1s0f1np1', 'ipv4': '10.10.0.1'}
    h100 = R.parse_nccl_log(fx('nccl-logs', 'mellanox-dgx-h100-net-ib-using.log'))
    assert [d['dev'] for d in h100['node-a']['devices']] == ['mlx5_10', 'mlx5_11']
    # the env the dual-rail node of tests/fixtures/rdma/nccl-logs/spark-2node-dual-rail-healthy.log renders (both f1 twins
    # addressed, RoCE v2 IPv4 GID at 3) matches the log
    ibdev = fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt')
    root = tmp_path / 'node-a'
    for hca, ip in (('rocep1s0f1', '10.10.0.2'), ('roceP2p1s0f1', '10.10.0.12')):
        base = root / 'class' / 'infiniband' / hca / 'ports' / '1'
        (base / 'gids').mkdir(parents=True)
        (base / 'gid_attrs' / 'types').mkdir(parents=True)
        (base / 'gids' / '3').write_text('::ffff:%s\n' % ip)
        (base / 'gid_attrs' / 'types' / '3').write_text('RoCE v2\n')
    a = brief_host(ibdev, 'enp1s0f1np1 UP 10.10.0.2/24\nenP2p1s0f1np1 UP 10.10.0.12/24\n', str(root))
    b = brief_host(ibdev, 'enp1s0f1np1 UP 10.10.0.1/24\nenP2p1s0f1np1 UP 10.10.0.11/24\n')
    plan = R.plan_fabric({'node-a': a, 'node-b': b}, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    env = R.nccl_env(a, plan, host='node-a')
    assert R.check_nccl_log('node-a', seen['node-a'], env) == []
    stale = dict(env, NCCL_IB_GID_INDEX='4', NCCL_SOCKET_IFNAME='enP2p1s0f1np1')
    assert R.check_nccl_log('node-a', seen['node-a'], stale) == [
        'node-a: NCCL bootstrap went over enp1s0f1np1:10.10.0.2, expected enP2p1s0f1np1:10.10.0.2',
        "node-a: NCCL used GID index 3, this host's table gives 4"]


# ------------------------------------------------------------------ fabric subnet: pin and preference (issue 20)

def twin_slash29_hosts():
    # node-a is the capture (two twins of f0 on two /29s, management enP7s7); node-b mirrors it one address up.
    ibdev = fx('ibdev2netdev', 'spark-node-cabled-f0-up.txt')
    a = brief_host(ibdev, fx('ip', 'two-twin-slash29-node-a.ip-br-addr.txt'))
    b = brief_host(ibdev, 'enP7s7 UP 192.0.2.101/23\nenp1s0f0np0 UP 172.31.5.2/29\nenp1s0f1np1 DOWN\n'
                          'enP2p1s0f0np0 UP 172.31.5.10/29\n')
    return {'node-a': a, 'node-b': b}


def test_two_shared_roce_subnets_choice_is_reported_with_its_reason():
    plan = R.plan_fabric(twin_slash29_hosts(), ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['errors'] == []
    assert plan['fabric_cidrs'] == ['172.31.5.0/29']
    choice = plan['fabric_choice']
    assert (choice['cidr'], choice['basis'], choice['considered']) == \
        ('172.31.5.0/29', 'address order (tie)', ['172.31.5.0/29', '172.31.5.8/29'])
    assert choice['reason'] == ('RoCE netdevs on every rank; 2 Up HCA rail(s) across the ranks; over 172.31.5.8/29 '
                                '(RoCE netdevs on every rank; 2 Up HCA rail(s) across the ranks); equal on every '
                                'rule, the lower address wins')
    assert plan['info'][:1] == ['fabric subnet 172.31.5.0/29 chosen among 172.31.5.0/29, 172.31.5.8/29 (%s); pin '
                                'rdma_fabric_cidr to choose another' % choice['reason']]


def test_pinned_cidr_chooses_only_inside_it():
    hosts = twin_slash29_hosts()
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu',
                         fabric_cidr='172.31.5.8/29')
    assert plan['errors'] == []
    assert (plan['fabric_cidr_pin'], plan['fabric_cidrs']) == ('172.31.5.8/29', ['172.31.5.8/29'])
    assert plan['fabric_choice']['basis'] == 'pinned'
    assert plan['fabric_choice']['reason'].startswith('inside rdma_fabric_cidr 172.31.5.8/29; RoCE netdevs')
    assert plan['hosts']['node-a']['hcas'] == ['roceP2p1s0f0']
    assert plan['master_addr'] == '172.31.5.9'
    env = R.nccl_env(hosts['node-b'], plan, host='node-b')
    assert (env['NCCL_IB_HCA'], env['NCCL_IB_ADDR_RANGE'], env['VLLM_HOST_IP'], env['GLOO_SOCKET_IFNAME']) == \
        ('roceP2p1s0f0', '172.31.5.8/29', '172.31.5.10', 'enP2p1s0f0np0')


def test_pin_without_an_address_inside_names_host_and_netdevs():
    plan = R.plan_fabric(twin_slash29_hosts(), ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu',
                         fabric_cidr='10.10.0.0/24')
    assert plan['topology'] == 'none'
    assert plan['errors'][:2] == [
        'node-a: no Up RoCE netdev has an address inside rdma_fabric_cidr 10.10.0.0/24 (Up RoCE netdevs: '
        'enp1s0f0np0 172.31.5.1, enP2p1s0f0np0 172.31.5.9); address a fabric port inside 10.10.0.0/24, or '
        'correct rdma_fabric_cidr',
        'node-b: no Up RoCE netdev has an address inside rdma_fabric_cidr 10.10.0.0/24 (Up RoCE netdevs: '
        'enp1s0f0np0 172.31.5.2, enP2p1s0f0np0 172.31.5.10); address a fabric port inside 10.10.0.0/24, or '
        'correct rdma_fabric_cidr']


@pytest.mark.parametrize('value,fragment', [
    ('172.31.5.1/29', 'has host bits set'),
    ('banana', "Expected 4 octets in 'banana'"),
    ('172.31.5.0/33', "'33' is not a valid netmask"),
])
def test_pin_malformed_refused(value, fragment):
    with pytest.raises(R.RdmaError) as e:
        R.plan_fabric(twin_slash29_hosts(), fabric_cidr=value)
    assert str(e.value).startswith("rdma_fabric_cidr '%s' is not an IPv4 network in CIDR form (" % value)
    assert fragment in str(e.value)
    assert str(e.value).endswith('write it as the fabric subnet, e.g. 10.10.0.0/24 (host bits zero), or leave it '
                                 'empty to discover')


def test_ipoib_subnet_shared_by_every_rank_does_not_win_by_sort_order():
    # tests/fixtures/rdma/ibdev2netdev/mellanox-server-mixed-ib-eth.txt (mixed host): ib1 (IPoIB, Up) and enp23s0f0
    # (RoCE, Up). 10.0.0.0/24 sorts first; the RoCE subnet wins.
    ibdev = fx('ibdev2netdev', 'mellanox-server-mixed-ib-eth.txt')
    hosts = dict(('node-%s' % n, brief_host(ibdev, 'ib1 UP 10.0.0.%d/24\nenp23s0f0 UP 192.168.50.%d/24\n' % (i, i)))
                 for i, n in ((1, 'a'), (2, 'b')))
    assert R.is_roce_netdev(hosts['node-a'], 'ib1') is False
    assert R.is_roce_netdev(hosts['node-a'], 'enp23s0f0') is True
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['errors'] == []
    assert plan['fabric_cidrs'] == ['192.168.50.0/24']
    assert plan['fabric_choice']['considered'] == ['192.168.50.0/24', '10.0.0.0/24']
    assert '10.0.0.0/24 (not RoCE on every rank (IPoIB)' in plan['fabric_choice']['reason']
    assert (plan['rendezvous']['cidr'], plan['master_addr']) == ('192.168.50.0/24', '192.168.50.1')
    assert plan['hosts']['node-b']['hcas'] == ['mlx5_2']


def test_management_subnet_on_a_roce_port_does_not_win_by_sort_order():
    # tests/fixtures/rdma/ibdev2netdev/spark-2node-outer-port-f1-up.txt (outer port, both twins Up): one carries the
    # management network the host names resolve into.
    ibdev = fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt')
    hosts = {}
    for i, n in ((1, 'node-a'), (2, 'node-b')):
        hosts[n] = brief_host(ibdev, 'enp1s0f1np1 UP 192.168.100.%d/24\nenP2p1s0f1np1 UP 10.0.0.%d/24\n' % (i, i))
        hosts[n]['hostname'], hosts[n]['hostname_ipv4'] = n, ['10.0.0.%d' % i]
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu')
    assert plan['fabric_cidrs'] == ['192.168.100.0/24']
    assert plan['fabric_choice']['reason'].endswith(
        'over 10.0.0.0/24 (RoCE netdevs on every rank; 2 Up HCA rail(s) across the ranks; host name of node-a, '
        'node-b resolves into it (management))')
    # the single shared RoCE subnet needs no ranking: the basis says so
    one = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1}, mtu=None, platform='cpu',
                        fabric_cidr='10.0.0.0/24')
    assert (one['fabric_cidrs'], one['fabric_choice']['basis']) == (['10.0.0.0/24'], 'pinned')


# ------------------------------------------------------------------ netplan persistence (catalogue fabric_mtu_mismatch)

def test_netplan_keeps_the_published_ring_addresses_and_mtu():
    published = yml('ip', 'spark-3node-ring-netplan-addresses.yaml')
    hosts = ring_hosts(published)
    plan = R.plan_fabric(hosts, ranks={'node-a': 0, 'node-b': 1, 'node-c': 2}, mtu=None, platform='cpu')
    for node, ifs in published.items():
        netdevs = plan['hosts'][node]['fabric_netdevs']
        doc = R.netplan_fabric(hosts[node], netdevs, 9000, addresses=True)
        assert doc['network']['version'] == 2
        eth = doc['network']['ethernets']
        assert sorted(eth) == sorted(netdevs) and netdevs
        for name, entry in eth.items():
            # the address NVIDIA's netplan gives that netdev, kept as written there
            assert entry == {'mtu': 9000, 'addresses': [ifs[name]]}, (node, name)
        # MTU only: the addresses stay with the operator's own file
        assert R.netplan_fabric(hosts[node], netdevs, 9000)['network']['ethernets'] == \
            dict((n, {'mtu': 9000}) for n in netdevs)


def test_netplan_refuses_what_it_cannot_persist():
    facts = brief_host(fx('ibdev2netdev', 'spark-2node-outer-port-f1-up.txt'),
                       fx('ip', 'unconfigured-spark-node-a.ip-br-addr.txt'),
                       link_text=fx('ip', 'unconfigured-spark-node-a.ip-br-link.txt'))
    with pytest.raises(R.RdmaError, match='no fabric netdev on this host'):
        R.netplan_fabric(facts, [], 9000)
    with pytest.raises(R.RdmaError, match='enp1s0f1np1 holds no IPv4 to persist'):
        R.netplan_fabric(facts, ['enp1s0f1np1'], 9000, addresses=True)
    with pytest.raises(R.RdmaError, match=r"fabric MTU 1200 to persist is not an Ethernet MTU in 1280\.\.9216"):
        R.netplan_fabric(facts, ['enp1s0f1np1'], 1200)
    with pytest.raises(R.RdmaError, match='fabric netdev eth9 is not among'):
        R.netplan_fabric(facts, ['eth9'], 9000)
