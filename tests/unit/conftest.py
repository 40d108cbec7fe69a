import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# FQCN imports (ansible_collections.dgxspark.vllm...) resolve through the self-link.
sys.path.insert(0, os.path.join(ROOT, "collections"))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


@pytest.fixture
def fixture_path():
    def _path(*parts):
        p = os.path.join(FIXTURES, *parts)
        assert os.path.exists(p), "missing fixture %s" % p
        return p
    return _path


def read_fixture(*parts, strip_comments=True):
    """Read a captured fixture; leading '# ' metadata lines are dropped (fixtures/README)."""
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    if strip_comments:
        while lines and lines[0].startswith("#"):
            lines.pop(0)
    return "".join(lines)


def run_local_play(tmp_path, hosts, play_vars, tasks, host_vars=None):
    """Run tasks of a role with ansible-playbook on local connections (one per host name), the collection on its
    path and the json callback; host_vars: inventory variables of every host (what hostvars[...] reads). Returns
    (rc, {task name: {host: result}}, stdout + stderr tail)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = {"all": {"hosts": dict((h, dict(host_vars or {})) for h in hosts),
                   "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    play = [{"hosts": "all", "gather_facts": False, "vars": play_vars, "tasks": tasks}]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
    tail = p.stdout[-3000:] + p.stderr[-3000:]
    if "{" not in p.stdout:
        return p.returncode, {}, tail
    out = json.loads(p.stdout[p.stdout.index("{"):])
    return p.returncode, dict((t["task"]["name"], t["hosts"]) for t in out["plays"][0]["tasks"]), tail


def fake_sysfs(tmp_path, tree):
    """A copy of one fake sysfs tree of tests/fixtures/rdma/link/sysfs with its class/infiniband/<hca>/device
    links made from device-links.json: the collection's tree holds no symlink to a directory (ansible-test
    sanity refuses them). Returns the copy's root."""
    import shutil
    src = os.path.join(FIXTURES, "rdma", "link", "sysfs", tree)
    root = os.path.join(str(tmp_path), "sysfs-" + tree)
    shutil.copytree(src, root)
    with open(os.path.join(src, "device-links.json")) as f:
        links = json.load(f)["links"]
    for hca, pci in links.items():
        os.makedirs(os.path.join(root, "class", "infiniband", hca), exist_ok=True)
        os.symlink(os.path.join("..", "..", "..", "bus", "pci", "devices", pci),
                   os.path.join(root, "class", "infiniband", hca, "device"))
    return root
