# -*- coding: utf-8 -*-
"""Every user-settable value has a kind: each role's options (meta/kinds.yml beside meta/argument_specs.yml) and
every string of the lane schema. A new option without a kind fails here."""

from __future__ import absolute_import, division, print_function

import glob
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import kinds, lane

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def _options(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
        specs = yaml.safe_load(f)["argument_specs"]
    out = {}
    for entry in specs.values():
        for key, opt in (entry.get("options") or {}).items():
            out.setdefault(key, opt)
    return out


def _declared(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "kinds.yml")) as f:
        return yaml.safe_load(f)["kinds"]


def test_every_role_is_walked():
    assert len(ROLES) >= 12 and "vllm_watchdog" in ROLES and "node_prep" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_exactly_one_known_kind(role):
    options, declared = _options(role), _declared(role)
    assert sorted(set(options) - set(declared)) == [], "options of %s without a kind in meta/kinds.yml" % role
    assert sorted(set(declared) - set(options)) == [], "kinds.yml of %s names options its spec lacks" % role
    for key, spec in declared.items():
        name, params = kinds.normalise(spec)
        opt_type = options[key].get("type", "str")
        if opt_type == "bool":
            assert name == "bool", key
        if opt_type in ("str", "path", "raw") and name in ("mapping", "list"):
            pytest.fail("%s: a %s option declared %s" % (key, opt_type, name))
        if opt_type == "list" and options[key].get("elements", "str") in ("str", "path"):
            assert name == "list" and "elements" in params, "%s: list of strings without an element kind" % key
        if options[key].get("choices") and name not in ("choice",):
            pytest.fail("%s has choices but kind %s" % (key, name))
        if options[key].get("options"):
            # a dict (or list of dicts) with suboptions: each suboption has its kind in `fields`, none more
            record = kinds.normalise(params["elements"])[1] if name == "list" else params
            assert sorted((record.get("fields") or {})) == sorted(options[key]["options"]), (
                "%s: its suboptions need a kind each (kind mapping, fields: {suboption: kind})" % key)


def test_choice_kinds_match_the_argument_spec_choices():
    for role in ROLES:
        options, declared = _options(role), _declared(role)
        for key, spec in declared.items():
            name, params = kinds.normalise(spec)
            if name == "choice":
                assert params["choices"] == options[key]["choices"], key


def _walk(schema, path=()):
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, path + (key,))
    for word in ("items", "additionalProperties", "propertyNames"):
        if isinstance(schema.get(word), dict):
            yield from _walk(schema[word], path + ("<%s>" % word,))


def test_every_lane_string_has_a_rule():
    missing = []
    for path, node in _walk(lane.LANE_SCHEMA):
        types = node.get("type") or []
        types = types if isinstance(types, list) else [types]
        if "string" not in types and path and path[-1] != "<propertyNames>":
            continue
        if not path:
            continue
        if not any(k in node for k in ("x-kind", "enum", "const")):
            missing.append(".".join(path))
    assert missing == []


def _keywords(node, path=()):
    """(path, keyword) of every keyword anywhere in a schema, allOf/if/then included."""
    if isinstance(node, dict):
        for key, sub in node.items():
            yield path, key
            yield from _keywords(sub, path + (key,))
    elif isinstance(node, list):
        for idx, sub in enumerate(node):
            yield from _keywords(sub, path + (idx,))


def test_no_lane_leaf_has_its_own_pattern():
    # a string rule lives in its kind (module_utils/kinds.py), never as an inline regex of the schema
    found = [".".join(str(p) for p in path) for path, key in _keywords(lane.LANE_SCHEMA)
             if key in ("pattern", "patternProperties", "format") and (not path or path[-1] != "properties")]
    assert found == []
    # the walk sees a keyword where it is: the enums of the schema are found
    assert any(key == "enum" for _path, key in _keywords(lane.LANE_SCHEMA))


def test_lane_x_kinds_are_known():
    for path, node in _walk(lane.LANE_SCHEMA):
        if "x-kind" in node:
            kinds.normalise(node["x-kind"])


def test_every_kind_is_in_the_docs_table():
    with open(os.path.join(ROOT, "docs", "inputs.md")) as f:
        table = [line for line in f if line.startswith("| `")]
    assert sorted(k for k in kinds.KINDS if not any("`%s`" % k in line.split(" | ")[0] for line in table)) == []
