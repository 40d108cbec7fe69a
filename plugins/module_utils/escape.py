# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Escaping per file kind, and the checks a rendered file must pass before it is installed (docs/inputs.md).

The kinds (module_utils/kinds.py) refuse almost every hostile value on the controller; these functions are the
second wall: each writes one value into one file kind so that it stays one inert token there, and raises
EscapeError for what that file kind cannot hold at all (a newline in a unit file or a sudoers rule).
Sources: sudoers(5) (special characters escaped with a backslash), sshd(8) AUTHORIZED_KEYS FILE FORMAT (a quote
inside command="..." is written \\"), systemd.unit(5) and systemd.service(5) (specifiers '%', '$' expansion,
C-style escapes inside double quotes), exports(5) (octal escapes in paths), systemd.exec(5) EnvironmentFile=
(a double-quoted value; "$VAR" in ExecStart= splits it at whitespace), YAML 1.2 and the PromQL string literal (a
JSON string is both).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxspark.vllm.plugins.module_utils import kinds


class EscapeError(ValueError):
    """A value the file kind cannot hold."""


_CONTROL = re.compile("[\x00-\x1f\x7f\u2028\u2029]")


def _one_line(value, where):
    if not isinstance(value, str):
        value = str(value)
    if _CONTROL.search(value):
        raise EscapeError("%s: %r holds a newline or another control character, which %s cannot hold as one value"
                          % (where, value, where))
    return value


# --- sudoers(5): the characters with a meaning in a rule are escaped with a backslash
# (sudoers(5) lists ! = : , ( ) and the backslash; '#' starts a comment or a uid, * ? [ ] are command wildcards)
_SUDOERS_SPECIAL = re.compile(r"([\\,:=()!#*?\[\]\"])")


def sudoers_word(value):
    """A user name or command path as one sudoers word."""
    value = _one_line(value, "a sudoers rule")
    if not value or re.search(r"\s", value):
        raise EscapeError("a sudoers rule: %r is empty or holds whitespace (a word ends at a space)" % value)
    return _SUDOERS_SPECIAL.sub(r"\\\1", value)


_SUDOERS_RULE = re.compile(r"(?P<user>(?:\\.|[^\s\\])+)\s+ALL\s*=\s*\(root\)\s+NOPASSWD:\s+(?P<cmds>.+)")
_SUDOERS_ALIAS = re.compile(r"Cmnd_Alias\s+(?P<name>[A-Z][A-Z0-9_]*)\s*=\s*(?P<cmds>.+)")


def _split_unescaped(text, sep):
    out, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i:i + 2]
            i += 2
            continue
        if c == sep:
            out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur)
    return out


def _unescape(word):
    return re.sub(r"\\(.)", r"\1", word)


def sudoers_rules(text):
    """The rules of a rendered sudoers drop-in: [[user, [command, ...]]] for each non-comment line of the form
    'USER ALL=(root) NOPASSWD: CMD[, CMD...]', [['Cmnd_Alias NAME', [command, ...]]] for an alias, words
    unescaped; any other non-comment line is returned as [None, [line]], so a comparison with the intended
    rules fails on it."""
    rules = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#include")):
            continue
        alias = _SUDOERS_ALIAS.fullmatch(stripped)
        m = alias or _SUDOERS_RULE.fullmatch(stripped)
        if not m:
            rules.append([None, [stripped]])
            continue
        cmds = [_unescape(c.strip()) for c in _split_unescaped(m.group("cmds"), ",")]
        head = ("Cmnd_Alias " + m.group("name")) if alias else _unescape(m.group("user"))
        rules.append([head, cmds])
    return rules


def sudoers_exact_problems(text, want):
    """[] when the drop-in holds exactly the rules WANT ([[user or 'Cmnd_Alias NAME', [command, ...]], ...],
    each rule root without a password) and nothing else."""
    rules = sudoers_rules(text)
    want = [[w[0], list(w[1])] for w in want]
    if rules == want:
        return []
    return ["the rendered sudoers drop-in grants %r, not exactly %r; a value reached it unescaped: refuse it"
            % (rules, want)]


# --- sshd(8) authorized_keys: option values are double-quoted; only \" is an escape there
def authorized_keys_option(value):
    """A value inside an option's double quotes (command="...")."""
    value = _one_line(value, "an authorized_keys option")
    if "\\" in value:
        # sshd keeps a backslash before anything but '"', so the result would differ from the value
        raise EscapeError("an authorized_keys option: %r holds a backslash" % value)
    return value.replace('"', '\\"')


# --- systemd.service(5)
def systemd_arg(value):
    """One word of an ExecStart= command line: specifiers ('%') and variables ('$') made literal, quoted
    (C-style escapes) when it holds anything but safe characters."""
    value = _one_line(value, "a systemd unit line")
    out = value.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_./@+:=,-]+", out):
        return out
    return '"' + out.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_value(value):
    """The value of a unit setting that is not a command line (Description=): specifiers made literal."""
    return _one_line(value, "a systemd unit line").replace("%", "%%")


