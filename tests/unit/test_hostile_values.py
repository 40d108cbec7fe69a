# -*- coding: utf-8 -*-
"""The generated hostile-values suite (docs/inputs.md): for every declared option, every hostile value of its
kind's corpus is refused on the controller by its kind; and every file the watchdog and node_prep render from
such values either refuses the value (its file-kind filter) or holds exactly the intended rule or lines.
The corpus is data: a new option is tested by being declared."""

from __future__ import absolute_import, division, print_function

import glob
import shutil
import subprocess
import os
import re

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
                "hf_repo", "pip_requirement", "cli_option", "mount_options", "glob", "size", "file_mode", "timestamp",
                "lane_name", "item_name", "hf_revision", "model_name", "sha256", "cuda_version", "package_name",
                "package_version", "image_selector", "docker_gpus", "command_word", "image_path", "source_path",
                "fix_source", "ulimit", "capability", "device"}
FREE_TEXT = {"text", "raw_text", "controller_path", "regex"}
# Corpus strings that are the kind's own syntax (a version specifier, an option list, an argv word), so not
# hostile there.
OWN_SYNTAX = {"pip_requirement": {"a>b"}, "mount_options": {"a,b", "a=b"}, "command_word": {"a=b"}}
# The near misses of one kind: its own syntax, bent.
KIND_EXTRA = {
    "lane_name": ["Tp2_mtp", "tp2-mtp", "_tp2", "a" * 65],
    "item_name": ["../x.py", "-v", ".hidden", "a/b"],
    "hf_revision": ["main branch", "a" * 256],
    "model_name": ["/glm", "-glm", "a" * 129],
    "sha256": ["A" * 64, "a" * 63, "a" * 65, "sha256:" + "a" * 64],
    "cuda_version": ["\u0661\u0663.\u0660", "13", "v13.0", "13.0.0.1", "13.0\n"],
    "package_name": ["-torch", "torch-", "torch==2.1", "a b"],
    "package_version": ["-1.0", "1.0 ", ">=1.0"],
    "image_selector": ["vllm==", "vllm>=0.32", "sha256:" + "a" * 63, "Upper/Case:1"],
    "docker_gpus": ["0", "device=0,1", "device=", "ALL", "all,capabilities=utility"],
    "command_word": ["", "-c sh", "%h"],
    "image_path": ["../../../etc", "/var/../etc/shadow", "/a//b", "/a/./b", "a:b"],
    "source_path": ["a//b", "a:b", "C:\\x"],
    "fix_source": ["image:relative/x", "image:/a/../b", "file://relative", "ftp://host/x", "https://h/x?q=1"],
    "ulimit": ["as=1", "memlock", "memlock=-2", "nofile=2048:1024", "nofile=-1:1024", "nofile=1:2:3",
               "nofile=infinity", "NOFILE=1"],
    "capability": ["ALL", "cap_ipc_lock", "NET_RAWX", "CAP_", "IPC-LOCK"],
    "device": ["/dev/x:rr", "/dev/x:/y:/z", "/dev/x:rwmx", "dev/x", "/dev/../x", "/dev/x:"] + PATHS,
}
NUMBER_KINDS = {"duration", "integer", "number", "ratio", "gib", "port"}


