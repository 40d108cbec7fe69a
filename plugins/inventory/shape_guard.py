# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Refuse a YAML inventory, or its group_vars/host_vars, whose shape Ansible would hang on or misread."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: shape_guard
short_description: Refuses an inventory with an alias bomb, a key given twice or a runaway nesting
version_added: 0.2.0
author: dgxspark.vllm maintainers (@dgxspark)
description:
  - >-
    Listed first in the checkout's C(ansible.cfg) (C([inventory] enable_plugins)). For each inventory source it
    reads the file, and the YAML files of C(group_vars/) and C(host_vars/) beside it, as a node graph
    (module_utils/yaml_shape.py): aliases that expand to more than 100000 values (Ansible's own YAML plugin
    hangs expanding them), a key given twice in one mapping (Ansible keeps the last and only warns), nesting
    deeper than 64 levels.
  - A clean source is left to the other plugins (it does not claim it). A source with a problem is claimed and
    left empty, so no later plugin expands it; the problems are set on the C(all) group as
    C(dgxspark_vllm_inventory_refused), which C(playbooks/controller_checks.yml) prints as its refusal.
"""

import glob
import os

from ansible.plugins.inventory import BaseInventoryPlugin

from ansible_collections.dgxspark.vllm.plugins.module_utils.yaml_shape import shape_problems

YAML_NAMES = (".yml", ".yaml", ".json", "")


def _vars_files(source):
    base = os.path.dirname(os.path.abspath(source))
    out = []
    for sub in ("group_vars", "host_vars"):
        for path in sorted(glob.glob(os.path.join(base, sub, "**"), recursive=True)):
            if os.path.isfile(path) and os.path.splitext(path)[1] in YAML_NAMES:
                out.append(path)
    return out


class InventoryModule(BaseInventoryPlugin):
    NAME = "dgxspark.vllm.shape_guard"

    def __init__(self):
        super(InventoryModule, self).__init__()
        self._problems = {}

    def verify_file(self, path):
        if not os.path.isfile(path):
            return False
        problems = []
        for one in [path] + _vars_files(path):
            problems += shape_problems(one)
        self._problems[path] = problems
        return bool(problems)

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache=cache)
        # No host is added: the run's first play refuses it with these messages.
        earlier = inventory.groups["all"].vars.get("dgxspark_vllm_inventory_refused") or []
        inventory.set_variable("all", "dgxspark_vllm_inventory_refused", earlier + self._problems.get(path, []))
