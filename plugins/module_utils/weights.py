# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Checkpoint manifest, fetch arguments, chat-template and quantization checks (pure Python).

Used by the modules ``weights_manifest``, ``weights_fetch`` and ``checkpoint_guard`` on the
target node; stdlib only. Rules: docs/weights.md (sharing, root squash, fetch, templates, the checkpoint
guard and its table); catalogue weights_mismatch (a shard differs from the manifest), no_chat_template (no chat
template) and file_not_found (an export that does not cross a bind mount).

Manifest (format 1), one document for the checkpoint and the optional drafter::

    {"format": 1,
     "artifacts": {
       "checkpoint": {"root": "/var/tmp/models/x", "repo_id": "...", "revision": "<40 hex>",
                      "shards": ["model-00001-of-00002.safetensors", ...],
                      "files": {"<relpath>": {"size": <bytes>, "sha256": "<hex>" | null}}},
       "drafter": {... same ...} | absent}}

Sizes are bytes. sha256 is recorded for every file that is not a weight file (config,
tokenizer, templates, index, ...) and, for the drafter, for every file (catalogue weights_mismatch: a 2.2 GB drafter
is cheap to hash, and a wrong drafter gives wrong answers without an error).

Padding rule (shared with tp_pad and drafter_pad): those roles rewrite files on a node after
the copy (``config.json`` for TP3, the drafter's weights) and keep the released file once as
``<name>.orig``. The manifest always describes the released (pristine) bytes: for a file
``X``, ``X.orig`` when it exists, else ``X``. Verification makes the same choice on each node,
so a padded node verifies and nothing fights the padding; ``*.orig`` files are never listed.
A repair of ``X`` removes the node's ``X.orig`` and fetches the owner's ``X`` and ``X.orig``
(when the owner has one), so the padding roles find a consistent pair afterwards.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import re
import stat

from ansible_collections.dgxspark.vllm.plugins.module_utils.escape import exports_path

MANIFEST_FORMAT = 1
CONFIG = "config.json"
ORIG_SUFFIX = ".orig"
CONFIG_ORIG = CONFIG + ORIG_SUFFIX
INDEX = "model.safetensors.index.json"
CHAT_TEMPLATE = "chat_template.jinja"
CHAT_TEMPLATE_MM = "chat_template_mm.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"

# Weight payloads: listed with their size only (hashing 190 GiB on every node and every run
# would cost minutes; the index + sizes catch truncation, catalogue file_not_found).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")

# catalogue weights_mismatch: Y3's fetch-weights.sh allow list; *.jinja is what weight-only downloaders skip (catalogue no_chat_template).
DEFAULT_ALLOW_PATTERNS = ["*.safetensors", "*.json", "*.jinja", "*.txt", "*.model", "*.py", "*.tiktoken"]

FILE_MODE = 0o644
DIR_MODE = 0o755

REVISION_RE = re.compile(r"^[0-9a-f]{40}$")

# Lane quantization vocabulary -> checkpoint family (docs/lanes.md).
LANE_QUANT_FAMILIES = {
    "nvfp4": "nvfp4",
    "fp8": "fp8",
    "mxfp8": "mxfp8",
    "none": "none",
    "bf16": "none",
    "bfloat16": "none",
    "float32": "none",
    # A lane that names the format also names the family: every spark lane serves NVFP4.
    "modelopt": "nvfp4",
    "compressed-tensors": "nvfp4",
}
# Lane values that name the checkpoint's format. Only "modelopt" lets a ModelOpt build through without the
# operator's model_weights_allow_modelopt (ModelOpt NVFP4 builds of GLM-5.3-Flash corrupt tokens, catalogue
# token_corruption); the format is read from the checkpoint's own files, never from its repo name.
LANE_QUANT_FORMATS = ("modelopt", "compressed-tensors")


class WeightsError(Exception):
    """A refusal with a message that names the item and the fix."""


# --------------------------------------------------------------------------- revision / fetch

def check_revision(repo_id, revision, allow_branch=False):
    """Return the revision if it is a pinned commit; raise otherwise (catalogue weights_mismatch: pin 40-hex)."""
    if not repo_id or "/" not in repo_id:
        raise WeightsError("checkpoint.repo_id %r is not an owner/name repository id" % (repo_id,))
    if revision is None or revision == "":
        if allow_branch:
            return "main"
        raise WeightsError(
            "checkpoint %s: no revision pinned; set checkpoint.revision to the 40-hex commit id "
            "(catalogue weights_mismatch: N3 pins commits, the tonyd2wild READMEs pin nothing)" % repo_id)
    if REVISION_RE.match(revision):
        return revision
    if allow_branch:
        return revision
    raise WeightsError(
        "checkpoint %s: revision %r is a branch or tag, not a 40-hex commit id; a branch moves "
        "under a running fleet (N3 saw a newer drafter revision give a repeatable wrong answer, "
        "catalogue weights_mismatch). Pin the commit id, or set checkpoint.allow_branch: true"
        % (repo_id, revision))


def snapshot_kwargs(repo_id, revision, local_dir, allow_patterns=None, token=None, max_workers=8,
                    allow_branch=False):
    """Keyword arguments for huggingface_hub.snapshot_download (resumable into local_dir)."""
    patterns = list(allow_patterns if allow_patterns is not None else DEFAULT_ALLOW_PATTERNS)
    if "*.jinja" not in patterns:
        # catalogue no_chat_template: without it chat requests fail while /v1/completions works.
        patterns.append("*.jinja")
    kwargs = {
        "repo_id": repo_id,
        "revision": check_revision(repo_id, revision, allow_branch),
        "local_dir": local_dir,
        "allow_patterns": patterns,
        "max_workers": int(max_workers),
    }
    if token:
        kwargs["token"] = token
    return kwargs


def fetch_marker(repo_id, revision):
    return {"repo_id": repo_id, "revision": revision}


def is_complete(root, repo_id, revision, marker_name=".dgxspark-fetch.json"):
    """True when root holds a finished fetch of repo_id@revision and every indexed shard exists."""
    marker = os.path.join(root, marker_name)
    try:
        with open(marker) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError):
        return False
    if data != fetch_marker(repo_id, revision):
        return False
    if not os.path.isfile(os.path.join(root, CONFIG)):
        return False
    index = os.path.join(root, INDEX)
    if os.path.exists(index):
        try:
            shards = index_shards(index)
        except WeightsError:
            return False
        for shard in shards:
            path = os.path.join(root, shard)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                return False
    return True


