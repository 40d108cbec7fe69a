# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The check that vm.swappiness held (after node_prep wrote it, after a reboot, and on the watchdog's boot
path): module_utils sysctl_state reads a node laid out from the grep capture, node_checks judges it."""

import os

from ansible_collections.dgxspark.vllm.plugins.module_utils import node_checks as N
from ansible_collections.dgxspark.vllm.plugins.module_utils import sysctl_state as S
from ansible_collections.dgxspark.vllm.plugins.modules import sysctl_holds
from tests.unit.conftest import read_fixture
from tests.unit.plugins.modules.utils import run_module

OURS = "/etc/sysctl.d/99-zz-dgxspark-vllm.conf"


def _node(tmp_path, kernel="0", skip=()):
    """A node's sysctl files as the capture lists them (one line each), plus /proc/sys/vm/swappiness."""
    root = str(tmp_path)
    for line in read_fixture("node", "sysctl-swappiness-grep-overrides.txt").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        path, _sep, setting = line.partition(":")
        if path in skip:
            continue
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        with open(root + path, "a") as f:
            f.write("# a comment line is not a setting: vm.swappiness = 99\n%s\n" % setting)
    os.makedirs(root + "/proc/sys/vm", exist_ok=True)
    with open(root + "/proc/sys/vm/swappiness", "w") as f:
        f.write(kernel + "\n")
    return root


def test_reads_the_same_lines_as_the_grep_capture(tmp_path):
    root = _node(tmp_path)
    want = sorted(l for l in read_fixture("node", "sysctl-swappiness-grep-overrides.txt").splitlines()
                  if l and not l.startswith("#"))
    assert sorted(S.grep_settings("vm.swappiness", root).splitlines()) == want
    assert S.read_effective("vm.swappiness", root) == "0"


def test_overrides_after_a_reboot_are_named(tmp_path):
    root = _node(tmp_path, kernel="60")
    v = S.sysctl_holds("spark-a", "vm.swappiness", "0", OURS, True, root)
    assert v["ok"] is False and v["effective"] == "60" and (v["decides"], v["value"]) == ("/etc/sysctl.conf", "60")
    assert v["errors"] == [
        "spark-a: /usr/lib/sysctl.d/99-zzz-vendor-tuning.conf sets vm.swappiness = 10 after %s (vm.swappiness = 0), "
        "so the node gets 10 after a reboot or `sysctl --system`. Fix: remove the line from "
        "/usr/lib/sysctl.d/99-zzz-vendor-tuning.conf (keep a copy), or rename node_prep_sysctl_file so it sorts after it"
        % OURS,
        "spark-a: /etc/sysctl.conf sets vm.swappiness = 60 and is applied after every sysctl.d file, so the node gets 60 "
        "after a reboot. Fix: re-run node_prep (it disables that line, keeping a backup)",
        "spark-a: the kernel's vm.swappiness is 60 but node_prep wrote 0; something set it after the file was applied. "
        "Fix: find it (a later sysctl file, a tuned profile, a service), then re-run node_prep"]
    # node_prep disables the sysctl.conf line itself right after this check and judges the other errors
    assert v["sysctl_conf"] == {"path": "/etc/sysctl.conf", "value": "60"}
    assert v["sysctl_conf_error"] == v["errors"][1]


def test_value_that_held(tmp_path):
    # node_prep's state: the later vendor file and the sysctl.conf line gone, ours decides, the kernel agrees
    root = _node(tmp_path, skip=("/etc/sysctl.conf", "/usr/lib/sysctl.d/99-zzz-vendor-tuning.conf"))
    v = S.sysctl_holds("spark-a", "vm.swappiness", 0, OURS, True, root)
    assert (v["ok"], v["decides"], v["value"], v["errors"]) == (True, OURS, "0", [])
    assert (v["sysctl_conf"], v["sysctl_conf_error"]) == (None, None)
    assert v["msg"] == "spark-a: vm.swappiness is 0 in the kernel (judged), %s decides it at boot" % OURS
    # the simulated fleet shares the build machine's kernel: its value is reported, not judged
    with open(root + "/proc/sys/vm/swappiness", "w") as f:
        f.write("60\n")
    v = S.sysctl_holds("spark-sim-0", "vm.swappiness", 0, OURS, False, root)
    assert v["ok"] is True and v["effective"] == "60" and "(not judged)" in v["msg"]
    assert N.sysctl_holds_verdict("n", "vm.swappiness", 0, OURS, "", "", True)["errors"][0].startswith(
        "n: the kernel's vm.swappiness is unreadable but node_prep wrote 0")


def test_module_on_this_machine_reads_and_does_not_judge():
    # the real /etc and /proc of the machine running the tests; judged off, so only file order can fail
    res, failed = run_module(sysctl_holds.main, {"value": "0", "file": OURS, "judged": False, "node": "here"})
    with open("/proc/sys/vm/swappiness") as f:
        assert res["effective"] == f.read().strip()
    assert failed == bool(res["errors"])
    if failed:
        assert res["msg"] == "; ".join(res["errors"])
    else:
        assert res["msg"].startswith("here: vm.swappiness is %s in the kernel (not judged)" % res["effective"])
