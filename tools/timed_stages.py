# SPDX-License-Identifier: MIT
"""Run make targets one after the other and print each one's seconds at the end (make test).

  python3 tools/timed_stages.py [--json FILE] -- lint sanity units molecule e2e-tp3 e2e test-faults

Stops at the first stage that fails, like make, and exits with that stage's return code; the table
is printed in every case (the stages not run are listed as such). The machine's 1-minute load
average is recorded before and after each stage: figures from a shared machine need it beside them.
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
            rows.append({"stage": stage, "rc": None, "seconds": None, "load_before": None, "load_after": None})
            continue
        before = load1()
        t0 = time.time()
        print("== stage %s (load %.2f)" % (stage, before), flush=True)
        rc = subprocess.call(shlex.split(args.make) + ["--no-print-directory", stage])
        rows.append({"stage": stage, "rc": rc, "seconds": round(time.time() - t0, 1), "load_before": before,
                     "load_after": load1()})
    total = round(time.time() - started, 1)

    print("\n%-12s %8s %4s %s" % ("stage", "seconds", "rc", "load (1 min) before -> after"))
    for r in rows:
        if r["rc"] is None:
            print("%-12s %8s %4s %s" % (r["stage"], "-", "-", "not run (an earlier stage failed)"))
        else:
            print("%-12s %8.1f %4d %.2f -> %.2f" % (
                r["stage"], r["seconds"], r["rc"], r["load_before"], r["load_after"]))
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