# --------------------------------------------------------------------------- the hub's own sha256

def _field(obj, *names):
    for n in names:
        if isinstance(obj, dict):
            if obj.get(n) is not None:
                return obj[n]
        elif getattr(obj, n, None) is not None:
            return getattr(obj, n)
    return None


def hub_lfs_files(entries):
    """{path: {sha256, size}} for the LFS files among hub metadata entries.

    Takes what huggingface_hub returns - ModelInfo.siblings (RepoSibling: rfilename, lfs.sha256) with
    files_metadata=True, or get_paths_info's RepoFile (path, lfs.sha256) - and the raw API JSON behind them
    (/api/models/<repo>/revision/<rev>?blobs=true: siblings[].lfs.sha256; paths-info/tree: lfs.oid).
    Files kept in git (config, tokenizer) have no LFS record and are not listed.
    """
    out = {}
    for e in entries or []:
        lfs = _field(e, "lfs")
        if not lfs:
            continue
        name = _field(e, "rfilename", "path")
        sha = _field(lfs, "sha256", "oid")
        size = _field(lfs, "size")
        if not name or not sha:
            continue
        out[name] = {"sha256": str(sha).lower(), "size": int(size) if size is not None else None}
    return out


def hub_sha256_problems(hub_files, local, node, repo_id, revision):
    """The owner's copy against the hub's sha256 of each LFS file at the pinned revision.

    hub_files: hub_lfs_files(...); local: {path: {sha256, size}}, or None for a file the owner lacks
    (a file outside the allow patterns is simply not in `local`). Returns problems shaped like
    verify_artifact's, with a fix; empty when every LFS file the owner holds is the hub's bytes.
    """
    problems = []
    where = "%s@%s" % (repo_id, revision)
    for rel in sorted(hub_files):
        if rel not in local:
            continue
        want, got = hub_files[rel], local[rel]
        if got is None:
            problems.append(_problem(node, "checkpoint", rel, "present", "file", "missing",
                                     "run model_weights again: the fetch resumes and downloads %s of %s" % (rel, where)))
        elif want.get("size") is not None and got.get("size") != want["size"]:
            problems.append(_problem(node, "checkpoint", rel, "size", want["size"], got.get("size"),
                                     "the owner's copy is not the hub's file of %s: delete it and run model_weights "
                                     "again (the fetch resumes); no rank receives it meanwhile" % where))
        elif got.get("sha256") != want["sha256"]:
            problems.append(_problem(node, "checkpoint", rel, "sha256", want["sha256"], got.get("sha256"),
                                     "the owner's copy is not the hub's file of %s: delete it and run model_weights "
                                     "again (the fetch resumes); no rank receives it meanwhile" % where))
    return problems


