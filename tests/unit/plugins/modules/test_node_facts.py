"""Module node_facts on captured inputs: meminfo, nvidia-smi (a stub printing the GB10 captures),
sysctls (catalogue min_free_kbytes_raised), hosts (catalogue gloo_fullmesh)."""
import os
import socket
import stat

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import node_facts as M
from ansible_collections.dgxspark.vllm.plugins.module_utils import node_checks as N
from tests.unit.conftest import FIXTURES, read_fixture
from tests.unit.plugins.modules.utils import run_module
from tests.unit import captures as C


def write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(str(path), mode)
    return str(path)


def nvidia_smi_stub(tmp_path, csv_ok=True):
    """An executable that prints the real GB10 captures: the CSV query, else the table."""
    csv = os.path.join(FIXTURES, 'node', 'gb10-query-name-memory-total-driver.csv')
    table = os.path.join(FIXTURES, 'node', 'gb10-table-excerpt.txt')
    query = 'cat %s; exit 0' % csv if csv_ok else 'echo "Field is not valid" >&2; exit 2'
    return write(tmp_path / 'bin' / 'nvidia-smi',
                 '#!/bin/sh\ncase "$1" in --query-gpu=*) %s;; esac\ncat %s\n' % (query, table),
                 mode=0o755)


@pytest.fixture
def node_env(tmp_path, monkeypatch):
    meminfo = read_fixture('node', 'f17-node-meminfo-constructed.txt') + \
        read_fixture('node', 'proc-meminfo-cmatotal-0kb-excerpt.txt')
    sysctl = N.parse_sysctl(read_fixture('node', 'f19-raised-min-free-kbytes.txt'))
    root = tmp_path / 'sys'
    write(root / 'vm' / 'min_free_kbytes', '%d\n' % sysctl['vm.min_free_kbytes'])
    write(root / 'vm' / 'watermark_boost_factor', '%d\n' % sysctl['vm.watermark_boost_factor'])
    write(root / 'vm' / 'swappiness', '0\n')
    hosts = C.parse_hosts(read_fixture('node', 'f26-node-b-etc-hosts.txt'))
    monkeypatch.setattr(M.socket, 'gethostname', lambda: 'node-b')
    monkeypatch.setattr(M.socket, 'getaddrinfo', lambda name, *a: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, '', (ip, 0)) for ip in hosts.get(name, [])])
    return {
        'meminfo_path': write(tmp_path / 'meminfo', meminfo),
        'sysctl_root': str(root),
        'os_release_path': write(tmp_path / 'os-release', 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.4 LTS"\n'),
        'nvidia_smi': nvidia_smi_stub(tmp_path),
        'disk_paths': [str(tmp_path / 'models' / 'not-yet' / 'glm')],
        'docker_bin': docker_stub(tmp_path),
        'proc_root': str(tmp_path / 'proc'),
    }


def docker_stub(tmp_path, rc=0):
    """A docker CLI that prints a simulated node's captured runtimes (the toolkit missing), or fails."""
    out = read_fixture('node', 'sim-node-docker-info-runtimes.json').strip()
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / 'docker'
    path.write_text("#!/bin/sh\n[ \"$1 $2 $3\" = 'info --format {{json .Runtimes}}' ] || exit 9\n"
                    + ("printf '%%s\\n' '%s'\n" % out if rc == 0 else
                       "echo 'permission denied while trying to connect to the Docker daemon socket' >&2\nexit 1\n"))
    path.chmod(0o755)
    return str(path)


def test_gb10_node_facts(node_env, tmp_path):
    result, failed = run_module(M.main, node_env)
    assert failed is False and result['changed'] is False
    node = result['node']
    assert node['mem_total_gib'] == 121.69
    assert node['mem_available_gib'] == 104.46
    assert node['mem_free_gib'] == 99.1
    assert (node['mem_total_kib'], node['mem_available_kib']) == (127601213, 109534249)
    assert node['swap_total_gib'] == 16.0 and node['swap_used_gib'] == 0.44
    assert node['cma_total_kib'] == 0
    assert node['driver_version'] == '580.126.09'
    # the table's header gives the newest CUDA the driver supports (catalogue image_cuda_newer_than_driver), read even when the query worked
    assert node['cuda_version'] == '13.0'
    assert node['gpu_name'] == 'NVIDIA GB10' and node['gpu_memory_total'] is None
    assert node['sysctl'] == {'vm.swappiness': 0, 'vm.min_free_kbytes': 4194304, 'vm.watermark_boost_factor': 15000}
    assert node['os'] == {'id': 'ubuntu', 'version_id': '24.04', 'pretty_name': 'Ubuntu 24.04.4 LTS'}
    assert node['hostname_resolution'] == {'hostname': 'node-b', 'addresses': ['127.0.1.1'], 'loopback': True}
    disk = node['disk'][node_env['disk_paths'][0]]
    assert disk['probe'] == str(tmp_path)
    assert disk['device'] == os.stat(str(tmp_path)).st_dev
    st = os.statvfs(str(tmp_path))
    assert disk['free_gib'] == pytest.approx(st.f_bavail * st.f_frsize / 1024 ** 3, abs=0.01)
    # the catalogue free_memory_refused node cannot run 0.87, whatever the rounding of the display figures
    assert N.utilization_verdict({'node-b': node}, 0.87, 0)['feasible'] == {'node-b': 0.85}


def test_table_fallback_when_query_fails(node_env, tmp_path):
    node_env['nvidia_smi'] = nvidia_smi_stub(tmp_path / 'x', csv_ok=False)
    node = run_module(M.main, node_env)[0]['node']
    assert node['driver_version'] == '580.142'
    assert node['gpu_names'] == ['NVIDIA GB10'] and node['cuda_version'] == '13.0'


def test_no_nvidia_smi_on_cpu_nodes(node_env, tmp_path):
    node_env['nvidia_smi'] = str(tmp_path / 'absent' / 'nvidia-smi')
    node = run_module(M.main, node_env)[0]['node']
    assert node['nvidia_smi_found'] is False
    assert node['driver_version'] is None and node['gpu_names'] == []


def test_deploy_user_groups_from_group_db(node_env, monkeypatch):
    import grp
    import pwd
    f22 = C.parse_id(read_fixture('node', 'f22-node-c-id-no-docker-group.txt'))
    monkeypatch.setattr(M.pwd, 'getpwnam', lambda u: pwd.struct_passwd(
        (u, 'x', f22['uid'], f22['gid'], '', '/home/' + u, '/bin/bash')))
    monkeypatch.setattr(M.grp, 'getgrgid', lambda gid: grp.struct_group((f22['group'], 'x', gid, [])))
    monkeypatch.setattr(M.grp, 'getgrall', lambda: [
        grp.struct_group((g, 'x', 100 + i, [f22['user']])) for i, g in enumerate(f22['groups'][1:])] + [
        grp.struct_group(('docker', 'x', 999, ['someoneelse']))])
    node_env['deploy_user'] = 'user'
    node = run_module(M.main, node_env)[0]['node']
    assert node['deploy_user_groups'] == ['user', 'adm', 'sudo']
    assert node['deploy_user_in_docker_group'] is False


def test_meminfo_without_memavailable_fails(node_env, tmp_path):
    node_env['meminfo_path'] = write(tmp_path / 'bad', read_fixture('node', 'proc-meminfo-cmatotal-0kb-excerpt.txt'))
    result, failed = run_module(M.main, node_env)
    assert failed is True
    assert result['msg'] == '%s has no MemTotal line; cannot judge memory (catalogue free_memory_refused, min_free_kbytes_raised)' % node_env['meminfo_path']


def test_stub_is_executable(tmp_path):
    assert os.stat(nvidia_smi_stub(tmp_path)).st_mode & stat.S_IXUSR


def test_g17_docker_runtimes_and_oom_killers(node_env, tmp_path):
    for pid, name in ((1, 'systemd'), (277, 'earlyoom')):
        write(tmp_path / 'proc' / str(pid) / 'comm', name + '\n')
    node = run_module(M.main, node_env)[0]['node']
    assert node['docker_runtimes'] == ['io.containerd.runc.v2', 'io.containerd.runtime.v1.linux', 'runc']
    assert node['docker_runtimes_error'] == ''
    assert node['oom_killers'] == ['earlyoom']
    node_env['docker_bin'] = docker_stub(tmp_path / 'x', rc=1)
    node = run_module(M.main, node_env)[0]['node']
    assert node['docker_runtimes'] is None
    assert node['docker_runtimes_error'].startswith('permission denied')
