# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Controller-side inventory checks (logic in module_utils/inventory.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import Undecryptable
from ansible_collections.dgxspark.vllm.plugins.module_utils.inventory import SECRET_VARIABLES
from ansible_collections.dgxspark.vllm.plugins.module_utils.inventory import inventory_problems as _problems
from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import value_type

_COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_VOCABULARY = []


def declared_variables(root=_COLLECTION):
    """Every variable the collection's roles declare: argument_specs options (all entry points) and defaults."""
    if _VOCABULARY and root == _COLLECTION:
        return _VOCABULARY
    names = set()
    for path in glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            specs = (yaml.safe_load(f) or {}).get("argument_specs") or {}
        for entry in specs.values():
            names.update((entry or {}).get("options") or {})
    for path in glob.glob(os.path.join(root, "roles", "*", "defaults", "main.yml")):
        with open(path) as f:
            names.update(yaml.safe_load(f) or {})
    out = sorted(names)
    if root == _COLLECTION:
        _VOCABULARY[:] = out
    return out


def _secrets(host_vars):
    """The secrets of one host, read here so that one that does not decrypt is named, not a template error."""
    out = {}
    for name in SECRET_VARIABLES:
        try:
            value = host_vars.get(name)
            out[name] = None if value is None else str(value)
        except Exception:  # pylint: disable=broad-except  # a vault error's type differs between Ansible versions
            out[name] = Undecryptable()
    return out


def inventory_problems(hosts, sources=None, group="spark_cluster", refused=None, hostvars=None):
    if not isinstance(hosts, list):
        raise AnsibleFilterError("inventory_problems: expected a list of hosts, got %s" % value_type(hosts))
    if hostvars is not None:
        hosts = [dict(h, secrets=_secrets(hostvars[h["name"]])) for h in hosts]
    if refused is not None and not isinstance(refused, list):
        raise AnsibleFilterError("inventory_problems: refused must be a list, got %s" % value_type(refused))
    return _problems(hosts, declared_variables(), group, sources, refused)


class FilterModule(object):
    def filters(self):
        return {"inventory_problems": inventory_problems}
