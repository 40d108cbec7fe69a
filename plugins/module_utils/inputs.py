# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Input checks shared by the modules: run before any side effect, messages name what, where and the fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re


class InputError(Exception):
    """A malformed input; the message names the item and the fix (and never a secret)."""


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


def json_object(text, what, fix):
    """Parse text as a JSON object (dict); InputError naming what, the problem and the fix otherwise."""
    stripped = (text or "").lstrip()
    if not stripped:
        raise InputError("%s is empty; %s" % (what, fix))
    if stripped[:1] == "<":
        raise InputError("%s is HTML, not JSON (starts %r); %s" % (what, stripped[:40], fix))
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError("%s is not valid JSON (%s; starts %r); %s" % (what, e, stripped[:40], fix))
    if not isinstance(data, dict):
        raise InputError("%s is a JSON %s, not an object; %s" % (what, type(data).__name__.replace("dict", "object")
                                                                 .replace("list", "array"), fix))
    return data


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
