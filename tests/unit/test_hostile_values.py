# -*- coding: utf-8 -*-
"""The generated hostile-values suite (docs/inputs.md): for every declared option, every hostile value of its
kind's corpus is refused on the controller by its kind; and every file the watchdog and node_prep render from
such values either refuses the value (its file-kind filter) or holds exactly the intended rule or lines.
The corpus is data: a new option is tested by being declared."""

from __future__ import absolute_import, division, print_function

import glob
import os

import jinja2
import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.filter.file_kinds import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import escape, kinds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Refused by every string kind (control characters, direction overrides, size, type).
ANY_STRING = [
    "vllm-watchdog\nvllm-watchdog ALL=(ALL) NOPASSWD: ALL",   # newline + a second rule
    "/opt/x\nExecStartPre=/bin/touch /tmp/pwned",              # newline + a unit line
    "ok\x00hidden",                                            # NUL
    "x\u2028y",                                                 # Unicode line separator
    "abc\u202edcba",                                            # bidirectional override
    "tab\there",
    "a" * 4097,                                                # 4 KiB + 1
    42.5, True, ["list"], {"a": 1},                              # wrong types
]
# Refused by every kind that names something (users, paths, units, images ...): shell and file syntax.
NAMING = [
    "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "a;b", 'a"b', "a'b", "/etc/%h/x", "a b", "a,b", "a=b",
    "vllm-watchdоg",   # Cyrillic о: a look-alike
    "a\\b", "a|b", "a&b", "a>b",
]
PATHS = ["../../../etc", "/var/../etc/shadow", "relative/path", "/a//b", "/a/./b"]
NUMBERS = [float("nan"), float("inf"), float("-inf"), True, False, "30", "3e2", None, 1e308, -1e308]
INTEGERS = [2.0, 2.5, "2", True]
SECRETS = ['ab"cd', "ab cd", "ab\ncd", "ab'cd", "ab`cd", "kéy", "a" * 513, "$ANSIBLE_VAULT;1.1;AES256", 12345]

STRING_KINDS = {"text", "raw_text", "unix_user", "unix_group", "unit_name", "abs_path", "controller_path",
                "file_name", "file_suffix", "container_name", "image_ref", "interface", "address", "host", "cidr",
                "url", "sysctl_key", "env_name", "regex", "token", "group_name", "inventory_host", "command",
                "hf_repo", "pip_requirement", "cli_option", "mount_options", "glob", "size", "file_mode"}
FREE_TEXT = {"text", "raw_text", "controller_path", "regex"}
# Corpus strings that are the kind's own syntax (a version specifier, an option list), so not hostile there.
OWN_SYNTAX = {"pip_requirement": {"a>b"}, "mount_options": {"a,b", "a=b"}}
NUMBER_KINDS = {"duration", "integer", "number", "ratio", "gib", "port"}


def corpus(spec):
    """The hostile values for one kind spec."""
    name, params = kinds.normalise(spec)
    if name == "list":
        elem = params.get("elements")
        return [[v] for v in corpus(elem)] if elem else ["not a list", 3]
    if name == "secret":
        return SECRETS
    if name in STRING_KINDS:
        out = list(ANY_STRING)
        if name not in FREE_TEXT:
            out += NAMING
        if name == "abs_path":
            out += PATHS
        return [v for v in out if not (name == "regex" and isinstance(v, str) and "\\" in v)
                and not (isinstance(v, str) and v in OWN_SYNTAX.get(name, ()))]
    if name in NUMBER_KINDS:
        out = [v for v in NUMBERS if not (v is None and params.get("null"))]
        if name in ("integer", "port") or params.get("integer"):
            out += INTEGERS
        return out
    if name == "bool":
        return ["maybe", "true\n", 2, 1.0, [True]] + ([] if params.get("null") else [None])
    if name == "choice":
        return [c + "\n" for c in params["choices"] if isinstance(c, str)] + ["nope"]
    if name == "mtu_map":
        return [{"../../../etc": 9000}, {"enp1s0f1np1": "9000"}, {"enp1s0f1np1": 9000.0}, {"a\nb": 9000},
                {"enp1s0f1np1": 100000}, "a string"]
    if name in ("mapping", "env_map"):
        return ["a string", ["a", "list"], 3]
    return []


