# SPDX-License-Identifier: MIT
"""Time site.yml on a simulated fleet: the first run, the no-op re-run and --check --diff, per role.

Writes benchmarks/results/converged-<label>-<UTC timestamp>.json and prints a table. Measures only;
asserts nothing. Run it under the fleet's lock (the machine and the fleets are shared):

  flock /tmp/fleet-sim.lock python benchmarks/converged_run.py --inventory inventories/sim/hosts.yml --label tp2
  flock /tmp/fleet-tp3.lock python benchmarks/converged_run.py --inventory inventories/sim_tp3/hosts.yml \
      --label tp3 --fresh --down-after

  --fresh        remove the inventory's fleet first (sim_down purge), so "first" is a first deployment
  --no-first     skip sim_up and the first site.yml (the fleet already serves)
  --down-after   remove the fleet at the end (sim_down purge)
  --fleet LABEL:INVENTORY:LOCK  measure this fleet under its lock file (repeatable; TP2 then TP3 in one
                 invocation, with --fresh --down-after so one fleet is up at a time)
  --stages FILE  add make test's stage table (tools/timed-stages.py --json FILE) to the result

Per step: wall seconds, rc, the recap sums, /proc/loadavg before and after, and per role the tasks
started (playbook_on_task_start events, a skipped task counts), the host results (ok, changed,
skipped, failed), the node calls (results of tasks that reached a node: not a controller-only action such
as set_fact, assert, debug, meta or an include, not delegated to localhost; the round trips, which the
load does not change) and the seconds from each task's start to the next task's start. Events come from
ansible-runner, as in tests/e2e. The 1-minute load is sampled every 2 s during each run: every role row
carries the load at its first task and the maximum while its own tasks ran (load1_start, load1_max).

  python benchmarks/converged_run.py --fresh --down-after --fleet tp2:inventories/sim/hosts.yml:/tmp/fleet-sim.lock \\
      --fleet tp3:inventories/sim_tp3/hosts.yml:/tmp/fleet-tp3.lock
"""
import argparse
import collections
import datetime
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import ansible_runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class LoadSampler(object):
    """Samples /proc/loadavg every `period` seconds in a thread, so each role's figures get the load of its window."""

    def __init__(self, period=2.0):
        self.period, self.samples, self._stop = period, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), loadavg()))
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def windows(self, spans):
        """The 1-minute load at the first span's start and its maximum over the spans [(t0, t1)] (the sample
        just before each t0 counts)."""
        inside = [float(v.split()[0]) for t0, t1 in spans for t, v in self.samples if t0 - self.period <= t <= t1]
        if not inside:
            return None
        return {"load1_start": inside[0], "load1_max": max(inside)}


def _epoch(stamp):
    t = datetime.datetime.fromisoformat(stamp)
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.timestamp()


# Actions that run on the controller only (no connection to a node); every other result is a node call.
CONTROLLER_ACTIONS = {"assert", "set_fact", "debug", "fail", "include_vars", "meta", "include_tasks", "import_tasks",
                      "include_role", "import_role", "validate_argument_spec", "set_stats", "add_host", "group_by"}


def node_call(data):
    """True for a result of a task that reached a node (not a controller-only action, not delegated to localhost)."""
    action = (data.get("resolved_action") or data.get("task_action") or "").split(".")[-1]
    if action in CONTROLLER_ACTIONS:
        return False
    delegated = ((data.get("res") or {}).get("_ansible_delegated_vars") or {}).get("ansible_host")
    return delegated not in ("localhost", "127.0.0.1")


def new_row():
    return {"tasks": 0, "ok": 0, "changed": 0, "skipped": 0, "failed": 0, "node_calls": 0, "seconds": 0.0}


def per_role(events, t_end, sampler=None):
    """{role: {tasks, ok, changed, skipped, failed, node_calls, seconds[, load1_start, load1_max]}}; tasks outside
    a role: 'play: <name>'. With a sampler, the 1-minute load at the role's first task and its maximum while the
    role's own tasks ran."""
    out = collections.OrderedDict()
    starts = []
    for ev in events:
        data = ev.get("event_data") or {}
        kind = ev.get("event")
        key = data.get("role") or ("play: " + (data.get("play") or "?"))
        if kind == "playbook_on_task_start":
            row = out.setdefault(key, new_row())
            row["tasks"] += 1
            starts.append((_epoch(ev["created"]), key))
        elif kind in ("runner_on_ok", "runner_on_skipped", "runner_on_failed", "runner_on_unreachable"):
            row = out.setdefault(key, new_row())
            if kind != "runner_on_skipped" and node_call(data):
                row["node_calls"] += 1
            if kind == "runner_on_ok":
                row["ok"] += 1
                if (data.get("res") or {}).get("changed"):
                    row["changed"] += 1
            elif kind == "runner_on_skipped":
                row["skipped"] += 1
            else:
                row["failed"] += 1
    spans = collections.defaultdict(list)
    for (t0, key), nxt in zip(starts, starts[1:] + [(t_end, None)]):
        out[key]["seconds"] += max(0.0, nxt[0] - t0)
        spans[key].append((t0, nxt[0]))
    for key, row in out.items():
        row["seconds"] = round(row["seconds"], 1)
        if sampler is not None and key in spans:
            row.update(sampler.windows(spans[key]) or {})
    return out


