# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""model_weights filters: the NFS export line (exports_line, needs_crossmnt) and the opt-in full
verification's comparison (full_hash_problems); the logic is in module_utils/weights.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import (
    WeightsError, exports_line, format_problems, full_hash_problems, needs_crossmnt)


def model_weights_exports_line(path, clients, mountpoints=None, crossmnt="auto"):
    """path: exported directory; clients: CIDRs; mountpoints: findmnt targets; crossmnt: auto|true|false."""
    mode = str(crossmnt).lower()
    if mode not in ("auto", "true", "yes", "false", "no"):
        raise AnsibleFilterError("model_weights_exports_line: crossmnt is %r; use auto, true or false" % (crossmnt,))
    cross = mode in ("true", "yes") or (mode == "auto" and needs_crossmnt(mountpoints or [], path))
    try:
        return exports_line(path, list(clients or []), crossmnt=cross)
    except WeightsError as e:
        raise AnsibleFilterError(str(e))


def weights_full_hash_problems(node_hashes, owner_hashes, node, owner):
    if not isinstance(node_hashes, dict) or not isinstance(owner_hashes, dict):
        raise AnsibleFilterError("weights_full_hash_problems: expected two mappings '<artifact>/<file>' -> sha256, got "
                                 "%s and %s" % (type(node_hashes).__name__, type(owner_hashes).__name__))
    return [format_problems([p]) for p in full_hash_problems(owner_hashes, node_hashes, node, owner)]


class FilterModule(object):
    def filters(self):
        return {"model_weights_exports_line": model_weights_exports_line,
                "weights_full_hash_problems": weights_full_hash_problems}
