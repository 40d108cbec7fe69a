"""module_utils/node_checks.py against the real captures in tests/fixtures/node."""
import re
from decimal import Decimal

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import node_checks as N
from tests.unit.conftest import read_fixture
from tests.unit import captures as C


def fx(name):
    return read_fixture('node', name)


def vllm_free_memory_line(text):
    """(free GiB, total GiB, utilization, desired GiB) from vLLM's startup memory line."""
    m = re.search(r"Free memory on device[^(]*\(([\d.]+)/([\d.]+) GiB\).*?utilization[^(]*\(([\d.]+), ([\d.]+) GiB\)", text)
    assert m, text
    return tuple(float(g) for g in m.groups())


# ------------------------------------------------------------------ free -h (tests/fixtures/node/free-h-idle-119gi.txt)

@pytest.mark.parametrize('name, mem, swap', [
    ('free-h-after-startup-comma-decimal.txt',
     {'total': 119.0, 'used': 116.0, 'free': 1.4, 'shared': 0.080078125, 'buff_cache': 3.2, 'available': 3.5},
     {'total': 15.0, 'used': 1.1, 'free': 14.0}),
    ('free-h-fresh-121gi-zero-swap-used.txt',
     {'total': 121.0, 'used': 3.5, 'free': 116.0, 'shared': 5.3 / 1024, 'buff_cache': 2.4, 'available': 118.0},
     {'total': 15.0, 'used': 0.0, 'free': 15.0}),
    ('free-h-idle-119gi.txt',
     {'total': 119.0, 'used': 4.3, 'free': 80.0, 'shared': 33 / 1024, 'buff_cache': 35.0, 'available': 115.0},
     {'total': 15.0, 'used': 449 / 1024, 'free': 15.0}),
    ('free-h-serving-large-page-cache.txt',
     {'total': 119.0, 'used': 75.0, 'free': 1.3, 'shared': 385 / 1024, 'buff_cache': 43.0, 'available': 43.0},
     {'total': 15.0, 'used': 818 / 1024, 'free': 15.0}),
])
def test_free_h_captures(name, mem, swap):
    got = C.parse_free(fx(name))
    assert got['mem'] == pytest.approx(mem, abs=1e-12)
    assert got['swap'] == pytest.approx(swap, abs=1e-12)


def test_free_comma_decimal_is_exact():
    # the comma-decimal locale must not turn 1,4Gi into 14 or 4
    got = C.parse_free(fx('free-h-after-startup-comma-decimal.txt'))
    assert got['mem']['free'] == 1.4
    assert got['swap']['used'] == 1.1


@pytest.mark.parametrize('token, expected', [
    ('0B', 0), ('82Mi', 82 * 1024 ** 2), ('1,4Gi', Decimal('1503238553.6')), ('2K', 2048), ('3', 3),
])
def test_parse_size(token, expected):
    assert C.parse_size(token) == expected


def test_parse_size_rejects_garbage():
    with pytest.raises(N.NodeCheckError, match=r"cannot read size '12 apples'"):
        C.parse_size('12 apples')


def test_free_without_mem_row():
    with pytest.raises(N.NodeCheckError, match="no 'Mem:' row in free output"):
        C.parse_free(fx('free-h-idle-119gi.txt').splitlines()[1])


# ------------------------------------------------------------------ /proc/meminfo

def test_meminfo_cmatotal_zero_f07():
    assert N.parse_meminfo(fx('proc-meminfo-cmatotal-0kb-excerpt.txt')) == {'CmaTotal': 0}


def test_meminfo_constructed_f17_in_gib():
    mem = N.parse_meminfo(fx('f17-node-meminfo-constructed.txt'))
    assert mem['MemTotal'] == 127601213
    assert mem['HugePages_Total'] == 0
    assert N.kib_to_gib(mem['MemTotal']) == 121.69
    assert N.kib_to_gib(mem['MemAvailable']) == 104.46
    assert N.kib_to_gib(mem['SwapTotal']) == 16.0
    assert N.kib_to_gib(None) is None


# ------------------------------------------------------------------ nvidia-smi (tests/fixtures/node/gb10-query-name-memory-total-driver.csv)

