#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sysctl_holds
short_description: Check that a kernel setting written by node_prep holds (file order and the kernel's value)
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads every line that sets O(key) in C(/etc/sysctl.d), C(/run/sysctl.d), C(/usr/local/lib/sysctl.d),
    C(/usr/lib/sysctl.d), C(/lib/sysctl.d) (C(*.conf)) and C(/etc/sysctl.conf), works out which file decides the
    value at boot (C(sysctl --system) order, sysctl.d(5)), and reads the kernel's value from C(/proc/sys).
  - Fails when a file applied after O(file) sets another value, when C(/etc/sysctl.conf) does, or (with O(judged))
    when the kernel's value is not O(value). Each message names the host, the file, both values and the fix
    (catalogue swap_off; a value that did not hold across a reboot cost three boots).
  - The rule is C(module_utils/node_checks.py) C(sysctl_holds_verdict); C(module_utils/sysctl_state.py) reads the node
    the same way for a program that runs at boot (the watchdog's readiness check can call C(sysctl_holds) there).
  - Read-only.
options:
  key:
    description: The setting, dotted (C(vm.swappiness)).
    type: str
    default: vm.swappiness
  value:
    description: The value node_prep writes (compared as text, e.g. V(0)).
    type: str
    required: true
  file:
    description: The sysctl.d file node_prep writes (node_prep_sysctl_file).
    type: path
    required: true
  judged:
    description: Judge the kernel's value. V(false) on the simulated fleet, whose nodes share the build machine's kernel.
    type: bool
    default: true
  node:
    description: Host name used in messages; the node's own name when omitted.
    type: str
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: The effective vm.swappiness after a reboot
  dgxspark.vllm.sysctl_holds:
    key: vm.swappiness
    value: "0"
    file: /etc/sysctl.d/99-zz-dgxspark-vllm.conf
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
ok:
  description: Whether the value holds.
  returned: always
  type: bool
effective:
  description: The kernel's value (C(/proc/sys)), empty when unreadable.
  returned: always
  type: str
  sample: "0"
decides:
  description: The file whose line is applied last at boot, or V(null).
  returned: always
  type: str
  sample: /etc/sysctl.d/99-zz-dgxspark-vllm.conf
value:
  description: The value that file sets.
  returned: always
  type: str
errors:
  description: Messages naming host, file, both values and the fix.
  returned: always
  type: list
  elements: str
sysctl_conf:
  description: The C(/etc/sysctl.conf) line that overrides O(file) (applied after every sysctl.d file), or V(null).
  returned: always
  type: dict
  sample: {path: /etc/sysctl.conf, value: "60"}
sysctl_conf_error:
  description: >-
    The message in RV(errors) about RV(sysctl_conf), or V(null). node_prep disables that line itself right after
    this check (keeping a backup), so it judges RV(errors) without this one.
  returned: always
  type: str
msg:
  description: One line saying the kernel's value and which file decides it; on failure, the errors.
  returned: always
  type: str
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.sysctl_state import sysctl_holds


def main():
    module = AnsibleModule(
        argument_spec=dict(
            key=dict(type="str", default="vm.swappiness", no_log=False),
            value=dict(type="str", required=True),
            file=dict(type="path", required=True),
            judged=dict(type="bool", default=True),
            node=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    v = sysctl_holds(p["node"] or platform.node(), p["key"], p["value"], p["file"], p["judged"])
    v.pop("check", None)
    v.pop("key", None)
    if not v["ok"]:
        v["msg"] = "; ".join(v["errors"])
        module.fail_json(changed=False, **v)
    module.exit_json(changed=False, **v)


if __name__ == "__main__":
    main()
