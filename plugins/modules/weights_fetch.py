#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: weights_fetch
short_description: Fetch a pinned Hugging Face checkpoint with huggingface_hub snapshot_download
version_added: 0.1.0
description:
  - Downloads O(repo_id) at O(revision) into O(local_dir) with C(huggingface_hub.snapshot_download),
    which resumes partial downloads.
  - O(revision) must be a 40-hex commit id; a branch or tag is refused unless O(allow_branch)
    (catalogue weights_mismatch).
  - O(allow_patterns) always includes C(*.jinja), because weight-only downloads skip the chat
    template (catalogue no_chat_template).
  - A directory already holding a finished fetch of the same repo and revision (marker file
    C(.dgxspark-fetch.json) plus every shard named by the index, non-empty) is not downloaded again.
  - Needs the C(huggingface_hub) Python package on the node running it (for example a virtualenv
    chosen with C(ansible_python_interpreter)).
  - With O(verify_sha256), after the fetch (or on a finished one) the hub's own sha256 of every LFS file
    at O(revision) (C(HfApi.model_info) with C(files_metadata=True)) is compared with this node's copy
    before any other node receives it; a mismatch fails naming the file, both sha256 and the fix.
    Files already verified are not hashed again while their size and mtime stay the same (cache
    C(.dgxspark-hub-sha256.json) in O(local_dir)).
  - Not exercised against the Hub in this project's CI (no Hub access); the argument building,
    refusals and the sha256 comparison on the hub's metadata shapes are unit-tested, the hub call
    itself is untested here.
author:
  - dgxspark.vllm maintainers (@dgxspark)
requirements:
  - huggingface_hub