# --------------------------------------------------------------------------- full verification

def full_hash_problems(owner_hashes, node_hashes, node, owner):
    """Opt-in full verification: every file's sha256 on a node against the owner's (both hashed in the same
    run). owner_hashes / node_hashes: {"<artifact>/<file>": sha256 or None (absent)}. Returns problems shaped like
    verify_artifact's, one per file whose bytes differ or that is missing on either side."""
    problems = []
    for key in sorted(owner_hashes):
        artifact, _sep, rel = key.partition("/")
        want, got = owner_hashes[key], node_hashes.get(key)
        if want is None:
            problems.append(_problem(owner, artifact, rel, "present", "file", "missing",
                                     "the owner lost it since its manifest was written: run model_weights again"))
        elif got is None:
            problems.append(_problem(node, artifact, rel, "present", "file", "missing", "copy it from the owner "
                                     "(run model_weights again)"))
        elif got != want:
            problems.append(_problem(node, artifact, rel, "sha256", want, got,
                                     "its size matches the owner's %s but its bytes do not: delete it on %s and run "
                                     "model_weights again (the copy takes it from the owner)" % (owner, node)))
    return problems


# --------------------------------------------------------------------------- manifest

def _is_weight(relpath):
    name = os.path.basename(relpath)
    return any(fnmatch.fnmatch(name, p) for p in WEIGHT_PATTERNS)


def sha256_file(path, bufsize=4 * 1024 * 1024):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(bufsize)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def index_shards(index_path):
    """Sorted shard names from model.safetensors.index.json (its weight_map values)."""
    try:
        with open(index_path) as f:
            data = json.load(f)
        weight_map = data["weight_map"]
        return sorted(set(weight_map.values()))
    except (IOError, OSError) as e:
        raise WeightsError("%s: cannot read (%s)" % (index_path, e))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise WeightsError("%s: not a safetensors index (no weight_map object)" % index_path)


def walk_tree(root):
    """(files, dirs) relative to root; hidden entries (.cache, markers) are skipped."""
    files, dirs = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            dirs.append(os.path.normpath(os.path.join(rel, d)))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            if name.endswith(ORIG_SUFFIX):
                name = name[:-len(ORIG_SUFFIX)]
            files.append(os.path.normpath(os.path.join(rel, name)))
    return sorted(set(files)), dirs


def pristine(root, rel):
    """The released copy of rel on this node: rel.orig when a padding role kept one, else rel."""
    if os.path.isfile(os.path.join(root, rel + ORIG_SUFFIX)):
        return rel + ORIG_SUFFIX
    return rel