def _declared():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "kinds.yml"))):
        role = path.split(os.sep)[-3]
        with open(path) as f:
            for key, spec in yaml.safe_load(f)["kinds"].items():
                out.append((role, key, spec))
    return out


DECLARED = _declared()


@pytest.mark.parametrize("role,key,spec", DECLARED, ids=["%s.%s" % (d[0], d[1]) for d in DECLARED])
def test_every_hostile_value_of_its_kind_is_refused(role, key, spec):
    values = corpus(spec)
    assert values, "no hostile corpus for %s (%r): add one for its kind" % (key, spec)
    accepted = [v for v in values if kinds.problem(spec, v, key, "node-1") is None]
    assert accepted == []


def test_messages_name_host_key_rule_fix_and_redact_secrets():
    msg = kinds.problem("unix_user", "bad user", "vllm_watchdog_ssh_user", "spark-1")
    assert msg.startswith("host spark-1: vllm_watchdog_ssh_user = 'bad user' is not a POSIX user name")
    assert msg.endswith("(kind unix_user); use a name like vllm-watchdog.")
    secret = kinds.problem("secret", "sk-abc def", "vllm_api_key", "spark-1")
    assert "sk-abc" not in secret and "<redacted>" in secret


@pytest.mark.parametrize("spec,good", [
    ("unix_user", "vllm-watchdog"), ("abs_path", "/usr/local/sbin/dgxspark-vllm-agent"), ("unit_name", "a-b.c@1"),
    ({"kind": "duration", "min": 1, "max": 3600}, 30), ({"kind": "duration", "min": 1, "max": 3600}, 0.5 + 29.5),
    ({"kind": "integer", "min": 0, "max": 200}, 0), ("port", 65535), ("host", "fe80::1%enP7s7"),
    ("host", "spark-1.lab"), ("address", "198.18.10.10"), ("cidr", "198.18.20.0/24"), ("interface", "enp1s0f1np1"),
    ("image_ref", "ghcr.io/o/n:tag@sha256:" + "a" * 64), ("secret", "sk-" + "x" * 60), ("size", "32g"),
    ({"kind": "gib", "null": True}, None), ({"kind": "abs_path", "empty": True}, ""),
    ({"kind": "abs_path", "under": "/etc/sysctl.d", "strict": True}, "/etc/sysctl.d/99-zz-dgxspark-vllm.conf"),
    ("url", "http://[fe80::1]:8000/v1"), ("pip_requirement", "huggingface_hub>=0.30,<2"), ("file_mode", "0775"),
])
def test_legal_values_pass(spec, good):
    assert kinds.problem(spec, good, "k") is None


@pytest.mark.parametrize("spec,bad,rule", [
    ({"kind": "duration", "min": 1, "max": 3600}, 0.5, "is outside 1..3600"),
    ({"kind": "integer", "min": 1}, 131072.0, "must be an integer, got the float 131072.0"),
    ({"kind": "gib"}, 500, "is outside 0..121"),
    ({"kind": "abs_path", "under": "/etc/sudoers.d", "strict": True, "plain_name": True}, "/etc/sudoers.d/a.b",
     "a dot"),
    ({"kind": "abs_path", "under": "/etc/sysctl.d"}, "/etc/sysctl.conf", "is not under /etc/sysctl.d"),
    ("unit_name", "name\n", "newline"),
    ("port", 0, "is outside 1..65535"),
])
def test_near_misses_are_refused_with_the_rule(spec, bad, rule):
    msg = kinds.problem(spec, bad, "k", "h")
    assert msg is not None and rule in msg


# --- the files rendered from the values -------------------------------------------------------------

def _env():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    for name, fn in FilterModule().filters().items():
        env.filters["dgxspark.vllm." + name] = fn
    return env


