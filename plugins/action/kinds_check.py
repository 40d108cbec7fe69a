# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Action kinds_check: every option a role declares in meta/kinds.yml, checked by its kind on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils import kinds


def load_declarations(path):
    """option -> kind spec from a kinds.yml file; every spec is checked to name a known kind."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    declared = data.get("kinds") or {}
    for key, spec in declared.items():
        try:
            kinds.normalise(spec)
        except ValueError as e:
            raise AnsibleError("%s: option %s: %s" % (path, key, e))
    return declared


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("file", "options"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        path = self._task.args.get("file")
        if not path:
            role = getattr(self._task, "_role", None)
            if role is None:
                result.update(failed=True, msg="kinds_check runs inside a role (or give file=)")
                return result
            path = os.path.join(role._role_path, "meta", "kinds.yml")
        declared = load_declarations(path)
        only = self._task.args.get("options")
        if only:
            declared = dict((k, v) for k, v in declared.items() if k in only)
        host = task_vars.get("inventory_hostname")
        errors, unresolved = [], []
        for key in sorted(declared):
            if key not in task_vars:
                continue
            try:
                value = self._templar.template(task_vars[key])
            except AnsibleError:
                # a value computed from node facts: the role's own tasks check it when it is known
                unresolved.append(key)
                continue
            msg = kinds.problem(declared[key], value, key, host)
            if msg:
                errors.append(msg)
        result.update(changed=False, checked=len(declared), unresolved=unresolved, errors=errors)
        if errors:
            result.update(failed=True, msg=" ".join(errors) + " Fix the variable(s) in the inventory or -e; no "
                          "node was touched.")
        return result
