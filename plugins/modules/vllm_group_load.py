#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_group_load
short_description: Record on the head that a group load began, and the deadline by which it must serve
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Writes the load record of C(module_utils/lifecycle.py) (C(load_record)) beside O(rank_spec_file) on the head
    (C(lifecycle.load_record_path)), saying when the group's ranks were started and the deadline of the health gate.
  - The watchdog reads the same file on every cycle and at its own start, so a group inside its deadline whose rank
    containers run is C(loading) and is never restarted during the load, whoever started it (docs/watchdog.md).
  - Run it once, on the head, right after the ranks were started (vllm_ranks does); a load that is not new is
    not recorded again, so a converged run (no rank started) does not call it.
options:
  rank_spec_file:
    description: The rank spec file vllm_ranks writes on the head (vllm_ranks_spec_file); the record goes beside it.
    type: path
    required: true
  deadline_s:
    description: Seconds from now by which the group must serve (the lane's C(health.ready_timeout_s)). Above 0.
    type: float
    required: true
  by:
    description: Who started the load (shown by the watchdog's journal).
    type: str
    default: vllm_ranks
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reports the record it would write, writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each call records a new load (now is its start); call it only when ranks were started.
"""

EXAMPLES = r"""
- name: The load the ranks just began, with the lane's ready timeout as its deadline
  dgxspark.vllm.vllm_group_load:
    rank_spec_file: /var/lib/dgxspark-vllm/rank.json
    deadline_s: 600
"""

RETURN = r"""
path:
  description: The record's path on the head.
  returned: always
  type: str
  sample: /var/lib/dgxspark-vllm/group-load.json
record:
  description: The record (epoch seconds C(started) and C(deadline), C(deadline_s), C(by), C(done) null).
  returned: always
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import load_record, load_record_path, write_json


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rank_spec_file=dict(type="path", required=True),
            deadline_s=dict(type="float", required=True),
            by=dict(type="str", default="vllm_ranks"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = load_record_path(p["rank_spec_file"])
    try:
        record = load_record(time.time(), p["deadline_s"], p["by"])
    except ValueError as e:
        module.fail_json(msg="%s: %s. Fix: give a deadline in seconds above 0 (the lane's health.ready_timeout_s)"
                         % (path, e), path=path, record={})
    if not os.path.isdir(os.path.dirname(path)):
        module.fail_json(msg="%s: the folder of the rank spec file does not exist. Fix: run vllm_ranks (it writes "
                         "%s) before recording a load" % (path, p["rank_spec_file"]), path=path, record=record)
    if not module.check_mode:
        write_json(path, record)
    module.exit_json(changed=True, path=path, record=record)


if __name__ == "__main__":
    main()
