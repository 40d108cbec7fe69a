"""Golden tests: the seed fleets' facts, built from real captures, must give the NCCL/Gloo keys of
the golden launch lines (tests/fixtures/rdma/launch-lines), key by key."""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.nccl_env import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import rdma as R
from tests.unit.conftest import FIXTURES
from tests.unit import captures as C

RD = os.path.join(FIXTURES, 'rdma')
FILTERS = FilterModule().filters()
# the keys rdma_fabric owns; TORCH_NCCL_ASYNC_ERROR_HANDLING belongs to the lane's common env (docs/lanes.md)
OWNED = ('NCCL_', 'GLOO_', 'TP_SOCKET_IFNAME', 'MN_IF_NAME', 'VLLM_HOST_IP')


def fleet_facts(fleet, node, form='brief'):
    d = os.path.join(RD, 'fleets', fleet, node)
    with open(os.path.join(d, 'ibdev2netdev.txt')) as f:
        rows = R.parse_ibdev2netdev(f.read())
    if form == 'brief':
        with open(os.path.join(d, 'ip-br-addr.txt')) as f:
            netdevs = C.parse_ip_brief_addr(f.read())
    else:
        with open(os.path.join(d, 'ip-j-addr.json')) as f, open(os.path.join(d, 'ip-j-link.json')) as g:
            netdevs = R.merge_netdevs(R.parse_ip_json_link(g.read()), R.parse_ip_json_addr(f.read()))
    tables = dict(((r['hca'], r['port']), R.read_gid_table(os.path.join(d, 'sys'), r['hca'], r['port']))
                  for r in rows)
    return R.build_host_facts(rows, netdevs, tables)


def golden(name):
    with open(os.path.join(RD, 'launch-lines', name)) as f:
        return yaml.safe_load(f)


def owned(env):
    return dict((k, v) for k, v in env.items() if k.startswith(OWNED))


@pytest.mark.parametrize('fleet,lane_file,form', [
    ('t2', 'tp2-dflash2-t2-abb38bb.yaml', 'brief'),
    ('t2', 'tp2-dflash2-t2-abb38bb.yaml', 'json'),
    ('y3', 'tp3-y3-mtp-7d20368.yaml', 'brief'),
    ('y3', 'tp3-y3-dflash2-7d20368.yaml', 'json'),
])
def test_golden_env_key_by_key(fleet, lane_file, form):
    line = golden(lane_file)
    ranks = dict((r['host'], r['rank']) for r in line['ranks'])
    facts = dict((h, fleet_facts(fleet, h, form)) for h in ranks)
    plan = FILTERS['rdma_fabric_plan'](facts, ranks=ranks, mtu=9000 if form == 'json' else None)
    assert plan['errors'] == [] and plan['warnings'] == []
    if 'serve_argv_rendered' in line:
        argv = line['serve_argv_rendered'][0]
        want_master = argv[argv.index('--master-addr') + 1]
    else:
        want_master = line['args_stated']['--master-addr']
    assert plan['master_addr'] == want_master
    for host, rank in ranks.items():
        env = FILTERS['nccl_env'](facts[host], plan, host=host)
        want = owned(line['env'])
        want['VLLM_HOST_IP'] = line['env_per_rank'][rank]['VLLM_HOST_IP']
        got = owned(env)
        for key in sorted(set(want) | set(got)):
            assert got.get(key) == want.get(key), '%s %s' % (host, key)
        assert set(env) == set(got)  # the filter emits nothing outside its keys


