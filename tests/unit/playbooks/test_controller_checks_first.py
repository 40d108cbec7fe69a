"""Every playbook imports playbooks/controller_checks.yml before its first play (issue 29): the inventory, the lane
and the arguments are checked on the controller before any node is contacted, and a playbook added later that
forgets it fails here."""
import glob
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CHECKS = os.path.join(ROOT, "playbooks", "controller_checks.yml")
# sim_up/sim_down build and remove the simulated fleet on this machine (hosts: localhost only): they run before
# the nodes exist and read only sim_fleet_interfaces, so the lane and role checks have nothing to check yet.
EXEMPT = {"playbooks/controller_checks.yml", "playbooks/sim_up.yml", "playbooks/sim_down.yml"}


def _load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def _is_playbook(data):
    return isinstance(data, list) and data and all(
        isinstance(p, dict) and ("hosts" in p or "ansible.builtin.import_playbook" in p or "import_playbook" in p)
        for p in data)


def playbooks():
    """Every playbook of the collection: playbooks/*.yml and the checkout's top-level *.yml that are plays."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "*.yml"))):
        if _is_playbook(_load(path)):
            found.append(os.path.relpath(path, ROOT))
    return found


def first_import_reaches_checks(path, seen=()):
    """True when the first entry of path imports controller_checks.yml, directly or through its own first import."""
    first = _load(path)[0]
    target = first.get("ansible.builtin.import_playbook") or first.get("import_playbook")
    if not target or path in seen:
        return False
    target = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return target == CHECKS or first_import_reaches_checks(target, seen + (path,))


def test_the_playbook_list_is_complete():
    found = playbooks()
    # the known ones, so a glob that silently matched nothing cannot pass the test below
    for name in ("site.yml", "playbooks/site.yml", "playbooks/watchdog.yml", "playbooks/doctor.yml",
                 "playbooks/restart.yml", "playbooks/teardown.yml", "playbooks/validate.yml"):
        assert name in found, found
    assert "galaxy.yml" not in found


@pytest.mark.parametrize("playbook", [p for p in playbooks() if p not in EXEMPT])
def test_playbook_imports_controller_checks_first(playbook):
    assert first_import_reaches_checks(os.path.join(ROOT, playbook)), (
        "%s: its first entry must be `ansible.builtin.import_playbook: controller_checks.yml` (or a playbook that "
        "starts so); otherwise a bad inventory reaches the nodes or exits 0" % playbook)


def test_exemptions_are_real_playbooks_and_reach_no_node():
    for name in EXEMPT - {"playbooks/controller_checks.yml"}:
        plays = _load(os.path.join(ROOT, name))
        assert [p.get("hosts") for p in plays] == ["localhost"], name
        assert [p.get("connection") for p in plays] == ["local"], name


def test_a_playbook_without_the_import_is_caught(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("- name: x\n  hosts: vllm_head\n  tasks: []\n")
    indirect = tmp_path / "indirect.yml"
    indirect.write_text("- name: y\n  ansible.builtin.import_playbook: bad.yml\n")
    assert not first_import_reaches_checks(str(bad))
    assert not first_import_reaches_checks(str(indirect))