def build_artifact(root, hash_all=False, repo_id=None, revision=None, require_index=True):
    """Manifest entry for one directory (the owner's copy)."""
    if not os.path.isdir(root):
        raise WeightsError("%s: directory missing; fetch the checkpoint on the owner first "
                           "(model_weights_source hub) or place it there (preplaced)" % root)
    files, _dirs = walk_tree(root)
    if CONFIG not in files:
        raise WeightsError("%s: no config.json; the directory is not a Hugging Face checkpoint" % root)
    shards = []
    index = os.path.join(root, INDEX)
    if os.path.exists(index):
        shards = index_shards(index)
        missing = [s for s in shards if not os.path.isfile(os.path.join(root, pristine(root, s)))]
        if missing:
            raise WeightsError("%s: %d shard(s) named by %s are missing on the owner, first %s; "
                               "re-run the fetch (it resumes)" % (root, len(missing), INDEX, missing[0]))
    elif require_index and not [f for f in files if f.endswith(".safetensors")]:
        raise WeightsError("%s: neither %s nor a *.safetensors file" % (root, INDEX))
    entries = {}
    for rel in files:
        path = os.path.join(root, pristine(root, rel))
        size = os.path.getsize(path)
        digest = None
        if hash_all or not _is_weight(rel):
            digest = sha256_file(path)
        entries[rel] = {"size": size, "sha256": digest}
    art = {"root": root, "shards": shards, "files": entries}
    if repo_id:
        art["repo_id"] = repo_id
    if revision:
        art["revision"] = revision
    return art


def build_manifest(artifacts):
    """artifacts: dict name -> dict(root, hash_all, repo_id, revision)."""
    out = {"format": MANIFEST_FORMAT, "artifacts": {}}
    for name in sorted(artifacts):
        a = artifacts[name]
        out["artifacts"][name] = build_artifact(
            a["root"], hash_all=a.get("hash_all", False), repo_id=a.get("repo_id"),
            revision=a.get("revision"), require_index=a.get("require_index", True))
    return out


def canonical(manifest):
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"))


def manifest_sha256(manifest):
    return hashlib.sha256(canonical(manifest).encode("utf-8")).hexdigest()


def artifact_sha256s(manifest):
    """{artifact: sha256 of its canonical manifest entry} (checkpoint, drafter): one value per directory for
    the report, equal on every rank that verified against the same owner manifest."""
    return dict((name, manifest_sha256(art)) for name, art in sorted((manifest.get("artifacts") or {}).items()))


def _problem(node, artifact, rel, item, expected, actual, fix):
    return {"node": node, "artifact": artifact, "file": rel, "item": item,
            "expected": expected, "actual": actual, "fix": fix}


def mode_problems(root, node, artifact, files=None):
    """Files not 0644 / directories not 0755 (docs/weights.md root-squash trap, catalogue file_not_found)."""
    out = []
    if files is None:
        files, dirs = walk_tree(root)
    else:
        _f, dirs = walk_tree(root)
    for rel in ["."] + dirs:
        path = os.path.join(root, rel)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != DIR_MODE:
            out.append(_problem(node, artifact, rel, "mode", "0755", "%04o" % mode,
                                "chmod 0755 the directory; a root-squashed reader needs o+rx"))
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != FILE_MODE:
            out.append(_problem(node, artifact, rel, "mode", "0644", "%04o" % mode,
                                "chmod 0644 the file; a root-squashed reader (NFS) gets FileNotFoundError "
                                "~9.5 min into the load otherwise (docs/weights.md)"))
    return out


def fix_modes(root, files=None):
    """chmod files to 0644 and directories to 0755; return the relative paths changed."""
    changed = []
    for p in mode_problems(root, None, None, files):
        path = os.path.join(root, p["file"])
        os.chmod(path, DIR_MODE if p["expected"] == "0755" else FILE_MODE)
        changed.append(p["file"])
    return changed


