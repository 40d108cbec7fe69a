#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tp_config_pad
short_description: Pad a checkpoint's config.json to a lane's tensor-parallel targets
version_added: "0.1.0"
description:
  - Writes the padded head counts and widths a lane names (for GLM-5.3-Flash at tensor-parallel
    size 3, C(text_config.num_attention_heads), C(num_key_value_heads), C(linear_num_heads) and
    C(linear_attn_config.num_heads) to 66, C(moe_intermediate_size) to 2112) into C(config.json), so
    the file agrees with what the image's overlay pads to at run time (catalogue drafter_heads).
  - The targets are lane data tied to the image/overlay version. The module computes candidates
    (heads rounded up to a multiple of the tensor-parallel size, widths to the smallest multiple
    of lcm(tp, 64)) only to report them next to the targets.
  - When the tensor-parallel size divides every released value (for GLM-5.3-Flash at 2 and 4)
    the file is left unchanged.
  - The released file is copied once to I(path) + I(backup_suffix); an existing backup is never
    overwritten. A second run reports C(already padded) with C(changed=false).
  - A file padded inconsistently (some keys at target and others not, or a key at another
    value) is refused; the message names every key with its on-disk value and its target.
  - With I(guard=true) nothing is written. The module fails unless the file is at target (or
    the tensor-parallel size divides it) and every key of I(guard_keys) present in the file divides
    by the tensor-parallel size. This is the launch guard C(vllm_ranks) runs.
  - The file is rewritten atomically with two-space indentation and the key order kept
    (mode 0644). C(vocab_size) and every key not in I(targets) stay untouched.
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  path:
    description: Path to the checkpoint's C(config.json) on the target.
    type: path
    required: true
  tensor_parallel_size:
    description: Tensor-parallel size of the lane (number of ranks).
    type: int
    required: true
  targets:
    description:
      - Dotted key (for example C(text_config.linear_attn_config.num_heads)) to padded integer
        value, from the lane's C(padding.config_targets).
      - Keys missing from the file are skipped and reported with state C(absent) (catalogue drafter_heads,
        C(linear_attn_config.num_heads) only if that dict and key exist), except
        C(text_config.linear_num_heads) - the runtime reads it, and the reference pad script writes the
        padded head count whether or not the released file has it. It is created (plan C(create=true))
        when C(text_config) exists and the tensor-parallel size needs padding; never at sizes that divide.
      - Every target must divide by I(tensor_parallel_size) and be at least the released value.
    type: dict
    required: true
  backup_suffix:
    description: Suffix of the one-time backup of the released file.
    type: str
    default: .orig
  guard_keys:
    description:
      - Keys checked for divisibility by the tensor-parallel size when I(guard=true); keys absent from
        the file are skipped. A kv head count below the tensor-parallel size passes when it divides it
        (vLLM replicates kv heads).
    type: list
    elements: str
    default: [num_attention_heads, num_key_value_heads, linear_num_heads, moe_intermediate_size,
              text_config.num_attention_heads, text_config.num_key_value_heads, text_config.linear_num_heads,
              text_config.linear_attn_config.num_heads, text_config.moe_intermediate_size]
  guard:
    description:
      - Check only, never write. Fail when the file needs padding or is inconsistent, naming the
        file, the keys and the command that fixes it.
    type: bool
    default: false
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Source of the rules - catalogue drafter_heads (Y3 C(scripts/pad-config.py), L3 lcm rule) and
    docs/tp-padding.md. Why 2112 and not 2049 - native MTP reads the file, not C(--hf-overrides),
    and 2049/3 = 683 is not a multiple of the NVFP4 16-value block.
  - Stdlib only on the target.
"""

EXAMPLES = r"""
- name: Pad GLM-5.3-Flash config.json for tensor-parallel size 3
  dgxspark.vllm.tp_config_pad:
    path: /var/tmp/models/GLM-5.3-Flash-NVFP4-redhat/config.json
    tensor_parallel_size: 3
    targets:
      text_config.num_attention_heads: 66
      text_config.num_key_value_heads: 66
      text_config.linear_num_heads: 66
      text_config.linear_attn_config.num_heads: 66
      text_config.moe_intermediate_size: 2112

