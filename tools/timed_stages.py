# SPDX-License-Identifier: MIT
"""Run make targets in steps, some of them side by side, and print each one's seconds at the end (make test).

  python3 tools/timed_stages.py [--json FILE] -- sim-images 'e2e-tp3,lint,units|e2e,test-faults'

Each argument is a step; steps run one after the other. A step is one or more lanes joined by '|', run at the
same time; a lane is one or more make targets joined by ',', run one after the other. A lone target is a step
of one lane, as before lanes existed. A lane of a step that runs beside another writes its targets' output to
reports/stages/<target>.log and the whole log is printed when the target ends, so the output of two lanes is
never interleaved.

The first lane of a step sets its pace (in make test, the end-to-end lane: its boots and watchdog windows
set its length, though it keeps about 60 % of the machine busy); every later lane runs its targets under `nice -n 10`, so that what it runs on this machine
(pytest, ansible, molecule) takes the CPU the first lane leaves idle instead of slowing it. Processes the docker
daemon starts (the simulated nodes, the engine) are not the lane's children and nice does not reach them: where
the machine has a cgroup-v1 CPU controller and docker's cgroupfs driver (as on the build machines), each later lane
also runs in its own CPU cgroup /dgxspark-lane<N> with a low cpu.shares, and DGXSPARK_CGROUP_PARENT names it to
what the lane starts (sim_fleet puts its nodes there, and each node's dockerd its ranks; the TP3 padding test its
containers), so a lane's containers yield to the first lane as its own processes do. Elsewhere nice alone applies.

A failing target ends its lane; the other lanes of the step finish the target they are running and start no
new one, and no later step runs. The exit code is the first failing target's. The table is printed in every
case (targets not run are listed as such). The machine's 1-minute load average is recorded before and after
each target: figures from a shared machine need it beside them. The share of CPU time the machine was busy
while a target ran (/proc/stat) says whether a step can only get faster by doing less work (near 100 %) or is
waiting on something (far below); for a target that ran beside another it counts both.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

LOG_DIR = os.path.join("reports", "stages")
# CPU priority of every lane after a step's first (nice(1)): at 10 such a process gets about a tenth of a core
# the first lane also wants, and all of a core it leaves idle.
LATER_LANE_NICE = 10
# The same for the CPU cgroup of a later lane (and so its containers): 128 against docker's and the first lane's
# 1024 per entity is about nice 10's weight.
LATER_LANE_CPU_SHARES = 128
CPU_CGROUP_ROOT = "/sys/fs/cgroup/cpu"
# Beside it on cgroup v1: the lane's processes and containers join a group of the same name there too, and the
# table gives each later-lane target the CPU seconds its lane used (the first lane's is the machine's less that).
CPUACCT = "cpuacct"


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_jiffies():
    """(busy, total) jiffies of all CPUs since boot (/proc/stat); idle and iowait count as not busy."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def busy_pct(before, after):
    """Share of the machine's CPU time kept busy: 100 means every core worked all along, far below means the
    work waited (sleeps, timeouts, the network)."""
    total = after[1] - before[1]
    return round(100.0 * (after[0] - before[0]) / total, 1) if total > 0 else None


def docker_cgroup_driver():
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.CgroupDriver}}"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def lane_cgroup(lane, root=CPU_CGROUP_ROOT, driver=docker_cgroup_driver):
    """Make the CPU cgroup of a later lane (cgroup v1, root/dgxspark-lane<N> with LATER_LANE_CPU_SHARES) and return
    its path as docker's --cgroup-parent takes it, or None where it cannot apply (no v1 CPU controller, not
    writable, or docker not on the cgroupfs driver, which takes only a path): then nice alone applies."""
    if not os.path.isfile(os.path.join(root, "cpu.shares")) or driver() != "cgroupfs":
        return None
    parent = "/dgxspark-lane%d" % lane
    cpu_dir, acct_dir = cgroup_dirs(root, parent)
    try:
        os.makedirs(cpu_dir, exist_ok=True)
        with open(os.path.join(cpu_dir, "cpu.shares"), "w") as f:
            f.write("%d\n" % LATER_LANE_CPU_SHARES)
    except OSError:
        return None
    try:
        os.makedirs(acct_dir, exist_ok=True)
    except OSError:
        pass  # accounting only
    return parent


def cgroup_dirs(root, parent):
    """The CPU group of a --cgroup-parent path under root, and its cpuacct twin beside root."""
    return os.path.join(root, parent.lstrip("/")), os.path.join(os.path.dirname(root), CPUACCT, parent.lstrip("/"))