def test_nvidia_smi_noheader_gb10_na_memory():
    rows = N.parse_nvidia_smi_csv(fx('gb10-query-name-memory-total-driver.csv'),
                                  ['name', 'memory.total', 'driver_version'])
    assert rows == [{'name': 'NVIDIA GB10', 'memory.total': None, 'driver_version': '580.126.09'}]
    assert N.driver_major(rows[0]['driver_version']) == 580


def test_nvidia_smi_header_units_dropped_and_na():
    rows = N.parse_nvidia_smi_csv(fx('gb10-query-memory-used-total.csv'))
    assert rows == [{'memory.used': None, 'memory.total': None}]


def test_nvidia_smi_field_count_mismatch():
    with pytest.raises(N.NodeCheckError, match=r"has 3 fields, expected 2 \(name, driver_version\)"):
        N.parse_nvidia_smi_csv(fx('gb10-query-name-memory-total-driver.csv'), ['name', 'driver_version'])


def test_nvidia_smi_table_excerpt():
    got = N.parse_nvidia_smi_table(fx('gb10-table-excerpt.txt'))
    assert got == {'driver_version': '580.142', 'cuda_version': '13.0',
                   'gpus': [{'index': 0, 'name': 'NVIDIA GB10'}]}


@pytest.mark.parametrize('version, spec, ok', [
    ('2.19.14', '>=2.19.0,<2.20.0', True),
    ('2.20.0', '>=2.19.0,<2.20.0', False),
    ('2.18.9', '>=2.19.0,<2.20.0', False),
    ('2.19.0rc1', '>=2.19.0', True),
    ('580.126.09', '>=580', True),
    ('575.51.03', '>=580', False),
])
def test_version_satisfies(version, spec, ok):
    assert N.version_satisfies(version, spec) is ok


def test_version_spec_garbage():
    with pytest.raises(N.NodeCheckError, match=r"cannot read version clause '~2.19' in '~2.19'"):
        N.version_satisfies('2.19.1', '~2.19')


# ---- id (catalogue docker_group_missing), hosts (catalogue gloo_fullmesh), sysctl (catalogue min_free_kbytes_raised)

def test_id_without_docker_group_f22():
    got = C.parse_id(fx('f22-node-c-id-no-docker-group.txt'))
    assert got == {'uid': 1000, 'user': 'user', 'gid': 1000, 'group': 'user', 'groups': ['user', 'adm', 'sudo']}
    assert 'docker' not in got['groups']


def test_hosts_loopback_f26():
    hosts = C.parse_hosts(fx('f26-node-b-etc-hosts.txt'))
    assert hosts == {'localhost': ['127.0.0.1'], 'node-b': ['127.0.1.1']}
    assert N.hostname_verdict('node-b', hosts['node-b']) == {
        'hostname': 'node-b', 'addresses': ['127.0.1.1'], 'loopback': True}


def test_hostname_first_address_decides():
    assert N.hostname_verdict('node-a', ['192.0.2.10', '127.0.1.1'])['loopback'] is False
    assert N.hostname_verdict('node-a', ['::1'])['loopback'] is True
    assert N.hostname_verdict('node-a', [])['loopback'] is False


def test_sysctl_f19():
    assert N.parse_sysctl(fx('f19-raised-min-free-kbytes.txt')) == {
        'vm.min_free_kbytes': 4194304, 'vm.watermark_boost_factor': 15000}


# ------------------------------------------------------------------ feasible utilization (catalogue free_memory_refused, min_free_kbytes_raised)

def test_f17_feasible_utilization_from_the_log():
    free, total, requested, desired = vllm_free_memory_line(fx('f17-free-memory-less-than-desired.log'))
    assert (free, total, requested, desired) == (104.46, 121.69, 0.87, 105.87)
    # our figure for "needed" equals vLLM's own
    assert N.required_gib(requested, total) == desired
    assert N.feasible_utilization(free, total) == 0.85       # 0.858 -> 0.85
    assert N.feasible_utilization(free, total, 1.0) == 0.85  # (103.46 / 121.69 = 0.850)
    assert N.feasible_utilization(free, total, 1.5) == 0.84


def test_s07_passing_startup_line():
    free, total, requested, desired = vllm_free_memory_line(fx('gb10-single-node-startup.log'))
    assert N.required_gib(requested, total) == desired == 110.06
    assert N.feasible_utilization(free, total) == 0.93  # 112.26 / 119.63 = 0.938 >= 0.92: vLLM started