- name: Launch guard (read only)
  dgxspark.vllm.tp_config_pad:
    path: /var/tmp/models/GLM-5.3-Flash-NVFP4-redhat/config.json
    tensor_parallel_size: 3
    targets: "{{ vllm_lane_spec.padding.config_targets }}"
    guard: true
"""

RETURN = r"""
msg:
  description: One line, e.g. C(padded text_config.num_attention_heads 64->66, ... (tp=3)),
    C(already padded ...) or C(tensor-parallel size 2 divides the released geometry; unchanged).
  returned: always
  type: str
action:
  description: C(pad) (keys written, or would be in check mode), C(at_target) (already padded),
    C(divides) (tensor-parallel size divides the released values) or C(empty) (no target present in the file).
  returned: always
  type: str
  sample: pad
plan:
  description: Per key - C(current) (on disk before this run), C(target), C(original) (released value,
    from the backup when it exists), C(candidate) (computed rule, for explanation only) and C(state)
    (C(at_target), C(needs_pad), C(inconsistent) or C(absent)); C(create=true) marks a key written although
    the file lacks it (C(text_config.linear_num_heads)), whose C(current) and C(original) are null.
  returned: always
  type: dict
  sample:
    text_config.moe_intermediate_size: {current: 2048, target: 2112, original: 2048, candidate: 2112, state: needs_pad}
changed_keys:
  description: "Keys written (or that would be in check mode), as C({key: [before, after]}); before is null for a
    created key."
  returned: always
  type: dict
backup_file:
  description: Path of the backup of the released file (existing or created by this run).
  returned: when the file was padded or already carries a backup
  type: str
hf_overrides:
  description:
    - The runtime C(--hf-overrides) companion of the targets (catalogue drafter_heads) - keys directly in C(text_config)
      both at top level and inside C(text_config). Empty when nothing is padded (C(divides), C(empty)).
  returned: always
  type: dict
  sample:
    num_attention_heads: 66
    moe_intermediate_size: 2112
    text_config: {num_attention_heads: 66, moe_intermediate_size: 2112}
drift:
  description: Keys that differ from the backup although the tensor-parallel size divides the released values
    (a file padded for another lane).
  returned: always
  type: list
  elements: str
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import (
    GUARD_KEYS, PaddingError, apply_plan, config_plan, diff_lines, divisibility, dump_config, hf_overrides)