def verify_artifact(expected, root, node, artifact):
    """Compare this node's directory with the owner's manifest entry; return problems."""
    problems = []
    if not os.path.isdir(root):
        problems.append(_problem(node, artifact, ".", "present", "directory", "missing",
                                 "copy the checkpoint from the owner (model_weights share mode)"))
        return problems
    want_files = expected.get("files", {})
    for rel in sorted(want_files):
        want = want_files[rel]
        shown = pristine(root, rel)
        path = os.path.join(root, shown)
        if not os.path.isfile(path):
            problems.append(_problem(node, artifact, shown, "present", "file", "missing",
                                     "copy it from the owner"))
            continue
        size = os.path.getsize(path)
        if size != want["size"]:
            problems.append(_problem(node, artifact, shown, "size", want["size"], size,
                                     "copy it again from the owner (truncated or different file)"))
            continue
        if want.get("sha256"):
            digest = sha256_file(path)
            if digest != want["sha256"]:
                problems.append(_problem(node, artifact, shown, "sha256", want["sha256"], digest,
                                         "copy it again from the owner (content differs)"))
    for shard in expected.get("shards", []):
        if shard not in want_files:
            problems.append(_problem(node, artifact, shard, "manifest", "listed", "absent",
                                     "rewrite the owner's manifest"))
    return problems


def verify_manifest(expected, node, roots=None):
    """Verify every artifact of an owner's manifest; roots overrides each artifact's root."""
    if not isinstance(expected, dict) or expected.get("format") != MANIFEST_FORMAT:
        raise WeightsError("owner manifest has an unknown format (expected format %d); rewrite it on the "
                           "owner" % MANIFEST_FORMAT)
    problems = []
    for name in sorted(expected.get("artifacts", {})):
        art = expected["artifacts"][name]
        root = (roots or {}).get(name) or art["root"]
        problems.extend(verify_artifact(art, root, node, name))
    return problems


def transfer_plan(problems, manifest):
    """Per artifact: the files to fetch again from the owner (names without .orig), sorted.

    A missing tree means every file of the manifest. See the padding rule in the module
    docstring for what happens to the node's ``X.orig``.
    """
    plan = {}
    for p in problems:
        if p["item"] in ("mode", "manifest"):
            continue
        files = plan.setdefault(p["artifact"], set())
        if p["file"] == ".":
            files.update(manifest["artifacts"][p["artifact"]]["files"])
        elif p["file"].endswith(ORIG_SUFFIX):
            files.add(p["file"][:-len(ORIG_SUFFIX)])
        else:
            files.add(p["file"])
    return dict((k, sorted(v)) for k, v in plan.items())


def format_problems(problems, limit=10):
    lines = []
    for p in problems[:limit]:
        lines.append("%s: %s %s: %s expected %s, found %s; fix: %s" % (
            p["node"], p["artifact"], p["file"], p["item"], p["expected"], p["actual"], p["fix"]))
    if len(problems) > limit:
        lines.append("... and %d more" % (len(problems) - limit))
    return "; ".join(lines)


# --------------------------------------------------------------------------- chat templates

def vision_on(serve):
    """Why the lane's serve block accepts images (a sentence naming the lane item), or None.

    Vision is on when serve.limit_mm_per_prompt allows at least one image or video, or when
    serve.chat_template names chat_template_mm.jinja (catalogue weights_mismatch; docs/lanes.md).
    """
    serve = serve or {}
    limits = serve.get("limit_mm_per_prompt") or {}
    if isinstance(limits, dict):
        for kind in sorted(limits):
            value = limits[kind]
            count = value.get("count") if isinstance(value, dict) else value
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                return "serve.limit_mm_per_prompt allows %s: %d" % (kind, count)
    template = serve.get("chat_template") or ""
    if isinstance(template, str) and template.rstrip("/").rsplit("/", 1)[-1] == CHAT_TEMPLATE_MM:
        return "serve.chat_template is %s" % template
    return None


