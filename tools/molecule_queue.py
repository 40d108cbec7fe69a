# SPDX-License-Identifier: MIT
"""Run molecule scenarios one after the other, taking each from a queue file that other runs of this tool share.

  python3 tools/molecule_queue.py [--queue FILE] scenario [scenario ...]

make test runs one of these in each of its two lanes (targets molecule-lane1 and molecule-lane2, on one queue file):
lane 2 starts on the scenarios while lane 1 still runs the fault suite, and lane 1 takes the ones left when its
suite ends, so the two lanes end close together instead of lane 1 waiting idle. Each run takes, under an exclusive
lock on the file, the first scenario (in the order given) no run has taken yet, and writes its name there. A run
whose scenario fails writes FAILED: no run takes a new scenario after that (the failing one's rc is its exit code;
the others end 0 once their running scenario passes). Without --queue the run takes every scenario itself.

Scenarios that run at once need their own nodes and networks (each scenario's subnet is its own: molecule/_shared)
and molecule's `prerun: false` (.config/molecule/config.yml): its prerun installs the collection into
~/.ansible with --force, and two installs at once break each other.
"""
import argparse
import fcntl
import os
import shlex
import subprocess
import sys
import tempfile
import time

FAILED = "FAILED"


def claim(queue, scenarios):
    """The first of scenarios no run has taken from queue, now taken; None when all are taken or one failed."""
    with open(queue, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        taken = f.read().split()
        if FAILED in taken:
            return None
        for name in scenarios:
            if name not in taken:
                f.write(name + "\n")
                f.flush()
                return name
    return None


def mark_failed(queue):
    with open(queue, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(FAILED + "\n")


def load1():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def run(queue, scenarios, command):
    """Take and run scenarios until none is left; returns the first failing rc, or 0."""
    done = []
    while True:
        name = claim(queue, scenarios)
        if name is None:
            break
        print("== molecule %s" % name, flush=True)
        t0 = time.time()
        rc = subprocess.call(command + [name])
        print("== molecule %s: %d s, rc %d (load %s)" % (name, time.time() - t0, rc, load1()), flush=True)
        done.append(name)
        if rc != 0:
            mark_failed(queue)
            return rc
    print("== molecule: this run took %s" % (", ".join(done) or "no scenario (the others had taken them)"),
          flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue", help="the file runs share; without it this run takes every scenario")
    ap.add_argument("--command", default="molecule test -s",
                    help="what runs a scenario, its name appended (default: %(default)s)")
    ap.add_argument("scenarios", nargs="+")
    args = ap.parse_args(argv)
    if args.queue:
        os.makedirs(os.path.dirname(os.path.abspath(args.queue)), exist_ok=True)
        return run(args.queue, args.scenarios, shlex.split(args.command))
    with tempfile.TemporaryDirectory() as d:
        return run(os.path.join(d, "queue"), args.scenarios, shlex.split(args.command))


if __name__ == "__main__":
    sys.exit(main())
