# -*- coding: utf-8 -*-
"""A playbook run's hold on the watchdog (module_utils/lifecycle.py hold_record, hold_state, group_restart_wait_s),
the filter that writes it and the watchdog program that reads it (roles/vllm_watchdog/files)."""

from __future__ import absolute_import, division, print_function

import importlib.machinery
import importlib.util
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.vllm_group import vllm_group_hold
from ansible_collections.dgxspark.vllm.plugins.module_utils import health, lifecycle, verdict
from tests.unit.conftest import ROOT

NOW = 1796558400.0  # 2026-12-06T12:00:00Z


def shared():
    with open(os.path.join(ROOT, "roles", "shared_defaults", "defaults", "main.yml")) as f:
        return yaml.safe_load(f)


def test_a_run_hold_lapses_after_its_ttl():
    hold = lifecycle.hold_record("ansible-playbook serve", NOW, 600)
    assert hold == {"by": "ansible-playbook serve", "since": NOW, "ttl_s": 600.0, "covers": "run", "expires": NOW + 600}
    held, left, why = lifecycle.hold_state(hold, NOW + 599.5)
    assert held and left == 0.5 and "ansible-playbook serve" in why
    held, left, why = lifecycle.hold_state(hold, NOW + 600)
    assert not held and left == 0.0 and why == "hold by ansible-playbook serve lapsed 0 s ago"
    assert lifecycle.hold_state(hold, NOW + 4000)[2] == "hold by ansible-playbook serve lapsed 3400 s ago"


def test_the_restart_hold_adds_the_step_deadlines_vllm_ranks_passes():
    d = shared()
    for nodes in (2, 3, 4):
        wait = lifecycle.group_restart_wait_s(nodes, d["node_prep_settle_timeout_s"], d["vllm_ranks_worker_wait_timeout"],
                                              d["vllm_ranks_head_wait_timeout"])
        assert wait == (nodes * d["node_prep_settle_timeout_s"] + (nodes - 1) * d["vllm_ranks_worker_wait_timeout"]
                        + d["vllm_ranks_head_wait_timeout"])
        hold = lifecycle.hold_record("x", NOW, 600, "group_restart", wait)
        assert hold["ttl_s"] == 600 + wait and hold["covers"] == "group_restart"
        assert lifecycle.hold_state(hold, NOW + 600 + wait - 1)[0] and not lifecycle.hold_state(hold, NOW + 600 + wait)[0]
    # covers run ignores a restart's wait: the hold is the base alone
    assert lifecycle.hold_record("x", NOW, 600, "run", 5000)["ttl_s"] == 600.0


def test_a_renewal_moves_the_end():
    first = lifecycle.hold_record("x", NOW, 600)
    renewed = lifecycle.hold_record("x", NOW + 500, 600)
    assert not lifecycle.hold_state(first, NOW + 700)[0]
    assert lifecycle.hold_state(renewed, NOW + 700) == (True, 400.0, "held by a playbook run (x), 400 s left")


def test_a_clock_stepped_back_cannot_stretch_a_hold():
    hold = lifecycle.hold_record("x", NOW + 86400, 600)  # written a day "ahead" of the clock read now
    held, left, _why = lifecycle.hold_state(hold, NOW)
    assert held and left == 600.0


@pytest.mark.parametrize("hold,why", [
    (None, "no hold"),
    ([], "damaged hold (not a JSON object): ignored"),
    ({"by": "x"}, "damaged hold (since, ttl_s): ignored"),
    ({"since": "yesterday", "ttl_s": 600}, "damaged hold (since, ttl_s): ignored"),
    ({"since": NOW, "ttl_s": 0}, "damaged hold (since %r, ttl_s 0): ignored" % NOW),
    ({"since": NOW, "ttl_s": -5}, "damaged hold (since %r, ttl_s -5): ignored" % NOW),
    ({"since": NOW, "ttl_s": float("nan")}, "damaged hold (since %r, ttl_s nan): ignored" % NOW),
    ({"since": float("inf"), "ttl_s": 600}, "damaged hold (since inf, ttl_s 600): ignored"),
])
def test_a_missing_or_damaged_hold_does_not_hold(hold, why):
    assert lifecycle.hold_state(hold, NOW) == (False, 0.0, why)


def test_the_old_7200_s_hold_of_a_failed_run_is_read_as_written():
    """A hold an earlier version wrote (no covers, no expires) still reads by since and ttl_s."""
    assert lifecycle.hold_state({"by": "ansible-playbook serve", "since": NOW, "ttl_s": 7200.0}, NOW + 7199)[0]


@pytest.mark.parametrize("args,needle", [
    (("x", NOW, 0), "ttl must be positive"),
    (("x", NOW, 600, "forever"), "covers must be one of run, group_restart"),
])
def test_bad_hold_inputs_raise(args, needle):
    with pytest.raises(ValueError, match=needle):
        lifecycle.hold_record(*args)
    with pytest.raises(ValueError, match="at least one node"):
        lifecycle.group_restart_wait_s(0, 1, 1, 1)


def test_the_filter_writes_what_the_watchdog_reads():
    hold = vllm_group_hold("ansible-playbook serve", NOW, 600.0, "group_restart", 2, 360, 900, 600)
    assert hold["ttl_s"] == 600 + lifecycle.group_restart_wait_s(2, 360, 900, 600)
    assert vllm_group_hold("ansible-playbook site", NOW, 600.0)["ttl_s"] == 600.0
    with pytest.raises(AnsibleFilterError, match="vllm_group_hold: covers"):
        vllm_group_hold("x", NOW, 600.0, "all")


def _watchdog(tmp_path):
    path = os.path.join(ROOT, "roles", "vllm_watchdog", "files", "dgxspark-vllm-watchdog")
    loader = importlib.machinery.SourceFileLoader("dgxspark_vllm_watchdog_hold", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    cfg = {"nodes": [{"host": "h", "rank": 0}], "state_dir": str(tmp_path)}
    return mod, mod.Watchdog(cfg, verdict, health, lifecycle)


def test_the_watchdog_is_paused_by_a_live_hold_only(tmp_path, monkeypatch):
    mod, wd = _watchdog(tmp_path)
    assert wd.paused() is None
    (tmp_path / "hold.json").write_text(json.dumps(lifecycle.hold_record("ansible-playbook serve", NOW, 600)))
    monkeypatch.setattr(mod.time, "time", lambda: NOW + 10)
    assert wd.paused() == "held by a playbook run (ansible-playbook serve), 590 s left"
    monkeypatch.setattr(mod.time, "time", lambda: NOW + 601)
    assert wd.paused() is None
    (tmp_path / "hold.json").write_text("{half a hold")
    assert wd.paused() is None
