# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""rdma_fabric's opt-in bandwidth probe (catalogue perftest_64k) where no perftest exists: skipped with a message naming the
hosts, nothing probed, no verdict. Runs the role's task file with ansible-playbook on two local hosts (the build
machine, like the simulated nodes, has no ib_write_bw and no RDMA). The probe itself is hardware-only, untested here.
"""
import os

from tests.unit.conftest import ROOT, run_local_play

TASKS = os.path.join(ROOT, "roles", "rdma_fabric", "tasks", "bandwidth.yml")


def test_skipped_with_a_message_when_perftest_is_absent(tmp_path):
    tool = "/nonexistent/perftest/ib_write_bw"
    assert not os.path.exists(tool)
    play_vars = {"rdma_fabric_bandwidth_tool": tool, "rdma_fabric_bandwidth_size": 65536,
                 "rdma_fabric_bandwidth_qps": 4, "rdma_fabric_bandwidth_port_base": 18515,
                 "rdma_fabric_bandwidth_link_mbps": 200000, "rdma_fabric_bandwidth_floor_fraction": 0.35,
                 "rdma_fabric_bandwidth_timeout_s": 60}
    rc, tasks, tail = run_local_play(tmp_path, ["spark-a", "spark-b"], play_vars, [
        {"name": "the role's bandwidth tasks", "ansible.builtin.import_tasks": TASKS},
        {"name": "nothing was judged", "ansible.builtin.assert": {
            "that": ["rdma_fabric_bandwidth is not defined", "_rdma_fabric_bw_plan is not defined"]}}])
    assert rc == 0, tail
    skip = tasks["Rdma_fabric | bandwidth probe skipped"]
    (msg,) = [h["msg"] for h in skip.values() if "msg" in h]
    assert msg == ("rdma_fabric bandwidth probe skipped: %s is missing on spark-a, spark-b. Install perftest on every "
                   "node (DGX OS - apt install perftest) to probe each rail before loading, or set "
                   "rdma_fabric_bandwidth_probe false." % tool)
    plan = tasks["Rdma_fabric | one probe per rail against the head's rail in the same subnet"]
    assert plan and all(h.get("skipped") for h in plan.values())
