import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import image as f
from ansible_collections.dgxspark.vllm.plugins.module_utils import image as im
from tests.unit.conftest import read_fixture
from tests.unit.plugins.module_utils.inspect_text import parse_image_inspect

PROBE = im.parse_probe(read_fixture("docker", "sim-vllm-cpu-probe.txt"))
FP = im.compute_fingerprint(PROBE["files"], PROBE["packages"])
KPOOL = "/opt/vllm/lib/python3.11/site-packages/vllm/model_executor/layers/sparse_attn_indexer_kpool.py"
INDEXER = "/opt/vllm/lib/python3.11/site-packages/vllm/model_executor/layers/sparse_attn_indexer.py"
FIX_SHA = "0b32fa9654e286ab8bf091f5f56efef6cb0e13a0ccc742b901947cbd6587c2fb"


def _host(**over):
    d = {"present": True, "files": dict(PROBE["files"]), "packages": dict(PROBE["packages"]), "fingerprint": FP}
    d.update(over)
    return d


def test_filters_are_registered():
    assert sorted(f.FilterModule().filters()) == [
        "image_build_chain_errors", "image_cuda_problems", "image_digest_pin_errors", "image_fingerprint_compare", "image_hosts_needing",
        "image_identity", "image_package_pin_errors", "image_peer_address", "image_space_problems",
        "kernel_fix_container_drift", "kernel_fix_image_check", "kernel_fix_mount_errors", "kernel_fix_pins",
        "kernel_fix_report", "kernel_fix_source_errors", "kernel_fix_source_path"]


def test_the_fix_file_filters_wrap_module_utils_with_the_kinds_rule():
    lane = {"name": "l", "fix_files": [{"name": "a", "src": "a.py", "sha256": None, "container_path": "/x/a.py",
                                        "source": {"project": "o/r", "path": "a.py"}}]}
    got = f.kernel_fix_pins(lane, {"a": "B" * 64})
    assert got["lane"] is lane and "is not a sha256 (64 lowercase hex digits)" in got["errors"][0]
    got = f.kernel_fix_pins(lane, {"a": "b" * 64})
    assert got["errors"] == [] and got["lane"]["fix_files"][0]["sha256"] == "b" * 64
    assert f.kernel_fix_source_path("/abs/a.py", "/nowhere", "/coll") == "/abs/a.py"
    assert f.kernel_fix_report(got["lane"], "/nowhere", "/coll")["rows"][0]["state"] == "missing"


def test_container_drift_filter_on_the_sim_lane_fix():
    fixes = [{"name": "sparse_attn_indexer_kpool.py", "container_path": KPOOL, "sha256": FIX_SHA}]
    assert f.kernel_fix_container_drift("%s  %s\n" % (FIX_SHA, KPOOL), fixes, "spark-sim-1") == []
    other = hashlib.sha256(b"altered").hexdigest()
    assert f.kernel_fix_container_drift("%s  %s\n" % (other, KPOOL), fixes, "spark-sim-1") == [
        "spark-sim-1: fix file sparse_attn_indexer_kpool.py inside the running rank (%s) has sha256 %s, the lane "
        "pins %s; the rank must restart to mount the node's current copy" % (KPOOL, other, FIX_SHA)]


def test_compare_and_targets_on_the_captured_probe():
    files = dict(PROBE["files"])
    files[INDEXER] = hashlib.sha256(b"patched").hexdigest()
    per_host = {"spark-sim-0": _host(), "spark-sim-1": _host(files=files, fingerprint=im.compute_fingerprint(files, PROBE["packages"])),
                "spark-sim-2": _host()}
    problems = f.image_fingerprint_compare(per_host, "spark-sim-0", None)
    assert [(p["host"], p["item"], p["actual"]) for p in problems] == [("spark-sim-1", INDEXER, files[INDEXER])]
    assert f.image_hosts_needing(per_host, "spark-sim-0") == ["spark-sim-1"]


def test_compare_rejects_bad_input():
    with pytest.raises(AnsibleFilterError, match="expected a mapping host -> result"):
        f.image_fingerprint_compare([], "a")
    with pytest.raises(AnsibleFilterError, match="reference host spark-sim-0 has no image probe"):
        f.image_fingerprint_compare({"x": _host()}, "spark-sim-0")


def test_sim_fix_file_against_the_captured_image():
    item = {"name": "sparse_attn_indexer_kpool.py", "sha256": FIX_SHA, "container_path": KPOOL,
            "marker": "multi_processor_count >= 78", "src": "files/fixes/sparse_attn_indexer_kpool_sim.py"}
    assert f.kernel_fix_image_check(item, PROBE, "dgxspark-sim/vllm-cpu:0.32.0", "spark-sim-1") == {
        "errors": [], "state": "absent", "note": None}
    over = dict(item, container_path=INDEXER)
    errs = f.kernel_fix_image_check(over, PROBE, "dgxspark-sim/vllm-cpu:0.32.0", "spark-sim-1")["errors"]
    assert errs[0].startswith("spark-sim-1: image dgxspark-sim/vllm-cpu:0.32.0 already carries %s with sha256 "
                              "75d14da5e2b8c237f7fc0a807d2b72677660a945c70d23825da3517801d9ca10; fix file "
                              "sparse_attn_indexer_kpool.py has sha256 %s" % (INDEXER, FIX_SHA))


def test_the_shipped_sim_fix_file_passes_its_own_pin(fixture_path):
    import os
    path = os.path.join(os.path.dirname(fixture_path("docker")), "..", "..", "files", "fixes", "sparse_attn_indexer_kpool_sim.py")
    with open(path, "rb") as fh:
        data = fh.read()
    item = {"name": "sparse_attn_indexer_kpool.py", "sha256": FIX_SHA, "container_path": KPOOL,
            "marker": "multi_processor_count >= 78", "src": "files/fixes/sparse_attn_indexer_kpool_sim.py"}
    assert f.kernel_fix_source_errors(item, hashlib.sha256(data).hexdigest(), data.decode(), "sim_cpu_tp2") == []


def test_image_check_filter_refuses_a_non_probe():
    with pytest.raises(AnsibleFilterError, match="expected the image_fingerprint result of the node, got str"):
        f.kernel_fix_image_check({"name": "k"}, "abc", "img:1")


def test_image_identity_filter_on_the_loaded_capture():
    info = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))
    probe = {"present": True, "fingerprint": "f" * 64,
             "registry_digest": im.registry_digest(info["repo_digests"], "dgxspark-sim/vllm-cpu:0.32.0")}
    filters = f.FilterModule().filters()
    out = filters["image_identity"]({"s0": probe, "s1": probe}, "s0", "dgxspark-sim/vllm-cpu:0.32.0")
    assert out["basis"] == "fingerprint" and out["problems"] == []
    with pytest.raises(AnsibleFilterError, match="expected a mapping host -> result"):
        filters["image_identity"]([], "s0", "x")