def run(playbook, inventory, cmdline=None, extravars=None):
    tmp = tempfile.mkdtemp(prefix="bench-conv-")
    load0 = loadavg()
    t0 = time.time()
    with LoadSampler() as sampler:
        runner = ansible_runner.run(
            private_data_dir=tmp, project_dir=REPO, playbook=os.path.join(REPO, playbook),
            inventory=os.path.join(REPO, inventory), cmdline=cmdline, extravars=extravars or {},
            envvars={"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}, quiet=True)
    t1 = time.time()
    events = list(runner.events)
    stats = runner.stats or {}
    roles = per_role(events, t1, sampler)
    result = {
        "playbook": playbook, "cmdline": cmdline or "", "rc": runner.rc, "wall_s": round(t1 - t0, 1),
        "loadavg_before": load0, "loadavg_after": loadavg(),
        "recap": {k: sum((stats.get(k) or {}).values()) for k in ("ok", "changed", "skipped", "failures", "dark")},
        "tasks_started": sum(r["tasks"] for r in roles.values()),
        "host_results": sum(r["ok"] + r["skipped"] + r["failed"] for r in roles.values()),
        "node_calls": sum(r["node_calls"] for r in roles.values()),
        "roles": roles, "artifacts": tmp,
    }
    return result


def recount(path):
    """Recompute the per-role counts of a results file from the ansible-runner artifacts it names."""
    import glob
    with open(path) as f:
        results = json.load(f)
    for step in results["steps"].values():
        files = glob.glob(os.path.join(step["artifacts"], "artifacts", "*", "job_events", "*.json"))
        events = []
        for name in files:
            with open(name) as f:
                events.append(json.load(f))
        events.sort(key=lambda ev: ev.get("counter", 0))
        if not events:
            continue
        t_end = _epoch(events[-1]["created"])
        step["roles"] = per_role(events, t_end)
        step["tasks_started"] = sum(r["tasks"] for r in step["roles"].values())
        step["host_results"] = sum(r["ok"] + r["skipped"] + r["failed"] for r in step["roles"].values())
        step["node_calls"] = sum(r["node_calls"] for r in step["roles"].values())
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    return results


def table(results):
    lines = []
    for name, r in results["steps"].items():
        lines.append("%-14s rc=%s %6.1f s  changed=%s  tasks=%s  host results=%s  node calls=%s  load %s -> %s" % (
            name, r["rc"], r["wall_s"], r["recap"]["changed"], r["tasks_started"], r["host_results"],
            r.get("node_calls"), r["loadavg_before"], r["loadavg_after"]))
        for role, row in r["roles"].items():
            lines.append("    %-40s tasks %3d  ok %3d  changed %2d  skipped %3d  node calls %3d  %6.1f s  load1 %s/%s"
                         % (role[:40], row["tasks"], row["ok"], row["changed"], row["skipped"],
                            row.get("node_calls", 0), row["seconds"], row.get("load1_start", "-"),
                            row.get("load1_max", "-")))
    return "\n".join(lines)


def measure(inventory, label, args, lock=None):
    """One fleet: the steps args asks for, under the fleet's lock file when one is given. Returns the results."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results = {"label": label, "inventory": inventory, "started": stamp, "nproc": os.cpu_count(),
               "note": args.note, "steps": collections.OrderedDict()}
    try:
        results["commit"] = subprocess.check_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                                    text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        results["commit"] = None
    os.makedirs(os.path.join(REPO, "benchmarks", "results"), exist_ok=True)
    out = os.path.join(REPO, "benchmarks", "results", "converged-%s-%s.json" % (label, stamp))

    def save():
        # after every step: a long run cut short still leaves the steps it finished
        with open(out, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")

    lock_fd = None
    if lock:
        lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        plan = []
        if args.fresh:
            plan.append(("sim_down", "playbooks/sim_down.yml", None, {"sim_fleet_purge": True}))
        if not args.no_first:
            plan += [("sim_up", "playbooks/sim_up.yml", None, None), ("site_first", "site.yml", None, None)]
        plan += [("site_noop", "site.yml", None, None), ("site_check_diff", "site.yml", "--check --diff", None)]
        if args.down_after:
            plan.append(("sim_down_after", "playbooks/sim_down.yml", None, {"sim_fleet_purge": True}))
        for name, playbook, cmdline, extravars in plan:
            results["steps"][name] = run(playbook, inventory, cmdline=cmdline, extravars=extravars)
            save()
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    if args.stages:
        with open(args.stages) as f:
            results["make_test_stages"] = json.load(f)
    save()
    print(table(results))
    print("written:", out)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inventory", default="inventories/sim/hosts.yml")
    ap.add_argument("--label", default="tp2")
    ap.add_argument("--fleet", action="append", metavar="LABEL:INVENTORY:LOCK",
                    help="measure this fleet under its lock file; repeat for several (one after the other)")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--no-first", action="store_true")
    ap.add_argument("--down-after", action="store_true")
    ap.add_argument("--stages", help="JSON written by tools/timed-stages.py --json")
    ap.add_argument("--note", default="")
    ap.add_argument("--recount", metavar="RESULTS_JSON", help="recompute the counts of a results file and print it")
    args = ap.parse_args()
    if args.recount:
        print(table(recount(args.recount)))
        return 0
    if args.fleet:
        fleets = [f.split(":", 2) for f in args.fleet]
        if any(len(f) != 3 for f in fleets):
            ap.error("--fleet takes LABEL:INVENTORY:LOCK, e.g. tp2:inventories/sim/hosts.yml:/tmp/fleet-sim.lock")
        if len(fleets) > 1 and not args.down_after:
            ap.error("several --fleet need --down-after: one fleet up at a time (the machine's memory)")
    else:
        fleets = [(args.label, args.inventory, None)]
    rc = 0
    for label, inventory, lock in fleets:
        results = measure(inventory, label, args, lock)
        rc = rc or (0 if all(s["rc"] == 0 for s in results["steps"].values()) else 1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
