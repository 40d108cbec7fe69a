#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checkpoint_guard
short_description: Refuse a checkpoint whose quantization or chat templates the lane cannot serve
version_added: 0.1.0
description:
  - Reads C(config.json) (C(quantization_config) at the top level or in C(text_config)), else
    C(hf_quant_config.json), and classifies the checkpoint as compressed-tensors, ModelOpt, fp8 or
    unquantized, with its family (nvfp4, fp8, mxfp8, none).
  - Refuses when the family differs from the lane's O(lane_quantization) (for example an nvfp4
    lane and an FP8 checkpoint; docs/lanes.md).
  - Refuses a ModelOpt build unless the lane says C(checkpoint.quantization=modelopt) or O(allow_modelopt) is set
    (ModelOpt NVFP4 builds of GLM-5.3-Flash emit corrupted tokens, catalogue token_corruption); a lane that says
    C(compressed-tensors) refuses every other format. The format is read from the checkpoint's files, not its name.
  - Refuses a ModelOpt build whose ignore list leaves any layer's C(self_attn) quantized unless
    O(allow_modelopt_attention) (docs/weights.md, vLLM #54150). compressed-tensors always passes.
  - With O(spec_method=mtp), refuses a checkpoint whose MTP layer (index C(num_hidden_layers)) has
    experts and differs from the last layer in having scale tensors (docs/weights.md).
  - Refuses ModelOpt C(quant_algo=NVFP4) (W4A4) when the index has no C(input_scale) tensor
    (docs/weights.md, the Blackfrost mislabel).
  - Refuses a directory without a chat template (C(chat_template.jinja) or a C(chat_template) key in
    C(tokenizer_config.json); catalogue no_chat_template) and, with O(require_mm_template), without
    C(chat_template_mm.jinja) (catalogue no_chat_template).
  - Every message names the directory, the rule and what to use instead. C(config.json.orig) is read
    in place of C(config.json) when present (the file tp_pad keeps; padding does not change quantization).
author:
  - dgxspark.vllm maintainers (@dgxspark)
options:
  path:
    description: Checkpoint directory.
    type: path
    required: true
  lane_quantization:
    description:
      - The lane's C(checkpoint.quantization) - a family (nvfp4, fp8, mxfp8, none, bf16) or a format that implies
        nvfp4 (modelopt, compressed-tensors); omit to skip the family check.
    type: str
  allow_modelopt:
    description: Serve a ModelOpt checkpoint although the lane does not say C(modelopt) (the operator's explicit choice).
    type: bool
    default: false
  spec_method:
    description: The lane's C(serve.speculative_config.method) (for example mtp, dflash); omit when none.
    type: str
  allow_modelopt_attention:
    description: Accept a ModelOpt build that quantizes self-attention (known token corruption, docs/weights.md).
    type: bool
    default: false
  require_chat_template:
    description: Require a chat template (catalogue no_chat_template).
    type: bool
    default: true
  require_mm_template:
    description:
      - Require C(chat_template_mm.jinja) (lanes that accept images). Omitted - derived from O(lane_serve).
    type: bool
  lane_serve:
    description:
      - The lane's C(serve) block. Vision is on when C(limit_mm_per_prompt) allows at least one image or video,
        or C(chat_template) names C(chat_template_mm.jinja); then a missing C(chat_template_mm.jinja) in the
        weights directory is refused before launch (image requests answer HTTP 500 otherwise, catalogue no_chat_template).
    type: dict
  node:
    description: Inventory name of this host, prefixed to every refusal.
    type: str
  mm_template_marker:
    description: A string the vision template must contain (L3 uses C(emit_image)); omit to skip.
    type: str
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Refuse a checkpoint the lane cannot serve
  dgxspark.vllm.checkpoint_guard:
    path: /var/tmp/models/GLM-5.3-Flash-NVFP4-nvidia
    lane_quantization: nvfp4
    spec_method: dflash
    require_mm_template: true
"""

RETURN = r"""
verdict:
  description: Classification of the checkpoint.
  returned: always
  type: dict
  sample: {"method": "compressed-tensors", "format": "compressed-tensors", "family": "nvfp4",
           "scheme": "nvfp4-pack-quantized", "source": "config.json"}
refusals:
  description: Why the checkpoint is refused (empty when it passes).
  returned: always
  type: list
  elements: str
warnings_found:
  description: Checks that could not run (for example an unreadable index in MTP mode).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.weights import (
    CONFIG, CONFIG_ORIG, HF_QUANT_CONFIG, INDEX, WeightsError, chat_template_problems, guard,
    load_json, vision_on)


def _read_optional(path):
    try:
        return load_json(path)
    except (IOError, OSError, ValueError):
        return None


def run(params):
    """Return (verdict, refusals, warnings) for the module parameters."""
    root = params["path"]
    cfg_path = os.path.join(root, CONFIG_ORIG)
    if not os.path.isfile(cfg_path):
        cfg_path = os.path.join(root, CONFIG)
    if not os.path.isfile(cfg_path):
        raise WeightsError("%s: no config.json; fetch or copy the checkpoint first" % root)
    try:
        config = load_json(cfg_path)
    except ValueError as e:
        raise WeightsError("%s: not JSON (%s)" % (cfg_path, e))
    hf_quant = _read_optional(os.path.join(root, HF_QUANT_CONFIG))
    index = _read_optional(os.path.join(root, INDEX))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    verdict, refusals, warnings = guard(
        config, hf_quant=hf_quant, weight_map=weight_map,
        lane_quantization=params["lane_quantization"], spec_method=params["spec_method"],
        allow_modelopt_attention=params["allow_modelopt_attention"], where=root,
        allow_modelopt=params["allow_modelopt"])
    why = vision_on(params.get("lane_serve"))
    require_mm = params["require_mm_template"]
    if require_mm is None:
        require_mm = why is not None
    if params["require_chat_template"] or require_mm:
        templates = chat_template_problems(root, require_mm=require_mm, mm_marker=params["mm_template_marker"],
                                           why=why if require_mm else None)
        if not params["require_chat_template"]:
            templates = [t for t in templates if "chat_template_mm" in t]
        refusals.extend(templates)
    if params.get("node"):
        refusals = ["%s: %s" % (params["node"], r) for r in refusals]
    return verdict, refusals, warnings


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            lane_quantization=dict(type="str"),
            spec_method=dict(type="str"),
            allow_modelopt_attention=dict(type="bool", default=False),
            allow_modelopt=dict(type="bool", default=False),
            require_chat_template=dict(type="bool", default=True),
            require_mm_template=dict(type="bool"),
            lane_serve=dict(type="dict"),
            node=dict(type="str"),
            mm_template_marker=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    try:
        verdict, refusals, warnings = run(module.params)
    except WeightsError as e:
        module.fail_json(msg="REFUSING: %s" % e)
    for w in warnings:
        module.warn(w)
    result = dict(changed=False, verdict=verdict, refusals=refusals, warnings_found=warnings)
    if refusals:
        module.fail_json(msg="REFUSING: " + " | ".join(refusals), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
