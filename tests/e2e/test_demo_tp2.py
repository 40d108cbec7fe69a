"""The demo flow on the simulated TP2 fleet (issue 3): sim up, site.yml, evidence, idempotence.

Real evidence only: container start times are read from each node's own dockerd, /health and a
chat completion are asked of the head over the management network, and the second run's
changed count comes from ansible-runner's stats.
"""
import datetime
import json
import subprocess

import pytest
import yaml

from conftest import ROOT, http_json, node_docker, run_playbook, runner_output, total

INVENTORY = "inventories/sim/hosts.yml"
pytestmark = pytest.mark.e2e


def _hosts():
    with open(f"{ROOT}/{INVENTORY}") as f:
        inv = yaml.safe_load(f)
    cluster = inv["spark_cluster"] if "spark_cluster" in inv else inv["all"]["children"]["spark_cluster"]
    groups = cluster["children"]
    head = groups["vllm_head"]["hosts"]
    workers = groups["vllm_workers"]["hosts"]
    return head, workers


def _lane():
    with open(f"{ROOT}/lanes/sim_cpu_tp2.yml") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    up = run_playbook("playbooks/sim_up.yml", INVENTORY, tmp_path_factory.mktemp("sim_up"))
    assert up.rc == 0, runner_output(up)
    first = run_playbook("site.yml", INVENTORY, tmp_path_factory.mktemp("site1"))
    assert first.rc == 0, runner_output(first)
    return first


def _started_at(node, container):
    rc, out, err = node_docker(node, "inspect", "-f", "{{.State.StartedAt}}|{{.State.Running}}", container)
    assert rc == 0, f"{node}: {err}"
    stamp, running = out.split("|")
    # Docker prints RFC 3339 with nanoseconds; keep microseconds for fromisoformat.
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        head, frac = stamp.split(".")
        stamp = f"{head}.{frac[:6]}"
    return datetime.datetime.fromisoformat(stamp), running == "true"


def test_workers_started_before_head(deployed):
    head, workers = _hosts()
    name = _lane()["container"]["name"]
    (head_name,) = head
    head_start, head_running = _started_at(head_name, name)
    assert head_running
    for worker in workers:
        start, running = _started_at(worker, name)
        assert running, f"{worker}: rank container not running"
        assert start < head_start, f"{worker} started at {start}, after the head at {head_start}"


def test_health_and_chat(deployed):
    head, _ = _hosts()
    (vars_,) = head.values()
    lane = _lane()
    base = f"http://{vars_['ansible_host']}:{lane['serve']['api_port']}"
    status, _ = http_json(base + "/health")
    assert status == 200
    status, body = http_json(base + "/v1/chat/completions", {
        "model": lane["checkpoint"]["served_model_name"],
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 16, "temperature": 0})
    assert status == 200
    content = body["choices"][0]["message"]["content"]
    assert isinstance(content, str) and content.strip(), body
    assert body["usage"]["completion_tokens"] > 0


def test_second_run_changes_nothing(deployed, tmp_path):
    second = run_playbook("site.yml", INVENTORY, tmp_path)
    assert second.rc == 0, runner_output(second)
    assert total(second.stats, "changed") == 0, second.stats
    assert total(second.stats, "failures") == 0


def _node_fabric_ip(node, ifname="enp1s0f1np1"):
    proc = subprocess.run(["docker", "exec", node, "ip", "-j", "-4", "addr", "show", ifname],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)[0]["addr_info"][0]["local"]


def _rank_config(node, container):
    rc, out, err = node_docker(node, "inspect", "-f", "{{json .Config}}", container)
    assert rc == 0, f"{node}: {err}"
    config = json.loads(out)
    env = dict(item.split("=", 1) for item in config["Env"])
    return env, config["Cmd"] or []


def test_each_rank_runs_with_its_own_fabric_values(deployed):
    """Issue 5: the env of every running rank equals the facts of its own host, never the head's."""
    head, workers = _hosts()
    name = _lane()["container"]["name"]
    (head_name,) = head
    master = _node_fabric_ip(head_name)
    for node in list(head) + list(workers):
        env, cmd = _rank_config(node, name)
        own_ip = _node_fabric_ip(node)
        assert env["VLLM_HOST_IP"] == own_ip, (node, env["VLLM_HOST_IP"], own_ip)
        assert env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1", (node, env)
        assert cmd[cmd.index("--master-addr") + 1] == master, (node, cmd)
        if "NCCL_IB_GID_INDEX" in env:
            # The GID at that index on THIS node is the IPv4-mapped form of its own fabric address.
            gid_path = "/opt/sim/sys/class/infiniband/%s/ports/1/gids/%s" % (
                env["NCCL_IB_HCA"].split(",")[0].lstrip("=^"), env["NCCL_IB_GID_INDEX"])
            gid = subprocess.run(["docker", "exec", node, "cat", gid_path], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.strip()
            mapped = "".join("%02x" % int(octet) for octet in own_ip.split("."))
            assert gid.replace(":", "").endswith("ffff" + mapped), (node, gid, own_ip)
