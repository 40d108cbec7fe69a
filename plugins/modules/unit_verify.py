#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: unit_verify
short_description: Check a rendered systemd unit with systemd-analyze verify before it is installed
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Writes O(content) as O(name) into a new temporary directory on the node, runs
    C(systemd-analyze verify --man=no) on it (no shell) and removes the directory; the installed unit is not touched.
  - C(systemd-analyze) exits 0 on a setting it cannot parse (it prints C(..., ignoring.)), so every line it
    prints about this unit counts as a problem, as does a non-zero exit (for example a program in C(ExecStart=)
    that is not executable on this node). Lines about other units of the node are returned in RV(output) only.
  - A node without C(systemd-analyze) is not failed; RV(verified) is false and RV(reason) says why.
  - The second check of a unit after the controller's C(unit_lines_problems) (exactly the intended settings);
    source of the rule C(plugins/module_utils/escape.py), docs/inputs.md.
options:
  content:
    description: The rendered unit file.
    type: str
    required: true
  name:
    description: The unit file name with its type suffix, for example C(dgxspark-vllm-watchdog.service).
    type: str
    required: true
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: The unit passes systemd-analyze verify
  dgxspark.vllm.unit_verify:
    content: "{{ lookup('ansible.builtin.template', 'my.service.j2') }}"
    name: my.service
"""

RETURN = r"""
verified:
  description: True when systemd-analyze ran and found nothing; false when the node lacks it.
  returned: always
  type: bool
reason:
  description: Why the unit was not verified (empty when it was).
  returned: always
  type: str
problems:
  description: One line per problem systemd-analyze reported about this unit.
  returned: always
  type: list
  elements: str
output:
  description: Everything systemd-analyze printed.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.escape import EscapeError, systemd_verify


def main():
    module = AnsibleModule(
        argument_spec=dict(content=dict(type="str", required=True), name=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    analyze = module.get_bin_path("systemd-analyze")
    if not analyze:
        module.exit_json(changed=False, verified=False, problems=[], output="",
                         reason="systemd-analyze is not installed on this node; the unit was not verified")
    try:
        problems, output = systemd_verify(module.params["content"], module.params["name"],
                                          module.run_command, analyze)
    except EscapeError as e:
        module.fail_json(msg=str(e))
    if problems:
        module.fail_json(msg="%s: %s; fix the template or the value that reached it, the unit was not installed"
                         % (module.params["name"], "; ".join(problems)), problems=problems, output=output,
                         verified=False, reason="")
    module.exit_json(changed=False, verified=True, problems=[], output=output, reason="")


if __name__ == "__main__":
    main()
