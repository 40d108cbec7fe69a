#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_samples
short_description: Sample this node's GPU clocks, power and utilisation with nvidia-smi while a canary runs
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs C(nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits) (argv, no shell) O(count) times,
    O(interval_s) seconds apart, and parses each line with C(plugins/module_utils/verdict.py) C(parse_gpu_samples).
  - Role C(vllm_health) starts it on every node (async) while the head runs the smoke and the canary requests, then
    feeds the samples of all nodes to the filter C(dgxspark.vllm.gpu_canary_verdict) (catalogue gpu_low_power -
    a GB10 stuck at about 800 MHz and 20 W under load).
  - A field this nvidia-smi refuses (C(Field "X" is not a valid field to query)) is dropped and the query repeated
    without it; the dropped names are returned in C(unsupported_fields). The simulated nodes' stand-in knows no
    applications clock and no throttle reasons, so there the stuck rule cannot decide and only the
    busy-below-the-power-floor rule can.
options:
  nvidia_smi:
    description: The nvidia-smi binary (path or name on C(PATH)).
    type: str
    default: nvidia-smi
  fields:
    description: Query fields, in the order C(parse_gpu_samples) maps them. The default is the canary query.
    type: list
    elements: str
    default: [utilization.gpu, pstate, clocks.sm, clocks.applications.graphics, power.draw, temperature.gpu,
              clocks_throttle_reasons.active]
  count:
    description: Number of samples (1-60).
    type: int
    default: 5
  interval_s:
    description: Seconds between two samples (0-10).
    type: float
    default: 1.0
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
notes:
  - Hardware-only and untested here - sampling a real GB10 under load. The tests run the module on the text shapes
    nvidia-smi prints (the captured catalogue gpu_low_power figures) and on the simulated nodes' stand-in.
"""

EXAMPLES = r"""
- name: Five samples, one a second
  dgxspark.vllm.gpu_samples:
    count: 5
  register: gpu
"""

RETURN = r"""
samples:
  description:
    - One dict per sample - C(utilization_pct) (percent), C(pstate), C(clocks_sm_mhz), C(clocks_app_mhz) (MHz),
      C(power_w) (watts), C(temperature_c), C(throttle_active) (bitmask as int); V(null) where nvidia-smi has no value.
  returned: always
  type: list
  elements: dict
fields:
  description: The fields actually queried.
  returned: always
  type: list
  elements: str
unsupported_fields:
  description: Fields this nvidia-smi refused (dropped from the query).
  returned: always
  type: list
  elements: str
argv:
  description: The last argv run.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils.verdict import (
    CANARY_QUERY_FIELDS, gpu_query_argv, parse_gpu_samples, refused_gpu_field)


def sample(run, nvidia_smi, fields, count, interval_s, sleep=time.sleep):
    """Returns (result dict, error text or None). `run(argv)` -> (rc, stdout, stderr)."""
    fields, dropped, samples = list(fields), [], []
    argv = gpu_query_argv(nvidia_smi, fields)
    i = 0
    while i < count:
        rc, out, err = run(argv)
        if rc != 0:
            refused = refused_gpu_field(err)
            if refused in fields and len(fields) > 1:
                fields.remove(refused)
                dropped.append(refused)
                argv = gpu_query_argv(nvidia_smi, fields)
                continue
            return ({"samples": samples, "fields": fields, "unsupported_fields": dropped, "argv": argv},
                    "%s failed (rc %s): %s" % (" ".join(argv), rc, (err or out or "").strip()))
        samples.extend(parse_gpu_samples(out, tuple(fields)))
        i += 1
        if i < count and interval_s > 0:
            sleep(interval_s)
    return {"samples": samples, "fields": fields, "unsupported_fields": dropped, "argv": argv}, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            fields=dict(type="list", elements="str", default=list(CANARY_QUERY_FIELDS)),
            count=dict(type="int", default=5),
            interval_s=dict(type="float", default=1.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["count"] <= 60 or not 0 <= p["interval_s"] <= 10 or not p["fields"]:
        module.fail_json(msg="gpu_samples: count must be 1-60 (is %s), interval_s 0-10 s (is %s) and fields not empty"
                         % (p["count"], p["interval_s"]))
    binary = module.get_bin_path(p["nvidia_smi"]) if "/" not in p["nvidia_smi"] else p["nvidia_smi"]
    if not binary:
        module.fail_json(msg="%s not found on this node. Fix: install the NVIDIA driver utilities, or point "
                         "vllm_health_nvidia_smi at nvidia-smi" % p["nvidia_smi"])

    def run(argv):
        return module.run_command(argv)
    result, error = sample(run, binary, p["fields"], p["count"], p["interval_s"])
    if error:
        module.fail_json(msg="%s. Fix: check the GPU driver on this node (nvidia-smi must answer)" % error, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
