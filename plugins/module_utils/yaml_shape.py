# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Shapes of a YAML file that Ansible would accept badly: checked on the node graph, before any value is built.

An alias bomb ("billion laughs") costs PyYAML nothing to compose but hangs Ansible when it copies the values;
a key given twice in one mapping keeps only its last value (Ansible only warns); a deep nesting ends in a
RecursionError. yaml.compose builds the graph with aliases shared, so each node is counted once here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:  # the controller has PyYAML (Ansible needs it); the import guard keeps module_utils importable anywhere
    import yaml
    HAS_YAML = True
except ImportError:
    HAS_YAML = False

MAX_VALUES = 100000   # values once every alias is expanded; a real inventory or lane has a few hundred
MAX_DEPTH = 64        # nesting levels; a lane has five
MAX_BYTES = 4 << 20   # an inventory or lane file is a few KiB


def _line(node):
    return node.start_mark.line + 1


def _where(node):
    return "%d:%d" % (node.start_mark.line + 1, node.start_mark.column + 1)


def shape_problems(path, text=None):
    """Messages (file, line, what, fix) for one YAML file; [] when it is fine or is not YAML (another parser's)."""
    try:
        if text is None:
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
            if len(raw) > MAX_BYTES:
                return ["%s: %d bytes or more; an inventory or lane file is a few KiB: is it the right file?"
                        % (path, MAX_BYTES)]
            text = raw.decode("utf-8-sig")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError):
        return []  # not YAML (an INI file), or broken: Ansible's own parser names the error
    if root is None:
        return []
    problems = []
    sizes = {}
    # iterative post-order walk: sizes[id] = expanded value count of the node
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if id(node) in sizes and not done:
            continue
        if depth > MAX_DEPTH:
            return ["%s line %d: nested more than %d levels deep; flatten it" % (path, _line(node), MAX_DEPTH)]
        children = _children(node)
        if not done:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(c), 0) for c in children)
        if sizes[id(node)] > MAX_VALUES:
            return ["%s line %d: its aliases expand to more than %d values (an alias bomb); write the values out, "
                    "or alias a value at most once or twice" % (path, _line(node), MAX_VALUES)]
        if isinstance(node, yaml.MappingNode):
            problems += _duplicates(path, node)
    return problems


def _children(node):
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _duplicates(path, node):
    """A key written twice in one mapping; a key a merge (<<) brings in may be overridden, that is YAML."""
    seen = {}
    out = []
    for key, _value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if key.value in seen:
            out.append("%s line %d: key %s is given twice in one mapping (line:column %s and %s); YAML keeps "
                       "only the last one: remove one of them" % (path, _line(key), key.value, seen[key.value],
                                                                  _where(key)))
        else:
            seen[key.value] = _where(key)
    return out
