#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_group_step
short_description: Run one step of the group lifecycle on this node (ready, stop, settle, start or load)
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - One node's step of the whole-group restart. The order of the steps is C(module_utils/lifecycle.py) C(plan)
    (filter C(dgxspark.vllm.vllm_group_plan)), the one sequence vllm_ranks and the watchdog both run; each step's code
    is C(module_utils/rank_node.py), which the watchdog's agent runs too, so a step behaves the same whoever starts
    the group.
  - C(ready) checks what a rank needs on this node (the rank spec file, the image, every mounted file; swap, swappiness
    and the fabric MTU when O(ready) asks).
  - C(stop) saves the rank container's C(docker logs) to O(log_dir) first, names the cause of a rank found stopped
    (the failure catalogue, C(module_utils/diagnose.py)), counts it as an unexplained death when O(count_deaths), then
    removes the container.
  - C(settle) runs the memory ritual (sync, optional swap cycle, drop caches, compact), then waits until MemAvailable
    reaches O(settle.min_available_gib) and no engine process is left; on the head it then refuses a listener on the
    lane's API or master port (O(head_ports); catalogue port_taken). It changes no configuration (reports C(ok)).
  - C(start) runs the rank from O(spec), waits for O(wait_regex) (event-driven), then verifies the launch
    (C(lifecycle.launch_errors)), that is the container C(running), its restart policy, argv (JSON flags compared as JSON), env
    and mounts as rendered; a mismatch fails naming the host, the item, both values and the fix.
  - C(load) records on the head that a load began and its deadline (C(lifecycle.load_record), beside O(rank_spec_file)),
    which the watchdog reads, so it never restarts a group that is loading.
