"""The docs name only what exists and what a user gets (issue 31).

Parses README.md, docs/*.md, roles/*/README.md and the sample inventories, and checks that
(a) every repository path, playbook, lane and dgxspark.vllm.* name in them exists,
(b) the README's lane list is exactly lanes/*.yml,
(c) docs/internals.md names every plugins/module_utils module with a line on what it owns,
(d) nothing that ships cites a document that does not: the unshipped working notes and specification,
    or a repository .md file the tarball leaves out (unless the line says it is in the repository).
"""
import fnmatch
import glob
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

DOCS = (["README.md"] + sorted(glob.glob("docs/*.md", root_dir=ROOT))
        + sorted(glob.glob("roles/*/README.md", root_dir=ROOT))
        + sorted(glob.glob("inventories/sample_*/**/*.yml", root_dir=ROOT, recursive=True)))

# Where a repository path starts: a top-level directory or a top-level file of the checkout.
_TOP = r"(?:docs|roles|playbooks|plugins|lanes|inventories|tests|tools|benchmarks|molecule|files|changelogs|meta|library|collections|\.ci)"
_ROOT_FILES = r"(?:README\.md|site\.yml|galaxy\.yml|Makefile|ansible\.cfg|requirements(?:-dev)?\.txt|LICENSE)"
# Not inside another path, a URL, a variable or a placeholder; `<site>` and `{2,3,4}` are part of the path.
PATH_RE = re.compile(r"(?<![\w./$<{@~-])((?:\.\./)*%s/[\w.*{},/<>+-]*|%s(?![\w.-]))" % (_TOP, _ROOT_FILES))
# "owner/repo docs/X.md" cites another project's file (docs/catalogue.md sources), not ours.
EXTERNAL_RE = re.compile(r"[\w.-]+/[\w.-]+\s+$")
# Made at run time (by the playbooks, make or the tests), never part of the checkout.
GENERATED = ("reports/", ".sim/", ".venv", "tests/output", "benchmarks/results/")
LANE_RE = re.compile(r"(?<![\w-])(tp\d_[a-z0-9_]*[a-z0-9]|sim_cpu_tp\d)(?![\w-])")


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _lanes():
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "lanes", "*.yml")))


def _user_supplied():
    """Fix files the lanes name: the user puts them in kernel_fix_artifacts_dir (files/ beside the inventory; they
    cannot ship), so a doc may name them there, and the directories holding them."""
    srcs = set()
    for lane in _lanes():
        spec = yaml.safe_load(_read("lanes/%s.yml" % lane)) or {}
        for f in spec.get("fix_files") or []:
            if "src" in f and not f["src"].startswith(("image:", "/")) and "://" not in f["src"]:
                srcs.update([f["src"], "files/" + f["src"]])
                if "/" in f["src"]:
                    srcs.add("files/%s/" % os.path.dirname(f["src"]))
    return srcs


def _is_supplied(path, supplied):
    return path in supplied or any(path.endswith("/" + s) for s in supplied if s.startswith("files/"))


def _user_made(text):
    """Directories a doc tells the user to create (`cp -r <sample> <dest>`)."""
    return {m.group(1).rstrip("/") for m in re.finditer(r"cp -r \S+ (\S+)", text)}


def _expand(path):
    """`<site>` -> `*`; `{2,3,4}` -> one path each."""
    path = re.sub(r"<[^>]*>", "*", path)
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [path[:m.start()] + alt + path[m.end():] for alt in m.group(1).split(",")]


def _exists(path, doc):
    """In the checkout, beside the doc (relative links), or in any role (`meta/kinds.yml` of "each role")."""
    bases = [ROOT, os.path.join(ROOT, os.path.dirname(doc))]
    if path.startswith(("meta/", "files/")):
        bases += glob.glob(os.path.join(ROOT, "roles", "*"))
    return all(any(glob.glob(os.path.join(b, p)) for b in bases) for p in _expand(path))


def _paths(doc, text):
    """(line number, path) of every repository path the doc names, markdown links included."""
    for n, line in enumerate(text.splitlines(), 1):
        for m in PATH_RE.finditer(line):
            if EXTERNAL_RE.search(line[:m.start()]):
                continue
            yield n, m.group(1).rstrip(".,:;)`'\"")
        for m in re.finditer(r"\]\(([^)#\s]+)", line):
            if not re.match(r"[a-z]+:", m.group(1)):
                yield n, m.group(1)


