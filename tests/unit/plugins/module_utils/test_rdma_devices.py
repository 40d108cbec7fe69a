# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""G04 after the ranks start: does the rank container hold /dev/infiniband? (health.rdma_devices_findings)

Inputs: captured `docker inspect` JSON - a container created with the spark lanes' RDMA flags
(tests/fixtures/docker/inspect-rank-with-infiniband.json) and one with none (launch-lines/captured, `Devices: []`,
the shape of catalogue nccl_no_net_plugin). There is no RDMA here: the spark-lane path runs only on hardware; the simulated lanes
pass no /dev/infiniband, so the check is off there (checked False).
"""
import copy
import json

from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H
from tests.unit.conftest import read_fixture

WITH_IB = json.loads(read_fixture("docker", "inspect-rank-with-infiniband.json"))[0]
NO_DEVICES = json.loads(read_fixture("launch-lines", "captured", "docker-inspect-running.json"))[0]


def test_the_spark_lane_flags_pass():
    out = H.rdma_devices_findings(WITH_IB, "node-a", rdma_expected=True)
    assert out == {"devices": ["/dev/infiniband"], "checked": True, "failures": [], "warnings": []}


def test_g04_devices_empty_fails_naming_host_container_and_fix():
    out = H.rdma_devices_findings(NO_DEVICES, "node-b", rdma_expected=True)
    assert out["devices"] == [] and out["checked"] is True
    assert out["failures"] == [
        "node-b: container vr-capture runs without /dev/infiniband (docker inspect HostConfig.Devices: []) although "
        "the lane passes it; NCCL then finds no NET plugin or falls back to sockets. Fix: check that /dev/infiniband "
        "exists on node-b (ls /sys/class/infiniband) and that the rank starts with --device /dev/infiniband (the "
        "lane's container.devices), then restart the group (catalogue nccl_no_net_plugin)"]
    assert out["warnings"] == [
        "node-b: container vr-capture has memlock default, not unlimited: RDMA memory registration can fail under "
        "load. Fix: run the rank with --ulimit memlock=-1 (catalogue nccl_no_net_plugin)",
        "node-b: container vr-capture lacks the IPC_LOCK capability (CapAdd null): RDMA memory registration can "
        "fail. Fix: run the rank with --cap-add IPC_LOCK (catalogue nccl_no_net_plugin)"]


def test_uverbs_only_and_privileged_count_as_present():
    obj = copy.deepcopy(WITH_IB)
    obj["HostConfig"]["Devices"] = [{"PathOnHost": "/dev/infiniband/uverbs0", "PathInContainer": "/dev/infiniband/uverbs0",
                                     "CgroupPermissions": "rwm"}]
    assert H.rdma_devices_findings(obj, "node-a", True)["failures"] == []
    priv = copy.deepcopy(NO_DEVICES)
    priv["HostConfig"]["Privileged"] = True
    want = {"devices": [], "checked": True, "failures": [], "warnings": []}
    assert H.rdma_devices_findings(priv, "node-a", True) == want


def test_sim_lanes_check_nothing():
    out = H.rdma_devices_findings(NO_DEVICES, "spark-sim-0", rdma_expected=False)
    assert out == {"devices": [], "checked": False, "failures": [], "warnings": []}