def _watchdog_vars():
    with open(os.path.join(ROOT, "roles", "vllm_watchdog", "vars", "main.yml")) as f:
        return yaml.safe_load(f)


def _render_watchdog(user, agent, program, config):
    env, v = _env(), _watchdog_vars()
    ctx = {"vllm_watchdog_ssh_user": user, "vllm_watchdog_agent": agent, "vllm_watchdog_program": program,
           "vllm_watchdog_config_file": config, "ansible_managed": "managed"}
    with open(os.path.join(ROOT, "roles", "vllm_watchdog", "templates", "dgxspark-vllm-watchdog.service.j2")) as f:
        unit = env.from_string(f.read()).render(ctx)
    return (env.from_string(v["_vllm_watchdog_sudoers"]).render(ctx),
            env.from_string(v["_vllm_watchdog_key_options"]).render(ctx), unit, v["_vllm_watchdog_unit_keys"])


DEFAULTS = ("vllm-watchdog", "/usr/local/sbin/dgxspark-vllm-agent", "/opt/dgxspark-vllm/watchdog/dgxspark-vllm-watchdog",
            "/etc/dgxspark-vllm-watchdog/watchdog.json")
# Every string of the corpus, plus the longest legal values of each kind.
RENDER_VALUES = [v for v in ANY_STRING + NAMING + PATHS if isinstance(v, str)] + [
    "a" * 32, "/" + "/".join(["d" * 60] * 16), "/a/b%c", '/a/b"c', "/a/b c"]


@pytest.mark.parametrize("slot", range(4))
def test_watchdog_files_from_any_value_hold_exactly_the_intended_rule(slot):
    rendered = refused = 0
    for value in RENDER_VALUES:
        args = list(DEFAULTS)
        args[slot] = value
        try:
            sudoers, key_options, unit, keys = _render_watchdog(*args)
        except Exception as e:  # the file-kind filter refused it
            assert "holds a newline" in str(e) or "whitespace" in str(e) or "backslash" in str(e), str(e)
            refused += 1
            continue
        rendered += 1
        assert escape.sudoers_exact_problems(sudoers, [[args[0], [args[1]]]]) == [], (value, sudoers)
        assert escape.unit_lines_problems(unit, keys) == [], (value, unit)
        # the forced command is one quoted option: sshd reads back exactly the agent and --ssh
        assert key_options.startswith('command="') and key_options.endswith('",restrict')
        inner = key_options[len('command="'):-len('",restrict')]
        assert inner.replace('\\"', '"') == args[1] + " --ssh"
        assert '"' not in inner.replace('\\"', "")
        exec_start = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
        assert len(exec_start) == 1
        if "%" in value and slot >= 2:
            assert "%%" in exec_start[0]
    assert rendered + refused == len(RENDER_VALUES) and refused > 0 and rendered > 0


def test_node_prep_sudoers_from_any_value_holds_exactly_the_ritual():
    env = _env()
    with open(os.path.join(ROOT, "roles", "node_prep", "templates", "sudoers-memory.j2")) as f:
        tmpl = env.from_string(f.read())
    refused = 0
    for value in [v for v in ANY_STRING + NAMING if isinstance(v, str)] + ["spark", "/usr/bin/tee"]:
        for user, tee in ((value, "/usr/bin/tee"), ("spark", value)):
            try:
                text = tmpl.render(node_prep_deploy_user=user, node_prep_tee_path=tee, ansible_managed="m")
            except Exception:
                refused += 1
                continue
            want = [["Cmnd_Alias DGXSPARK_VLLM_MEMORY", [tee + " /proc/sys/vm/drop_caches",
                                                         tee + " /proc/sys/vm/compact_memory"]],
                    [user, ["DGXSPARK_VLLM_MEMORY"]]]
            # a value with a comma or a colon is escaped; the parse must still read exactly these rules back
            assert escape.sudoers_exact_problems(text, want) == [], text
    assert refused > 0


