"""playbooks/validate.yml shows the lane-only memory and bring-up plan, and refuses a lane whose KV cannot
exist, without contacting any node (the sample inventories point at RFC 5737 addresses)."""
import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)


def _validate(inventory):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/validate.yml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_sample_tp3_prints_the_plan_per_node():
    # the sample's fix files are not supplied (tests/unit/playbooks/test_artifacts.py supplies them): validate
    # prints the whole plan first and refuses only at the fix files, last
    rc, out = _validate("inventories/sample_tp3/hosts.yml")
    assert rc != 0 and "fix file sparse_attn_indexer_kpool is missing" in out, out
    assert out.index("Validate | memory plan and bring-up plan") < out.index("Artifacts | The lane's fix files")
    assert "node-a (rank 0, head: serves the API on port 8045, rendezvous on 29531)" in out
    assert "node-c (rank 2, worker (--headless), joins the head's port 29531)" in out
    assert "checkpoint LibertAIDAI/GLM-5.3-Flash-NVFP4: 182 GiB, copy from the head" in out
    assert "memory: weights 60.67 + drafter 0.0 GiB, KV 10.73 GiB, pool 1,540,230 tokens, 2.94 x 524288 tokens" in out
    assert "vllm_ranks: workers first, then the head; weights load, ~479 s" in out
    assert "UNREACHABLE" not in out and "unreachable=0" in out


def test_a_profiler_lane_without_room_for_kv_is_refused(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(os.path.join(ROOT, "inventories", "sample_tp2"), str(inv))
    gv = inv / "group_vars" / "spark_cluster"
    path = gv / "main.yml" if (gv / "main.yml").exists() else gv
    data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    data["vllm_lane"] = "tp2_mtp"
    data["vllm_lane_overrides"] = {"serve": {"gpu_memory_utilization": 0.80,
                                             "kv_policy": {"mode": "profiler", "bytes": None}}}
    path.write_text(yaml.safe_dump(data))
    rc, out = _validate(str(inv / "hosts.yml"))
    assert rc != 0, out
    assert ("rank 0: no memory left for the KV cache: 0.8 x MemTotal 121.69 GiB = 97.35 GiB minus weights 92.50, "
            "drafter 0.00, non-torch 4.64, activation 3.78, CUDA graphs 0.00 GiB is -3.57 GiB") in out, out
    assert "UNREACHABLE" not in out