def unit_lines_problems(text, want_keys):
    """[] when every non-comment line of the unit is a section header or one of WANT_KEYS, each key once
    (a value that added ExecStartPre= or a second ExecStart= fails here)."""
    seen, problems = [], []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or s.startswith(";"):
            continue
        if re.fullmatch(r"\[[A-Za-z]+\]", s):
            continue
        key = s.split("=", 1)[0]
        if key not in want_keys:
            problems.append("the rendered unit has an unexpected line %r" % s)
        elif key in seen:
            problems.append("the rendered unit sets %s twice" % key)
        seen.append(key)
    missing = [k for k in want_keys if k not in seen]
    if missing:
        problems.append("the rendered unit lacks %s" % ", ".join(missing))
    return problems


# --- exports(5): whitespace, '#', '\\' and non-ASCII in a path written as octal escapes
def exports_path(value):
    value = _one_line(value, "an /etc/exports line")
    if not value.startswith("/"):
        raise EscapeError("an /etc/exports line: %r is not an absolute path" % value)
    return "".join(("\\%03o" % ord(c)) if (c.isspace() or c in '\\#"' or ord(c) > 126) else c for c in value)


# --- systemd-analyze verify (systemd-analyze(1)): the unit file's own checker, where the node has it.
# It exits 0 on a setting it cannot parse ("..., ignoring."), so every line it prints about our unit counts.
def systemd_verify_problems(rc, output, path, unit_name):
    """Problems from `systemd-analyze verify PATH` (rc, stdout + stderr): a non-zero rc, and every line that names
    the unit's file or the unit (lines about other units on the node are not ours to judge)."""
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    ours = [ln for ln in lines if path in ln or ln.startswith(unit_name + ":") or (" %s " % unit_name) in ln]
    problems = ["systemd-analyze verify: %s" % ln.replace(path, unit_name) for ln in ours]
    if rc != 0 and not problems:
        problems.append("systemd-analyze verify of %s exited %s: %s" % (unit_name, rc, " | ".join(lines) or "no output"))
    return problems


def systemd_verify(text, unit_name, run, analyze="systemd-analyze"):
    """Write TEXT as UNIT_NAME into a fresh temporary directory and verify it there (the name must carry the unit
    type suffix: systemd-analyze refuses any other file name). RUN(argv) -> (rc, stdout, stderr), no shell.
    Returns (problems, output)."""
    import os
    import shutil
    import tempfile
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,199}\.(service|timer|socket|path|mount)", unit_name):
        raise EscapeError("%r is not a unit file name with its type suffix" % unit_name)
    tmp = tempfile.mkdtemp(prefix="dgxspark-unit-")
    try:
        path = os.path.join(tmp, unit_name)
        with open(path, "w") as f:
            f.write(text)
        # --man=no: Documentation= pages need not be installed
        rc, out, err = run([analyze, "verify", "--man=no", path])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    output = "\n".join(x for x in (out, err) if x)
    return systemd_verify_problems(rc, output, path, unit_name), output


# --- sysctl.d(5): one 'key = value' line; '#' or ';' at a line's start is a comment, and the value is the rest
# of the line with surrounding whitespace removed. A value is a number or words of a safe set separated by single
# spaces (net.ipv4.tcp_rmem = 4096 131072 6291456); anything else is refused, not escaped (the format has no escapes).
_SYSCTL_WORD = r"[A-Za-z0-9_.,:/+-]+"


def sysctl_key(value):
    """A sysctl key as it stands before '=' in a sysctl.d line."""
    value = _one_line(value, "a sysctl.d line")
    if not re.fullmatch(kinds.SYSCTL_KEY, value):
        raise EscapeError("a sysctl.d line: %r is not a sysctl key (dot-separated lowercase words)" % value)
    return value


def sysctl_value(value):
    """A sysctl value as it stands after '=' in a sysctl.d line (and as ansible.posix.sysctl writes it)."""
    if isinstance(value, bool):
        raise EscapeError("a sysctl.d line: %r is a bool, write the number the kernel takes (0 or 1)" % value)
    value = _one_line(value, "a sysctl.d line")
    if len(value) > 1024 or not re.fullmatch(r"%s(?: %s)*" % (_SYSCTL_WORD, _SYSCTL_WORD), value):
        raise EscapeError("a sysctl.d line: %r is not a sysctl value (numbers or words of letters, digits and "
                          "_ . , : / + -, single spaces between them, at most 1024 characters)" % value)
    return value


def sysctl_line(key, value):
    """The line 'KEY = VALUE' of a sysctl.d file."""
    return "%s = %s" % (sysctl_key(key), sysctl_value(value))


# --- netplan(5): a YAML document. Values are never pasted into YAML text: the document is checked (every key
# and value of the shape the role writes) and serialised by PyYAML, then read back and compared.
_NETPLAN_ETHERNET_KEYS = ("mtu", "addresses")


