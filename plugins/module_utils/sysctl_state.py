# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Read a sysctl's state on this node (standard library only) and judge it with node_checks.

Shared by the module ``sysctl_holds`` (node_prep's ``verify_boot`` entry point) and any program that
runs on the node at boot, e.g. the watchdog's readiness check: the rule is node_checks.sysctl_holds_verdict.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import (
    SYSCTL_CONF, SYSCTL_DIRS, sysctl_holds_verdict)


def _setting_re(key):
    # `key = value`, optionally with a leading '-' (ignore errors) and '/' as the separator (sysctl.d(5))
    return re.compile(r"^\s*-?%s\s*=" % re.escape(key).replace(r"\.", "[./]"))


def grep_settings(key, root=""):
    """``grep -H`` shaped lines ``path:line`` of every sysctl file line that sets key (paths without root)."""
    pattern = _setting_re(key)
    paths = []
    for d in SYSCTL_DIRS:
        try:
            names = sorted(os.listdir(root + d))
        except OSError:
            continue
        paths.extend("%s/%s" % (d, n) for n in names if n.endswith(".conf"))
    paths.append(SYSCTL_CONF)
    out = []
    for path in paths:
        try:
            with open(root + path) as f:
                lines = f.read().splitlines()
        except (IOError, OSError):
            continue
        out.extend("%s:%s" % (path, line.strip()) for line in lines if pattern.match(line))
    return "\n".join(out)


def read_effective(key, root=""):
    """The kernel's value (/proc/sys/<key with '/'>), '' when unreadable."""
    try:
        with open(root + "/proc/sys/" + key.replace(".", "/")) as f:
            return f.read().strip()
    except (IOError, OSError):
        return ""


def sysctl_holds(host, key, want, ours, judged=True, root=""):
    """node_checks.sysctl_holds_verdict on this node's files and kernel. `root` prefixes every path (tests)."""
    return sysctl_holds_verdict(host, key, want, ours, read_effective(key, root), grep_settings(key, root), judged)