def chat_template_problems(root, require_mm=False, mm_marker=None, why=None):
    """catalogue no_chat_template: a chat template must exist as a file or tokenizer_config key.

    why: the reason the lane accepts images (vision_on), named in the refusal."""
    errors = []
    has_file = os.path.isfile(os.path.join(root, CHAT_TEMPLATE))
    has_key = False
    tc = os.path.join(root, TOKENIZER_CONFIG)
    if os.path.isfile(tc):
        try:
            with open(tc) as f:
                has_key = bool(json.load(f).get("chat_template"))
        except (ValueError, AttributeError):
            errors.append("%s: %s is not a JSON object" % (root, TOKENIZER_CONFIG))
    if not has_file and not has_key:
        errors.append(
            "%s: no chat template: %s is missing and %s has no chat_template key. Chat requests would "
            "fail with 'As of transformers v4.44, default chat template is no longer allowed' while "
            "/v1/completions works (catalogue no_chat_template). Fix: fetch with allow pattern *.jinja, or set "
            "model_weights_chat_template_src to a template file to copy into the weights directory"
            % (root, CHAT_TEMPLATE, TOKENIZER_CONFIG))
    if require_mm:
        mm = os.path.join(root, CHAT_TEMPLATE_MM)
        if not os.path.isfile(mm):
            errors.append(
                "%s: %s missing; this lane accepts images%s and image requests return HTTP 500 without it "
                "(catalogue no_chat_template). Fix: set model_weights_chat_template_mm_src to the vision "
                "template so it is copied into the weights directory on the owner%s"
                % (root, CHAT_TEMPLATE_MM, " (%s)" % why if why else "",
                   ", or turn vision off in the lane (serve.limit_mm_per_prompt image: 0)" if why else ""))
        elif mm_marker:
            with open(mm) as f:
                if mm_marker not in f.read():
                    errors.append("%s: %s lacks %r: a stale template from a derivative checkpoint (operations "
                                  "catalogue weights_mismatch, L3). Fix: use the upstream template" % (root, CHAT_TEMPLATE_MM, mm_marker))
    return errors


# --------------------------------------------------------------------------- checkpoint guard

def load_json(path):
    with open(path) as f:
        return json.load(f)


def _text_config(config):
    tc = config.get("text_config")
    return tc if isinstance(tc, dict) else config


def quantization_config(config, hf_quant=None):
    """The quantization block: config.json (top level or text_config), else hf_quant_config.json."""
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        qc = _text_config(config).get("quantization_config")
    if isinstance(qc, dict):
        return qc, "config.json"
    if isinstance(hf_quant, dict):
        # ModelOpt's own file: {"producer": {"name": "modelopt"}, "quantization": {...}}
        q = dict(hf_quant.get("quantization") or {})
        q.setdefault("quant_method", (hf_quant.get("producer") or {}).get("name", "modelopt"))
        return q, HF_QUANT_CONFIG
    return None, None


def _ct_family(qc):
    """Family of a compressed-tensors config from its format or config_groups."""
    fmt = str(qc.get("format") or "").lower()
    if "nvfp4" in fmt:
        return "nvfp4", fmt
    if "float-quantized" in fmt or "fp8" in fmt:
        return "fp8", fmt
    for group in (qc.get("config_groups") or {}).values():
        w = (group or {}).get("weights") or {}
        if w.get("type") == "float" and w.get("num_bits") == 4:
            return "nvfp4", fmt or "float4"
        if w.get("type") == "float" and w.get("num_bits") == 8:
            return "fp8", fmt or "float8"
        if w.get("type") == "int":
            return "int%s" % w.get("num_bits"), fmt or "int"
    return "unknown", fmt


def classify(config, hf_quant=None):
    """Return {method, format, family, scheme, source} for a checkpoint's quantization."""
    qc, source = quantization_config(config, hf_quant)
    if qc is None:
        return {"method": None, "format": "none", "family": "none", "scheme": None, "source": None}
    method = str(qc.get("quant_method") or "").lower()
    if method == "compressed-tensors":
        family, scheme = _ct_family(qc)
        return {"method": method, "format": "compressed-tensors", "family": family, "scheme": scheme,
                "source": source}
    if method == "modelopt":
        algo = str(qc.get("quant_algo") or "")
        up = algo.upper()
        if "NVFP4" in up or up == "FP4":
            family = "nvfp4"
        elif "MXFP8" in up:
            family = "mxfp8"
        elif "FP8" in up:
            family = "fp8"
        elif up in ("MIXED_PRECISION",):
            family = "mixed"
        else:
            family = "unknown"
        return {"method": method, "format": "modelopt", "family": family, "scheme": algo, "source": source}
    if method in ("fp8", "mxfp8"):
        return {"method": method, "format": method, "family": method, "scheme": qc.get("fmt"), "source": source}
    return {"method": method, "format": method or "unknown", "family": "unknown", "scheme": None,
            "source": source}


