# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The watchdog's incident log read for people (module_utils/lifecycle.py incident_report): playbooks/watchdog.yml
status."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import incident_report


def vllm_watchdog_incidents(text, now, last=5, span_s=86400.0):
    """text: incidents.jsonl as read from the head; now: the head's clock (epoch s)."""
    try:
        return incident_report(text or "", float(now), int(last), float(span_s))
    except (TypeError, ValueError) as e:
        raise AnsibleFilterError("vllm_watchdog_incidents: %s (now: epoch seconds, last: a count, span_s: seconds)" % e)


class FilterModule(object):
    def filters(self):
        return {"vllm_watchdog_incidents": vllm_watchdog_incidents}
