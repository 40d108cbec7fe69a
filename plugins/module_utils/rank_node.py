# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""One node's steps of the group lifecycle (lifecycle.py `plan`): ready, stop, settle, start, container.

Each step exists once, here. It runs on the node: through the vllm_group_step module when vllm_ranks changes
the group, and through the watchdog's agent when the watchdog restarts it. Every step returns a dict with
`ok` and, when not ok, `msg` naming the host, the item and the fix.

Standard library plus the collection's module_utils (the vllm_watchdog role ships them to the nodes). The
command runner, clock, sleep and file reader are injected, so every branch is unit-tested without a node.

The step config (`cfg`, one dict; the agent's agent.json and the module's parameters give the same keys):
  host, container, docker, log_dir, rank_spec_file;
  settle: {min_available_gib (GiB or None), timeout_s, delay_s, sync, swap_cycle, drop_caches, compact,
           engine_processes (wait until none is left: processes.py names them)};
  ready: {swap_required, swappiness, sysctl_file, mtu {ifname: bytes}}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import (
    HEAD_PORT_KEYS,
    DockerRank,
    count_deaths,
    error_lines,
    listen_argv,
    port_guard_errors,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import explain
from ansible_collections.dgxspark.vllm.plugins.module_utils.health import PHASE_ORDER, parse_phase
from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import launch_errors
from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import swap_cycle_plan
from ansible_collections.dgxspark.vllm.plugins.module_utils import processes
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import run_argv

# an image name no spec uses: run_argv puts the command right after the image
_IMAGE_MARK = "\0dgxspark-image\0"


def read_text(path):
    with open(path) as f:
        return f.read()


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def meminfo_kib(text):
    out = {}
    for line in (text or "").splitlines():
        key, _sep, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out


def engine_processes(proc_root="/proc", me=None):
    """[{pid, name, rss_gib, gpu_gib, gib, cmd}] of the engine processes on this node (processes.py: by process name,
    never by a command line that mentions the rank); after every rank stopped, these are the old group's leftovers."""
    return processes.engine_processes(processes.read_processes(proc_root, me))


class Node(object):
    """The steps on one node. run(argv) -> (rc, stdout, stderr); the rest is injected for the tests."""

    def __init__(self, cfg, run, clock=time.time, sleep=time.sleep, reader=read_text, writer=write_text,
                 processes=None, stamp=None):
        self.cfg = cfg
        self.run = run
        self.clock, self.sleep = clock, sleep
        self.reader, self.writer = reader, writer
        self.processes = processes or self._engine_processes
        self.host = cfg.get("host") or "this node"
        self.dr = DockerRank(run, docker=cfg.get("docker") or "docker", log_dir=cfg.get("log_dir") or
                             "/var/log/dgxspark-vllm", stamp=stamp, clock=clock, sleep=sleep)

    @staticmethod
    def _engine_processes():
        # looked up at call time, so a test can replace the module's engine_processes
        return engine_processes()

    # ---------------------------------------------------------------------------------------------
    def rank_spec(self):
        """The rank spec file vllm_ranks wrote ({spec, wait_regex, wait_timeout, head_ports}), or raises."""
        return json.loads(self.reader(self.cfg["rank_spec_file"]))

    def container(self):
        info = self.dr.inspect(self.cfg["container"])
        keys = ("name", "status", "running", "exit_code", "oom_killed", "started_at", "finished_at", "spec_hash")
        return {"ok": True, "container": dict((k, info[k]) for k in keys) if info else None, "time": self.clock()}

    def boot_progress(self, tail=400, started_at=None, memo=None):
        """The rank's boot phase and shard progress from the end of its log (health.parse_phase):
        {phase, shards_loaded, shards_total}; shards None before the progress bar.
        memo (a file path) with started_at (the container's StartedAt): once this container instance is past
        'loading' its reading is kept there and returned without reading the log again. Only 'loading' matters to
        the livelock watch, and a rank never goes back to it without a new start (a new StartedAt)."""
        key = {"container": self.cfg["container"], "started_at": started_at}
        if memo and started_at:
            try:
                kept = json.loads(self.reader(memo))
                if kept.get("key") == key:
                    return kept["boot"]
            except (IOError, OSError, ValueError, KeyError, TypeError, AttributeError):
                pass  # no memo, another instance's or a damaged one: read the log
        p = parse_phase(self.dr.logs_text(self.cfg["container"], tail=tail))
        boot = {"phase": p["phase"], "shards_loaded": p["shards_loaded"], "shards_total": p["shards_total"]}
        past_loading = boot["phase"] in PHASE_ORDER and PHASE_ORDER.index(boot["phase"]) > PHASE_ORDER.index("loading")
        if memo and started_at and past_loading:
            try:
                self.writer(memo, json.dumps({"key": key, "boot": boot}))
            except (IOError, OSError):
                pass  # an unwritable memo costs a log read next time, nothing else
        return boot

    def mem_available_gib(self):
        kib = meminfo_kib(self.reader("/proc/meminfo")).get("MemAvailable")
        return None if kib is None else round(kib / 1048576.0, 2)

    # ready: what a rank needs on this node before the group may start ---------------------------------
    def ready(self, sysctl_holds=None, spec=None):
        """spec: the rank spec to check (default: the one in the rank spec file, which must then be readable)."""
        checks = []
        want = self.cfg.get("ready") or {}
        if want.get("swap_required"):
            on = len(self.reader("/proc/swaps").strip().splitlines()) > 1
            checks.append({"check": "swap", "ok": on, "msg": "swap on" if on else "no active swap"})
        if str(want.get("swappiness")) not in ("None", "") and sysctl_holds is not None:
            # node_prep's own check (module_utils/sysctl_state.py): the kernel's value and the file that decides it
            v = sysctl_holds(self.host, "vm.swappiness", want["swappiness"], want["sysctl_file"], True)
            checks.append({"check": "swappiness", "ok": v["ok"], "msg": "; ".join(v["errors"]) or v["msg"]})
        for ifname, mtu in sorted((want.get("mtu") or {}).items()):
            try:
                val = int(self.reader("/sys/class/net/%s/mtu" % ifname).strip())
            except (IOError, OSError, ValueError):
                val = None
            checks.append({"check": "mtu", "ok": val is not None and val >= int(mtu),
                           "msg": "%s MTU %s (needs %s)" % (ifname, val, mtu)})
        if spec is None:
            try:
                spec = self.rank_spec()["spec"]
                checks.append({"check": "rank_spec", "ok": True, "msg": self.cfg["rank_spec_file"]})
            except (IOError, OSError, ValueError, KeyError, TypeError) as e:
                checks.append({"check": "rank_spec", "ok": False, "msg": "%s: %s" % (self.cfg.get("rank_spec_file"), e)})
        if spec:
            rc, _o, _e = self.run([self.dr.docker, "image", "inspect", "--format", "{{.Id}}", spec["image"]])
            checks.append({"check": "image", "ok": rc == 0,
                           "msg": "image %s %s" % (spec["image"], "present" if rc == 0 else "missing")})
            missing = [m["host"] for m in spec.get("mounts") or [] if not os.path.exists(m["host"])]
            checks.append({"check": "files", "ok": not missing,
                           "msg": "missing: %s" % ", ".join(missing) if missing else "every mounted file present"})
        bad = [c for c in checks if not c["ok"]]
        return {"ok": not bad, "checks": checks,
                "msg": "; ".join("%s: %s" % (c["check"], c["msg"]) for c in (bad or checks))}

    # stop: the log saved first, the cause named, then removed --------------------------------------------
    def stop(self, count=False, reset_deaths=False, remove=True):
        """Remove the rank container, its `docker logs` saved first (catalogue worker_orphaned). count: add an
        unexplained death when it was found stopped (vllm_ranks' streak; docker_rank.count_deaths). remove False:
        only save the log and name the cause."""
        name = self.cfg["container"]
        info = self.dr.inspect(name)
        out = {"ok": True, "log_path": None, "removed": False, "running": None, "exit_code": None, "status": "absent",
               "diagnosis": "", "last_errors": [], "deaths": None, "changed": False}
        if count:
            stored = self.dr.deaths(name)
            deaths = count_deaths(stored, info, reset_deaths)
            out["deaths"] = deaths
            if deaths != stored:
                self.dr.set_deaths(name, deaths)
        if info is None:
            out["msg"] = "no container %s" % name
            return out
        path = self.dr.save_logs(name)
        out.update(log_path=path, exit_code=info["exit_code"], status=info["status"], running=info["running"])
        if not info["running"]:
            # a rank found stopped: name its cause from the log just saved, before the container goes
            text = self.dr.read_log(path)
            out.update(diagnosis=explain(text, info), last_errors=error_lines(text))
        if not remove:
            out.update(changed=True, msg="saved the log of %s to %s" % (name, path))
            return out
        self.dr.remove(name)
        out.update(removed=True, changed=True, msg="removed %s (log %s)" % (name, path))
        return out

    # settle: the memory ritual, then the gate that memory came back and no engine is left ---------------
    def settle(self, head_ports=None):
        st = self.cfg.get("settle") or {}
        done = []
        if st.get("sync", True):
            self.run(["sync"])
            done.append("sync")
        if st.get("swap_cycle"):
            action, _used, reason = swap_cycle_plan(meminfo_kib(self.reader("/proc/meminfo")))
            if action == "refuse":
                return {"ok": False, "outcome": "swap_refused", "msg": (
                    "%s: cannot cycle swap before launch: %s. Fix: stop what holds memory on this node (docker ps -a), "
                    "or set node_prep_ritual_swap_cycle: false, then re-run." % (self.host, reason))}
            if action == "cycle":
                for argv in (["swapoff", "-a"], ["swapon", "-a"]):
                    rc, _o, err = self.run(argv)
                    if rc != 0:
                        return {"ok": False, "outcome": "swap_failed", "msg": "%s: %s failed: %s" % (
                            self.host, " ".join(argv), err.strip())}
                done.append("swap cycled")
        for key, path, val in (("drop_caches", "/proc/sys/vm/drop_caches", "3"),
                               ("compact", "/proc/sys/vm/compact_memory", "1")):
            if st.get(key, True):
                try:
                    self.writer(path, val)
                    done.append(key)
                except (IOError, OSError):
                    done.append("%s unavailable" % key)  # a node without /proc/sys write access (the sim fleet)
        floor = st.get("min_available_gib")
        timeout = float(st.get("timeout_s") or 360)
        delay = max(float(st.get("delay_s") or 2), 0.5)
        deadline = self.clock() + timeout
        while True:
            procs = self.processes() if st.get("engine_processes", True) else []
            avail = self.mem_available_gib()
            if not procs and (floor is None or (avail is not None and avail >= float(floor))):
                break
            if self.clock() >= deadline:
                parts = []
                if floor is not None and (avail is None or avail < float(floor)):
                    parts.append("MemAvailable stayed at %s GiB, below node_prep_settle_min_available_gib %g GiB" % (
                        "unknown" if avail is None else "%.2f" % avail, float(floor)))
                if procs:
                    # the memory is held, not short: name every holder; the fix frees them, never a lower utilization
                    return {"ok": False, "outcome": "engine_memory_held", "mem_available_gib": avail,
                            "engine_processes": procs,
                            "msg": "%s: %d engine process(es) of the old group still run after %g s and hold memory: %s%s "
                                   "(docs/node-prep.md settle gate; catalogue engine_memory_held). Fix: stop them "
                                   "(kill %s; kill -9 if they do not exit), or reboot the node when they do not go, "
                                   "then re-run." % (self.host, len(procs), timeout, processes.describe(procs),
                                                     "; " + parts[0] if parts else "",
                                                     " ".join(str(p["pid"]) for p in procs))}
                return {"ok": False, "outcome": "not_settled", "mem_available_gib": avail, "engine_processes": procs,
                        "msg": "%s: %s after %g s (docs/node-prep.md settle gate; catalogue free_memory_refused). Fix: "
                               "stop what still holds memory on this node (an old lane's containers, docker ps -a), "
                               "then re-run; or lower the threshold with the lane's utilization."
                               % (self.host, "; ".join(parts), timeout)}
            self.sleep(delay)
        # every rank of the group is stopped by now (the plan settles every node before any start): a listener on
        # the head's ports is another process
        taken = self.port_errors(head_ports)
        if taken:
            return {"ok": False, "outcome": "port_taken", "mem_available_gib": avail, "msg": " ".join(taken)}
        return {"ok": True, "outcome": "settled", "mem_available_gib": avail, "engine_processes": [],
                "msg": "settled: MemAvailable %s GiB (floor %s); %s" % (avail, floor, ", ".join(done))}

    def port_errors(self, head_ports):
        listeners = []
        for key in HEAD_PORT_KEYS:
            if key in (head_ports or {}):
                _rc, out, _err = self.run(listen_argv(head_ports[key]))
                listeners.append({"key": key, "port": head_ports[key], "stdout": out})
        return port_guard_errors(self.host, listeners)

    # start: run, wait for the ready line, verify what docker created ---------------------------------------
    def start(self, spec, wait_regex="", wait_timeout=600, wait_interval=1.0):
        name = spec["name"]
        if self.dr.inspect(name) is not None:  # a leftover of a run that stopped half way: log first
            self.dr.save_logs(name)
            self.dr.remove(name)
        cid = self.dr.start(spec)
        outcome, info, tail = self.dr.wait(name, wait_regex or "", float(wait_timeout or 0), wait_interval)
        if outcome == "ready":
            errors = self.launch_errors(spec)
            if errors:
                return {"ok": False, "outcome": "launch_differs", "id": cid[:12], "msg": " | ".join(errors),
                        "errors": errors, "tail": [], "diagnosis": "", "changed": True}
            return {"ok": True, "outcome": "ready", "id": cid[:12], "tail": [], "diagnosis": "", "changed": True,
                    "msg": "%s up (%s)" % (name, cid[:12])}
        lines = error_lines(tail, 10) or (tail or "").splitlines()[-5:]
        diagnosis = explain(tail, info if outcome == "exited" else None)
        what = ("the container exited (status %s, exit code %s)" % (info["status"], info["exit_code"]) if info else
                "the container is gone") if outcome == "exited" else (
            "no line matching %r within %s s" % (wait_regex, wait_timeout))
        return {"ok": False, "outcome": outcome, "id": cid[:12], "tail": lines, "diagnosis": diagnosis,
                "changed": True, "msg": "%s: rank %s: %s after docker run; %slast log lines: %s" % (
                    self.host, name, what, ("diagnosis: %s; " % diagnosis) if diagnosis else "",
                    " | ".join(lines[-5:]) or "none")}

    def launch_errors(self, spec):
        """lifecycle.launch_errors on what docker created: running, the rendered restart policy, argv, env, mounts."""
        return launch_errors(self.host, spec["name"], rendered_launch(spec), self.dr.cli.inspect_container_raw(spec["name"]))


def rendered_launch(spec):
    """What `docker run` was told, from the rank spec (render.run_argv, the one argv builder): {restart, command,
    env {name: value}, mounts [{host, container, mode}]}."""
    argv = run_argv(dict(spec, image=_IMAGE_MARK))
    flags = spec["docker_argv"]
    env, mounts = {}, []
    head = argv[:argv.index(_IMAGE_MARK)]
    for i, arg in enumerate(head[:-1]):
        if arg == "-e":
            key, _sep, val = head[i + 1].partition("=")
            env[key] = val
        elif arg == "-v":
            parts = head[i + 1].split(":")
            mounts.append({"host": parts[0], "container": parts[1], "mode": parts[2] if len(parts) > 2 else "rw"})
    return {"restart": flags[flags.index("--restart") + 1] if "--restart" in flags else "no",
            "command": argv[argv.index(_IMAGE_MARK) + 1:], "env": env, "mounts": mounts}
