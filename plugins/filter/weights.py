# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NFS export line of the weights (module_utils/weights.py exports_line, needs_crossmnt)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import (
    WeightsError, exports_line, needs_crossmnt)


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


class FilterModule(object):
    def filters(self):
        return {"model_weights_exports_line": model_weights_exports_line}
