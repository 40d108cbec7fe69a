"""The node_* filters: wiring to module_utils and the errors they raise on bad input."""
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.node_checks import FilterModule
from tests.unit import captures as C
from tests.unit.conftest import ROOT, read_fixture

F = FilterModule().filters()


def sim_lane():
    with open(ROOT + '/lanes/sim_cpu_tp2.yml') as f:
        return yaml.safe_load(f)


def test_filter_names_are_node_prefixed():
    assert sorted(F) == ['node_cache_dirs', 'node_disk_needs', 'node_meminfo', 'node_oom_floor_errors',
                         'node_preflight_checks', 'node_preflight_warnings', 'node_swap_cycle_plan', 'node_swap_verdict',
                         'node_sysctl_effective_verdict', 'node_sysctl_overrides', 'node_utilization_verdict',
                         'node_version_satisfies']


def test_memory_filters_on_the_f17_meminfo_and_the_sysctl_capture():
    meminfo = read_fixture('node', 'f17-node-meminfo-constructed.txt')
    assert F['node_swap_cycle_plan'](meminfo) == {
        'action': 'cycle', 'used_kib': 458752, 'reason': '458752 kB swapped out, 109534249 kB MemAvailable'}
    assert F['node_swap_verdict'](meminfo, 'node-a', True) is None
    off = re.sub(r'(?m)^(SwapTotal|SwapFree):\s+\d+', r'\1: 0', meminfo)
    assert F['node_swap_verdict'](off, 'node-a', True).startswith('node-a: SwapTotal is 0 kB, but the lane requires')
    v = F['node_sysctl_overrides'](read_fixture('node', 'sysctl-swappiness-grep-overrides.txt'), 'node-a',
                                   'vm.swappiness', 0, '/etc/sysctl.d/99-zz-dgxspark-vllm.conf')
    assert v['sysctl_conf'] == {'path': '/etc/sysctl.conf', 'value': '60'} and len(v['errors']) == 1
    assert F['node_sysctl_effective_verdict']('60', 'node-a', 'vm.swappiness', 0, True).startswith(
        "node-a: the kernel's vm.swappiness is 60 but node_prep wrote 0")


def test_sim_lane_disk_and_cache():
    lane = sim_lane()
    assert F['node_disk_needs'](lane) == {lane['checkpoint']['host_path']: float(lane['requirements']['disk_gib'])}
    # /cache is mounted from container.cache_dir; HF_HOME=/cache/huggingface and VLLM_CACHE_ROOT=/cache/vllm land below it
    cache = lane['container']['cache_dir']
    assert F['node_cache_dirs'](lane) == [cache, cache + '/huggingface', cache + '/vllm']
    del lane['container']['env']['VLLM_CACHE_ROOT']
    assert F['node_cache_dirs'](lane) == [cache, cache + '/huggingface']


def test_meminfo_and_id():
    assert F['node_meminfo'](read_fixture('node', 'proc-meminfo-cmatotal-0kb-excerpt.txt')) == {'CmaTotal': 0}
    assert C.parse_id(read_fixture('node', 'f22-node-c-id-no-docker-group.txt'))['groups'] == ['user', 'adm', 'sudo']


def test_runtime_yml_range_accepts_this_controller():
    import ansible.release
    with open(ROOT + '/meta/runtime.yml') as f:
        spec = yaml.safe_load(f)['requires_ansible']
    assert F['node_version_satisfies'](ansible.release.__version__, spec) is True
    assert F['node_version_satisfies']('2.18.3', spec) is False


def test_bad_inputs_raise_filter_errors():
    with pytest.raises(AnsibleFilterError, match='node_preflight_checks: preflight_node must be a mapping, got str'):
        F['node_preflight_checks']('x', {}, 'h')
    with pytest.raises(AnsibleFilterError, match="node_version_satisfies: cannot read version clause '~2' in '~2'"):
        F['node_version_satisfies']('2.19.1', '~2')
    with pytest.raises(AnsibleFilterError, match='node_utilization_verdict: no node facts'):
        F['node_utilization_verdict']({}, 0.8)


def test_checks_through_the_filter():
    lane = sim_lane()
    node = {'mem_total_gib': 23.54, 'swap_total_gib': 0.0,
            'disk': {lane['checkpoint']['host_path']: {'probe': '/var/tmp', 'device': 5, 'free_gib': 2.0}},
            'hostname_resolution': {'hostname': 'spark-sim-0', 'addresses': ['198.18.10.10'], 'loopback': False}}
    checks = F['node_preflight_checks'](node, lane, 'spark-sim-0')
    assert [(c['name'], c['ok']) for c in checks] == [('mem_total', True), ('disk', False), ('hostname_not_loopback', True)]
    assert checks[1]['message'] == (
        'spark-sim-0: 2.00 GiB free on the filesystem of /var/tmp/models/tiny-glm (probed at /var/tmp), the lane '
        'needs 6.00 GiB (requirements.disk_gib). Fix: free space there or move these paths to a larger disk.')


def test_oom_floor_errors_against_the_plans_free_memory_at_peak():
    f = FilterModule().filters()["node_oom_floor_errors"]
    node = {"oom_floors": [{"name": "earlyoom", "active": True, "floor_gib": 8.0, "setting": "-M 8388608",
                            "file": "/etc/default/earlyoom"}]}
    (msg,) = f(node, 9.5, "node-b")
    assert msg.startswith("node-b: earlyoom's floor is 8.00 GiB (-M 8388608 in /etc/default/earlyoom) and the plan "
                          "leaves 9.50 GiB free at peak (margin 2.00 GiB)")
    assert "the floor must stay below 7.50 GiB" in msg
    assert f(node, 10.0, "node-b") == []          # exactly floor + margin: quiet
    assert f(node, None, "node-b") == []          # no plan for this rank: not judged
    assert f({"oom_floors": []}, 1.0, "node-b") == []
    with pytest.raises(AnsibleFilterError, match="node_oom_floor_errors"):
        f(["not", "a", "node"], 9.5, "node-b")
