"""unit_verify with this machine's systemd-analyze (skipped where it is absent); a node without it is simulated by
get_bin_path finding nothing."""
import shutil

import pytest
from ansible.module_utils import basic

from ansible_collections.dgxspark.vllm.plugins.modules import unit_verify
from tests.unit.plugins.modules.utils import run_module

UNIT = """[Unit]
Description=test unit

[Service]
Type=simple
ExecStart=/bin/sh -c true

[Install]
WantedBy=multi-user.target
"""
needs = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                           reason="systemd-analyze is not installed on this controller (Debian: package systemd)")


@needs
def test_a_valid_unit_is_verified():
    result, failed = run_module(unit_verify.main, {"content": UNIT, "name": "dgxspark-test.service"})
    assert not failed and result["verified"] and result["problems"] == [] and not result["changed"]


@needs
def test_an_ignored_setting_fails_the_unit_with_its_line():
    result, failed = run_module(unit_verify.main, {"content": UNIT.replace("Type=simple", "Type=simple\nNoSuchKey=1"),
                                                   "name": "dgxspark-test.service"})
    assert failed and not result["verified"]
    assert result["problems"] == ["systemd-analyze verify: dgxspark-test.service:6: Unknown key 'NoSuchKey' in "
                                  "section [Service], ignoring."]


def test_a_file_name_without_a_unit_type_is_refused():
    result, failed = run_module(unit_verify.main, {"content": UNIT, "name": "dgxspark-test"})
    assert failed and "type suffix" in result["msg"]


def test_a_node_without_systemd_analyze_is_not_failed(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    result, failed = run_module(unit_verify.main, {"content": UNIT, "name": "dgxspark-test.service"})
    assert not failed and result["verified"] is False and "not installed" in result["reason"]
