# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: spec_decode_stats
short_description: Speculative-decoding acceptance from two /metrics scrapes
version_added: 0.1.0
author: dgxspark.vllm maintainers (@dgxspark)
description:
  - Computes acceptance figures from the speculative-decoding counters of vLLM (docs/health.md) -
    C(acceptance_rate) = accepted / draft tokens, C(accepted_per_draft) = accepted / drafts,
    C(mean_acceptance_length) = 1 + accepted per draft (tokens per step), C(per_position_rate)
    = accepted at position p / drafts, C(draft_tokens_per_draft) = draft tokens / drafts.
  - The counters are cumulative since the server started, so pass the earlier scrape as O(before)
    to get the figures of the traffic in between; without it the figures cover the whole uptime.
  - C(_created) samples (timestamps) and lines that are not samples (summary lines a script appended) are ignored.
  - Quote the mean acceptance length, not the ratio (docs/health.md). Acceptance exactly 1.00 (vLLM 53030) and near
    0.15 (broken aux capture) add a warning.
options:
  _input:
    description: The later scrape, as C(/metrics) text, a list of samples, or a counter dict.
    type: raw
    required: true
  before:
    description: The earlier scrape, same forms as the input; omit for cumulative figures.
    type: raw
"""

EXAMPLES = r"""
- name: Acceptance of the benchmark's traffic
  ansible.builtin.set_fact:
    bench_acceptance: "{{ _scrape_after.content | dgxspark.vllm.spec_decode_stats(_scrape_before.content) }}"
"""

RETURN = r"""
_value:
  description: >-
    C(present) (false without a drafter), C(drafts), C(draft_tokens), C(accepted), C(acceptance_rate),
    C(accepted_per_draft), C(mean_acceptance_length), C(draft_tokens_per_draft), C(num_positions),
    C(per_position_accepted), C(per_position_rate), C(per_position_sum), C(per_position_sum_matches), C(warnings).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.six import string_types

from ansible_collections.dgxspark.vllm.plugins.module_utils.health import (
    parse_metrics,
    spec_decode_counters,
    spec_decode_stats as _stats,
)


def _counters(value, what):
    if isinstance(value, string_types):
        return spec_decode_counters(parse_metrics(value))
    if isinstance(value, list):
        if not all(isinstance(s, dict) and "name" in s and "value" in s for s in value):
            raise AnsibleFilterError("spec_decode_stats: %s is a list but not of {name, labels, value} samples" % what)
        return spec_decode_counters(value)
    if isinstance(value, dict) and "accepted" in value and "drafts" in value:
        return value
    raise AnsibleFilterError("spec_decode_stats: %s must be /metrics text, a list of samples or a counter dict "
                             "(drafts, draft_tokens, accepted, per_position); got %s. Fix: pass the body of "
                             "GET /metrics (uri ... return_content: true -> .content)" % (what, type(value).__name__))


def spec_decode_stats(after, before=None):
    a = _counters(after, "the input")
    b = _counters(before, "before") if before not in (None, "") else None
    if a["drafts"] is None:
        return _stats(a, b)
    if b is not None and b["drafts"] is not None and a["drafts"] < b["drafts"]:
        raise AnsibleFilterError("spec_decode_stats: the input has fewer drafts (%d) than 'before' (%d): the server "
                                 "restarted between the scrapes or the arguments are swapped"
                                 % (a["drafts"], b["drafts"]))
    return _stats(a, b)


# Public for operators' own playbooks (docs/health.md); vllm_health and vllm_bench call module_utils/health directly.
class FilterModule(object):
    def filters(self):
        return {"spec_decode_stats": spec_decode_stats}