options:
  step:
    description: The step to run.
    type: str
    required: true
    choices: [ready, stop, settle, start, load]
  host:
    description: This node's inventory name, for the messages.
    type: str
    required: true
  container:
    description:
      - The rank container's name (the lane's C(container.name)).
      - Required by C(ready), C(stop) and C(start); C(settle) and C(load) do not touch the container.
    type: str
  docker:
    description: The docker CLI.
    type: str
    default: docker
  log_dir:
    description: Where C(stop) saves the container's log (C(<container>-<log_stamp>.log)) and keeps the deaths count.
    type: path
    default: /var/log/dgxspark-vllm
  log_stamp:
    description: The stamp of the saved log (one per run, so the ranks' logs pair up); default now (UTC).
    type: str
  count_deaths:
    description: C(stop) adds an unexplained death when the container was found stopped, ends the streak when found running.
    type: bool
    default: false
  reset_deaths:
    description: C(stop) counts from 0 (after the cause was fixed).
    type: bool
    default: false
  rank_spec_file:
    description: The rank spec file on this node (C(ready) reads it when O(spec) is not given; C(load) writes its record
      beside it).
    type: path
  spec:
    description: The rendered rank spec (filter C(dgxspark.vllm.vllm_rank_spec)); required by C(start), checked by
      C(ready).
    type: dict
  wait_regex:
    description: C(start) waits until the container's log matches this (empty, running is enough).
    type: str
    default: ""
  wait_timeout:
    description: Seconds C(start) waits for O(wait_regex); a container that exits fails at once.
    type: float
    default: 600
  head_ports:
    description: On the head, C({api_port, master_port}) that C(settle) must find free; empty on a worker.
    type: dict
    default: {}
  settle:
    description: The memory ritual and settle gate (node_prep's settings C(node_prep_ritual_*), C(node_prep_settle_*)).
    type: dict
    default: {}
    suboptions:
      min_available_gib:
        description: MemAvailable floor in GiB (null, no floor).
        type: float
      timeout_s:
        description: Seconds to wait for the floor and for the last engine process to go.
        type: float
        default: 360
      delay_s:
        description: Seconds between looks.
        type: float
        default: 2
      sync:
        description: Flush dirty pages first.
        type: bool
        default: true
      swap_cycle:
        description: C(swapoff -a) and C(swapon -a) when swap is in use and MemAvailable can take it back.
        type: bool
        default: false
      drop_caches:
        description: Write 3 to C(/proc/sys/vm/drop_caches).
        type: bool
        default: true
      compact:
        description: Write 1 to C(/proc/sys/vm/compact_memory).
        type: bool
        default: true
      engine_processes:
        description: Wait until no engine process (vLLM API server, EngineCore, Worker) is left on the node; engine
          processes are known by their process name (C(VLLM::EngineCore), C(VLLM::Worker_TP1), C(vllm)), never by a
          command line that mentions the rank (module_utils/processes.py).
        type: bool
        default: true
  ready:
    description: What C(ready) checks beyond the rank spec, the image and the mounted files.
    type: dict
    default: {}
    suboptions:
      swap_required:
        description: Swap must be on.
        type: bool
        default: false
      mtu:
        description: Interface name to the minimum MTU in bytes.
        type: dict
        default: {}
  deadline_s:
    description: C(load) only, seconds from now by which the group must serve (the lane's C(health.ready_timeout_s)).
    type: float
  by:
    description: C(load) only, who started the load.
    type: str
    default: vllm_ranks
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: C(ready) runs; the other steps report the change they would make and touch nothing.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: C(stop) on a node without the container, C(ready) and C(settle) change nothing; C(start) and C(load) always act.
notes:
  - Needs root on the node (become). The swap cycle, drop caches and compaction need write access to C(/proc/sys/vm); a
    node without it (a container of the simulated fleet) skips them and says so in RV(msg).
  - The GB10 power and a real DGX OS memory behaviour are untested here (the simulated fleet has neither).
seealso:
  - module: dgxspark.vllm.vllm_rank
"""

EXAMPLES = r"""
- name: Stop this node's rank, its log saved first
  dgxspark.vllm.vllm_group_step:
    step: stop
    host: spark-1
    container: vllm_rank
    log_stamp: 20261204T000000Z
    count_deaths: true

- name: Settle the head before any rank starts
  dgxspark.vllm.vllm_group_step:
    step: settle
    host: spark-0
    container: vllm_rank
    head_ports: {api_port: 8000, master_port: 29501}
    settle: {min_available_gib: 100, timeout_s: 360}
"""

RETURN = r"""
ok:
  description: Whether the step succeeded (a failed step fails the task).
  returned: always
  type: bool
msg:
  description: What the step did or, on failure, what went wrong on which host and the fix.
  returned: always
  type: str
outcome:
  description: C(start) C(ready), C(exited), C(timeout) or C(launch_differs); C(settle) C(settled), C(not_settled),
    C(engine_memory_held) (engine processes of the old group still run; the message names each with PID and GiB),
    C(port_taken) or C(swap_refused).
  returned: when the step has one
  type: str
log_path:
  description: C(stop), the saved log on the node (null when there was no container).
  returned: step stop
  type: str
running:
  description: C(stop), whether the container was running when found (null, no container).
  returned: step stop
  type: bool
deaths:
  description: C(stop) with O(count_deaths), the unexplained deaths in a row after this stop.
  returned: step stop
  type: int
diagnosis:
  description: The failure catalogue's line for a rank found stopped or a start that did not come up.
  returned: steps stop and start
  type: str
last_errors:
  description: Error-looking lines of the saved log of a rank found stopped.
  returned: step stop
  type: list
  elements: str
mem_available_gib:
  description: C(settle), MemAvailable in GiB when the step ended.
  returned: step settle
  type: float
checks:
  description: C(ready), each check with C(check), C(ok), C(msg).
  returned: step ready
  type: list
  elements: dict
record:
  description: C(load), the load record written (epoch seconds C(started), C(deadline)).
  returned: step load
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import DockerError
from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import load_record, load_record_path, write_json
from ansible_collections.dgxspark.vllm.plugins.module_utils.rank_node import Node


def main():
    module = AnsibleModule(
        argument_spec=dict(
            step=dict(type="str", required=True, choices=["ready", "stop", "settle", "start", "load"]),
            host=dict(type="str", required=True),
            container=dict(type="str"),
            docker=dict(type="str", default="docker"),
            log_dir=dict(type="path", default="/var/log/dgxspark-vllm"),
            log_stamp=dict(type="str"),
            count_deaths=dict(type="bool", default=False),
            reset_deaths=dict(type="bool", default=False),
            rank_spec_file=dict(type="path"),
            spec=dict(type="dict"),
            wait_regex=dict(type="str", default=""),
            wait_timeout=dict(type="float", default=600),
            head_ports=dict(type="dict", default={}),
            settle=dict(type="dict", default={}, options=dict(
                min_available_gib=dict(type="float"),
                timeout_s=dict(type="float", default=360),
                delay_s=dict(type="float", default=2),
                sync=dict(type="bool", default=True),
                swap_cycle=dict(type="bool", default=False),
                drop_caches=dict(type="bool", default=True),
                compact=dict(type="bool", default=True),
                engine_processes=dict(type="bool", default=True),
            )),
            ready=dict(type="dict", default={}, options=dict(
                swap_required=dict(type="bool", default=False),
                mtu=dict(type="dict", default={}),
            )),
            deadline_s=dict(type="float"),
            by=dict(type="str", default="vllm_ranks"),
        ),
        required_if=[("step", "start", ["spec", "container"]), ("step", "stop", ["container"]),
                     ("step", "ready", ["container"]), ("step", "load", ["rank_spec_file", "deadline_s"]),
                     ("step", "ready", ["rank_spec_file", "spec"], True)],
        supports_check_mode=True,
    )
    p = module.params
    step = p["step"]
    cfg = {"host": p["host"], "container": p["container"], "docker": p["docker"], "log_dir": p["log_dir"],
           "rank_spec_file": p["rank_spec_file"], "settle": p["settle"], "ready": p["ready"]}
    if step == "start" and p["spec"].get("name") != p["container"]:
        module.fail_json(msg="%s: the spec is for container %r, the step for %r; render the spec with the "
                         "dgxspark.vllm.vllm_rank_spec filter" % (p["host"], p["spec"].get("name"), p["container"]))

    if step == "load":
        path = load_record_path(p["rank_spec_file"])
        try:
            record = load_record(time.time(), p["deadline_s"], p["by"])
        except ValueError as e:
            module.fail_json(msg="%s: %s: %s. Fix: give a deadline in seconds above 0 (the lane's "
                             "health.ready_timeout_s)" % (p["host"], path, e), ok=False)
        if not os.path.isdir(os.path.dirname(path)):
            module.fail_json(msg="%s: %s: the folder of the rank spec file does not exist. Fix: run vllm_ranks (it "
                             "writes %s) before recording a load" % (p["host"], path, p["rank_spec_file"]), ok=False)
        if not module.check_mode:
            write_json(path, record)
        module.exit_json(changed=True, ok=True, msg="load recorded in %s, deadline in %s s" % (path, p["deadline_s"]),
                         record=record, path=path)

    node = Node(cfg, module.run_command, stamp=p["log_stamp"])
    if module.check_mode and step != "ready":
        module.exit_json(changed=step in ("stop", "start"), ok=True, msg="check mode: %s not run" % step)
    try:
        if step == "ready":
            res = node.ready(spec=p["spec"])
        elif step == "stop":
            res = node.stop(count=p["count_deaths"], reset_deaths=p["reset_deaths"])
        elif step == "settle":
            res = node.settle(p["head_ports"])
            res["changed"] = False  # the ritual changes no configuration
        else:
            res = node.start(p["spec"], p["wait_regex"], p["wait_timeout"])
    except DockerError as e:
        module.fail_json(msg="%s: %s step: %s" % (p["host"], step, e), ok=False, rc=e.rc, stdout=e.stdout,
                         stderr=e.stderr)
    except (IOError, OSError, ValueError, KeyError) as e:
        module.fail_json(msg="%s: %s step: %s: %s" % (p["host"], step, type(e).__name__, e), ok=False)
    res.setdefault("changed", False)
    res.setdefault("msg", step)
    if not res["ok"]:
        module.fail_json(**res)
    module.exit_json(**res)


if __name__ == "__main__":
    main()
