#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rendezvous_listen
short_description: Listen once on the rendezvous master address and record which peers connect
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Binds a TCP socket to O(address):O(port), accepts connections until O(peers) arrived or O(timeout) seconds
    passed, closes each at once and returns the source address of every connection. Nothing is left listening.
  - Used by C(rdma_fabric) on the head before any rank starts (catalogue gloo_fullmesh), run with C(async) while
    the workers connect with C(ansible.builtin.wait_for).
  - A port that cannot be bound is a result, not a failure (RV(bound=false) with RV(errno)); errno 98 means the
    port is taken, and the role then asks C(dgxspark.vllm.port_owner) who holds it.
  - Standard library only.
options:
  address:
    description: IPv4 address of this node to bind (the rendezvous master address).
    type: str
    required: true
  port:
    description: TCP port (the lane's C(serve.master_port)).
    type: int
    required: true
  peers:
    description: How many connections to wait for (the number of worker ranks).
    type: int
    required: true
  timeout:
    description: Seconds to wait for them at most.
    type: float
    default: 30
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
notes:
  - It changes nothing on the node; it holds the port only while it listens.
"""

EXAMPLES = r"""
- name: Listen on the master address while the workers connect
  dgxspark.vllm.rendezvous_listen:
    address: 198.18.10.10
    port: 29501
    peers: 1
    timeout: 30
  async: 45
  poll: 0
  register: listener
"""

RETURN = r"""
bound:
  description: Whether the port could be bound.
  returned: always
  type: bool
peers:
  description: Source IPv4 address of each connection, in arrival order (empty when not bound).
  returned: always
  type: list
  elements: str
errno:
  description: The bind error number (98 = address in use, 99 = not an address of this node).
  returned: when RV(bound) is false
  type: int
error:
  description: The bind error text.
  returned: when RV(bound) is false
  type: str
"""

import errno as _errno
import socket
import time

from ansible.module_utils.basic import AnsibleModule


def listen(address, port, want, limit, clock=time.time):
    """Bind, accept up to `want` connections within `limit` seconds, close; return the result dict."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((address, port))
    except (OSError, socket.error) as e:
        srv.close()
        return {"bound": False, "errno": e.errno or _errno.EINVAL, "error": str(e), "peers": []}
    peers = []
    try:
        srv.listen(16)
        deadline = clock() + limit
        while len(peers) < want and clock() < deadline:
            srv.settimeout(max(0.1, deadline - clock()))
            try:
                conn, peer = srv.accept()
            except socket.timeout:
                break
            peers.append(peer[0])
            conn.close()
    finally:
        srv.close()
    return {"bound": True, "peers": peers}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str", required=True),
            port=dict(type="int", required=True),
            peers=dict(type="int", required=True),
            timeout=dict(type="float", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["port"] < 65536:
        module.fail_json(msg="port %s is not a TCP port (1-65535); fix serve.master_port in the lane" % p["port"])
    if p["peers"] < 0 or p["timeout"] <= 0:
        module.fail_json(msg="peers must be >= 0 and timeout > 0 (got peers=%s, timeout=%s)" % (p["peers"], p["timeout"]))
    module.exit_json(changed=False, **listen(p["address"], p["port"], p["peers"], p["timeout"]))


if __name__ == "__main__":
    main()
