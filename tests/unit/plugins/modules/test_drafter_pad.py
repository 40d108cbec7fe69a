"""drafter_pad on synthetic safetensors checkpoints (catalogue drafter_heads; docs/tp-padding.md).

The DFlash2-style drafter keeps the real config capture's head counts (32 q / 8 kv), layer count (5)
and tensor names (`layers.N.self_attn.{q,k,v,o}_proj.weight`, per-head q/k norms), with hidden size
and head_dim scaled down (4096 -> 256, 128 -> 16) so a test runs in milliseconds. The tiny sim model
uses the Llama/Qwen3 names (`model.layers.N.self_attn...`), 4 q / 2 kv heads, head_dim 32, sharded
with an index file.
"""
import hashlib
import json
import os
import shutil
import stat

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from ansible_collections.dgxspark.vllm.plugins.module_utils import tp_padding
from ansible_collections.dgxspark.vllm.plugins.modules import drafter_pad
from ansible_collections.dgxspark.vllm.tests.unit.plugins.modules.utils import run_module

HD = 16      # scaled-down head_dim (real 128)
HIDDEN = 256  # scaled-down hidden_size (real 4096)


def sha(path):
    with open(str(path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def bf16(a):
    """float32 -> raw bfloat16 bits (round to nearest even)."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def write_bf16(d, tensors):
    """Write raw-bits tensors with the safetensors byte layout (the library cannot take bf16 from numpy)."""
    d.mkdir(exist_ok=True)
    with open(str(d / "model.safetensors"), "wb") as f:
        tp_padding.write_safetensors(f, dict((k, (dt, list(a.shape), a.tobytes())) for k, (dt, a) in tensors.items()),
                                     {"format": "pt"})


@pytest.fixture
def drafter(tmp_path, fixture_path):
    """A 5-layer bf16 DFlash2-style drafter with the capture's config (scaled hidden/head_dim)."""
    with open(fixture_path("model-configs", "dflash2-drafter-config.json")) as f:
        config = json.load(f)
    config["hidden_size"], config["head_dim"], config["intermediate_size"] = HIDDEN, HD, 3 * HIDDEN
    rng = np.random.default_rng(7)
    q, kv = config["num_attention_heads"], config["num_key_value_heads"]
    tensors = {}
    for i in range(config["num_hidden_layers"]):
        p = "layers.%d." % i
        shapes = {
            "self_attn.q_proj.weight": (q * HD, HIDDEN), "self_attn.k_proj.weight": (kv * HD, HIDDEN),
            "self_attn.v_proj.weight": (kv * HD, HIDDEN), "self_attn.o_proj.weight": (HIDDEN, q * HD),
            "self_attn.q_norm.weight": (HD,), "self_attn.k_norm.weight": (HD,),
            "mlp.gate_proj.weight": (3 * HIDDEN, HIDDEN), "mlp.up_proj.weight": (3 * HIDDEN, HIDDEN),
            "mlp.down_proj.weight": (HIDDEN, 3 * HIDDEN),
            "input_layernorm.weight": (HIDDEN,), "post_attention_layernorm.weight": (HIDDEN,),
        }
        for name, shape in shapes.items():
            scale = 1.0 if name.endswith("norm.weight") else 0.05
            tensors[p + name] = ("BF16", bf16(1.0 + rng.standard_normal(shape) * scale if "norm" in name
                                              else rng.standard_normal(shape) * scale))
    tensors["norm.weight"] = ("BF16", bf16(np.ones(HIDDEN)))
    tensors["fc.weight"] = ("BF16", bf16(rng.standard_normal((HIDDEN, 5 * HIDDEN)) * 0.02))
    write_bf16(tmp_path / "dflash2-draft", tensors)
    d = tmp_path / "dflash2-draft"
    (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (d / "README.md").write_text("drafter\n")
    os.chmod(str(d), 0o700)
    return d, tensors


def pad_args(path, **kw):
    args = {"path": str(path), "tensor_parallel_size": 3, "num_attention_heads": 48, "num_key_value_heads": 12,
            "expect_num_attention_heads": 32, "expect_num_key_value_heads": 8}
    args.update(kw)
    return args


def test_drafter_32_8_to_48_12(drafter):
    d, src = drafter
    released = (d / "model.safetensors").read_bytes()
    released_cfg = (d / "config.json").read_bytes()
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert not failed, result
    assert result["changed"] is True and result["state"] == "pad"
    assert result["geometry"] == {"q": 32, "kv": 8, "target_q": 48, "target_kv": 12, "group": 4,
                                  "head_dim": HD, "hidden": HIDDEN}
    # 5 layers x q/k/v/o.
    assert len(result["tensors"]) == 20
    with safe_open(str(d / "model.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}
        assert sorted(f.keys()) == sorted(src)
        for i in range(5):
            p = "layers.%d.self_attn." % i
            assert f.get_slice(p + "q_proj.weight").get_shape() == [48 * HD, HIDDEN]
            assert f.get_slice(p + "k_proj.weight").get_shape() == [12 * HD, HIDDEN]
            assert f.get_slice(p + "v_proj.weight").get_shape() == [12 * HD, HIDDEN]
            assert f.get_slice(p + "o_proj.weight").get_shape() == [HIDDEN, 48 * HD]
            assert f.get_slice(p + "o_proj.weight").get_dtype() == "BF16"
    # Layout: released blocks first, zero blocks appended at the end (docs/tp-padding.md).
    header, _meta, start = tp_padding.read_header(str(d / "model.safetensors"))
    for name, (dtype, raw) in src.items():
        info = header[name]
        out = np.frombuffer(tp_padding.tensor_bytes(str(d / "model.safetensors"), start, info),
                            dtype=np.uint16).reshape(info["shape"])
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            assert np.array_equal(out[:raw.shape[0]], raw)
            assert not out[raw.shape[0]:].any()
            assert out.shape[0] - raw.shape[0] == (16 if "q_proj" in name else 4) * HD
        elif name.endswith("o_proj.weight"):
            assert np.array_equal(out[:, :raw.shape[1]], raw)
            assert not out[:, raw.shape[1]:].any() and out.shape[1] - raw.shape[1] == 16 * HD
        else:
            assert np.array_equal(out, raw), name  # norms, MLP, fc copied verbatim
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (48, 12)
    assert cfg["_tp3_head_pad"]["num_attention_heads"] == 32 and cfg["_tp3_head_pad"]["num_key_value_heads"] == 8
    released_dict = json.loads(released_cfg)
    heads = ("num_attention_heads", "num_key_value_heads", "_tp3_head_pad")
    assert dict((k, v) for k, v in cfg.items() if k not in heads) == \
        dict((k, v) for k, v in released_dict.items() if k not in heads)
    # Backups are the released bytes; other files untouched; modes 0644 / 0755.
    assert (d / "model.safetensors.orig").read_bytes() == released
    assert (d / "config.json.orig").read_bytes() == released_cfg
    assert (d / "README.md").read_text() == "drafter\n"
    for name in ("model.safetensors", "config.json"):
        assert stat.S_IMODE(os.stat(str(d / name)).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(str(d)).st_mode) == 0o755
    v = result["verify"]
    assert v["layer"] == "layers.0.self_attn" and v["reference"] == "backup" and v["pads_zero"] and v["passed"]
    assert v["max_abs_diff"] <= 1e-6
    assert v["output_scale"] > 0.01  # a real output, not a zero layer
    assert result["sha256"]["model.safetensors"] == sha(d / "model.safetensors")
    assert result["files"] == ["model.safetensors", "config.json"]


def test_drafter_idempotent_and_bit_identical(drafter, tmp_path):
    d, _src = drafter
    copy = tmp_path / "copy"
    shutil.copytree(str(d), str(copy))
    first, failed = run_module(drafter_pad.main, pad_args(d))
    assert not failed
    padded = sha(d / "model.safetensors"), sha(d / "config.json")
    second, failed = run_module(drafter_pad.main, pad_args(d))
    assert not failed, second
    assert second["changed"] is False and second["state"] == "at_target"
    assert second["msg"].startswith("already padded: 32/8 -> 48/12 heads")
    assert (sha(d / "model.safetensors"), sha(d / "config.json")) == padded
    assert second["verify"]["reference"] == "backup" and second["verify"]["max_abs_diff"] <= 1e-6
    # Independent run on another copy (another node): bit-identical output (docs/tp-padding.md '0ae7776d...').
    other, failed = run_module(drafter_pad.main, pad_args(copy))
    assert not failed
    assert other["sha256"] == first["sha256"]
    assert sha(copy / "model.safetensors") == padded[0]


def test_drafter_without_backups_verifies_sliced(drafter):
    d, _src = drafter
    run_module(drafter_pad.main, pad_args(d))
    os.unlink(str(d / "model.safetensors.orig"))
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert not failed
    assert result["verify"]["reference"] == "sliced" and result["verify"]["passed"]


def test_check_mode_writes_nothing(drafter):
    d, _src = drafter
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    result, failed = run_module(drafter_pad.main, pad_args(d, _ansible_check_mode=True, _ansible_diff=True))
    assert not failed, result
    assert result["changed"] is True
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert result["verify"]["passed"] and result["verify"]["max_abs_diff"] <= 1e-6
    assert result["diff"]["before"] == "num_attention_heads: 32\nnum_key_value_heads: 8\n"
    assert result["diff"]["after"].startswith("num_attention_heads: 48\nnum_key_value_heads: 12\n")


def test_tp_that_divides_leaves_drafter_alone(drafter):
    d, _src = drafter
    before = sha(d / "model.safetensors")
    for tp in (2, 4):
        result, failed = run_module(drafter_pad.main, pad_args(d, tensor_parallel_size=tp))
        assert not failed
        assert result["changed"] is False and result["state"] == "divides"
        assert result["msg"] == "tensor-parallel size %d divides the released 32/8 heads; unchanged" % tp
    assert sha(d / "model.safetensors") == before and not (d / "model.safetensors.orig").exists()


def test_refuses_unexpected_source(drafter):
    d, _src = drafter
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_attention_heads"], cfg["num_key_value_heads"] = 36, 9
    (d / "config.json").write_text(json.dumps(cfg))
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert failed
    assert "expected an unpadded 32/8 checkpoint (num_attention_heads/num_key_value_heads), found 36/9" in result["msg"]


def test_refuses_target_breaking_gqa(drafter):
    d, _src = drafter
    result, failed = run_module(drafter_pad.main, pad_args(d, num_attention_heads=36, num_key_value_heads=12))
    assert failed
    assert ("target 36/12 does not keep the GQA group of 4 query heads per kv head of the 32/8 source" in
            result["msg"])
    assert "use 36/9 for the smallest pad at tensor-parallel size 3" in result["msg"]


def test_refuses_target_not_dividing(drafter):
    d, _src = drafter
    result, failed = run_module(drafter_pad.main, pad_args(d, tensor_parallel_size=5))
    assert failed
    assert "target num_attention_heads 48 does not divide by tensor-parallel size 5" in result["msg"]


def test_refuses_config_padded_weights_not(drafter):
    d, _src = drafter
    run_module(drafter_pad.main, pad_args(d))
    shutil.copyfile(str(d / "model.safetensors.orig"), str(d / "model.safetensors"))
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert failed
    assert "says 48/12 heads but model.safetensors still holds unpadded attention tensors" in result["msg"]


def test_refuses_quantised_attention(drafter):
    d, src = drafter
    src = dict(src)
    src["layers.0.self_attn.q_proj.weight_scale"] = ("F32", np.ones(32 * HD, np.float32))
    write_bf16(d, src)
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert failed
    assert "tensor layers.0.self_attn.q_proj.weight_scale: cannot pad 'weight_scale' tensors" in result["msg"]


@pytest.fixture
def tiny(tmp_path):
    """The sim's tiny model shape: Qwen3, 4 q / 2 kv, head_dim 32, 2 layers, float32, two shards + index."""
    hidden, hd, q, kv, vocab = 128, 32, 4, 2, 1536
    rng = np.random.default_rng(3)
    shards = [{}, {}]
    shards[0]["model.embed_tokens.weight"] = rng.standard_normal((vocab, hidden)).astype(np.float32)
    for i in range(2):
        p = "model.layers.%d." % i
        s = shards[i]
        s[p + "self_attn.q_proj.weight"] = (rng.standard_normal((q * hd, hidden)) * 0.1).astype(np.float32)
        s[p + "self_attn.k_proj.weight"] = (rng.standard_normal((kv * hd, hidden)) * 0.1).astype(np.float32)
        s[p + "self_attn.v_proj.weight"] = (rng.standard_normal((kv * hd, hidden)) * 0.1).astype(np.float32)
        s[p + "self_attn.o_proj.weight"] = (rng.standard_normal((hidden, q * hd)) * 0.1).astype(np.float32)
        s[p + "self_attn.q_norm.weight"] = (1 + rng.standard_normal(hd) * 0.1).astype(np.float32)
        s[p + "self_attn.k_norm.weight"] = (1 + rng.standard_normal(hd) * 0.1).astype(np.float32)
        s[p + "mlp.down_proj.weight"] = rng.standard_normal((hidden, 384)).astype(np.float32)
    shards[1]["lm_head.weight"] = rng.standard_normal((vocab, hidden)).astype(np.float32)
    d = tmp_path / "tiny-glm"
    d.mkdir()
    weight_map = {}
    total = 0
    for n, s in enumerate(shards):
        fname = "model-%05d-of-00002.safetensors" % (n + 1)
        save_file(s, str(d / fname), metadata={"format": "pt"})
        for k, v in s.items():
            weight_map[k] = fname
            total += v.nbytes
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden, "head_dim": hd,
        "num_attention_heads": q, "num_key_value_heads": kv, "num_hidden_layers": 2, "vocab_size": vocab,
        "intermediate_size": 384, "torch_dtype": "float32"}, indent=2))
    return d, shards, total


def test_tiny_model_4_2_to_6_3_sharded(tiny):
    d, shards, total = tiny
    result, failed = run_module(drafter_pad.main, {"path": str(d), "tensor_parallel_size": 3,
                                                   "num_attention_heads": 6, "num_key_value_heads": 3})
    assert not failed, result
    assert result["verify"]["max_abs_diff"] <= 1e-6 and result["verify"]["layer"] == "model.layers.0.self_attn"
    hd = 32
    for n, s in enumerate(shards):
        out = load_file(str(d / ("model-%05d-of-00002.safetensors" % (n + 1))))
        assert sorted(out) == sorted(s)
        for name, a in s.items():
            if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
                extra = (2 if "q_proj" in name else 1) * hd
                expected = np.concatenate([a, np.zeros((extra, a.shape[1]), np.float32)], axis=0)
            elif name.endswith("o_proj.weight"):
                expected = np.concatenate([a, np.zeros((a.shape[0], 2 * hd), np.float32)], axis=1)
            else:
                expected = a
            assert out[name].dtype == np.float32 and np.array_equal(out[name], expected), name
    index = json.loads((d / "model.safetensors.index.json").read_text())
    # Per layer: q +2, k +1, v +1 head blocks of rows and o +2 of columns, each 32 x 128 float32.
    assert index["metadata"]["total_size"] == total + 2 * (2 + 1 + 1 + 2) * 32 * 128 * 4
    assert (d / "model.safetensors.index.json.orig").exists()
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["_tp3_head_pad"]["num_attention_heads"]) == \
        (6, 3, 4)
    again, failed = run_module(drafter_pad.main, {"path": str(d), "tensor_parallel_size": 3,
                                                  "num_attention_heads": 6, "num_key_value_heads": 3})
    assert not failed and again["changed"] is False
    assert again["sha256"] == result["sha256"]


def test_tiny_model_without_numpy(tiny, monkeypatch):
    """The sim nodes have no numpy: padding is byte work and the check runs in plain Python."""
    d, _shards, _total = tiny
    monkeypatch.setattr(drafter_pad, "HAS_NUMPY", False)
    monkeypatch.setattr(drafter_pad, "np", None)
    args = {"path": str(d), "tensor_parallel_size": 3, "num_attention_heads": 6, "num_key_value_heads": 3}
    result, failed = run_module(drafter_pad.main, args)
    assert not failed, result
    assert result["verify"]["engine"] == "python" and result["verify"]["max_abs_diff"] <= 1e-9
    monkeypatch.undo()
    with_numpy, failed = run_module(drafter_pad.main, args)
    assert not failed and with_numpy["changed"] is False
    assert with_numpy["verify"]["engine"] == "numpy"
    # Same inputs and weights: both engines see the same output scale.
    assert abs(with_numpy["verify"]["output_scale"] - result["verify"]["output_scale"]) < 1e-9


def test_large_layer_without_numpy_reports_missing_lib(tmp_path, fixture_path, monkeypatch):
    d = tmp_path / "dflash2-draft"
    d.mkdir()
    shutil.copyfile(fixture_path("model-configs", "dflash2-drafter-config.json"), str(d / "config.json"))
    monkeypatch.setattr(drafter_pad, "HAS_NUMPY", False)
    monkeypatch.setattr(drafter_pad, "np", None)
    result, failed = run_module(drafter_pad.main, pad_args(d))
    assert failed
    assert "numpy" in result["msg"] and "to verify a layer of hidden size 4096 (or set verify: false)" in result["msg"]
