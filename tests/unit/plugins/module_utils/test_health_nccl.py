# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Every rank's logged NCCL version must agree (catalogue nccl_version_skew).

Inputs: the TP2 deploy report's captured boot log (vLLM is using nccl==2.30.7), the catalogue nccl_version_skew worker with the
downgraded NCCL (reconstructed: the version the report states), and the simulated fleet's CPU engine log
(no NCCL at all). A GB10 pair's real mismatched logs are hardware-only and not captured here.
"""

from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H
from tests.unit.conftest import read_fixture


def boot(name, rank, host, where="vllm-logs/startup"):
    b = H.parse_boot_log(read_fixture("health", *(where.split("/") + [name])))
    return dict(b, rank=rank, host=host)


HEAD = ("glm53-tp2-deploy-report-boot.log", 0, "node-a")


def test_captured_boot_logs_give_the_versions():
    assert boot(*HEAD)["nccl_version"] == "2.30.7"
    assert boot("g14-worker-downgraded-nccl.log", 1, "node-b")["nccl_version"] == "2.29.7"
    # NCCL's own banner at NCCL_DEBUG=INFO, prefixed like the captured NCCL INFO lines of the dual-rail log
    line = read_fixture("rdma", "nccl-logs", "spark-2node-dual-rail-healthy.log").splitlines()[0]
    banner = line.split(" NCCL INFO ")[0] + " NCCL INFO NCCL version 2.30.7+cuda13.0"
    assert H.parse_boot_log(banner)["nccl_version"] == "2.30.7"


def test_g14_mismatch_names_each_rank_host_and_version():
    ranks = [boot(*HEAD), boot("g14-worker-downgraded-nccl.log", 1, "node-b")]
    out = H.nccl_version_agreement(ranks)
    assert out["by_rank"] == {0: "2.30.7", 1: "2.29.7"} and out["versions"] == ["2.29.7", "2.30.7"]
    assert out["failures"] == [
        "NCCL differs across ranks (rank 0 on node-a: 2.30.7; rank 1 on node-b: 2.29.7); ranks with different NCCL "
        "builds fail in ncclCommInitRank or corrupt collectives (catalogue nccl_version_skew). Fix: run one image on "
        "every rank (image_sync; with image.expected_packages pinning nvidia-nccl-cu13) and restart the group"]
    # with the lane's pin only the off rank is named a second time
    pinned = H.nccl_version_agreement(ranks, "2.30.7")
    assert len(pinned["failures"]) == 2
    assert pinned["failures"][1].startswith("NCCL 2.30.7 expected (lane image.expected_packages) but rank 1 on "
                                            "node-b: 2.29.7 (catalogue nccl_version_skew)")


def test_agreeing_ranks_pass_and_a_silent_rank_warns():
    same = [boot(*HEAD), dict(boot(*HEAD), rank=1, host="node-b")]
    assert H.nccl_version_agreement(same, "2.30.7")["failures"] == []
    silent = [boot(*HEAD), boot("tp1-ready.log", 1, "spark-sim-1", where="sim-cpu")]
    out = H.nccl_version_agreement(silent)
    assert out["failures"] == [] and out["warnings"] == [
        "no NCCL version line in the log of rank 1 on spark-sim-1, so its NCCL is not compared (catalogue "
        "nccl_version_skew)"]


def test_cpu_engine_logs_no_nccl_and_nothing_is_judged():
    ranks = [boot("tp1-ready.log", 0, "spark-sim-0", where="sim-cpu"),
             boot("rank0-boot-starting.log", 1, "spark-sim-1", where="sim-cpu")]
    assert H.nccl_version_agreement(ranks) == {"by_rank": {0: None, 1: None}, "versions": [], "failures": [],
                                               "warnings": []}
