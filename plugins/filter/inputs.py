# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A playbook's own parameters, checked on the controller (logic in module_utils/inputs.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import choice_problem as _choice
from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import pattern_problem as _pattern


def choice_problem(value, name, choices, fix):
    """'' when value is one of choices, else the refusal (a string, so an assert can test its length)."""
    if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) for c in choices):
        raise AnsibleFilterError("choice_problem: choices must be a list of strings")
    return _choice(str(name), value, list(choices), str(fix)) or ""


def pattern_problem(value, name, pattern, example, fix):
    """'' when pattern matches all of value (a string), else the refusal."""
    return _pattern(str(name), value, str(pattern), str(example), str(fix)) or ""


class FilterModule(object):
    def filters(self):
        return {"choice_problem": choice_problem, "pattern_problem": pattern_problem}
