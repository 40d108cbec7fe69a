# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""The kind of every user-settable value, and its rules (docs/inputs.md).

A kind is a name (``unix_user``, ``abs_path``, ``duration`` ...) with a full-string rule, type checks that
run before range checks, length bounds and printable characters only. Declarations live in each role's
``meta/kinds.yml`` (option -> kind spec), in the lane schema (``x-kind``) and in the playbooks' parameter
lists; all of them are checked here, so a new option gets its rules by naming its kind.

A kind spec is a kind name, or a mapping ``{kind: <name>, <param>: <value>, ...}``. Common params:
``empty`` (accept '' as "unset"), ``null`` (accept null), ``min``/``max`` (numbers), ``under`` (a path
prefix for abs_path), ``suffix`` (file_name), ``elements`` (list: the kind of each element),
``choices`` (choice), ``fields`` (mapping: a record, key -> kind spec, no other key).

``problem(spec, value, key, host)`` returns None or one message: host, key, the value (redacted for a
secret), the rule and the fix. Nothing here imports Ansible, so the watchdog's nodes can load it too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import math
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import secret_problem

MAX_LEN = 4096

# --- the full-string rules (always used with re.fullmatch: '$' would also match before a final newline)
USER = r"[a-z_][a-z0-9_-]{0,31}"
UNIT = r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,199}"
# a path segment: no whitespace, no ':' (docker -v), no '%' (systemd specifiers), no quotes, backslash,
# '$' or backtick (shells, sudoers, unit files), no ',' '=' '!' (sudoers and exports option syntax)
SEGMENT = r"[A-Za-z0-9_.@+~-]+"
ABS_PATH = r"(?:/" + SEGMENT + r")+/?|/"
FILE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,254}"
CONTAINER = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
IMAGE_REF = (r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
             r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
             r"(?:@sha256:[0-9a-f]{64})?")
# Linux IFNAMSIZ is 16 with the NUL: 15 characters; no '/', whitespace or ':' (an alias)
INTERFACE = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}"
HOSTNAME = r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
SYSCTL_KEY = r"[a-z0-9_]+(?:[./][a-z0-9_]+)+"
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
TOKEN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
GROUP_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
SIZE = r"[1-9][0-9]{0,9}(?:\.[0-9]{1,3})?[kmgtKMGT](?:[iI]?[bB])?"
FILE_MODE = r"0?[0-7]{3}"
HF_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?"
PIP_REQ = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(?:\[[A-Za-z0-9_,-]+\])?(?:(?:==|>=|<=|~=|!=|<|>)[0-9A-Za-z.*+!_-]+(?:,(?:==|>=|<=|~=|!=|<|>)[0-9A-Za-z.*+!_-]+)*)?"
CLI_OPTION = r"--[a-z][a-z0-9-]{0,63}(?:=[A-Za-z0-9_.,:/=@+-]{1,255})?"
MOUNT_OPTS = r"[a-z0-9_]+(?:=[A-Za-z0-9_.:/-]+)?(?:,[a-z0-9_]+(?:=[A-Za-z0-9_.:/-]+)?)*"
# a shell-free glob of file names (huggingface allow_patterns)
GLOB = r"[A-Za-z0-9_.*?\[\]/@+-]{1,255}"
# --- the lane's own leaves (docs/lanes.md)
LANE_NAME = r"[a-z0-9][a-z0-9_]{0,63}"
# a Hugging Face revision: a branch, a tag or a 40-hex commit
HF_REVISION = r"[A-Za-z0-9._/-]{1,255}"
MODEL_NAME = r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}"
SHA256 = r"[0-9a-f]{64}"
CUDA_VERSION = r"[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?"
# a Python distribution name (PEP 508: letters, digits and . _ -, starting and ending with a letter or digit)
PACKAGE_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?"
# a version as the distribution reports it (PEP 440, with an epoch 1! and a local label +cpu)
PACKAGE_VERSION = r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,127}"
# docker run --gpus: all, a count, or one device index. Docker reads the value as CSV, so device=0,1 would need
# inner quotes; a Spark has one GPU (GB10), so one index is all a lane can mean.
DOCKER_GPUS = r"all|[1-9][0-9]{0,2}|device=[0-9]{1,3}"
# one word of a command line given as argv (container.entrypoint): never a shell line
COMMAND_WORD = r"[A-Za-z0-9_./:=@+-]{1,1024}"
# a path segment that may hold a glob (* ? [ ]), for files looked up inside an image
_GLOB_SEGMENT = r"[A-Za-z0-9_.@+~*?\[\]-]+"
# docker --ulimit names (github.com/docker/go-units ulimit.go, ulimitNameMapping; "as" is disabled there)
ULIMIT_NAMES = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss",
                "rtprio", "rttime", "sigpending", "stack")