def test_feasible_never_negative_and_total_checked():
    assert N.feasible_utilization(0.5, 121.69, 1.0) == 0.0
    with pytest.raises(N.NodeCheckError, match='MemTotal must be > 0 GiB, got 0'):
        N.feasible_utilization(1, 0)


def test_f17_verdict_refuses_087_naming_node():
    v = N.utilization_verdict({'node-a': {'mem_available_gib': 110.2, 'mem_total_gib': 121.69},
                               'node-b': {'mem_available_gib': 104.46, 'mem_total_gib': 121.69}}, 0.87)
    assert v['ok'] is False
    assert v['feasible'] == {'node-a': 0.9, 'node-b': 0.85}
    assert v['largest_passing'] == 0.85
    assert v['short_hosts'] == ['node-b']
    assert v['message'] == (
        "GPU memory utilization 0.87 (lane serve.gpu_memory_utilization) would fail vLLM's startup free-memory "
        "check, which compares MemAvailable with utilization x MemTotal (catalogue free_memory_refused, min_free_kbytes_raised; margin 0.00 GiB): node-b has "
        "MemAvailable 104.46 GiB of MemTotal 121.69 GiB, needs 105.87 GiB (feasible 0.85). Largest value every "
        "node passes: 0.85. Fix: set vllm_lane_overrides.serve.gpu_memory_utilization to 0.85 or lower, or free "
        "memory on node-b (stop other workloads, drop caches) and re-run; do not raise vm.min_free_kbytes before launch.")


def test_f19_both_ranks_fail_084():
    v = N.utilization_verdict({'rank0': {'mem_available_gib': 98.89, 'mem_total_gib': 121.69},
                               'rank1': {'mem_available_gib': 100.6, 'mem_total_gib': 121.69}}, 0.84)
    assert N.required_gib(0.84, 121.69) == 102.22
    assert v['short_hosts'] == ['rank0', 'rank1']
    assert v['feasible'] == {'rank0': 0.81, 'rank1': 0.82}
    assert v['largest_passing'] == 0.81
    assert 'rank1 has MemAvailable 100.60 GiB of MemTotal 121.69 GiB, needs 102.22 GiB (feasible 0.82)' in v['message']


def test_verdict_prefers_exact_kib():
    mem = N.parse_meminfo(fx('f17-node-meminfo-constructed.txt'))
    node = {'mem_available_gib': 999, 'mem_total_gib': 999,
            'mem_available_kib': mem['MemAvailable'], 'mem_total_kib': mem['MemTotal']}
    v = N.utilization_verdict({'n': node}, 0.85, 0)
    assert v['ok'] is True and v['feasible'] == {'n': 0.85}
    assert v['message'] == 'gpu_memory_utilization 0.85 reachable on every node (largest passing 0.85)'


def test_verdict_null_request_reports_only():
    v = N.utilization_verdict({'n': {'mem_available_gib': 20.0, 'mem_total_gib': 23.54}}, None, 1.0)
    assert v['ok'] is True and v['largest_passing'] == 0.8
    assert v['message'] == 'the lane sets no serve.gpu_memory_utilization; largest value every node passes now: 0.80'


def test_verdict_missing_memory():
    with pytest.raises(N.NodeCheckError, match='n1: MemAvailable/MemTotal missing from preflight_node'):
        N.utilization_verdict({'n1': {'mem_total_gib': 1}}, 0.5)


# ------------------------------------------------------------------ disk

def test_disk_needs_number_goes_to_checkpoint_path():
    lane = {'checkpoint': {'host_path': '/var/tmp/models/tiny-glm'}, 'requirements': {'disk_gib': 6}}
    assert N.disk_needs(lane) == {'/var/tmp/models/tiny-glm': 6.0}
    assert N.disk_needs({'requirements': {'disk_gib': {'/a': 1, '/b': 2.5}}}) == {'/a': 1.0, '/b': 2.5}
    assert N.disk_needs({'requirements': {}}) == {}
    with pytest.raises(N.NodeCheckError, match='no checkpoint.host_path'):
        N.disk_needs({'requirements': {'disk_gib': 3}})


