# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Per-rail bandwidth probe: the command, the parsers and the verdict (catalogue perftest_64k).

On GB10, perftest's RDMA WRITE fails above 65536-byte messages (a responder local protection error,
0x3b 0x0 0x9d) while NCCL runs fine: the instrument fails, not the fabric. So the probe never asks for
more than 64 KiB, and that error tuple is read as the known perftest limitation, not as a broken rail.
Each rail's average bandwidth is judged against a floor relative to its link speed, and a slow rail is
named (host, HCA, netdev, figures).

Also: the classes of a rail's rate (classify_rail: healthy, slow_link, degraded_pcie, stale_init, unknown) from the
HCA's PCIe link, ethtool and kernel log (parsers below; module rdma_link_facts reads them on a node), and pair_plan
(every ordered pair on every rail in rounds, within a time budget; no caller yet).
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
               tool="ib_write_bw", budget_s=None, per_test_s=15):
    """Every ordered pair of nodes on every rail subnet: a rail is slow towards one peer only, or in one direction
    only, as often as towards the head (issue 30). facts_by_host: {host: rdma_facts} (module rdma_facts); head: the
    head's host name (listed first). A subnet is a rail: each node's first Up rail with an IPv4 in it takes part.
    The order is pair_plan's: one direction of every pair on every subnet first, then the reverse directions, so a
    budget that cuts leaves every rail measured one way. budget_s (None: no limit) and per_test_s (the seconds one
    test takes) bound the plan; the tests past the budget are listed in not_measured with the reason.
    link_mbps: the rated link speed the floor is relative to (GB10 HCAs report 200000).
    Returns {pairs: [{host, hca, netdev, peer_host, peer_hca, peer, speed_mbps, port, server_argv, client_argv}]
    (host runs the client, peer_host the server), skipped: [message], not_measured: [{host, peer_host, cidr,
    reason}], seconds (the plan's estimate)}."""
    order = [head] + sorted(h for h in facts_by_host if h != head) if head in facts_by_host else sorted(facts_by_host)
    by_cidr = {}
    for host in order:
        for rail in (facts_by_host.get(host) or {}).get("hcas") or []:
            if rail.get("state") == "Up" and rail.get("ipv4") and rail.get("cidr"):
                by_cidr.setdefault(rail["cidr"], {}).setdefault(host, rail)
    skipped, forward, reverse = [], [], []
    for cidr in sorted(by_cidr):
        nodes = [h for h in order if h in by_cidr[cidr]]
        if len(nodes) < 2:
            rail = by_cidr[cidr][nodes[0]]
            skipped.append("%s %s (%s): no other node has a rail in %s, not probed" % (
                nodes[0], rail["hca"], rail.get("netdev"), cidr))
            continue
        # every test of this subnet in pair_plan's order (no budget here: the budget cuts across subnets below)
        cidr_tests = [t for rnd in pair_plan(nodes, [cidr], 10 ** 9, 1)["rounds"] for t in rnd]
        half = len(cidr_tests) // 2
        forward += cidr_tests[:half]
        reverse += cidr_tests[half:]
    tests = forward + reverse
    fit = len(tests) if budget_s is None else int(float(budget_s) // float(per_test_s))
    pairs, not_measured = [], []
    for i, t in enumerate(tests):
        if i >= fit:
            not_measured.append({"host": t["src"], "peer_host": t["dst"], "cidr": t["rail"],
                                 "reason": "not measured: the budget of %gs holds %d test(s) of %gs, %d planned"
                                           % (float(budget_s), fit, float(per_test_s), len(tests))})
            continue
        mine, theirs = by_cidr[t["rail"]][t["src"]], by_cidr[t["rail"]][t["dst"]]
        port = port_base + len(pairs)
        pairs.append({
            "host": t["src"], "hca": mine["hca"], "netdev": mine.get("netdev"), "peer_host": t["dst"],
            "peer_hca": theirs["hca"], "peer": theirs["ipv4"], "speed_mbps": int(link_mbps), "port": port,
            "server_argv": perftest_argv(theirs["hca"], None, size, qps, theirs.get("roce_v2_gid_index"), tool, port),
            "client_argv": perftest_argv(mine["hca"], theirs["ipv4"], size, qps, mine.get("roce_v2_gid_index"), tool,
                                         port)})
    return {"pairs": pairs, "skipped": skipped, "not_measured": not_measured,
            "seconds": int(round(len(pairs) * float(per_test_s)))}


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


def _rail_link(links, rail):
    """The link facts of one rail's HCA, or None."""
    return ((links or {}).get(rail.get("host")) or {}).get(rail.get("hca"))


def rail_verdict(rails, floor_fraction=DEFAULT_FLOOR_FRACTION, links=None):
    """Judge each rail's probe. rails: [{host, hca, netdev, peer, speed_mbps, report: parse_perftest_bw()}].

    Returns {rails: [{host, hca, netdev, gbps, floor_gbps, ok, note}], failures, warnings}:
      - the catalogue perftest_64k error tuple on a size above 64 KiB is the known perftest limitation (a warning: judge the
        fabric by NCCL all_reduce_perf instead), never a broken rail;
      - any other error, or no figure, fails naming the rail;
      - an average below floor_fraction x link speed fails naming the slow rail, both figures and the fix.
    links: optional {host: {hca: {ethtool, pcie, kernel}}} (module rdma_link_facts). With a rail's facts, a rail
    below its floor is classified (classify_rail against the floor, so pass or fail is unchanged) and the failure
    gives its class, the evidence and that class's fix instead of the cable fix alone; each row gets ``class``.
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
        elif floor is not None and rep["average_gbps"] < floor and _rail_link(links, r) is not None:
            row["ok"] = False
            facts = _rail_link(links, r)
            cls = classify_rail(rep["average_gbps"], floor, facts.get("ethtool"), facts.get("pcie"),
                                facts.get("kernel"), tolerance=0, port_mbps=r.get("speed_mbps") or 200000)
            row["class"] = cls["verdict"]
            failures.append("%s: %.2f Gb/s to %s at %d-byte messages, below the floor %.2f Gb/s (%d %% of its %g Gb/s "
                            "link): %s (%s). Fix: %s (source: %s)" % (
                                name, rep["average_gbps"], r.get("peer") or "its peer", rep.get("max_bytes") or 0,
                                floor, round(100 * float(floor_fraction)), link_gbps, cls["verdict"],
                                "; ".join(cls["evidence"][1:]) or "no other evidence", cls["fix"], cls["source"]))
        elif floor is not None and rep["average_gbps"] < floor:
            row["ok"] = False
            failures.append("%s: %.2f Gb/s to %s at %d-byte messages, below the floor %.2f Gb/s (%d %% of its %g Gb/s "
                            "link): a slow rail. Fix: reseat or replace its cable, check the port's errors "
                            "(ethtool -S %s) and its MTU, then probe again" % (
                                name, rep["average_gbps"], r.get("peer") or "its peer", rep.get("max_bytes") or 0,
                                floor, round(100 * float(floor_fraction)), link_gbps, r.get("netdev") or "<netdev>"))
        out.append(row)
    return {"rails": out, "failures": failures, "warnings": warnings}


# ---------------------------------------------------------------- every ordered pair, in rounds, within a budget

def _round_robin(nodes):
    """Rounds of disjoint unordered pairs covering every pair once (the circle method; a bye when the count is odd)."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    n = len(ring)
    rounds = []
    for _round in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        rounds.append([p for p in pairs if None not in p])
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return rounds


def pair_plan(nodes, rails, budget_s, per_test_s):
    """Every ordered pair (src, dst) of ``nodes`` on every rail, in rounds where no node is in two tests at once.

    nodes: host names (2 or more; order kept); rails: rail names (an HCA name, a subnet: opaque here).
    budget_s: seconds the whole probe may take; per_test_s: seconds one test (one round) takes.
    Order: first every pair in one direction on every rail, then the reverse directions, so that a budget which cuts
    still leaves every rail measured one way. Rounds past the budget are not run and each of their tests is listed in
    ``not_measured`` with the reason; nothing is dropped silently.
    Returns {rounds: [[{src, dst, rail}]], not_measured: [{src, dst, rail, reason}], tests (int), seconds (int)}.
    """
    nodes = list(nodes)
    rails = list(rails)
    if len(set(nodes)) != len(nodes):
        raise BandwidthError("pair_plan: a node is listed twice: %s" % ", ".join(nodes))
    if float(per_test_s) <= 0:
        raise BandwidthError("pair_plan: per_test_s must be above 0, got %r" % (per_test_s,))
    base = _round_robin(nodes)
    ordered = []
    for forward in (True, False):
        for rail in rails:
            for rnd in base:
                ordered.append([{"src": a if forward else b, "dst": b if forward else a, "rail": rail} for a, b in rnd])
    fit = int(float(budget_s) // float(per_test_s)) if float(budget_s) > 0 else 0
    rounds, cut = ordered[:fit], ordered[fit:]
    reason = "not measured: the budget of %gs holds %d round(s) of %gs, %d needed" % (
        float(budget_s), fit, float(per_test_s), len(ordered))
    not_measured = [dict(t, reason=reason) for rnd in cut for t in rnd]
    return {"rounds": rounds, "not_measured": not_measured, "tests": sum(len(r) for r in rounds),
            "seconds": int(round(len(rounds) * float(per_test_s)))}


# ---------------------------------------------------------------- what a node says about a rail's HCA

_GTS = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*GT/s")


def _gts(text):
    m = _GTS.search(text or "")
    return float(m.group(1)) if m else None


def _int_or_none(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def parse_pcie_link(files):
    """The HCA's PCI device link from sysfs. files: {current_link_speed, current_link_width, max_link_speed,
    max_link_width} as read from /sys/bus/pci/devices/<address>/ (e.g. "32.0 GT/s PCIe", "4").
    Returns {current_gts, current_width, max_gts, max_width} (GT/s per lane, lanes); an unreadable value is None
    (the kernel prints "Unknown" for a speed it cannot decode)."""
    files = files or {}
    return {"current_gts": _gts(files.get("current_link_speed")),
            "current_width": _int_or_none(files.get("current_link_width")),
            "max_gts": _gts(files.get("max_link_speed")),
            "max_width": _int_or_none(files.get("max_link_width"))}


def parse_ethtool(text):
    """``ethtool <netdev>`` -> {netdev, speed_mbps (int or None when "Unknown!"), link_detected (bool or None),
    duplex, port}."""
    out = {"netdev": None, "speed_mbps": None, "link_detected": None, "duplex": None, "port": None}
    for line in (text or "").splitlines():
        m = re.match(r"\s*Settings for (\S+?):\s*$", line)
        if m:
            out["netdev"] = m.group(1)
            continue
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Speed":
            m = re.match(r"(\d+)\s*Mb/s", value)
            out["speed_mbps"] = int(m.group(1)) if m else None
        elif key == "Link detected":
            out["link_detected"] = {"yes": True, "no": False}.get(value)
        elif key == "Duplex":
            out["duplex"] = value
        elif key == "Port":
            out["port"] = value
    return out


# kernel log lines about an mlx5 device, by kind (formats: drivers/pci pcie_print_link_status, mlx5_core)
_PCIE_LIMITED = re.compile(r"([0-9.]+) Gb/s available PCIe bandwidth, limited by ([0-9.]+) GT/s (?:PCIe )?x(\d+) link"
                           r"(?: at (\S+))? \(capable of ([0-9.]+) Gb/s with ([0-9.]+) GT/s (?:PCIe )?x(\d+) link\)")
_LINK_DOWN = re.compile(r"\bLink down\b")
_LINK_UP = re.compile(r"\bLink up\b")
_CABLE = re.compile(r"Port module event(?:\[error\])?:.*|Cable error.*")
_HEALTH = re.compile(r"health compromised|fw_fatal|Fatal error|internal error|syndrome|cmd_work_handler.*timeout|"
                     r"FW command timed out|firmware .*(?:error|failed)|Command completion arrived after timeout",
                     re.I)
_STAMP = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\]\s*")


def parse_mlx5_kernel_log(text, pci_address=None, netdev=None, now_s=None, recent_s=3600):
    """Kernel log lines (``dmesg`` form, ``[seconds since boot] message``) that concern one HCA: lines naming its PCI
    address or netdev, and mlx5_core lines naming no device (the cable events of a port module).

    now_s: the node's uptime in seconds; an event older than ``recent_s`` before it is history (kept, not counted).
    A line without a stamp counts as recent. Returns {pcie_limited: [{available_gbps, gts, width, capable_gbps,
    capable_gts, capable_width, line}], link_down (recent count), link_up (recent count), cable_errors (recent lines),
    health_errors (recent lines), history (older lines of those kinds), lines (every matching line)}.
    """
    out = {"pcie_limited": [], "link_down": 0, "link_up": 0, "cable_errors": [], "health_errors": [],
           "history": [], "lines": []}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or "mlx5" not in line and not (netdev and netdev in line):
            continue
        m = _STAMP.match(line)
        stamp = float(m.group(1)) if m else None
        msg = line[m.end():] if m else line
        named = [x for x in (pci_address, netdev) if x]
        generic = re.match(r"mlx5_core:", msg) is not None
        if named and not generic and not any(re.search(r"(?<![\w.])%s(?![\w])" % re.escape(x), msg) for x in named):
            continue
        out["lines"].append(line)
        recent = stamp is None or now_s is None or float(now_s) - stamp <= float(recent_s)
        lim = _PCIE_LIMITED.search(msg)
        if lim:
            out["pcie_limited"].append({
                "available_gbps": float(lim.group(1)), "gts": float(lim.group(2)), "width": int(lim.group(3)),
                "capable_gbps": float(lim.group(5)), "capable_gts": float(lim.group(6)),
                "capable_width": int(lim.group(7)), "line": line})
            continue
        kind = ("link_down" if _LINK_DOWN.search(msg) else "link_up" if _LINK_UP.search(msg) else
                "cable_errors" if _CABLE.search(msg) else "health_errors" if _HEALTH.search(msg) else None)
        if kind is None:
            continue
        if not recent:
            out["history"].append(line)
        elif kind in ("link_down", "link_up"):
            out[kind] += 1
        else:
            out[kind].append(line)
    return out


# ---------------------------------------------------------------- one rail's class

DEFAULT_TOLERANCE = 0.15
RAIL_CLASSES = {
    "healthy": {
        "fix": "nothing to do",
        "source": "docs/rdma.md (per-rail bandwidth classes)"},
    "slow_link": {
        "fix": "reseat or replace the cable (passive DAC, not AOC optics that overheat in the cage), check the port "
               "(ethtool <netdev>: Speed %(port_mbps)dMb/s, Link detected: yes) and its errors (ethtool -S), then "
               "probe again",
        "source": "ethtool Speed and Link detected; mlx5_core port module and link events in the kernel log "
                  "(tests/fixtures/rdma/kernel-logs)"},
    "degraded_pcie": {
        "fix": "the HCA's PCIe link trained below its width or speed: update the system firmware (fwupdmgr update; an "
               "SBIOS older than 0104 trains the second QSFP cage at x2), then power the node off and on and "
               "check current_link_width again",
        "source": "sysfs current_link_speed/width against max_link_speed/width of the HCA's PCI device; the "
                  "kernel's 'available PCIe bandwidth, limited by' line"},
    "stale_init": {
        "fix": "a stale initialisation of the ConnectX-7: link and PCIe at full speed and width, no errors, yet a "
               "fraction of the rate. Cold power cycle the node (power off, remove AC, wait, power on); a warm "
               "reboot does not reinitialise it. Then probe again",
        "source": "docs/rdma.md, class stale_init (a ConnectX-7 on GB10 moving a fraction of its rate after a stale "
                  "initialisation; no public capture, untested on hardware)"},
    "unknown": {
        "fix": "read the facts named in the evidence (ethtool <netdev>, the PCI device's current_link_* files, dmesg "
               "for mlx5_core) on the node, then probe again",
        "source": "docs/rdma.md (per-rail bandwidth classes)"},
}


def classify_rail(measured_gbps, expected_gbps, ethtool, pcie, kernel, tolerance=DEFAULT_TOLERANCE,
                  port_mbps=200000):
    """Class of one rail's measured rate, from what the node says about the HCA.

    measured_gbps: the probe's average (Gb/s); expected_gbps: what a healthy rail moves in this probe (Gb/s).
    ethtool: parse_ethtool(); pcie: parse_pcie_link(); kernel: parse_mlx5_kernel_log() (None when not read).
    tolerance: the share below expected still healthy (0.15: 85 %). port_mbps: the port's rated speed (Mb/s).
    A rate within tolerance is healthy whatever else is seen (what was seen stays in the evidence). Otherwise, in
    order: slow_link (negotiated speed below the port's rate, no link, cable events, link down since recent_s),
    degraded_pcie (trained below max width or speed, or the kernel's limited-bandwidth line), unknown (a firmware or
    health error, or a fact missing), stale_init (all of it clean and full, the rate still short).
    Returns {verdict, evidence: [str], fix, source, ratio (measured/expected)}.
    """
    evidence = []
    ratio = None
    if measured_gbps is not None and expected_gbps:
        ratio = round(float(measured_gbps) / float(expected_gbps), 3)
        evidence.append("%.2f Gb/s measured, %.0f %% of the %.2f Gb/s expected" % (
            float(measured_gbps), 100 * ratio, float(expected_gbps)))
    link, pci, other, missing = [], [], [], []
    if ethtool is None:
        missing.append("ethtool")
    else:
        if ethtool.get("link_detected") is False:
            link.append("ethtool: Link detected: no")
        if ethtool.get("speed_mbps") is None:
            link.append("ethtool: no negotiated speed")
        elif port_mbps and ethtool["speed_mbps"] < int(port_mbps):
            link.append("ethtool: Speed %dMb/s, below the port's %dMb/s" % (ethtool["speed_mbps"], int(port_mbps)))
    if pcie is None or pcie.get("current_width") is None or pcie.get("max_width") is None:
        missing.append("PCIe link (sysfs)")
    else:
        if pcie["current_width"] < pcie["max_width"]:
            pci.append("PCIe trained at x%d of x%d" % (pcie["current_width"], pcie["max_width"]))
        if pcie.get("current_gts") and pcie.get("max_gts") and pcie["current_gts"] < pcie["max_gts"]:
            pci.append("PCIe trained at %g GT/s of %g GT/s" % (pcie["current_gts"], pcie["max_gts"]))
    if kernel is None:
        missing.append("kernel log")
    else:
        for lim in kernel.get("pcie_limited") or []:
            pci.append("kernel: %g Gb/s available PCIe bandwidth, limited by %g GT/s x%d (capable of %g Gb/s)" % (
                lim["available_gbps"], lim["gts"], lim["width"], lim["capable_gbps"]))
        if kernel.get("link_down"):
            link.append("kernel: %d recent link down event(s)" % kernel["link_down"])
        link.extend("kernel: %s" % l for l in kernel.get("cable_errors") or [])
        other.extend("kernel: %s" % l for l in kernel.get("health_errors") or [])
    evidence += link + pci + other + ["not read: %s" % m for m in missing]
    if ratio is not None and ratio >= 1 - float(tolerance):
        verdict = "healthy"
    elif measured_gbps is None:
        verdict = "unknown"
    elif link:
        verdict = "slow_link"
    elif pci:
        verdict = "degraded_pcie"
    elif other or missing:
        verdict = "unknown"
    else:
        verdict = "stale_init"
    cls = RAIL_CLASSES[verdict]
    return {"verdict": verdict, "evidence": evidence, "fix": cls["fix"] % {"port_mbps": int(port_mbps or 0)},
            "source": cls["source"], "ratio": ratio}
