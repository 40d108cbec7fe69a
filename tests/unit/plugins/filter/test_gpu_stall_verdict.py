# -*- coding: utf-8 -*-
"""The health gate's stall verdict (filter gpu_stall_verdict) is the watchdog's rule (verdict.stall_verdict, issue 28):
generation tokens frozen with a request in flight is a long prefill while a GPU draws at or above the floor, and a
wedge below it, in both.

Inputs: the /metrics pair captured on the fault fleet with one rank SIGSTOPped (tests/fixtures/watchdog/metrics,
3 requests running, 1170 generation tokens in both scrapes) and the simulated fleet's busy-GPU sample; GPU series
in the canary query's csv shape with the issue's figures (a long prefill at 44 W). A GB10's own readings during a
prefill are untested here (no capture exists).
"""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.gpu_canary import gpu_stall_verdict
from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V
from tests.unit.conftest import read_fixture

W = "watchdog"
GROUP = [{"rank": 0, "host": "node-a", "running": True}, {"rank": 1, "host": "node-b", "running": True},
         {"rank": 2, "host": "node-c", "running": True}]


def metrics(kind, interval_s=60):
    """The metrics return of vllm_health mode=metrics for a captured pair."""
    c1 = V.serving_counters(V.parse_metrics(read_fixture(W, "metrics", "%s-first.prom" % kind)))
    c2 = V.serving_counters(V.parse_metrics(read_fixture(W, "metrics", "%s-second.prom" % kind)))
    return {"first": c1, "second": c2, "wedge": V.wedge_verdict(c1, c2, interval_s)}


def series(util, power, n=5, sm=2405):
    """gpu_samples' samples: the canary query's lines for n readings."""
    return V.parse_gpu_samples("\n".join("%g, P0, %g, 2418, %.2f, 48, 0x0000000000000000" % (util, sm, power)
                                         for _i in range(n)))


def test_long_prefill_at_44_w_is_not_a_wedge_in_the_gate_or_the_watchdog():
    m = metrics("stalled")
    assert m["wedge"]["stalled"] is True and m["wedge"]["busy"] == 3
    samples = {"node-a": series(97, 44.0), "node-b": series(96, 43.1), "node-c": series(95, 44.6)}
    gate = gpu_stall_verdict(m, samples, power_floor_w=25)
    assert gate["verdict"] == "long_prefill"
    assert gate["gpu_states"] == {"node-a": "computing", "node-b": "computing", "node-c": "computing"}
    assert "node-a, node-b, node-c draw(s) power at or above 25 W" in gate["cause"]
    # the watchdog, on the same pair and one reading per node, decides the same
    wd = V.classify(GROUP, True, m["first"], m["second"], 60,
                    dict((h, V.gpu_medians({h: s})[h]) for h, s in samples.items()))
    assert (wd["verdict"], wd["action"]) == ("long_prefill", "none")


@pytest.mark.parametrize("powers,verdict,hosts", [
    ((12.4, 12.4, 12.4), "wedged", ["node-a", "node-b", "node-c"]),   # the stand-in's spinning figure
    ((24.9, 24.9, 24.9), "wedged", ["node-a", "node-b", "node-c"]),   # just under the floor
    ((25.0, 12.4, 12.4), "long_prefill", []),                          # one node at the floor computes
    ((61.2, 12.4, 12.4), "long_prefill", []),
])
def test_floor_decides_per_node(powers, verdict, hosts):
    samples = dict((h, series(96, p)) for h, p in zip(("node-a", "node-b", "node-c"), powers))
    v = gpu_stall_verdict(metrics("stalled"), samples, power_floor_w=25)
    assert (v["verdict"], v["hosts"]) == (verdict, hosts)


def test_the_median_decides_not_one_spike():
    # one sample at 60 W among four spinning ones: the node spins (median 12.4 W), the group is wedged
    spiky = series(96, 12.4, n=4) + series(96, 60.0, n=1)
    v = gpu_stall_verdict(metrics("stalled"), {"node-a": spiky}, power_floor_w=25)
    assert v["verdict"] == "wedged" and v["gpu_states"] == {"node-a": "spinning"}
    assert "1170 for 60 s with 3 request(s) in flight and every GPU below 25 W (node-a spinning)" in v["cause"]


def test_without_gpu_samples_a_frozen_pair_is_wedged_and_a_moving_one_is_not():
    assert gpu_stall_verdict(metrics("stalled"), {})["verdict"] == "wedged"
    assert gpu_stall_verdict(metrics("stalled"), {"node-a": []})["gpu_states"] == {"node-a": "unknown"}
    assert gpu_stall_verdict(metrics("progressing"), {"node-a": series(96, 12.4)})["verdict"] == "progressing"
    assert gpu_stall_verdict(metrics("idle"), {"node-a": series(0, 4.0)})["verdict"] == "idle"


def test_bad_inputs_are_named():
    with pytest.raises(AnsibleFilterError, match="expects the metrics return of vllm_health mode=metrics"):
        gpu_stall_verdict({"first": {}}, {})
    with pytest.raises(AnsibleFilterError, match="samples_by_host must be"):
        gpu_stall_verdict(metrics("idle"), ["node-a"])
