"""Every documented tag runs alone on a converged simulated fleet (issue 11): `site.yml --tags <tag>` for each
role tag of README.md and docs/, one at a time. Each must pass, print no undefined variable, change nothing
on the converged fleet, and actually run its own role's tasks (events of task names taken from
roles/<role>/tasks/*.yml, not all skipped): a tag that silently skips the checks it relies on fails here
(kubespray #6315, #12390: facts or variables from untagged tasks missing under a tag)."""
import glob
import os
import re

import pytest
import yaml

from conftest import ROOT, assert_serving, record, start_playbook, total

pytestmark = pytest.mark.e2e

# The role tags the README and docs document (README "Playbooks", roles/*/README.md), in site.yml's order.
TAGS = ["preflight", "node_prep", "rdma_fabric", "image_sync", "kernel_fix", "model_weights", "tp_pad",
        "vllm_ranks", "vllm_health", "vllm_bench", "vllm_watchdog"]


def documented_tags():
    found = set()
    for path in [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")) \
            + glob.glob(os.path.join(ROOT, "roles", "*", "README.md")):
        with open(path) as f:
            text = f.read()
        found |= set(re.findall(r"--tags[ =]([a-z_]+)", text))
        found |= set(re.findall(r"\btags: ([a-z_]+)", text))
    return found - {"always"}


def role_task_names(role):
    """Names of the role's tasks; preflight's lane.yml runs under every tag (always), so it does not count."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml")):
        if role == "preflight" and os.path.basename(path) == "lane.yml":
            continue
        with open(path) as f:
            stack = list(yaml.safe_load(f) or [])
        while stack:
            task = stack.pop()
            if not isinstance(task, dict):
                continue
            if task.get("name"):
                names.add(task["name"])
            for key in ("block", "rescue", "always"):
                stack.extend(task.get(key) or [])
    return names


# Tags of one step inside a role's play, documented with their own playbook: not a role tag of site.yml.
STEP_TAGS = {"node_prep_boot": "playbooks/prepare.yml"}


# Role tags run alone on the converged fleet by another scenario, which needs the role switched on: that file must
# run site.yml with the tag.
ELSEWHERE = {"vllm_monitoring": "tests/e2e/faults/test_45_watchdog.py"}


def test_the_tag_list_covers_every_documented_tag():
    documented = documented_tags() - set(STEP_TAGS)
    assert documented <= set(TAGS) | set(ELSEWHERE), documented - set(TAGS) - set(ELSEWHERE)
    for tag, path in ELSEWHERE.items():
        with open(os.path.join(ROOT, path)) as f:
            assert '"--tags", "%s"' % tag in f.read(), (tag, path)
    for tag, playbook in STEP_TAGS.items():
        with open(os.path.join(ROOT, playbook)) as f:
            assert re.search(r"tags: \[[^\]]*\b%s\b" % tag, f.read()), (tag, playbook)


@pytest.mark.parametrize("tag", TAGS)
def test_tag_runs_alone_on_a_converged_fleet(serving, tmp_path, tag):
    fleet = serving
    before = fleet.ranks()
    run = start_playbook("site.yml", tmp_path, cmdline=["--tags", tag])
    assert run.rc == 0, run.output[-6000:]
    assert "undefined" not in run.output.lower(), [ln for ln in run.output.splitlines() if "undefined" in ln.lower()]
    changed = [(ev["event_data"]["host"], ev["event_data"]["task"]) for ev in run.changed()]
    assert total(run.stats, "changed") == 0, changed
    own = role_task_names(tag)
    ran = sorted(set(ev["event_data"]["task"] for ev in run.ok() if ev["event_data"]["task"] in own))
    skipped = sorted(set(ev["event_data"]["task"] for ev in run.task_events(("runner_on_skipped",))
                         if ev["event_data"]["task"] in own))
    assert ran, "no task of role %s ran under --tags %s (skipped: %s)" % (tag, tag, skipped)
    after = fleet.ranks()
    for node, was in before.items():
        assert (after[node]["id"], after[node]["started_at"]) == (was["id"], was["started_at"]), (node, was, after[node])
    record("tag_" + tag, fault="site.yml --tags %s on the converged fleet" % tag, rc=run.rc, run_s=run.seconds,
           own_tasks_ok=len(ran), own_tasks_skipped=len(skipped), changed=changed, sample_tasks=ran[:5])


def test_fleet_serves_after_the_tag_runs(serving):
    assert_serving(serving)
