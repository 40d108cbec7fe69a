# -*- coding: utf-8 -*-
"""One place for shared values (issue 28; kubespray's kubespray_defaults habit).

docs/internals.md's table "Values and facts that cross roles" lists every variable one role reads from, or hands
to, another role, with who sets it and who reads it. A setting more than one role reads is a *shared value*: its
default lives only in roles/shared_defaults/defaults/main.yml, which every reader lists as a meta dependency.

This test scans every role's tasks, handlers, templates, defaults, vars and files and fails when
- a role names a variable with another role's prefix (or a shared value) and the table does not list the role
  as a setter or reader of it;
- a role names another role's private variable (_<role>_...);
- a shared value is given a literal fallback (`| default(...)`) anywhere outside the shared place (roles,
  playbooks, molecule): that is a second copy of its default, which drifts;
- a shared value's default is declared anywhere but roles/shared_defaults, or a reader lacks the dependency;
- a row of the table names a reader that no longer reads the value (a stale contract).
"""

from __future__ import absolute_import, division, print_function

import glob
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = "shared_defaults"
SHARED_FQCN = "dgxspark.vllm." + SHARED
INTERNALS = os.path.join(ROOT, "docs", "internals.md")
TABLE_HEADING = "## Values and facts that cross roles"
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p))
# Role prefixes; a longer prefix first, so vllm_ranks_ is never read as a shorter role's.
PREFIXES = sorted((r for r in ROLES if r != SHARED), key=len, reverse=True)
SCANNED = ("tasks", "handlers", "templates", "defaults", "vars", "files")
# `dgxspark.vllm.<name>` is a module, filter or role of the collection, not a variable.
TOKEN = re.compile(r"(?<!\w)(?<!dgxspark\.vllm\.)(_{0,2})(%s)_([a-z0-9][a-z0-9_]*)" % "|".join(PREFIXES))
WORD = re.compile(r"(?<!\w)(?<!dgxspark\.vllm\.)([a-z][a-z0-9_]*)\b")
DEFAULT_COPY = r"(?<!\w)%s\s*\|\s*(?:default|d)\s*\("


def _strip_comments(path, text):
    """Blank what is only prose (line numbers kept): YAML/Python/shell comment lines, a YAML line's trailing
    ` # ...`, Jinja {# ... #}."""
    text = re.sub(r"\{#.*?#\}", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    if path.endswith(".j2"):
        return text  # a '#' line of a template is output, and may hold {{ reads }}
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            line = ""
        out.append(re.sub(r"\s+#\s.*$", "", line) if path.endswith((".yml", ".yaml")) else line)
    return "\n".join(out)


def _role_files(role):
    for sub in SCANNED:
        for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, sub, "**", "*"), recursive=True)):
            if os.path.isfile(path):
                yield path


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        return ""


