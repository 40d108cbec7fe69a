# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""checkpoint_guard module on directories built from the real GLM-5.3-Flash config capture."""

import json
import os

from ansible_collections.dgxspark.vllm.plugins.modules import checkpoint_guard
from tests.unit.plugins.module_utils.test_weights import fixture_json, glm_config, make_checkpoint
from tests.unit.plugins.modules.utils import run_module


def _dir(tmp_path, quant, index=False, **kw):
    root = make_checkpoint(str(tmp_path / (quant or "plain")), config=glm_config(quant), **kw)
    if index:
        with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
            json.dump(fixture_json("nvidia-index-excerpt.json"), f)
    return root


def test_redhat_passes_with_verdict(tmp_path):
    root = _dir(tmp_path, "redhat")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "nvfp4", "spec_method": "mtp"})
    assert not failed and res["changed"] is False and res["refusals"] == []
    assert res["verdict"]["format"] == "compressed-tensors" and res["verdict"]["family"] == "nvfp4"


def test_libertaidai_refused_unless_allowed(tmp_path):
    root = _dir(tmp_path, "libertaidai")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "modelopt"})
    assert failed and res["msg"].startswith("REFUSING: %s: ModelOpt build quantizes self-attention in 45 of 45 "
                                            "layers" % root)
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "modelopt",
                                                     "allow_modelopt_attention": True})
    assert not failed


def test_modelopt_needs_the_lane_or_the_operator(tmp_path):
    """catalogue token_corruption: the format is read from the directory's config.json, not the repo name."""
    root = _dir(tmp_path, "nvidia", index=True)
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "compressed-tensors",
                                                     "node": "spark-a"})
    assert failed and res["verdict"]["format"] == "modelopt"
    assert "a ModelOpt build (quant_method modelopt, quant_algo NVFP4, read from config.json) but the lane says " \
           "checkpoint.quantization compressed-tensors" in res["msg"]
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "nvfp4",
                                                     "allow_modelopt": True, "spec_method": "dflash"})
    assert not failed, res.get("msg")
    res, failed = run_module(checkpoint_guard.main, {"path": _dir(tmp_path / "r", "redhat"),
                                                     "lane_quantization": "compressed-tensors"})
    assert not failed and res["verdict"]["format"] == "compressed-tensors"


def test_nvidia_mtp_refused_dflash_passes(tmp_path):
    root = _dir(tmp_path, "nvidia", index=True)
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "modelopt",
                                                     "spec_method": "dflash"})
    assert not failed and res["verdict"]["scheme"] == "NVFP4"
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "modelopt",
                                                     "spec_method": "mtp"})
    assert failed and res["msg"] == ("REFUSING: %s: MTP cannot be served on sm121 with this checkpoint: layer 45 "
                                     "(the MTP head) is not covered by its quantization (its scale tensors differ "
                                     "from layer 44); use a DFlash2 lane (docs/weights.md)" % root)


def test_nvfp4_lane_refuses_fp8(tmp_path):
    root = _dir(tmp_path, "fp8-block")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "nvfp4"})
    assert failed and "the lane expects a nvfp4 checkpoint but this one is fp8" in res["msg"]


def test_missing_template_refused_and_padded_config_read_from_orig(tmp_path):
    root = _dir(tmp_path, "redhat", template=False)
    res, failed = run_module(checkpoint_guard.main, {"path": root})
    assert failed and res["refusals"][0].startswith("%s: no chat template" % root)
    # tp_pad kept the original; the guard reads it (a padded copy without quantization must not matter)
    os.rename(os.path.join(root, "config.json"), os.path.join(root, "config.json.orig"))
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump(glm_config(), f)
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_quantization": "nvfp4",
                                                     "require_chat_template": False})
    assert not failed and res["verdict"]["format"] == "compressed-tensors"


def test_mm_template_required_for_vision_lanes(tmp_path):
    root = _dir(tmp_path, "redhat")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "require_mm_template": True})
    assert failed and "chat_template_mm.jinja missing" in res["msg"]


def test_no_config(tmp_path):
    res, failed = run_module(checkpoint_guard.main, {"path": str(tmp_path)})
    assert failed and res["msg"] == "REFUSING: %s: no config.json; fetch or copy the checkpoint first" % tmp_path


def _lane_serve(name):
    import yaml
    from tests.unit.conftest import ROOT
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        return yaml.safe_load(f)["serve"]


def test_vision_lane_without_mm_template_refused_before_launch(tmp_path):
    # tp2_dflash2 allows 2 images per prompt: the weights directory must carry chat_template_mm.jinja (catalogue no_chat_template)
    root = _dir(tmp_path, "redhat")
    serve = _lane_serve("tp2_dflash2")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_serve": serve, "node": "node-a"})
    assert failed
    assert res["refusals"] == [
        "node-a: %s: chat_template_mm.jinja missing; this lane accepts images (serve.limit_mm_per_prompt allows "
        "image: 2) and image requests return HTTP 500 without it (catalogue no_chat_template). Fix: set "
        "model_weights_chat_template_mm_src to the vision template so it is copied into the weights directory on "
        "the owner, or turn vision off in the lane (serve.limit_mm_per_prompt image: 0)" % root]
    # with the template in place the same lane passes
    with open(os.path.join(root, "chat_template_mm.jinja"), "w") as f:
        f.write("{{ messages }}\n")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_serve": serve, "node": "node-a"})
    assert not failed and res["refusals"] == []


def test_text_only_lane_needs_no_mm_template(tmp_path):
    root = _dir(tmp_path, "redhat")
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_serve": _lane_serve("tp2_mtp")})
    assert not failed and res["refusals"] == []
    # an explicit model_weights_require_mm_template: true still wins over the lane
    res, failed = run_module(checkpoint_guard.main, {"path": root, "lane_serve": _lane_serve("tp2_mtp"),
                                                     "require_mm_template": True})
    assert failed and "chat_template_mm.jinja missing; this lane accepts images and image" in res["msg"]
