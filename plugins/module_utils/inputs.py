# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Input checks shared by the modules: run before any side effect, messages name what, where and the fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


# A secret goes into an HTTP header, a one-line file and a container's environment: one token of printable
# ASCII, no quote that could end a quoted value, bounded so a pasted file is caught.
SECRET_MAX_LEN = 512
_SECRET = re.compile(r"[!#-&(-_a-~]+")  # 0x21-0x7e without " ' `
VAULT_HEADER = "$ANSIBLE_VAULT;"


class Undecryptable(object):
    """Stands for a vault-encrypted value that no given vault secret decrypts (the controller checks read it)."""


def secret_problem(name, value):
    """None when a secret is absent or one acceptable token; else a message that does not contain the value."""
    if isinstance(value, Undecryptable):
        return ("%s is vault-encrypted and does not decrypt with the vault secrets given: run with --ask-vault-pass or "
                "--vault-password-file (the vault id it was encrypted with), or encrypt it again: ansible-vault "
                "encrypt_string --name %s" % (name, name))
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "%s must be a string, got %s; quote it" % (name, type_name(value))
    if value.lstrip().startswith(VAULT_HEADER):
        return ("%s holds Ansible vault ciphertext as plain text (the value is not shown): mark it !vault in YAML, "
                "or use ansible-vault encrypt_string, and give the vault password (--ask-vault-pass)" % name)
    if re.search(r"\s", value):
        return ("%s contains whitespace or a newline (the value is not shown); a key or token is one word: remove "
                "the spaces or the trailing newline (| trim after a file lookup)" % name)
    if len(value) > SECRET_MAX_LEN:
        return ("%s is %d characters long, more than %d (the value is not shown); a key or token is one line: "
                "check that the whole file was not pasted" % (name, len(value), SECRET_MAX_LEN))
    if not _SECRET.fullmatch(value):
        return ("%s may hold only printable ASCII without quotes (\" ' `) (the value is not shown); generate it "
                "again, e.g. openssl rand -hex 32" % name)
    return None


def type_name(value):
    """The YAML name of a value's type (Ansible hands over its own list and dict subclasses)."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                       (dict, "mapping"), ((list, tuple), "list")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def choice_problem(name, value, choices, fix):
    """None when value is one of choices (strings); else the message naming the parameter, the value and fix."""
    if isinstance(value, str) and value in choices:
        return None
    shown = value if isinstance(value, str) else "(%s)" % type_name(value)
    return "%s=%s is not one of %s; nothing was changed. Fix: %s" % (
        name, _short(shown), ", ".join(choices), fix)


def pattern_problem(name, value, pattern, example, fix):
    """None when value is a string that pattern matches in full (re.fullmatch: no final newline slips through)."""
    if isinstance(value, str) and re.fullmatch(pattern, value):
        return None
    shown = value if isinstance(value, str) else "(%s)" % type_name(value)
    return "%s=%s is not of the form %s; nothing was changed. Fix: %s" % (name, _short(shown), example, fix)


def _short(text, limit=60):
    """text for a message: one line, at most limit characters (repr shows a newline or a control char)."""
    out = repr(text)[1:-1] if re.search(r"[^\x20-\x7e]", text) else text
    return out if len(out) <= limit else out[:limit] + "..."


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
