# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Per-rail bandwidth classes (healthy, slow_link, degraded_pcie, stale_init, unknown) and the pair plan.

Inputs: tests/fixtures/rdma/link (ethtool output, fake sysfs PCI devices, mlx5_core kernel logs; reconstructed in the
formats of ethtool, drivers/pci and mlx5_core, the Spark figures from the captures: 200000 Mb/s, Gen5 x4 halves) and
the captured cable/link-down lines (verbatim). Expected rate 98 Gb/s: one twin in the dual-rail report.
Hardware-only and untested here: the probe between GB10 nodes and these facts read from a real ConnectX-7.
"""
import json
import os

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import bandwidth as B
from tests.unit.conftest import FIXTURES, read_fixture

LINK = os.path.join(FIXTURES, "rdma", "link")
EXPECTED = 98.0
UPTIME = 5000.0


def ethtool(name):
    return B.parse_ethtool(read_fixture("rdma", "link", "ethtool", name))


def pcie(scenario, hca):
    # class/infiniband/<hca>/device is a link in sysfs; the fixture names its target in device-links.json
    with open(os.path.join(LINK, "sysfs", scenario, "device-links.json")) as fh:
        pci = json.load(fh)["links"][hca]
    dev = os.path.join(LINK, "sysfs", scenario, "bus", "pci", "devices", pci)
    files = {}
    for f in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width"):
        with open(os.path.join(dev, f)) as fh:
            files[f] = fh.read()
    return B.parse_pcie_link(files)


def kernel(name, address="0000:01:00.1", netdev="enp1s0f1np1", now=UPTIME, recent_s=3600):
    return B.parse_mlx5_kernel_log(read_fixture("rdma", "link", "kernel-logs", name), address, netdev, now, recent_s)


def healthy_facts():
    return (ethtool("spark-enp1s0f1np1-200g.txt"), pcie("gen5-x4-full", "rocep1s0f1"), kernel("spark-boot-gen5-x4.log"))


# ------------------------------------------------------------------ parsers

def test_ethtool_reads_speed_and_link():
    assert ethtool("spark-enp1s0f1np1-200g.txt") == {"netdev": "enp1s0f1np1", "speed_mbps": 200000,
                                                     "link_detected": True, "duplex": "Full",
                                                     "port": "Direct Attach Copper"}
    assert ethtool("spark-enp1s0f1np1-100g.txt")["speed_mbps"] == 100000
    down = ethtool("spark-enp1s0f1np1-no-link.txt")
    assert (down["speed_mbps"], down["link_detected"], down["duplex"]) == (None, False, "Unknown! (255)")


def test_pcie_link_from_sysfs():
    assert pcie("gen5-x4-full", "rocep1s0f1") == {"current_gts": 32.0, "current_width": 4, "max_gts": 32.0,
                                                  "max_width": 4}
    assert pcie("x2-of-x4", "roceP2p1s0f1") == {"current_gts": 32.0, "current_width": 2, "max_gts": 32.0,
                                                "max_width": 4}
    assert pcie("gen4-of-gen5", "rocep1s0f1")["current_gts"] == 16.0
    # older kernels print "8 GT/s" without ".0" and "PCIe"; an undecodable speed is "Unknown"
    assert B.parse_pcie_link({"current_link_speed": "8 GT/s\n", "max_link_speed": "Unknown\n",
                              "current_link_width": "8\n"}) == {"current_gts": 8.0, "current_width": 8,
                                                                "max_gts": None, "max_width": None}


def test_kernel_log_pcie_limited_line_of_the_right_device_only():
    lim = kernel("spark-x2-of-x4-limited.log", "0002:01:00.1", "enP2p1s0f1np1")
    assert [(l["available_gbps"], l["gts"], l["width"], l["capable_gbps"], l["capable_width"])
            for l in lim["pcie_limited"]] == [(63.014, 32.0, 2, 126.028, 4)]
    # the boot-time "Link up" is older than the hour before the 5000 s uptime: history
    assert (lim["link_up"], lim["link_down"], len(lim["history"])) == (0, 0, 1)
    # the other half's full-width line is not this device's
    other = kernel("spark-x2-of-x4-limited.log")
    assert other["pcie_limited"] == [] and len(other["lines"]) == 1
    # the healthy boot line "(32.0 GT/s PCIe x4 link)" is not a limit
    assert kernel("spark-boot-gen5-x4.log")["pcie_limited"] == []


def test_kernel_log_flaps_counted_in_the_window_only():
    k = kernel("spark-flaps.log", now=20000.0)
    assert (k["link_down"], k["link_up"]) == (2, 2)
    assert len(k["history"]) == 3 and "[ 2400.118034]" in k["history"][1]
    assert not any("enP2p1s0f1np1" in l for l in k["lines"])  # the twin's event is not this netdev's
    # a day later every flap is history
    assert kernel("spark-flaps.log", now=20000.0 + 86400)["link_down"] == 0


def test_kernel_log_cable_and_health_lines():
    cable = kernel("mlx5-cable-high-temperature-link-down.log", None, "enp1s0f0np0", now=None)
    assert cable["cable_errors"] == ["mlx5_core: Port module event[error]: module 0, Cable error, High Temperature"]
    assert cable["link_down"] == 1
    health = kernel("spark-health-compromised.log")
    assert health["health_errors"] == ["[ 4700.551020] mlx5_core 0000:01:00.1: poll_health:835:(pid 0): device's "
                                       "health compromised - reached miss count"]


# ------------------------------------------------------------------ classes, each with its near misses

def test_healthy_and_its_near_misses():
    eth, pci, k = healthy_facts()
    out = B.classify_rail(97.61, EXPECTED, eth, pci, k)
    assert (out["verdict"], out["ratio"], out["fix"]) == ("healthy", 0.996, "nothing to do")
    # 92 % of expected is inside the 15 % tolerance
    assert B.classify_rail(0.92 * EXPECTED, EXPECTED, eth, pci, k)["verdict"] == "healthy"
    # just outside it, with everything clean: no longer healthy
    assert B.classify_rail(0.84 * EXPECTED, EXPECTED, eth, pci, k)["verdict"] == "stale_init"
    # one flap long ago is history, not evidence
    old = kernel("spark-flaps.log", now=20000.0 + 86400)
    assert B.classify_rail(0.92 * EXPECTED, EXPECTED, eth, pci, old)["verdict"] == "healthy"


def test_slow_link_from_speed_no_link_cable_or_recent_flaps():
    eth, pci, k = healthy_facts()
    half = B.classify_rail(48.7, EXPECTED, ethtool("spark-enp1s0f1np1-100g.txt"), pci, k)
    assert half["verdict"] == "slow_link"
    assert "ethtool: Speed 100000Mb/s, below the port's 200000Mb/s" in half["evidence"]
    assert half["fix"].startswith("reseat or replace the cable") and "Speed 200000Mb/s" in half["fix"]
    assert B.classify_rail(0.0, EXPECTED, ethtool("spark-enp1s0f1np1-no-link.txt"), pci, k)["evidence"][1:3] == [
        "ethtool: Link detected: no", "ethtool: no negotiated speed"]
    flaps = B.classify_rail(40.87, EXPECTED, eth, pci, kernel("spark-flaps.log", now=20000.0))
    assert flaps["verdict"] == "slow_link" and "kernel: 2 recent link down event(s)" in flaps["evidence"]
    cable = kernel("mlx5-cable-high-temperature-link-down.log", None, "enp1s0f1np1", now=None)
    assert B.classify_rail(40.87, EXPECTED, eth, pci, cable)["verdict"] == "slow_link"
    # near miss: the same flaps a day later are history; the rate is short with clean facts
    assert B.classify_rail(40.87, EXPECTED, eth, pci, kernel("spark-flaps.log", now=106400.0))["verdict"] == \
        "stale_init"
    # near miss: a port at its rated speed with the other port's rate (100 G port) is not slow
    assert B.classify_rail(40.87, EXPECTED, ethtool("spark-enp1s0f1np1-100g.txt"), pci, k,
                           port_mbps=100000)["verdict"] == "stale_init"


def test_degraded_pcie_from_width_speed_or_the_kernel_line():
    eth, k = healthy_facts()[0], healthy_facts()[2]
    narrow = B.classify_rail(49.1, EXPECTED, eth, pcie("x2-of-x4", "roceP2p1s0f1"),
                             kernel("spark-x2-of-x4-limited.log", "0002:01:00.1", "enP2p1s0f1np1"))
    assert narrow["verdict"] == "degraded_pcie"
    assert narrow["evidence"][1:] == [
        "PCIe trained at x2 of x4",
        "kernel: 63.014 Gb/s available PCIe bandwidth, limited by 32 GT/s x2 (capable of 126.028 Gb/s)"]
    assert "fwupdmgr update" in narrow["fix"] and "SBIOS older than 0104" in narrow["fix"]
    slow_gen = B.classify_rail(49.1, EXPECTED, eth, pcie("gen4-of-gen5", "rocep1s0f1"), k)
    assert (slow_gen["verdict"], slow_gen["evidence"][1]) == ("degraded_pcie", "PCIe trained at 16 GT/s of 32 GT/s")
    # near miss: x4 of a max x4 at Gen5 is full width; with a short rate that is not PCIe
    assert B.classify_rail(49.1, EXPECTED, eth, pcie("gen5-x4-full", "roceP2p1s0f1"), k)["verdict"] == "stale_init"
    # near miss: a degraded link that still carries the rate stays healthy (the evidence keeps it)
    ok = B.classify_rail(95.0, EXPECTED, eth, pcie("x2-of-x4", "roceP2p1s0f1"), k)
    assert ok["verdict"] == "healthy" and "PCIe trained at x2 of x4" in ok["evidence"]


def test_stale_init_only_when_everything_is_full_and_clean():
    eth, pci, k = healthy_facts()
    out = B.classify_rail(31.2, EXPECTED, eth, pci, k)
    assert (out["verdict"], out["ratio"], out["evidence"]) == (
        "stale_init", 0.318, ["31.20 Gb/s measured, 32 % of the 98.00 Gb/s expected"])
    assert "Cold power cycle" in out["fix"] and "warm reboot does not" in out["fix"]
    # near miss: a firmware health error is not a clean device: unknown, not a power-cycle verdict by default
    sick = B.classify_rail(31.2, EXPECTED, eth, pci, kernel("spark-health-compromised.log"))
    assert sick["verdict"] == "unknown" and "health compromised" in sick["evidence"][1]
    # near miss: a fact not read cannot be called clean
    assert B.classify_rail(31.2, EXPECTED, eth, None, k)["evidence"][-1] == "not read: PCIe link (sysfs)"
    assert B.classify_rail(31.2, EXPECTED, None, pci, k)["verdict"] == "unknown"
    assert B.classify_rail(None, EXPECTED, eth, pci, k)["verdict"] == "unknown"


def test_every_class_has_its_own_fix_and_source():
    fixes = [B.RAIL_CLASSES[c]["fix"] for c in ("slow_link", "degraded_pcie", "stale_init", "unknown")]
    assert len(set(fixes)) == 4 and all(B.RAIL_CLASSES[c]["source"] for c in B.RAIL_CLASSES)


# ------------------------------------------------------------------ the verdict of the probe, refined by the facts

def _rail(avg):
    return {"host": "node-b", "hca": "roceP2p1s0f1", "netdev": "enP2p1s0f1np1", "peer": "10.10.0.1",
            "speed_mbps": 200000, "report": {"average_gbps": avg, "max_bytes": 65536}}


def test_rail_verdict_classifies_a_rail_below_its_floor_when_facts_are_given():
    eth = healthy_facts()[0]
    links = {"node-b": {"roceP2p1s0f1": {
        "ethtool": eth, "pcie": pcie("x2-of-x4", "roceP2p1s0f1"),
        "kernel": kernel("spark-x2-of-x4-limited.log", "0002:01:00.1", "enP2p1s0f1np1")}}}
    out = B.rail_verdict([_rail(40.87)], links=links)
    assert out["rails"][0]["class"] == "degraded_pcie" and not out["rails"][0]["ok"]
    assert out["failures"][0].startswith(
        "node-b roceP2p1s0f1 (enP2p1s0f1np1): 40.87 Gb/s to 10.10.0.1 at 65536-byte messages, below the floor 70.00 "
        "Gb/s (35 % of its 200 Gb/s link): degraded_pcie (PCIe trained at x2 of x4; kernel: 63.014 Gb/s")
    # pass or fail is the floor's: the same facts on a rail above the floor change nothing
    above = B.rail_verdict([_rail(97.61)], links=links)
    assert above["failures"] == [] and "class" not in above["rails"][0]
    # without facts the message is the one before the classes
    assert "a slow rail. Fix: reseat or replace its cable" in B.rail_verdict([_rail(40.87)])["failures"][0]


# ------------------------------------------------------------------ every ordered pair, in rounds, in a budget

def _ordered(plan):
    return sorted((t["src"], t["dst"], t["rail"]) for r in plan["rounds"] for t in r)


def _no_node_twice(plan):
    for rnd in plan["rounds"]:
        busy = [n for t in rnd for n in (t["src"], t["dst"])]
        assert len(busy) == len(set(busy)), rnd


@pytest.mark.parametrize("nodes,rails,rounds", [
    (["node-a", "node-b"], ["rail0"], 2),
    (["node-a", "node-b", "node-c"], ["rail0"], 6),
    (["node-a", "node-b", "node-c", "node-d"], ["rail0"], 6),
    (["node-a", "node-b"], ["rail0", "rail1"], 4),
    (["node-a", "node-b", "node-c"], ["rail0", "rail1"], 12),
    (["node-a", "node-b", "node-c", "node-d"], ["rail0", "rail1"], 12),
])
def test_pair_plan_covers_every_ordered_pair_on_every_rail(nodes, rails, rounds):
    plan = B.pair_plan(nodes, rails, budget_s=3600, per_test_s=30)
    want = sorted((a, b, r) for r in rails for a in nodes for b in nodes if a != b)
    assert _ordered(plan) == want and plan["tests"] == len(want)
    assert len(plan["rounds"]) == rounds and plan["seconds"] == rounds * 30
    assert plan["not_measured"] == []
    _no_node_twice(plan)


def test_pair_plan_budget_cut_is_reported_and_keeps_one_direction_of_every_rail():
    nodes, rails = ["node-a", "node-b", "node-c", "node-d"], ["rail0", "rail1"]
    plan = B.pair_plan(nodes, rails, budget_s=200, per_test_s=30)  # 6 rounds of 12
    assert len(plan["rounds"]) == 6 and plan["seconds"] == 180
    measured = _ordered(plan)
    cut = sorted((t["src"], t["dst"], t["rail"]) for t in plan["not_measured"])
    assert len(measured) == 12 and len(cut) == 12 and not set(measured) & set(cut)
    assert sorted(measured + cut) == sorted((a, b, r) for r in rails for a in nodes for b in nodes if a != b)
    # every unordered pair is measured one way on each rail; the reverse is what was cut
    assert all((b, a, r) in cut for a, b, r in measured)
    assert plan["not_measured"][0]["reason"] == ("not measured: the budget of 200s holds 6 round(s) of 30s, 12 needed")
    _no_node_twice(plan)
    nothing = B.pair_plan(nodes, rails, budget_s=0, per_test_s=30)
    assert nothing["rounds"] == [] and len(nothing["not_measured"]) == 24


def test_pair_plan_refuses_bad_input():
    with pytest.raises(B.BandwidthError, match="a node is listed twice"):
        B.pair_plan(["node-a", "node-a"], ["rail0"], 60, 30)
    with pytest.raises(B.BandwidthError, match="per_test_s must be above 0"):
        B.pair_plan(["node-a", "node-b"], ["rail0"], 60, 0)
