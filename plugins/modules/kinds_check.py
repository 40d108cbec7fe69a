#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kinds_check
short_description: Check every option a role declares by its kind, on the controller
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - An action plugin (runs on the controller only, contacts no node). Reads the calling role's
    C(meta/kinds.yml) (option -> kind) and checks the value of each option that is set, after templating,
    with C(plugins/module_utils/kinds.py) (docs/inputs.md lists the kinds and their rules).
  - Types are checked before ranges (a bool, NaN, infinity, a float where an integer is meant and a string of
    digits for a number are refused), strings must match their kind's full-string rule, be printable and
    within the kind's length bound.
  - Fails with one message per bad value naming the host, the option, the value (C(<redacted>) for a secret),
    the rule and the fix. A value that cannot be templated yet (it reads node facts) is listed in
    RV(unresolved) and left to the role.
options:
  file:
    description: A kinds file to read instead of the calling role's C(meta/kinds.yml).
    type: path
  options:
    description: Check only these options.
    type: list
    elements: str
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Every option of this role by its kind
  dgxspark.vllm.kinds_check:
"""

RETURN = r"""
checked:
  description: The number of options declared.
  returned: always
  type: int
errors:
  description: One message per value its kind refuses.
  returned: always
  type: list
  elements: str
unresolved:
  description: Options whose value could not be templated on the controller (they read node facts).
  returned: always
  type: list
  elements: str
"""
