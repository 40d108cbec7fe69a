"""vllm_watchdog's `hold` entry point (roles/vllm_watchdog/tasks/hold.yml) run with ansible-playbook on localhost: one
call writes the hold when the watchdog is installed (its state directory exists), a node without it is no failure,
and a second hold in the same run (site.yml imports serve.yml) is skipped."""
import json
import os

import yaml

from tests.unit.conftest import ROOT, run_local_play

HOLD = os.path.join(ROOT, "roles", "vllm_watchdog", "tasks", "hold.yml")


def _tasks():
    with open(HOLD) as f:
        (task,) = yaml.safe_load(f)
    again = dict(task, name="the same hold again in this run")
    return [task, again], task["name"]


def _run(tmp_path, state_dir):
    tasks, name = _tasks()
    rc, res, tail = run_local_play(tmp_path, ["spark-a"], {"vllm_watchdog_state_dir": str(state_dir),
                                                           "vllm_watchdog_head_group": "all",
                                                           "vllm_watchdog_hold_ttl_s": 600}, tasks)
    assert res, tail
    return rc, res[name]["spark-a"], res["the same hold again in this run"]["spark-a"]


def test_installed_watchdog_is_held_once_per_run(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    rc, first, again = _run(tmp_path / "run", state)
    assert rc == 0
    assert not first.get("failed") and first.get("changed") is False
    hold = json.loads((state / "hold.json").read_text())
    assert sorted(hold) == ["by", "since", "ttl_s"] and hold["ttl_s"] == 600.0 and hold["by"].startswith("ansible-playbook")
    assert again.get("skipped") is True


def test_node_without_the_watchdog_is_no_failure(tmp_path):
    missing = tmp_path / "not-installed"
    rc, first, again = _run(tmp_path / "run", missing)
    assert rc == 0 and not first.get("failed"), first
    assert "does not exist" in first.get("msg", "")
    assert not missing.exists()
    assert again.get("skipped") is True
