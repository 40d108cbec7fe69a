#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: docker_inspect
short_description: Read containers and images of this node's docker, parsed once
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs C(docker inspect --type container) and C(docker image inspect) through the docker CLI (argv, no shell) and
    returns the fields the roles of this collection decide on, parsed by C(plugins/module_utils/docker_cli.py),
    the same parser the other modules use.
  - The roles use it instead of C(community.docker.docker_container_info) and C(community.docker.docker_image_info)
    because those need the Python C(requests) library on the node; a DGX Spark node of this collection is not
    required to carry it (the simulated nodes do not).
  - An object that does not exist is returned as V(null), not as a failure.
options:
  containers:
    description: Container names to read.
    type: list
    elements: str
    default: []
  images:
    description: Image references (or ids) to read.
    type: list
    elements: str
    default: []
  docker_bin:
    description: The docker CLI to call (path or name on C(PATH)).
    type: str
    default: docker
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
notes:
  - Requires the docker CLI on the node and permission to use it.
"""

EXAMPLES = r"""
- name: Read the registry container and its image
  dgxspark.vllm.docker_inspect:
    containers: [dgxspark-registry]
    images: ["registry:2"]
  register: found

- name: Show whether the registry runs
  ansible.builtin.debug:
    msg: "{{ found.containers['dgxspark-registry'].running | default(false) }}"
"""

RETURN = r"""
containers:
  description: One entry per requested name; V(null) when there is no such container.
  returned: always
  type: dict
  contains:
    id:
      description: Container id.
      type: str
    name:
      description: Container name, without the leading slash.
      type: str
    image:
      description: The image reference the container was created from (C(Config.Image)).
      type: str
    image_id:
      description: The id of that image on this node (C(Image)).
      type: str
    status:
      description: Docker state, e.g. running, exited or created.
      type: str
    running:
      description: Whether it runs.
      type: bool
    exit_code:
      description: Exit code of the last run (0 while running).
      type: int
    oom_killed:
      description: Whether the kernel killed it for memory.
      type: bool
    started_at:
      description: Start time as docker reports it (RFC 3339, UTC).
      type: str
    finished_at:
      description: Stop time (RFC 3339, UTC).
      type: str
    labels:
      description: Container labels.
      type: dict
    env:
      description: C(Config.Env) as a dict (name to value).
      type: dict
    mounts:
      description: Mounts as a list of C(source), C(destination), C(rw) (bool) and C(type).
      type: list
      elements: dict
  sample: {dgxspark-registry: {running: true, image: "registry:2", env: {REGISTRY_HTTP_ADDR: "198.18.10.10:5000"}}}
images:
  description: One entry per requested reference; V(null) when this node does not hold the image.
  returned: always
  type: dict
  contains:
    id:
      description: Image id (local to this node; never compare it across nodes).
      type: str
    layers:
      description: RootFS diff ids (sha256 of each uncompressed layer).
      type: list
      elements: str
    repo_tags:
      description: C(RepoTags).
      type: list
      elements: str
    repo_digests:
      description: C(RepoDigests) (empty after C(docker load)).
      type: list
      elements: str
    env:
      description: C(Config.Env) as C(K=V) strings.
      type: list
      elements: str
    size:
      description: Image size in bytes.
      type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type="list", elements="str", default=[]),
            images=dict(type="list", elements="str", default=[]),
            docker_bin=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    cli = DockerCLI(module.run_command, p["docker_bin"])
    result = dict(changed=False, containers={}, images={})
    try:
        for name in p["containers"]:
            result["containers"][name] = cli.inspect_container(name)
        for ref in p["images"]:
            result["images"][ref] = cli.inspect_image(ref)
    except DockerError as e:
        module.fail_json(msg="%s. Fix: check that the deploy user can run %s on this node" % (e, p["docker_bin"]),
                         rc=e.rc, stdout=e.stdout, stderr=e.stderr, **result)
    except ValueError as e:
        module.fail_json(msg="docker inspect printed no JSON: %s" % e, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
