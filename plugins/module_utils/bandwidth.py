# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Per-rail bandwidth probe: the command, the parsers and the verdict (catalogue perftest_64k).

On GB10, perftest's RDMA WRITE fails above 65536-byte messages (a responder local protection error,
0x3b 0x0 0x9d) while NCCL runs fine: the instrument fails, not the fabric. So the probe never asks for
more than 64 KiB, and that error tuple is read as the known perftest limitation, not as a broken rail.
Each rail's average bandwidth is judged against a floor relative to its link speed, and a slow rail is
named (host, HCA, netdev, figures).

Caller: roles/rdma_fabric tasks/bandwidth.yml (opt-in rdma_fabric_bandwidth_probe, before the ranks load), through
the filters of plugins/filter/rdma_bandwidth.py. Running the probe needs two GB10 nodes with RoCE and perftest
(hardware-only, untested here); the plan, the parsers and the verdict are tested on the seed fleets' facts and on
reconstructed captures (tests/fixtures/rdma/bandwidth). Standard library only.
Units: Gb/s (10^9 bits per second) throughout; link speeds as the kernel and NCCL report them, in Mb/s.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# catalogue perftest_64k: RDMA WRITE above this fails on GB10 (perftest issue #394)
PERFTEST_MAX_BYTES = 65536
# One twin (one PCIe x4 half of a QSFP port) carried ~98 Gb/s of the 200000 Mb/s the HCA reports (the dual-rail
# report: 98 -> 161 Gb/s with both twins), so the default floor sits well under half the link speed.
DEFAULT_FLOOR_FRACTION = 0.35
PERFTEST_64K_ERROR = re.compile(r"local protection error 0x3b 0x0 0x9d")


class BandwidthError(ValueError):
    """A request the probe refuses (e.g. a message size above 64 KiB on GB10)."""


def perftest_argv(hca, peer=None, size=PERFTEST_MAX_BYTES, qps=4, gid_index=None, tool="ib_write_bw", port=None):
    """argv of one rail's probe (server side without ``peer``). Refuses sizes above 64 KiB and ``-a`` (catalogue perftest_64k).
    ``port``: perftest's out-of-band TCP port (-p), one per rail so that probes never meet the wrong server."""
    size = int(size)
    if size <= 0 or size > PERFTEST_MAX_BYTES:
        raise BandwidthError("message size %d bytes: on GB10 %s fails above %d bytes (catalogue perftest_64k); "
                             "probe with %d or less" % (size, tool, PERFTEST_MAX_BYTES, PERFTEST_MAX_BYTES))
    argv = [tool, "-d", str(hca), "-s", str(size), "-q", str(int(qps)), "--report_gbits", "-F"]
    if gid_index is not None:
        argv += ["-x", str(int(gid_index))]
    if port is not None:
        argv += ["-p", str(int(port))]
    return argv + ([str(peer)] if peer else [])


def probe_plan(facts_by_host, head, size=PERFTEST_MAX_BYTES, qps=4, port_base=18515, link_mbps=200000,
               tool="ib_write_bw"):
    """One probe per rail: every Up rail with an IPv4 of every node other than the head, against the head's rail in
    the same subnet (the head runs the server side). facts_by_host: {host: rdma_facts} (module rdma_facts).
    link_mbps: the rated link speed the floor is relative to (GB10 HCAs report 200000 Mb/s).
    Returns {pairs: [{host, hca, netdev, peer_host, peer_hca, peer, speed_mbps, port, server_argv, client_argv}],
    skipped: [message]} - a rail with no head rail in its subnet is skipped, named, never probed elsewhere."""
    head_rails = [r for r in (facts_by_host.get(head) or {}).get("hcas") or []
                  if r.get("state") == "Up" and r.get("ipv4") and r.get("cidr")]
    pairs, skipped = [], []
    for host in sorted(h for h in facts_by_host if h != head):
        for rail in (facts_by_host[host] or {}).get("hcas") or []:
            if rail.get("state") != "Up" or not rail.get("ipv4"):
                continue
            peer = [r for r in head_rails if r["cidr"] == rail.get("cidr")]
            if not peer:
                skipped.append("%s %s (%s): no rail of the head %s in %s, not probed" % (
                    host, rail["hca"], rail.get("netdev"), head, rail.get("cidr")))
                continue
            port = port_base + len(pairs)
            pairs.append({
                "host": host, "hca": rail["hca"], "netdev": rail.get("netdev"), "peer_host": head,
                "peer_hca": peer[0]["hca"], "peer": peer[0]["ipv4"], "speed_mbps": int(link_mbps), "port": port,
                "server_argv": perftest_argv(peer[0]["hca"], None, size, qps, peer[0].get("roce_v2_gid_index"), tool,
                                             port),
                "client_argv": perftest_argv(rail["hca"], peer[0]["ipv4"], size, qps, rail.get("roce_v2_gid_index"),
                                             tool, port)})
    return {"pairs": pairs, "skipped": skipped}


