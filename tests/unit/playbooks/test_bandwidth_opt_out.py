"""rdma_fabric's bandwidth probe is on for the spark lanes; switching it off there needs a reason (issue 30).
Checked on the controller with the TP2 sample (RFC 5737 addresses: no node is contacted)."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
REFUSAL = ("rdma_fabric_bandwidth_probe is false on the spark lane tp2_dflash2_ct without "
           "rdma_fabric_bandwidth_skip_reason")


def _validate(inventory, extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/validate.yml",
                           "-e", json.dumps(extra)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_off_without_a_reason_is_refused_and_with_one_it_passes_the_checks(tmp_path):
    inv = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "inventories", "sample_tp2"), str(inv))
    rc, out = _validate(str(inv / "hosts.yml"), {"rdma_fabric_bandwidth_probe": False})
    assert rc != 0 and REFUSAL in out, out[-3000:]
    assert "UNREACHABLE" not in out
    rc, out = _validate(str(inv / "hosts.yml"), {"rdma_fabric_bandwidth_probe": False,
                                                 "rdma_fabric_bandwidth_skip_reason": "perftest not installed yet"})
    # past every controller check: only the sample's unsupplied fix file stops validate
    assert REFUSAL not in out and "fix file sparse_attn_indexer_kpool is missing" in out, out[-3000:]