def corpus(spec):
    """The hostile values for one kind spec."""
    name, params = kinds.normalise(spec)
    if name == "list":
        elem = params.get("elements")
        return [[v] for v in corpus(elem)] if elem else ["not a list", 3]
    if name == "secret":
        return SECRETS
    if name == "env_value":
        # a number is a legal environment value (written as its text)
        return [v for v in ANY_STRING if not isinstance(v, float)]
    if name in STRING_KINDS:
        out = list(ANY_STRING)
        if name not in FREE_TEXT:
            out += NAMING
        if name == "abs_path":
            out += PATHS
        out += KIND_EXTRA.get(name, [])
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
    if name == "mapping" and params.get("fields"):
        # a record: each field's corpus in turn, the other fields legal; plus an unknown key
        fields = params["fields"]
        legal = dict((f, _legal(spec)) for f, spec in fields.items())
        out = [dict(legal, **{f: v}) for f in sorted(fields) for v in corpus(fields[f])]
        return out + [dict(legal, extra="x"), "a string"]
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
    ({"kind": "list", "elements": {"kind": "mapping", "fields": {"host": "inventory_host", "address": "host",
                                                                 "user": "unix_user"}}},
     [{"host": "spark-2", "address": "198.18.11.11", "user": "spark"}]),
    # the lane's leaves, with values the shipped lanes and docs/lanes.md use
    ("lane_name", "tp4_dflash2_1m"), ("item_name", "sparse_attn_indexer_kpool.py"),
    ({"kind": "hf_revision", "empty": True}, ""), ("hf_revision", "7d74cdd881ed7e32c31175984a67823127b66cfe"),
    ("model_name", "glm-5.3-flash"), ({"kind": "sha256", "empty": True}, ""), ("sha256", "0b32fa96" * 8),
    ("cuda_version", "13.0"), ("cuda_version", "12.9.1"), ("package_name", "nvidia-nccl-cu13"),
    ("package_version", "2.13.0+cpu"), ("package_version", "1!2.0.post1"), ("image_selector", "vllm==0.32.0"),
    ("image_selector", "sha256:" + "a" * 64), ("image_selector", "ghcr.io/o/n:tag"), ("docker_gpus", "all"),
    ("docker_gpus", "device=0"), ("command_word", "vllm"), ("command_word", "--port=8000"),
    ("image_path", "vllm/platforms/cpu.py"), ("image_path", "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so*"),
    ("source_path", "docker/Dockerfile.v1"), ("source_path", "../y3/docker/"), ("fix_source", "files/y3/x.py"),
    ("fix_source", "image:/usr/local/lib/python*/*-packages/nvidia/cu*/include/nvrtc.h"),
    ("fix_source", "https://raw.githubusercontent.com/o/r/0123abc/x.py"), ("fix_source", "file:///srv/fixes/x.py"),
    ("ulimit", "memlock=-1:-1"), ("ulimit", "nofile=1024:-1"), ("ulimit", "stack=67108864"),
    ("capability", "IPC_LOCK"), ("capability", "CAP_SYS_NICE"), ("device", "/dev/infiniband:/dev/infiniband"),
    ("device", "/dev/infiniband/uverbs0:rw"), ("device", "/dev/a:/dev/b:rwm"), ("size", "1g"),
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
    ("cuda_version", "\u0661\u0663.\u0660", "is not a CUDA version X.Y or X.Y.Z (ASCII digits)"),
    ("ulimit", "nofile=-1:1024", "has a soft limit above its hard limit"),
    ("ulimit", "as=1", "names no ulimit docker knows"),
    ("capability", "ALL", "ALL is refused"),
    ("docker_gpus", "device=0,1", "is not a docker --gpus value"),
    ("device", "/dev/x:/dev/../y", "has the path '/dev/../y', which holds a '.' or '..' segment"),
    ("fix_source", "image:usr/x", "after 'image:' is not absolute"),
    ("package_name", "torch==2.1", "is not a Python distribution name"),
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
    "lane_name": "tp2_mtp", "item_name": "weight_utils", "hf_revision": "main", "model_name": "tiny-glm",
    "sha256": "f" * 64, "cuda_version": "13.2", "package_name": "flashinfer-python", "package_version": "0.32.0",
    "image_selector": "dgxspark-sim/vllm-cpu:0.32.0", "docker_gpus": "1", "command_word": "serve",
    "image_path": "vllm/model_executor/parameter.py", "source_path": "/srv/build/ctx", "fix_source": "files/fc/parameter.py",
    "ulimit": "memlock=-1", "capability": "SYS_NICE", "device": "/dev/infiniband",
}


def _legal(spec):
    """A legal value of a kind spec (LEGAL_BY_KIND), for the fields of a record that are not under test."""
    value = LEGAL_BY_KIND[kinds.normalise(spec)[0]]
    assert not isinstance(value, tuple), spec
    return value


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


# --- netplan and sysctl.d (rdma_fabric persist.yml, node_prep sysctl.yml) -------------------------------------

