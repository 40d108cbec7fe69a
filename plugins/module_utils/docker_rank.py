# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One rank container through the docker CLI (no Python docker SDK on the node).

The command runner is injected (`run(argv) -> (rc, stdout, stderr)`), so the state machine is
unit-tested against recorded `docker inspect` output. Rules (operations spec A.4-A.6):
  - `docker logs` is saved to a file BEFORE any removal (NVRM failures surface minutes later);
  - a container is recreated only when its spec-hash label differs, or it is not running;
  - a container found exited counts as an unexplained death; the counter survives between runs
    in <log_dir>/<name>.deaths and resets when a later run finds the rank running.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils.render import HASH_LABEL, LABEL_PREFIX, run_argv

SPEC_LABEL = LABEL_PREFIX + "spec"
# Lines worth showing when a rank died (the T4 readiness loop greps the same words, spec A.6).
ERROR_RE = re.compile(r"error|Traceback|raise |Exception|NO_MEMORY|not support|Unsupported", re.IGNORECASE)


class DockerError(Exception):
    def __init__(self, msg, rc=None, stdout="", stderr=""):
        Exception.__init__(self, msg)
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


def parse_inspect(text):
    """`docker inspect <name>` JSON -> the fields this module reports (None when absent)."""
    data = json.loads(text)
    if not data:
        return None
    c = data[0]
    state = c.get("State") or {}
    labels = (c.get("Config") or {}).get("Labels") or {}
    return {
        "id": c.get("Id", ""),
        "name": (c.get("Name") or "").lstrip("/"),
        "image": (c.get("Config") or {}).get("Image", ""),
        "status": state.get("Status", ""),
        "running": bool(state.get("Running")),
        "exit_code": state.get("ExitCode"),
        "oom_killed": bool(state.get("OOMKilled")),
        "started_at": state.get("StartedAt", ""),
        "finished_at": state.get("FinishedAt", ""),
        "spec_hash": labels.get(HASH_LABEL, ""),
        "spec_json": labels.get(SPEC_LABEL, ""),
        "labels": labels,
    }


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


class DockerRank(object):
    def __init__(self, run, docker="docker", log_dir="/var/log/dgxspark-vllm", stamp=None,
                 clock=time.time, sleep=time.sleep):
        self._run = run
        self.docker = docker
        self.log_dir = log_dir
        self.stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.clock, self.sleep = clock, sleep

    def _docker(self, *args, **kw):
        argv = [self.docker] + list(args)
        rc, out, err = self._run(argv)
        if rc != 0 and kw.get("check", True):
            raise DockerError("%s failed (rc %s): %s" % (" ".join(argv[:3]), rc, (err or out).strip()), rc, out, err)
        return rc, out, err

    def inspect(self, name):
        rc, out, err = self._docker("inspect", "--type", "container", name, check=False)
        if rc != 0:
            if "No such" in (err or "") or "no such" in (err or ""):
                return None
            raise DockerError("docker inspect %s failed (rc %s): %s" % (name, rc, (err or out).strip()), rc, out, err)
        return parse_inspect(out)

    def log_path(self, name):
        return os.path.join(self.log_dir, "%s-%s.log" % (name, self.stamp))

    def save_logs(self, name):
        """Write the container's full `docker logs` (stdout and stderr interleaved) to log_path."""
        if not os.path.isdir(self.log_dir):
            os.makedirs(self.log_dir, 0o755)
        path = self.log_path(name)
        rc, out, err = self._run(["sh", "-c", 'exec "$0" logs --timestamps "$1" >"$2" 2>&1', self.docker, name, path])
        if rc != 0:
            raise DockerError("saving docker logs of %s to %s failed (rc %s): %s; the container is kept"
                              % (name, path, rc, (err or out).strip()), rc, out, err)
        return path

    def read_log(self, path):
        try:
            with open(path, "r") as f:
                return f.read()
        except (IOError, OSError):
            return ""

    def remove(self, name):
        self._docker("rm", "-f", name)

    def start(self, spec):
        rc, out, err = self._docker(*run_argv(spec, self.docker)[1:])
        return out.strip()

    def logs_text(self, name):
        rc, out, err = self._docker("logs", name, check=False)
        return (out or "") + (err or "")

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
