# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rdma_fabric's opt-in bandwidth probe (catalogue perftest_64k) where no perftest exists: skipped with a message naming the
hosts, nothing probed, no verdict. Runs the role's task file with ansible-playbook on two local hosts (the build
machine, like the simulated nodes, has no ib_write_bw and no RDMA). The probe itself is hardware-only, untested here.
"""
import json
import os
import subprocess
import sys

import yaml

from tests.unit.conftest import ROOT

TASKS = os.path.join(ROOT, "roles", "rdma_fabric", "tasks", "bandwidth.yml")


def test_skipped_with_a_message_when_perftest_is_absent(tmp_path):
    tool = "/nonexistent/perftest/ib_write_bw"
    assert not os.path.exists(tool)
    inv = {"all": {"hosts": {"spark-a": {}, "spark-b": {}},
                   "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    play = [{"hosts": "all", "gather_facts": False,
             "vars": {"rdma_fabric_bandwidth_tool": tool, "rdma_fabric_bandwidth_size": 65536,
                      "rdma_fabric_bandwidth_qps": 4, "rdma_fabric_bandwidth_port_base": 18515,
                      "rdma_fabric_bandwidth_link_mbps": 200000, "rdma_fabric_bandwidth_floor_fraction": 0.35,
                      "rdma_fabric_bandwidth_timeout_s": 60},
             "tasks": [{"name": "the role's bandwidth tasks", "ansible.builtin.import_tasks": TASKS},
                       {"name": "nothing was judged", "ansible.builtin.assert": {
                           "that": ["rdma_fabric_bandwidth is not defined", "_rdma_fabric_bw_plan is not defined"]}}]}]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout[p.stdout.index("{"):])
    tasks = dict((t["task"]["name"], t["hosts"]) for t in out["plays"][0]["tasks"])
    skip = tasks["Rdma_fabric | bandwidth probe skipped"]
    (msg,) = [h["msg"] for h in skip.values() if "msg" in h]
    assert msg == ("rdma_fabric bandwidth probe skipped: %s is missing on spark-a, spark-b. Install perftest on every "
                   "node (DGX OS - apt install perftest) to probe each rail before loading, or set "
                   "rdma_fabric_bandwidth_probe false." % tool)
    plan = tasks["Rdma_fabric | one probe per rail against the head's rail in the same subnet"]
    assert plan and all(h.get("skipped") for h in plan.values())