def netplan_yaml(doc):
    """The netplan v2 document {network: {version: 2, ethernets: {<netdev>: {mtu: <int>[, addresses: [<cidr>]]}}}}
    as YAML text. Refuses a netdev that is not an interface name, an MTU outside 576..9216, an address that is
    not IP/prefix, any other key; and fails when the text does not read back as the same document."""
    import yaml
    if not isinstance(doc, dict) or list(doc) != ["network"] or not isinstance(doc["network"], dict):
        raise EscapeError("a netplan file: the document must be {network: {...}}, got %r" % (doc,))
    net = doc["network"]
    if sorted(net) != ["ethernets", "version"] or net["version"] != 2 or not isinstance(net["ethernets"], dict):
        raise EscapeError("a netplan file: network must hold version: 2 and ethernets only, got %r" % (sorted(net),))
    for name, entry in net["ethernets"].items():
        if kinds.problem("interface", name, "netdev") is not None:
            raise EscapeError("a netplan file: %r is not an interface name (at most 15 letters, digits and _ . -)"
                              % (name,))
        if not isinstance(entry, dict) or not set(entry) <= set(_NETPLAN_ETHERNET_KEYS) or "mtu" not in entry:
            raise EscapeError("a netplan file: %s must hold mtu (and addresses) only, got %r" % (name, entry))
        if kinds.problem({"kind": "integer", "min": 576, "max": 9216}, entry["mtu"], "mtu") is not None:
            raise EscapeError("a netplan file: %s mtu %r is not an integer in 576..9216" % (name, entry["mtu"]))
        addresses = entry.get("addresses", [])
        if not isinstance(addresses, list):
            raise EscapeError("a netplan file: %s addresses must be a list, got %r" % (name, addresses))
        for addr in addresses:
            if kinds.problem("cidr", addr, "address") is not None:
                raise EscapeError("a netplan file: %s address %r is not an address with its prefix" % (name, addr))
    text = yaml.safe_dump(doc, indent=2, default_flow_style=False, sort_keys=True, allow_unicode=False)
    if yaml.safe_load(text) != doc:
        raise EscapeError("a netplan file: the document does not read back as written")
    return text


# --- systemd.exec(5) EnvironmentFile= read by a unit whose ExecStart= holds $ARGS (Debian's prometheus and
# prometheus-node-exporter units): systemd splits the value at whitespace into argv words and does not expand
# '%' there. Each word is kept to a set with no quote, backslash, '$' or whitespace, so it stays one word.
_ENV_ARG_WORD = r"[A-Za-z0-9_./:=,@+%\[\]-]{1,4096}"


def env_file_args(words):
    """The words of one command line as the double-quoted value of 'ARGS=' in an EnvironmentFile."""
    if isinstance(words, (str, bytes)) or not isinstance(words, (list, tuple)) or not words:
        raise EscapeError("an EnvironmentFile ARGS line: %r is not a non-empty list of argv words" % (words,))
    out = []
    for word in words:
        word = _one_line(word, "an EnvironmentFile ARGS line")
        if not re.fullmatch(_ENV_ARG_WORD, word):
            raise EscapeError("an EnvironmentFile ARGS line: %r would not stay one argv word (whitespace, a quote, "
                              "a backslash or '$'; the word may hold letters, digits and _ . / : = , @ + %% [ ] -)"
                              % (word,))
        out.append(word)
    return '"%s"' % " ".join(out)


def env_file_args_words(text):
    """The argv words systemd makes of an 'ARGS="..."' line as env_file_args writes it (a reader for checks)."""
    m = re.fullmatch(r'ARGS="([^"\\$]*)"', text.strip())
    return None if m is None else m.group(1).split()


# --- YAML (prometheus.yml) and PromQL string literals: a JSON string (ASCII, escapes) reads back as the same
# string in YAML 1.2 and in PromQL (Go escapes); refused when it holds a control character, then read back.
def json_string(value, where):
    import json
    import yaml
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise EscapeError("%s: %r is not a string" % (where, value))
    value = _one_line(value, where)
    if re.search("[\ud800-\udfff\U00010000-\U0010ffff]", value):
        # a surrogate, or a character JSON writes as a surrogate pair, which Prometheus's parsers refuse
        raise EscapeError("%s: %r holds a character outside the Basic Multilingual Plane or a lone surrogate" % (
            where, value))
    text = json.dumps(value, ensure_ascii=True)
    if yaml.safe_load(text) != value:
        raise EscapeError("%s: %r does not read back as written" % (where, value))
    return text


def yaml_string(value):
    """One YAML scalar that reads back as exactly this string (a JSON string)."""
    return json_string(value, "a YAML file")


def promql_string(value):
    """One PromQL string literal (a label value in a matcher) that reads back as exactly this string."""
    return json_string(value, "a PromQL expression")
