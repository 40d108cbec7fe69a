# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""rdma_fabric's opt-in bandwidth probe (catalogue perftest_64k) where no perftest exists: skipped with a message naming the
hosts, nothing probed, no verdict. Runs the role's task file with ansible-playbook on two local hosts (the build
machine, like the simulated nodes, has no ib_write_bw and no RDMA); and the whole probe with stand-ins for ib_write_bw,
ethtool, dmesg and sysfs. The probe itself between GB10 nodes is hardware-only, untested here.
"""
import os
import socket
import sys

from tests.unit.conftest import FIXTURES, ROOT, fake_sysfs, run_local_play

TASKS = os.path.join(ROOT, "roles", "rdma_fabric", "tasks", "bandwidth.yml")


def test_skipped_with_a_message_when_perftest_is_absent(tmp_path):
    tool = "/nonexistent/perftest/ib_write_bw"
    assert not os.path.exists(tool)
    play_vars = {"rdma_fabric_bandwidth_tool": tool, "rdma_fabric_bandwidth_size": 65536,
                 "rdma_fabric_bandwidth_qps": 4, "rdma_fabric_bandwidth_port_base": 18515,
                 "rdma_fabric_bandwidth_link_mbps": 200000, "rdma_fabric_bandwidth_floor_fraction": 0.35,
                 "rdma_fabric_bandwidth_timeout_s": 60, "rdma_fabric_bandwidth_budget_s": 600,
                 "rdma_fabric_bandwidth_test_s": 15}
    rc, tasks, tail = run_local_play(tmp_path, ["spark-a", "spark-b"], play_vars, [
        {"name": "the role's bandwidth tasks", "ansible.builtin.import_tasks": TASKS},
        {"name": "nothing was judged", "ansible.builtin.assert": {
            "that": ["rdma_fabric_bandwidth is not defined", "_rdma_fabric_bw_plan is not defined"]}}])
    assert rc == 0, tail
    skip = tasks["Rdma_fabric | bandwidth probe skipped"]
    (msg,) = [h["msg"] for h in skip.values() if "msg" in h]
    assert msg == ("rdma_fabric bandwidth probe skipped: %s is missing on spark-a, spark-b. Install perftest on every "
                   "node (DGX OS - apt install perftest) to probe each rail before loading, or set "
                   "rdma_fabric_bandwidth_probe false with the reason in rdma_fabric_bandwidth_skip_reason." % tool)
    plan = tasks["Rdma_fabric | every ordered pair of nodes on every rail subnet, within the budget"]
    assert plan and all(h.get("skipped") for h in plan.values())


FAKE_PERFTEST = r'''#!%(python)s
"""Stand-in for ib_write_bw on 127.0.0.1: the server side waits for its client; the client prints the rail's report
from the fixture (by -d). Argument shape as the role passes it (-d, -s, -q, --report_gbits, -F, -x, -p, [peer])."""
import re, socket, sys
args = sys.argv[1:]
hca, port = args[args.index("-d") + 1], int(args[args.index("-p") + 1])
assert int(args[args.index("-s") + 1]) <= 65536
peer = args[-1] if re.match(r"^[0-9.]+$", args[-1]) and args[-2] != "-p" else None
if peer is None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(4)
    srv.settimeout(60)
    while True:  # wait_for connects first and sends nothing; the client says "go"
        c, _ = srv.accept()
        if c.recv(2) == b"go":
            sys.exit(0)
c = socket.create_connection((peer, port), timeout=10)
c.sendall(b"go")
parts = re.split(r"^== (\S+) ==$", open(%(report)r).read(), flags=re.M)[1:]
print(dict(zip(parts[0::2], parts[1::2]))[hca])
'''


def test_a_rail_under_its_floor_is_named_with_its_class(tmp_path):
    """The whole opt-in probe on two local hosts with stand-ins: ib_write_bw (127.0.0.1, the fixture's 40.87 Gb/s
    report for roceP2p1s0f1), ethtool and dmesg (the x2-of-x4 captures) and the fake sysfs tree; the play fails at the
    floor and names the class degraded_pcie with its evidence and fix. The GB10 hardware run is untested here."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    bins = tmp_path / "bin"
    bins.mkdir()
    link = os.path.join(FIXTURES, "rdma", "link")
    report = os.path.join(FIXTURES, "rdma", "bandwidth", "g02-ib-write-bw-64k-two-rails.txt")
    tools = {
        "ib_write_bw": FAKE_PERFTEST % {"python": sys.executable, "report": report},
        "ethtool": '#!/bin/sh\ngrep -v "^#" %s\n' % os.path.join(link, "ethtool", "spark-enp1s0f1np1-200g.txt"),
        "dmesg": '#!/bin/sh\ngrep -v "^#" %s\n' % os.path.join(link, "kernel-logs", "spark-x2-of-x4-limited.log")}
    for name, body in tools.items():
        (bins / name).write_text(body)
        (bins / name).chmod(0o755)
    rail = {"hca": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "state": "Up", "ipv4": "127.0.0.1",
            "prefixlen": 8, "cidr": "127.0.0.0/8", "roce_v2_gid_index": 3}
    play_vars = {"rdma_fabric_bandwidth_tool": str(bins / "ib_write_bw"), "rdma_fabric_bandwidth_size": 65536,
                 "rdma_fabric_bandwidth_qps": 4, "rdma_fabric_bandwidth_port_base": port,
                 "rdma_fabric_bandwidth_link_mbps": 200000, "rdma_fabric_bandwidth_floor_fraction": 0.35,
                 "rdma_fabric_bandwidth_timeout_s": 30, "rdma_fabric_sysfs_root": fake_sysfs(tmp_path, "x2-of-x4"),
                 "rdma_fabric_bandwidth_budget_s": 600, "rdma_fabric_bandwidth_test_s": 15}
    rc, tasks, tail = run_local_play(tmp_path, ["spark-a", "spark-b"], play_vars, [
        {"name": "the role's bandwidth tasks, stand-ins first on PATH",
         "environment": {"PATH": "%s:%s" % (bins, os.environ["PATH"])},
         "block": [{"name": "the role's bandwidth tasks", "ansible.builtin.import_tasks": TASKS}]}],
        host_vars={"rdma_facts": {"hcas": [rail]}})
    assert rc != 0, tail
    links = tasks["Rdma_fabric | PCIe link, ethtool and kernel log of each HCA"]
    assert links["spark-b"]["rdma_link_facts"]["hcas"]["roceP2p1s0f1"]["pcie"]["current_width"] == 2
    judged = [h for h in tasks["Rdma_fabric | every rail at or above its floor"].values() if h.get("failed")]
    # both directions of the pair were measured (the stand-in reports the slow rail both ways): one failure each
    msgs = judged[0]["msg"]
    assert [m.split(" ")[0] for m in msgs] == ["spark-a", "spark-b"], msgs
    msg = msgs[1]
    assert msg.startswith("spark-b roceP2p1s0f1 (enP2p1s0f1np1): 40.87 Gb/s to 127.0.0.1 at 65536-byte messages, "
                          "below the floor 70.00 Gb/s (35 % of its 200 Gb/s link): degraded_pcie (PCIe trained at x2 "
                          "of x4; kernel: 63.014 Gb/s available PCIe bandwidth, limited by 32 GT/s x2")
    assert "Fix: the HCA's PCIe link trained below its width or speed: update the system firmware" in msg