# Linux capabilities 0..40 (linux/capability.h, capabilities(7)); docker --cap-add takes them with or without CAP_
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
                "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
                "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN",
                "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
                "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND",
                "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE")

# A single printable line: no control characters (newline, tab, NUL, ESC, DEL), no Unicode line or
# paragraph separators, no bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


class Refusal(Exception):
    """A value a kind refuses: rule and fix, without the key (problem() adds host, key and value)."""

    def __init__(self, rule, fix):
        super(Refusal, self).__init__(rule)
        self.rule = rule
        self.fix = fix


def _text(value, maxlen=MAX_LEN, what="a string"):
    if isinstance(value, bool) or not isinstance(value, str):
        raise Refusal("must be %s, got %s" % (what, _type_name(value)), "write it as a quoted string")
    if len(value) > maxlen:
        raise Refusal("is %d characters long, at most %d are allowed" % (len(value), maxlen), "shorten it")
    if _UNPRINTABLE.search(value):
        raise Refusal("holds a newline, tab, NUL or another control or direction character",
                      "remove it (a trailing newline from a file lookup: add | trim)")
    return value


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a bool (%s)" % value
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "%r" % value
    for t, n in ((int, "an integer"), (float, "a float"), (dict, "a mapping"), (list, "a list")):
        if isinstance(value, t):
            return "%s (%r)" % (n, value) if t in (int, float) else n
    return "a %s" % type(value).__name__


def _full(pattern, value, rule, fix):
    if not re.fullmatch(pattern, value):
        raise Refusal(rule, fix)


def _number(value, integer, lo=None, hi=None):
    if isinstance(value, bool):
        raise Refusal("must be a number, got %s" % _type_name(value), "write a number, e.g. 30")
    if integer:
        if isinstance(value, float):
            raise Refusal("must be an integer, got the float %r" % value,
                          "write it without a decimal point, e.g. %s" % (
                              int(value) if math.isfinite(value) else 30))
        if not isinstance(value, int):
            raise Refusal("must be an integer, got %s" % _type_name(value),
                          "write an unquoted integer in YAML, or -e as JSON: -e '{\"key\": 30}' (-e key=30 and INI [vars] "
                          "hand over strings)")
    else:
        if not isinstance(value, (int, float)):
            raise Refusal("must be a number, got %s" % _type_name(value),
                          "write an unquoted number in YAML, or -e as JSON: -e '{\"key\": 30}' (-e key=30 and INI [vars] "
                          "hand over strings)")
        if math.isnan(value) or math.isinf(value):
            raise Refusal("must be a finite number, got %r" % value, "write a finite number, e.g. 30")
    if lo is not None and value < lo or hi is not None and value > hi:
        raise Refusal("is outside %s..%s" % (_fmt(lo), _fmt(hi)), "choose a value in %s..%s" % (_fmt(lo), _fmt(hi)))
    return value


def _fmt(x):
    if x is None:
        return ""
    return ("%d" % x) if float(x).is_integer() else ("%s" % x)


# --- one checker per kind: (value, params) -> None, raises Refusal ------------------------------------

def _k_text(v, p):
    _text(v, p.get("maxlen", 1024))


def _k_abs_path(v, p):
    _text(v, 1024)
    _full(ABS_PATH, v, "is not an absolute path of letters, digits and _ . @ + ~ - (no spaces, quotes, '%', "
          "'$', ':', ',' or '=')", "write an absolute path such as /var/lib/dgxspark-vllm")
    if re.search(r"(^|/)\.\.?(/|$)", v) or "//" in v:
        raise Refusal("holds a '.' or '..' segment or '//'", "write the normalised absolute path")
    under = p.get("under")
    if under and not (v == under.rstrip("/") or v.startswith(under.rstrip("/") + "/")):
        raise Refusal("is not under %s" % under, "choose a path under %s" % under)
    if under and p.get("strict") and v.rstrip("/") == under.rstrip("/"):
        raise Refusal("is %s itself, a file below it is meant" % under, "name a file under %s" % under)
    if p.get("plain_name") and not re.fullmatch(r"[A-Za-z0-9_-]+", v.rsplit("/", 1)[-1]):
        # sudo and run-parts skip a drop-in whose name holds a dot
        raise Refusal("has a file name with a dot or other characters the directory's reader skips",
                      "name the file with letters, digits, _ and - only")


