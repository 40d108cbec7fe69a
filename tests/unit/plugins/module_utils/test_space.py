# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""module_utils/space.py: free disk space before the image or the weights land (catalogue disk_full)."""

import os

from ansible_collections.dgxspark.vllm.plugins.module_utils import space as S
from ansible_collections.dgxspark.vllm.plugins.filter.image import image_space_problems as image_space_filter
from tests.unit import captures as C
from tests.unit.conftest import read_fixture

GIB = 1024 ** 3
REF = "glm53:sm121-v12"


def g16():
    """The catalogue disk_full capture: node-a's docker filesystem (df -h row) and the image size (docker image inspect)."""
    row, size = read_fixture("disk", "g16-node-a-df-docker-image-size.txt").strip().splitlines()
    df = C.parse_df_h_row(row)
    return df, int(size)


def probe(path, free_bytes, device=1, at=None):
    return {"path": path, "probe": at or path, "device": device, "free_bytes": free_bytes}


def fp(present, free_bytes, size=None, root="/var/lib/docker", extra=None, device=1):
    space = {root: probe(root, free_bytes, device, at=root)}
    space.update(extra or {})
    return {"present": present, "size_bytes": size if present else None, "data_root": root, "space": space}


def test_g16_capture_parses_to_the_stated_figures():
    df, size = g16()
    assert df["avail_bytes"] == 22 * GIB and df["mount"] == "/" and df["use_pct"] == 99
    assert size == 31456789012
    assert S.gib(size) == "29.30"


def test_g16_stream_sender_is_refused_with_both_figures():
    """The capture's case: the head would stage the whole image for `docker save` on a 22 GiB filesystem."""
    df, size = g16()
    probes = {"node-a": fp(True, df["avail_bytes"], size), "node-b": fp(False, 3000 * GIB, device=2)}
    out = S.image_space_problems(probes, "node-a", ["node-b"], "stream", REF, 5)
    assert [p["host"] for p in out] == ["node-a"]
    msg = out[0]["msg"]
    # host, path, free, needed (image + margin), what and the fix
    assert msg.startswith("node-a: /var/lib/docker has 22.00 GiB free (filesystem probed at /var/lib/docker), "
                          "needs 34.30 GiB (image glm53:sm121-v12 (docker save staging) 29.30 GiB + margin 5.00 GiB")
    assert "catalogue disk_full" in msg and "docker image prune" in msg


def test_g16_receiver_with_the_same_disk_is_refused_in_registry_and_pull_modes():
    df, size = g16()
    reg = "/var/lib/dgxspark-vllm/image_sync/registry/data"
    probes = {"node-a": fp(True, 3000 * GIB, size, extra={reg: probe(reg, 3000 * GIB)}),
              "node-c": fp(False, df["avail_bytes"], device=3)}
    for mode in ("registry", "pull"):
        out = S.image_space_problems(probes, "node-a", ["node-c"], mode, REF, 5, registry_dir=reg)
        assert [p["host"] for p in out] == ["node-c"], mode
        assert "22.00 GiB free" in out[0]["msg"] and "needs 34.30 GiB" in out[0]["msg"]
        assert "docker load/pull into the data-root" in out[0]["msg"]


def test_registry_storage_on_the_data_root_filesystem_is_summed():
    """Registry storage and a second copy on one filesystem count twice, the margin once."""
    df, size = g16()
    reg = "/var/lib/dgxspark-vllm/image_sync/registry/data"
    head = fp(True, 60 * GIB, size, extra={reg: probe(reg, 60 * GIB, device=1, at="/var/lib")})
    probes = {"node-a": head, "node-b": fp(False, 3000 * GIB, device=2)}
    out = S.image_space_problems(probes, "node-a", ["node-b"], "registry", REF, 5, registry_dir=reg)
    assert out == []  # the head only stores the registry copy: 29.30 + 5 <= 60
    head["space"][reg]["free_bytes"] = 30 * GIB
    head["space"]["/var/lib/docker"]["free_bytes"] = 30 * GIB
    out = S.image_space_problems(probes, "node-a", ["node-b"], "registry", REF, 5, registry_dir=reg)
    assert len(out) == 1 and "needs 34.30 GiB" in out[0]["msg"] and "registry storage" in out[0]["msg"]


def test_enough_space_and_unknown_size_are_not_refused():
    df, size = g16()
    probes = {"node-a": fp(True, 3000 * GIB, size), "node-b": fp(False, 40 * GIB, device=2)}
    assert S.image_space_problems(probes, "node-a", ["node-b"], "stream", REF, 5) == []
    # no rank holds the image (first pull from the internet): its size is unknown here, nothing is judged
    probes = {"node-a": fp(False, 1 * GIB), "node-b": fp(False, 1 * GIB, device=2)}
    assert S.image_space_problems(probes, "node-a", ["node-b"], "pull", REF, 5) == []


def test_receiver_without_a_data_root_is_refused_not_skipped():
    _df, size = g16()
    probes = {"node-a": fp(True, 3000 * GIB, size), "node-b": {"present": False, "data_root": None, "space": {}}}
    out = S.image_space_problems(probes, "node-a", ["node-b"], "stream", REF, 5)
    assert [p["host"] for p in out] == ["node-b"] and "cannot measure free space" in out[0]["msg"]


def test_filter_wraps_the_same_rule():
    df, size = g16()
    probes = {"node-a": fp(True, df["avail_bytes"], size), "node-b": fp(False, 3000 * GIB, device=2)}
    assert image_space_filter(probes, "node-a", ["node-b"], "stream", REF, 5) == \
        S.image_space_problems(probes, "node-a", ["node-b"], "stream", REF, 5)


def test_weights_copy_needs_the_planned_files_on_their_filesystem():
    df, _size = g16()
    ckpt = {"a.safetensors": {"size": 20 * GIB}, "b.safetensors": {"size": 4 * GIB}, "config.json": {"size": 702}}
    manifest = {"artifacts": {"checkpoint": {"files": ckpt},
                              "drafter": {"files": {"model.safetensors": {"size": 2 * GIB}}}}}
    roots = {"checkpoint": "/models/ckpt", "drafter": "/models/drafter"}
    probes = {"/models/ckpt": probe("/models/ckpt", df["avail_bytes"], at="/models"),
              "/models/drafter": probe("/models/drafter", df["avail_bytes"], at="/models")}
    plan = {"checkpoint": ["a.safetensors", "b.safetensors"], "drafter": ["model.safetensors"]}
    out = S.weights_space_problems("node-b", plan, manifest, roots, probes, 5)
    assert out == ["node-b: /models/ckpt, /models/drafter has 22.00 GiB free (filesystem probed at /models), needs "
                   "31.00 GiB (checkpoint (2 files) 24.00 GiB + drafter (1 files) 2.00 GiB + margin 5.00 GiB; "
                   "catalogue disk_full). Fix: " + S.WEIGHTS_FIX]
    assert S.weights_space_problems("node-b", {"checkpoint": ["b.safetensors"]}, manifest, roots, probes, 5) == []
    assert S.weights_space_problems("node-b", {}, manifest, roots, probes, 5) == []


def test_probe_path_measures_the_nearest_existing_parent(tmp_path):
    p = S.probe_path(str(tmp_path / "not" / "yet"))
    assert p["probe"] == str(tmp_path) and p["device"] == os.stat(str(tmp_path)).st_dev
    st = os.statvfs(str(tmp_path))
    assert abs(p["free_bytes"] - st.f_bavail * st.f_frsize) < 64 * 1024 * 1024
