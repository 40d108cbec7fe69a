# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The GPU under a canary (catalogue gpu_low_power): computing, spinning or stuck low-power.

Inputs: the catalogue gpu_low_power figures (verbatim numbers of a stuck GB10 and the same node after AC removal) and the
simulated node's nvidia-smi samples (idle, spinning, computing). Hardware-only and untested here: sampling a real
GB10 during a canary request (no capture of the seven-field canary query exists); the parser and the verdict are
tested on the text shapes nvidia-smi prints.
"""

from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V
from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose as D
from tests.unit import captures as C
from tests.unit.conftest import read_fixture

SIM_FIELDS = ("utilization.gpu", "power.draw", "clocks.sm")  # the watchdog's query, as captured on the sim


def g19():
    return C.parse_g19_numbers(read_fixture("gpu", "g19-stuck-low-power.txt"))


def canary_lines(util, sm, apps, power, throttle="0x0000000000000000", n=5):
    """The canary query's csv,noheader,nounits lines for n samples with these figures."""
    return "\n".join("%g, P0, %g, %g, %.2f, 41, %s" % (util, sm, apps, power, throttle) for _i in range(n)) + "\n"


def test_g19_figures_parse():
    g = g19()
    assert g["stuck"] == {"util": 96.0, "sm": 799.0, "apps": 2418.0, "max": 3003.0, "power": 19.5}
    assert g["recovered"] == {"sm": 2281.0, "power": 92.5}


def test_parser_reads_the_canary_query():
    g = g19()["stuck"]
    rows = V.parse_gpu_samples(canary_lines(g["util"], g["sm"], g["apps"], g["power"], n=3))
    assert rows[0] == {"utilization_pct": 96.0, "pstate": "P0", "clocks_sm_mhz": 799.0, "clocks_app_mhz": 2418.0,
                       "power_w": 19.5, "temperature_c": 41.0, "throttle_active": 0}
    assert len(rows) == 3
    # GB10 prints [N/A] where it has no value; a short line is skipped
    assert V.parse_gpu_samples("96, P0, 799, [N/A], [N/A], 41, [N/A]\n1, 2\n") == [
        {"utilization_pct": 96.0, "pstate": "P0", "clocks_sm_mhz": 799.0, "clocks_app_mhz": None, "power_w": None,
         "temperature_c": 41.0, "throttle_active": None}]


def test_g19_stuck_node_fails_and_feeds_the_classifier():
    g, ok = g19()["stuck"], g19()["recovered"]
    samples = {"node-a": V.parse_gpu_samples(canary_lines(g["util"], g["sm"], g["apps"], g["power"])),
               # after AC removal (the source gives SM clock and power; utilization is the loaded figure)
               "node-b": V.parse_gpu_samples(canary_lines(g["util"], ok["sm"], g["apps"], ok["power"]))}
    out = V.canary_power_verdict(samples)
    assert out["by_host"]["node-a"]["state"] == "stuck_low_power"
    assert out["by_host"]["node-b"]["state"] == "computing"
    assert out["facts"] == {"node-a": {"gpu_stuck_low_power": "util 96 %, SM 799 MHz of 2418, 19.5 W"}}
    assert out["failures"] == [
        "node-a: GPU stuck in a low-power state under the canary (util 96 %, SM 799 MHz of 2418, 19.5 W, 5 samples, "
        "no throttle reason; catalogue gpu_low_power); every rank waits for this node. Fix: remove AC power from "
        "node-a (a reboot is not enough), then re-run"]
    # the same fact the doctor's classifier derives from a node's GPU figures (one rule, diagnose.py)
    assert D.node_facts({"gpu": {"util": 96, "sm_clock": 799, "app_clock": 2418, "power": 19.5}}).get(
        "gpu_stuck_low_power") == out["facts"]["node-a"]["gpu_stuck_low_power"]


def test_a_throttle_reason_is_not_the_stuck_state():
    g = g19()["stuck"]
    hot = V.parse_gpu_samples(canary_lines(g["util"], g["sm"], g["apps"], g["power"], throttle="0x0000000000000040"))
    out = V.canary_power_verdict({"node-a": hot})
    assert out["facts"] == {} and out["by_host"]["node-a"]["state"] == "not_computing"
    assert out["by_host"]["node-a"]["throttle_active"] == 0x40


def test_sim_samples_spinning_computing_idle():
    rows = dict((name, V.parse_gpu_samples(read_fixture("watchdog", "nvidia-smi", "gpu-%s.csv" % name), SIM_FIELDS))
                for name in ("spinning", "computing", "idle"))
    assert rows["spinning"] == [{"utilization_pct": 96.0, "power_w": 12.4, "clocks_sm_mhz": 2405.0}]
    out = V.canary_power_verdict({"spark-sim-0": rows["computing"], "spark-sim-1": rows["spinning"],
                                  "spark-sim-2": rows["idle"], "spark-sim-3": []})
    states = dict((h, v["state"]) for h, v in out["by_host"].items())
    assert states == {"spark-sim-0": "computing", "spark-sim-1": "not_computing", "spark-sim-2": "idle",
                      "spark-sim-3": "unknown"}
    assert out["failures"] == [
        "spark-sim-1: the GPU reads 96 % busy at 12.4 W under the canary, below the 25 W floor: the engine is not "
        "computing (a collective spin-wait; catalogue gpu_low_power). Fix: restart the group (playbooks/restart.yml) "
        "and read the ranks' logs"]


def test_slow_rank_against_the_median():
    g, ok = g19()["stuck"], g19()["recovered"]
    fast = V.parse_gpu_samples(canary_lines(g["util"], ok["sm"], g["apps"], ok["power"]))
    slower = V.parse_gpu_samples(canary_lines(g["util"], 1800, g["apps"], 60.0))  # 21 % below 2281
    out = V.canary_power_verdict({"node-a": fast, "node-b": fast, "node-c": slower})
    assert out["failures"] == [] and len(out["warnings"]) == 1
    assert out["warnings"][0].startswith("node-c: SM clock 1800 MHz under the canary, 21 % below the nodes' median "
                                         "2281 MHz: a slow rank")
