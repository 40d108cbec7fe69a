#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: weights_manifest
short_description: Write or verify the manifest of a model checkpoint (and its drafter)
version_added: 0.1.0
description:
  - On the weights owner (O(state=written)) lists every file of the checkpoint directory with its
    size in bytes, every shard named by C(model.safetensors.index.json), and the sha256 of every
    non-weight file (config, tokenizer, chat templates, index). For the drafter every file is
    hashed, weights included (catalogue weights_mismatch).
  - On every other node (O(state=verified)) compares the directory with the owner's manifest and
    reports each difference with node, file, expected and found value (catalogue file_not_found).
  - Padding rule shared with C(tp_pad) and C(drafter_pad) - when C(X.orig) exists (their one-time
    backup of a file C(X) they rewrite, for example C(config.json.orig)) it is the released file and
    stands for C(X) both when writing and when verifying, so a padded node still verifies and nothing
    fights the padding. C(*.orig) files are never listed; hidden entries (C(.cache)) are skipped.
  - Optionally sets files to 0644 and directories to 0755 so a root-squashed NFS reader can open
    them (catalogue file_not_found; docs/weights.md).
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  path:
    description: Checkpoint directory (the same path on every node).
    type: path
    required: true
  drafter_path:
    description: Drafter directory; omit when the lane has no drafter.
    type: path
  state:
    description:
      - V(written) builds the manifest from this node's copy and writes O(manifest_path).
      - V(verified) compares this node's copies with O(expected).
    type: str
    choices: [written, verified]
    default: verified
  manifest_path:
    description: Where O(state=written) stores the manifest (JSON, mode 0644). Keep it outside O(path).
    type: path
  expected:
    description: The owner's manifest (the RV(manifest) returned on the owner). Required for O(state=verified).
    type: dict
  repo_id:
    description: Repository id recorded in the manifest.
    type: str
  revision:
    description: Revision recorded in the manifest.
    type: str
  drafter_repo_id:
    description: Drafter repository id recorded in the manifest.
    type: str
  drafter_revision:
    description: Drafter revision recorded in the manifest.
    type: str
  fix_modes:
    description: Set files to 0644 and directories to 0755 before checking (reported as a change).
    type: bool
    default: false
  fail_on_mismatch:
    description: Fail when O(state=verified) finds a difference; V(false) returns RV(problems) and RV(plan) instead.
    type: bool
    default: true
  space_margin_gib:
    description:
      - With O(state=verified), refuse (fail) when the files of RV(plan) plus this many GiB (1024^3 bytes) do not fit
        in the free space of the filesystem(s) of O(path) and O(drafter_path), before anything is copied (catalogue
        disk_full). Sizes come from the owner's manifest; a replaced file counts in full (the copy writes it beside
        the old one, then renames). Omit to skip the check.
    type: float
  node:
    description: Name used in messages (the inventory host name); the node's host name when omitted.
    type: str
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reads and compares in check mode; the manifest file and modes are not written.
  diff_mode:
    support: partial
    details: Shows the manifest sha256 before and after for O(state=written).
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Write the owner's manifest
  dgxspark.vllm.weights_manifest:
    path: /var/tmp/models/GLM-5.3-Flash-NVFP4-redhat
    drafter_path: /var/tmp/models/GLM-5.3-Flash-DFlash2
    state: written
    manifest_path: /var/lib/dgxspark-vllm/weights-manifest.json
    fix_modes: true
  register: owner_manifest

- name: Verify a worker against it
  dgxspark.vllm.weights_manifest:
    path: /var/tmp/models/GLM-5.3-Flash-NVFP4-redhat
    drafter_path: /var/tmp/models/GLM-5.3-Flash-DFlash2
    state: verified
    expected: "{{ owner_manifest.manifest }}"
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
manifest:
  description: The owner's manifest (written) or the expected one (verified).
  returned: always
  type: dict
  sample: {"format": 1, "artifacts": {"checkpoint": {"root": "/var/tmp/models/tiny-glm",
           "shards": ["model.safetensors"], "files": {"config.json": {"size": 702, "sha256": "9f0c..."}}}}}
sha256:
  description: sha256 of the canonical JSON of the manifest (the fact C(model_weights_manifest_sha256)).
  returned: always
  type: str
