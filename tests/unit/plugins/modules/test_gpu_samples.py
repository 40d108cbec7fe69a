# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""gpu_samples and the filter gpu_canary_verdict: the check of vllm_health (catalogue gpu_low_power).

Inputs: the simulated nodes' real nvidia-smi stand-in (run as a program: it refuses the applications clock and the
throttle reasons, as a driver that lacks a field does) and the captured catalogue gpu_low_power figures. Hardware-only and untested
here: a real GB10 sampled under load.
"""
import os
import subprocess
import sys
from unittest import mock

from ansible.module_utils import basic

from ansible_collections.dgxspark.vllm.plugins.filter.gpu_canary import gpu_canary_verdict
from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V
from ansible_collections.dgxspark.vllm.plugins.modules import gpu_samples
from tests.unit import captures as C
from tests.unit.conftest import read_fixture
from tests.unit.plugins.modules.utils import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
STAND_IN = os.path.join(ROOT, "roles", "sim_fleet", "files", "node", "rootfs", "usr", "local", "bin", "nvidia-smi")


def stand_in(argv):
    """Run the simulated node's nvidia-smi (idle values: no /run/sim/gpu.json on the test machine)."""
    p = subprocess.run([sys.executable, STAND_IN] + list(argv[1:]), capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def g19_line(key="stuck"):
    g = C.parse_g19_numbers(read_fixture("gpu", "g19-stuck-low-power.txt"))
    s, r = g["stuck"], g["recovered"]
    if key == "stuck":
        return "%g, P0, %g, %g, %.2f, 41, 0x0000000000000000\n" % (s["util"], s["sm"], s["apps"], s["power"])
    return "%g, P0, %g, %g, %.2f, 41, 0x0000000000000000\n" % (s["util"], r["sm"], s["apps"], r["power"])


def test_stand_in_refuses_fields_and_the_module_drops_them():
    assert not os.path.exists("/run/sim/gpu.json")
    out, err = gpu_samples.sample(stand_in, "nvidia-smi", V.CANARY_QUERY_FIELDS, 2, 0)
    assert err is None
    assert out["unsupported_fields"] == ["clocks.applications.graphics", "clocks_throttle_reasons.active"]
    assert out["fields"] == ["utilization.gpu", "pstate", "clocks.sm", "power.draw", "temperature.gpu"]
    assert out["argv"] == ["nvidia-smi", "--query-gpu=utilization.gpu,pstate,clocks.sm,power.draw,temperature.gpu",
                           "--format=csv,noheader,nounits"]
    # the stand-in's idle GB10: 0 %, P8, 208 MHz, 4 W, 36 C
    assert out["samples"] == [{"utilization_pct": 0.0, "pstate": "P8", "clocks_sm_mhz": 208.0, "power_w": 4.0,
                               "temperature_c": 36.0}] * 2
    verdict = gpu_canary_verdict({"spark-sim-0": out["samples"]})
    assert verdict["by_host"]["spark-sim-0"]["state"] == "idle" and verdict["failures"] == []


def test_g19_stuck_node_fails_the_gate_through_module_and_filter():
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        return 0, g19_line("stuck"), ""
    with mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name):
        result, failed = run_module(gpu_samples.main, {"count": 3, "interval_s": 0})
    assert not failed and result["changed"] is False and len(calls) == 3
    assert calls[0] == V.gpu_query_argv("/usr/bin/nvidia-smi", V.CANARY_QUERY_FIELDS)
    healthy = gpu_samples.sample(lambda argv: (0, g19_line("recovered"), ""), "nvidia-smi",
                                 V.CANARY_QUERY_FIELDS, 3, 0)[0]["samples"]
    verdict = gpu_canary_verdict({"node-a": result["samples"], "node-b": healthy}, power_floor_w=25)
    assert verdict["by_host"]["node-a"]["state"] == "stuck_low_power"
    assert verdict["by_host"]["node-b"]["state"] == "computing"
    assert verdict["failures"] == [
        "node-a: GPU stuck in a low-power state under the canary (util 96 %, SM 799 MHz of 2418, 19.5 W, 3 samples, "
        "no throttle reason; catalogue gpu_low_power); every rank waits for this node. Fix: remove AC power from "
        "node-a (a reboot is not enough), then re-run"]


def test_busy_below_the_floor_on_the_stand_in_shape_fails_with_the_floor():
    # the shape the stand-in prints when a test writes {"utilization.gpu": "96", "power.draw": "12.40"}
    out, err = gpu_samples.sample(lambda argv: (0, "96, P0, 208, 12.40, 36\n", ""), "nvidia-smi",
                                  ["utilization.gpu", "pstate", "clocks.sm", "power.draw", "temperature.gpu"], 2, 0)
    verdict = gpu_canary_verdict({"spark-sim-1": out["samples"]}, power_floor_w=25)
    assert verdict["by_host"]["spark-sim-1"]["state"] == "not_computing"
    assert verdict["failures"] == [
        "spark-sim-1: the GPU reads 96 % busy at 12.4 W under the canary, below the 25 W floor: the engine is not "
        "computing (a collective spin-wait; catalogue gpu_low_power). Fix: restart the group (playbooks/restart.yml) "
        "and read the ranks' logs"]


def test_another_error_fails_with_the_host_fix_and_no_retry_loop():
    calls = []

    def run(argv):
        calls.append(argv)
        return 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    out, err = gpu_samples.sample(run, "nvidia-smi", V.CANARY_QUERY_FIELDS, 5, 0)
    assert len(calls) == 1 and out["samples"] == []
    assert err.endswith("failed (rc 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_missing_binary_and_bad_arguments_are_refused():
    with mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None):
        result, failed = run_module(gpu_samples.main, {"nvidia_smi": "nvidia-smi"})
    assert failed and result["msg"].startswith("nvidia-smi not found on this node. Fix:")
    result, failed = run_module(gpu_samples.main, {"count": 0})
    assert failed and "count must be 1-60 (is 0)" in result["msg"]