def lane_family(value):
    if value is None:
        return None
    key = str(value).strip().lower()
    if key not in LANE_QUANT_FAMILIES:
        raise WeightsError("checkpoint.quantization %r is not one of %s (lane value understood by the "
                           "checkpoint guard)" % (value, ", ".join(sorted(LANE_QUANT_FAMILIES))))
    return LANE_QUANT_FAMILIES[key]


def num_layers(config):
    n = _text_config(config).get("num_hidden_layers")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise WeightsError("config.json: text_config.num_hidden_layers missing or not a positive integer")
    return n


def attention_not_excluded(config, qc, prefix="model.language_model.layers"):
    """Layers whose self_attn block no ignore pattern covers (docs/weights.md partial-attention ModelOpt)."""
    patterns = qc.get("ignore") or qc.get("exclude_modules") or []
    out = []
    for i in range(num_layers(config)):
        name = "%s.%d.self_attn.__whole_block__" % (prefix, i)
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            out.append(i)
    return out


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _layer_keys(weight_map, layer):
    out = []
    for key in weight_map:
        m = _LAYER_RE.search(key)
        if m and int(m.group(1)) == layer:
            out.append(key)
    return out


def _has_scale(keys):
    return any("scale" in k.rsplit(".", 1)[-1] for k in keys)


def mtp_uncovered(config, weight_map):
    """True when layer n (the MTP head) has experts and its scale tensors differ from layer n-1 (docs/weights.md)."""
    n = num_layers(config)
    last = _layer_keys(weight_map, n)
    if not any(".experts." in k for k in last):
        return False
    prev = _layer_keys(weight_map, n - 1)
    return _has_scale(last) != _has_scale(prev)


def lane_format(value):
    """The format a lane's checkpoint.quantization names (modelopt, compressed-tensors), else None."""
    key = str(value).strip().lower() if value is not None else None
    return key if key in LANE_QUANT_FORMATS else None