def _load(module, path):
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (IOError, OSError) as e:
        module.fail_json(msg="%s: cannot read (%s); check the lane's checkpoint.host_path" % (path, e))
    except ValueError as e:
        module.fail_json(msg="%s: not valid JSON (%s); restore the checkpoint's config.json" % (path, e))
    if not isinstance(data, dict):
        module.fail_json(msg="%s: a JSON %s, not an object; restore the checkpoint's config.json (the lane's "
                             "checkpoint.host_path)" % (path, type(data).__name__))
    return data


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            tensor_parallel_size=dict(type="int", required=True),
            targets=dict(type="dict", required=True),
            backup_suffix=dict(type="str", default=".orig"),
            guard=dict(type="bool", default=False),
            guard_keys=dict(type="list", elements="str", default=list(GUARD_KEYS), no_log=False),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    tp = module.params["tensor_parallel_size"]
    backup = path + module.params["backup_suffix"]
    targets = {}
    for key, value in (module.params["targets"] or {}).items():
        try:
            targets[key] = int(value) if not isinstance(value, bool) else value
        except (TypeError, ValueError):
            module.fail_json(msg="%s: target for %s must be an integer, got %r (lane padding.config_targets)"
                             % (path, key, value))

    config = _load(module, path)
    original = _load(module, backup) if os.path.exists(backup) else None
    try:
        plan = config_plan(config, targets, tp, original=original, path=path)
    except PaddingError as e:
        module.fail_json(msg=str(e), path=path)

    result = dict(changed=False, action=plan["action"], plan=plan["keys"], changed_keys={},
                  drift=plan["drift"], path=path,
                  hf_overrides=hf_overrides(targets) if plan["action"] in ("pad", "at_target") else {})
    if module.params["guard"] and plan["action"] != "pad":
        bad = divisibility(config, module.params["guard_keys"], tp)
        if bad:
            keys = ", ".join("%s = %d does not divide by tensor-parallel size %d" % (k, v, tp) for k, v in bad)
            module.fail_json(msg="%s: %s; vLLM cannot split them across %d ranks. Fix: pad the file - set the lane's "
                                 "padding.config_targets (config.json widths and heads, catalogue drafter_heads) or heads_padding "
                                 "(checkpoint or drafter weights, docs/tp-padding.md) and run ansible-playbook site.yml "
                                 "--tags tp_pad" % (path, keys, tp),
                             **dict((k, v) for k, v in result.items() if k != "changed"))
    if original is not None:
        result["backup_file"] = backup
    if plan["action"] == "empty":
        result["msg"] = "no target key present in %s; unchanged" % path
        module.exit_json(**result)
    if plan["action"] == "divides":
        result["msg"] = "tensor-parallel size %d divides the released geometry; unchanged" % tp
        if plan["drift"]:
            module.warn("%s differs from %s for %s although tensor-parallel size %d needs no padding; restore the "
                        "backup if this lane's image does not pad at run time"
                        % (path, backup, ", ".join(plan["drift"]), tp))
        module.exit_json(**result)
    summary = ", ".join("%s=%s" % (k, v["target"]) for k, v in plan["keys"].items() if v["state"] != "absent")
    if plan["action"] == "at_target":
        result["msg"] = "already padded: %s (tp=%d)" % (summary, tp)
        module.exit_json(**result)

    # action == pad
    if module.params["guard"]:
        keys = ", ".join("%s is %s (needs %s)" % (k, v["current"], v["target"])
                         for k, v in plan["keys"].items() if v["state"] == "needs_pad")
        module.fail_json(msg="%s is not padded for tensor-parallel size %d: %s. Fix: run the tp_pad role "
                             "(ansible-playbook site.yml --tags tp_pad) before launching"
                         % (path, tp, keys), **dict((k, v) for k, v in result.items() if k != "changed"))

    new = json.loads(json.dumps(config))  # deep copy, key order kept
    changed = apply_plan(new, plan)
    result["changed"] = True
    result["changed_keys"] = dict((k, list(v)) for k, v in changed.items())
    result["backup_file"] = backup
    result["msg"] = "padded %s (tp=%d)" % (", ".join("%s %s->%s" % (k, "absent" if b is None else b, a)
                                                     for k, (b, a) in changed.items()), tp)
    if module._diff:
        result["diff"] = dict(
            before_header=path, after_header=path,
            before=diff_lines((k, b) for k, (b, a) in changed.items() if b is not None),  # created: no line
            after=diff_lines((k, a) for k, (b, a) in changed.items()),
        )
    if module.check_mode:
        module.exit_json(**result)

    try:
        if not os.path.exists(backup):
            shutil.copy2(path, backup)  # once: the released file is never overwritten (catalogue drafter_heads)
        fd, tmp = tempfile.mkstemp(prefix=".config.json.", dir=os.path.dirname(os.path.abspath(path)))
        with os.fdopen(fd, "wb") as f:
            f.write(dump_config(new).encode("utf-8"))
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
        os.chmod(path, 0o644)
    except (IOError, OSError) as e:
        module.fail_json(msg="%s: cannot write the padded file (%s); is the checkpoint directory writable on "
                             "this host (NFS owner, catalogue drafter_heads)?" % (path, e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
