# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Load this collection's filter and action plugins once, in the controller process, before any task forks."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Loads the collection's filter and action plugins once, before the first task
version_added: 0.3.0
author: dgxspark.vllm maintainers (@dgxspark)
description:
  - >-
    Ansible runs every task for every host in a worker process forked from the controller process. A worker that
    templates one of this collection's filters has Ansible's Jinja2 plugin loader import every filter file of the
    collection (it scans them all for the name), and the worker ends with its task, so each task of each host
    paid that import again: 0.1 to 0.25 seconds of CPU a host and a task (C(jsonschema) alone is 75 ms).
  - >-
    At the start of each playbook this callback loads those files and the C(kinds_check) action plugin in the
    controller process; every worker forked afterwards inherits them. It prints nothing and changes no result.
    Measured on a 2-core machine: C(playbooks/validate.yml) on 123 hosts took 172 s of CPU without it, 63 s with it.
  - Listed in the checkout's C(ansible.cfg) (C([defaults] callbacks_enabled)). Without it every playbook runs the
    same, only slower.
requirements:
  - "enabled in ansible.cfg: C(callbacks_enabled = dgxspark.vllm.preload)"
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader

# Any one of the collection's filters: looking one up loads every filter file of the collection.
_ANY_FILTER = "dgxspark.vllm.lane_errors"
_ACTIONS = ("dgxspark.vllm.kinds_check",)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dgxspark.vllm.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        filter_loader.get(_ANY_FILTER)
        for name in _ACTIONS:
            action_loader.get(name, class_only=True)
