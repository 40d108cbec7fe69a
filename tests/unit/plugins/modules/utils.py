"""Unit-test helpers for modules, in the shape community.internal_test_tools uses.

`set_module_args` feeds arguments to AnsibleModule; `exit_json`/`fail_json` raise so a test
can read the result dict.
"""
import contextlib
import json

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    patch_module_args = None


class AnsibleExitJson(Exception):
    """Raised by the patched exit_json; .args[0] is the result."""


class AnsibleFailJson(Exception):
    """Raised by the patched fail_json; .args[0] is the result."""


@contextlib.contextmanager
def set_module_args(args):
    args = dict(args)
    args.setdefault("_ansible_remote_tmp", "/tmp")
    args.setdefault("_ansible_keep_remote_files", False)
    if patch_module_args is not None:
        with patch_module_args(args):
            yield
        return
    serialized = json.dumps({"ANSIBLE_MODULE_ARGS": args})
    old = basic._ANSIBLE_ARGS
    basic._ANSIBLE_ARGS = to_bytes(serialized)
    try:
        yield
    finally:
        basic._ANSIBLE_ARGS = old


def exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise AnsibleExitJson(kwargs)


def fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise AnsibleFailJson(kwargs)


@contextlib.contextmanager
def patched_module():
    """Patch AnsibleModule.exit_json/fail_json for the duration of a test."""
    old_exit, old_fail = basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json
    basic.AnsibleModule.exit_json = exit_json
    basic.AnsibleModule.fail_json = fail_json
    try:
        yield
    finally:
        basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json = old_exit, old_fail


def run_module(main, args):
    """Run a module's main() with args; return (result, failed)."""
    with patched_module(), set_module_args(args):
        try:
            main()
        except AnsibleExitJson as e:
            return e.args[0], False
        except AnsibleFailJson as e:
            return e.args[0], True
    raise AssertionError("module returned without exit_json/fail_json")