def missing_paths(doc, text):
    supplied, made = _user_supplied(), _user_made(text)
    out = []
    for n, path in _paths(doc, text):
        if path.startswith(GENERATED) or _is_supplied(path, supplied) or any(path.startswith(d) for d in made):
            continue
        if not _exists(path, doc):
            out.append("%s:%d: %s" % (doc, n, path))
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_named_paths_exist(doc):
    assert missing_paths(doc, _read(doc)) == []


def test_path_check_is_real():
    # the check itself: a path that is not there is reported, one that is is not
    text = "See docs/nothing-here.md and `playbooks/site.yml`, [x](../../docs/lanes.md)."
    assert missing_paths("roles/preflight/README.md", text) == ["roles/preflight/README.md:1: docs/nothing-here.md"]


def _fqcn_targets():
    names = set()
    for pattern in ("playbooks/*.yml", "plugins/modules/*.py", "plugins/action/*.py", "plugins/filter/*.yml",
                    "plugins/inventory/*.py", "plugins/callback/*.py", "plugins/doc_fragments/*.py"):
        names.update(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, pattern)))
    names.update(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")))
    for py in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py")):
        with open(py, encoding="utf-8") as f:
            names.update(re.findall(r"[\"'](\w+)[\"']\s*:\s*\w", f.read()))
    return names


@pytest.mark.parametrize("doc", DOCS)
def test_named_lanes_and_fqcns_exist(doc):
    text, lanes, targets = _read(doc), set(_lanes()), _fqcn_targets()
    assert sorted(set(LANE_RE.findall(text)) - lanes) == []
    # `dgxspark.vllm.spec` and `dgxspark.vllm.spec-hash` are container labels, not content names
    named = {m.group(1) for m in re.finditer(r"dgxspark\.vllm\.(\w+)(?![\w-])(?!` label)", text)}
    assert sorted(named - targets) == []


def _readme_paragraph(start):
    text = _read("README.md")
    i = text.index(start)
    return text[i:text.index("\n\n", i)]


def test_readme_playbooks_exist():
    para = _readme_paragraph("Playbooks: ")
    named = set(re.findall(r"`(?:playbooks/)?([\w-]+)\.yml`", para))
    assert named, para
    missing = [n for n in sorted(named)
               if not os.path.isfile(os.path.join(ROOT, "playbooks", n + ".yml"))
               and not os.path.isfile(os.path.join(ROOT, n + ".yml"))]
    assert missing == []


def test_readme_ansible_cfg_for_an_installed_collection_matches_the_checkouts():
    """The README's ansible.cfg snippet (Install) holds the plugins the checkout enables and the values it is tested
    with: a plugin added to ansible.cfg but not to the snippet, or a setting that drifted, fails here."""
    import configparser  # pylint: disable=import-outside-toplevel
    text = _read("README.md")
    install = text[text.index("## Install"):text.index("\n## ", text.index("## Install") + 1)]
    block = re.search(r"```ini\n(.*?)```", install, re.S)
    assert block, install
    snippet, checkout = configparser.ConfigParser(), configparser.ConfigParser()
    snippet.read_string(block.group(1))
    checkout.read(os.path.join(ROOT, "ansible.cfg"))
    assert snippet.sections() == ["defaults", "inventory", "ssh_connection"]
    for section in snippet.sections():
        for key, value in snippet.items(section):
            assert checkout.get(section, key) == value, (section, key)

    def ours(cfg, section, key):
        return sorted(v.strip() for v in cfg.get(section, key).split(",") if v.strip().startswith("dgxspark.vllm."))

    assert ours(snippet, "defaults", "callbacks_enabled") == ours(checkout, "defaults", "callbacks_enabled") \
        == ["dgxspark.vllm.preload"]
    assert ours(snippet, "inventory", "enable_plugins") == ours(checkout, "inventory", "enable_plugins") \
        == ["dgxspark.vllm.shape_guard"]


def test_readme_lane_list_is_lanes_dir():
    para = _readme_paragraph("Lanes (")
    listed = set(LANE_RE.findall(para))
    assert sorted(listed) == _lanes(), para


def test_readme_two_node_default_is_the_samples_lane():
    sample = yaml.safe_load(_read("inventories/sample_tp2/group_vars/spark_cluster/main.yml"))["vllm_lane"]
    para = _readme_paragraph("Lanes (")
    m = re.search(r"`(\w+)`\s*\(default for two nodes\b", para)
    assert m and m.group(1) == sample, para
    lanes_md = re.search(r"\| `(\w+)` \| 2 Sparks, \*\*default for two nodes\*\*", _read("docs/lanes.md"))
    assert lanes_md and lanes_md.group(1) == sample


def internals_module_utils_rows(text):
    """{module: what it owns} from the module_utils table of docs/internals.md."""
    rows, in_table = {}, False
    for line in text.splitlines():
        if line.startswith("| module_utils |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        m = re.match(r"\|\s*`([\w]+)\.py`\s*\|([^|]*)\|", line) if in_table else None
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_internals_names_every_module_utils():
    rows = internals_module_utils_rows(_read("docs/internals.md"))
    modules = sorted(os.path.splitext(os.path.basename(p))[0]
                     for p in glob.glob(os.path.join(ROOT, "plugins", "module_utils", "*.py"))
                     if not p.endswith("__init__.py"))
    assert sorted(m for m in modules if m not in rows) == []
    assert sorted(m for m in rows if m not in modules) == []
    assert sorted(m for m, owns in rows.items() if len(owns) < 10) == []


# ---------------------------------------------------------------- (d) citations of what does not ship

def _build_ignore():
    return yaml.safe_load(_read("galaxy.yml")).get("build_ignore") or []


def ships(path):
    """The rule ansible-galaxy applies: a pattern matches the path or one of its parent directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return not any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(os.path.basename(p), pat)
                   for pat in _build_ignore() for p in prefixes)


# Documents no user has: the project's working notes and specification, and a design doc that never shipped.
UNSHIPPED = re.compile(r"operations[ -]spec|docs/design\b|design card|(?<![\w/.])notes/[\w./-]+", re.I)
SHIPPED_TEXT = ("README.md", "site.yml", "docs/*.md", "roles/**/*", "playbooks/**/*", "lanes/*.yml",
                "inventories/sample_*/**/*.yml", "files/**/*", "plugins/**/*.py", "plugins/**/*.yml", "meta/*.yml")


def _shipped_text_files():
    seen = set()
    for pattern in SHIPPED_TEXT:
        for p in glob.glob(pattern, root_dir=ROOT, recursive=True):
            full = os.path.join(ROOT, p)
            # a symlinked copy (roles/vllm_bench/files -> module_utils) is read once, as its target
            if os.path.isfile(full) and not os.path.islink(full) and ships(p) and p not in seen:
                seen.add(p)
                try:
                    with open(full, encoding="utf-8") as f:
                        yield p, f.read()
                except UnicodeDecodeError:
                    continue


def unshipped_citations(rel, text):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        out += ["%s:%d: %s" % (rel, n, m.group(0)) for m in UNSHIPPED.finditer(line)]
        for m in PATH_RE.finditer(line):
            path = m.group(1).rstrip(".,:;)`'\"")
            if not path.endswith(".md") or EXTERNAL_RE.search(line[:m.start()]) or "repository" in line:
                continue
            if path.startswith("../"):
                path = os.path.normpath(os.path.join(os.path.dirname(rel), path))
            if not os.path.isfile(os.path.join(ROOT, path)) or not ships(path):
                out.append("%s:%d: %s" % (rel, n, path))
    return out


def test_nothing_shipped_cites_an_unshipped_document():
    found = []
    for rel, text in _shipped_text_files():
        found += unshipped_citations(rel, text)
    assert found == []


def test_citation_check_is_real():
    assert ships("docs/lanes.md") and not ships("tests/unit/conftest.py") and not ships("inventories/sim/hosts.yml")
    assert unshipped_citations("x.yml", "# from the operations spec A.2, see docs/design\n") == [
        "x.yml:1: operations spec", "x.yml:1: docs/design"]
    assert unshipped_citations("x.md", "figures: benchmarks/README.md\n") == ["x.md:1: benchmarks/README.md"]
    assert unshipped_citations("x.md", "figures: benchmarks/README.md in the repository\n") == []
