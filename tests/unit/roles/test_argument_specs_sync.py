"""Every role's defaults/main.yml and meta/argument_specs.yml stay in step (the idea of
prometheus-community/ansible's lint_arguments_spec.sh): each default is an option of one of the role's
entry points, each option of each entry point has a default (in defaults/main.yml or in the spec) or is
required, and a literal default says the same in both files."""
import glob
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import DISTRIBUTION_MODES, FANOUT_MODES
from tests.unit.conftest import ROOT

ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def _load(role, *parts):
    path = os.path.join(ROOT, "roles", role, *parts)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


def test_every_role_is_covered():
    # every role directory, shared_defaults (defaults only, no tasks/main.yml) included
    assert ROLES == sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p))


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_an_option_of_an_entry_point(role):
    defaults = _load(role, "defaults", "main.yml")
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    options = set()
    for spec in specs.values():
        options |= set(spec.get("options") or {})
    assert sorted(set(defaults) - options) == [], "%s: defaults without an argument spec entry" % role


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_default_or_is_required(role):
    defaults = _load(role, "defaults", "main.yml")
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    missing = []
    for entry, spec in specs.items():
        for name, opt in (spec.get("options") or {}).items():
            if name not in defaults and not opt.get("required") and "default" not in opt:
                missing.append("%s.%s" % (entry, name))
    assert missing == [], "%s: options with neither a default nor required: true" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_spec_defaults_agree(role):
    """Where both say a literal default, they say the same one (a templated default is the role's to compute)."""
    defaults = _load(role, "defaults", "main.yml")
    main = _load(role, "meta", "argument_specs.yml")["argument_specs"]["main"].get("options") or {}
    differ = []
    for name, opt in main.items():
        if "default" in opt and name in defaults:
            value = defaults[name]
            if isinstance(value, str) and "{{" in value:
                continue
            if value != opt["default"]:
                differ.append("%s: defaults %r, spec %r" % (name, value, opt["default"]))
    assert differ == [], role


def test_image_sync_modes_follow_the_lane_schema():
    options = _load("image_sync", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["image_sync_mode"]["choices"] == [""] + DISTRIBUTION_MODES[:3] + ["verify", "build"]
    assert sorted(options["image_sync_mode"]["choices"]) == sorted([""] + DISTRIBUTION_MODES + ["verify"])
    assert options["image_sync_build_fanout"]["choices"] == [""] + FANOUT_MODES