options:
  repo_id:
    description: Repository id (owner/name).
    type: str
    required: true
  revision:
    description: 40-hex commit id.
    type: str
  allow_branch:
    description: Accept a branch or tag name as O(revision).
    type: bool
    default: false
  local_dir:
    description: Target directory (the checkpoint's host path).
    type: path
    required: true
  allow_patterns:
    description: Glob patterns to download; C(*.jinja) is added when absent.
    type: list
    elements: str
    default: ["*.safetensors", "*.json", "*.jinja", "*.txt", "*.model", "*.py", "*.tiktoken"]
  token:
    description: Hugging Face token (keep it in a vault); never logged.
    type: str
  max_workers:
    description: Parallel downloads.
    type: int
    default: 8
  verify_sha256:
    description: Compare every LFS file with the hub's sha256 at O(revision) (reads every shard once).
    type: bool
    default: false
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reports whether a download would happen; downloads nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Fetch the checkpoint on the owner
  dgxspark.vllm.weights_fetch:
    repo_id: RedHatAI/GLM-5.3-Flash-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /var/tmp/models/GLM-5.3-Flash-NVFP4-redhat
    token: "{{ model_weights_hf_token }}"
  no_log: true
"""

RETURN = r"""
fetched:
  description: Whether snapshot_download ran (or would run in check mode).
  returned: always
  type: bool
revision:
  description: The revision requested.
  returned: always
  type: str
allow_patterns:
  description: The patterns passed to snapshot_download.
  returned: always
  type: list
  elements: str
hub_sha256:
  description: >-
    With O(verify_sha256), C(checked) (number of LFS files compared), C(hashed) (those read in this run),
    C(files) (path -> sha256 the hub gives) and C(problems) (node, artifact, file, item, expected, actual, fix).
  returned: when O(verify_sha256) is true and not in check mode before a download
  type: dict
"""

import fnmatch
import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import redact, secret_problem
from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import (
    DEFAULT_ALLOW_PATTERNS, WeightsError, fetch_marker, format_problems, hub_lfs_files, hub_sha256_problems,
    is_complete, sha256_file, snapshot_kwargs)

MARKER = ".dgxspark-fetch.json"
HUB_CACHE = ".dgxspark-hub-sha256.json"

HF_IMPORT_ERROR = None
try:
    import huggingface_hub
except ImportError:
    huggingface_hub = None
    HF_IMPORT_ERROR = traceback.format_exc()


def _local_hashes(local_dir, names, patterns, write_cache):
    """{path: {sha256, size}} (None = missing) for the hub's LFS files the fetch would take; unchanged
    files (same size and mtime as in the cache) are not read again. Returns (local, hashed)."""
    cache_path = os.path.join(local_dir, HUB_CACHE)
    try:
        with open(cache_path) as f:
            cache = json.load(f)
    except (IOError, OSError, ValueError):
        cache = {}
    local, hashed, new_cache = {}, [], {}
    for rel in sorted(names):
        if not any(fnmatch.fnmatch(rel, pat) for pat in patterns):
            continue
        path = os.path.join(local_dir, rel)
        if not os.path.isfile(path):
            local[rel] = None
            continue
        st = os.stat(path)
        key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        old = cache.get(rel) or {}
        if old.get("size") == key["size"] and old.get("mtime_ns") == key["mtime_ns"] and old.get("sha256"):
            digest = old["sha256"]
        else:
            digest = sha256_file(path)
            hashed.append(rel)
        local[rel] = {"sha256": digest, "size": st.st_size}
        new_cache[rel] = dict(key, sha256=digest)
    if write_cache and new_cache != cache:
        with open(cache_path, "w") as f:
            json.dump(new_cache, f, sort_keys=True)
    return local, hashed


def _verify_hub(module, p, revision, result):
    try:
        info = huggingface_hub.HfApi().model_info(p["repo_id"], revision=revision, files_metadata=True,
                                                  token=p["token"] or None)
    except Exception as e:  # the hub raises many types; never print the token
        module.fail_json(msg="hub metadata of %s@%s could not be read to check the owner's copy: %s; fix the "
                         "network or token, or set model_weights_hub_verify: false" % (
                             p["repo_id"], revision, redact(str(e), p["token"])), **result)
    hub = hub_lfs_files(info.siblings)
    local, hashed = _local_hashes(p["local_dir"], hub, p["allow_patterns"], not module.check_mode)
    node = os.uname()[1]
    problems = hub_sha256_problems(hub, local, node, p["repo_id"], revision)
    result["hub_sha256"] = dict(checked=len([r for r in local if local[r]]), hashed=hashed,
                                files=dict((r, hub[r]["sha256"]) for r in local), problems=problems)
    if problems:
        module.fail_json(msg="the owner's copy differs from the hub at %s@%s, so it is not copied to any rank: %s"
                         % (p["repo_id"], revision, format_problems(problems)), **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str"),
            allow_branch=dict(type="bool", default=False),
            local_dir=dict(type="path", required=True),
            allow_patterns=dict(type="list", elements="str", default=list(DEFAULT_ALLOW_PATTERNS)),
            token=dict(type="str", no_log=True),
            max_workers=dict(type="int", default=8),
            verify_sha256=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problem = secret_problem("token (model_weights_hf_token)", p["token"])
    if problem:
        module.fail_json(msg=problem)
    try:
        kwargs = snapshot_kwargs(p["repo_id"], p["revision"], p["local_dir"], p["allow_patterns"],
                                 p["token"], p["max_workers"], p["allow_branch"])
    except WeightsError as e:
        module.fail_json(msg=str(e))
    result = dict(revision=kwargs["revision"], allow_patterns=kwargs["allow_patterns"])
    if is_complete(p["local_dir"], p["repo_id"], kwargs["revision"], MARKER):
        if p["verify_sha256"]:
            if huggingface_hub is None:
                module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=HF_IMPORT_ERROR)
            _verify_hub(module, p, kwargs["revision"], result)
        module.exit_json(changed=False, fetched=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, fetched=True, **result)
    if huggingface_hub is None:
        module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=HF_IMPORT_ERROR)
    try:
        huggingface_hub.snapshot_download(**kwargs)
    except Exception as e:  # the hub raises many types; the message is what the user needs
        # the hub's exception text may quote the request, token included: never print it
        module.fail_json(msg="snapshot_download of %s@%s into %s failed: %s" % (
            p["repo_id"], kwargs["revision"], p["local_dir"], redact(str(e), p["token"])), **result)
    with open(os.path.join(p["local_dir"], MARKER), "w") as f:
        json.dump(fetch_marker(p["repo_id"], kwargs["revision"]), f)
    if p["verify_sha256"]:
        _verify_hub(module, p, kwargs["revision"], result)
    module.exit_json(changed=True, fetched=True, **result)


if __name__ == "__main__":
    main()
