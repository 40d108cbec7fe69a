"""Tensor-parallel 3 on the simulated ring fleet (issues 5, 8, 9): sim up, site.yml, evidence, teardown.

inventories/sim_tp3 wires three nodes as the NVIDIA three-Spark triangle: one /24 per link and no
fabric subnet shared by all ranks, plus a management network. Evidence is read from each node's own
dockerd and files: the rendezvous moved to the management interface (catalogue rendezvous_timeout), the tiny
checkpoint padded 4/2 -> 6/3 heads on every node with the released config kept, ranks 2 and 1
started before rank 0, a real three-rank vLLM answering, changed=0 on a second run, and a teardown
that removes the head first and leaves every rank's log on the controller.
"""
import json
import os
import subprocess

import pytest
import yaml

from conftest import (ROOT, assert_watchdog_watching, deploy_fleet, http_json, inventory_groups, node_ipv4,
                      rank_config, run_facts, run_playbook, runner_output, started_at, total)

INVENTORY = "inventories/sim_tp3/hosts.yml"
pytestmark = pytest.mark.e2e


def _lane():
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp3.yml")) as f:
        return yaml.safe_load(f)


def _ranks():
    """[(rank, node)] in rank order."""
    head, workers = inventory_groups(INVENTORY)
    hosts = dict(head)
    hosts.update(workers)
    return sorted((v["vllm_rank"], name) for name, v in hosts.items())


