# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""weights_fetch module. The Hugging Face Hub is unreachable from this project's CI, so
huggingface_hub.snapshot_download is MOCKED here: these tests cover the arguments, the refusals,
the token handling and the skip of an already-complete directory, not a real download."""

import hashlib
import json
import os
from unittest import mock

from ansible_collections.dgxspark.vllm.plugins.modules import weights_fetch
from tests.unit.plugins.module_utils.test_weights import make_checkpoint
from tests.unit.plugins.modules.utils import run_module

REV = "09b04e5e74bca08ca8549fc736d4cdd8624bfde3"
REPO = "nvidia/GLM-5.3-Flash-NVFP4"


def _hub(fake_download=None):
    hub = mock.MagicMock()
    if fake_download:
        hub.snapshot_download.side_effect = fake_download
    return mock.patch.object(weights_fetch, "huggingface_hub", hub), hub


def test_download_arguments_and_marker(tmp_path):
    target = str(tmp_path / "m")

    def fake(**kw):
        make_checkpoint(kw["local_dir"])
        return kw["local_dir"]

    patch, hub = _hub(fake)
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": target,
                                                      "token": "hf_SECRET", "allow_patterns": ["*.safetensors",
                                                                                               "*.json"]})
    assert not failed and res["changed"] is True and res["fetched"] is True
    hub.snapshot_download.assert_called_once_with(
        repo_id=REPO, revision=REV, local_dir=target, allow_patterns=["*.safetensors", "*.json", "*.jinja"],
        max_workers=8, token="hf_SECRET")
    assert "hf_SECRET" not in json.dumps(res)
    with open(os.path.join(target, ".dgxspark-fetch.json")) as f:
        assert json.load(f) == {"repo_id": REPO, "revision": REV}
    # second run: complete directory is verified, not downloaded again
    patch, hub = _hub()
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": target})
    assert not failed and res["changed"] is False and res["fetched"] is False
    hub.snapshot_download.assert_not_called()


def test_branch_refused_before_any_download(tmp_path):
    patch, hub = _hub()
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": "incoai/GLM-5.3-Flash-DFlash2", "revision": "main",
                                                      "local_dir": str(tmp_path / "d")})
    assert failed and res["msg"].startswith("checkpoint incoai/GLM-5.3-Flash-DFlash2: revision 'main' is a branch "
                                            "or tag, not a 40-hex commit id")
    hub.snapshot_download.assert_not_called()
    patch, hub = _hub(lambda **kw: make_checkpoint(kw["local_dir"]))
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": "incoai/GLM-5.3-Flash-DFlash2", "revision": "main",
                                                      "allow_branch": True, "local_dir": str(tmp_path / "d")})
    assert not failed and hub.snapshot_download.call_args.kwargs["revision"] == "main"


def test_check_mode_downloads_nothing(tmp_path):
    patch, hub = _hub()
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV,
                                                      "local_dir": str(tmp_path / "m"), "_ansible_check_mode": True})
    assert not failed and res["changed"] is True and res["fetched"] is True
    hub.snapshot_download.assert_not_called()


def test_missing_library_and_hub_error(tmp_path):
    with mock.patch.object(weights_fetch, "huggingface_hub", None):
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV,
                                                      "local_dir": str(tmp_path / "m")})
    assert failed and "huggingface_hub" in res["msg"]

    def boom(**kw):
        raise RuntimeError("401 Client Error: repository is gated")

    patch, _hub_mock = _hub(boom)
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "token": "hf_SECRET",
                                                      "local_dir": str(tmp_path / "m")})
    assert failed and res["msg"] == ("snapshot_download of %s@%s into %s failed: 401 Client Error: repository is "
                                     "gated" % (REPO, REV, tmp_path / "m"))
    assert not os.path.exists(os.path.join(str(tmp_path / "m"), ".dgxspark-fetch.json"))


# --------------------------------------------------------------------------- the hub's sha256 (issue 20)
# The hub call itself is UNTESTED here (no hub access): HfApi.model_info is mocked. The metadata it returns
# is built by huggingface_hub's own ModelInfo / RepoFile classes from JSON in the shape of the hub API
# (/api/models/<repo>/revision/<rev>?blobs=true siblings[].lfs; paths-info lfs.oid), around the real bytes
# of the checkpoint in tmp_path, so the comparison runs on the objects the library really hands back.

def _lfs_json(root, names, key="sha256", corrupt=()):
    out = []
    for rel in names:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        sha = hashlib.sha256(data + (b"hub" if rel in corrupt else b"")).hexdigest()
        out.append({"rfilename": rel, "path": rel, "size": len(data), "blobId": "0" * 40, "oid": "0" * 40,
                    "lfs": {key: sha, "size": len(data), "pointerSize": 134}})
    return out


def _model_info(root, corrupt=()):
    from huggingface_hub.hf_api import ModelInfo
    shards = sorted(n for n in os.listdir(root) if n.endswith(".safetensors"))
    sibs = _lfs_json(root, shards, corrupt=corrupt) + [{"rfilename": "config.json", "size": 10, "blobId": "1" * 40}]
    return ModelInfo(id=REPO, sha=REV, siblings=[{k: v for k, v in s.items() if k in ("rfilename", "size", "blobId", "lfs")}
                                                 for s in sibs])


def test_hub_lfs_files_from_the_librarys_objects_and_raw_json(tmp_path):
    from huggingface_hub.hf_api import RepoFile
    from ansible_collections.dgxspark.vllm.plugins.module_utils import weights as w
    root = str(tmp_path / "m")
    make_checkpoint(root)
    info = _model_info(root)
    files = w.hub_lfs_files(info.siblings)
    shard = "model-00001-of-00002.safetensors"
    assert sorted(files) == [shard, "model-00002-of-00002.safetensors"]  # config.json is in git, not LFS
    assert files[shard] == {"sha256": w.sha256_file(os.path.join(root, shard)), "size": os.path.getsize(os.path.join(root, shard))}
    # get_paths_info's RepoFile (lfs.oid on the wire) and the raw JSON give the same answer
    raw = _lfs_json(root, [shard], key="oid")
    repo_files = [RepoFile(**{k: v for k, v in raw[0].items() if k in ("path", "size", "oid", "lfs")})]
    assert w.hub_lfs_files(repo_files) == {shard: files[shard]}
    assert w.hub_lfs_files(raw) == {shard: files[shard]}


def test_finished_fetch_checked_against_the_hub_and_cached(tmp_path):
    root = str(tmp_path / "m")
    make_checkpoint(root)
    with open(os.path.join(root, ".dgxspark-fetch.json"), "w") as f:
        json.dump({"repo_id": REPO, "revision": REV}, f)
    patch, hub = _hub()
    hub.HfApi.return_value.model_info.return_value = _model_info(root)
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": root,
                                                      "verify_sha256": True, "token": "hf_SECRET"})
    assert not failed and res["changed"] is False, res
    hub.HfApi.return_value.model_info.assert_called_once_with(REPO, revision=REV, files_metadata=True, token="hf_SECRET")
    assert res["hub_sha256"]["checked"] == 2 and len(res["hub_sha256"]["hashed"]) == 2 and res["hub_sha256"]["problems"] == []
    # second run: unchanged files are not read again
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": root,
                                                      "verify_sha256": True})
    assert not failed and res["hub_sha256"]["hashed"] == [] and res["hub_sha256"]["checked"] == 2


def test_owner_copy_that_is_not_the_hubs_is_refused_before_any_copy(tmp_path):
    root = str(tmp_path / "m")
    make_checkpoint(root)
    with open(os.path.join(root, ".dgxspark-fetch.json"), "w") as f:
        json.dump({"repo_id": REPO, "revision": REV}, f)
    shard = "model-00002-of-00002.safetensors"
    info = _model_info(root, corrupt=(shard,))
    want = [s.lfs.sha256 for s in info.siblings if s.rfilename == shard][0]
    patch, hub = _hub()
    hub.HfApi.return_value.model_info.return_value = info
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": root,
                                                      "verify_sha256": True})
    from ansible_collections.dgxspark.vllm.plugins.module_utils import weights as w
    got = w.sha256_file(os.path.join(root, shard))
    assert failed
    assert res["msg"] == (
        "the owner's copy differs from the hub at %s@%s, so it is not copied to any rank: %s: checkpoint %s: sha256 "
        "expected %s, found %s; fix: the owner's copy is not the hub's file of %s@%s: delete it and run model_weights "
        "again (the fetch resumes); no rank receives it meanwhile" % (REPO, REV, os.uname()[1], shard, want, got, REPO, REV))
    # a shard the owner lacks is named as missing
    os.remove(os.path.join(root, "model-00001-of-00002.safetensors"))
    with patch:
        res, failed = run_module(weights_fetch.main, {"repo_id": REPO, "revision": REV, "local_dir": root,
                                                      "verify_sha256": True})
    assert failed and [p["item"] for p in res["hub_sha256"]["problems"]] == ["present", "sha256"]
