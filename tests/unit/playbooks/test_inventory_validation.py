"""Bad inventories fail `site.yml --tags preflight` before any node is contacted (issue 2).

Every inventory points at 192.0.2.0/24 (documentation space, unreachable): a check that
tried to connect would show UNREACHABLE instead of the expected message.
"""
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)


def _inventory(tmp_path, hosts, group_vars=None, host_groups=None):
    """hosts: {name: hostvars}; host_groups: {name: 'head'|'worker'|'both'} (default: first head)."""
    names = list(hosts)
    host_groups = host_groups or {n: ("head" if i == 0 else "worker") for i, n in enumerate(names)}
    head = {n: dict(hosts[n], ansible_host="192.0.2.%d" % (10 + i)) for i, n in enumerate(names)
            if host_groups[n] in ("head", "both")}
    workers = {n: dict(hosts[n], ansible_host="192.0.2.%d" % (10 + i)) for i, n in enumerate(names)
               if host_groups[n] in ("worker", "both")}
    inv = {"spark_cluster": {"children": {"vllm_head": {"hosts": head or None},
                                          "vllm_workers": {"hosts": workers or None}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    gv = tmp_path / "group_vars" / "spark_cluster"
    gv.mkdir(parents=True)
    (gv / "main.yml").write_text(yaml.safe_dump(group_vars if group_vars is not None else {"vllm_lane": "sim_cpu_tp2"}))
    return str(tmp_path / "hosts.yml")


def _run(inventory, playbook="site.yml", tags="preflight"):
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, playbook]
    if tags:
        cmd += ["--tags", tags]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


TWO = {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 1}}

BAD = [
    ("duplicate-rank", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 0}}, None, None,
     "host node-b: is a worker (vllm_workers) but has vllm_rank 0"),
    ("duplicate-worker-rank", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 1}, "node-c": {"vllm_rank": 1}},
     {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": {"tensor_parallel_size": 3}}, None,
     "vllm_rank 1: used by node-b, node-c; every rank must be unique"),
    ("missing-rank", {"node-a": {"vllm_rank": 0}, "node-b": {}}, None, None,
     "host node-b: vllm_rank is not set; set it in host_vars"),
    ("two-heads", TWO, None, {"node-a": "head", "node-b": "head"},
     "group vllm_head has 2 hosts (node-a, node-b); it must hold exactly one host, rank 0"),
    ("tp-size-not-host-count", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 1}, "node-c": {"vllm_rank": 2}},
     None, None, "group spark_cluster has 3 hosts but the lane's tensor_parallel_size is 2"),
    ("unknown-lane", TWO, {"vllm_lane": "tp5_warp"}, None,
     "lane 'tp5_warp' is unknown: no file"),
    ("lane-not-set", TWO, {}, None, "vllm_lane is not set (or not a string)"),
    ("lane-wrong-type", TWO, {"vllm_lane": 2}, None, "vllm_lane is not set (or not a string)"),
    ("rank-as-string", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": "1"}}, None, None,
     "host node-b: vllm_rank must be an integer, got string '1'; write it unquoted"),
    ("empty-workers-tp2", {"node-a": {"vllm_rank": 0}}, None, None,
     "group vllm_workers is empty; a tensor-parallel group of 2 needs 1 workers (ranks 1..1)"),
    ("head-not-rank-0", {"node-a": {"vllm_rank": 1}, "node-b": {"vllm_rank": 0}}, None, None,
     "host node-a: is the head (vllm_head) but has vllm_rank 1; the head must be rank 0"),
    ("rank-out-of-range", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 2}}, None, None,
     "vllm_rank values are [0, 2]; with 2 hosts they must be exactly 0..1 (missing [1], out of range [2])"),
    ("host-in-both-groups", TWO, None, {"node-a": "head", "node-b": "both"},
     "host node-b: is in both vllm_head and vllm_workers"),
    ("override-unknown-key", TWO, {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": {"serve": {"max_model_lenght": 4096}}},
     None, "serve.max_model_lenght: unknown key"),
    ("override-wrong-type", TWO, {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": {"serve": {"max_model_len": "big"}}},
     None, "serve.max_model_len: expected int, got string ('big')"),
    ("override-not-a-mapping", TWO, {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": ["serve"]},
     None, "vllm_lane_overrides must be a mapping of lane keys, e.g. {\"serve\": {\"max_model_len\": 8192}}; a list was given"),
    ("rank-as-bool", {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": True}}, None, None,
     "host node-b: vllm_rank must be an integer, got bool True"),
]


@pytest.mark.parametrize("case,hosts,group_vars,host_groups,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_inventory_fails_before_touching_nodes(tmp_path, case, hosts, group_vars, host_groups, expected):
    rc, out = _run(_inventory(tmp_path, hosts, group_vars, host_groups))
    assert rc != 0, out
    assert expected in " ".join(out.split()), out
    assert "UNREACHABLE" not in out, "a node was contacted before the inventory was validated:\n" + out


def test_different_lane_per_host_is_refused(tmp_path):
    # Two valid lanes in a private lanes dir (also exercises preflight_lanes_dir).
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")) as f:
        lane = yaml.safe_load(f)
    (lanes / "sim_cpu_tp2.yml").write_text(yaml.safe_dump(lane))
    (lanes / "other_tp2.yml").write_text(yaml.safe_dump(dict(lane, name="other_tp2")))
    inv_dir = tmp_path / "inv"
    inv_dir.mkdir()
    inv = _inventory(inv_dir, {"node-a": {"vllm_rank": 0}, "node-b": {"vllm_rank": 1, "vllm_lane": "other_tp2"}},
                     {"vllm_lane": "sim_cpu_tp2", "preflight_lanes_dir": str(lanes)})
    rc, out = _run(inv)
    assert rc != 0
    assert "hosts node-b use another vllm_lane than sim_cpu_tp2" in " ".join(out.split()), out