def _float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def parse_perftest_bw(text):
    """An ib_*_bw report -> {unit, rows: [{bytes, iterations, peak, average, msg_rate_mpps}], average_gbps,
    max_bytes, perftest_64k (bool), error (the first error line or None)}.

    Bandwidth is converted to Gb/s: with --report_gbits perftest prints Gb/sec, else MB/sec (10^6 bytes).
    """
    unit, rows, error = None, [], None
    for line in (text or "").splitlines():
        m = re.search(r"BW average\[(Gb|MB)/sec\]", line)
        if m:
            unit = m.group(1) + "/sec"
            continue
        cells = line.split()
        if unit and len(cells) >= 5 and cells[0].isdigit() and cells[1].isdigit():
            scale = 1.0 if unit == "Gb/sec" else 8.0 / 1000.0
            peak, avg = _float(cells[2]), _float(cells[3])
            rows.append({"bytes": int(cells[0]), "iterations": int(cells[1]),
                         "peak_gbps": None if peak is None else round(peak * scale, 3),
                         "average_gbps": None if avg is None else round(avg * scale, 3),
                         "msg_rate_mpps": _float(cells[4])})
            continue
        if error is None and re.search(r"error|Failed|failed", line):
            error = line.strip()
    return {"unit": unit, "rows": rows,
            "average_gbps": rows[-1]["average_gbps"] if rows else None,
            "max_bytes": max(r["bytes"] for r in rows) if rows else None,
            "perftest_64k": bool(PERFTEST_64K_ERROR.search(text or "")), "error": error}


def rail_verdict(rails, floor_fraction=DEFAULT_FLOOR_FRACTION):
    """Judge each rail's probe. rails: [{host, hca, netdev, peer, speed_mbps, report: parse_perftest_bw()}].

    Returns {rails: [{host, hca, netdev, gbps, floor_gbps, ok, note}], failures, warnings}:
      - the catalogue perftest_64k error tuple on a size above 64 KiB is the known perftest limitation (a warning: judge the
        fabric by NCCL all_reduce_perf instead), never a broken rail;
      - any other error, or no figure, fails naming the rail;
      - an average below floor_fraction x link speed fails naming the slow rail, both figures and the fix.
    """
    out, failures, warnings = [], [], []
    for r in rails:
        rep = r.get("report") or {}
        name = "%s %s (%s)" % (r.get("host"), r.get("hca"), r.get("netdev") or "?")
        link_gbps = (r.get("speed_mbps") or 0) / 1000.0
        floor = round(link_gbps * float(floor_fraction), 2) if link_gbps else None
        row = {"host": r.get("host"), "hca": r.get("hca"), "netdev": r.get("netdev"), "gbps": rep.get("average_gbps"),
               "floor_gbps": floor, "ok": True, "note": ""}
        if rep.get("perftest_64k"):
            row["note"] = "perftest_64k"
            warnings.append("%s: ib_write_bw failed with the GB10 perftest limitation (local protection error 0x3b "
                            "0x0 0x9d above %d-byte messages), not a broken rail (catalogue perftest_64k). Fix: probe "
                            "with -s %d or less, or judge the fabric by NCCL all_reduce_perf"
                            % (name, PERFTEST_MAX_BYTES, PERFTEST_MAX_BYTES))
        elif rep.get("average_gbps") is None:
            row["ok"] = False
            failures.append("%s: the bandwidth probe to %s gave no figure (%s). Fix: check the rail's link "
                            "(ibdev2netdev, ip link) and the peer's server side" % (
                                name, r.get("peer") or "its peer", rep.get("error") or "no report line"))
        elif floor is not None and rep["average_gbps"] < floor:
            row["ok"] = False
            failures.append("%s: %.2f Gb/s to %s at %d-byte messages, below the floor %.2f Gb/s (%d %% of its %g Gb/s "
                            "link): a slow rail. Fix: reseat or replace its cable, check the port's errors "
                            "(ethtool -S %s) and its MTU, then probe again" % (
                                name, rep["average_gbps"], r.get("peer") or "its peer", rep.get("max_bytes") or 0,
                                floor, round(100 * float(floor_fraction)), link_gbps, r.get("netdev") or "<netdev>"))
        out.append(row)
    return {"rails": out, "failures": failures, "warnings": warnings}
