"""plugins/callback/preload.py: the collection's filter and action plugins are loaded in the controller process at
playbook start, so a worker forked afterwards looks a filter up without importing anything."""
import configparser
import glob
import json
import os
import subprocess
import sys

import yaml
from molecule.util import merge_dicts

from tests.unit.conftest import ROOT

# Run in a fresh interpreter: Ansible's collection finder is installed once per process.
PROBE = r"""
import json, os, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible.plugins.loader import filter_loader, callback_loader
PREFIX = "ansible_collections.dgxspark.vllm.plugins."
ours = lambda: sorted(m for m in sys.modules if m.startswith(PREFIX + "filter.") or m.startswith(PREFIX + "action."))
before = ours()
callback = callback_loader.get("dgxspark.vllm.preload")
callback.v2_playbook_on_start(None)
after = ours()
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # what a task's worker does: look a filter up and template with it
    n = len(sys.modules)
    plan = filter_loader.get("dgxspark.vllm.memory_plan")
    os.write(write, json.dumps({"new_modules": len(sys.modules) - n, "found": plan is not None}).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(read, 4096))
print(json.dumps({"before": before, "after": after, "child": child}))
"""


def test_playbook_start_loads_every_filter_file_and_the_action_plugin_so_a_forked_worker_imports_nothing():
    proc = subprocess.run([sys.executable, "-c", PROBE, os.path.join(ROOT, "collections")], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    files = sorted(os.path.splitext(os.path.basename(p))[0]
                   for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py")) if not p.endswith("__init__.py"))
    prefix = "ansible_collections.dgxspark.vllm.plugins."
    assert got["before"] == []
    assert got["after"] == sorted([prefix + "action.kinds_check"] + [prefix + "filter." + f for f in files])
    assert got["child"] == {"new_modules": 0, "found": True}


def test_the_checkout_and_every_molecule_scenario_enable_it():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "ansible.cfg"))
    assert "dgxspark.vllm.preload" in [c.strip() for c in cfg.get("defaults", "callbacks_enabled").split(",")]
    # molecule merges each scenario over the project's base config, the way it does it (molecule.util.merge_dicts)
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml")) as f:
        base = yaml.safe_load(f)
    scenarios = sorted(glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")))
    assert scenarios
    for path in scenarios:
        with open(path) as f:
            merged = merge_dicts(base, yaml.safe_load(f))
        assert merged["provisioner"]["env"].get("ANSIBLE_CALLBACKS_ENABLED") == "dgxspark.vllm.preload", path
