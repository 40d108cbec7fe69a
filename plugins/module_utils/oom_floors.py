# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""A userspace OOM killer's effective floor, compared with the free memory the plan predicts at peak (the one rule).

earlyoom sends SIGTERM when available memory falls below its floor: `-m PERCENT[,KILL_PERCENT]` of MemTotal and
`-M SIZE[,KILL_SIZE]` in KiB (with both, the lower one counts); default -m 10. Its command line (a running
earlyoom) is the effective setting, else EARLYOOM_ARGS in /etc/default/earlyoom. nohang sends SIGTERM below
`soft_threshold_min_mem` of its config (`N %` of MemTotal or `N M` MiB). Both also look at free swap; the floor
compared here is the memory one, the one a rank crosses as its weights finish loading. systemd-oomd acts on memory
pressure and swap use (oomd.conf and its drop-ins, the last file wins), not on a free-memory floor: its effective
values are read and named, not compared.

Callers: module node_facts (read_killer_floors, on every node) and roles/preflight (filter node_oom_floor_errors
against the memory plan's free_at_peak_gib). Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

EARLYOOM_DEFAULT_PCT = 10.0
# how far above a killer's floor the plan's free memory at peak must stay (GiB)
DEFAULT_MARGIN_GIB = 2.0
OOMD_KEYS = ("SwapUsedLimit", "DefaultMemoryPressureLimit", "DefaultMemoryPressureDurationSec")


def _first(value):
    """'5,2' -> 5.0 (the SIGTERM value before the SIGKILL one); None when not a number."""
    try:
        return float(str(value).split(",", maxsplit=1)[0])
    except ValueError:
        return None


def earlyoom_args(text):
    """The earlyoom options of a command line (NULs of /proc/<pid>/cmdline turned into spaces) or of
    `EARLYOOM_ARGS="..."` in /etc/default/earlyoom: {m, M} (m in percent, M in KiB, the SIGTERM values; None when
    absent). '#' lines and other assignments of the defaults file are skipped."""
    words = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(?:export\s+)?EARLYOOM_ARGS=(.*)$", line)
        if m:
            try:
                words.extend(" ".join(shlex.split(m.group(1))).split())
            except ValueError:
                words.extend(m.group(1).strip("\"'").split())
        elif "=" not in line.split()[0]:
            words.extend(line.split())
    out = {"m": None, "M": None}
    for i, w in enumerate(words):
        for flag in ("m", "M"):
            if w == "-" + flag and i + 1 < len(words):
                out[flag] = _first(words[i + 1])
            elif w.startswith("-" + flag) and len(w) > 2 and (w[2].isdigit() or w[2] == "."):
                out[flag] = _first(w[2:])
    return out


def earlyoom_floor_gib(opts, mem_total_gib):
    """(floor GiB, setting text) of earlyoom's options: the lower of -m (percent of MemTotal) and -M (KiB)."""
    pct = opts.get("m")
    kib = opts.get("M")
    cands = []
    if pct is not None or kib is None:
        p = EARLYOOM_DEFAULT_PCT if pct is None else pct
        cands.append((mem_total_gib * p / 100.0, "-m %g" % p if pct is not None else "-m %g (default)" % p))
    if kib is not None:
        cands.append((kib / 1048576.0, "-M %d" % kib))
    return min(cands)


def nohang_floor_gib(conf, mem_total_gib):
    """(floor GiB, setting text) of nohang's soft_threshold_min_mem ('N %' of MemTotal or 'N M' MiB), or None."""
    for line in (conf or "").splitlines():
        m = re.match(r"^\s*soft_threshold_min_mem\s*=\s*([\d.]+)\s*(%|M)\s*$", line)
        if m:
            val = float(m.group(1))
            gib = mem_total_gib * val / 100.0 if m.group(2) == "%" else val / 1024.0
            return gib, "soft_threshold_min_mem = %g %s" % (val, m.group(2))
    return None


def oomd_settings(files):
    """{key: (value, path)} of systemd-oomd's [OOM] keys over [(path, text)] in systemd's order (oomd.conf, then the
    drop-ins sorted by file name): the last file that sets a key wins."""
    out = {}
    for path, text in files:
        for line in (text or "").splitlines():
            m = re.match(r"^\s*(%s)\s*=\s*(\S*)\s*$" % "|".join(OOMD_KEYS), line)
            if m:
                out[m.group(1)] = (m.group(2), path)
    return out


def killer_floor_errors(host, killers, free_at_peak_gib, margin_gib=DEFAULT_MARGIN_GIB):
    """One message per active killer whose floor is within margin_gib of (or above) the free memory the plan
    predicts at peak: it would kill the rank the moment loading ends. killers: [{name, active, floor_gib, setting,
    file}]; an inactive killer, or a floor well below, gives nothing."""
    out = []
    for k in killers:
        if not k.get("active") or k.get("floor_gib") is None:
            continue
        if k["floor_gib"] + margin_gib <= free_at_peak_gib:
            continue
        fix = {"earlyoom": "lower -m/-M there (or add the rank to --avoid), or stop it on serving nodes "
                           "(systemctl disable --now earlyoom)",
               "nohang": "lower soft_threshold_min_mem there, or stop it on serving nodes "
                         "(systemctl disable --now nohang)"}.get(k["name"], "lower its floor or stop it")
        out.append("%s: %s's floor is %.2f GiB (%s in %s) and the plan leaves %.2f GiB free at peak (margin %.2f "
                   "GiB): it would kill the rank as its weights finish loading (catalogue userspace_oom_killer). "
                   "Fix: %s; the floor must stay below %.2f GiB."
                   % (host, k["name"], k["floor_gib"], k["setting"], k["file"], free_at_peak_gib, margin_gib, fix,
                      free_at_peak_gib - margin_gib))
    return out


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def _running(proc_root, names):
    """{name: [cmdline words]} of the first running process of each name (its /proc/<pid>/comm)."""
    out = {}
    try:
        pids = sorted((d for d in os.listdir(proc_root) if d.isdigit()), key=int)
    except OSError:
        return out
    for pid in pids:
        comm = (_read(os.path.join(proc_root, pid, "comm")) or "").strip()
        if comm in names and comm not in out:
            out[comm] = [w for w in (_read(os.path.join(proc_root, pid, "cmdline")) or "").split("\0") if w]
    return out


def read_killer_floors(mem_total_gib, proc_root="/proc", etc_root="/"):
    """The running earlyoom and nohang on this node with their effective floors: [{name, active, floor_gib, setting,
    file}] (killer_floor_errors' input). earlyoom: its command line when it carries -m/-M, else EARLYOOM_ARGS of
    /etc/default/earlyoom, else its default; nohang: soft_threshold_min_mem of the config its -c/--config names, else
    /etc/nohang/nohang.conf (floor None when unreadable: not judged). A killer that does not run gives nothing."""
    out = []
    running = _running(proc_root, ("earlyoom", "nohang"))
    if "earlyoom" in running:
        words = running["earlyoom"][1:]
        opts, where = earlyoom_args(" ".join(words)), "its command line"
        if opts["m"] is None and opts["M"] is None:
            path = os.path.join(etc_root, "etc/default/earlyoom")
            text = _read(path)
            if text is not None:
                opts, where = earlyoom_args(text), "/etc/default/earlyoom"
        floor, setting = earlyoom_floor_gib(opts, mem_total_gib)
        out.append({"name": "earlyoom", "active": True, "floor_gib": round(floor, 2), "setting": setting,
                    "file": where})
    if "nohang" in running:
        words = running["nohang"]
        conf = "/etc/nohang/nohang.conf"
        for i, w in enumerate(words):
            if w in ("-c", "--config") and i + 1 < len(words):
                conf = words[i + 1]
            elif w.startswith("--config="):
                conf = w.split("=", 1)[1]
        got = nohang_floor_gib(_read(os.path.join(etc_root, conf.lstrip("/"))), mem_total_gib)
        out.append({"name": "nohang", "active": True, "floor_gib": round(got[0], 2) if got else None,
                    "setting": got[1] if got else "soft_threshold_min_mem not found", "file": conf})
    return out
