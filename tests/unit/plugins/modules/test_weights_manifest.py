# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""weights_manifest module: owner writes, workers verify; check mode; idempotence."""

import json
import os
import shutil

from ansible_collections.dgxspark.vllm.plugins.module_utils import weights as w
from ansible_collections.dgxspark.vllm.plugins.modules import weights_manifest
from tests.unit.plugins.module_utils.test_weights import make_checkpoint, make_drafter
from tests.unit.plugins.modules.utils import run_module

REV = "09b04e5e74bca08ca8549fc736d4cdd8624bfde3"


def _owner(tmp_path, **kw):
    root = make_checkpoint(str(tmp_path / "owner" / "m"), **kw)
    drafter = make_drafter(str(tmp_path / "owner" / "d"))
    mpath = str(tmp_path / "state" / "manifest.json")
    args = {"path": root, "drafter_path": drafter, "state": "written", "manifest_path": mpath,
            "repo_id": "a/b", "revision": REV, "fix_modes": True, "node": "spark-sim-0"}
    return root, drafter, mpath, args


def _worker(tmp_path, root, drafter):
    wr, wd = str(tmp_path / "worker" / "m"), str(tmp_path / "worker" / "d")
    shutil.copytree(root, wr)
    shutil.copytree(drafter, wd)
    return wr, wd


def test_written_then_idempotent_and_check_mode(tmp_path):
    root, drafter, mpath, args = _owner(tmp_path)
    os.chmod(os.path.join(root, "chat_template.jinja"), 0o600)
    # check mode: reports the change, writes nothing, fixes no mode
    res, failed = run_module(weights_manifest.main, dict(args, _ansible_check_mode=True))
    assert not failed and res["changed"] is True and not os.path.exists(mpath)
    assert res["modes_fixed"] == [os.path.join(root, "chat_template.jinja")]
    assert oct(os.stat(os.path.join(root, "chat_template.jinja")).st_mode & 0o777) == "0o600"
    res, failed = run_module(weights_manifest.main, args)
    assert not failed and res["changed"] is True
    assert oct(os.stat(os.path.join(root, "chat_template.jinja")).st_mode & 0o777) == "0o644"
    with open(mpath) as f:
        on_disk = json.load(f)
    assert on_disk == res["manifest"] and res["sha256"] == w.manifest_sha256(on_disk)
    assert oct(os.stat(mpath).st_mode & 0o777) == "0o644"
    assert on_disk["artifacts"]["checkpoint"]["revision"] == REV
    assert on_disk["artifacts"]["drafter"]["files"]["model.safetensors"]["sha256"]
    again, failed = run_module(weights_manifest.main, args)
    assert not failed and again["changed"] is False and again["sha256"] == res["sha256"]
    assert again["diff"] == {"before": {"sha256": res["sha256"]}, "after": {"sha256": res["sha256"]}}


def test_verified_clean_copy(tmp_path):
    root, drafter, _m, args = _owner(tmp_path)
    owner, _f = run_module(weights_manifest.main, args)
    wr, wd = _worker(tmp_path, root, drafter)
    res, failed = run_module(weights_manifest.main, {"path": wr, "drafter_path": wd, "expected": owner["manifest"],
                                                     "node": "spark-sim-1"})
    assert not failed and res["changed"] is False and res["problems"] == [] and res["plan"] == {}
    assert res["sha256"] == owner["sha256"]
    # the report's per-rank values: one per directory, the worker's equal to the owner's
    assert sorted(res["artifact_sha256"]) == ["checkpoint", "drafter"]
    assert res["artifact_sha256"] == owner["artifact_sha256"] == w.artifact_sha256s(owner["manifest"])