def _table():
    """name -> {'setters': set, 'readers': set} from the internals.md table (role names and file paths)."""
    with open(INTERNALS, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert TABLE_HEADING in lines, "docs/internals.md has no section %r" % TABLE_HEADING
    rows, in_table = {}, False
    for line in lines[lines.index(TABLE_HEADING) + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        if not names or set(cells[0]) <= set("-: "):
            continue
        setters = set(re.findall(r"`([^`]+)`", cells[2]))
        readers = set(re.findall(r"`([^`]+)`", cells[3]))
        for name in names:
            assert name not in rows, "docs/internals.md lists %s twice" % name
            rows[name] = {"kind": cells[1], "setters": setters, "readers": readers}
    return rows


def _shared_defaults():
    path = os.path.join(ROOT, "roles", SHARED, "defaults", "main.yml")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


def _shared_names():
    """Shared values: the table's rows set by shared_defaults, and every default the shared place holds."""
    return sorted({n for n, row in _table().items() if SHARED in row["setters"]} | set(_shared_defaults()))


def _mentions(role):
    """name -> first 'path:line' where the role names a crossing candidate (another role's or a shared value)."""
    shared = set(_shared_names())
    found = {}
    for path in _role_files(role):
        text = _strip_comments(path, _read(path))
        for lineno, line in enumerate(text.splitlines(), 1):
            where = "%s:%d" % (os.path.relpath(path, ROOT), lineno)
            for m in TOKEN.finditer(line):
                name = m.group(1) + m.group(2) + "_" + m.group(3)
                if m.group(2) != role:
                    found.setdefault(name, where)
            for m in WORD.finditer(line):
                if m.group(1) in shared:
                    found.setdefault(m.group(1), where)
    return found


def test_the_table_is_there_and_names_real_roles():
    rows = _table()
    assert len(rows) >= 20
    for name, row in rows.items():
        assert row["setters"] and row["readers"], "%s: give who sets it and who reads it" % name
        for who in row["setters"] | row["readers"]:
            assert who in ROLES or os.path.exists(os.path.join(ROOT, who)), "%s: %s is no role and no file" % (name, who)


@pytest.mark.parametrize("role", [r for r in ROLES if r != SHARED])
def test_every_crossing_read_is_listed(role):
    rows = _table()
    unlisted = []
    for name, where in sorted(_mentions(role).items()):
        if name.startswith("_"):
            unlisted.append("%s: %s reads another role's private variable %s" % (where, role, name))
        elif name not in rows:
            unlisted.append("%s: %s is not in docs/internals.md's table" % (where, name))
        elif role not in rows[name]["setters"] | rows[name]["readers"]:
            unlisted.append("%s: the table's row %s does not name %s" % (where, name, role))
    assert unlisted == []


def test_every_listed_reader_reads_it():
    rows = _table()
    stale = []
    for name, row in sorted(rows.items()):
        for who in sorted(row["readers"]):
            if who in ROLES:
                text = "\n".join(_strip_comments(p, _read(p)) for p in _role_files(who))
            else:
                text = _read(os.path.join(ROOT, who))
            if not re.search(r"(?<![\w])%s(?![\w])" % re.escape(name), text):
                stale.append("%s: listed reader %s does not read it" % (name, who))
    assert stale == []


def _everywhere():
    for top in ("roles", "playbooks", "molecule"):
        for path in sorted(glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True)):
            if os.path.isfile(path) and path.endswith((".yml", ".yaml", ".j2", ".py")) \
                    and not path.startswith(os.path.join(ROOT, "roles", SHARED) + os.sep):
                yield path


def test_no_default_copy_of_a_shared_value():
    shared = _shared_names()
    assert shared, "no shared values: the table lists none set by shared_defaults"
    copies = []
    for path in _everywhere():
        text = _strip_comments(path, _read(path))
        for lineno, line in enumerate(text.splitlines(), 1):
            for name in shared:
                if re.search(DEFAULT_COPY % re.escape(name), line):
                    copies.append("%s:%d: %s | default(...)" % (os.path.relpath(path, ROOT), lineno, name))
    assert copies == [], "a second copy of a shared value's default (it lives in roles/shared_defaults)"


def test_shared_values_have_one_default_in_the_shared_place():
    shared, defaults = _shared_names(), _shared_defaults()
    assert sorted(defaults) == shared, "roles/shared_defaults/defaults/main.yml and the table's shared rows differ"
    elsewhere = []
    for role in ROLES:
        if role == SHARED:
            continue
        for path in glob.glob(os.path.join(ROOT, "roles", role, "defaults", "*.yml")) + \
                glob.glob(os.path.join(ROOT, "roles", role, "vars", "*.yml")):
            with open(path) as f:
                data = yaml.safe_load(f) or {}
            elsewhere += ["%s: %s" % (os.path.relpath(path, ROOT), n) for n in shared if n in data]
        with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
            specs = yaml.safe_load(f)["argument_specs"]
        for entry, spec in specs.items():
            elsewhere += ["roles/%s/meta/argument_specs.yml %s: %s" % (role, entry, n)
                          for n in shared if n in (spec.get("options") or {})]
    assert elsewhere == [], "shared values declared outside roles/shared_defaults"


@pytest.mark.parametrize("role", [r for r in ROLES if r != SHARED])
def test_a_reader_of_a_shared_value_depends_on_the_shared_place(role):
    shared = set(_shared_names())
    reads = sorted(n for n in _mentions(role) if n in shared)
    with open(os.path.join(ROOT, "roles", role, "meta", "main.yml")) as f:
        deps = (yaml.safe_load(f) or {}).get("dependencies") or []
    names = [d if isinstance(d, str) else d.get("role", d.get("name")) for d in deps]
    if reads:
        assert SHARED_FQCN in names, "%s reads %s but meta/main.yml lacks the dependency %s" % (role, reads, SHARED_FQCN)
