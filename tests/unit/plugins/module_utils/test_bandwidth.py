# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Per-rail bandwidth probe (catalogue perftest_64k): command, parser, verdict.

Inputs: reconstructed ib_write_bw reports (tests/fixtures/rdma/bandwidth; the command, the 64 KiB limit and the
error tuple are the source's, the figures illustrative) and the captured link speeds (200000 Mb/s on a Spark
HCA and its netdev). Hardware-only and untested here: running the probe between two GB10 nodes (no caller yet).
"""

import re

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import bandwidth as B
from tests.unit.conftest import read_fixture


def rails_report():
    text = read_fixture("rdma", "bandwidth", "g02-ib-write-bw-64k-two-rails.txt")
    parts = re.split(r"^== (\S+) ==$", text, flags=re.M)[1:]
    return dict((parts[i], B.parse_perftest_bw(parts[i + 1])) for i in range(0, len(parts), 2))


def link_speeds():
    """speed_mbps of the captured probe (netdev) and of NCCL's virtual-device line (HCA): both 200000."""
    probe = dict(l.split(" speed_mbps=") for l in read_fixture("rdma", "ip", "fully-cabled-node-link-speed-probe.txt")
                 .strip().splitlines())
    nccl = re.search(r"name=(\S+) speed=(\d+)", read_fixture("rdma", "nccl-logs", "spark-ray-made-virtual-device.log"))
    return int(probe["enp1s0f0np0"]), {nccl.group(1): int(nccl.group(2))}


def test_parser_reads_each_rail():
    rep = rails_report()
    assert sorted(rep) == ["roceP2p1s0f1", "rocep1s0f1"]
    assert rep["rocep1s0f1"]["unit"] == "Gb/sec" and rep["rocep1s0f1"]["max_bytes"] == 65536
    assert rep["rocep1s0f1"]["rows"] == [{"bytes": 65536, "iterations": 20000, "peak_gbps": 97.92,
                                          "average_gbps": 97.61, "msg_rate_mpps": 0.186175}]
    assert rep["roceP2p1s0f1"]["average_gbps"] == 40.87 and rep["roceP2p1s0f1"]["perftest_64k"] is False
    # MB/sec (no --report_gbits) is converted: 12201.25 MB/s = 97.61 Gb/s
    mb = rails_report()["rocep1s0f1"]
    text = read_fixture("rdma", "bandwidth", "g02-ib-write-bw-64k-two-rails.txt").replace(
        "BW average[Gb/sec]", "BW average[MB/sec]").replace("97.61", "12201.25")
    assert B.parse_perftest_bw(text)["rows"][0]["average_gbps"] == mb["average_gbps"]


def test_slow_rail_is_named_against_its_link_speed():
    netdev_speed, hca_speed = link_speeds()
    assert netdev_speed == 200000 and hca_speed == {"rocep1s0f1": 200000}
    rep = rails_report()
    rails = [{"host": "node-a", "hca": hca, "netdev": nd, "peer": "10.10.0.2", "speed_mbps": netdev_speed,
              "report": rep[hca]} for hca, nd in (("rocep1s0f1", "enp1s0f1np1"), ("roceP2p1s0f1", "enP2p1s0f1np1"))]
    out = B.rail_verdict(rails)
    assert [(r["hca"], r["ok"], r["floor_gbps"]) for r in out["rails"]] == [("rocep1s0f1", True, 70.0),
                                                                            ("roceP2p1s0f1", False, 70.0)]
    assert out["failures"] == [
        "node-a roceP2p1s0f1 (enP2p1s0f1np1): 40.87 Gb/s to 10.10.0.2 at 65536-byte messages, below the floor "
        "70.00 Gb/s (35 % of its 200 Gb/s link): a slow rail. Fix: reseat or replace its cable, check the port's "
        "errors (ethtool -S enP2p1s0f1np1) and its MTU, then probe again"]
    assert B.rail_verdict(rails, floor_fraction=0.2)["failures"] == []


def test_g02_error_above_64k_is_the_instrument_not_the_rail():
    rep = B.parse_perftest_bw(read_fixture("rdma", "bandwidth", "g02-ib-write-bw-1m-protection-error.txt"))
    assert rep["perftest_64k"] is True and rep["average_gbps"] is None
    out = B.rail_verdict([{"host": "node-a", "hca": "rocep1s0f1", "netdev": "enp1s0f1np1", "speed_mbps": 200000,
                           "report": rep}])
    assert out["failures"] == [] and out["rails"][0]["note"] == "perftest_64k"
    assert "not a broken rail (catalogue perftest_64k)" in out["warnings"][0]
    # any other failure without a figure fails the rail
    other = B.parse_perftest_bw(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
                                "Couldn't connect to 10.10.0.2:18515\n")
    assert other["error"] is None and other["average_gbps"] is None
    out = B.rail_verdict([{"host": "node-a", "hca": "rocep1s0f1", "report": other}])
    assert out["failures"][0].startswith("node-a rocep1s0f1 (?): the bandwidth probe to its peer gave no figure")


def test_probe_command_never_exceeds_64k():
    assert B.perftest_argv("rocep1s0f1", "10.10.0.2", gid_index=3) == [
        "ib_write_bw", "-d", "rocep1s0f1", "-s", "65536", "-q", "4", "--report_gbits", "-F", "-x", "3", "10.10.0.2"]
    assert B.perftest_argv("rocep1s0f1")[-1] == "-F"  # the server side names no peer
    with pytest.raises(B.BandwidthError, match="message size 1048576 bytes: on GB10 ib_write_bw fails above 65536"):
        B.perftest_argv("rocep1s0f1", "10.10.0.2", size=1048576)