def test_disk_needs_on_one_filesystem_add_up():
    needs = {'/data/models': 60.0, '/var/lib/docker': 30.0, '/var/tmp/cache': 10.0}
    probes = {'/data/models': {'probe': '/data', 'device': 1, 'free_gib': 200.0},
              '/var/lib/docker': {'probe': '/var/lib/docker', 'device': 2, 'free_gib': 35.0},
              '/var/tmp/cache': {'probe': '/var/tmp', 'device': 2, 'free_gib': 35.0}}
    assert N.disk_shortfalls(needs, probes) == [
        {'paths': ['/var/lib/docker', '/var/tmp/cache'], 'probe': '/var/lib/docker', 'need_gib': 40.0, 'free_gib': 35.0}]


# ------------------------------------------------------------------ per-node checks

SPARK_LANE = {
    'platform': 'spark',
    'checkpoint': {'host_path': '/data/models/glm'},
    'requirements': {'swap_required': True, 'driver_min': 580, 'gpu_name': 'NVIDIA GB10', 'disk_gib': 120},
}


def spark_node(**over):
    mem = N.parse_meminfo(fx('f17-node-meminfo-constructed.txt') + fx('proc-meminfo-cmatotal-0kb-excerpt.txt'))
    row = N.parse_nvidia_smi_csv(fx('gb10-query-name-memory-total-driver.csv'),
                                 ['name', 'memory.total', 'driver_version'])[0]
    node = {
        'kernel': '7.0.0-1019-nvidia',
        'mem_total_gib': N.kib_to_gib(mem['MemTotal']),
        'swap_total_gib': N.kib_to_gib(mem['SwapTotal']),
        'cma_total_kib': 65536,
        'driver_version': row['driver_version'],
        'gpu_name': row['name'], 'gpu_names': [row['name']],
        'disk': {'/data/models/glm': {'probe': '/data', 'device': 7, 'free_gib': 500.0}},
        'hostname_resolution': N.hostname_verdict('node-a', ['192.0.2.10']),
        # the captured runc-only daemon plus the runtime nvidia-ctk registers
        'docker_runtimes': N.parse_docker_runtimes(read_fixture('node', 'sim-node-docker-info-runtimes.json').strip())
        + ['nvidia'],
    }
    node.update(over)
    return node, mem


def by_name(checks):
    return dict((c['name'], c) for c in checks)


def test_spark_node_all_pass():
    node, _ = spark_node()
    checks = N.node_checks('node-a', node, SPARK_LANE)
    assert [c['name'] for c in checks] == ['nvidia_driver', 'gpu_name', 'nvidia_runtime', 'cma_total', 'swap', 'disk',
                                           'hostname_not_loopback']
    assert all(c['ok'] and c['message'] == '' for c in checks)
    assert by_name(checks)['nvidia_driver']['measured'] == '580.126.09'


def test_cma_zero_names_kernel_f07():
    node, mem = spark_node()
    node['cma_total_kib'] = mem['CmaTotal']
    c = by_name(N.node_checks('node-b', node, SPARK_LANE))['cma_total']
    assert c['ok'] is False and c['measured'] == 0
    assert c['message'] == (
        "node-b: CmaTotal is 0 kB on kernel 7.0.0-1019-nvidia; RDMA memory registration fails with ENOMEM (catalogue cma_zero). "
        "Fix: boot a kernel with CMA enabled (catalogue cma_zero; that fleet was fixed with 6.17.0-1031-nvidia and driver 580.173.02).")


def test_cma_missing_line():
    node, _ = spark_node(cma_total_kib=None)
    c = by_name(N.node_checks('node-b', node, SPARK_LANE))['cma_total']
    assert c['ok'] is False
    assert c['message'].startswith('node-b: CmaTotal is missing from /proc/meminfo on kernel 7.0.0-1019-nvidia;')


def test_old_driver_and_missing_driver():
    node, _ = spark_node(driver_version='575.51.03')
    c = by_name(N.node_checks('node-c', node, SPARK_LANE))['nvidia_driver']
    assert c['message'] == ('node-c: NVIDIA driver 575.51.03, the lane needs >= 580 (catalogue image_cuda_newer_than_driver). Fix: install '
                            'nvidia-driver-580-open or newer and reboot; check with nvidia-smi.')
    node, _ = spark_node(driver_version=None, gpu_name=None, gpu_names=[])
    checks = by_name(N.node_checks('node-c', node, SPARK_LANE))
    assert checks['nvidia_driver']['message'].startswith(
        'node-c: NVIDIA driver not found (nvidia-smi gave no driver version), the lane needs >= 580')
    assert checks['gpu_name']['message'] == (
        'node-c: GPU not found, the lane needs NVIDIA GB10 (catalogue gpu_arch_unsupported). Fix: run this lane on DGX Spark '
        '(GB10) nodes, or check that the NVIDIA driver is loaded (nvidia-smi).')