# What the brief of these two file kinds names: newline + a second key, '#', ':', quotes, look-alikes, NUL, 4 KiB.
FILE_KIND_HOSTILE = [v for v in ANY_STRING + NAMING if isinstance(v, str)] + [
    "enp1s0f1np1\n    mtu: 1500", "0\nkernel.core_pattern = |/tmp/pwn", "en#p1", "# 0", "; 0", "en:p1", "0: 1",
    '"enp1"', "'0'", "enp1s0f1nр1", "０", "e\x00n", "\x00", "9" * 4096, "a" * 4096, " 0", "0 ", "0  1", "", "-",
]


def _netplan_doc(netdev="enp1s0f1np1", mtu=9000, address="198.18.10.10/24"):
    return {"network": {"version": 2, "ethernets": {netdev: {"mtu": mtu, "addresses": [address]}}}}


def _filter(name):
    return FilterModule().filters()[name]


@pytest.mark.parametrize("slot", ["netdev", "address", "mtu"])
def test_netplan_file_from_any_value_is_refused_or_reads_back_as_the_intended_document(slot):
    values = FILE_KIND_HOSTILE + ([v for v in NUMBERS + INTEGERS if v is not None] + [100000, 575]
                                  if slot == "mtu" else [])
    refused = rendered = 0
    for value in values:
        doc = _netplan_doc(**{slot: value})
        try:
            text = _filter("netplan_yaml")(doc)
        except Exception as e:
            assert "netplan_yaml: a netplan file" in str(e), str(e)
            refused += 1
            continue
        rendered += 1
        assert yaml.safe_load(text) == doc, (value, text)
        (netdev, entry), = yaml.safe_load(text)["network"]["ethernets"].items()
        assert sorted(entry) == ["addresses", "mtu"] and len(entry["addresses"]) == 1
    # every hostile string is refused; only the numbers that are legal MTUs would render
    assert rendered == 0 and refused == len(values)


def test_netplan_yaml_writes_what_to_nice_yaml_wrote():
    # The file rdma_fabric wrote before this filter: a converged node sees no change.
    from ansible.plugins.filter.core import to_nice_yaml
    doc = {"network": {"version": 2, "ethernets": {"enp1s0f1np1": {"mtu": 9000, "addresses": ["198.18.10.10/24"]},
                                                   "enP2p1s0f1np1": {"mtu": 9000}}}}
    assert _filter("netplan_yaml")(doc) == to_nice_yaml(doc, indent=2)
    with pytest.raises(Exception, match="must hold mtu"):
        _filter("netplan_yaml")({"network": {"version": 2, "ethernets": {"enp1s0f1np1": {"mtu": 9000, "dhcp4": True}}}})


