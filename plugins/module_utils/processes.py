# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""Which processes on a node are vLLM engine processes, and how much memory each holds (the one rule).

vLLM names its processes with setproctitle: `VLLM::EngineCore`, `VLLM::Worker_TP0`, `VLLM::Worker_PP0_TP1`,
`VLLM::APIServer` (prefix VLLM_PROCESS_NAME_PREFIX, default `VLLM`); the kernel keeps the first 15 bytes as the
process name (`/proc/<pid>/comm`: `VLLM::EngineCor`, `VLLM::Worker_TP`). The front end started as `vllm serve`
runs under the name `vllm` (the script's name). A process is an engine process by its NAME only (comm, or the
title in argv[0]), never because its command line mentions vLLM or a rank: `tail -F .../vllm_rank-1.log`, an
exporter scraping the head, `grep VLLM::EngineCore` or this project's agent are not engines and are neither
waited for nor named as holders.

Callers: rank_node.py (the settle gate of every relaunch: vllm_ranks through vllm_group_step, and the watchdog's
agent), diagnose.node_facts (doctor: catalogue engine_memory_held), doctor_collect (reads /proc and
`nvidia-smi --query-compute-apps`). Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# The title prefix vLLM gives every process it names (vllm/utils set_process_title, default prefix "VLLM").
TITLE_PREFIX = "VLLM::"
# The process name of the `vllm` command line (the API server of `vllm serve`, before and without a title).
CLI_NAME = "vllm"
# nvidia-smi argv whose output parse_compute_apps reads: the GPU memory each process holds (MiB, no units)
COMPUTE_APPS_ARGV = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
GIB_KIB = 1048576.0


def engine_name(comm, argv):
    """The engine process name of one process, or None when it is not an engine process.

    comm: /proc/<pid>/comm (15 bytes at most); argv: the argument list (/proc/<pid>/cmdline split on NUL).
    The title in argv[0] is preferred because comm is cut short ('VLLM::Worker_TP' for 'VLLM::Worker_TP1')."""
    comm = (comm or "").strip()
    title = (argv[0] if argv else "").strip()
    # setproctitle may leave the title padded with spaces in the old argv area: its first word is the title
    title = title.split(" ")[0] if title.startswith(TITLE_PREFIX) else title
    if title.startswith(TITLE_PREFIX) and len(title) > len(TITLE_PREFIX):
        return title
    if comm.startswith(TITLE_PREFIX) and len(comm) > len(TITLE_PREFIX):
        return comm
    if comm == CLI_NAME:
        return CLI_NAME
    return None


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def _rss_kib(status):
    for line in (status or "").splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            if len(parts) > 1 and parts[1].isdigit():
                return int(parts[1])
    return None


def read_processes(proc_root="/proc", me=None):
    """[{pid, comm, argv, rss_kib, cgroup}] of every process under proc_root (a process that ends while it is read
    is skipped; a kernel thread has an empty argv and no VmRSS). me: a PID left out (default: this process)."""
    me = os.getpid() if me is None else me
    out = []
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit() and int(p) != me]
    except OSError:
        return out
    for pid in pids:
        base = os.path.join(proc_root, pid)
        comm = _read(os.path.join(base, "comm"))
        if comm is None:
            continue
        cmdline = _read(os.path.join(base, "cmdline"), binary=True) or b""
        argv = [a.decode("utf-8", "replace") for a in cmdline.split(b"\0") if a]
        out.append({"pid": int(pid), "comm": comm.strip(), "argv": argv,
                    "rss_kib": _rss_kib(_read(os.path.join(base, "status"))),
                    "cgroup": (_read(os.path.join(base, "cgroup")) or "").strip()})
    return sorted(out, key=lambda p: p["pid"])


def parse_compute_apps(text):
    """{pid: MiB} from `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`
    ('4242, VLLM::EngineCore, 61383'); lines it cannot read ('[N/A]', 'No running processes found') are skipped."""
    out = {}
    for line in (text or "").splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 3 and cols[0].isdigit() and cols[-1].isdigit():
            out[int(cols[0])] = int(cols[-1])
    return out


def engine_processes(processes, gpu_mib=None, own_container=None):
    """The engine processes among `processes` (read_processes' records), each {pid, name, rss_gib, gpu_gib, gib, cmd}.

    gpu_mib: {pid: MiB} (parse_compute_apps); on GB10 the memory an engine holds through the driver is not part of
    its resident set, so `gib` (the figure messages give) is the larger of the two. own_container: the id of a rank
    container that is running; its own processes (their cgroup names it) are not leftovers and are left out."""
    gpu_mib = gpu_mib or {}
    out = []
    for p in processes:
        name = engine_name(p.get("comm"), p.get("argv"))
        if name is None:
            continue
        if own_container and own_container in (p.get("cgroup") or ""):
            continue
        rss = p.get("rss_kib")
        rss_gib = None if rss is None else round(rss / GIB_KIB, 2)
        gpu = gpu_mib.get(p["pid"])
        gpu_gib = None if gpu is None else round(gpu / 1024.0, 2)
        known = [g for g in (rss_gib, gpu_gib) if g is not None]
        out.append({"pid": p["pid"], "name": name, "rss_gib": rss_gib, "gpu_gib": gpu_gib,
                    "gib": max(known) if known else None, "cmd": " ".join(p.get("argv") or [])[:120]})
    return sorted(out, key=lambda h: h["pid"])


def describe(holders):
    """'VLLM::EngineCore pid 4242 (59.94 GiB), VLLM::Worker_TP1 pid 4301 (0.52 GiB)': every holder, none left out."""
    return ", ".join("%s pid %s (%s)" % (h["name"], h["pid"],
                                         "memory unknown" if h.get("gib") is None else "%.2f GiB" % h["gib"])
                     for h in holders)


def held_gib(holders):
    """The memory the holders hold together (GiB, the known figures only)."""
    return round(sum(h["gib"] for h in holders if h.get("gib") is not None), 2)