def test_wrong_gpu():
    node, _ = spark_node(gpu_name='NVIDIA H100 80GB HBM3', gpu_names=['NVIDIA H100 80GB HBM3'])
    c = by_name(N.node_checks('node-a', node, SPARK_LANE))['gpu_name']
    assert c['ok'] is False and c['message'].startswith("node-a: GPU 'NVIDIA H100 80GB HBM3', the lane needs NVIDIA GB10")


def test_swap_required_but_zero():
    node, _ = spark_node(swap_total_gib=0.0)
    c = by_name(N.node_checks('node-a', node, SPARK_LANE))['swap']
    assert c['message'] == (
        'node-a: swap total is 0.00 GiB but the lane requires swap (catalogue oom_killed; docs/node-prep.md: without swap the worker '
        'is killed during the MoE Marlin repack). Fix: run role node_prep (it creates node_prep_swap_file when no swap '
        'exists) or add a swap file and swapon it.')


def test_disk_short():
    node, _ = spark_node(disk={'/data/models/glm': {'probe': '/data', 'device': 7, 'free_gib': 80.5}})
    c = by_name(N.node_checks('node-a', node, SPARK_LANE))['disk']
    assert c['measured'] == {'/data/models/glm': 80.5}
    assert c['message'] == (
        'node-a: 80.50 GiB free on the filesystem of /data/models/glm (probed at /data), the lane needs 120.00 GiB '
        '(requirements.disk_gib). Fix: free space there or move these paths to a larger disk.')


def test_hostname_loopback_message_f26():
    hosts = C.parse_hosts(fx('f26-node-b-etc-hosts.txt'))
    node, _ = spark_node(hostname_resolution=N.hostname_verdict('node-b', hosts['node-b']))
    c = by_name(N.node_checks('node-b', node, SPARK_LANE))['hostname_not_loopback']
    assert c['message'] == (
        "node-b: host name 'node-b' resolves to loopback 127.0.1.1 first (catalogue gloo_fullmesh); Gloo and NCCL would bind 127.0.0.1 "
        "and peers get 'Connection refused'. Fix: map 'node-b' to this node's management address in /etc/hosts "
        "(not on the 127.0.1.1 line) or DNS.")


def test_cpu_lane_skips_gpu_rules():
    lane = {'platform': 'cpu', 'checkpoint': {'host_path': '/var/tmp/models/tiny-glm'},
            'requirements': {'swap_required': False, 'driver_min': None, 'gpu_name': None, 'disk_gib': 6,
                             'mem_total_gib_min': 4}}
    node = {'mem_total_gib': 3.5, 'swap_total_gib': 0.0,
            'disk': {'/var/tmp/models/tiny-glm': {'probe': '/var/tmp', 'device': 1, 'free_gib': 50.0}}}
    checks = N.node_checks('spark-sim-0', node, lane)
    assert [c['name'] for c in checks] == ['mem_total', 'disk']
    assert by_name(checks)['mem_total']['message'] == (
        'spark-sim-0: MemTotal 3.5 GiB, the lane needs >= 4 GiB. Fix: run this lane on nodes with more memory.')


# ------------------------------------------------------------------ cache dirs

def test_cache_dirs_from_lane_mounts_and_env():
    lane = {'container': {
        'cache_dir': '/var/tmp/glm53-vllm-cache',
        'mounts': [
            {'host': '/var/tmp/glm53-vllm-cache', 'container': '/cache', 'mode': 'rw'},
            {'host': '/var/tmp/glm53-vllm-cache/flashinfer', 'container': '/root/.cache/flashinfer'},
            {'host': '/data/models/glm', 'container': '/models/glm', 'mode': 'ro'},
            '/srv/ro-cache:/cache/ro:ro',
        ],
        'env': {'HF_HOME': '/cache/huggingface', 'TILELANG_CACHE_DIR': '/cache/tilelang',
                'TRITON_CACHE_DIR': '/cache/triton', 'HF_HUB_OFFLINE': '1', 'VLLM_HOST_IP': '/cache/x'},
    }}
    assert N.cache_host_dirs(lane) == [
        '/var/tmp/glm53-vllm-cache', '/var/tmp/glm53-vllm-cache/flashinfer', '/var/tmp/glm53-vllm-cache/huggingface',
        '/var/tmp/glm53-vllm-cache/tilelang', '/var/tmp/glm53-vllm-cache/triton']
    assert N.cache_host_dirs({}) == []


