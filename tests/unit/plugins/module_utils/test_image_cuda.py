# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The image's CUDA against the driver's (catalogue image_cuda_newer_than_driver).

Inputs: the captured GB10 nvidia-smi table (driver 580.142, 'CUDA Version: 13.0') and the catalogue image_cuda_newer_than_driver ptxas
line (reconstructed). What is hardware-only and untested here: a real CUDA image's ptxas run by the
image_fingerprint probe on a GB10 node (the simulated engine image carries no CUDA toolchain, so on the
simulated fleet the probe reports none and the lane's image.cuda_version is the only input).
"""

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import image as im
from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import parse_nvidia_smi_table
from ansible_collections.dgxspark.vllm.plugins.filter.image import image_cuda_problems
from tests.unit.conftest import read_fixture

REF = "glm53:sm121-v12"


def gb10_node():
    table = parse_nvidia_smi_table(read_fixture("node", "gb10-table-excerpt.txt"))
    return {"driver_version": table["driver_version"], "cuda_version": table["cuda_version"]}


def ptxas_probe():
    """What image_fingerprint's probe prints for the catalogue image_cuda_newer_than_driver image, parsed like the module does."""
    line = read_fixture("docker", "g18-image-ptxas-version.txt").strip()
    text = "PTXAS release " + line.split("release ", 1)[1] + "\n"  # the probe's sed keeps what follows 'release '
    return im.parse_probe(text)


def test_captures_parse_to_the_stated_versions():
    assert gb10_node() == {"driver_version": "580.142", "cuda_version": "13.0"}
    assert ptxas_probe()["cuda_toolchain"] == "13.2"
    assert im.parse_ptxas_release(read_fixture("docker", "g18-image-ptxas-version.txt")) == "13.2"


def test_g18_image_newer_than_the_driver_is_refused_on_every_rank():
    probe = dict(ptxas_probe(), present=True)
    out = im.cuda_driver_problems({"node-a": probe, "node-b": probe}, {"node-a": gb10_node(), "node-b": gb10_node()},
                                  REF)
    assert [(p["host"], p["need"], p["have"]) for p in out] == [("node-a", "13.2", "13.0"), ("node-b", "13.2", "13.0")]
    assert out[1]["msg"] == (
        "node-b: image glm53:sm121-v12 needs CUDA 13.2 (ptxas in the image) but driver 580.142 supports CUDA 13.0 "
        "(nvidia-smi 'CUDA Version'); kernels JIT-compiled at first use then fail with cudaErrorUnsupportedPtxVersion "
        "(222) after the ranks look ready (catalogue image_cuda_newer_than_driver). Fix: use an image built for CUDA "
        "13.0 or older, or install a driver that supports CUDA 13.2 on node-b and reboot, then re-run")


def test_basis_order_toolchain_then_env_then_lane():
    env = {"cuda_toolchain": None, "cuda_env": im.cuda_env_version(["PATH=/usr/bin", "CUDA_VERSION=13.1.0"])}
    assert im.image_cuda(env, "12.8") == ("13.1", "the image's CUDA_VERSION")
    assert im.image_cuda(dict(env, cuda_toolchain="13.2"), "12.8") == ("13.2", "ptxas in the image")
    assert im.image_cuda({}, "13.2.1") == ("13.2", "lane image.cuda_version")
    assert im.image_cuda({}, None) == (None, None)
    with pytest.raises(im.ImageError, match="image.cuda_version 'thirteen'"):
        im.image_cuda({}, "thirteen")


def test_same_or_older_image_and_unknown_driver_pass():
    node = gb10_node()
    assert im.cuda_driver_problems({"node-a": {"cuda_env": "13.0"}}, {"node-a": node}, REF) == []
    assert im.cuda_driver_problems({"node-a": {"cuda_env": "12.9"}}, {"node-a": node}, REF) == []
    # 13.10 is newer than 13.2 (compared as numbers, not text)
    assert im.cuda_driver_problems({"node-a": {}}, {"node-a": dict(node, cuda_version="13.10")}, REF, "13.2") == []
    # no driver facts (cpu lane, or preflight did not run in this play): not judged
    assert im.cuda_driver_problems({"node-a": {"cuda_toolchain": "13.2"}}, {}, REF) == []


def test_lane_metadata_decides_when_the_image_says_nothing():
    """The simulated fleet's case: no CUDA in the image, the lane's image.cuda_version is the input."""
    out = image_cuda_problems({"spark-sim-0": {"present": True, "cuda_toolchain": None, "cuda_env": None}},
                              {"spark-sim-0": gb10_node()}, REF, "13.2")
    assert len(out) == 1 and "needs CUDA 13.2 (lane image.cuda_version)" in out[0]["msg"]


def test_probe_script_reads_ptxas_only_when_present():
    assert "ptxas --version" not in im.PROBE_SCRIPT  # the binary is found first, never assumed on PATH
    assert '"$PTXAS" --version' in im.PROBE_SCRIPT and "/usr/local/cuda/bin/ptxas" in im.PROBE_SCRIPT
    assert im.parse_probe("PKG vllm 0.32.0\n")["cuda_toolchain"] is None