artifact_sha256:
  description: Per directory (C(checkpoint), C(drafter)), the sha256 of its canonical manifest entry (the report's per-rank values).
  returned: always
  type: dict
  sample: {"checkpoint": "5b1f...", "drafter": "c03e..."}
problems:
  description: Differences found, each with node, artifact, file, item (present, size, sha256, mode), expected, actual, fix.
  returned: always
  type: list
  elements: dict
plan:
  description: Per artifact (C(checkpoint), C(drafter)), the sorted list of file names (never C(.orig)) to copy
    again from the owner; every file when the directory is missing. Mode-only problems are not listed.
  returned: always
  type: dict
  sample: {"checkpoint": ["model-00002-of-00002.safetensors"]}
space:
  description: With O(space_margin_gib) and a non-empty RV(plan), the free space measured per directory
    (C({path, probe, device, free_bytes})).
  returned: when checked
  type: dict
stale_backups:
  description: Absolute paths of this node's C(X.orig) files for files C(X) in RV(plan); the copy removes them
    before fetching the owner's C(X) (and C(X.orig) when the owner has one).
  returned: always
  type: list
  elements: str
modes_fixed:
  description: Paths whose mode was (or in check mode would be) changed.
  returned: always
  type: list
  elements: str
"""

import json
import os
import platform
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import (
    ORIG_SUFFIX, WeightsError, artifact_sha256s, build_manifest, canonical, fix_modes, format_problems, manifest_sha256,
    mode_problems, transfer_plan, verify_manifest, walk_tree)
from ansible_collections.dgxspark.vllm.plugins.module_utils.space import probe_path, weights_space_problems


def _roots(params):
    roots = {"checkpoint": params["path"]}
    if params["drafter_path"]:
        roots["drafter"] = params["drafter_path"]
    return roots


def _modes(module, roots, node):
    """Mode problems per root; fixed unless check mode. Returns (fixed, remaining problems)."""
    fixed, remaining = [], []
    for name, root in sorted(roots.items()):
        if not os.path.isdir(root):
            continue
        if module.params["fix_modes"]:
            found = mode_problems(root, node, name)
            if found and not module.check_mode:
                fix_modes(root)
            fixed.extend("%s/%s" % (root, p["file"]) for p in found)
        else:
            files, _d = walk_tree(root)
            remaining.extend(mode_problems(root, node, name, files))
    return fixed, remaining


def _write(module, roots, node):
    p = module.params
    if not p["manifest_path"]:
        module.fail_json(msg="manifest_path is required with state=written")
    fixed, mode_left = _modes(module, roots, node)
    spec = {"checkpoint": {"root": roots["checkpoint"], "repo_id": p["repo_id"], "revision": p["revision"]}}
    if "drafter" in roots:
        spec["drafter"] = {"root": roots["drafter"], "hash_all": True, "repo_id": p["drafter_repo_id"],
                           "revision": p["drafter_revision"]}
    manifest = build_manifest(spec)
    text = canonical(manifest) + "\n"
    digest = manifest_sha256(manifest)
    before = None
    try:
        with open(p["manifest_path"]) as f:
            old = f.read()
        before = manifest_sha256(json.loads(old))
    except (IOError, OSError, ValueError):
        old = None
    changed = old != text or bool(fixed)
    if old != text and not module.check_mode:
        d = os.path.dirname(p["manifest_path"]) or "."
        if not os.path.isdir(d):
            os.makedirs(d, 0o755)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".manifest-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, p["manifest_path"])
    module.exit_json(changed=changed, manifest=manifest, sha256=digest, artifact_sha256=artifact_sha256s(manifest),
                     problems=mode_left, plan={},
                     modes_fixed=fixed, stale_backups=[], diff={"before": {"sha256": before}, "after": {"sha256": digest}})


def _verify(module, roots, node):
    p = module.params
    expected = p["expected"]
    if not expected:
        module.fail_json(msg="expected (the owner's manifest) is required with state=verified")
    fixed, mode_left = _modes(module, roots, node)
    problems = verify_manifest(expected, node, roots) + mode_left
    plan = transfer_plan(problems, expected)
    # padding backups of files about to be replaced: the copy removes them first (padding rule)
    stale = sorted(os.path.join(roots[name], rel + ORIG_SUFFIX) for name, rels in plan.items()
                   for rel in rels if name in roots and os.path.isfile(os.path.join(roots[name], rel + ORIG_SUFFIX)))
    result = dict(changed=bool(fixed), manifest=expected, sha256=manifest_sha256(expected),
                  artifact_sha256=artifact_sha256s(expected),
                  problems=problems, plan=plan, modes_fixed=fixed, stale_backups=stale)
    if plan and p["space_margin_gib"] is not None:
        probes = dict((roots[name], probe_path(roots[name])) for name in plan if name in roots)
        short = weights_space_problems(node, dict((k, v) for k, v in plan.items() if k in roots), expected, roots,
                                       probes, p["space_margin_gib"])
        result["space"] = probes
        if short:
            module.fail_json(msg="not copying the weights: %s" % " ".join(short), **result)
    if problems and p["fail_on_mismatch"]:
        module.fail_json(msg="weights differ from the owner's manifest before launch: %s"
                         % format_problems(problems), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            drafter_path=dict(type="path"),
            state=dict(type="str", choices=["written", "verified"], default="verified"),
            manifest_path=dict(type="path"),
            expected=dict(type="dict"),
            repo_id=dict(type="str"),
            revision=dict(type="str"),
            drafter_repo_id=dict(type="str"),
            drafter_revision=dict(type="str"),
            fix_modes=dict(type="bool", default=False),
            fail_on_mismatch=dict(type="bool", default=True),
            node=dict(type="str"),
            space_margin_gib=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    node = module.params["node"] or platform.node()
    roots = _roots(module.params)
    try:
        if module.params["state"] == "written":
            _write(module, roots, node)
        else:
            _verify(module, roots, node)
    except WeightsError as e:
        module.fail_json(msg="%s: %s" % (node, e))


if __name__ == "__main__":
    main()