def _sysctl_file(tmp_path, key, value):
    """The sysctl.d file ansible.posix.sysctl writes (one 'name=value' line), read back by the role's own reader."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import sysctl_state
    d = tmp_path / "etc" / "sysctl.d"
    d.mkdir(parents=True, exist_ok=True)
    (d / "99-zz-dgxspark-vllm.conf").write_text("%s=%s\n" % (key, value))
    return sysctl_state.grep_settings(key, str(tmp_path)), (d / "99-zz-dgxspark-vllm.conf").read_text()


def test_sysctl_file_from_any_value_is_refused_or_holds_exactly_one_setting(tmp_path):
    refused, inert = 0, []
    legal = ["0", "60", "4096 131072 6291456", 10]
    for value in FILE_KIND_HOSTILE + legal:
        try:
            written = _filter("sysctl_value")(value)
        except Exception as e:
            assert "sysctl_value: a sysctl.d line" in str(e), str(e)
            refused += 1
            continue
        if value not in legal:
            inert.append(value)
        found, text = _sysctl_file(tmp_path, "vm.swappiness", written)
        lines = [ln for ln in text.splitlines() if ln.strip() and ln.strip()[0] not in "#;"]
        assert lines == ["vm.swappiness=%s" % value], (value, text)
        assert found == "/etc/sysctl.d/99-zz-dgxspark-vllm.conf:vm.swappiness=%s" % value
    # what renders is one printable ASCII line without a comment, quote, '=' or a value reader's escape
    assert refused + len(inert) == len(FILE_KIND_HOSTILE) and refused > len(inert)
    assert [v for v in inert if not re.fullmatch(r"[ -~]+", v) or re.search("[#;=\"'\\\\]", v)] == []
    with pytest.raises(Exception, match="a bool"):
        _filter("sysctl_value")(True)
    for key in FILE_KIND_HOSTILE + ["vm.swappiness\nkernel.x"]:
        with pytest.raises(Exception, match="sysctl_key"):
            _filter("sysctl_key")(key)
    assert escape.sysctl_line("vm.swappiness", 0) == "vm.swappiness = 0"


# --- the unit file's own checker on the controller ---------------------------------------------------------

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed on this controller (Debian: package systemd); "
    "molecule vllm_watchdog runs the same check on its nodes")


def _run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return p.returncode, p.stdout, p.stderr


@needs_systemd_analyze
def test_watchdog_unit_from_every_rendered_value_passes_systemd_analyze():
    # /usr/bin/python3 must exist for ExecStart= to verify: the unit's interpreter, present wherever ansible runs
    verified = 0
    for slot in (2, 3):
        for value in RENDER_VALUES:
            args = list(DEFAULTS)
            args[slot] = value
            try:
                unit = _render_watchdog(*args)[2]
            except Exception:
                continue
            problems, output = escape.systemd_verify(unit, "dgxspark-vllm-watchdog.service", _run)
            assert problems == [], (value, output, unit)
            verified += 1
    assert verified >= 2 * len(DEFAULTS)


@needs_systemd_analyze
@pytest.mark.parametrize("edit,expect", [
    (("Type=simple", "Type=simpel"), "Failed to parse service type"),     # rc 0 from systemd-analyze: still a problem
    (("Restart=on-failure", "Restart=on-failure\nExecStartPost=/nonexistent/prog"), "is not executable"),
    (("RestartSec=10", "RestartSec=10\nFooBar=1"), "Unknown key"),
])
def test_systemd_verify_counts_every_line_about_the_unit(edit, expect):
    unit = _render_watchdog(*DEFAULTS)[2].replace(*edit)
    problems, output = escape.systemd_verify(unit, "dgxspark-vllm-watchdog.service", _run)
    assert len(problems) == 1 and expect in problems[0], output
    assert "/tmp/" not in problems[0]


# --- the lane schema and the playbook parameters: the same corpus, through their real checkers ------------------

def _lane_leaves():
    """(dotted path, schema node) of every lane value that is a string, or is checked by a kind."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lane

    def walk(node, path):
        if not isinstance(node, dict):
            return
        types = node.get("type") or []
        types = types if isinstance(types, list) else [types]
        if "string" in types or "x-kind" in node or (path and path[-1] == "<propertyNames>"):
            yield ".".join(path), node
        for key, sub in (node.get("properties") or {}).items():
            yield from walk(sub, path + [key])
        for word in ("items", "additionalProperties", "propertyNames"):
            yield from walk(node.get(word), path + ["<%s>" % word])
    return list(walk(lane.LANE_SCHEMA, []))


LANE_LEAVES = _lane_leaves()


def lane_corpus(path, node):
    """The hostile values of one lane leaf: its kind's corpus, or for an enum leaf every control, size and type
    value plus the shell and file syntax (a lane leaf is one or the other: test_kinds_declared.py)."""
    if "x-kind" in node:
        values = corpus(node["x-kind"])
    else:
        assert "enum" in node, path
        values = ANY_STRING + NAMING
    # a mapping key is a string (YAML would make a list or a mapping key a parse error first)
    return [v for v in values if isinstance(v, str)] if path.endswith("<propertyNames>") else values


