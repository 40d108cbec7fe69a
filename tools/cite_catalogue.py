"""Rewrite old citations (operations spec sections, field cases Fnn, gotchas G#n) into catalogue ids.

Every old label of a failure is listed once in the `refs` of one entry of plugins/module_utils/catalogue.py;
a label of a rule that is no failure (a launch line, a sizing formula, the published figures) is in DOC_REFS
with the shipped document that states it. That is the whole mapping. A citation run such as
"(operations spec C.9, B.5; field cases F13, F23)" becomes
"(catalogue weights_mismatch, no_chat_template, file_not_found; docs/lanes.md)"; a bare "F25" becomes
"catalogue topk_wall"; a remaining mention of the unshipped specification becomes "the failure
catalogue (docs/catalogue.md)". The output has no ": " so YAML plain scalars stay valid.

Usage: python3 tools/cite_catalogue.py [--check] [--list] [PATH ...]
  default paths: roles plugins docs playbooks lanes inventories files README.md benchmarks tests (not tests/fixtures)
  --check  change nothing, exit 1 when a citation is left (bare section labels A.6, samples S05 and
           gotchas G #16 included, and any label that nothing maps)
  --list   print every citation found and its replacement
Idempotent: a second run finds nothing to change.
"""
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["roles", "plugins", "docs", "playbooks", "lanes", "README.md", "benchmarks", "tests", "site.yml",
           "Makefile", "molecule", "meta", "inventories", "files"]
SKIP = [os.path.join("tests", "fixtures"), os.path.join("docs", "catalogue.md"),
        os.path.join("plugins", "module_utils", "catalogue.py"), os.path.join("tools", "cite_catalogue.py"),
        os.path.join("tests", "unit", "tools", "test_cite_catalogue.py"),
        # names the old labels on purpose: it fails when one comes back
        os.path.join("tests", "unit", "test_docs_consistency.py"), "changelogs"]
EXTS = (".py", ".yml", ".yaml", ".md", ".j2", ".txt", ".sh", ".cfg", ".ini", ".json", ".rst")
# field-case ids of the two field-case notes; any other Gnn is a gotcha written without '#'
FIELD_G = {"G02", "G04", "G05", "G08", "G10", "G11", "G12", "G14", "G16", "G17", "G18", "G19", "G20", "G21"}
FIELD_F = {"F03", "F04", "F06", "F07", "F08", "F12", "F13", "F14", "F16", "F17", "F19", "F20", "F21", "F22",
           "F23", "F25", "F26"}

SEC = r"[A-J]\.[1-9](?:\s*-\s*(?:[A-J]\.)?[1-9])?"
LAB = r"(?:%s|G\s?#\s?\d+(?:-\d+)?|G\s\d+\b|F\d\d|G\d\d|[A-J](?![\w.#/-]))" % SEC
PREFIX = (r"(?:the\s+)?(?:operations[ -]spec(?:ification)?(?:\.md)?|seeds spec|spec|field[ -]cases?|gotchas?|"
          r"gotcha|cases?)")
# a run stays on one line: a citation split over two lines is two runs
JOIN = r"(?:[ \t]*(?:,|/|;|&|\band\b|\bor\b)[ \t]*(?:%s[ \t]+)?§?[ \t]*)" % PREFIX
RUN = re.compile(r"\b%s[ \t]+§?[ \t]*(%s(?:%s%s)*)" % (PREFIX, LAB, JOIN, LAB))
# after the rewrite (yamllint and ansible-test pep8 allow 160 columns)
MAX_COLS = 160
# a label standing alone: "(A.6)", "§C.6", "§G", "G #16", "S05"; a quoted one is a safetensors dtype ("F16"),
# a dotted one a version (2.30.7)
BARE = re.compile(r"(?:§[ \t]?|(?<![\w#.\\\"'-]))(%s|G\s?#\s?\d+(?:-\d+|(?:/#?\d+)+)?|G [1-9]\d?(?:/\d+)*|F\d\d|G\d\d|"
                  r"S\d\d(?:[-–]S\d\d)?)"
                  r"(?![\w#]|\.\d)|§[ \t]?([A-J])(?![\w.])" % SEC.replace(r"\s*-\s*", r"\s*[-–]\s*"))
LEFT = re.compile(r"(?:the\s+)?operations[ -]spec(?:ification)?(?:\.md)?(?:\s+sections?)?", re.I)
ONE = re.compile(LAB)
CID = r"[a-z0-9]+(?:_[a-z0-9]+)+"
CITE_END = r"(catalogue %s(?:, %s)*|(?:docs|tests|roles)/[\w./-]+?\.(?:md|txt|log|csv|prom|json|yaml))" % (CID, CID)
SLASH = re.compile(CITE_END + r"/(?=(?:docs|tests|roles)/|catalogue )")
TWICE = re.compile(r"((?:docs|tests|roles)/[\w./-]+\.(?:md|txt|log|csv|prom|json|yaml))(?:(?:, |; )\1(?![\w./-]))+")
MERGE = re.compile(r"catalogue %s(?:, %s)*(?:[ \t]*(?:,|;|/|\band\b)[ \t]*catalogue %s(?:, %s)*)+" % (CID, CID, CID, CID))


