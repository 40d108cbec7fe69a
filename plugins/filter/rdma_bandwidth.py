# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The per-rail bandwidth probe of rdma_fabric (module_utils/bandwidth.py, catalogue perftest_64k)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.bandwidth import (
    DEFAULT_FLOOR_FRACTION, BandwidthError, parse_perftest_bw, probe_plan, rail_verdict)


def rdma_fabric_bandwidth_plan(facts_by_host, head, size=65536, qps=4, port_base=18515, link_mbps=200000,
                               tool="ib_write_bw", budget_s=None, per_test_s=15):
    try:
        return probe_plan(dict(facts_by_host or {}), head, int(size), int(qps), int(port_base), int(link_mbps), tool,
                          None if budget_s is None else float(budget_s), float(per_test_s))
    except BandwidthError as e:
        raise AnsibleFilterError("rdma_fabric_bandwidth_plan: %s" % e)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise AnsibleFilterError("rdma_fabric_bandwidth_plan: %s (input: {host: rdma_facts})" % e)


def rdma_fabric_bandwidth_verdict(results, floor_fraction=DEFAULT_FLOOR_FRACTION, links=None):
    """results: [{pair (a plan entry), stdout, stderr}] of the client runs; links: {host: {hca: facts}} of module
    rdma_link_facts (optional: a rail below its floor is then classified)."""
    rails = []
    for r in results or []:
        pair = r.get("pair") or {}
        rails.append({"host": pair.get("host"), "hca": pair.get("hca"), "netdev": pair.get("netdev"),
                      "peer": pair.get("peer"), "speed_mbps": pair.get("speed_mbps"),
                      "report": parse_perftest_bw("%s\n%s" % (r.get("stdout") or "", r.get("stderr") or ""))})
    return rail_verdict(rails, float(floor_fraction), dict(links or {}))


class FilterModule(object):
    def filters(self):
        return {"rdma_fabric_bandwidth_plan": rdma_fabric_bandwidth_plan,
                "rdma_fabric_bandwidth_verdict": rdma_fabric_bandwidth_verdict}