def _lane_refuses(node, value):
    """Whether the lane's own validator (module_utils/lane.py) refuses the value at this node; a propertyNames
    node is a mapping key, so the value goes in as a key."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lane
    if "type" not in node and "x-kind" in node:
        errors = lane._LaneValidator({"type": "object", "propertyNames": node}).iter_errors({value: 1})
    else:
        errors = lane._LaneValidator(node).iter_errors(value)
    return next(errors, None) is not None


@pytest.mark.parametrize("path,node", LANE_LEAVES, ids=[leaf[0] for leaf in LANE_LEAVES])
def test_every_hostile_value_of_a_lane_leaf_is_refused_by_the_lane_schema(path, node):
    values = lane_corpus(path, node)
    assert values
    assert [v for v in values if not _lane_refuses(node, v)] == []


def _parameter_kinds():
    with open(os.path.join(ROOT, "playbooks", "vars", "parameter_kinds.yml")) as f:
        return sorted(yaml.safe_load(f)["kinds"].items())


PARAMETERS = _parameter_kinds()


@pytest.mark.parametrize("key,spec", PARAMETERS, ids=[param[0] for param in PARAMETERS])
def test_every_hostile_value_of_a_playbook_parameter_is_refused(key, spec):
    values = corpus(spec)
    assert values
    assert [v for v in values if kinds.problem(spec, v, key, "localhost") is None] == []


# --- every file rendering in one list (the report, tools/kinds_report.py, reads the same) --------------------

def _outcome(fn):
    """'refused' when the file-kind filter raised, else what fn's check of the rendered file says: 'inert' or
    'NOT INERT: <why>'."""
    try:
        why = fn()
    except Exception as e:  # pylint: disable=broad-except
        text = str(e)
        marks = ("holds a newline", "whitespace", "backslash", "a netplan file", "a sysctl.d line",
                 "an EnvironmentFile ARGS line", "a YAML file:", "a PromQL expression:")
        return "refused" if any(w in text for w in marks) else "ERROR: %s" % text
    return "inert" if not why else "NOT INERT: %s" % why


def _watchdog_check(args):
    sudoers, key_options, unit, keys = _render_watchdog(*args)
    why = escape.sudoers_exact_problems(sudoers, [[args[0], [args[1]]]]) + escape.unit_lines_problems(unit, keys)
    inner = key_options[len('command="'):-len('",restrict')]
    if not (key_options.startswith('command="') and key_options.endswith('",restrict')
            and inner.replace('\\"', '"') == args[1] + " --ssh" and '"' not in inner.replace('\\"', "")):
        why.append("the forced command is not exactly the agent: %r" % key_options)
    return why


def _node_prep_check(user, tee):
    with open(os.path.join(ROOT, "roles", "node_prep", "templates", "sudoers-memory.j2")) as f:
        tmpl = _env().from_string(f.read())
    text = tmpl.render(node_prep_deploy_user=user, node_prep_tee_path=tee, ansible_managed="m")
    return escape.sudoers_exact_problems(text, [
        ["Cmnd_Alias DGXSPARK_VLLM_MEMORY", [tee + " /proc/sys/vm/drop_caches", tee + " /proc/sys/vm/compact_memory"]],
        [user, ["DGXSPARK_VLLM_MEMORY"]]])


def _netplan_check(doc):
    text = _filter("netplan_yaml")(doc)
    back = yaml.safe_load(text)
    return [] if back == doc and len(back["network"]["ethernets"]) == 1 else ["reads back as %r" % back]


def _sysctl_check(value):
    written = _filter("sysctl_value")(value)
    line = "vm.swappiness=%s" % written
    settings = [ln for ln in line.splitlines() if ln.strip() and ln.strip()[0] not in "#;"]
    return [] if settings == [line] and line.split("=", 1)[1].strip() == str(value) else ["%r" % settings]


# --- vllm_monitoring: prometheus.yml (YAML), the two /etc/default files (EnvironmentFile ARGS=), the rule file
# (PromQL label values inside YAML). Each string slot, with the values the role's vars would compute from it.
MONITORING_DEFAULTS = {"rules_dir": "/etc/prometheus/rules", "listen_host": "0.0.0.0", "head": "spark-a",
                       "head_address": "198.18.0.10", "api_key_file": "/etc/prometheus/dgxspark-vllm-api-key",
                       "config_file": "/etc/prometheus/prometheus.yml", "textfile_dir": "/var/lib/dgxspark-vllm",
                       "fabric_netdev": "enp1s0f1np1"}


def _bracket(host):
    return "[%s]" % host if ":" in host else host


def _render_monitoring(**slots):
    m = dict(MONITORING_DEFAULTS, **slots)
    hosts = sorted([m["head"], "spark-b"])
    addresses = {m["head"]: _bracket(m["head_address"]), "spark-b": "198.18.0.11"}
    ctx = {"ansible_managed": "managed", "vllm_monitoring_scrape_interval_s": 15, "vllm_monitoring_port": 9090,
           "vllm_monitoring_rules_dir": m["rules_dir"], "vllm_monitoring_api_port": 8000, "vllm_api_key": "k" * 32,
           "vllm_monitoring_api_key_file": m["api_key_file"], "vllm_monitoring_node_exporter_port": 9100,
           "vllm_monitoring_config_file": m["config_file"], "vllm_monitoring_retention_days": 15,
           "vllm_monitoring_textfile_dir": m["textfile_dir"], "groups": {"spark_cluster": hosts},
           "_vllm_monitoring_head": m["head"], "_vllm_monitoring_address": addresses,
           "_vllm_monitoring_self_host": "localhost" if m["listen_host"] in ("0.0.0.0", "::") else _bracket(
               m["listen_host"]),
           "_vllm_monitoring_listen": _bracket(m["listen_host"]) + ":9090",
           "vllm_monitoring_down_for_s": 120, "vllm_monitoring_restarts_window_s": 21600,
           "vllm_monitoring_restarts_max": 2, "vllm_monitoring_kv_usage_max": 0.95, "vllm_monitoring_kv_for_s": 600,
           "vllm_monitoring_spec_accept_min": 0.3, "vllm_monitoring_decode_baseline_tok_s": None,
           "_vllm_monitoring_decode_baseline": None,
           "vllm_monitoring_decode_min_ratio": 0.5, "vllm_monitoring_mem_available_min_gib": 3.0,
           "vllm_monitoring_fabric_mtu": {m["fabric_netdev"]: 9000},
           "vllm_lane_spec": {"serve": {"speculative_config": {"method": "mtp"}}}}
    env, out = _env(), {}
    for name in ("prometheus.yml.j2", "prometheus.default.j2", "prometheus-node-exporter.default.j2",
                 "dgxspark-vllm-alerts.yml.j2"):
        with open(os.path.join(ROOT, "roles", "vllm_monitoring", "templates", name)) as f:
            out[name] = env.from_string(f.read()).render(ctx)
    return m, hosts, addresses, out


def _args_line(text):
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return escape.env_file_args_words(lines[0]) if len(lines) == 1 else None


def _monitoring_check(slot, value):
    """What differs between the rendered monitoring files and the intended ones, for one value in one slot."""
    m, hosts, addresses, out = _render_monitoring(**{slot: value})
    why = []
    prom = yaml.safe_load(out["prometheus.yml.j2"])
    want = {"global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
            "rule_files": [m["rules_dir"] + "/dgxspark-vllm*.yml"],
            "scrape_configs": [
                {"job_name": "prometheus", "static_configs": [{"targets": [
                    ("localhost" if m["listen_host"] in ("0.0.0.0", "::") else _bracket(m["listen_host"])) + ":9090"]}]},
                {"job_name": "vllm", "metrics_path": "/metrics",
                 "authorization": {"type": "Bearer", "credentials_file": m["api_key_file"]},
                 "static_configs": [{"targets": [addresses[m["head"]] + ":8000"], "labels": {"node": m["head"]}}]},
                {"job_name": "node", "static_configs": [{"targets": [addresses[h] + ":9100"], "labels": {"node": h}}
                                                        for h in hosts]}]}
    if prom != want:
        why.append("prometheus.yml reads back as %r" % prom)
    want_args = ["--config.file=" + m["config_file"], "--web.listen-address=" + _bracket(m["listen_host"]) + ":9090",
                 "--storage.tsdb.retention.time=15d"]
    if _args_line(out["prometheus.default.j2"]) != want_args:
        why.append("/etc/default/prometheus: %r" % out["prometheus.default.j2"])
    want_args = ["--web.listen-address=:9100", "--collector.textfile.directory=" + m["textfile_dir"]]
    if _args_line(out["prometheus-node-exporter.default.j2"]) != want_args:
        why.append("/etc/default/prometheus-node-exporter: %r" % out["prometheus-node-exporter.default.j2"])
    rules = yaml.safe_load(out["dgxspark-vllm-alerts.yml.j2"])["groups"][0]["rules"]
    exprs = dict((r["alert"], r["expr"]) for r in rules)
    device = m["fabric_netdev"]
    for alert, tail in (("VllmFabricPortDown", " == 0"), ("VllmFabricMtuChanged", " != 9000")):
        head = 'node_network_%s{job="node",device=' % ("up" if alert.endswith("Down") else "mtu_bytes")
        expr = exprs.get(alert, "")
        literal = expr[len(head):-len("}" + tail)] if expr.startswith(head) and expr.endswith("}" + tail) else None
        # the label value is one string literal that reads back as the netdev, with no quote left unescaped
        if literal is None or yaml.safe_load(literal) != device or '"' in literal[1:-1].replace('\\"', ""):
            why.append("%s expr %r" % (alert, expr))
    if len(rules) != 11:
        why.append("%d alert rules" % len(rules))
    return why


MONITORING_SLOTS = sorted(MONITORING_DEFAULTS)


@pytest.mark.parametrize("slot", MONITORING_SLOTS)
def test_monitoring_files_from_any_value_are_refused_or_read_back_as_intended(slot):
    values = RENDER_VALUES + FILE_KIND_HOSTILE
    outcomes = [_outcome(lambda v=value: _monitoring_check(slot, v)) for value in values]
    assert [(v, o) for v, o in zip(values, outcomes) if o not in ("refused", "inert")] == []
    # a newline is refused in every slot; a quote or '$' is written inert in YAML and PromQL, refused as an argv word
    assert outcomes.count("refused") > 0
    assert _monitoring_check(slot, MONITORING_DEFAULTS[slot]) == []


def test_monitoring_files_refuse_the_word_splitters_and_keep_ipv6():
    with pytest.raises(Exception, match="would not stay one argv word"):
        _render_monitoring(config_file="/etc/prometheus/p.yml --web.enable-admin-api")
    with pytest.raises(Exception, match="would not stay one argv word"):
        _render_monitoring(textfile_dir="/var/lib/$HOME")
    assert _monitoring_check("listen_host", "fd00::1") == []
    assert _monitoring_check("head_address", "fe80::1%enp1s0f0np0") == []
    # the files a converged node holds from the defaults: the same bytes as before this filter
    out = _render_monitoring()[3]
    assert 'ARGS="--web.listen-address=:9100 --collector.textfile.directory=/var/lib/dgxspark-vllm"' in out[
        "prometheus-node-exporter.default.j2"]
    assert '  - "/etc/prometheus/rules/dgxspark-vllm*.yml"\n' in out["prometheus.yml.j2"]


def file_outcomes():
    """[(file, slot, value, outcome)] for every corpus string rendered into every slot of every file kind."""
    out = []
    names = ("vllm_watchdog_ssh_user", "vllm_watchdog_agent", "vllm_watchdog_program", "vllm_watchdog_config_file")
    for slot, name in enumerate(names):
        for value in RENDER_VALUES:
            args = list(DEFAULTS)
            args[slot] = value
            out.append(("vllm_watchdog sudoers, authorized_keys, unit", name, value,
                        _outcome(lambda a=args: _watchdog_check(a))))
    for value in [v for v in ANY_STRING + NAMING if isinstance(v, str)]:
        out.append(("node_prep sudoers-memory", "node_prep_deploy_user", value,
                    _outcome(lambda v=value: _node_prep_check(v, "/usr/bin/tee"))))
        out.append(("node_prep sudoers-memory", "node_prep_tee_path", value,
                    _outcome(lambda v=value: _node_prep_check("spark", v))))
    for slot in ("netdev", "address", "mtu"):
        for value in FILE_KIND_HOSTILE:
            out.append(("rdma_fabric netplan", slot, value,
                        _outcome(lambda d=_netplan_doc(**{slot: value}): _netplan_check(d))))
    for slot in MONITORING_SLOTS:
        for value in RENDER_VALUES + FILE_KIND_HOSTILE:
            out.append(("vllm_monitoring prometheus.yml, default files, rules", slot, value,
                        _outcome(lambda s=slot, v=value: _monitoring_check(s, v))))
    for value in FILE_KIND_HOSTILE:
        out.append(("node_prep sysctl.d", "node_prep_swappiness", value, _outcome(lambda v=value: _sysctl_check(v))))
    return out


def test_no_file_rendering_of_a_hostile_value_is_live():
    outcomes = file_outcomes()
    assert [o for o in outcomes if o[3] not in ("refused", "inert")] == []
    by_file = {}
    for f, _slot, _value, outcome in outcomes:
        by_file.setdefault(f, set()).add(outcome)
    # each file kind both refuses some values and writes others inert (a filter that refuses everything, or
    # nothing, is not what these files get)
    assert sorted(by_file) == ["node_prep sudoers-memory", "node_prep sysctl.d", "rdma_fabric netplan",
                               "vllm_monitoring prometheus.yml, default files, rules",
                               "vllm_watchdog sudoers, authorized_keys, unit"]
    assert by_file["vllm_monitoring prometheus.yml, default files, rules"] == {"refused", "inert"}
    assert by_file["vllm_watchdog sudoers, authorized_keys, unit"] == {"refused", "inert"}
    assert by_file["node_prep sudoers-memory"] == {"refused", "inert"}
    assert "refused" in by_file["rdma_fabric netplan"] and "refused" in by_file["node_prep sysctl.d"]


def _template_outputs(text):
    """The expressions of every {{ }} in a template (Jinja's own parse, so a '}}' inside a literal is no end)."""
    from jinja2 import nodes
    env = _env()
    tree = env.parse(text)
    return [n for out in tree.find_all(nodes.Output) for n in out.nodes if not isinstance(n, nodes.TemplateData)]