# --- memory settings that hold (issue 20) ---------------------------------------------------

OURS = "/etc/sysctl.d/99-zz-dgxspark-vllm.conf"


def test_sysctl_apply_order_by_name_then_sysctl_conf_last():
    order = N.sysctl_apply_order(["/etc/sysctl.conf", "/usr/lib/sysctl.d/50-pid-max.conf", OURS,
                                  "/etc/sysctl.d/99-sysctl.conf", "/etc/sysctl.d/50-pid-max.conf"])
    # /etc masks the same name in /usr/lib; 99-zz sorts after 99-sysctl; /etc/sysctl.conf last (sysctl --system)
    assert order == ["/etc/sysctl.d/50-pid-max.conf", "/etc/sysctl.d/99-sysctl.conf", OURS, "/etc/sysctl.conf"]


def test_sysctl_overrides_names_the_later_files():
    text = read_fixture("node", "sysctl-swappiness-grep-overrides.txt")
    v = N.sysctl_overrides("node-a", "vm.swappiness", 0, OURS, text)
    assert (v["decides"], v["value"]) == ("/etc/sysctl.conf", "60")
    assert v["overrides"] == [{"path": "/usr/lib/sysctl.d/99-zzz-vendor-tuning.conf", "value": "10"},
                              {"path": "/etc/sysctl.conf", "value": "60"}]
    assert v["sysctl_conf"] == {"path": "/etc/sysctl.conf", "value": "60"}
    assert v["errors"] == [
        "node-a: /usr/lib/sysctl.d/99-zzz-vendor-tuning.conf sets vm.swappiness = 10 after "
        "/etc/sysctl.d/99-zz-dgxspark-vllm.conf (vm.swappiness = 0), so the node gets 10 after a reboot or "
        "`sysctl --system`. Fix: remove the line from /usr/lib/sysctl.d/99-zzz-vendor-tuning.conf (keep a copy), "
        "or rename node_prep_sysctl_file so it sorts after it"]
    # the old name (60-) and 10-vendor sort before ours: ordering already fixes them
    with_old_name = N.sysctl_overrides("node-a", "vm.swappiness", 0, "/etc/sysctl.d/60-dgxspark-vllm.conf", text)
    assert [o["path"] for o in with_old_name["overrides"]] == [
        "/etc/sysctl.d/99-sysctl.conf", "/usr/lib/sysctl.d/99-zzz-vendor-tuning.conf", "/etc/sysctl.conf"]


def test_sysctl_overrides_after_the_fix_ours_decides():
    lines = [l for l in read_fixture("node", "sysctl-swappiness-grep-overrides.txt").splitlines()
             if "sysctl.conf:" not in l and "zzz-vendor" not in l]
    v = N.sysctl_overrides("node-a", "vm.swappiness", 0, OURS, "\n".join(lines))
    assert (v["decides"], v["value"], v["overrides"], v["errors"]) == (OURS, "0", [], [])


def test_sysctl_effective_verdict():
    assert N.sysctl_effective_verdict("node-a", "vm.swappiness", 0, "0\n", True) is None
    assert N.sysctl_effective_verdict("node-a", "vm.swappiness", 0, "60\n", True) == (
        "node-a: the kernel's vm.swappiness is 60 but node_prep wrote 0; something set it after the file was "
        "applied. Fix: find it (a later sysctl file, a tuned profile, a service), then re-run node_prep")
    # simulated fleet: apply is off (vm.* not namespaced), so the build machine's value is not judged
    assert N.sysctl_effective_verdict("spark-sim-0", "vm.swappiness", 0, "60\n", False) is None