def _join_cgroup(dirs):
    def join():
        for d in dirs:
            if os.path.isdir(d):
                with open(os.path.join(d, "cgroup.procs"), "w") as f:
                    f.write("%d\n" % os.getpid())
    return join


def cgroup_cpu_s(acct_dir):
    """CPU seconds used so far by a cgroup-v1 cpuacct group and all below it, or None without one."""
    try:
        with open(os.path.join(acct_dir, "cpuacct.usage")) as f:
            return int(f.read().strip()) / 1e9
    except (OSError, ValueError):
        return None


def parse_steps(args):
    """['a', 'b,c|d'] -> [[['a']], [['b', 'c'], ['d']]]: steps of lanes of targets."""
    steps = []
    for arg in args:
        lanes = [[t for t in lane.split(",") if t] for lane in arg.split("|")]
        lanes = [lane for lane in lanes if lane]
        if lanes:
            steps.append(lanes)
    return steps


class Runner(object):
    def __init__(self, make, started, cgroup_root=CPU_CGROUP_ROOT, driver=docker_cgroup_driver):
        self.make = shlex.split(make)
        self.started = started
        self.failed = None  # first failing target's rc
        self.lock = threading.Lock()
        self.cgroup_root = cgroup_root
        self.driver = driver
        self.cgroups = {}

    def cgroup(self, lane):
        """The lane's CPU cgroup, made on the first of its targets that finds dockerd on the cgroupfs driver. A lane
        may start before dockerd does (a lane beside sim-images, which starts it): its first targets then run
        under nice alone, and the next target asks again."""
        with self.lock:
            if self.cgroups.get(lane) is None:
                self.cgroups[lane] = lane_cgroup(lane, self.cgroup_root, self.driver)
            return self.cgroups[lane]

    def say(self, text):
        with self.lock:
            print(text, flush=True)

    def target(self, stage, lane, side_by_side):
        before = load1()
        jiffies = cpu_jiffies()
        t0 = time.time()
        argv = self.make + ["--no-print-directory", stage]
        env, join, acct = None, None, None
        if lane > 1:
            argv = ["nice", "-n", str(LATER_LANE_NICE)] + argv
            cgroup = self.cgroup(lane)
            if cgroup:
                env = dict(os.environ, DGXSPARK_CGROUP_PARENT=cgroup)
                dirs = cgroup_dirs(self.cgroup_root, cgroup)
                acct, join = dirs[1], _join_cgroup(dirs)
        acct_before = cgroup_cpu_s(acct) if acct else None
        self.say("== stage %s (lane %d%s%s, load %.2f, at %.0f s)" % (
            stage, lane, ", nice %d" % LATER_LANE_NICE if lane > 1 else "",
            ", cpu cgroup %s" % env["DGXSPARK_CGROUP_PARENT"] if env else "", before, t0 - self.started))
        log = None
        if side_by_side:
            os.makedirs(LOG_DIR, exist_ok=True)
            log = os.path.join(LOG_DIR, "%s.log" % stage)
            with open(log, "w") as out:
                rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=join)
            with open(log, errors="replace") as f:
                text = f.read()
            self.say("== stage %s output (lane %d, %s)\n%s== stage %s: rc %d, %.0f s" % (
                stage, lane, log, text, stage, rc, time.time() - t0))
            why = failure_lines(text) if rc else []
        else:
            rc = subprocess.call(argv, env=env, preexec_fn=join)
            why = []
        jiffies_after = cpu_jiffies()
        return {"stage": stage, "lane": lane, "rc": rc, "seconds": round(time.time() - t0, 1),
                "started_s": round(t0 - self.started, 1), "nice": LATER_LANE_NICE if lane > 1 else 0,
                "cgroup": env["DGXSPARK_CGROUP_PARENT"] if env else None,
                "lane_cpu_s": _delta(acct_before, cgroup_cpu_s(acct) if acct else None),
                "machine_cpu_s": round((jiffies_after[0] - jiffies[0]) / os.sysconf("SC_CLK_TCK"), 1),
                "load_before": before, "load_after": load1(),
                "cpu_busy_pct": busy_pct(jiffies, jiffies_after), "side_by_side": side_by_side, "log": log, "why": why}

    def lane(self, targets, lane, side_by_side, rows):
        for stage in targets:
            with self.lock:
                stop = self.failed is not None
            if stop:
                rows.append(not_run(stage, lane))
                continue
            row = self.target(stage, lane, side_by_side)
            rows.append(row)
            if row["rc"] != 0:
                with self.lock:
                    if self.failed is None:
                        self.failed = row["rc"]