def test_verified_failures_name_node_and_file(tmp_path):
    root, drafter, _m, args = _owner(tmp_path)
    owner, _f = run_module(weights_manifest.main, args)
    wr, wd = _worker(tmp_path, root, drafter)
    shard = os.path.join(wr, "model-00001-of-00002.safetensors")
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    os.remove(os.path.join(wr, "chat_template.jinja"))
    os.chmod(os.path.join(wr, "tokenizer.json"), 0o600)
    with open(os.path.join(wd, "model.safetensors"), "r+b") as f:
        f.seek(20)
        f.write(b"X")  # same size, different drafter bytes
    res, failed = run_module(weights_manifest.main, {"path": wr, "drafter_path": wd, "expected": owner["manifest"],
                                                     "node": "spark-sim-1"})
    assert failed
    got = sorted((p["artifact"], p["file"], p["item"], p["actual"]) for p in res["problems"])
    assert [g[:3] for g in got] == [("checkpoint", "chat_template.jinja", "present"),
                                    ("checkpoint", "model-00001-of-00002.safetensors", "size"),
                                    ("checkpoint", "tokenizer.json", "mode"),
                                    ("drafter", "model.safetensors", "sha256")]
    assert ("checkpoint", "model-00001-of-00002.safetensors", "size", size // 2) in got
    assert res["msg"].startswith("weights differ from the owner's manifest before launch: spark-sim-1: checkpoint "
                                 "chat_template.jinja: present expected file, found missing")
    assert "spark-sim-1: drafter model.safetensors: sha256 expected" in res["msg"]
    assert res["plan"] == {"checkpoint": ["chat_template.jinja", "model-00001-of-00002.safetensors"],
                           "drafter": ["model.safetensors"]}
    assert res["stale_backups"] == []
    # the role's first pass: no failure, the plan drives the copy; fix_modes repairs the 0600 file
    res, failed = run_module(weights_manifest.main, {"path": wr, "drafter_path": wd, "expected": owner["manifest"],
                                                     "node": "spark-sim-1", "fail_on_mismatch": False,
                                                     "fix_modes": True})
    assert not failed and res["changed"] is True
    assert res["modes_fixed"] == [os.path.join(wr, "tokenizer.json")]
    assert [p["item"] for p in res["problems"]] == ["present", "size", "sha256"]


def test_written_owner_incomplete_fails_with_node(tmp_path):
    root, _d, _m, args = _owner(tmp_path)
    os.remove(os.path.join(root, "model-00002-of-00002.safetensors"))
    res, failed = run_module(weights_manifest.main, args)
    assert failed and res["msg"].startswith("spark-sim-0: %s: 1 shard(s) named by model.safetensors.index.json "
                                            "are missing on the owner" % root)


def test_required_arguments_per_state(tmp_path):
    root, _d, _m, _a = _owner(tmp_path)
    res, failed = run_module(weights_manifest.main, {"path": root, "state": "written"})
    assert failed and res["msg"] == "manifest_path is required with state=written"
    res, failed = run_module(weights_manifest.main, {"path": root})
    assert failed and res["msg"] == "expected (the owner's manifest) is required with state=verified"


def test_stale_backup_of_a_replaced_file_is_listed(tmp_path):
    root, drafter, _m, args = _owner(tmp_path)
    owner, _f = run_module(weights_manifest.main, args)
    wr, wd = _worker(tmp_path, root, drafter)
    # tp_pad kept a backup on the worker, but the backup itself is wrong: it must go before the copy
    with open(os.path.join(wr, "config.json.orig"), "w") as f:
        f.write("{}")
    res, failed = run_module(weights_manifest.main, {"path": wr, "drafter_path": wd, "expected": owner["manifest"],
                                                     "node": "spark-sim-1", "fail_on_mismatch": False})
    assert not failed and res["plan"] == {"checkpoint": ["config.json"]}
    assert [(p["file"], p["item"]) for p in res["problems"]] == [("config.json.orig", "size")]
    assert res["stale_backups"] == [os.path.join(wr, "config.json.orig")]


def test_copy_that_does_not_fit_is_refused_before_it_starts(tmp_path):
    """space_margin_gib (catalogue disk_full): the plan's bytes plus the margin against the node's free space."""
    root, drafter, _m, args = _owner(tmp_path)
    owner, _f = run_module(weights_manifest.main, args)
    wr, wd = str(tmp_path / "worker" / "m"), str(tmp_path / "worker" / "d")  # nothing copied yet
    need = sum(f["size"] for a in owner["manifest"]["artifacts"].values() for f in a["files"].values())
    free = os.statvfs(str(tmp_path)).f_bavail * os.statvfs(str(tmp_path)).f_frsize
    base = {"path": wr, "drafter_path": wd, "expected": owner["manifest"], "node": "spark-sim-1",
            "fail_on_mismatch": False}
    # a margin just above what is free: refused, naming node, both paths, free and needed GiB
    margin = (free + 1024 ** 3) / 1024.0 ** 3
    res, failed = run_module(weights_manifest.main, dict(base, space_margin_gib=margin))
    assert failed and res["msg"].startswith("not copying the weights: spark-sim-1: %s, %s has " % (wd, wr))
    assert "catalogue disk_full" in res["msg"] and "(filesystem probed at %s)" % tmp_path in res["msg"]
    assert "checkpoint (%d files)" % len(owner["manifest"]["artifacts"]["checkpoint"]["files"]) in res["msg"]
    assert sorted(res["space"]) == sorted([wr, wd]) and res["space"][wr]["probe"] == str(tmp_path)
    # a small margin fits: the plan comes back for the copy, with the figures measured
    res, failed = run_module(weights_manifest.main, dict(base, space_margin_gib=0.001))
    assert not failed and sorted(res["plan"]) == ["checkpoint", "drafter"] and need < free
    # nothing to copy: not measured
    wr2, wd2 = _worker(tmp_path, root, drafter)
    res, failed = run_module(weights_manifest.main, dict(base, path=wr2, drafter_path=wd2, space_margin_gib=margin))
    assert not failed and res["plan"] == {} and "space" not in res