def _k_controller_path(v, p):
    # Only read or written on the controller (lanes, reports): any one-line path, ~ and relative allowed.
    _text(v, 4096)
    if not v.strip():
        raise Refusal("is blank", "write a path")


def _k_file_name(v, p):
    _full(FILE_NAME, _text(v, 255), "is not a file name (letters, digits and _ . @ + -, no '/', not starting "
          "with '.' or '-')", "write a plain file name")
    suffix = p.get("suffix")
    if suffix and not v.endswith(suffix):
        raise Refusal("does not end with %s" % suffix, "name it <something>%s" % suffix)


def _k_interface(v, p):
    _full(INTERFACE, _text(v, 15), "is not an interface name (at most 15 letters, digits and _ . -, no '/')",
          "use the netdev name ip link shows, e.g. enp1s0f1np1")
    if v in (".", ".."):
        raise Refusal("is not an interface name", "use the netdev name ip link shows")


def _ip(v):
    try:
        return ipaddress.ip_address(v)
    except ValueError:
        return None


def _k_address(v, p):
    _text(v, 64)
    if _ip(v) is None:
        raise Refusal("is not an IPv4 or IPv6 address", "write an address such as 198.18.10.10")


def _k_host(v, p):
    _text(v, 253)
    if _ip(v) is not None:
        return
    if "%" in v and _ip(v.split("%", 1)[0]) is not None and re.fullmatch(INTERFACE, v.split("%", 1)[1]):
        return  # a link-local IPv6 address with its zone (fe80::1%enP7s7)
    _full(HOSTNAME, v, "is neither an IP address nor a DNS host name", "write an address or a host name")


def _k_cidr(v, p):
    _text(v, 64)
    try:
        ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise Refusal("is not a network in CIDR notation", "write e.g. 198.18.20.0/24")
    if "/" not in v:
        raise Refusal("has no prefix length", "write e.g. 198.18.20.0/24")


def _k_port(v, p):
    _number(v, True, p.get("min", 1), p.get("max", 65535))


def _k_url(v, p):
    _text(v, 2048)
    m = re.fullmatch(r"(https?)://(\[[0-9A-Fa-f:.%A-Za-z]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?(/[A-Za-z0-9_.~/%+-]*)?", v)
    if not m:
        raise Refusal("is not an http(s) URL of a host, an optional port and a path (no query, quotes or spaces)",
                      "write e.g. http://198.18.10.10:8000")
    host = m.group(2).strip("[]")
    if _ip(host.split("%")[0]) is None:
        _full(HOSTNAME, host, "names no valid host", "write an address or a host name")
    if m.group(3) and not 1 <= int(m.group(3)) <= 65535:
        raise Refusal("has a port outside 1..65535", "fix the port")


def _k_env_value(v, p):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        _number(v, False)
        return
    _text(v, 4096)


def _k_secret(v, p):
    # the one secret rule (module_utils/inputs.py), also used by the modules and the inventory checks
    msg = secret_problem("the value", v)
    if msg:
        rule, fix = (msg.split(";", 1) + [""])[:2]
        raise Refusal(rule.replace("the value ", "", 1), fix.strip() or "see docs/inputs.md")


def _k_duration(v, p):
    _number(v, bool(p.get("integer")), p.get("min", 0), p.get("max", 30 * 86400))


def _k_integer(v, p):
    _number(v, True, p.get("min"), p.get("max"))


def _k_number(v, p):
    _number(v, False, p.get("min"), p.get("max"))


def _k_ratio(v, p):
    _number(v, False, p.get("min", 0.0), p.get("max", 1.0))


def _k_gib(v, p):
    # GiB (1024^3 bytes); the default bound is a Spark's unified memory (121 GiB) unless told otherwise
    _number(v, False, p.get("min", 0), p.get("max", 121))


