"""Helpers for end-to-end runs on the simulated fleet, driven through ansible-runner."""
import json
import os
import subprocess
import urllib.request

import ansible_runner
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_playbook(playbook, inventory, tmp_dir, extravars=None, tags=None, check=False):
    """Run a playbook from the checkout; return the ansible-runner Runner (status, rc, stats, events)."""
    cmdline = []
    if tags:
        cmdline += ["--tags", tags]
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


def runner_output(runner):
    return runner.stdout.read() if hasattr(runner.stdout, "read") else ""


def total(stats, key):
    return sum((stats or {}).get(key, {}).values())


def node_docker(node, *args):
    """Run the docker CLI of a simulated node (its own dockerd) from the build machine."""
    proc = subprocess.run(["docker", "exec", node, "docker"] + list(args), capture_output=True, text=True, timeout=120,
                          check=False)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


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
