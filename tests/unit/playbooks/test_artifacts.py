"""validate.yml on the sample inventories as a user runs it (issue 31): the sample copied to a directory of their own,
its lane's fix files missing, then supplied but unpinned, then pinned. No node is contacted (RFC 5737 addresses).

The files are stand-ins holding each fix file's marker: the real ones come from other projects and are not here.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
SAMPLES = {"sample_tp2": 2, "sample_tp3": 3, "sample_tp4": 4}


def validate(inventory, cwd):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory,
                           os.path.join(ROOT, "playbooks", "validate.yml")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def copy_sample(tmp_path, sample):
    inv = tmp_path / sample
    shutil.copytree(os.path.join(ROOT, "inventories", sample), str(inv))
    with open(inv / "group_vars" / "spark_cluster" / "main.yml") as f:
        lane_name = yaml.safe_load(f)["vllm_lane"]
    with open(os.path.join(ROOT, "lanes", lane_name + ".yml")) as f:
        lane = yaml.safe_load(f)
    files = [i for i in lane["fix_files"] if not i["src"].startswith(("image:", "/")) and "://" not in i["src"]]
    return inv, lane_name, files


def supply(inv, files):
    """Stand-ins where the user puts them (files/ beside hosts.yml); returns {name: sha256}."""
    pins = {}
    for item in files:
        path = inv / "files" / item["src"]
        path.parent.mkdir(parents=True, exist_ok=True)
        data = ("# stand-in for %s\n# %s\n" % (item["name"], item.get("marker") or "")).encode()
        path.write_bytes(data)
        pins[item["name"]] = hashlib.sha256(data).hexdigest()
    return pins


def assert_plan_printed(flat, tp):
    assert "(tensor-parallel size %d, platform spark)" % tp in flat
    assert "node-a is rank 0 (head, serves the API)" in flat
    # every placeholder address is called out
    assert flat.count("is a documentation address (RFC 5737)") == tp
    assert "WARNING node-a: ansible_host 192.0.2.10 is a documentation address" in flat
    assert "unreachable=0" in flat


def test_tp2_sample_missing_then_unpinned_then_pinned(tmp_path):
    inv, lane_name, files = copy_sample(tmp_path, "sample_tp2")
    assert [f["name"] for f in files] == ["sparse_attn_indexer_kpool"]
    hosts = str(inv / "hosts.yml")

    rc, flat = validate(hosts, str(tmp_path))
    assert rc != 0
    assert_plan_printed(flat, 2)  # the plan comes first; the fix files are checked last
    assert ("lane %s: fix file sparse_attn_indexer_kpool is missing: no file %s/files/sparse_attn_indexer_kpool.py"
            % (lane_name, inv)) in flat, flat[-3000:]
    assert "Get it from tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark, docker/sparse_attn_indexer_kpool_sm121.py" \
        in flat
    assert "sparse_attn_indexer_kpool | tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark," in flat

    pins = supply(inv, files)
    rc, flat = validate(hosts, str(tmp_path))
    assert rc != 0
    line = "vllm_fix_file_sha256: {sparse_attn_indexer_kpool: %s}" % pins["sparse_attn_indexer_kpool"]
    assert line in flat and "its marker 'multi_processor_count >= 78' is there" in flat, flat[-3000:]

    with open(inv / "group_vars" / "spark_cluster" / "pins.yml", "w") as f:
        yaml.safe_dump({"vllm_fix_file_sha256": pins}, f)
    rc, flat = validate(hosts, str(tmp_path))
    assert rc == 0, flat[-3000:]
    assert_plan_printed(flat, 2)
    assert "sparse_attn_indexer_kpool | tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark, " \
           "docker/sparse_attn_indexer_kpool_sm121.py | %s... | present" % pins["sparse_attn_indexer_kpool"][:12] in flat
    assert "failed=0" in flat


@pytest.mark.parametrize("sample", ["sample_tp3", "sample_tp4"])
def test_tp3_and_tp4_samples_name_every_missing_file_and_pass_once_pinned(tmp_path, sample):
    inv, lane_name, files = copy_sample(tmp_path, sample)
    hosts = str(inv / "hosts.yml")
    rc, flat = validate(hosts, str(tmp_path))
    assert rc != 0
    for item in files:
        assert "fix file %s is missing: no file %s/files/%s" % (item["name"], inv, item["src"]) in flat, item
    assert set(re.findall(r"fix file (\S+) is missing", flat)) == set(f["name"] for f in files)
    pins = supply(inv, files)
    with open(inv / "group_vars" / "spark_cluster" / "pins.yml", "w") as f:
        yaml.safe_dump({"vllm_fix_file_sha256": pins}, f)
    rc, flat = validate(hosts, str(tmp_path))
    assert rc == 0, flat[-3000:]
    assert_plan_printed(flat, SAMPLES[sample])
    table = flat[flat.index("fix files of lane %s (%d)" % (lane_name, len(files))):]
    assert table.count("| present") == len(files)