# Labels of rules that are no failure: they point at the shipped document that states the rule (the
# catalogue holds failures; a launch-line or sizing rule cited as one would send the reader astray).
DOC_REFS = {
    "A.6": "docs/health.md", "A.7": "docs/watchdog.md",
    "B.1": "docs/lanes.md", "B.2": "docs/lanes.md", "B.3": "docs/lanes.md", "B.4": "docs/lanes.md",
    "B.5": "docs/lanes.md",
    "C": "docs/node-prep.md", "C.1": "docs/node-prep.md", "C.5": "docs/weights.md", "C.6": "docs/rdma.md",
    "D.2": "docs/tp-padding.md", "D.3": "docs/tp-padding.md", "D.4": "docs/tp-padding.md", "D.5": "docs/tp-padding.md",
    "E": "docs/memory-plan.md", "E.1": "docs/memory-plan.md", "E.2": "docs/memory-plan.md",
    "E.3": "docs/memory-plan.md",
    "F.1": "docs/health.md", "F.2": "docs/health.md", "F.4": "docs/health.md", "F.5": "docs/health.md",
    "F.6": "docs/weights.md", "G#18": "docs/weights.md", "G#19": "docs/weights.md", "G#21": "docs/weights.md",
    "G#26": "docs/health.md",
    "G": "docs/catalogue.md",
    "H": "roles/vllm_bench/README.md", "H.1": "roles/vllm_bench/README.md", "H.2": "roles/vllm_bench/README.md",
    "H.3": "roles/vllm_bench/README.md",
    # captured vLLM log lines and /metrics samples: the lines the health gate reads are listed there
    "I.4": "docs/health.md", "I.5": "docs/health.md",
}

# Captured samples (Snn): the shipped capture under tests/fixtures that holds the sample.
SAMPLE_REFS = {
    "S01": "tests/fixtures/rdma/ibdev2netdev/spark-2node-outer-port-f1-up.txt",
    "S02": "tests/fixtures/rdma/ibdev2netdev/spark-3node-ring-all-up.txt",
    "S03": "tests/fixtures/rdma/ibdev2netdev/mellanox-server-mixed-ib-eth.txt",
    "S04": "tests/fixtures/rdma/ip/unconfigured-spark-node-a.ip-br-addr.txt",
    "S05": "tests/fixtures/node/gb10-query-name-memory-total-driver.csv",
    "S06": "tests/fixtures/node/free-h-idle-119gi.txt",
    "S07": "tests/fixtures/health/vllm-logs/startup/gb10-single-node-startup.log",
    "S08": "tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom",
    "S09": "tests/fixtures/model-configs/glm-5.3-flash-config.json",
    "S10": "tests/fixtures/model-configs/tp-padding-reference.yaml",
    "S11": "tests/fixtures/model-configs/dflash2-drafter-config.json",
    "S12": "tests/fixtures/docker/image-inspect-registry-pulled-excerpt.txt",
    "S13": "tests/fixtures/rdma/nccl-logs/spark-2node-dual-rail-healthy.log",
    "S14": "tests/fixtures/rdma/launch-lines/tp3-y3-cluster.env.example",
}