def guard(config, hf_quant=None, weight_map=None, lane_quantization=None, spec_method=None,
          allow_modelopt_attention=False, where="checkpoint", allow_modelopt=False):
    """The checkpoint guard. Returns (verdict dict, refusals list, warnings list).

    A ModelOpt checkpoint passes only when the lane says checkpoint.quantization: modelopt or the operator
    sets allow_modelopt (model_weights_allow_modelopt); a lane that says compressed-tensors refuses any other
    format. The format comes from config.json / hf_quant_config.json (classify), not from the repo name.
    """
    verdict = classify(config, hf_quant)
    refusals, warnings = [], []
    qc, _src = quantization_config(config, hf_quant)
    want = lane_family(lane_quantization)
    want_format = lane_format(lane_quantization)
    if verdict["format"] == "modelopt" and want_format != "modelopt" and not allow_modelopt:
        refusals.append(
            "%s: a ModelOpt build (quant_method modelopt, quant_algo %s, read from %s) but the lane says "
            "checkpoint.quantization %s; ModelOpt NVFP4 builds of GLM-5.3-Flash emit corrupted tokens (U+FFFD "
            "4 / 9 / 8 on a Korean probe where compressed-tensors gave 0 / 0 / 0, catalogue token_corruption). "
            "Point the lane at a compressed-tensors checkpoint (RedHatAI/GLM-5.3-Flash-NVFP4), or serve this one "
            "knowingly: checkpoint.quantization: modelopt in the lane or model_weights_allow_modelopt: true"
            % (where, verdict["scheme"], verdict["source"], lane_quantization if lane_quantization else "(unset)"))
    elif want_format == "compressed-tensors" and verdict["format"] != "compressed-tensors":
        refusals.append(
            "%s: the lane says checkpoint.quantization compressed-tensors but this checkpoint is %s (from %s). "
            "Fetch the compressed-tensors build (RedHatAI/GLM-5.3-Flash-NVFP4) or correct the lane"
            % (where, verdict["format"], verdict["source"] or "no quantization_config"))
    if want is not None and verdict["family"] != want:
        refusals.append(
            "%s: the lane expects a %s checkpoint but this one is %s (%s, from %s). Point the lane at a %s "
            "checkpoint (docs/lanes.md: RedHatAI/GLM-5.3-Flash-NVFP4 compressed-tensors, or "
            "nvidia/GLM-5.3-Flash-NVFP4 ModelOpt) or change checkpoint.quantization"
            % (where, want, verdict["family"], verdict["scheme"] or verdict["format"],
               verdict["source"] or "no quantization_config", want))
    if verdict["format"] == "modelopt":
        uncovered = attention_not_excluded(config, qc)
        verdict["attention_quantized_layers"] = uncovered
        if uncovered and not allow_modelopt_attention:
            refusals.append(
                "%s: ModelOpt build quantizes self-attention in %d of %d layers (first: layer %d is not in "
                "its ignore/exclude_modules list); such partial-attention ModelOpt builds corrupt tokens "
                "(vLLM #54150, catalogue image_cuda_newer_than_driver; docs/weights.md). Use RedHatAI/GLM-5.3-Flash-NVFP4 (compressed-"
                "tensors) or nvidia/GLM-5.3-Flash-NVFP4 (attention kept high precision), or set "
                "model_weights_allow_modelopt_attention: true to accept the risk"
                % (where, len(uncovered), num_layers(config), uncovered[0]))
        if weight_map is not None and str(verdict["scheme"]).upper() == "NVFP4" and \
                not any(k.endswith("input_scale") for k in weight_map):
            refusals.append(
                "%s: quant_algo NVFP4 (W4A4) but the index has no input_scale tensor; the output garbles "
                "(docs/weights.md, the Blackfrost mislabel). Set quantization_config.quant_algo to W4A16_NVFP4"
                % where)
    if spec_method == "mtp":
        if weight_map is None:
            warnings.append("%s: %s unreadable; MTP coverage not checked (docs/weights.md skips it too)"
                            % (where, INDEX))
        elif verdict["format"] != "compressed-tensors" and mtp_uncovered(config, weight_map):
            refusals.append(
                "%s: MTP cannot be served on sm121 with this checkpoint: layer %d (the MTP head) is not "
                "covered by its quantization (its scale tensors differ from layer %d); use a DFlash2 lane "
                "(docs/weights.md)" % (where, num_layers(config), num_layers(config) - 1))
    return verdict, refusals, warnings


# --------------------------------------------------------------------------- NFS

NFS_MOUNT_OPTS = "vers=4.2,nconnect=8,rsize=1048576,wsize=1048576,hard"


# The NFS export rule: model_weights' templates/exports.j2 renders it through the filter model_weights_exports_line.
def exports_line(path, clients, crossmnt=False, extra=None):
    """One /etc/exports line: read-only to the fabric clients only (docs/weights.md, catalogue file_not_found)."""
    if not clients:
        raise WeightsError("NFS export of %s: no client network; set model_weights_nfs_clients to the "
                           "fabric CIDR (e.g. 10.10.0.0/24)" % path)
    opts = ["ro", "sync", "no_subtree_check"]
    if crossmnt:
        opts.append("crossmnt")
    opts.extend(extra or [])
    # exports(5) escapes: a path with a space or '#' stays one field (module_utils/escape.py)
    return "%s %s" % (exports_path(path), " ".join("%s(%s)" % (c, ",".join(opts)) for c in clients))


def parse_exports(text):
    """Parse /etc/exports text into [{path, client, options}] (comments and blanks skipped)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        for spec in parts[1:]:
            m = re.match(r"^([^()]*)\((.*)\)$", spec)
            client, opts = (m.group(1), m.group(2).split(",")) if m else (spec, [])
            out.append({"path": parts[0], "client": client, "options": opts})
    return out


def needs_crossmnt(mountpoints, path):
    """True when a mount point lies strictly below path (catalogue file_not_found: the export would not cross it)."""
    base = os.path.normpath(path)
    for mp in mountpoints:
        mp = os.path.normpath(mp)
        if mp != base and mp.startswith(base + os.sep):
            return True
    return False