def _node(node, *argv):
    proc = subprocess.run(["docker", "exec", node] + list(argv), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, "%s: %s: %s" % (node, " ".join(argv), proc.stderr)
    return proc.stdout


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    # The benchmark is the TP2 demo's (tests/e2e/test_demo_tp2.py): the same role and harness, one minute more here.
    yield deploy_fleet(INVENTORY, tmp_path_factory, skip_tags="vllm_bench")
    down = run_playbook("playbooks/sim_down.yml", INVENTORY, tmp_path_factory.mktemp("sim_down"))
    assert down.rc == 0, runner_output(down)


def test_ring_puts_the_rendezvous_on_management(deployed):
    """catalogue rendezvous_timeout: no fabric subnet reaches all three ranks, so Gloo and the master address use enP7s7."""
    name = _lane()["container"]["name"]
    ranks = _ranks()
    master = node_ipv4(ranks[0][1], "enP7s7")
    for rank, node in ranks:
        env, cmd = rank_config(node, name)
        assert env["VLLM_HOST_IP"] == node_ipv4(node, "enP7s7"), (node, env["VLLM_HOST_IP"])
        assert env["GLOO_SOCKET_IFNAME"] == "enP7s7", (node, env)
        assert cmd[cmd.index("--master-addr") + 1] == master, (node, cmd)
        assert cmd[cmd.index("--node-rank") + 1] == str(rank), (node, cmd)
        assert cmd[cmd.index("--tensor-parallel-size") + 1] == "3", (node, cmd)
        assert ("--headless" in cmd) == (rank != 0), (node, cmd)


def test_checkpoint_padded_on_every_node(deployed):
    """tp_pad wrote 6 q / 3 kv heads on each node and kept the released 4 / 2 config beside it."""
    path = _lane()["checkpoint"]["host_path"]
    for rank, node in _ranks():
        config = json.loads(_node(node, "cat", path + "/config.json"))
        assert (config["num_attention_heads"], config["num_key_value_heads"]) == (6, 3), (node, config)
        assert config["intermediate_size"] % 3 == 0, (node, config["intermediate_size"])
        released = json.loads(_node(node, "cat", path + "/config.json.orig"))
        assert (released["num_attention_heads"], released["num_key_value_heads"]) == (4, 2), (node, released)


def test_workers_started_before_head(deployed):
    name = _lane()["container"]["name"]
    starts = {}
    for rank, node in _ranks():
        starts[rank], running = started_at(node, name)
        assert running, "%s: rank %d not running" % (node, rank)
    assert starts[2] < starts[0] and starts[1] < starts[0], starts


def test_three_ranks_answer(deployed):
    lane = _lane()
    head = _ranks()[0][1]
    base = "http://%s:%d" % (node_ipv4(head, "enP7s7"), lane["serve"]["api_port"])
    status, health = http_json(base + "/health")
    assert status == 200, health
    status, body = http_json(base + "/v1/chat/completions", {
        "model": lane["checkpoint"]["served_model_name"],
        "messages": [{"role": "user", "content": "Say hello."}],
        # the lane's reasoning parser (glm45) puts every token into reasoning unless thinking is off
        "chat_template_kwargs": lane["health"]["smoke_chat_template_kwargs"],
        "max_tokens": 16, "temperature": 0})
    assert status == 200
    assert body["choices"][0]["message"]["content"].strip(), body
    assert body["usage"]["completion_tokens"] > 0


def test_watchdog_on_by_default_watches_three_ranks(deployed):
    """Issue 16 at TP3: the default-on watchdog's config holds the three ranks; its first cycle reached both
    workers' agents and the head's canary."""
    assert_watchdog_watching(INVENTORY, _lane())


def test_parser_flags_and_tool_requests_on_the_real_engine(deployed):
    """The production parser flags run on every rank; an OpenAI-style tool request (tool_choice auto) is accepted
    and parsed into a well-formed message, streamed and not, at the lane's concurrency (the health report).
    Not judged: whether the random-weight model calls the tool, or its arguments."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H
    lane = _lane()
    for _rank, node in _ranks():
        _env, cmd = rank_config(node, lane["container"]["name"])
        assert cmd[cmd.index("--tool-call-parser") + 1] == "glm47", (node, cmd)
        assert cmd[cmd.index("--reasoning-parser") + 1] == "glm45" and "--enable-auto-tool-choice" in cmd, node
    head = _ranks()[0][1]
    base = "http://%s:%d" % (node_ipv4(head, "enP7s7"), lane["serve"]["api_port"])
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object", "required": ["city"],
                                                              "properties": {"city": {"type": "string"}}}}}]
    status, body = http_json(base + "/v1/chat/completions", {
        "model": lane["checkpoint"]["served_model_name"], "tools": tools, "tool_choice": "auto",
        "messages": [{"role": "user", "content": "What is the weather in Berlin?"}], "max_tokens": 16,
        "temperature": 0}, timeout=300)
    assert status == 200, body
    verdict = H.evaluate_tool_message(body, ["get_weather"], tool_call_parser="glm47")
    assert verdict["ok"], verdict
    # the deployment run's own report (its first run on a new fleet runs the full gate with the tool requests);
    # reports/health-latest.json may be another fleet's when make test runs two lanes side by side
    reports = run_facts(deployed, "Vllm_health | assemble the report")
    assert head in reports, "the deployment run did not assemble a health report on %s" % head
    report = reports[head]["vllm_health_report"]
    rows = report["smoke"]["tools"]
    expected = [("get_time", False), ("get_time", True), ("get_weather", False), ("get_weather", True)]
    assert [(r["tool"], r["streamed"]) for r in rows] == expected, rows
    assert all(r["ok"] and r["judge"] == "wellformed" and r["concurrency"] == lane["serve"]["max_num_seqs"]
               for r in rows), rows
    assert report["smoke"]["chat"]["ok"], report["smoke"]["chat"]


def test_second_run_changes_nothing(deployed, tmp_path):
    second = run_playbook("site.yml", INVENTORY, tmp_path)
    assert second.rc == 0, runner_output(second)
    assert total(second.stats, "changed") == 0, second.stats


def test_teardown_removes_head_first_and_keeps_logs(deployed, tmp_path):
    name = _lane()["container"]["name"]
    ranks = _ranks()
    since = {node: _node(node, "date", "-u", "+%Y-%m-%dT%H:%M:%S").strip() for rank, node in ranks}
    logs = tmp_path / "rank-logs"
    down = run_playbook("playbooks/teardown.yml", INVENTORY, tmp_path / "run",
                        extravars={"vllm_teardown_confirm": "yes", "vllm_ranks_controller_log_dir": str(logs)})
    assert down.rc == 0, runner_output(down)
    destroyed = {}
    for rank, node in ranks:
        assert not _node(node, "docker", "ps", "-aq", "--filter", "name=^%s$" % name).strip(), node
        events = _node(node, "docker", "events", "--since", since[node], "--until", "0s", "--format",
                       "{{json .}}", "--filter", "event=destroy", "--filter", "container=%s" % name)
        stamps = [json.loads(line)["timeNano"] for line in events.splitlines() if line.strip()]
        assert stamps, "%s: no destroy event for %s" % (node, name)
        destroyed[rank] = stamps[0]
        saved = list((logs / node).iterdir())
        assert saved, "%s: no log fetched to the controller" % node
        assert any("vllm" in p.read_text(errors="replace").lower() for p in saved), (node, saved)
    # The head goes first: a headless worker outlives its head, never the other way round (catalogue worker_orphaned).
    assert destroyed[0] < destroyed[1] and destroyed[0] < destroyed[2], destroyed
