#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_stream
short_description: Stream a docker image from this node to peer nodes over SSH, in parallel
version_added: "0.1.0"
description:
  - Runs on the node that holds the image (the head). Reads C(docker save) once, compresses it
    once and writes the same stream to one C(ssh peer 'decompress | docker load') per target at the
    same time, node to node (catalogue image_differs fan-out; never through the controller).
  - Writes progress (bytes of the saved image done, rate, ETA, per-target state) as JSON to
    O(progress_file) every few seconds so a caller running this module with C(async) can report
    it while the transfer runs.
  - The caller decides which peers need the image (those whose fingerprint differs, see
    M(dgxspark.vllm.image_fingerprint)); an empty O(targets) list is a no-op.
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  image:
    description: Image reference to save.
    type: str
    required: true
  targets:
    description: Peers to load the image into.
    type: list
    elements: dict
    required: true
    suboptions:
      host:
        description: Inventory name (used in messages and progress).
        type: str
        required: true
      address:
        description: Address to reach the peer on, normally its fabric address.
        type: str
        required: true
      user:
        description: SSH user on the peer; it must be able to run O(remote_docker).
        type: str
        required: true
      via:
        description: This node's address on the peer's subnet (recorded in the progress file only).
        type: str
  ssh_key:
    description: Private key used for the peers (a fleet-internal key kept on this node).
    type: path
    required: true
  known_hosts:
    description: known_hosts file holding the peers' host keys; host keys are checked strictly.
    type: path
    required: true
  compress:
    description: Compressor for the stream; the same tool must exist on the peers.
    type: str
    choices: [zstd, gzip, none]
    default: zstd
  compress_level:
    description: Compression level (zstd 1-19, gzip 1-9).
    type: int
    default: 3
  remote_docker:
    description: Docker command on the peers (e.g. V(docker), or V(sudo -n docker)).
    type: str
    default: docker
  progress_file:
    description: Where to write the progress JSON; the directory must exist.
    type: path
    required: true
  chunk_bytes:
    description: Read size of the stream, in bytes.
    type: int
    default: 4194304
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reports the targets it would write to without transferring.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Always loads into every target given; the caller passes only peers that differ.
"""

EXAMPLES = r"""
- name: Stream the engine image to the workers
  dgxspark.vllm.image_stream:
    image: dgxspark-sim/vllm-cpu:0.32.0
    targets:
      - {host: spark-sim-1, address: 198.18.11.11, user: spark}
    ssh_key: /var/lib/dgxspark-vllm/image_sync/id_ed25519
    known_hosts: /var/lib/dgxspark-vllm/image_sync/known_hosts
    progress_file: /var/lib/dgxspark-vllm/image_sync/progress.json
  async: 7200
  poll: 0
"""

RETURN = r"""
bytes:
  description: Bytes of C(docker save) output read (uncompressed).
  returned: always
  type: int
compressed_bytes:
  description: Bytes written to each peer.
  returned: always
  type: int
seconds:
  description: Wall time of the transfer, in seconds.
  returned: always
  type: float
targets:
  description: Per target host, C(ok) or the error seen.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError
from ansible_collections.dgxspark.vllm.plugins.module_utils.image_stream import stream_image


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            targets=dict(type="list", elements="dict", required=True, options=dict(
                host=dict(type="str", required=True),
                address=dict(type="str", required=True),
                user=dict(type="str", required=True),
                via=dict(type="str"),
            )),
            ssh_key=dict(type="path", required=True, no_log=False),
            known_hosts=dict(type="path", required=True),
            compress=dict(type="str", choices=["zstd", "gzip", "none"], default="zstd"),
            compress_level=dict(type="int", default=3),
            remote_docker=dict(type="str", default="docker"),
            progress_file=dict(type="path", required=True),
            chunk_bytes=dict(type="int", default=4 * 1024 * 1024),
        ),
        supports_check_mode=True,
    )
    p = module.params
    hosts = [t["host"] for t in p["targets"]]
    result = dict(changed=bool(hosts), bytes=0, compressed_bytes=0, seconds=0.0,
                  targets=dict((h, "pending") for h in hosts))
    if not hosts or module.check_mode:
        module.exit_json(**result)

    cli = DockerCLI(module.run_command, module.get_bin_path("docker", required=True))
    try:
        info = cli.inspect_image(p["image"])
    except DockerError as e:
        module.fail_json(msg="docker image inspect %s failed on this node: %s" % (p["image"], e), rc=e.rc,
                         stdout=e.stdout, stderr=e.stderr)
    if info is None:
        module.fail_json(msg="image %s is not on this node, nothing to stream" % p["image"])
    total = int(info["size"] or 0)
    docker = cli.docker
    out_result, save_rc, save_err, failure = stream_image(
        docker, p["image"], p["targets"], p["ssh_key"], p["known_hosts"], p["compress"], p["compress_level"],
        p["remote_docker"], p["progress_file"], p["chunk_bytes"], total)
    result.update(out_result)
    fan_failed = any(v != "ok" for v in result["targets"].values())
    if save_rc != 0:
        module.fail_json(msg="docker save %s failed on this node: %s" % (p["image"], save_err), **result)
    if failure and not fan_failed:
        module.fail_json(msg="image stream failed: %s" % failure, **result)
    bad = dict((h, v) for h, v in result["targets"].items() if v != "ok")
    if bad:
        module.fail_json(msg="image %s did not load on %s: %s" % (
            p["image"], ", ".join(sorted(bad)), "; ".join("%s: %s" % kv for kv in sorted(bad.items()))), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
