# SPDX-License-Identifier: MIT
"""The simulated fleet's hardware stand-ins print what real Sparks print (captured fixtures)."""
import importlib.machinery
import importlib.util
import ipaddress
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
NODE = os.path.join(ROOT, "roles", "sim_fleet", "files", "node", "rootfs")
NVSMI = os.path.join(NODE, "usr", "local", "bin", "nvidia-smi")
SIMBOOT = os.path.join(NODE, "usr", "local", "sbin", "sim-boot")
IBDEV = os.path.join(NODE, "usr", "local", "bin", "ibdev2netdev")


def load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def capture(fixture_path, *parts):
    with open(fixture_path(*parts)) as f:
        return [line for line in f.read().splitlines() if not line.startswith("# ")]


def smi(*args):
    return subprocess.run([sys.executable, NVSMI] + list(args), capture_output=True, text=True, check=False)


def test_nvidia_smi_memory_query_matches_gb10_capture(fixture_path):
    out = smi("--query-gpu=memory.used,memory.total", "--format=csv")
    assert out.returncode == 0
    assert out.stdout.splitlines() == capture(fixture_path, "sim", "nvidia-smi", "gb10-query-memory-used-total.csv")


def test_nvidia_smi_name_query_keeps_capture_shape(fixture_path):
    # The capture comes from a unit on driver 580.126.09; the stand-in reports the table's 580.142.
    want = capture(fixture_path, "sim", "nvidia-smi", "gb10-query-name-memory-total-driver.csv")[0].split(", ")
    got = smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader").stdout.strip().split(", ")
    assert got[:2] == want[:2] == ["NVIDIA GB10", "[N/A]"]
    assert got[2] == "580.142"


def test_nvidia_smi_table_contains_captured_rows(fixture_path):
    table = smi().stdout.splitlines()
    for row in capture(fixture_path, "sim", "nvidia-smi", "gb10-table-excerpt.txt"):
        assert row in table


def test_nvidia_smi_topo_legend_matches_capture(fixture_path):
    legend = [line for line in smi("topo", "-m").stdout.splitlines() if line.startswith("  NIC")]
    assert legend == capture(fixture_path, "sim", "nvidia-smi", "gb10-topo-m-nic-legend.txt")


def test_nvidia_smi_unknown_field_fails_like_the_real_tool():
    out = smi("--query-gpu=bogus", "--format=csv")
    assert out.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in out.stderr


def links(fabric):
    """`ip -j addr` of a TP3 ring node: management plus two fabric ports."""
    return [
        {"ifname": "lo", "flags": ["LOOPBACK", "UP"], "operstate": "UNKNOWN", "address": "00:00:00:00:00:00",
         "addr_info": [{"family": "inet", "local": "127.0.0.1", "label": "lo"}]},
        {"ifname": "enP7s7", "flags": ["UP"], "operstate": "UP", "address": "02:42:c6:12:14:0a",
         "addr_info": [{"family": "inet", "local": "198.18.20.10", "label": "enP7s7"}]},
    ] + [
        {"ifname": nd, "flags": ["BROADCAST", "UP", "LOWER_UP"], "operstate": "UP", "address": mac,
         "addr_info": [{"family": "inet", "local": ip, "label": nd}]}
        for nd, ip, mac in fabric
    ]


@pytest.fixture
def simboot(tmp_path, monkeypatch):
    mod = load(SIMBOOT, "sim_boot")
    monkeypatch.setattr(mod, "SYS_ROOT", str(tmp_path / "sys"))
    return mod


def read(root, *parts):
    with open(os.path.join(root, *parts)) as f:
        return f.read().strip()