def _k_file_mode(v, p):
    if isinstance(v, int) and not isinstance(v, bool):
        raise Refusal("is an integer; YAML reads 0775 as the number 509", "quote the mode: '0775'")
    _full(FILE_MODE, _text(v, 4), "is not an octal file mode", "write a quoted mode such as '0775'")


def _k_regex(v, p):
    _text(v, 1024)
    try:
        re.compile(v)
    except re.error as e:
        raise Refusal("is not a valid regular expression (%s)" % e, "fix it, e.g. 'Connecting to|rendezvous'")


def _k_command(v, p):
    # an executable: a bare name looked up in PATH, or an absolute path; never a command line
    _text(v, 1024)
    if v.startswith("/"):
        _k_abs_path(v, {})
        return
    _full(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", v, "is not a program name or an absolute path (no spaces, "
          "arguments or shell syntax)", "e.g. docker or /usr/bin/docker")


def _k_choice(v, p):
    choices = p.get("choices") or []
    if v not in choices or isinstance(v, bool) != any(isinstance(c, bool) for c in choices if c == v):
        raise Refusal("is not one of %s" % ", ".join(repr(c) for c in choices), "choose one of them")


# The strings Ansible's own bool conversion takes: `-e key=true` hands every value over as a string.
BOOL_STRINGS = ("true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f")


def _k_bool(v, p):
    if isinstance(v, bool):
        return
    if isinstance(v, str) and v.lower() in BOOL_STRINGS:
        return
    raise Refusal("must be true or false, got %s" % _type_name(v), "write true or false")


def _k_mapping(v, p):
    # With `fields` (a record: key -> kind) every key is checked by its kind and no other key is allowed;
    # without, the keys and values are checked where the mapping is used (named in its kinds.yml entry's note).
    if not isinstance(v, dict):
        raise Refusal("must be a mapping, got %s" % _type_name(v), "write a YAML mapping (key: value)")
    fields = p.get("fields")
    if not fields:
        return
    extra = sorted(str(k) for k in v if k not in fields)
    if extra:
        raise Refusal("has the key(s) %s, only %s are known" % (", ".join(extra), ", ".join(sorted(fields))),
                      "remove or rename them")
    for key in sorted(fields):
        try:
            check(fields[key], v.get(key))
        except Refusal as e:
            raise Refusal("key %r %s" % (key, e.rule), e.fix)


def _k_env_map(v, p):
    _k_mapping(v, p)
    for k, val in v.items():
        try:
            KINDS["env_name"](k, {})
            _k_env_value(val, {})
        except Refusal as e:
            raise Refusal("entry %r %s" % (k, e.rule), e.fix)


def _k_mtu_map(v, p):
    # interface -> MTU in bytes (the fabric's jumbo frames are 9000)
    _k_mapping(v, p)
    for k, val in v.items():
        try:
            _k_interface(k, {})
            _number(val, True, 576, 9216)
        except Refusal as e:
            raise Refusal("entry %r %s" % (k, e.rule), e.fix)


def _k_list(v, p):
    if not isinstance(v, list):
        raise Refusal("must be a list, got %s" % _type_name(v), "write a YAML list")
    elem = p.get("elements")
    if elem is None:
        return
    for i, item in enumerate(v):
        try:
            check(elem, item)
        except Refusal as e:
            raise Refusal("item %d (%r) %s" % (i, item, e.rule), e.fix)


def _k_image_path(v, p):
    # A file inside an image: absolute, or relative to the lane's vllm_pkg_dir (image.fingerprint_files); a glob
    # (* ? [ ]) picks the file the image has (libnccl.so*). No '.' or '..' segment: it stays where it is aimed.
    _text(v, 1024)
    _full(r"/?" + _GLOB_SEGMENT + r"(?:/" + _GLOB_SEGMENT + r")*", v,
          "is not a path inside the image (segments of letters, digits, _ . @ + ~ - and the globs * ? [ ]; no "
          "spaces, quotes, ':', '%' or '$')", "write e.g. vllm/platforms/cpu.py or /usr/lib/x86_64-linux-gnu/libnccl.so*")
    if re.search(r"(^|/)\.\.?(/|$)", v):
        raise Refusal("holds a '.' or '..' segment", "write the path without it")
    if p.get("absolute") and not v.startswith("/"):
        raise Refusal("is not absolute", "write the path from / inside the image")


def _k_source_path(v, p):
    # A controller file: absolute, or relative to the collection root (a Dockerfile, a build context, a fix file).
    # '..' may step out of the collection (the operator's own files); the characters stay plain.
    _full(r"/?" + SEGMENT + r"(?:/" + SEGMENT + r")*/?", _text(v, 1024),
          "is not a controller path (segments of letters, digits and _ . @ + ~ -, absolute or relative to the "
          "collection root; no spaces, quotes, ':', '%', '$', ',' or '=')",
          "write e.g. files/fixes/x.py or docker/Dockerfile.v1")


def _k_fix_source(v, p):
    # fix_files[].src: the four forms kernel_fix reads (roles/kernel_fix/tasks/materialize.yml)
    _text(v, 2048)
    for prefix, checker, params in (("image:", _k_image_path, {"absolute": True}), ("file://", _k_abs_path, {})):
        if v.startswith(prefix):
            try:
                checker(v[len(prefix):], params)
            except Refusal as e:
                raise Refusal("after %r %s" % (prefix, e.rule), e.fix)
            return
    if re.match(r"https?://", v):
        _k_url(v, {})
    else:
        _k_source_path(v, {})


def _k_image_selector(v, p):
    # fix_files[].images: an image reference, a registry digest, or the version of the image's vllm
    # (module_utils/image.py FIX_VLLM_RE). 'sha256:' always starts a digest: as a reference it would name an
    # image "sha256" and let a mistyped digest through.
    _text(v, 512)
    if v.startswith("sha256:"):
        _full(r"sha256:[0-9a-f]{64}", v, "is not a registry digest (sha256: and 64 lowercase hex digits)",
              "copy the part after '@' of the image's RepoDigests entry")
    elif v.startswith("vllm=="):
        _full(r"vllm==[0-9A-Za-z.+_-]{1,64}", v, "is not vllm==<version>", "e.g. vllm==0.32.0")
    else:
        _full(IMAGE_REF, v, "is not an image reference, a registry digest sha256:<64 hex> or vllm==<version>",
              "e.g. vllm==0.32.0 or ghcr.io/owner/name:tag")


def _k_ulimit(v, p):
    # docker --ulimit name=soft[:hard]: the names and the soft <= hard rule of go-units ParseUlimit; -1 is unlimited
    m = re.fullmatch(r"([a-z]{1,16})=(-1|[0-9]{1,19})(?::(-1|[0-9]{1,19}))?", _text(v, 64))
    if not m:
        raise Refusal("is not a ulimit name=soft[:hard] (integers, -1 for unlimited)", "write e.g. memlock=-1:-1")
    if m.group(1) not in ULIMIT_NAMES:
        raise Refusal("names no ulimit docker knows (%s)" % ", ".join(ULIMIT_NAMES), "use one of them, e.g. memlock")
    soft, hard = int(m.group(2)), int(m.group(3) if m.group(3) is not None else m.group(2))
    if hard != -1 and (soft == -1 or soft > hard):
        raise Refusal("has a soft limit above its hard limit", "make soft <= hard, or hard -1 (unlimited)")


def _k_capability(v, p):
    name = _text(v, 64)
    if not re.fullmatch(r"(?:CAP_)?[A-Z_]{1,32}", name) or name.replace("CAP_", "", 1) not in CAPABILITIES:
        raise Refusal("is not a Linux capability name (capabilities(7), upper case, CAP_ optional; ALL is refused)",
                      "write e.g. IPC_LOCK")


def _k_device(v, p):
    # docker --device host[:container][:permissions]: absolute paths, permissions a set of r, w and m
    parts = _text(v, 2048).split(":")
    perms = parts.pop() if len(parts) > 1 and re.fullmatch(r"[rwm]{1,3}", parts[-1]) else None
    if not 1 <= len(parts) <= 2:
        raise Refusal("is not a device host path[:container path][:rwm]", "write e.g. /dev/infiniband:/dev/infiniband")
    for path in parts:
        try:
            _k_abs_path(path, {})
        except Refusal as e:
            raise Refusal(("has the path %r, which %s" % (path, e.rule)) if path != v else e.rule, e.fix)
    if perms is not None and len(set(perms)) != len(perms):
        raise Refusal("repeats a permission letter", "write each of r, w, m at most once, e.g. rwm")


def _k_raw_text(v, p):
    # Free text that only the controller prints or sends as JSON (a prompt); one printable line.
    _text(v, p.get("maxlen", 4096))


# The kinds that are one full-string pattern: kind -> (pattern, length bound, rule, fix).
PATTERN_KINDS = {
    "unix_user": (USER, 32, "is not a POSIX user name (lowercase letters, digits, _ and -, at most 32, starting "
                  "with a letter or _)", "use a name like vllm-watchdog"),
    "unix_group": (USER, 32, "is not a group name (lowercase letters, digits, _ and -, at most 32)",
                   "use a name like docker"),
    "unit_name": (UNIT, 200, "is not a systemd unit name (letters, digits and _ . @ -, no '%', '\\' or spaces)",
                  "use a name like dgxspark-vllm-watchdog (without .service)"),
    "file_suffix": (r"\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}", 32, "is not a file-name suffix ('.' and letters, digits, "
                    "_ . -)", "e.g. .orig"),
    "container_name": (CONTAINER, 128, "is not a Docker container name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 128)",
                       "use a name like vllm_rank"),
    "image_ref": (IMAGE_REF, 512, "is not an image reference ([registry[:port]/]path[:tag][@sha256:<64 hex>], "
                  "lowercase path)", "write a reference such as ghcr.io/owner/name:tag"),
    "sysctl_key": (SYSCTL_KEY, 128, "is not a sysctl key (dot-separated lowercase words)", "e.g. vm.swappiness"),
    "env_name": (ENV_NAME, 128, "is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", "e.g. NCCL_IB_HCA"),
    "size": (SIZE, 32, "is not a size with a unit (e.g. 32g; a bare number is bytes to docker)", "write e.g. 32g"),
    "token": (TOKEN, 128, "is not a word of letters, digits and _ . - (at most 128)", "e.g. glm47"),
    "group_name": (GROUP_NAME, 128, "is not an inventory group name ([A-Za-z_][A-Za-z0-9_]*)", "e.g. vllm_head"),
    "inventory_host": (r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}", 253, "is not an inventory host name",
                       "name a host of the inventory"),
    "hf_repo": (HF_REPO, 192, "is not a Hugging Face repo id (owner/name)", "e.g. zai-org/GLM-5.3-Flash"),
    "pip_requirement": (PIP_REQ, 256, "is not a pip requirement (a name and optional version specifiers, no URL or "
                        "option)", "e.g. huggingface_hub>=0.30"),
    "cli_option": (CLI_OPTION, 320, "is not one long option (--name or --name=value, no spaces or quotes)",
                   "e.g. --bwlimit=500M"),
    "mount_options": (MOUNT_OPTS, 512, "is not a comma-separated list of mount options", "e.g. ro,vers=4.2"),
    "glob": (GLOB, 255, "is not a file-name pattern (letters, digits, _ . * ? [ ] / @ + -)", "e.g. *.safetensors"),
    "timestamp": (r"[0-9]{8}T[0-9]{6}Z", 16, "is not a UTC stamp YYYYmmddTHHMMSSZ",
                  "e.g. 20260101T000000Z, or leave it unset"),
    "lane_name": (LANE_NAME, 64, "is not a lane name (lowercase letters, digits and _, at most 64; it names the file "
                  "lanes/<name>.yml)", "e.g. tp2_mtp"),
    # Docker's container-name rule: the name becomes a file, a directory and a docker build label
    "item_name": (CONTAINER, 128, "is not a name of letters, digits and _ . - (starting with a letter or digit, at "
                  "most 128; no '/')", "e.g. sparse_attn_indexer_kpool or glm53-v12"),
    "hf_revision": (HF_REVISION, 255, "is not a Hugging Face revision (a branch, tag or commit: letters, digits and "
                    "_ . / -)", "write a 40-hex commit id, or a branch such as main"),
    "model_name": (MODEL_NAME, 128, "is not a served model name (letters, digits and _ . / -, starting with a letter "
                   "or digit, at most 128)", "e.g. glm-5.3-flash"),
    "sha256": (SHA256, 64, "is not a sha256 (64 lowercase hex digits)", "copy the first word of sha256sum <file>"),
    "cuda_version": (CUDA_VERSION, 11, "is not a CUDA version X.Y or X.Y.Z (ASCII digits)", "e.g. 13.0"),
    "package_name": (PACKAGE_NAME, 128, "is not a Python distribution name (letters, digits and _ . -, starting and "
                     "ending with a letter or digit)", "e.g. nvidia-nccl-cu13"),
    "package_version": (PACKAGE_VERSION, 128, "is not a version as the distribution reports it (letters, digits and "
                        ". + ! _ -)", "quote it, e.g. \"2.30.7\" or \"2.13.0+cpu\""),
    "docker_gpus": (DOCKER_GPUS, 16, "is not a docker --gpus value (all, a count, or device=<index>)",
                    "write all (a Spark has one GPU), or null for no GPU"),
    "command_word": (COMMAND_WORD, 1024, "is not one command-line word (letters, digits and _ . / : = @ + -; no "
                     "spaces, quotes or shell syntax)", "write each word as its own list item, e.g. [vllm, serve]"),
}