def load_refs():
    spec = importlib.util.spec_from_file_location("dgxspark_catalogue", os.path.join(
        ROOT, "plugins", "module_utils", "catalogue.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    refs = {}
    for e in mod.CATALOGUE:
        for r in e["refs"]:
            refs[r] = e["id"]
    for r, doc in DOC_REFS.items():
        assert r not in refs, "%s is both in catalogue %s and in DOC_REFS" % (r, refs[r])
        refs[r] = doc
    refs.update(SAMPLE_REFS)
    return refs


def cite(ids, rel=None):
    """'catalogue a, b' for entries, then '; docs/x.md' for documents: 'catalogue a, b; docs/lanes.md'.
    A document does not cite itself: in it, the label stood for a public source, so it becomes docs/sources.md
    (dropped beside other citations)."""
    entries = [i for i in ids if "/" not in i]
    docs = [i for i in ids if "/" in i and i != rel]
    out = "; ".join((["catalogue " + ", ".join(entries)] if entries else []) + docs)
    return out or "docs/sources.md"


def expand(label):
    """Old label -> the labels it names: ranges and G#3-4 expand, Gnn without '#' is a gotcha."""
    if re.match(r"^G\s*#?\s*\d+(?:/#?\d+)+$", label):  # "G #16/#22", "G 1/33/35": gotchas
        return ["G#%s" % n for n in re.findall(r"\d+", label)]
    if re.match(r"^G\s+\d+$", label):  # "G 16": a gotcha (G16 without a space is a field case)
        return ["G#%s" % label.split()[1]]
    label = re.sub(r"\s+", "", label).replace("\u2013", "-")
    m = re.match(r"^S(\d\d)-S(\d\d)$", label)
    if m:
        return ["S%02d" % i for i in range(int(m.group(1)), int(m.group(2)) + 1)]
    m = re.match(r"^([A-J])\.([1-9])-(?:[A-J]\.)?([1-9])$", label)
    if m:
        return ["%s.%d" % (m.group(1), i) for i in range(int(m.group(2)), int(m.group(3)) + 1)]
    m = re.match(r"^G#(\d+)-(\d+)$", label)
    if m:
        return ["G#%d" % i for i in range(int(m.group(1)), int(m.group(2)) + 1)]
    if re.match(r"^G\d+$", label) and label not in FIELD_G:
        return ["G#%d" % int(label[1:])]
    if re.match(r"^F\d\d$", label) and label not in FIELD_F:
        return []
    return [label]


def ids_for(labels, refs, missing):
    out = []
    for lab in labels:
        for one in expand(lab):
            if one in refs:
                if refs[one] not in out:
                    out.append(refs[one])
            else:
                missing.add(one)
    return out


def rewrite(text, refs, found, missing, long_lines=None, rel=None):
    """Rewrite line by line; a line the full citation would push past MAX_COLS cites its first entry only
    (and is reported in long_lines when even that is too long: wrap it by hand)."""
    out = []
    for no, line in enumerate(text.split("\n"), 1):
        new = _rewrite(line, refs, found, missing, short=False, rel=rel)
        # Markdown has no column limit (its tables are one line a row): only code and YAML are shortened
        if len(new) > MAX_COLS and len(new) > len(line) and not (rel or "").endswith(".md"):
            new = _rewrite(line, refs, [], set(), short=True, rel=rel)
            if len(new) > MAX_COLS and long_lines is not None:
                long_lines.append(no)
        out.append(new)
    return "\n".join(out)


def _rewrite(text, refs, found, missing, short, rel=None):
    def run_sub(m):
        labels = ONE.findall(m.group(1))
        ids = ids_for(labels, refs, missing)
        if not ids:
            return m.group(0)
        new = cite(ids[:1] if short else ids, rel)
        found.append((m.group(0), new))
        return new

    text = RUN.sub(run_sub, text)

    def bare_sub(m):
        lab = m.group(1) or m.group(2)
        if re.match(r"^F\d\d$", lab) and lab not in FIELD_F:
            return lab
        ids = ids_for([lab], refs, missing)
        if not ids:
            return lab
        new = cite(ids, rel)
        found.append((lab, new))
        return new

    text = BARE.sub(bare_sub, text)

    # neighbouring citations merge: "catalogue a, catalogue b" -> "catalogue a, b" (ids once each)
    def merge_sub(m):
        ids = []
        for i in re.findall(r"[a-z0-9_]+", m.group(0).replace("catalogue", " ")):
            if i not in ids and i != "and":
                ids.append(i)
        return "catalogue " + ", ".join(ids)

    text = MERGE.sub(merge_sub, text)
    # "a/b" between two citations reads as one path: "catalogue x/docs/y.md" -> "catalogue x, docs/y.md";
    # then a document cited twice in a row once
    text = SLASH.sub(r"\1, ", text)
    text = TWICE.sub(r"\1", text)

    def left_sub(m):
        new = "the failure catalogue (docs/catalogue.md)"
        found.append((m.group(0), new))
        return new

    return LEFT.sub(left_sub, text)


def files(paths):
    for p in paths:
        full = os.path.join(ROOT, p)
        if os.path.isfile(full):
            yield p
            continue
        for root, dirs, names in os.walk(full):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(root, n), ROOT)
                # a symlink (roles/vllm_bench/files/*.py) is its target, rewritten (or skipped) there
                if os.path.islink(os.path.join(root, n)):
                    continue
                if n.endswith(EXTS) and not any(rel == s or rel.startswith(s + os.sep) for s in SKIP):
                    yield rel


def main(argv):
    check = "--check" in argv
    listing = "--list" in argv
    paths = [a for a in argv if not a.startswith("--")] or DEFAULT
    refs = load_refs()
    missing = set()
    total_lines = 0
    changed = []
    for rel in files(paths):
        full = os.path.join(ROOT, rel)
        try:
            with open(full, encoding="utf-8") as f:
                old = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        found, long_lines = [], []
        new = rewrite(old, refs, found, missing, long_lines, rel)
        for no in long_lines:
            print("%s:%d: longer than %d columns after the rewrite; wrap it by hand" % (rel, no, MAX_COLS))
        if new != old:
            total_lines += sum(1 for a, b in zip(old.splitlines(), new.splitlines()) if a != b)
            changed.append(rel)
            if listing:
                for a, b in found:
                    print("%s: %r -> %r" % (rel, a, b))
            if not check:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(new)
    print("%d lines in %d files %s" % (total_lines, len(changed), "to rewrite" if check else "rewritten"))
    if missing:
        print("labels with no catalogue entry (left as they were): %s" % ", ".join(sorted(missing)))
    # a label no entry or document claims is left as it was: --check fails on it too (add it to an entry's refs,
    # to DOC_REFS or to SAMPLE_REFS)
    return 1 if (check and (changed or missing)) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
