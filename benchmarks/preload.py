"""How much the preload callback (plugins/callback/preload.py) saves: playbooks/validate.yml on many hosts (one
host per bad lane-override case of tests/bad_inputs, each refused by its own message, no node contacted), run
alternately with the callback enabled and disabled (ANSIBLE_CALLBACKS_ENABLED).

    source .venv/bin/activate && python benchmarks/preload.py [--rounds 2]

Writes benchmarks/results/preload-<UTC stamp>.json: per run the wall seconds, the CPU seconds of ansible-playbook
and its children (user + system), the hosts, and the 1-minute load before and after. Never asserts.
"""
import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

from tests.bad_inputs import test_lane_overrides as cases  # noqa: E402  pylint: disable=wrong-import-position
from tests.bad_inputs.conftest import write_case_inventory  # noqa: E402  pylint: disable=wrong-import-position


def _load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(inventory, enabled):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_SSH_EXECUTABLE="/bin/false")
    # Ansible refuses an empty list; ansible.posix.timer (one line at the end) stands in on both sides
    env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.timer" + (",dgxspark.vllm.preload" if enabled else "")
    load0, t0 = _load(), time.time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                           "playbooks/validate.yml"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"preload": enabled, "wall_s": round(time.time() - t0, 1),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
            "rc": proc.returncode, "refused_hosts": proc.stdout.count("the lane is invalid"),
            "load_before": load0, "load_after": _load()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="preload-bench-"))
    inv = write_case_inventory(tmp, dict((c[0], {"vllm_lane": c[2][0], "vllm_lane_overrides": c[3]})
                                         for c in cases.ALL_CASES), {"vllm_lane": "sim_cpu_tp2"})
    runs = []
    for _round in range(args.rounds):
        for enabled in (False, True):
            runs.append(run(inv, enabled))
            print(json.dumps(runs[-1]))
    out = {"hosts": len(cases.ALL_CASES), "cores": os.cpu_count(), "runs": runs}
    path = os.path.join(REPO, "benchmarks", "results", "preload-%s.json" % time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(path)


if __name__ == "__main__":
    main()
