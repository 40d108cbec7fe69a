# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Free disk space before something large lands on a node (catalogue disk_full).

One rule for the engine image (pull, ``docker save``, ``docker load``, a registry push) and for
checkpoint copies: every filesystem that will receive bytes must have at least the bytes it
receives plus a margin free, summed over everything that lands on the same filesystem (the
docker data-root and the model tree are often one disk). Checked before the transfer starts,
never after a half-written image or shard.

Units: bytes in, GiB (1024**3) in messages, two decimals. Standard library only.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

BYTES_PER_GIB = 1024 ** 3


def gib(nbytes):
    return "%.2f" % (float(nbytes) / BYTES_PER_GIB)


def probe_path(path):
    """Free space for ``path`` -> {path, probe, device, free_bytes}.

    A path that does not exist yet is measured at its nearest existing parent (``probe``);
    ``device`` (st_dev) tells which paths share a filesystem. free_bytes counts what an
    unprivileged writer may use (f_bavail), as docker and rsync see it.
    """
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return {"path": path, "probe": probe, "device": os.stat(probe).st_dev,
            "free_bytes": st.f_bavail * st.f_frsize}


def shortfalls(host, needs, probes, margin_bytes, fix):
    """Messages for every filesystem of ``host`` that cannot take what lands on it.

    needs: [{path, item, bytes}] (what is written where); probes: {path: probe_path() result}.
    Needs on one device are summed and the margin is counted once per filesystem. Each message
    names the host, the path(s), what lands there, free and needed GiB, and ``fix``.
    """
    by_dev = {}
    for need in needs:
        p = probes.get(need["path"])
        if p is None:
            raise ValueError("%s: no free-space probe for %s" % (host, need["path"]))
        entry = by_dev.setdefault(p["device"], {"probe": p["probe"], "free": int(p["free_bytes"]), "needs": []})
        entry["needs"].append(need)
    out = []
    for dev in sorted(by_dev, key=lambda d: by_dev[d]["probe"]):
        e = by_dev[dev]
        total = sum(int(n["bytes"]) for n in e["needs"]) + int(margin_bytes)
        if e["free"] >= total:
            continue
        paths = sorted(set(n["path"] for n in e["needs"]))
        what = " + ".join("%s %s GiB" % (n["item"], gib(n["bytes"])) for n in e["needs"])
        out.append("%s: %s has %s GiB free (filesystem probed at %s), needs %s GiB (%s + margin %s GiB; "
                   "catalogue disk_full). Fix: %s"
                   % (host, ", ".join(paths), gib(e["free"]), e["probe"], gib(total), what, gib(margin_bytes), fix))
    return out


IMAGE_FIX = ("free space on that filesystem (docker image prune, docker builder prune, old checkpoints) or move "
             "docker's data-root to a larger disk, then re-run")


def image_space_problems(probes, head, targets, mode, reference, margin_gib, registry_dir=None, lane_size_gib=None):
    """Free-space refusals before the engine image moves (catalogue disk_full), as [{host, msg}].

    probes: {host: image_fingerprint result} with ``size_bytes`` (image size where present) and
    ``space`` ({path: probe_path()}, the docker data-root under ``data_root``). The image's size
    comes from any rank that holds it (the head first), else from the lane's image.size_gib
    (``lane_size_gib``, a first pull from a registry); with neither nothing is judged (preflight's
    requirements.disk_gib covers that case). What lands where:
      - every receiving rank (``targets``; every rank without the image in mode pull): the image
        in its docker data-root;
      - the head in mode stream: ``docker save`` stages the whole image under the data-root's
        tmp with the classic exporter (catalogue disk_full), so once more there;
      - the head in mode registry: the pushed layers in ``registry_dir``.
    """
    size = None
    for host in [head] + sorted(h for h in probes if h != head):
        p = probes.get(host) or {}
        if p.get("present") and p.get("size_bytes"):
            size = int(p["size_bytes"])
            break
    if size is None and lane_size_gib not in (None, ""):
        size = int(float(lane_size_gib) * BYTES_PER_GIB)
    if size is None:
        return []
    margin = int(float(margin_gib) * BYTES_PER_GIB)
    item = "image %s" % reference
    receivers = list(targets)
    if mode == "pull":
        receivers = sorted(h for h in probes if not (probes[h] or {}).get("present"))
    plan = dict((h, []) for h in receivers)
    if mode == "stream" and targets:
        plan.setdefault(head, [])
    if mode == "registry" and targets and registry_dir:
        plan.setdefault(head, [])
    out = []
    for host in sorted(plan):
        p = probes.get(host) or {}
        space = p.get("space") or {}
        root = p.get("data_root")
        needs = []
        if host in receivers and root:
            needs.append({"path": root, "item": item + " (docker load/pull into the data-root)", "bytes": size})
        if host == head and mode == "stream" and root:
            needs.append({"path": root, "item": item + " (docker save staging)", "bytes": size})
        if host == head and mode == "registry" and registry_dir:
            needs.append({"path": registry_dir, "item": item + " (registry storage)", "bytes": size})
        missing = [n["path"] for n in needs if n["path"] not in space]
        if not root or missing:
            out.append({"host": host, "msg": "%s: cannot measure free space for %s at %s (docker info gave no "
                                             "data-root or the path was not probed); refusing to move %s GiB blind. "
                                             "Fix: check that docker runs on %s" % (
                                                 host, item, ", ".join(missing) or "the docker data-root",
                                                 gib(size), host)})
            continue
        for msg in shortfalls(host, needs, space, margin, IMAGE_FIX):
            out.append({"host": host, "msg": msg})
    return out


WEIGHTS_FIX = ("free space on that filesystem or point the lane's checkpoint.host_path (and drafter) at a larger "
               "disk, then re-run")


def weights_space_problems(host, plan, manifest, roots, probes, margin_gib):
    """Free-space refusals before copying checkpoint files to ``host`` (catalogue disk_full).

    plan: {artifact: [file, ...]} (weights.transfer_plan); manifest: the owner's manifest (file
    sizes); roots: {artifact: directory on this node}; probes: {directory: probe_path()}. The
    copy writes each file beside the old one and renames it, so a replaced file needs its full
    size again. Returns messages (empty when it fits or nothing is copied).
    """
    needs = []
    for name in sorted(plan):
        files = (manifest.get("artifacts", {}).get(name) or {}).get("files") or {}
        nbytes = sum(int((files.get(rel) or {}).get("size") or 0) for rel in plan[name])
        if nbytes:
            needs.append({"path": roots[name], "item": "%s (%d files)" % (name, len(plan[name])), "bytes": nbytes})
    if not needs:
        return []
    return shortfalls(host, needs, probes, int(float(margin_gib) * BYTES_PER_GIB), WEIGHTS_FIX)
