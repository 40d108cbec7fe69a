"""Malformed lane files (a private lanes dir through preflight_lanes_dir) are refused by
playbooks/validate.yml before any node is touched (docs/lanes.md, plugins/module_utils/lane.py)."""
import os

import pytest
import yaml

from .conftest import ROOT, assert_refused_untouched, run_playbook, write_inventory


def _base():
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")) as f:
        return yaml.safe_load(f)


def _without(key):
    lane = _base()
    del lane[key]
    return yaml.safe_dump(lane)


def _nested_without(section, key):
    lane = _base()
    del lane[section][key]
    return yaml.safe_dump(lane)


# (id, lane file text, expected message fragment)
CASES = [
    ("no-serve-section", _without("serve"), "lane sim_cpu_tp2: serve: required key missing"),
    ("no-checkpoint-section", _without("checkpoint"), "lane sim_cpu_tp2: checkpoint: required key missing"),
    ("no-api-port", _nested_without("serve", "api_port"), "lane sim_cpu_tp2: serve.api_port: required key missing"),
    ("tp-size-as-string", yaml.safe_dump(dict(_base(), tensor_parallel_size="2")),
     "lane sim_cpu_tp2: tensor_parallel_size: expected int, got string ('2')"),
]


def _run(tmp_path, text):
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    (lanes / "sim_cpu_tp2.yml").write_text(text)
    inv_dir = tmp_path / "inv"
    inv_dir.mkdir()
    inv = write_inventory(inv_dir, 2, {"vllm_lane": "sim_cpu_tp2", "preflight_lanes_dir": str(lanes)})
    return run_playbook(inv, "playbooks/validate.yml")


@pytest.mark.parametrize("case,text,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_lane_file_is_refused(tmp_path, case, text, expected):
    rc, out = _run(tmp_path, text)
    assert_refused_untouched(rc, out, expected)


def test_lane_file_that_is_a_list_is_refused(tmp_path):
    # include_vars refuses it (the file is named); lane.py's "expected a mapping" is never reached.
    rc, out = _run(tmp_path, yaml.safe_dump([_base()]))
    assert_refused_untouched(rc, out, "/lanes/sim_cpu_tp2.yml must be stored as a dictionary/hash")
