"""Shared helpers for the bad-input suite (issue 11).

Every inventory points at 192.0.2.0/24 (TEST-NET-1, unreachable): a check that reached a
node would print UNREACHABLE instead of the refusal the case expects.
"""
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)


def write_inventory(tmp_path, size, group_vars):
    """A head (rank 0) and size-1 workers, all on unreachable addresses; returns hosts.yml path."""
    names = ["node-%s" % chr(ord("a") + i) for i in range(size)]
    hosts = {n: {"vllm_rank": i, "ansible_host": "192.0.2.%d" % (10 + i)} for i, n in enumerate(names)}
    inv = {"spark_cluster": {"children": {
        "vllm_head": {"hosts": {names[0]: hosts[names[0]]}},
        "vllm_workers": {"hosts": {n: hosts[n] for n in names[1:]} or None}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    gv = tmp_path / "group_vars" / "spark_cluster"
    gv.mkdir(parents=True)
    (gv / "main.yml").write_text(yaml.safe_dump(group_vars))
    return str(tmp_path / "hosts.yml")


def run_playbook(inventory, playbook, tags=None, extra_vars=None):
    """Run ansible-playbook from the collection root; return (rc, whitespace-flattened output)."""
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, playbook]
    if tags:
        cmd += ["--tags", tags]
    for key, value in (extra_vars or {}).items():
        cmd += ["-e", "%s=%s" % (key, value)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_TIMEOUT="5",
               PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    # The YAML callback doubles quotes inside single-quoted strings; undo it so messages read as written.
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()).replace("''", "'")


def assert_refused_untouched(rc, out, expected):
    """The run failed, printed the expected message, contacted no node and changed nothing."""
    assert rc != 0, out
    assert expected in out, out
    assert "UNREACHABLE" not in out and "unreachable=1" not in out, "a node was contacted:\n" + out
    assert not re.search(r"changed=[1-9]", out), "something changed before the refusal:\n" + out