def _pattern_kind(name):
    pattern, maxlen, rule, fix = PATTERN_KINDS[name]

    def check_pattern(v, p):
        _full(pattern, _text(v, maxlen), rule, fix)
    return check_pattern


KINDS = {
    "text": _k_text, "raw_text": _k_raw_text, "abs_path": _k_abs_path, "controller_path": _k_controller_path,
    "file_name": _k_file_name, "interface": _k_interface, "address": _k_address, "host": _k_host, "cidr": _k_cidr,
    "port": _k_port, "url": _k_url, "env_value": _k_env_value, "secret": _k_secret, "duration": _k_duration,
    "integer": _k_integer, "number": _k_number, "ratio": _k_ratio, "gib": _k_gib, "file_mode": _k_file_mode,
    "regex": _k_regex, "command": _k_command, "choice": _k_choice, "bool": _k_bool, "mapping": _k_mapping,
    "env_map": _k_env_map, "mtu_map": _k_mtu_map, "list": _k_list, "image_path": _k_image_path, "image_selector": _k_image_selector,
    "source_path": _k_source_path, "fix_source": _k_fix_source, "ulimit": _k_ulimit, "capability": _k_capability,
    "device": _k_device,
}
KINDS.update((name, _pattern_kind(name)) for name in PATTERN_KINDS)

