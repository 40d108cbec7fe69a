"""Helpers for end-to-end runs on the simulated fleet, driven through ansible-runner."""
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.request

import ansible_runner
import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The collection's own Python (module_utils) through its self-link, as `make` sets PYTHONPATH.
if os.path.join(ROOT, "collections") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "collections"))


def run_playbook(playbook, inventory, tmp_dir, extravars=None, tags=None, check=False, skip_tags=None):
    """Run a playbook from the checkout; return the ansible-runner Runner (status, rc, stats, events)."""
    os.makedirs(str(tmp_dir), exist_ok=True)
    cmdline = []
    if tags:
        cmdline += ["--tags", tags]
    if skip_tags:
        cmdline += ["--skip-tags", skip_tags]
    if check:
        cmdline += ["--check", "--diff"]
    runner = ansible_runner.run(
        private_data_dir=str(tmp_dir),
        project_dir=ROOT,
        playbook=os.path.join(ROOT, playbook),
        inventory=os.path.join(ROOT, inventory),
        extravars=extravars or {},
        cmdline=" ".join(cmdline) or None,
        envvars={"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        quiet=True,
    )
    return runner


def deploy_fleet(inventory, tmp_path_factory, skip_tags=None):
    """Bring up the inventory's simulated fleet and run site.yml once; return that site run."""
    up = run_playbook("playbooks/sim_up.yml", inventory, tmp_path_factory.mktemp("sim_up"))
    assert up.rc == 0, runner_output(up)
    first = run_playbook("site.yml", inventory, tmp_path_factory.mktemp("site1"), skip_tags=skip_tags)
    assert first.rc == 0, runner_output(first)
    return first


def run_facts(run, task):
    """host -> ansible_facts set by `task` in an ansible-runner run (a run's own results: another fleet's run
    writing reports/ at the same time cannot change them)."""
    out = {}
    for ev in run.events:
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_ok" and data.get("task") == task:
            out[data.get("host")] = (data.get("res") or {}).get("ansible_facts") or {}
    return out


def runner_output(runner):
    return runner.stdout.read() if hasattr(runner.stdout, "read") else ""


def total(stats, key):
    return sum((stats or {}).get(key, {}).values())


def node_docker(node, *args):
    """Run the docker CLI of a simulated node (its own dockerd) from the build machine."""
    proc = subprocess.run(["docker", "exec", node, "docker"] + list(args), capture_output=True, text=True, timeout=120,
                          check=False)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def inventory_groups(inventory):
    """(head hosts, worker hosts) of a sim inventory, as dicts of host -> vars."""
    with open(os.path.join(ROOT, inventory)) as f:
        inv = yaml.safe_load(f)
    cluster = inv["spark_cluster"] if "spark_cluster" in inv else inv["all"]["children"]["spark_cluster"]
    groups = cluster["children"]
    return groups["vllm_head"]["hosts"], groups["vllm_workers"]["hosts"]


def docker_time(stamp):
    """Docker's RFC 3339 time with nanoseconds as a datetime (microseconds kept)."""
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        head, frac = stamp.split(".")
        stamp = f"{head}.{frac[:6]}"
    return datetime.datetime.fromisoformat(stamp)


def started_at(node, container):
    """(StartedAt, running) of a container on a simulated node, from that node's dockerd."""
    rc, out, err = node_docker(node, "inspect", "-f", "{{.State.StartedAt}}|{{.State.Running}}", container)
    assert rc == 0, f"{node}: {err}"
    stamp, running = out.split("|")
    return docker_time(stamp), running == "true"


def node_ipv4(node, ifname="enp1s0f1np1"):
    """The first IPv4 address of an interface inside a simulated node (from `ip -j`)."""
    proc = subprocess.run(["docker", "exec", node, "ip", "-j", "-4", "addr", "show", ifname],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)[0]["addr_info"][0]["local"]


def rank_config(node, container):
    """(env dict, command list) of a rank container, read from the node's own dockerd."""
    rc, out, err = node_docker(node, "inspect", "-f", "{{json .Config}}", container)
    assert rc == 0, f"{node}: {err}"
    config = json.loads(out)
    env = dict(item.split("=", 1) for item in config["Env"])
    return env, config["Cmd"] or []


def watchdog_seen(head, timeout=240):
    """The default-on watchdog as its head shows it, once a watching cycle has written a verdict (or after `timeout` s):
    service state, enabled at boot, its config and its state file. Read over `docker exec` on the head."""
    deadline = time.time() + timeout
    while True:
        proc = subprocess.run(["docker", "exec", head, "sh", "-c",
                               "systemctl is-active dgxspark-vllm-watchdog; systemctl is-enabled dgxspark-vllm-watchdog;"
                               " cat /etc/dgxspark-vllm-watchdog/watchdog.json;"
                               " echo '%%'; cat /var/lib/dgxspark-vllm-watchdog/state.json"],
                              capture_output=True, text=True, timeout=60, check=False)
        head_lines, _sep, rest = proc.stdout.partition("\n%%\n")
        active, enabled, config = (head_lines.split("\n", 2) + ["", "", ""])[:3]
        state = json.loads(rest) if rest.strip() else {}
        # a cycle of the run's hold leaves mode paused with the verdict from before it: wait for a watching cycle
        if (state.get("mode") == "watching" and (state.get("verdict") or {}).get("canary")) or time.time() > deadline:
            return {"active": active, "enabled": enabled, "config": json.loads(config) if config.strip() else {},
                    "state": state}
        time.sleep(5)


def assert_watchdog_watching(inventory, lane):
    """site.yml left the default-on watchdog running on the head of `inventory`, configured for every rank of
    the inventory, and its first cycle found the group serving (canary answered, no action, no strike)."""
    head, workers = inventory_groups(inventory)
    (head_name, head_vars), = head.items()
    seen = watchdog_seen(head_name)
    assert (seen["active"], seen["enabled"]) == ("active", "enabled"), seen
    nodes = dict(head, **workers)
    assert [(n["host"], n["rank"], n["address"]) for n in seen["config"]["nodes"]] == \
        sorted(((h, int(v["vllm_rank"]), v["ansible_host"]) for h, v in nodes.items()), key=lambda t: t[1])
    assert seen["config"]["api_url"] == "http://%s:%s" % (head_vars["ansible_host"], lane["serve"]["api_port"])
    state, verdict = seen["state"], seen["state"].get("verdict") or {}
    assert state.get("mode") == "watching" and state.get("strikes") == 0, state
    # the first window has no /metrics pair yet: unknown until then, never an agent error or a restart
    assert verdict.get("verdict") in ("unknown", "idle", "progressing"), verdict
    assert verdict.get("action") == "none" and not verdict.get("cause", "").startswith("agent error"), verdict
    assert (verdict.get("canary") or {}).get("ok") is True, verdict
    return seen


def http_json(url, payload=None, timeout=120):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as resp:
        body = resp.read().decode()
        return resp.status, (json.loads(body) if body.strip().startswith(("{", "[")) else body)


@pytest.fixture(scope="session")
def root():
    return ROOT