def test_swap_verdict_and_cycle_on_the_f17_node():
    meminfo = N.parse_meminfo(read_fixture("node", "f17-node-meminfo-constructed.txt"))
    assert N.swap_verdict("node-a", meminfo, True) is None
    # 16777216 - 16318464 kB swapped out, far below MemAvailable: cycle
    assert N.swap_cycle_plan(meminfo) == ("cycle", 458752, "458752 kB swapped out, 109534249 kB MemAvailable")
    off = dict(meminfo, SwapTotal=0, SwapFree=0)  # the same node with swap fully off
    assert N.swap_verdict("node-a", off, False) is None
    assert N.swap_verdict("node-a", off, True) == (
        "node-a: SwapTotal is 0 kB, but the lane requires swap (without swap the worker is killed during the MoE "
        "Marlin repack, docs/node-prep.md). Fix: set node_prep_swap_create: true (node_prep creates a swap file), "
        "or enable the node's own swap (swapon -a), then re-run")
    assert N.swap_cycle_plan(off) == ("skip", 0, "no swap in use")
    tight = dict(meminfo, MemAvailable=400000)
    assert N.swap_cycle_plan(tight)[0] == "refuse"


# ---------------------------------------------------------------- catalogue nvidia_runtime_missing nvidia runtime, userspace OOM killers

def test_g17_runtimes_of_a_node_without_the_toolkit_fail_on_spark_lanes():
    runtimes = N.parse_docker_runtimes(read_fixture("node", "sim-node-docker-info-runtimes.json").strip())
    assert runtimes == ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc"]
    node = {"docker_runtimes": runtimes, "driver_version": "580.126.09", "gpu_names": ["NVIDIA GB10"],
            "cma_total_kib": 65536}
    [check] = [c for c in N.node_checks("spark-a", node, {"platform": "spark"}) if c["name"] == "nvidia_runtime"]
    assert check["ok"] is False and check["measured"] == "io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc"
    assert check["message"].startswith("spark-a: the docker daemon registers no 'nvidia' runtime (runtimes: "
                                       "io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc)")
    assert "nvidia-ctk runtime configure --runtime=docker" in check["message"]
    assert "catalogue nvidia_runtime_missing" in check["message"]
    node["docker_runtimes"] = runtimes + ["nvidia"]
    [check] = [c for c in N.node_checks("spark-a", node, {"platform": "spark"}) if c["name"] == "nvidia_runtime"]
    assert check["ok"] is True
    # the CPU lanes run no GPU container: not judged there
    assert "nvidia_runtime" not in [c["name"] for c in N.node_checks("sim-0", node, {"platform": "cpu"})]


def test_g17_docker_unusable_names_the_error():
    node = {"docker_runtimes": None, "docker_runtimes_error": "permission denied while trying to connect"}
    [check] = [c for c in N.node_checks("spark-b", node, {"platform": "spark"}) if c["name"] == "nvidia_runtime"]
    assert check["ok"] is False and "docker info gave no runtimes: permission denied" in check["message"]
    with pytest.raises(N.NodeCheckError, match="not JSON"):
        N.parse_docker_runtimes("Error: template")


def test_userspace_oom_killers_from_process_names():
    comms = read_fixture("node", "sim-node-proc-comm.txt").splitlines()
    assert N.running_oom_killers(comms) == []
    assert N.node_warnings("spark-sim-0", {"oom_killers": N.running_oom_killers(comms)}) == []
    # the same node with systemd-oomd and earlyoom started (their /proc/<pid>/comm values)
    found = N.running_oom_killers(comms + ["systemd-oomd\n", "earlyoom\n"])
    assert found == ["earlyoom", "systemd-oomd"]
    [msg] = N.node_warnings("spark-a", {"oom_killers": found})
    assert msg.startswith("spark-a: earlyoom and systemd-oomd run on this node and kill processes from outside "
                          "the kernel (exit 143 on SIGTERM, 137 on SIGKILL, OOMKilled false; catalogue userspace_oom_killer)")


def test_read_oom_killers_walks_a_proc_tree(tmp_path):
    for pid, name in ((1, "systemd"), (412, "systemd-oomd"), (999, "vllm")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "1000").mkdir()  # exited while read: no comm file
    assert N.read_oom_killers(str(tmp_path)) == ["systemd-oomd"]
    assert N.read_oom_killers(str(tmp_path / "absent")) == []
