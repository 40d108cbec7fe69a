# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""One escaping filter per file kind, and the checks of a rendered file (module_utils/escape.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import escape


def _wrap(fn):
    def run(*args):
        try:
            return fn(*[str(a) if isinstance(a, str) else a for a in args])
        except escape.EscapeError as e:
            raise AnsibleFilterError("%s: %s; fix the variable that holds it (it should have been refused by its "
                                     "kind, docs/inputs.md)" % (fn.__name__, e))
    run.__name__ = fn.__name__
    return run


def _list(value):
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def sudoers_exact_problems(text, want):
    return escape.sudoers_exact_problems(str(text), [[str(w[0]), _list(w[1])] for w in want])


def unit_lines_problems(text, keys):
    return escape.unit_lines_problems(str(text), _list(keys))


def netplan_yaml(doc):
    # Ansible hands over its own dict, list and str subclasses; PyYAML's safe dumper takes only the plain ones.
    return escape.netplan_yaml(_plain(doc))


def env_file_args(words):
    return escape.env_file_args(_list(words) if isinstance(words, (list, tuple)) else words)


def _plain(value):
    if isinstance(value, dict):
        return dict((_plain(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    # bool before int (bool is an int); tagged int, float and str subclasses become the builtins
    for t in (bool, int, float, str):
        if isinstance(value, t):
            return t(value)
    return value


class FilterModule(object):
    def filters(self):
        return {
            "sudoers_word": _wrap(escape.sudoers_word),
            "sudoers_exact_problems": sudoers_exact_problems,
            "authorized_keys_option": _wrap(escape.authorized_keys_option),
            "systemd_arg": _wrap(escape.systemd_arg),
            "systemd_value": _wrap(escape.systemd_value),
            "unit_lines_problems": unit_lines_problems,
            "exports_path": _wrap(escape.exports_path),
            "sysctl_key": _wrap(escape.sysctl_key),
            "sysctl_value": _wrap(escape.sysctl_value),
            "netplan_yaml": _wrap(netplan_yaml),
            "env_file_args": _wrap(env_file_args),
            "yaml_string": _wrap(escape.yaml_string),
            "promql_string": _wrap(escape.promql_string),
        }
