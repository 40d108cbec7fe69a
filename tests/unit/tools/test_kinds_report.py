"""tools/kinds_report.py: its counts are the declarations and the suite's outcomes, counted again here from the
files, and nothing reached a file."""
import collections
import glob
import importlib.util
import os

import yaml

from tests.unit.conftest import ROOT

_spec = importlib.util.spec_from_file_location("kinds_report", os.path.join(ROOT, "tools", "kinds_report.py"))
kinds_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kinds_report)


def test_the_report_counts_every_declaration_and_nothing_reached_a_file():
    rep = kinds_report.report()
    role_kinds = collections.Counter()
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "kinds.yml")):
        with open(path) as f:
            for spec in yaml.safe_load(f)["kinds"].values():
                role_kinds[spec if isinstance(spec, str) else spec["kind"]] += 1
    with open(os.path.join(ROOT, "playbooks", "vars", "parameter_kinds.yml")) as f:
        parameters = yaml.safe_load(f)["kinds"]
    assert rep["options"]["by_source"]["role"] == sum(role_kinds.values())
    assert rep["options"]["by_source"]["playbook parameter"] == len(parameters)
    assert rep["options"]["total"] == sum(rep["options"]["by_kind"].values()) == sum(
        rep["options"]["by_source"].values())
    for kind, n in role_kinds.items():
        assert rep["options"]["by_kind"][kind] >= n, kind
    hv = rep["hostile_values"]
    assert hv["checked"] > 10 * rep["options"]["total"]
    assert hv["accepted"] == [] and hv["refused_on_controller"] == hv["checked"]
    fr = rep["file_renderings"]
    assert fr["total"] == fr["refused_by_filter"] + fr["written_inert"] + len(fr["live"])
    assert fr["live"] == [] and rep["reached_a_file"] == 0
