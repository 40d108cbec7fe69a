#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: port_owner
short_description: Tell whether a TCP port of this node is held by a given container or by another process
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Lists the listeners of one TCP port with C(ss -H -l -t -n -p) and reads the container's main process id
    through the docker CLI (C(plugins/module_utils/docker_cli.py)).
  - A listener belongs to the container when its process is the container's main process or one of its
    descendants (walked through C(/proc/<pid>/status) C(PPid)). Used by C(rdma_fabric) when the rendezvous master
    port is taken; only the running head rank may hold it, any other process would make the head exit with
    C(Address already in use) after the workers started (catalogue gloo_fullmesh).
  - Needs root (or the same user as the listener) for C(ss -p) to show process ids.
options:
  port:
    description: TCP port number.
    type: int
    required: true
  container:
    description: Name of the container that may own the port.
    type: str
    required: true
  docker_bin:
    description: The docker CLI to call.
    type: str
    default: docker
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Who holds the master port
  dgxspark.vllm.port_owner:
    port: 29501
    container: vllm_glm53
  register: owner
"""

RETURN = r"""
listeners:
  description: The C(ss) lines of the port's listeners (empty when nothing listens).
  returned: always
  type: list
  elements: str
pids:
  description: Process ids holding the port, sorted.
  returned: always
  type: list
  elements: int
container:
  description: The container name asked about.
  returned: always
  type: str
container_running:
  description: Whether that container runs.
  returned: always
  type: bool
container_pid:
  description: Its main process id on this node (0 when it does not run).
  returned: always
  type: int
foreign_pids:
  description: Listener process ids outside the container's process tree.
  returned: always
  type: list
  elements: int
ours:
  description: True when the port has listeners and every one of them belongs to the container.
  returned: always
  type: bool
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError

PID_RE = re.compile(r"pid=(\d+)")


def parse_ss(text):
    """`ss -H -l -t -n -p` output -> (listener lines, sorted unique pids)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    pids = sorted(set(int(p) for ln in lines for p in PID_RE.findall(ln)))
    return lines, pids


def ancestry(pid, proc="/proc"):
    """pid and its parents up to (not including) pid 1, read from /proc/<pid>/status."""
    seen = []
    while pid > 1 and pid not in seen:
        seen.append(pid)
        try:
            with open("%s/%d/status" % (proc, pid)) as f:
                pid = int([ln for ln in f if ln.startswith("PPid:")][0].split()[1])
        except (IOError, OSError, IndexError, ValueError):
            break
    return seen


def main():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type="int", required=True),
            container=dict(type="str", required=True),
            docker_bin=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rc, out, err = module.run_command(["ss", "-H", "-l", "-t", "-n", "-p", "sport = :%d" % p["port"]])
    if rc != 0:
        module.fail_json(msg="ss -ltnp on this node failed (rc %s): %s; it needs iproute2's ss" % (rc, err.strip()))
    lines, pids = parse_ss(out)
    try:
        info = DockerCLI(module.run_command, p["docker_bin"]).inspect_container(p["container"])
    except DockerError as e:
        module.fail_json(msg=str(e), rc=e.rc, stderr=e.stderr)
    running = bool(info and info["running"])
    root = info["pid"] if running else 0
    foreign = [pid for pid in pids if not (root > 1 and root in ancestry(pid))]
    module.exit_json(changed=False, listeners=lines, pids=pids, container=p["container"], container_running=running,
                     container_pid=root, foreign_pids=foreign, ours=bool(lines) and bool(pids) and not foreign)


if __name__ == "__main__":
    main()
