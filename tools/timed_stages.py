# SPDX-License-Identifier: MIT
"""Run make targets one after the other and print each one's seconds at the end (make test).

  python3 tools/timed_stages.py [--json FILE] -- lint sanity units molecule e2e-tp3 e2e test-faults

Stops at the first stage that fails, like make, and exits with that stage's return code; the table
is printed in every case (the stages not run are listed as such). The machine's 1-minute load
average is recorded before and after each stage: figures from a shared machine need it beside them. The
share of CPU time each stage kept busy (/proc/stat) says whether it can only get faster by doing less work
(near 100 %) or is waiting on something (far below).
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time


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
    """Share of the machine's CPU time a stage kept busy: 100 means every core worked all along (a stage that
    cannot go faster by running beside another), far below means it waited (sleeps, timeouts, the network)."""
    total = after[1] - before[1]
    return round(100.0 * (after[0] - before[0]) / total, 1) if total > 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the table as JSON to this file")
    ap.add_argument("--make", default=os.environ.get("MAKE", "make"))
    ap.add_argument("stages", nargs="+")
    args = ap.parse_args()

    rows = []
    rc = 0
    started = time.time()
    for stage in args.stages:
        if rc != 0:
            rows.append({"stage": stage, "rc": None, "seconds": None, "load_before": None, "load_after": None,
                         "cpu_busy_pct": None})
            continue
        before = load1()
        jiffies = cpu_jiffies()
        t0 = time.time()
        print("== stage %s (load %.2f)" % (stage, before), flush=True)
        rc = subprocess.call(shlex.split(args.make) + ["--no-print-directory", stage])
        rows.append({"stage": stage, "rc": rc, "seconds": round(time.time() - t0, 1), "load_before": before,
                     "load_after": load1(), "cpu_busy_pct": busy_pct(jiffies, cpu_jiffies())})
    total = round(time.time() - started, 1)

    print("\n%-12s %8s %4s %6s %s" % ("stage", "seconds", "rc", "cpu %", "load (1 min) before -> after"))
    for r in rows:
        if r["rc"] is None:
            print("%-12s %8s %4s %6s %s" % (r["stage"], "-", "-", "-", "not run (an earlier stage failed)"))
        else:
            print("%-12s %8.1f %4d %6s %.2f -> %.2f" % (
                r["stage"], r["seconds"], r["rc"], "%.1f" % r["cpu_busy_pct"] if r["cpu_busy_pct"] is not None else "?",
                r["load_before"], r["load_after"]))
    print("%-12s %8.1f %4d (%.1f min, %d cores)" % ("total", total, rc, total / 60, os.cpu_count() or 0))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "nproc": os.cpu_count(), "total_s": total, "rc": rc, "stages": rows}, f, indent=2)
            f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