# The kinds whose values are never shown in a message.
SECRET_KINDS = ("secret",)


def normalise(spec):
    """A kind spec as (name, params); raises ValueError on an unknown kind (a declaration error)."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("kind"), str):
        name, params = spec["kind"], dict((k, v) for k, v in spec.items() if k != "kind")
    else:
        raise ValueError("a kind spec is a kind name or a mapping with 'kind': %r" % (spec,))
    if name not in KINDS:
        raise ValueError("unknown kind %r (plugins/module_utils/kinds.py KINDS)" % name)
    if "elements" in params:
        normalise(params["elements"])
    for field in (params.get("fields") or {}).values():
        normalise(field)
    return name, params


def check(spec, value):
    """None when value fits spec; raises Refusal otherwise. Unset values (null, '') pass only when the
    spec says so (null: true / empty: true)."""
    name, params = normalise(spec)
    if value is None:
        if params.get("null"):
            return
        raise Refusal("is not set (null)", "set it, or leave it out to take the default")
    if value == "" and isinstance(value, str) and (params.get("empty") or name == "secret"):
        return
    KINDS[name](value, params)


def shown(spec, value):
    """The value as a message shows it: JSON-ish repr, cut at 80 characters, <redacted> for a secret."""
    name = normalise(spec)[0]
    if name in SECRET_KINDS:
        return "<redacted>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def problem(spec, value, key, host=None):
    """None, or one message: 'host H: KEY = VALUE RULE (kind K); FIX.'"""
    try:
        check(spec, value)
    except Refusal as e:
        where = ("host %s: " % host) if host else ""
        return "%s%s = %s %s (kind %s); %s." % (where, key, shown(spec, value), e.rule, normalise(spec)[0], e.fix)
    return None


def problems(declared, values, host=None):
    """Messages for every declared key whose value (values[key], when present) does not fit its kind."""
    out = []
    for key in sorted(declared):
        if key in values:
            msg = problem(declared[key], values[key], key, host)
            if msg:
                out.append(msg)
    return out
