"""vllm_watchdog's `hold` and `release` entry points (roles/vllm_watchdog/tasks/hold.yml, release.yml) run with
ansible-playbook on localhost: every call writes (renews) the hold when the watchdog is installed (its state directory
exists), with the ttl of module_utils/lifecycle.py; a node without it is no failure; a play that fails on a worker
releases the hold in its rescue, the way playbooks/serve.yml and restart.yml wrap their plays."""
import json
import os

import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle
from tests.unit.conftest import ROOT, run_local_play

TASKS = os.path.join(ROOT, "roles", "vllm_watchdog", "tasks")
PLAYBOOKS = os.path.join(ROOT, "playbooks")
# the shared values the hold reads for a group restart (roles/shared_defaults), as an inventory would set them
SHARED = {"node_prep_settle_timeout_s": 360, "vllm_ranks_worker_wait_timeout": 900, "vllm_ranks_head_wait_timeout": 600}


def _task(name):
    with open(os.path.join(TASKS, name)) as f:
        (task,) = yaml.safe_load(f)
    return task


def _run(tmp_path, state_dir, hosts=("spark-a",), **play_vars):
    hold = _task("hold.yml")
    again = dict(hold, name="the same hold again in this run")
    variables = dict(SHARED, vllm_watchdog_state_dir=str(state_dir), vllm_watchdog_head_group="all",
                     vllm_watchdog_hold_ttl_s=600, vllm_watchdog_hold_covers="run")
    variables.update(play_vars)
    rc, res, tail = run_local_play(tmp_path, list(hosts), variables, [hold, again])
    assert res, tail
    return rc, res[hold["name"]][hosts[0]], res["the same hold again in this run"][hosts[0]]


def test_installed_watchdog_is_held_and_each_call_renews(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    rc, first, again = _run(tmp_path / "run", state)
    assert rc == 0
    assert not first.get("failed") and first.get("changed") is False
    assert not again.get("skipped") and again.get("changed") is False  # renewed, still ok
    hold = json.loads((state / "hold.json").read_text())
    assert sorted(hold) == ["by", "covers", "expires", "since", "ttl_s"]
    assert hold["ttl_s"] == 600.0 and hold["covers"] == "run" and hold["expires"] == hold["since"] + 600.0
    assert hold["by"].startswith("ansible-playbook")
    assert lifecycle.hold_state(hold, hold["since"] + 599)[0] and not lifecycle.hold_state(hold, hold["since"] + 600)[0]


def test_before_the_ranks_play_the_hold_covers_the_restart(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    rc, first, _again = _run(tmp_path / "run", state, hosts=("spark-a", "spark-b"), vllm_watchdog_hold_covers="group_restart")
    assert rc == 0 and not first.get("failed"), first
    hold = json.loads((state / "hold.json").read_text())
    # two nodes: a settle on each, one worker's ready line, the head's, on top of the base
    assert hold["covers"] == "group_restart"
    assert hold["ttl_s"] == 600.0 + lifecycle.group_restart_wait_s(2, 360, 900, 600) == 600.0 + 2 * 360 + 900 + 600


def test_node_without_the_watchdog_is_no_failure(tmp_path):
    missing = tmp_path / "not-installed"
    rc, first, again = _run(tmp_path / "run", missing)
    assert rc == 0 and not first.get("failed"), first
    assert "does not exist" in first.get("msg", "")
    assert not missing.exists()
    assert not again.get("failed")


def test_a_play_failing_on_a_worker_releases_the_hold_on_the_head(tmp_path):
    """The rescue pattern of serve.yml and restart.yml: any_errors_fatal puts every host in the rescue, the head
    releases the hold, the run still fails."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "hold.json").write_text(json.dumps(lifecycle.hold_record("ansible-playbook serve", 0, 600)))
    release = _task("release.yml")
    block = {"name": "the group", "any_errors_fatal": True,
             "block": [{"name": "a rank fails", "ansible.builtin.fail": {"msg": "worker exited 1"},
                        "when": "inventory_hostname == 'spark-b'"}],
             "rescue": [release, {"name": "the run fails", "ansible.builtin.fail": {"msg": "released"}}]}
    rc, res, tail = run_local_play(tmp_path / "run", ["spark-a", "spark-b"],
                                   {"vllm_watchdog_state_dir": str(state), "vllm_watchdog_head_group": "all"}, [block])
    assert rc != 0, tail
    assert not (state / "hold.json").exists()
    assert res[release["name"]]["spark-a"].get("skipped") is not True
    assert res["the run fails"]["spark-b"]["failed"]


def _plays(name):
    with open(os.path.join(PLAYBOOKS, name)) as f:
        return [p for p in yaml.safe_load(f) if "hosts" in p]


def _imports(tasks):
    return [(t["ansible.builtin.import_role"]["name"], t["ansible.builtin.import_role"].get("tasks_from"))
            for t in tasks if "ansible.builtin.import_role" in t]


def test_every_play_that_changes_or_waits_on_the_group_releases_the_hold_when_it_fails():
    for book in ("serve.yml", "restart.yml"):
        wrapped = []
        for play in _plays(book):
            assert "roles" not in play, "%s: %s runs roles outside a rescue" % (book, play["name"])
            for task in play.get("tasks") or []:
                if "block" not in task:
                    continue
                assert play.get("any_errors_fatal") is True, play["name"]
                assert _imports(task["rescue"]) == [("dgxspark.vllm.vllm_watchdog", "release.yml")], play["name"]
                assert "ansible.builtin.fail" in task["rescue"][-1], play["name"]
                wrapped += _imports(task["block"])
        want = ["dgxspark.vllm.vllm_ranks", "dgxspark.vllm.kernel_fix", "dgxspark.vllm.vllm_health"]
        want += ["dgxspark.vllm.vllm_watchdog"] if book == "serve.yml" else []
        assert [r for r, _t in wrapped] == want, book
