"""Unreachable nodes (issue 31): the playbooks that change nodes import playbooks/reachable.yml right after the
controller checks; a node that does not answer over SSH is named in one message with what to check, and no later
play runs on any node, under --check too. The unreachable node is an SSH connection to a loopback port nothing
listens on (refused at once, no traffic leaves the machine); the other node is a local connection."""
import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from tests.unit.conftest import ROOT

CHANGING = ("site", "prepare", "distribute", "serve", "verify", "restart", "teardown")


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _run(tmp_path, check):
    port = _closed_port()
    inv = {"all": {"children": {"spark_cluster": {"hosts": {
        "node-a": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "node-b": {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "spark",
                   "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    # reachable.yml's own plays (its controller_checks import needs a lane this inventory does not have)
    with open(os.path.join(ROOT, "playbooks", "reachable.yml")) as f:
        own = [p for p in yaml.safe_load(f) if "ansible.builtin.import_playbook" not in p]
    assert [p["name"] for p in own] == ["Reachability | every node answers over SSH before any is touched"]
    later = {"name": "a later play", "hosts": "spark_cluster", "gather_facts": False,
             "tasks": [{"name": "LATER", "ansible.builtin.debug": {"msg": "must not run"}}]}
    play = own + [later]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    argv = ["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")] + (
        ["--check"] if check else [])
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False, timeout=120)
    out = json.loads(p.stdout[p.stdout.index("{"):])
    tasks = dict((t["task"]["name"], t["hosts"]) for play in out["plays"] for t in play["tasks"])
    return p.returncode, tasks, port


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_one_message_names_the_unreachable_node_and_nothing_else_runs(tmp_path, check):
    rc, tasks, port = _run(tmp_path, check)
    assert rc != 0
    ping = tasks["Reachability | Connect to every node"]
    assert ping["node-b"].get("unreachable") is True and ping["node-a"].get("ping") == "pong"
    fail = tasks["Reachability | One message naming every node that did not answer"]
    (msg,) = [r["msg"] for r in fail.values() if r.get("failed")]
    assert msg.startswith("1 of 2 nodes did not answer over SSH, so nothing ran on any node: node-b (127.0.0.1:%d as "
                          "spark: " % port), msg
    assert "node-a" not in msg
    assert "`ansible -i <your inventory> spark_cluster -m ansible.builtin.ping`" in msg
    assert "docs/catalogue.md node_unreachable" in msg
    assert "LATER" not in tasks


def test_every_playbook_that_changes_nodes_imports_it_before_its_first_play_on_a_node():
    for name in CHANGING:
        with open(os.path.join(ROOT, "playbooks", "%s.yml" % name)) as f:
            plays = yaml.safe_load(f)
        imports = [p.get("ansible.builtin.import_playbook") for p in plays]
        assert imports[0] == "controller_checks.yml" and "reachable.yml" in imports, (name, imports)
        # only controller-side plays (hosts: localhost) stand between the checks and the reachability check
        between = plays[1:imports.index("reachable.yml")]
        assert all(p.get("hosts") == "localhost" for p in between), (name, [p.get("name") for p in between])
    with open(os.path.join(ROOT, "playbooks", "doctor.yml")) as f:
        assert "reachable.yml" not in f.read()  # doctor reports an unreachable node instead of stopping