def _safe_output(node):
    from jinja2 import nodes
    if isinstance(node, nodes.Const):
        return True
    if isinstance(node, nodes.CondExpr):
        return _safe_output(node.expr1) and (node.expr2 is None or _safe_output(node.expr2))
    if isinstance(node, nodes.Name):
        return node.name == "ansible_managed"
    if isinstance(node, nodes.Filter):
        # numbers, and the file-kind filters (a whole checked line included)
        return node.name in ("int", "float") or (node.name.startswith("dgxspark.vllm.") and node.name[14:] in set(
            FilterModule().filters()) | {"model_weights_exports_line"})
    if isinstance(node, (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div)):  # arithmetic on numbers
        return _safe_output(node.left) and _safe_output(node.right)
    if isinstance(node, nodes.Concat):
        return all(_safe_output(n) for n in node.nodes)
    return False


def test_every_template_expression_ends_in_its_file_kind_filter():
    """Every {{ }} of every role template is a number, a literal, the banner, or goes through a file-kind filter
    last, so no value reaches a file as raw text."""
    seen, loose = 0, []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "templates", "*.j2"))):
        with open(path) as f:
            for node in _template_outputs(f.read()):
                seen += 1
                if not _safe_output(node):
                    loose.append("%s line %d" % (os.path.relpath(path, ROOT), node.lineno))
    assert loose == [] and seen > 30
    # a raw value is caught
    assert not _safe_output(_template_outputs("x {{ vllm_monitoring_config_file }}")[0])
    assert not _safe_output(_template_outputs("x {{ vllm_monitoring_config_file | to_json }}")[0])
    assert not _safe_output(_template_outputs("x {{ ('a' ~ port) | int ~ path }}")[0])


def test_yaml_and_promql_strings_refuse_what_prometheus_cannot_read():
    for name in ("yaml_string", "promql_string"):
        assert _filter(name)("enp1s0f1np1") == '"enp1s0f1np1"'
        assert yaml.safe_load(_filter(name)('a"b\\c')) == 'a"b\\c'
        for bad in ("a\ud800", "x\U0001F600", "a\nb"):
            with pytest.raises(Exception, match="Basic Multilingual Plane|control character"):
                _filter(name)(bad)
