# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The descriptions of the module attributes; each module states only its support and details."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
"""

    IDEMPOTENT = r"""
options: {}
attributes:
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
"""

    # A module that only reads: extend `attributes`, `attributes.idempotent` and this; it states nothing more about them.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Only reads; runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
"""
