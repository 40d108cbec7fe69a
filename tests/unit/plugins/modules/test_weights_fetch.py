# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""weights_fetch module. The Hugging Face Hub is unreachable from this project's CI, so
huggingface_hub.snapshot_download is MOCKED here: these tests cover the arguments, the refusals,
the token handling and the skip of an already-complete directory, not a real download."""

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
