# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Pure logic of the node checks (roles preflight and node_prep).

Parsers for /proc/meminfo, ``free -h``, ``nvidia-smi`` (CSV query and table), ``id``,
/etc/hosts and ``sysctl`` output, plus the rules that turn the parsed figures into verdicts.
No I/O here: the module ``node_facts`` and the ``node_*`` filters feed it text and numbers.

Units: GiB = 1024**3 bytes; /proc/meminfo figures are KiB (the kernel prints ``kB``).
Sources: docs/node-prep.md; samples tests/fixtures/node/gb10-query-name-memory-total-driver.csv, tests/fixtures/node/free-h-idle-119gi.txt.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import json
import os
import re
from decimal import Decimal, ROUND_FLOOR, ROUND_HALF_UP

KIB_PER_GIB = 1024 * 1024
BYTES_PER_GIB = 1024 ** 3

# nvidia-smi prints these where GB10 has no value (no framebuffer, no power cap): tests/fixtures/node/gb10-query-name-memory-total-driver.csv.
NVSMI_UNAVAILABLE = frozenset(["[n/a]", "n/a", "not supported", "[not supported]", ""])


class NodeCheckError(ValueError):
    """Input that cannot be parsed; the message says what and where."""


def _dec(value):
    # str() first so 104.46 stays 104.46 instead of its binary neighbour.
    return value if isinstance(value, Decimal) else Decimal(str(value))


def kib_to_gib(kib, places=2):
    """KiB -> GiB rounded half-up to ``places`` decimals (display figure)."""
    if kib is None:
        return None
    q = Decimal(1).scaleb(-places)
    return float((Decimal(int(kib)) / KIB_PER_GIB).quantize(q, rounding=ROUND_HALF_UP))


# --- /proc/meminfo -----------------------------------------------------------------------

def parse_meminfo(text):
    """``/proc/meminfo`` text -> {field: KiB (int)}; lines without a number are skipped."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


# --- free -h -------------------------------------------------------------------------------

# --- nvidia-smi ----------------------------------------------------------------------------

def _nvsmi_value(raw):
    value = raw.strip()
    if value.lower() in NVSMI_UNAVAILABLE:
        return None
    return value


def parse_nvidia_smi_csv(text, fields=None):
    """``nvidia-smi --query-gpu=... --format=csv[,noheader]`` -> list of dicts.

    With a header line the field names come from it (units like `` [MiB]`` dropped); with
    ``noheader`` pass ``fields``. ``[N/A]`` and ``Not Supported`` become None (tests/fixtures/node/gb10-query-name-memory-total-driver.csv: GB10 has no
    framebuffer, so memory totals read ``[N/A]``).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    if fields is None:
        header = [h.strip() for h in lines[0].split(",")]
        fields = [re.sub(r"\s*\[.*\]$", "", h) for h in header]
        lines = lines[1:]
    rows = []
    for line in lines:
        cells = line.split(",")
        if len(cells) != len(fields):
            raise NodeCheckError("nvidia-smi row %r has %d fields, expected %d (%s)"
                                 % (line, len(cells), len(fields), ", ".join(fields)))
        rows.append(dict((f, _nvsmi_value(c)) for f, c in zip(fields, cells)))
    return rows


