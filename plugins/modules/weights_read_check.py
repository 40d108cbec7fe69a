#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: weights_read_check
short_description: Open a safetensors shard as another user and parse its header
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Opens O(path) as O(user) and reads its safetensors header (the 8-byte little-endian length, then the JSON object)
    with the collection's one reader of the format (C(plugins/module_utils/tp_padding.py) C(header_of)), in a child
    process that drops to O(user)'s uid, gid and groups, as C(runuser -u) would.
  - Used by C(model_weights) before launch; C(nobody) is what root in a container becomes on a root-squashed NFS mount,
    and a shard it cannot read fails the rank about 9.5 minutes into the load (catalogue weights_mismatch,
    file_not_found).
  - An unreadable or malformed shard is a result (RV(readable=false) with RV(error)); the role fails with the fix.
  - Standard library only; the nodes need no C(safetensors) package (the unit tests compare the reader with it).
  - Must run as root to take another user's identity, unless O(user) is the connecting user.
options:
  path:
    description: The shard to open.
    type: path
    required: true
  user:
    description: Local user that opens it.
    type: str
    default: nobody
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Open the first shard as nobody
  dgxspark.vllm.weights_read_check:
    path: /srv/models/glm-5.3-flash-nvfp4/model-00001-of-00012.safetensors
    user: nobody
  register: read
"""

RETURN = r"""
readable:
  description: Whether O(user) could open the file and its header parsed.
  returned: always
  type: bool
tensors:
  description: Number of tensors in the header (C(__metadata__) not counted); V(null) when not readable.
  returned: always
  type: int
error:
  description: Why it could not be read (the OS error or the format error); empty when readable.
  returned: always
  type: str
path:
  description: The file opened (O(path)).
  returned: always
  type: str
user:
  description: The user that opened it.
  returned: always
  type: str
"""

import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import PaddingError, header_of


class ReadCheckError(Exception):
    """This process may not take the user's identity."""


def _count(path):
    header, _start = header_of(path)
    return len([k for k in header if k != "__metadata__"])


def read_as(path, user):
    """Open and parse `path` as `user` in a child process; return {readable, tensors, error, user}."""
    pw = pwd.getpwnam(user)
    if os.getuid() not in (0, pw.pw_uid):
        raise ReadCheckError("only root can open files as %s (this runs as uid %d)" % (user, os.getuid()))
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to the user, read, report on the pipe, never return
        out = {}
        try:
            os.close(rfd)
            if os.getuid() != pw.pw_uid:
                os.initgroups(user, pw.pw_gid)
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
            out["tensors"] = _count(path)
        except (OSError, PaddingError) as e:
            out["error"] = str(e)
        except Exception as e:  # anything else still reaches the parent as text
            out["error"] = "%s: %s" % (type(e).__name__, e)
        os.write(wfd, json.dumps(out).encode("utf-8"))
        os._exit(0)
    os.close(wfd)
    chunks = []
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks).decode("utf-8") or '{"error": "the reader process printed nothing"}')
    return {"readable": "tensors" in out, "tensors": out.get("tensors"), "error": out.get("error", ""), "user": user}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            user=dict(type="str", default="nobody"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read_as(p["path"], p["user"])
    except KeyError:
        module.fail_json(msg="user %s does not exist on this node; fix model_weights_read_check_user" % p["user"])
    except ReadCheckError as e:
        module.fail_json(msg="%s; run the task as root (become)" % e)
    module.exit_json(changed=False, path=p["path"], **result)


if __name__ == "__main__":
    main()
