# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""module_utils/weights.py: revision pins, manifest, verification, templates, guard, NFS lines."""

import copy
import hashlib
import json
import os
import struct

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import weights as w
from tests.unit.conftest import FIXTURES, read_fixture

WF = os.path.join(FIXTURES, "weights")
REV = "09b04e5e74bca08ca8549fc736d4cdd8624bfde3"  # the nvidia pin from sfxnz PR #11 (catalogue weights_mismatch)


def fixture_json(name):
    with open(os.path.join(WF, name)) as f:
        return json.load(f)


def glm_config(quant=None, where="top"):
    """The real GLM-5.3-Flash config capture, with a quantization block added."""
    cfg = fixture_json("glm-5.3-flash-config.json")
    if quant is not None:
        q = fixture_json("quantization-config-%s.json" % quant)
        if where == "top":
            cfg["quantization_config"] = q
        else:
            cfg["text_config"]["quantization_config"] = q
    return cfg


def write_safetensors(path, tensors):
    """Minimal safetensors file: u64 header length, JSON header, raw bytes (F32 zeros)."""
    header, data = {}, b""
    for name, shape in tensors:
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + n]}
        data += b"\0" * n
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def make_checkpoint(root, config=None, template=True, template_key=False, shards=2, extra=None):
    """A fake HF checkpoint: config, tokenizer, template, indexed shards (real safetensors)."""
    os.makedirs(root)
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump(config or glm_config("redhat"), f, indent=2)
    with open(os.path.join(root, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE"}}, f)
    tc = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if template_key:
        tc["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    if template:
        with open(os.path.join(root, "chat_template.jinja"), "w") as f:
            f.write("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>")
    weight_map = {}
    for i in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        tensors = [("model.layers.%d.mlp.down_proj.weight" % i, (8, 16)),
                   ("model.layers.%d.self_attn.q_proj.weight" % i, (4, 16))]
        write_safetensors(os.path.join(root, name), tensors)
        for t, _s in tensors:
            weight_map[t] = name
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    for rel, text in (extra or {}).items():
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)
    return root


def make_drafter(root):
    os.makedirs(root)
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump(fixture_json("dflash2-drafter-config.json"), f)
    write_safetensors(os.path.join(root, "model.safetensors"), [("layers.0.self_attn.q_proj.weight", (32, 8))])
    for n in os.listdir(root):
        os.chmod(os.path.join(root, n), 0o644)
    os.chmod(root, 0o755)
    return root


def copy_tree(src, dst):
    import shutil
    shutil.copytree(src, dst)


# --------------------------------------------------------------------------- revision / fetch args

def test_revision_pinned_commit_passes():
    assert w.check_revision("nvidia/GLM-5.3-Flash-NVFP4", REV) == REV


@pytest.mark.parametrize("rev", ["main", "v1.0", "dc77ff1c", REV.upper()])
def test_revision_branch_or_short_refused(rev):
    with pytest.raises(w.WeightsError) as e:
        w.check_revision("incoai/GLM-5.3-Flash-DFlash2", rev)
    assert str(e.value) == (
        "checkpoint incoai/GLM-5.3-Flash-DFlash2: revision %r is a branch or tag, not a 40-hex commit id; "
        "a branch moves under a running fleet (N3 saw a newer drafter revision give a repeatable wrong answer, "
        "catalogue weights_mismatch). Pin the commit id, or set checkpoint.allow_branch: true" % rev)


def test_revision_branch_allowed_and_missing():
    assert w.check_revision("a/b", "main", allow_branch=True) == "main"
    assert w.check_revision("a/b", None, allow_branch=True) == "main"
    with pytest.raises(w.WeightsError, match="no revision pinned"):
        w.check_revision("a/b", None)
    with pytest.raises(w.WeightsError, match="not an owner/name"):
        w.check_revision("tiny-glm", REV)


def test_snapshot_kwargs_adds_jinja_and_token():
    kw = w.snapshot_kwargs("RedHatAI/GLM-5.3-Flash-NVFP4", REV, "/var/tmp/models/x",
                           allow_patterns=["*.safetensors", "*.json"], token="hf_secret", max_workers=4)
    assert kw == {"repo_id": "RedHatAI/GLM-5.3-Flash-NVFP4", "revision": REV, "local_dir": "/var/tmp/models/x",
                  "allow_patterns": ["*.safetensors", "*.json", "*.jinja"], "max_workers": 4, "token": "hf_secret"}
    assert "token" not in w.snapshot_kwargs("a/b", REV, "/x")
    assert w.snapshot_kwargs("a/b", REV, "/x")["allow_patterns"] == w.DEFAULT_ALLOW_PATTERNS


def test_is_complete_needs_marker_and_every_shard(tmp_path):
    root = make_checkpoint(str(tmp_path / "m"))
    assert not w.is_complete(root, "a/b", REV)
    with open(os.path.join(root, ".dgxspark-fetch.json"), "w") as f:
        json.dump({"repo_id": "a/b", "revision": REV}, f)
    assert w.is_complete(root, "a/b", REV)
    assert not w.is_complete(root, "a/b", "f" * 40)
    open(os.path.join(root, "model-00002-of-00002.safetensors"), "w").close()  # interrupted: empty
    assert not w.is_complete(root, "a/b", REV)


# --------------------------------------------------------------------------- manifest

def test_manifest_lists_shards_sizes_and_hashes(tmp_path):
    root = make_checkpoint(str(tmp_path / "m"))
    drafter = make_drafter(str(tmp_path / "d"))
    m = w.build_manifest({"checkpoint": {"root": root, "repo_id": "a/b", "revision": REV},
                          "drafter": {"root": drafter, "hash_all": True}})
    ck = m["artifacts"]["checkpoint"]
    assert ck["shards"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert sorted(ck["files"]) == ["chat_template.jinja", "config.json", "model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                   "tokenizer.json", "tokenizer_config.json"]
    shard = os.path.join(root, "model-00001-of-00002.safetensors")
    assert ck["files"]["model-00001-of-00002.safetensors"] == {"size": os.path.getsize(shard), "sha256": None}
    with open(os.path.join(root, "config.json"), "rb") as f:
        assert ck["files"]["config.json"]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    dw = m["artifacts"]["drafter"]["files"]["model.safetensors"]
    with open(os.path.join(drafter, "model.safetensors"), "rb") as f:
        assert dw["sha256"] == hashlib.sha256(f.read()).hexdigest()  # drafter weights are hashed (catalogue weights_mismatch)
    assert len(w.manifest_sha256(m)) == 64
    assert w.manifest_sha256(m) == w.manifest_sha256(json.loads(w.canonical(m)))


def test_manifest_refuses_owner_missing_shard(tmp_path):
    root = make_checkpoint(str(tmp_path / "m"))
    os.remove(os.path.join(root, "model-00002-of-00002.safetensors"))
    with pytest.raises(w.WeightsError) as e:
        w.build_artifact(root)
    assert str(e.value) == ("%s: 1 shard(s) named by model.safetensors.index.json are missing on the owner, first "
                            "model-00002-of-00002.safetensors; re-run the fetch (it resumes)" % root)


def _owner_and_worker(tmp_path):
    owner = make_checkpoint(str(tmp_path / "owner"))
    manifest = w.build_manifest({"checkpoint": {"root": owner}})
    worker = str(tmp_path / "worker")
    copy_tree(owner, worker)
    return owner, worker, manifest


def test_verify_identical_copy_has_no_problem(tmp_path):
    _o, worker, m = _owner_and_worker(tmp_path)
    assert w.verify_manifest(m, "spark-sim-1", {"checkpoint": worker}) == []


def test_verify_truncated_shard_names_node_file_sizes(tmp_path):
    _o, worker, m = _owner_and_worker(tmp_path)
    shard = os.path.join(worker, "model-00002-of-00002.safetensors")
    full = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(full - 100)
    problems = w.verify_manifest(m, "spark-sim-1", {"checkpoint": worker})
    assert problems == [{"node": "spark-sim-1", "artifact": "checkpoint", "file": "model-00002-of-00002.safetensors",
                         "item": "size", "expected": full, "actual": full - 100,
                         "fix": "copy it again from the owner (truncated or different file)"}]
    assert w.format_problems(problems) == (
        "spark-sim-1: checkpoint model-00002-of-00002.safetensors: size expected %d, found %d; fix: copy it again "
        "from the owner (truncated or different file)" % (full, full - 100))
    assert w.transfer_plan(problems, m) == {"checkpoint": ["model-00002-of-00002.safetensors"]}


def test_verify_different_config_same_size_caught_by_sha(tmp_path):
    _o, worker, m = _owner_and_worker(tmp_path)
    path = os.path.join(worker, "config.json")
    with open(path) as f:
        text = f.read()
    changed = text.replace('"num_hidden_layers": 45', '"num_hidden_layers": 46')
    assert len(changed) == len(text) and changed != text
    with open(path, "w") as f:
        f.write(changed)
    (p,) = w.verify_manifest(m, "spark-sim-1", {"checkpoint": worker})
    assert (p["node"], p["file"], p["item"]) == ("spark-sim-1", "config.json", "sha256")
    assert p["expected"] == m["artifacts"]["checkpoint"]["files"]["config.json"]["sha256"]
    with open(path, "rb") as f:
        assert p["actual"] == hashlib.sha256(f.read()).hexdigest()
    assert w.transfer_plan([p], m) == {"checkpoint": ["config.json"]}


def test_verify_missing_template_and_missing_tree(tmp_path):
    _o, worker, m = _owner_and_worker(tmp_path)
    os.remove(os.path.join(worker, "chat_template.jinja"))
    (p,) = w.verify_manifest(m, "spark-sim-1", {"checkpoint": worker})
    assert (p["file"], p["item"], p["expected"], p["actual"]) == ("chat_template.jinja", "present", "file", "missing")
    (p,) = w.verify_manifest(m, "spark-sim-1", {"checkpoint": str(tmp_path / "nowhere")})
    assert (p["file"], p["item"], p["actual"]) == (".", "present", "missing")
    assert w.transfer_plan([p], m) == {"checkpoint": sorted(m["artifacts"]["checkpoint"]["files"])}


def test_mode_0600_file_reported_and_fixed(tmp_path):
    _o, worker, _m = _owner_and_worker(tmp_path)
    os.chmod(os.path.join(worker, "model-00001-of-00002.safetensors"), 0o600)
    os.chmod(worker, 0o700)
    probs = w.mode_problems(worker, "spark-sim-1", "checkpoint")
    assert [(p["file"], p["expected"], p["actual"]) for p in probs] == [
        (".", "0755", "0700"), ("model-00001-of-00002.safetensors", "0644", "0600")]
    assert "root-squashed" in probs[1]["fix"]
    assert w.fix_modes(worker) == [".", "model-00001-of-00002.safetensors"]
    assert w.mode_problems(worker, "spark-sim-1", "checkpoint") == []


def test_padding_rule_orig_is_the_pristine_file(tmp_path):
    owner, worker, m = _owner_and_worker(tmp_path)
    # tp_pad on the worker: keeps the original, rewrites config.json with padded heads.
    os.rename(os.path.join(worker, "config.json"), os.path.join(worker, "config.json.orig"))
    padded = glm_config("redhat")
    padded["text_config"]["num_attention_heads"] = 66
    with open(os.path.join(worker, "config.json"), "w") as f:
        json.dump(padded, f)
    assert w.walk_tree(worker)[0] == w.walk_tree(owner)[0]  # config.json.orig is never listed
    assert w.verify_manifest(m, "spark-sim-1", {"checkpoint": worker}) == []
    # The owner padded too (and drafter_pad-style weight backups): its manifest is unchanged.
    for rel in ("config.json", "model-00001-of-00002.safetensors"):
        os.rename(os.path.join(owner, rel), os.path.join(owner, rel + ".orig"))
        with open(os.path.join(owner, rel), "w") as f:
            f.write("padded")
    again = w.build_manifest({"checkpoint": {"root": owner}})
    assert again == m
    # A wrong pristine file on the worker is named as config.json.orig; the plan fetches config.json
    with open(os.path.join(worker, "config.json.orig"), "a") as f:
        f.write(" ")
    (p,) = w.verify_manifest(again, "spark-sim-1", {"checkpoint": worker})
    assert (p["file"], p["item"]) == ("config.json.orig", "size")
    assert w.transfer_plan([p], again) == {"checkpoint": ["config.json"]}


def test_hidden_entries_are_not_listed(tmp_path):
    root = make_checkpoint(str(tmp_path / "m"))
    os.makedirs(os.path.join(root, ".cache", "huggingface"))
    with open(os.path.join(root, ".dgxspark-fetch.json"), "w") as f:
        f.write("{}")
    files, dirs = w.walk_tree(root)
    assert not [f for f in files if f.startswith(".")] and dirs == []


def test_verify_refuses_unknown_manifest_format():
    with pytest.raises(w.WeightsError, match="unknown format"):
        w.verify_manifest({"format": 0}, "n")


# --------------------------------------------------------------------------- chat templates (catalogue no_chat_template)

def test_f13_repo_without_template_refused(tmp_path):
    listing = read_fixture("weights", "f13-model-dir-listing-no-template.txt").split()
    has_key = json.loads(read_fixture("weights", "f13-tokenizer-config-has-chat-template.txt"))
    assert has_key is False
    root = str(tmp_path / "f13")
    os.makedirs(root)
    for name in listing:
        with open(os.path.join(root, name), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast"} if name == "tokenizer_config.json" else {}, f)
    (err,) = w.chat_template_problems(root)
    assert err.startswith("%s: no chat template: chat_template.jinja is missing and tokenizer_config.json has "
                          "no chat_template key." % root)
    assert "default chat template is no longer allowed" in err and "*.jinja" in err


def test_template_key_or_file_is_enough_mm_needed_for_vision(tmp_path):
    a = make_checkpoint(str(tmp_path / "a"), template=False, template_key=True)
    assert w.chat_template_problems(a) == []
    b = make_checkpoint(str(tmp_path / "b"))
    (err,) = w.chat_template_problems(b, require_mm=True)
    assert err.startswith("%s: chat_template_mm.jinja missing; this lane accepts images" % b)
    with open(os.path.join(b, "chat_template_mm.jinja"), "w") as f:
        f.write("{{ messages }}")
    (err,) = w.chat_template_problems(b, require_mm=True, mm_marker="emit_image")
    assert "lacks 'emit_image'" in err


# --------------------------------------------------------------------------- checkpoint guard (docs/weights.md, docs/lanes.md)

def _index():
    return fixture_json("nvidia-index-excerpt.json")["weight_map"]


def test_guard_redhat_compressed_tensors_passes_every_mode():
    cfg = glm_config("redhat")
    for mode in (None, "mtp", "dflash"):
        verdict, refusals, warnings = w.guard(cfg, weight_map=_index(), lane_quantization="nvfp4", spec_method=mode)
        assert refusals == [] and warnings == []
    assert verdict == {"method": "compressed-tensors", "format": "compressed-tensors", "family": "nvfp4",
                       "scheme": "nvfp4-pack-quantized", "source": "config.json"}


def test_guard_libertaidai_partial_attention_modelopt_refused():
    cfg = glm_config("libertaidai")
    verdict, refusals, _w = w.guard(cfg, lane_quantization="modelopt", where="/m")
    assert verdict["format"] == "modelopt" and verdict["family"] == "nvfp4" and verdict["scheme"] == "W4A16_NVFP4"
    assert verdict["attention_quantized_layers"] == list(range(45))
    assert refusals == [
        "/m: ModelOpt build quantizes self-attention in 45 of 45 layers (first: layer 0 is not in its "
        "ignore/exclude_modules list); such partial-attention ModelOpt builds corrupt tokens (vLLM #54150, "
        "catalogue image_cuda_newer_than_driver; docs/weights.md). Use RedHatAI/GLM-5.3-Flash-NVFP4 (compressed-tensors) or "
        "nvidia/GLM-5.3-Flash-NVFP4 (attention kept high precision), or set "
        "model_weights_allow_modelopt_attention: true to accept the risk"]
    assert w.guard(cfg, lane_quantization="modelopt", allow_modelopt_attention=True)[1] == []


def test_guard_nvidia_passes_dflash_refuses_mtp():
    cfg = glm_config("nvidia")
    verdict, refusals, _w = w.guard(cfg, weight_map=_index(), lane_quantization="modelopt", spec_method="dflash")
    assert refusals == [] and verdict["attention_quantized_layers"] == []
    _v, refusals, _w = w.guard(cfg, weight_map=_index(), lane_quantization="modelopt", spec_method="mtp", where="/m")
    assert refusals == ["/m: MTP cannot be served on sm121 with this checkpoint: layer 45 (the MTP head) is not "
                        "covered by its quantization (its scale tensors differ from layer 44); use a DFlash2 lane "
                        "(docs/weights.md)"]


def test_guard_nvidia_ignore_list_stopping_one_layer_short_is_refused():
    cfg = glm_config("nvidia")
    cfg["quantization_config"]["ignore"].remove("model.language_model.layers.44.self_attn*")
    verdict, refusals, _w = w.guard(cfg, allow_modelopt=True)
    assert verdict["attention_quantized_layers"] == [44]
    assert "in 1 of 45 layers (first: layer 44" in refusals[0]


def test_guard_mtp_without_index_warns_only():
    _v, refusals, warnings = w.guard(glm_config("nvidia"), spec_method="mtp", where="/m", lane_quantization="modelopt")
    assert refusals == []
    assert warnings == ["/m: model.safetensors.index.json unreadable; MTP coverage not checked "
                        "(docs/weights.md skips it too)"]


def test_guard_nvfp4_lane_refuses_fp8_checkpoint():
    verdict, refusals, _w = w.guard(glm_config("fp8-block"), lane_quantization="nvfp4", where="/m")
    assert verdict["family"] == "fp8"
    assert refusals == ["/m: the lane expects a nvfp4 checkpoint but this one is fp8 (e4m3, from config.json). "
                        "Point the lane at a nvfp4 checkpoint (docs/lanes.md: RedHatAI/GLM-5.3-Flash-NVFP4 "
                        "compressed-tensors, or nvidia/GLM-5.3-Flash-NVFP4 ModelOpt) or change "
                        "checkpoint.quantization"]
    mo = glm_config("nvidia")
    mo["quantization_config"]["quant_algo"] = "FP8"
    assert w.classify(mo)["family"] == "fp8"
    assert w.guard(mo, lane_quantization="modelopt")[1][0].startswith("checkpoint: the lane expects a nvfp4")


def test_guard_unquantized_and_lane_vocabulary():
    verdict, refusals, _w = w.guard(glm_config(), lane_quantization="bf16")
    assert verdict["family"] == "none" and refusals == []
    assert w.guard(glm_config(), lane_quantization="nvfp4")[1][0].startswith(
        "checkpoint: the lane expects a nvfp4 checkpoint but this one is none (none, from no quantization_config)")
    with pytest.raises(w.WeightsError, match="'modelopt_fp4' is not one of"):
        w.lane_family("modelopt_fp4")


def test_guard_reads_text_config_and_hf_quant_config():
    assert w.classify(glm_config("redhat", where="text"))["format"] == "compressed-tensors"
    hf = {"producer": {"name": "modelopt", "version": "0.47.0"},
          "quantization": copy.deepcopy(fixture_json("quantization-config-nvidia.json"))}
    del hf["quantization"]["quant_method"]
    hf["quantization"]["exclude_modules"] = hf["quantization"].pop("ignore")
    verdict, refusals, _w = w.guard(glm_config(), hf_quant=hf, allow_modelopt=True)
    assert verdict["format"] == "modelopt" and verdict["source"] == "hf_quant_config.json" and refusals == []


def test_guard_blackfrost_w4a4_without_input_scale_refused():
    cfg = glm_config("nvidia")
    wm = {k: v for k, v in _index().items() if not k.endswith("input_scale")}
    refusals = w.guard(cfg, weight_map=wm, where="/m", lane_quantization="modelopt")[1]
    assert refusals == ["/m: quant_algo NVFP4 (W4A4) but the index has no input_scale tensor; the output garbles "
                        "(docs/weights.md, the Blackfrost mislabel). Set quantization_config.quant_algo to W4A16_NVFP4"]


# ModelOpt only when said so (catalogue token_corruption): the format comes from the checkpoint's own files.

@pytest.mark.parametrize("lane_q", [None, "nvfp4", "compressed-tensors"])
def test_modelopt_refused_unless_the_lane_or_operator_says_so(lane_q):
    hf = {"producer": {"name": "modelopt", "version": "0.47.0"},
          "quantization": copy.deepcopy(fixture_json("quantization-config-nvidia.json"))}
    del hf["quantization"]["quant_method"]
    # hf_quant_config.json only: config.json carries no quantization block, as in ModelOpt exports
    verdict, refusals, _w = w.guard(glm_config(), hf_quant=hf, lane_quantization=lane_q, where="node-a:/m")
    assert verdict["format"] == "modelopt" and verdict["source"] == "hf_quant_config.json"
    assert len(refusals) == 1
    assert refusals[0].startswith("node-a:/m: a ModelOpt build (quant_method modelopt, quant_algo NVFP4, read from "
                                  "hf_quant_config.json) but the lane says checkpoint.quantization %s;"
                                  % (lane_q or "(unset)"))
    assert "catalogue token_corruption" in refusals[0] and "model_weights_allow_modelopt: true" in refusals[0]
    assert w.guard(glm_config(), hf_quant=hf, lane_quantization="modelopt")[1] == []
    if lane_q != "compressed-tensors":
        assert w.guard(glm_config(), hf_quant=hf, lane_quantization=lane_q, allow_modelopt=True)[1] == []


def test_compressed_tensors_lane_refuses_other_formats_and_passes_redhat():
    assert w.guard(glm_config("redhat"), lane_quantization="compressed-tensors")[1] == []
    assert w.lane_family("compressed-tensors") == "nvfp4" and w.lane_format("compressed-tensors") == "compressed-tensors"
    refusals = w.guard(glm_config("nvidia"), lane_quantization="compressed-tensors", allow_modelopt=True, where="/m")[1]
    assert refusals == ["/m: the lane says checkpoint.quantization compressed-tensors but this checkpoint is modelopt "
                        "(from config.json). Fetch the compressed-tensors build (RedHatAI/GLM-5.3-Flash-NVFP4) or "
                        "correct the lane"]


# --------------------------------------------------------------------------- NFS (docs/weights.md, catalogue file_not_found)

def test_f23_export_parsed_and_crossmnt_rule():
    (entry,) = w.parse_exports(read_fixture("weights", "f23-node-a-etc-exports.txt"))
    assert entry == {"path": "/export", "client": "10.10.0.0/24", "options": ["ro", "no_subtree_check", "fsid=0"]}
    assert "crossmnt" not in entry["options"]
    # the model tree was bind-mounted below /export: the export needs crossmnt
    assert w.needs_crossmnt(["/", "/export/models/GLM-5.3-Flash-NVFP4"], entry["path"]) is True
    assert w.needs_crossmnt(["/", "/export"], "/export") is False


def test_exports_line_restricted_read_only():
    line = w.exports_line("/var/tmp/models/x", ["198.18.11.0/24"], crossmnt=True)
    assert line == "/var/tmp/models/x 198.18.11.0/24(ro,sync,no_subtree_check,crossmnt)"
    assert w.parse_exports(line)[0]["options"] == ["ro", "sync", "no_subtree_check", "crossmnt"]
    with pytest.raises(w.WeightsError, match="no client network"):
        w.exports_line("/x", [])
    assert w.NFS_MOUNT_OPTS == "vers=4.2,nconnect=8,rsize=1048576,wsize=1048576,hard"


def test_vision_on_from_the_lane_files():
    import yaml
    from tests.unit.conftest import ROOT

    def serve(name):
        with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
            return yaml.safe_load(f)["serve"]
    assert w.vision_on(serve("tp2_dflash2")) == "serve.limit_mm_per_prompt allows image: 2"
    assert w.vision_on(serve("tp2_mtp")) is None
    assert w.vision_on(serve("sim_cpu_tp2")) is None
    assert w.vision_on({"limit_mm_per_prompt": {"image": 0, "video": 0}}) is None
    assert w.vision_on({"limit_mm_per_prompt": {"image": {"count": 1}}}) == "serve.limit_mm_per_prompt allows image: 1"
    assert w.vision_on({"chat_template": "/models/x/chat_template_mm.jinja"}) == \
        "serve.chat_template is /models/x/chat_template_mm.jinja"


def test_artifact_hashes_for_the_report(tmp_path):
    # per directory: the sha256 of its canonical manifest entry, the same on every rank that verified against it
    ck, dr = str(tmp_path / "ck"), str(tmp_path / "dr")
    make_checkpoint(ck)
    make_checkpoint(dr, shards=1)
    manifest = w.build_manifest({"checkpoint": {"root": ck}, "drafter": {"root": dr, "hash_all": True}})
    got = w.artifact_sha256s(manifest)
    assert sorted(got) == ["checkpoint", "drafter"]
    assert got["checkpoint"] == hashlib.sha256(w.canonical(manifest["artifacts"]["checkpoint"]).encode()).hexdigest()
    assert got["drafter"] != got["checkpoint"]
    # one changed byte in a drafter shard (hashed) moves only the drafter's value
    shard = os.path.join(dr, "model-00001-of-00001.safetensors")
    with open(shard, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    again = w.artifact_sha256s(w.build_manifest({"checkpoint": {"root": ck}, "drafter": {"root": dr, "hash_all": True}}))
    assert again["checkpoint"] == got["checkpoint"] and again["drafter"] != got["drafter"]


def test_full_hash_problems_on_real_shards(tmp_path):
    # owner and worker copies of a real checkpoint; one worker shard keeps its size but not its bytes
    owner, worker = str(tmp_path / "o"), str(tmp_path / "w")
    make_checkpoint(owner)
    make_checkpoint(worker)
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    with open(os.path.join(worker, shards[1]), "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    assert os.path.getsize(os.path.join(worker, shards[1])) == os.path.getsize(os.path.join(owner, shards[1]))

    def hashes(root):
        return dict(("checkpoint/" + s, w.sha256_file(os.path.join(root, s))) for s in shards)

    mine, theirs = hashes(worker), hashes(owner)
    assert w.full_hash_problems(theirs, theirs, "spark-sim-0", "spark-sim-0") == []
    problems = w.full_hash_problems(theirs, mine, "spark-sim-1", "spark-sim-0")
    assert problems == [{
        "node": "spark-sim-1", "artifact": "checkpoint", "file": shards[1], "item": "sha256",
        "expected": theirs["checkpoint/" + shards[1]], "actual": mine["checkpoint/" + shards[1]],
        "fix": "its size matches the owner's spark-sim-0 but its bytes do not: delete it on spark-sim-1 and run "
               "model_weights again (the copy takes it from the owner)"}]
    # the manifest check alone does not see it: shard sizes only
    manifest = w.build_manifest({"checkpoint": {"root": owner}})
    assert w.verify_manifest(manifest, "spark-sim-1", {"checkpoint": worker}) == []
    mine["checkpoint/" + shards[0]] = None
    assert [(p["file"], p["item"]) for p in w.full_hash_problems(theirs, mine, "spark-sim-1", "spark-sim-0")] == [
        (shards[0], "present"), (shards[1], "sha256")]
