# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""A playbook's own parameters and a YAML file's shape, checked on the controller (logic in module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import choice_problem as _choice
from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import pattern_problem as _pattern
from ansible_collections.dgxspark.vllm.plugins.module_utils.yaml_shape import shape_problems


def choice_problem(value, name, choices, fix):
    """'' when value is one of choices, else the refusal (a string, so an assert can test its length)."""
    if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) for c in choices):
        raise AnsibleFilterError("choice_problem: choices must be a list of strings")
    return _choice(str(name), value, list(choices), str(fix)) or ""


def pattern_problem(value, name, pattern, example, fix):
    """'' when pattern matches all of value (a string), else the refusal."""
    return _pattern(str(name), value, str(pattern), str(example), str(fix)) or ""


def yaml_shape_problems(path):
    """The shape problems of one YAML file on the controller (an alias bomb, a key given twice, deep nesting)."""
    if not isinstance(path, str):
        raise AnsibleFilterError("yaml_shape_problems: expected a file path, got %s" % type(path).__name__)
    return shape_problems(path)


class FilterModule(object):
    def filters(self):
        return {"choice_problem": choice_problem, "pattern_problem": pattern_problem,
                "yaml_shape_problems": yaml_shape_problems}
