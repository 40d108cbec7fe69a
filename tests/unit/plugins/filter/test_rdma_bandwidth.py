# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""rdma_fabric's per-rail bandwidth probe (catalogue perftest_64k): the plan on the seed fleet's facts and the verdict on
the reconstructed ib_write_bw reports, through the filters the role calls.

Hardware-only and untested here: running perftest between two GB10 nodes (no RDMA on the build machine); the
skip on nodes without perftest runs in tests/unit/roles/test_rdma_fabric_bandwidth.py.
"""
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.rdma_bandwidth import (
    rdma_fabric_bandwidth_plan, rdma_fabric_bandwidth_verdict)
from tests.unit.conftest import read_fixture
from tests.unit.plugins.filter.test_nccl_env import fleet_facts


def t2():
    return {"node-a": fleet_facts("t2", "node-a", "json"), "node-b": fleet_facts("t2", "node-b", "json")}


def test_plan_measures_both_directions_of_each_pair_on_its_subnet():
    plan = rdma_fabric_bandwidth_plan(t2(), "node-a")
    assert plan["skipped"] == [] and plan["not_measured"] == [] and plan["seconds"] == 30
    there, back = plan["pairs"]
    # the head's rail to the worker's, then the way back: a rail slow in one direction only is measured
    assert (there["host"], there["hca"], there["peer_host"], there["peer"], there["port"]) == (
        "node-a", "rocep1s0f0", "node-b", "192.168.192.4", 18515)
    assert (back["host"], back["hca"], back["netdev"], back["peer_host"], back["peer_hca"], back["peer"]) == (
        "node-b", "rocep1s0f0", "enp1s0f0np0", "node-a", "rocep1s0f0", "192.168.192.2")
    assert back["server_argv"] == ["ib_write_bw", "-d", "rocep1s0f0", "-s", "65536", "-q", "4", "--report_gbits", "-F",
                                   "-x", "3", "-p", "18516"]
    assert back["client_argv"] == back["server_argv"] + ["192.168.192.2"]
    assert back["speed_mbps"] == 200000


def _rail(hca, cidr, ip, state="Up"):
    return {"hca": hca, "netdev": "n-" + hca, "state": state, "ipv4": ip, "cidr": cidr, "roce_v2_gid_index": 3}


def test_every_ordered_pair_of_four_nodes_on_two_rails_and_a_budget_that_cuts_the_way_back():
    facts = {}
    for i, c in enumerate("abcd", 1):
        facts["node-%s" % c] = {"hcas": [_rail("r0", "10.10.0.0/24", "10.10.0.%d" % i),
                                         _rail("r1", "10.20.0.0/24", "10.20.0.%d" % i)]}
    plan = rdma_fabric_bandwidth_plan(facts, "node-a")
    tests = [(p["host"], p["peer_host"], p["hca"]) for p in plan["pairs"]]
    assert len(tests) == len(set(tests)) == 24  # 12 ordered pairs on each of 2 rails
    assert set(tests) == set((a, b, r) for a in facts for b in facts if a != b for r in ("r0", "r1"))
    # every pair one way on both rails before any way back
    first = tests[:12]
    assert set((min(a, b), max(a, b), r) for a, b, r in first) == set(
        (a, b, r) for a in facts for b in facts if a < b for r in ("r0", "r1"))
    assert sorted(p["port"] for p in plan["pairs"]) == list(range(18515, 18515 + 24))
    cut = rdma_fabric_bandwidth_plan(facts, "node-a", budget_s=200, per_test_s=15)
    assert len(cut["pairs"]) == 13 and cut["seconds"] == 195 and len(cut["not_measured"]) == 11
    assert cut["not_measured"][0]["reason"] == ("not measured: the budget of 200s holds 13 test(s) of 15s, 24 planned")
    assert [(p["host"], p["peer_host"], p["hca"]) for p in cut["pairs"]] == tests[:13]


def test_a_ring_pairs_only_the_nodes_that_share_a_subnet():
    # TP3 ring: each subnet links two nodes (docs/rdma.md); a down rail takes no part
    facts = {"node-a": {"hcas": [_rail("r0", "10.1.0.0/24", "10.1.0.1"), _rail("r1", "10.3.0.0/24", "10.3.0.1")]},
             "node-b": {"hcas": [_rail("r0", "10.1.0.0/24", "10.1.0.2"), _rail("r1", "10.2.0.0/24", "10.2.0.2")]},
             "node-c": {"hcas": [_rail("r0", "10.2.0.0/24", "10.2.0.3"),
                                 _rail("r1", "10.3.0.0/24", "10.3.0.3", state="Down")]}}
    plan = rdma_fabric_bandwidth_plan(facts, "node-a")
    assert sorted((p["host"], p["peer_host"]) for p in plan["pairs"]) == [
        ("node-a", "node-b"), ("node-b", "node-a"), ("node-b", "node-c"), ("node-c", "node-b")]
    assert plan["skipped"] == ["node-a r1 (n-r1): no other node has a rail in 10.3.0.0/24, not probed"]


def test_plan_refuses_more_than_64k():
    with pytest.raises(AnsibleFilterError, match=r"message size 1048576 bytes: on GB10 ib_write_bw fails above 65536"):
        rdma_fabric_bandwidth_plan(t2(), "node-a", size=1048576)


def test_a_rail_alone_in_its_subnet_is_named_and_skipped():
    facts = t2()
    facts["node-b"]["hcas"][0]["cidr"] = "10.99.0.0/24"
    plan = rdma_fabric_bandwidth_plan(facts, "node-a")
    assert plan["pairs"] == []
    assert sorted(plan["skipped"]) == [
        "node-a rocep1s0f0 (enp1s0f0np0): no other node has a rail in 192.168.192.0/24, not probed",
        "node-b rocep1s0f0 (enp1s0f0np0): no other node has a rail in 10.99.0.0/24, not probed"]


def _reports():
    text = read_fixture("rdma", "bandwidth", "g02-ib-write-bw-64k-two-rails.txt")
    parts = re.split(r"^== (\S+) ==$", text, flags=re.M)[1:]
    return dict((parts[i], parts[i + 1]) for i in range(0, len(parts), 2))


def test_verdict_names_the_slow_rail_from_the_client_output():
    rep = _reports()
    results = [{"pair": {"host": "node-b", "hca": hca, "netdev": nd, "peer": "10.10.0.2", "speed_mbps": 200000},
                "stdout": rep[hca], "stderr": ""}
               for hca, nd in (("rocep1s0f1", "enp1s0f1np1"), ("roceP2p1s0f1", "enP2p1s0f1np1"))]
    out = rdma_fabric_bandwidth_verdict(results)
    assert [(r["hca"], r["ok"]) for r in out["rails"]] == [("rocep1s0f1", True), ("roceP2p1s0f1", False)]
    assert out["failures"] == [
        "node-b roceP2p1s0f1 (enP2p1s0f1np1): 40.87 Gb/s to 10.10.0.2 at 65536-byte messages, below the floor "
        "70.00 Gb/s (35 % of its 200 Gb/s link): a slow rail. Fix: reseat or replace its cable, check the port's "
        "errors (ethtool -S enP2p1s0f1np1) and its MTU, then probe again"]


def test_verdict_reads_the_g02_error_on_stderr_as_the_instrument():
    err = read_fixture("rdma", "bandwidth", "g02-ib-write-bw-1m-protection-error.txt")
    out = rdma_fabric_bandwidth_verdict([{"pair": {"host": "node-b", "hca": "rocep1s0f1", "netdev": "enp1s0f1np1",
                                                   "peer": "10.10.0.2", "speed_mbps": 200000},
                                          "stdout": "", "stderr": err}])
    assert out["failures"] == [] and out["rails"][0]["note"] == "perftest_64k"
    assert out["warnings"][0].startswith("node-b rocep1s0f1 (enp1s0f1np1): ib_write_bw failed with the GB10 perftest "
                                         "limitation (local protection error 0x3b 0x0 0x9d above 65536-byte messages)")


def test_verdict_with_link_facts_names_the_class_of_the_slow_rail():
    """The links argument the role passes (module rdma_link_facts' hcas by host): a stale initialisation is told apart
    from a cable by the facts (full PCIe width and speed, the port at 200000 Mb/s, a clean kernel log)."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils.bandwidth import (
        parse_ethtool, parse_mlx5_kernel_log, parse_pcie_link)
    rep = _reports()
    facts = {"ethtool": parse_ethtool(read_fixture("rdma", "link", "ethtool", "spark-enp1s0f1np1-200g.txt")),
             "pcie": parse_pcie_link({"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "4",
                                      "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "4"}),
             "kernel": parse_mlx5_kernel_log(read_fixture("rdma", "link", "kernel-logs", "spark-boot-gen5-x4.log"),
                                             "0002:01:00.1", "enP2p1s0f1np1", 5000.0)}
    results = [{"pair": {"host": "node-b", "hca": "roceP2p1s0f1", "netdev": "enP2p1s0f1np1", "peer": "10.10.0.2",
                         "speed_mbps": 200000}, "stdout": rep["roceP2p1s0f1"], "stderr": ""}]
    out = rdma_fabric_bandwidth_verdict(results, links={"node-b": {"roceP2p1s0f1": facts}})
    assert out["rails"][0]["class"] == "stale_init"
    assert "link): stale_init (no other evidence). Fix: a stale initialisation of the ConnectX-7" in out["failures"][0]
    # facts of another host do not apply
    other = rdma_fabric_bandwidth_verdict(results, links={"node-c": {"roceP2p1s0f1": facts}})
    assert "class" not in other["rails"][0] and "a slow rail. Fix: reseat" in other["failures"][0]