def parse_nvidia_smi_table(text):
    """Plain ``nvidia-smi`` table -> {driver_version, cuda_version, gpus: [{index, name}]}."""
    out = {"driver_version": None, "cuda_version": None, "gpus": []}
    m = re.search(r"Driver Version:\s*([0-9][0-9.]*)", text)
    if m:
        out["driver_version"] = m.group(1)
    m = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", text)
    if m:
        out["cuda_version"] = m.group(1)
    for line in text.splitlines():
        # GPU rows: "|   0  NVIDIA GB10      On  |   0000000F:01:00.0 Off |   N/A |"
        m = re.match(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:", line)
        if m:
            out["gpus"].append({"index": int(m.group(1)), "name": m.group(2).strip()})
    return out


def version_tuple(version):
    """'580.126.09' -> (580, 126, 9); None for anything without a leading number."""
    if version is None:
        return None
    parts = re.findall(r"\d+", str(version).split("-", 1)[0].split("+", 1)[0])
    return tuple(int(p) for p in parts) if parts else None


def driver_major(version):
    vt = version_tuple(version)
    return vt[0] if vt else None


def version_satisfies(version, spec):
    """True when ``version`` meets every clause of ``spec`` (e.g. '>=2.19.0,<2.20.0')."""
    have = version_tuple(version)
    if have is None:
        raise NodeCheckError("cannot read version %r" % version)
    ops = {
        ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b,
    }
    for clause in [c.strip() for c in str(spec).split(",") if c.strip()]:
        m = re.match(r"^(>=|<=|==|!=|>|<)\s*(\S+)$", clause)
        if not m:
            raise NodeCheckError("cannot read version clause %r in %r" % (clause, spec))
        want = version_tuple(m.group(2))
        width = max(len(have), len(want))
        a = have + (0,) * (width - len(have))
        b = want + (0,) * (width - len(want))
        if not ops[m.group(1)](a, b):
            return False
    return True


# --- id, /etc/hosts, sysctl ----------------------------------------------------------------


def is_loopback(address):
    try:
        return ipaddress.ip_address(str(address).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def hostname_verdict(hostname, addresses):
    """catalogue gloo_fullmesh: the first address a lookup returns (what ``getent hosts`` prints) must not be loopback."""
    addresses = list(addresses or [])
    return {
        "hostname": hostname,
        "addresses": addresses,
        "loopback": bool(addresses) and is_loopback(addresses[0]),
    }


def parse_sysctl(text):
    """``sysctl -a`` style lines (``key = value``) -> {key: int or str}."""
    out = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#") or "=" not in line:
            continue
        key, value = [p.strip() for p in line.split("=", 1)]
        out[key] = int(value) if re.match(r"^-?\d+$", value) else value
    return out


# --- memory: the figure vLLM's startup check uses (catalogue free_memory_refused, min_free_kbytes_raised) -------------------------------

def feasible_utilization(available_gib, total_gib, margin_gib=0):
    """Largest ``--gpu-memory-utilization`` that passes vLLM's free-memory check on one node.

    vLLM refuses to start when free memory < utilization x total; on GB10 (unified memory) the
    free figure is MemAvailable (catalogue min_free_kbytes_raised), the total is MemTotal. Result: floor((available - margin)
    / total, 2 decimals); catalogue free_memory_refused: 104.46 / 121.69 = 0.858 -> 0.85. Never negative.
    """
    total = _dec(total_gib)
    if total <= 0:
        raise NodeCheckError("MemTotal must be > 0 GiB, got %s" % total_gib)
    usable = _dec(available_gib) - _dec(margin_gib)
    if usable <= 0:
        return 0.0
    return float((usable / total).quantize(Decimal("0.01"), rounding=ROUND_FLOOR))


def required_gib(utilization, total_gib):
    """Memory vLLM wants free for a utilization, in GiB, rounded as vLLM prints it (2 decimals)."""
    return float((_dec(utilization) * _dec(total_gib)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _fmt(value):
    return "%.2f" % float(value)


def utilization_verdict(nodes, requested, margin_gib=0):
    """Cluster verdict for the lane's ``serve.gpu_memory_utilization`` (catalogue free_memory_refused, min_free_kbytes_raised).

    ``nodes``: {host: {'mem_available_gib': x, 'mem_total_gib': y}}. Every node must reach
    ``requested``; else the message names each short node and the largest value every node
    passes (the minimum of the per-node feasible values).
    """
    if not nodes:
        raise NodeCheckError("no node facts to judge the GPU memory utilization against")
    per_host = {}
    short = []
    for host in sorted(nodes):
        n = nodes[host]
        avail, total = n.get("mem_available_gib"), n.get("mem_total_gib")
        if n.get("mem_available_kib") is not None and n.get("mem_total_kib"):
            # exact figures when the node reported KiB (the GiB facts are rounded for display)
            avail = Decimal(int(n["mem_available_kib"])) / KIB_PER_GIB
            total = Decimal(int(n["mem_total_kib"])) / KIB_PER_GIB
        if avail is None or total is None:
            raise NodeCheckError("%s: MemAvailable/MemTotal missing from preflight_node" % host)
        feasible = feasible_utilization(avail, total, margin_gib)
        per_host[host] = feasible
        if requested is not None and feasible < float(requested):
            short.append(host)
    largest = min(per_host.values())
    verdict = {"ok": not short, "requested": requested, "margin_gib": float(margin_gib),
               "feasible": per_host, "largest_passing": largest, "short_hosts": short, "message": ""}
    if requested is None:
        verdict["message"] = ("the lane sets no serve.gpu_memory_utilization; largest value every node "
                              "passes now: %s" % _fmt(largest))
        return verdict
    if not short:
        verdict["message"] = ("gpu_memory_utilization %s reachable on every node (largest passing %s)"
                              % (_fmt(requested), _fmt(largest)))
        return verdict
    details = []
    for host in short:
        n = nodes[host]
        details.append("%s has MemAvailable %s GiB of MemTotal %s GiB, needs %s GiB (feasible %s)" % (
            host, _fmt(n["mem_available_gib"]), _fmt(n["mem_total_gib"]),
            _fmt(required_gib(requested, n["mem_total_gib"]) + float(margin_gib)), _fmt(per_host[host])))
    verdict["message"] = (
        "GPU memory utilization %s (lane serve.gpu_memory_utilization) would fail vLLM's startup "
        "free-memory check, which compares MemAvailable with utilization x MemTotal "
        "(catalogue free_memory_refused, min_free_kbytes_raised; margin %s GiB): %s. "
        "Largest value every node passes: %s. Fix: set vllm_lane_overrides.serve.gpu_memory_utilization "
        "to %s or lower, or free memory on %s (stop other workloads, drop caches) and re-run; "
        "do not raise vm.min_free_kbytes before launch."
        % (_fmt(requested), _fmt(margin_gib), "; ".join(details), _fmt(largest), _fmt(largest), ", ".join(short)))
    return verdict


# --- disk ----------------------------------------------------------------------------------

def disk_needs(lane_spec):
    """The lane's ``requirements.disk_gib`` as {path: GiB}.

    A dict is taken as is; a plain number is the need at ``checkpoint.host_path`` (where the
    checkpoint lands). None or missing -> {}.
    """
    req = (lane_spec or {}).get("requirements") or {}
    need = req.get("disk_gib")
    if need is None:
        return {}
    if isinstance(need, dict):
        return dict((str(p), float(v)) for p, v in need.items())
    path = ((lane_spec or {}).get("checkpoint") or {}).get("host_path")
    if not path:
        raise NodeCheckError("requirements.disk_gib is a number but the lane has no checkpoint.host_path to apply it to")
    return {str(path): float(need)}


def disk_shortfalls(needs, probes):
    """Sum the needs of paths that share a filesystem and compare with its free space.

    ``probes``: {path: {'probe': existing ancestor, 'device': st_dev, 'free_gib': float}}.
    Returns a list of {paths, probe, need_gib, free_gib} for filesystems that are short.
    """
    by_dev = {}
    for path in sorted(needs):
        p = probes.get(path)
        if p is None:
            raise NodeCheckError("no disk probe for %s" % path)
        entry = by_dev.setdefault(p["device"], {"paths": [], "probe": p["probe"], "need_gib": 0.0,
                                                "free_gib": float(p["free_gib"])})
        entry["paths"].append(path)
        entry["need_gib"] = float(_dec(entry["need_gib"]) + _dec(needs[path]))
    entries = sorted(by_dev.values(), key=lambda e: e["probe"])
    return [e for e in entries if e["free_gib"] < e["need_gib"]]


# --- per-node verdicts ---------------------------------------------------------------------

# Userspace memory monitors that kill processes from outside the kernel's OOM path (catalogue userspace_oom_killer):
# docker then reports exit 143 (SIGTERM, earlyoom's and nohang's first signal) or 137 (SIGKILL) with OOMKilled false.
# Matched on /proc/<pid>/comm.
USERSPACE_OOM_KILLERS = ("systemd-oomd", "earlyoom", "nohang", "oomd")
# The exit codes of a rank ended by a signal from outside: 128 + SIGTERM (15), 128 + SIGKILL (9).
KILLED_FROM_OUTSIDE = (143, 137)


def running_oom_killers(comms):
    """Names from USERSPACE_OOM_KILLERS among the process names (/proc/<pid>/comm values), sorted, once each."""
    seen = set((c or "").strip() for c in comms)
    return sorted(k for k in USERSPACE_OOM_KILLERS if k in seen)


def read_oom_killers(proc_root="/proc"):
    """running_oom_killers over every /proc/<pid>/comm; processes that exit while read are skipped."""
    comms = []
    try:
        pids = [d for d in os.listdir(proc_root) if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "comm")) as f:
                comms.append(f.read())
        except (IOError, OSError):
            continue
    return running_oom_killers(comms)


def oom_killer_note(killers):
    """The sentence failure messages add when a userspace OOM killer runs on the node ('' when none)."""
    if not killers:
        return ""
    one = len(killers) == 1
    return ("%s %s on this node and kill%s processes from outside the kernel (exit 143 on SIGTERM, 137 on SIGKILL, OOMKilled false; "
            "catalogue userspace_oom_killer)" % (" and ".join(killers), "runs" if one else "run", "s" if one else ""))


def parse_docker_runtimes(text):
    """Runtime names of `docker info --format '{{json .Runtimes}}'` (a JSON object keyed by name), sorted."""
    try:
        data = json.loads(text)
    except ValueError:
        raise NodeCheckError("docker info Runtimes is not JSON: %r" % (text or "")[:120])
    if not isinstance(data, dict):
        raise NodeCheckError("docker info Runtimes is not an object: %r" % (text or "")[:120])
    return sorted(data)


def _check(name, ok, measured, message):
    return {"name": name, "ok": bool(ok), "measured": measured, "message": "" if ok else message}


def node_checks(host, node, lane_spec):
    """Every per-node rule for one host -> list of {name, ok, measured, message}.

    ``node`` is the ``preflight_node`` fact; ``lane_spec`` the resolved lane. Messages name the
    host, the measured value and the fix. The cluster-wide utilization rule is separate
    (:func:`utilization_verdict`).
    """
    lane_spec = lane_spec or {}
    req = lane_spec.get("requirements") or {}
    spark = lane_spec.get("platform") == "spark"
    kernel = node.get("kernel") or "unknown"
    checks = []

    if spark:
        driver_min = req.get("driver_min")
        if driver_min is None:
            driver_min = 580
        drv = node.get("driver_version")
        major = driver_major(drv)
        checks.append(_check(
            "nvidia_driver", major is not None and major >= int(driver_min), drv,
            "%s: NVIDIA driver %s, the lane needs >= %s (catalogue image_cuda_newer_than_driver). Fix: install "
            "nvidia-driver-%s-open or newer and reboot; check with nvidia-smi."
            % (host, drv if drv else "not found (nvidia-smi gave no driver version)", driver_min, driver_min)))
        want_gpu = req.get("gpu_name") or "NVIDIA GB10"
        names = node.get("gpu_names") or ([node["gpu_name"]] if node.get("gpu_name") else [])
        checks.append(_check(
            "gpu_name", want_gpu in names, ", ".join(names) or None,
            "%s: GPU %s, the lane needs %s (catalogue gpu_arch_unsupported). Fix: run this lane on DGX Spark (GB10) nodes, "
            "or check that the NVIDIA driver is loaded (nvidia-smi)."
            % (host, "'%s'" % ", ".join(names) if names else "not found", want_gpu)))
        runtimes = node.get("docker_runtimes")
        checks.append(_check(
            "nvidia_runtime", runtimes is not None and "nvidia" in runtimes,
            ", ".join(runtimes) if runtimes is not None else None,
            "%s: the docker daemon registers no 'nvidia' runtime (%s); GPU containers fail with 'unknown or invalid "
            "runtime name: nvidia' or find no GPU (catalogue nvidia_runtime_missing). Fix: install the NVIDIA Container "
            "Toolkit, run 'nvidia-ctk runtime configure --runtime=docker' and restart docker; check with "
            "docker info --format '{{json .Runtimes}}'."
            % (host, "runtimes: %s" % ", ".join(runtimes) if runtimes is not None
               else "docker info gave no runtimes: %s" % (node.get("docker_runtimes_error") or "docker not usable"))))
        cma = node.get("cma_total_kib")
        checks.append(_check(
            "cma_total", cma is not None and cma > 0, cma,
            "%s: CmaTotal is %s on kernel %s; RDMA memory registration fails with ENOMEM (catalogue cma_zero). "
            "Fix: boot a kernel with CMA enabled (catalogue cma_zero; that fleet was fixed with 6.17.0-1031-nvidia and driver 580.173.02)."
            % (host, "%s kB" % cma if cma is not None else "missing from /proc/meminfo", kernel)))

    mem_min = req.get("mem_total_gib_min")
    if mem_min is not None:
        total = node.get("mem_total_gib")
        checks.append(_check(
            "mem_total", total is not None and total >= float(mem_min), total,
            "%s: MemTotal %s GiB, the lane needs >= %s GiB. Fix: run this lane on nodes with more memory."
            % (host, total, mem_min)))

    if req.get("swap_required"):
        swap = node.get("swap_total_gib")
        swap = 0.0 if swap is None else float(swap)
        checks.append(_check(
            "swap", swap > 0, swap,
            "%s: swap total is %.2f GiB but the lane requires swap (catalogue oom_killed; docs/node-prep.md: without swap the "
            "worker is killed during the MoE Marlin repack). Fix: run role node_prep (it creates "
            "node_prep_swap_file when no swap exists) or add a swap file and swapon it." % (host, swap)))

    needs = disk_needs(lane_spec)
    if needs:
        short = disk_shortfalls(needs, node.get("disk") or {})
        measured = dict((p, (node.get("disk") or {}).get(p, {}).get("free_gib")) for p in sorted(needs))
        checks.append(_check(
            "disk", not short, measured,
            "; ".join("%s: %s GiB free on the filesystem of %s (probed at %s), the lane needs %s GiB "
                      "(requirements.disk_gib). Fix: free space there or move these paths to a larger disk."
                      % (host, _fmt(s["free_gib"]), ", ".join(s["paths"]), s["probe"], _fmt(s["need_gib"]))
                      for s in short)))

    hn = node.get("hostname_resolution") or {}
    if hn:
        addrs = hn.get("addresses") or []
        checks.append(_check(
            "hostname_not_loopback", not hn.get("loopback"), addrs,
            "%s: host name '%s' resolves to loopback %s first (catalogue gloo_fullmesh); Gloo and NCCL would bind 127.0.0.1 and "
            "peers get 'Connection refused'. Fix: map '%s' to this node's management address in /etc/hosts "
            "(not on the %s line) or DNS."
            % (host, hn.get("hostname"), addrs[0] if addrs else "", hn.get("hostname"), addrs[0] if addrs else "")))
    return checks


def node_warnings(host, node):
    """What a node runs that does not stop a launch but may end a rank later: one message each, host named."""
    out = []
    killers = node.get("oom_killers") or []
    if killers:
        out.append("%s: %s. On unified memory its thresholds trip during weight load. Fix: exclude the rank "
                   "containers from it or disable it on serving nodes (systemctl disable --now systemd-oomd; "
                   "for earlyoom, --avoid or stop the service)." % (host, oom_killer_note(killers)))
    return out


# --- cache directories (node_prep) ---------------------------------------------------------

_CACHE_ENV_SUFFIXES = ("_CACHE_DIR", "_CACHE_ROOT", "_CACHE_PATH", "HF_HOME", "XDG_CACHE_HOME",
                       "WORKSPACE_BASE")


def _mount_pairs(mounts):
    for m in mounts or []:
        if isinstance(m, dict):
            host, ctr = m.get("host") or m.get("src"), m.get("container") or m.get("dst")
        else:
            bits = str(m).split(":")
            host, ctr = (bits[0], bits[1]) if len(bits) >= 2 else (None, None)
        if host and ctr:
            yield str(host).rstrip("/") or "/", str(ctr).rstrip("/") or "/"


def cache_host_dirs(lane_spec):
    """Host directories the lane mounts as caches, as node_prep creates them (docs/lanes.md).

    ``container.cache_dir`` itself; every read-write mount whose container side is ``/cache`` or
    lies under ``/cache/`` or ``/root/.cache/`` (e.g. the FlashInfer JIT cache); and every cache
    env variable (``*_CACHE_DIR``, ``HF_HOME``, ...) that points inside such a mount, mapped to
    the host side (TRITON_CACHE_DIR=/cache/triton -> <cache_dir>/triton). Sorted, unique.
    """
    container = (lane_spec or {}).get("container") or {}
    dirs = set()
    if container.get("cache_dir"):
        dirs.add(str(container["cache_dir"]).rstrip("/"))
    cache_mounts = []
    for m, (host, ctr) in zip(container.get("mounts") or [], _mount_pairs(container.get("mounts"))):
        mode = m.get("mode", "rw") if isinstance(m, dict) else (str(m).split(":")[2] if str(m).count(":") >= 2 else "rw")
        if "ro" in str(mode).split(","):
            continue
        if ctr == "/cache" or ctr.startswith("/cache/") or ctr.startswith("/root/.cache"):
            cache_mounts.append((host, ctr))
            dirs.add(host)
    for key, value in sorted((container.get("env") or {}).items()):
        if not any(str(key).endswith(s) for s in _CACHE_ENV_SUFFIXES):
            continue
        value = str(value).rstrip("/")
        # the longest matching container prefix wins (a nested mount beats /cache)
        for host, ctr in sorted(cache_mounts, key=lambda hc: -len(hc[1])):
            if value == ctr or value.startswith(ctr + "/"):
                dirs.add(host + value[len(ctr):])
                break
    return sorted(dirs)


# --- sysctl settings that hold across `sysctl --system` and reboots (issue 20) --------------

# Directories systemd-sysctl reads, in precedence order: a file name in an earlier directory masks the
# same name in a later one; all files then apply in lexicographic order of their names. procps'
# `sysctl --system` reads the same directories and then /etc/sysctl.conf last (sysctl.d(5), sysctl(8)).
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"


def parse_sysctl_grep(text):
    """``grep -H`` lines ``path:key = value`` -> [{path, key, value}] (key with '/' read as '.')."""
    out = []
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if not sep or "=" not in rest:
            continue
        key, value = [p.strip() for p in rest.split("=", 1)]
        key = key.lstrip("-").replace("/", ".")
        out.append({"path": path, "key": key, "value": value})
    return out


def sysctl_apply_order(paths):
    """The given sysctl files in the order they are applied; masked duplicates dropped."""
    by_name = {}
    conf = []
    for path in paths:
        if path == SYSCTL_CONF:
            conf.append(path)
            continue
        directory, _sep, name = path.rpartition("/")
        rank = SYSCTL_DIRS.index(directory) if directory in SYSCTL_DIRS else len(SYSCTL_DIRS)
        if name not in by_name or rank < by_name[name][0]:
            by_name[name] = (rank, path)
    return [by_name[n][1] for n in sorted(by_name)] + conf[:1]


def sysctl_overrides(host, key, want, ours, grep_text):
    """Which file decides ``key`` after `sysctl --system` or a reboot, and what overrides ours.

    grep_text: ``grep -H`` output over the sysctl files (every line that sets key).
    Returns {decides, value, overrides: [{path, value}], sysctl_conf, errors}; ``sysctl_conf`` is the
    /etc/sysctl.conf entry when it overrides (applied last by `sysctl --system`: no file name sorts
    after it, so it must be edited), ``errors`` name host, file, both values and the fix.
    """
    rows = [r for r in parse_sysctl_grep(grep_text) if r["key"] == key]
    order = sysctl_apply_order(sorted(set(r["path"] for r in rows) | set([ours])))
    last = {}
    for r in rows:
        last[r["path"]] = r["value"]  # the last line of a file wins within it
    applied = [p for p in order if p in last]
    decides = applied[-1] if applied else None
    after = order[order.index(ours) + 1:] if ours in order else []
    overrides = [{"path": p, "value": last[p]} for p in after if p in last and last[p] != str(want)]
    result = {"decides": decides, "value": last.get(decides), "overrides": overrides, "sysctl_conf": None,
              "errors": []}
    for o in overrides:
        if o["path"] == SYSCTL_CONF:
            result["sysctl_conf"] = o
            continue
        result["errors"].append(
            "%s: %s sets %s = %s after %s (%s = %s), so the node gets %s after a reboot or `sysctl --system`. "
            "Fix: remove the line from %s (keep a copy), or rename node_prep_sysctl_file so it sorts after it"
            % (host, o["path"], key, o["value"], ours, key, want, o["value"], o["path"]))
    return result


def sysctl_effective_verdict(host, key, want, effective, applied):
    """Compare the kernel's value (``sysctl -n``) with the one written; None when it holds.

    applied false (simulated fleet: vm.* is not namespaced, the nodes share the build machine's
    kernel) -> the effective value is reported, not judged.
    """
    effective = str(effective).strip()
    if not applied or effective == str(want):
        return None
    return ("%s: the kernel's %s is %s but node_prep wrote %s; something set it after the file was applied. "
            "Fix: find it (a later sysctl file, a tuned profile, a service), then re-run node_prep"
            % (host, key, effective or "unreadable", want))


def sysctl_holds_verdict(host, key, want, ours, effective, grep_text, judged=True):
    """The one check that a sysctl value holds, for node_prep after writing it, after a reboot, and for the
    watchdog's boot path: the file that decides it at boot (sysctl_overrides) and the kernel's value
    (sysctl_effective_verdict). Returns {check, key, ok, effective, decides, value, errors, sysctl_conf,
    sysctl_conf_error, msg}.
    An override in /etc/sysctl.conf is an error here too: node_prep disables that line, so finding it
    again means someone restored it. node_prep itself runs this check right after writing its file: it
    disables the line named by sysctl_conf ({path, value} or None) and drops sysctl_conf_error from errors."""
    v = sysctl_overrides(host, key, want, ours, grep_text)
    errors = list(v["errors"])
    conf_error = None
    if v["sysctl_conf"]:
        conf_error = ("%s: /etc/sysctl.conf sets %s = %s and is applied after every sysctl.d file, so the node "
                      "gets %s after a reboot. Fix: re-run node_prep (it disables that line, keeping a backup)"
                      % (host, key, v["sysctl_conf"]["value"], v["sysctl_conf"]["value"]))
        errors.append(conf_error)
    eff = sysctl_effective_verdict(host, key, want, effective, judged)
    if eff:
        errors.append(eff)
    effective = str(effective).strip()
    msg = ("%s: %s is %s in the kernel (%s), %s decides it at boot"
           % (host, key, effective or "unreadable", "judged" if judged else "not judged", v["decides"] or "no file"))
    return {"check": "sysctl %s" % key, "key": key, "ok": not errors, "effective": effective,
            "decides": v["decides"], "value": v["value"], "errors": errors, "sysctl_conf": v["sysctl_conf"],
            "sysctl_conf_error": conf_error, "msg": msg}


def swap_verdict(host, meminfo, required):
    """Refusal when the lane requires swap and SwapTotal is 0 (docs/node-prep.md); else None."""
    total = meminfo.get("SwapTotal")
    if not required or (total or 0) > 0:
        return None
    return ("%s: SwapTotal is %s kB, but the lane requires swap (without swap the worker is killed during the "
            "MoE Marlin repack, docs/node-prep.md). Fix: set node_prep_swap_create: true (node_prep creates "
            "a swap file), or enable the node's own swap (swapon -a), then re-run"
            % (host, "unknown" if total is None else total))


def swap_cycle_plan(meminfo):
    """Whether the launch ritual cycles swap (swapoff -a && swapon -a): only when swap is in use,
    and only when MemAvailable can take back what is swapped out. Returns (action, used_kib, reason)."""
    total, free = meminfo.get("SwapTotal") or 0, meminfo.get("SwapFree") or 0
    used, available = total - free, meminfo.get("MemAvailable") or 0
    if total == 0 or used <= 0:
        return "skip", max(used, 0), "no swap in use"
    if used >= available:
        return "refuse", used, ("%d kB swapped out but only %d kB MemAvailable: swapoff would fail or trigger the "
                                "OOM killer" % (used, available))
    return "cycle", used, "%d kB swapped out, %d kB MemAvailable" % (used, available)