# What says why a stage failed, in the logs of ansible, molecule and pytest (CI shows only the end of its output,
# and a stage's whole log is printed before the table, so these lines are repeated after it).
FAILURE_LINE = re.compile(r"fatal: \[|FAILED!|\[ERROR\]|^ERROR |^E  |Traceback|Error:|^FAILED |failed=[1-9]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_lines(text, limit=40):
    """The last `limit` distinct lines of a log that say why it failed, ANSI colours removed."""
    seen, picked = set(), []
    for line in ANSI.sub("", text).splitlines():
        line = line.rstrip()
        if FAILURE_LINE.search(line) and line not in seen:
            seen.add(line)
            picked.append(line)
    return picked[-limit:]


def _delta(before, after):
    return round(after - before, 1) if before is not None and after is not None else None


def not_run(stage, lane):
    return {"stage": stage, "lane": lane, "rc": None, "seconds": None, "started_s": None, "nice": None,
            "cgroup": None, "lane_cpu_s": None, "machine_cpu_s": None, "load_before": None,
            "load_after": None, "cpu_busy_pct": None, "side_by_side": None, "log": None, "why": []}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the table as JSON to this file")
    ap.add_argument("--make", default=os.environ.get("MAKE", "make"))
    ap.add_argument("--cgroup-root", default=CPU_CGROUP_ROOT,
                    help="the cgroup-v1 CPU hierarchy later lanes get their cgroup in (default %(default)s)")
    ap.add_argument("--docker-cgroup-driver", default=None,
                    help="docker's cgroup driver (default: asked of `docker info` when a later lane starts)")
    ap.add_argument("steps", nargs="+", help="make targets; 'a,b|c' runs lane a then b beside lane c")
    args = ap.parse_args()

    started = time.time()
    driver = (lambda: args.docker_cgroup_driver) if args.docker_cgroup_driver else docker_cgroup_driver
    runner = Runner(args.make, started, args.cgroup_root, driver)
    rows = []
    for lanes in parse_steps(args.steps):
        lane_rows = [[] for _lane in lanes]
        if runner.failed is not None:
            for i, targets in enumerate(lanes):
                lane_rows[i] = [not_run(t, i + 1) for t in targets]
        elif len(lanes) == 1:
            runner.lane(lanes[0], 1, False, lane_rows[0])
        else:
            threads = [threading.Thread(target=runner.lane, args=(targets, i + 1, True, lane_rows[i]))
                       for i, targets in enumerate(lanes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for r in lane_rows:
            rows.extend(r)
    rc = runner.failed or 0
    total = round(time.time() - started, 1)

    # cpu s: the machine's busy CPU seconds while the target ran (both lanes when side by side); lane cpu s: its
    # own lane's cgroup, where it has one
    print("\n%-12s %4s %8s %8s %4s %6s %7s %9s %s" % (
        "stage", "lane", "start s", "seconds", "rc", "cpu %", "cpu s", "lane cpu", "load (1 min) before -> after"))
    for r in rows:
        if r["rc"] is None:
            print("%-12s %4d %8s %8s %4s %6s %7s %9s %s" % (r["stage"], r["lane"], "-", "-", "-", "-", "-", "-",
                                                            "not run (a target failed)"))
        else:
            print("%-12s %4d %8.0f %8.1f %4d %6s %7.0f %9s %.2f -> %.2f%s" % (
                r["stage"], r["lane"], r["started_s"], r["seconds"], r["rc"],
                "%.1f" % r["cpu_busy_pct"] if r["cpu_busy_pct"] is not None else "?", r["machine_cpu_s"],
                "%.0f" % r["lane_cpu_s"] if r["lane_cpu_s"] is not None else "-",
                r["load_before"], r["load_after"], " (beside another lane)" if r["side_by_side"] else ""))
    print("%-12s %4s %8s %8.1f %4d (%.1f min, %d cores)" % (
        "total", "", "", total, rc, total / 60, os.cpu_count() or 0))
    for r in rows:
        if r["rc"] and r["log"]:
            print("\n== why stage %s failed (its log's error lines, %s):" % (r["stage"], r["log"]))
            print("\n".join(r["why"]) if r["why"] else "(no error line found: read the whole log above)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "nproc": os.cpu_count(), "total_s": total, "rc": rc, "steps": args.steps, "stages": rows},
                      f, indent=2)
            f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
