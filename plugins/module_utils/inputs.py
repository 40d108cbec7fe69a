# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Input checks shared by the modules: run before any side effect, messages name what, where and the fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


def secret_problem(name, value):
    """None when a secret is absent or one token; else a message that does not contain the value."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "%s must be a string, got %s; quote it" % (name, type(value).__name__)
    if re.search(r"\s", value):
        return ("%s contains whitespace or a newline (the value is not shown); a key or token is one word: remove "
                "the spaces or the trailing newline (| trim after a file lookup)" % name)
    return None


def redact(text, *secrets):
    """text with every non-empty secret replaced by <redacted>."""
    out = text if isinstance(text, str) else str(text)
    for secret in secrets:
        if isinstance(secret, str) and secret:
            out = out.replace(secret, "<redacted>")
    return out


def regex_problem(name, pattern):
    """None when pattern compiles (or is unset); else the message."""
    if pattern is None:
        return None
    try:
        re.compile(pattern)
    except re.error as e:
        return ("%s %r is not a valid regular expression (%s); fix it, e.g. 'Connecting to|rendezvous', or leave it "
                "unset" % (name, pattern, e))
    return None
