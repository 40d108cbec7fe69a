# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""One rank container through the docker CLI (module_utils/docker_cli.py, no Python docker SDK on the node).

The command runner is injected (`run(argv) -> (rc, stdout, stderr)`), so the state machine is
unit-tested against recorded `docker inspect` output. Rules (catalogue rendezvous_timeout, worker_orphaned; docs/health.md):
  - `docker logs` is saved to a file BEFORE any removal (NVRM failures surface minutes later);
  - a container is recreated only when its spec-hash label differs, or it is not running;
  - a container found exited when a rank is started or removed counts as an unexplained death; the
    counter survives between runs in <log_dir>/<name>.deaths and resets when such a run finds the rank
    running (a query only reads it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

# DockerError is re-exported: callers import it from docker_rank.
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import (  # noqa: F401 pylint: disable=unused-import
    DockerCLI,
    DockerError,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import HASH_LABEL, LABEL_PREFIX, run_argv

SPEC_LABEL = LABEL_PREFIX + "spec"
# Lines worth showing when a rank died (the T4 readiness loop greps the same words, docs/health.md).
ERROR_RE = re.compile(r"error|Traceback|raise |Exception|NO_MEMORY|not support|Unsupported", re.IGNORECASE)


def _with_spec(info):
    if info is None:
        return None
    info["spec_hash"] = info["labels"].get(HASH_LABEL, "")
    info["spec_json"] = info["labels"].get(SPEC_LABEL, "")
    return info


def diff_keys(old_json, new_hashed):
    """Top-level and env/command keys that differ between the label's spec and the wanted one."""
    try:
        old = json.loads(old_json) if old_json else {}
    except ValueError:
        old = {}
    keys = []
    for key in sorted(set(old) | set(new_hashed)):
        a, b = old.get(key), new_hashed.get(key)
        if a == b:
            continue
        if key == "env" and isinstance(a, dict) and isinstance(b, dict):
            keys += ["env.%s" % k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif key == "command" and isinstance(a, list) and isinstance(b, list):
            fa, fb = _flags(a), _flags(b)
            keys += ["command %s" % k for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)] or [key]
        else:
            keys.append(key)
    return keys


def _flags(argv):
    """argv -> {flag or positional index: value} (a flag without a value maps to True)."""
    out, idx = {}, 0
    while idx < len(argv):
        arg = argv[idx]
        if arg.startswith("--"):
            if idx + 1 < len(argv) and not argv[idx + 1].startswith("--"):
                out[arg] = argv[idx + 1]
                idx += 2
                continue
            out[arg] = True
        else:
            out["argv[%d]" % idx] = arg
        idx += 1
    return out


def error_lines(text, limit=20):
    lines = [ln for ln in (text or "").splitlines() if ERROR_RE.search(ln)]
    return lines[-limit:]


# The head's launch guard (catalogue port_taken), used by vllm_ranks before any rank starts and by the
# watchdog's agent before it starts the head: once every rank of the group is gone, a listener on the
# head's API or master port is another process, and the head would exit with 'Address already in use'
# after the workers started.
HEAD_PORT_KEYS = ("api_port", "master_port")


def listen_argv(port):
    """iproute2 `ss` argv listing the TCP listeners of one port with their process; no output: the port is free."""
    return ["ss", "-H", "-l", "-t", "-n", "-p", "sport = :%d" % int(port)]


def port_guard_errors(host, listeners):
    """listeners: [{key (lane serve key), port, stdout (of listen_argv)}] -> one message per taken port."""
    out = []
    for item in listeners:
        held = (item.get("stdout") or "").strip()
        if not held:
            continue
        key, port = item["key"], int(item["port"])
        out.append("%s: TCP port %d (lane serve.%s) is in use although every rank of the group was removed: %s. "
                   "The head would exit with 'Address already in use'. Fix: stop that process (ss -ltnp "
                   "'sport = :%d' on %s) or set another port in vllm_lane_overrides.serve.%s, then re-run; no rank "
                   "was started (catalogue port_taken)." % (host, port, key, held, port, host, key))
    return out


class DockerRank(object):
    def __init__(self, run, docker="docker", log_dir="/var/log/dgxspark-vllm", stamp=None,
                 clock=time.time, sleep=time.sleep):
        self._run = run
        self.cli = DockerCLI(run, docker)
        self.docker = docker
        self.log_dir = log_dir
        self.stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.clock, self.sleep = clock, sleep

    def inspect(self, name):
        return _with_spec(self.cli.inspect_container(name))

    def log_path(self, name):
        return os.path.join(self.log_dir, "%s-%s.log" % (name, self.stamp))

    def save_logs(self, name):
        """Write the container's full `docker logs` (stdout and stderr interleaved) to log_path."""
        if not os.path.isdir(self.log_dir):
            os.makedirs(self.log_dir, 0o755)
        return self.cli.save_logs(name, self.log_path(name))

    def read_log(self, path):
        try:
            with open(path, "r") as f:
                return f.read()
        except (IOError, OSError):
            return ""

    def remove(self, name):
        self.cli.remove(name)

    def start(self, spec):
        return self.cli.run(run_argv(spec, self.docker)[1:])

    def logs_text(self, name, tail=None):
        args = ("logs", "--tail", str(int(tail)), name) if tail else ("logs", name)
        _rc, out, err = self.cli.call(*args, check=False)
        return out + err

    def wait(self, name, regex, timeout, interval=1.0):
        """Wait for the rank: running and, when regex is set, its log matching it.

        Returns (outcome, info, log_tail) with outcome 'ready', 'exited' or 'timeout'.
        Event-driven: it returns as soon as the log line appears or the container stops.
        """
        pattern = re.compile(regex) if regex else None
        deadline = self.clock() + max(timeout or 0, 0)
        while True:
            info = self.inspect(name)
            if info is None or not info["running"]:
                return "exited", info, self.logs_text(name) if info else ""
            if pattern is None:
                return "ready", info, ""
            text = self.logs_text(name)
            if pattern.search(text):
                return "ready", info, ""
            if self.clock() >= deadline:
                return "timeout", info, text
            self.sleep(interval)

    # deaths counter -------------------------------------------------------------------------
    def _deaths_file(self, name):
        return os.path.join(self.log_dir, "%s.deaths" % name)

    def deaths(self, name):
        try:
            with open(self._deaths_file(name)) as f:
                return int(f.read().strip() or 0)
        except (IOError, OSError, ValueError):
            return 0

    def set_deaths(self, name, count):
        if not os.path.isdir(self.log_dir):
            os.makedirs(self.log_dir, 0o755)
        with open(self._deaths_file(name), "w") as f:
            f.write("%d\n" % count)


def count_deaths(stored, current, reset=False):
    """Unexplained deaths in a row after a start or removal found `current` (catalogue worker_orphaned).

    A container found not running adds one; one found running ends the streak (0); reset starts
    from 0 after the cause was fixed. A query never calls this: it only reports the stored count.
    """
    deaths = 0 if reset else stored
    if current and not current["running"]:
        return deaths + 1
    if current and current["running"]:
        return 0
    return deaths


def plan(state, current, spec, recreate=False):
    """Decide the actions for one rank: a list of 'save_logs', 'remove', 'start' (in order)."""
    if state == "query":
        return []
    if state == "absent":
        return ["save_logs", "remove"] if current else []
    want = spec["labels"][HASH_LABEL]
    if current and current["running"] and current["spec_hash"] == want and not recreate:
        return []
    return (["save_logs", "remove"] if current else []) + ["start"]


def group_restart(ranks, force=False, restart_on_change=True):
    """Decide for the whole group (catalogue worker_orphaned: a tensor-parallel group restarts as a whole).

    ranks: {host: {"running": bool, "spec_hash": found label, "want_hash": rendered hash,
    "fix_drift": [messages]}} in rank-play order. A rank not running forces a restart; a changed
    spec or drifted fix file restarts only with restart_on_change. Returns {"restart", "down",
    "stale", "fix_stale"} (host lists keep the input order).
    """
    down = [h for h, r in ranks.items() if not r.get("running")]
    stale = [h for h, r in ranks.items() if (r.get("spec_hash") or "") != (r.get("want_hash") or "")]
    fix_stale = [h for h, r in ranks.items() if r.get("fix_drift")]
    restart = bool(force) or bool(down) or (bool(stale or fix_stale) and bool(restart_on_change))
    return {"restart": restart, "down": down, "stale": stale, "fix_stale": fix_stale}