def test_golden_t2_gid_index_comes_from_each_hosts_table(tmp_path):
    # move node-b's RoCE v2 IPv4 GID to index 5 (catalogue nccl_wrong_gid): node-b's env follows its own table
    import shutil
    src = os.path.join(RD, 'fleets', 't2')
    dst = tmp_path / 't2'
    shutil.copytree(src, str(dst))
    base = dst / 'node-b' / 'sys' / 'class' / 'infiniband' / 'rocep1s0f0' / 'ports' / '1'
    (base / 'gids' / '5').write_text((base / 'gids' / '3').read_text())
    (base / 'gid_attrs' / 'types' / '5').write_text('RoCE v2\n')
    (base / 'gids' / '3').write_text('0000:0000:0000:0000:0000:0000:0000:0000\n')
    rows = R.parse_ibdev2netdev((dst / 'node-b' / 'ibdev2netdev.txt').read_text())
    nd = C.parse_ip_brief_addr((dst / 'node-b' / 'ip-br-addr.txt').read_text())
    b = R.build_host_facts(rows, nd, dict((r['hca'], R.read_gid_table(str(dst / 'node-b' / 'sys'), r['hca']))
                                          for r in rows))
    facts = {'node-a': fleet_facts('t2', 'node-a'), 'node-b': b}
    plan = FILTERS['rdma_fabric_plan'](facts, ranks={'node-a': 0, 'node-b': 1}, mtu=None)
    assert FILTERS['nccl_env'](facts['node-a'], plan)['NCCL_IB_GID_INDEX'] == '3'
    assert FILTERS['nccl_env'](facts['node-b'], plan)['NCCL_IB_GID_INDEX'] == '5'


def test_filter_errors_are_ansible_filter_errors():
    with pytest.raises(AnsibleFilterError) as e:
        FILTERS['rdma_fabric_plan']({'node-a': {'hcas': []}, 'node-b': None})
    assert str(e.value) == ('rdma_fabric_plan: no rdma_facts for node-b; run dgxspark.vllm.rdma_facts on every '
                            'rank first')
    facts = {'node-a': fleet_facts('t2', 'node-a'), 'node-b': fleet_facts('t2', 'node-b')}
    plan = FILTERS['rdma_fabric_plan'](facts, ranks={'node-a': 0, 'node-b': 1}, mtu=9000)
    assert plan['errors'] == ['fabric MTU must be 9000 on every rank: node-a enp1s0f0np0 has MTU unknown (want '
                              '9000), node-b enp1s0f0np0 has MTU unknown (want 9000). Fix: on node-a: ip link set '
                              'dev enp1s0f0np0 mtu 9000; on node-b: ip link set dev enp1s0f0np0 mtu 9000, persist it '
                              '(netplan/nmcli) and check with `ping -M do -s 8972 <peer>`']
    with pytest.raises(AnsibleFilterError) as e:
        FILTERS['nccl_env'](facts['node-a'], plan, host='node-a')
    assert str(e.value).startswith('nccl_env: the fabric plan has errors: fabric MTU must be 9000')
    with pytest.raises(AnsibleFilterError) as e:
        FILTERS['nccl_env']('x', plan, host='node-a')
    assert str(e.value) == 'nccl_env: input must be the rdma_facts of one host (node-a)'


def test_nccl_hca_parse_filter():
    f = FILTERS['nccl_hca_parse']
    assert f('=rocep1s0f1,roceP2p1s0f1') == {'mode': 'exact', 'items': [{'device': 'rocep1s0f1'},
                                                                        {'device': 'roceP2p1s0f1'}]}
    assert f('mlx5_1', ['mlx5_0', 'mlx5_1', 'mlx5_10', 'mlx5_11']) == {
        'devices': ['mlx5_1', 'mlx5_10', 'mlx5_11'], 'warnings': []}
    with pytest.raises(AnsibleFilterError) as e:
        f('^')
    assert str(e.value) == 'nccl_hca_parse: NCCL_IB_HCA=^: empty or misplaced item \'\'; use "[^][=]dev[:port],dev..."'


def test_plan_filter_fabric_cidr_pin_and_refusal():
    facts = {'node-a': fleet_facts('t2', 'node-a', 'json'), 'node-b': fleet_facts('t2', 'node-b', 'json')}
    plan = FILTERS['rdma_fabric_plan'](facts, ranks={'node-a': 0, 'node-b': 1}, mtu=9000,
                                       fabric_cidr='192.168.192.0/24')
    assert plan['errors'] == []
    assert (plan['fabric_cidr_pin'], plan['fabric_cidrs'], plan['fabric_choice']['basis']) == \
        ('192.168.192.0/24', ['192.168.192.0/24'], 'pinned')
    with pytest.raises(AnsibleFilterError) as e:
        FILTERS['rdma_fabric_plan'](facts, ranks={'node-a': 0, 'node-b': 1}, fabric_cidr='192.168.192.2/24')
    assert str(e.value).startswith("rdma_fabric_plan: rdma_fabric_cidr '192.168.192.2/24' is not an IPv4 network")