def test_the_issue_examples_render_nothing_that_grants_more():
    with pytest.raises(Exception, match="whitespace"):
        _render_watchdog("vllm-watchdog", "/usr/local/sbin/dgxspark-vllm-agent, /bin/sh", *DEFAULTS[2:])
    sudoers = _render_watchdog("vllm-watchdog", "/usr/local/sbin/dgxspark-vllm-agent,/bin/sh", *DEFAULTS[2:])[0]
    # the comma is escaped: one command whose name holds ',/bin/sh' (the kind refuses it before this)
    assert "agent\\,/bin/sh" in sudoers
    assert escape.sudoers_rules(sudoers) == [["vllm-watchdog", ["/usr/local/sbin/dgxspark-vllm-agent,/bin/sh"]]]
    with pytest.raises(Exception):
        _render_watchdog("vllm-watchdog ALL=(ALL) NOPASSWD: ALL\n#", *DEFAULTS[1:])


def test_exports_escaping():
    assert escape.exports_path("/srv/my models#1") == "/srv/my\\040models\\0431"
    with pytest.raises(escape.EscapeError):
        escape.exports_path("/srv/a\n/etc *(rw)")


# One legal value per kind, the kind's whole code path run to acceptance (a kind that calls a missing helper
# fails here, not on a user's inventory).
LEGAL_BY_KIND = {
    "abs_path": "/srv/models", "address": "198.18.0.10", "bool": "true", "choice": ({"choices": ["a", "b"]}, "b"),
    "cidr": "198.18.0.0/15", "cli_option": "--bwlimit=500M", "command": "/usr/bin/rsync",
    "container_name": "vllm_rank", "controller_path": "files/keys", "duration": 2.5, "env_map": {
        "NCCL_IB_HCA": "rocep1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"},
    "env_name": "NCCL_IB_GID_INDEX", "env_value": "3", "file_mode": "0640", "file_name": "site.conf",
    "file_suffix": ".orig", "gib": 12.5, "glob": "*.safetensors", "group_name": "vllm_ranks",
    "hf_repo": "zai-org/GLM-5.3-Flash", "host": "spark-2", "image_ref": "nvcr.io/nvidia/vllm:26.01-py3",
    "integer": 3, "interface": "enp1s0f0np0", "inventory_host": "spark-3", "list": ["a"], "mapping": {"a": 1},
    "mount_options": "ro,vers=4.2", "mtu_map": {"enp1s0f1np1": 9000}, "number": 0.9, "pip_requirement": "jmespath",
    "port": 8000, "ratio": 0.85, "raw_text": "Say hello.", "regex": "^ok$", "secret": "sk-local-123",
    "size": "64g", "sysctl_key": "net.core.rmem_max", "text": "GLM", "timestamp": "20261204T000000Z",
    "token": "glm53", "unit_name": "dgxspark-vllm-watchdog", "unix_group": "docker", "unix_user": "vllm",
    "url": "http://198.18.0.10:8000/v1",
}


def test_every_kind_has_a_legal_value_that_passes():
    assert sorted(LEGAL_BY_KIND) == sorted(kinds.KINDS)
    for name, value in LEGAL_BY_KIND.items():
        spec = name
        if isinstance(value, tuple):
            params, value = value
            spec = dict(params, kind=name)
        assert kinds.problem(spec, value, "k", "h") is None, (name, value)


def test_env_map_and_mtu_map_name_the_bad_entry():
    msg = kinds.problem("env_map", {"NCCL_IB_HCA": "a\nb"}, "rdma_fabric_nccl_overrides", "spark-1")
    assert "entry 'NCCL_IB_HCA'" in msg
    msg = kinds.problem("env_map", {"1BAD": "x"}, "rdma_fabric_nccl_overrides", "spark-1")
    assert "entry '1BAD' is not an environment variable name" in msg
    msg = kinds.problem("mtu_map", {"enp1s0f1np1": 10000}, "k", "spark-1")
    assert "entry 'enp1s0f1np1'" in msg and "576..9216" in msg