def test_gid_tree_index3_is_rocev2_ipv4_mapped(simboot, tmp_path, fixture_path):
    simboot.write_sysfs(links([("enp1s0f0np0", "198.18.21.10", "02:42:c6:12:15:0a"),
                               ("enp1s0f1np1", "198.18.23.10", "02:42:c6:12:17:0a")]))
    ib = str(tmp_path / "sys" / "class" / "infiniband")
    assert read(ib, "rocep1s0f0", "ports", "1", "gids", "3") == "0000:0000:0000:0000:0000:ffff:c612:150a"
    assert read(ib, "rocep1s0f1", "ports", "1", "gids", "3") == "0000:0000:0000:0000:0000:ffff:c612:170a"
    assert read(ib, "rocep1s0f1", "ports", "1", "gid_attrs", "types", "3") == "RoCE v2"
    assert read(ib, "rocep1s0f1", "ports", "1", "gid_attrs", "types", "2") == "IB/RoCE v1"
    assert read(ib, "rocep1s0f1", "ports", "1", "gid_attrs", "ndevs", "3") == "enp1s0f1np1"
    # Same spelling as the captured sysfs table (i3): types "RoCE v2" / "IB/RoCE v1", 8 groups of 4 hex.
    i3 = fixture_path("sim", "sysfs-gids-i3", "node-a", "class", "infiniband", "rocep1s0f0", "ports", "1")
    assert read(i3, "gid_attrs", "types", "3") == "RoCE v2"
    assert read(i3, "gid_attrs", "types", "2") == "IB/RoCE v1"
    assert simboot.gid_hex(ipaddress.IPv6Address("::ffff:192.168.100.10")) == read(i3, "gids", "3")
    # Link-local GIDs from the MAC (EUI-64), at indexes 0 and 1.
    assert read(ib, "rocep1s0f0", "ports", "1", "gids", "0") == "fe80:0000:0000:0000:0042:c6ff:fe12:150a"
    # A Spark HCA whose netdev does not exist here: DOWN, all-zero GIDs, no types.
    assert read(ib, "roceP2p1s0f0", "ports", "1", "state") == "1: DOWN"
    assert read(ib, "roceP2p1s0f0", "ports", "1", "gids", "3") == "0000:0000:0000:0000:0000:0000:0000:0000"
    assert not os.path.exists(os.path.join(ib, "roceP2p1s0f0", "ports", "1", "gid_attrs", "types", "3"))
    assert os.path.isdir(os.path.join(ib, "roceP2p1s0f0", "device", "net", "enP2p1s0f0np0"))


def test_ibdev2netdev_prints_capture_format_for_ring_node(simboot, tmp_path, fixture_path):
    simboot.write_sysfs(links([("enp1s0f0np0", "198.18.21.10", "02:42:c6:12:15:0a"),
                               ("enp1s0f1np1", "198.18.23.10", "02:42:c6:12:17:0a")]))
    # Run the stand-in against the temp tree with a fake /sys/class/net (operstate up for f0/f1).
    net = tmp_path / "net"
    for nd in ("enp1s0f0np0", "enp1s0f1np1"):
        (net / nd).mkdir(parents=True)
        (net / nd / "operstate").write_text("up\n")
    script = open(IBDEV).read().replace("/opt/sim/sys", str(tmp_path / "sys")).replace("/sys/class/net", str(net))
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False).stdout.splitlines()
    want = capture(fixture_path, "sim", "ibdev2netdev", "spark-3node-ring-all-up.txt")
    # The ring capture has all four HCAs Up (both PCIe twins); the sim has no twin netdevs.
    assert sorted(out) == sorted(w.replace("(Up)", "(Down)") if "roceP2" in w else w for w in want)


def test_pairs_parses_the_container_environment(simboot):
    assert simboot.pairs("198.18.10.0/24=enP7s7, 198.18.11.0/24=enp1s0f1np1") == [
        ("198.18.10.0/24", "enP7s7"), ("198.18.11.0/24", "enp1s0f1np1")]
    assert simboot.pairs("") == []


def test_nvidia_smi_reads_what_a_test_sets(tmp_path, capsys, fixture_path):
    """/run/sim/gpu.json sets utilization, power and clocks (the watchdog's wedge scenarios); idle without it."""
    mod = load(NVSMI, "nvidia_smi_standin")
    mod.OVERRIDE = str(tmp_path / "gpu.json")
    args = ["--query-gpu=utilization.gpu,power.draw,clocks.sm", "--format=csv,noheader,nounits"]
    assert mod.main(args) == 0
    assert capsys.readouterr().out.splitlines() == capture(fixture_path, "watchdog", "nvidia-smi", "gpu-idle.csv")
    (tmp_path / "gpu.json").write_text('{"utilization.gpu": "96", "power.draw": "12.40", "clocks.sm": "2405"}')
    assert mod.main(args) == 0
    assert capsys.readouterr().out.splitlines() == capture(fixture_path, "watchdog", "nvidia-smi", "gpu-spinning.csv")


def test_dockerd_gets_the_cgroup_parent_the_node_was_started_under_and_loses_it_when_unset(simboot, tmp_path):
    config = tmp_path / "daemon.json"
    shipped = os.path.join(NODE, "etc", "docker", "daemon.json")
    with open(shipped) as f:
        original = json.load(f)
    config.write_text(json.dumps(original))
    assert simboot.dockerd_cgroup_parent("/dgxspark-lane2", str(config)) is True
    assert json.loads(config.read_text()) == dict(original, **{"cgroup-parent": "/dgxspark-lane2"})
    assert simboot.dockerd_cgroup_parent("/dgxspark-lane2", str(config)) is False  # a second boot: unchanged
    assert simboot.dockerd_cgroup_parent("", str(config)) is True  # started without one: docker's own again
    assert json.loads(config.read_text()) == original
