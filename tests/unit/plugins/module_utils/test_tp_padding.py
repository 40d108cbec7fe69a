"""Pure padding logic (catalogue drafter_heads; docs/tp-padding.md)."""
import io
import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from ansible_collections.dgxspark.vllm.plugins.module_utils import tp_padding as tpp
from ansible_collections.dgxspark.vllm.tests.unit.conftest import read_fixture


def glm():
    return json.loads(read_fixture("model-configs", "glm-5.3-flash-config.json"))


@pytest.mark.parametrize("key,value,tp,expected", [
    ("text_config.num_attention_heads", 64, 3, 66),       # ceil(64/3)*3 (docs/tp-padding.md)
    ("text_config.linear_attn_config.num_heads", 64, 3, 66),
    ("text_config.moe_intermediate_size", 2048, 3, 2112),  # lcm(3, 64) = 192 -> 11 * 192; not 2049
    ("text_config.vocab_size", 154880, 3, 154944),         # what the embedding pads to in-module
    ("text_config.intermediate_size", 12288, 3, 12288),    # divides (catalogue drafter_heads)
    ("text_config.n_routed_experts", 288, 3, 288),
    ("text_config.moe_intermediate_size", 2048, 2, 2048),  # identity for tp in 1, 2, 4, 8
    ("text_config.moe_intermediate_size", 2048, 4, 2048),
    ("text_config.num_attention_heads", 64, 8, 64),
])
def test_candidate(key, value, tp, expected):
    assert tpp.candidate(key, value, tp) == expected


def test_candidate_matches_reference_per_rank_split():
    # tp-padding-reference.yaml: 704 MoE columns and 51648 vocab rows per rank at TP3.
    assert tpp.candidate("moe_intermediate_size", 2048, 3) // 3 == 704
    assert tpp.candidate("vocab_size", 154880, 3) // 3 == 51648
    assert tpp.candidate("num_attention_heads", 64, 3) // 3 == 22


def test_head_pad_candidate():
    assert tpp.head_pad_candidate(32, 8, 3) == (36, 9)   # catalogue drafter_heads: divides but does not boot; lanes use 48/12
    assert tpp.head_pad_candidate(4, 2, 3) == (6, 3)     # the sim's tiny model
    with pytest.raises(tpp.PaddingError, match="not a multiple"):
        tpp.head_pad_candidate(6, 4, 3)


def test_dotted_get_set():
    cfg = glm()
    assert tpp.get_dotted(cfg, "text_config.linear_attn_config.num_heads") == 64
    assert tpp.get_dotted(cfg, "text_config.linear_num_heads", None) is None
    with pytest.raises(KeyError):
        tpp.get_dotted(cfg, "text_config.nope")
    tpp.set_dotted(cfg, "text_config.linear_attn_config.num_heads", 66)
    assert cfg["text_config"]["linear_attn_config"]["num_heads"] == 66
    with pytest.raises(KeyError):
        tpp.set_dotted(cfg, "text_config.linear_num_heads", 66)  # only with create=True
    tpp.set_dotted(cfg, "text_config.linear_num_heads", 66, create=True)
    assert cfg["text_config"]["linear_num_heads"] == 66
    with pytest.raises(KeyError):
        tpp.set_dotted(cfg, "vision_config.linear_num_heads", 66, create=True)  # never creates levels


def test_creatable_only_linear_num_heads_under_an_existing_text_config():
    cfg = glm()
    assert tpp.creatable(cfg, "text_config.linear_num_heads") is True
    assert tpp.creatable(cfg, "text_config.linear_attn_config.num_heads") is False  # conditional (docs/tp-padding.md)
    assert tpp.creatable(cfg, "text_config.vocab_size") is False
    assert tpp.creatable({"num_attention_heads": 4}, "text_config.linear_num_heads") is False


def test_config_plan_states():
    cfg = glm()
    targets = {"text_config.num_attention_heads": 66, "text_config.moe_intermediate_size": 2112,
               "text_config.linear_num_heads": 66}
    plan = tpp.config_plan(cfg, targets, 3)
    assert plan["action"] == "pad"
    assert plan["keys"]["text_config.num_attention_heads"] == {
        "current": 64, "target": 66, "original": 64, "candidate": 66, "state": "needs_pad"}
    # The released capture has no text_config.linear_num_heads; the runtime reads it, so it is written
    # with the padded head count (docs/tp-padding.md: unconditional, unlike linear_attn_config.num_heads).
    assert plan["keys"]["text_config.linear_num_heads"] == {
        "current": None, "target": 66, "original": None, "candidate": None, "state": "needs_pad", "create": True}
    assert tpp.apply_plan(cfg, plan) == {"text_config.num_attention_heads": (64, 66),
                                         "text_config.moe_intermediate_size": (2048, 2112),
                                         "text_config.linear_num_heads": (None, 66)}
    assert cfg["text_config"]["linear_num_heads"] == 66
    original = glm()
    again = tpp.config_plan(cfg, targets, 3, original=original)
    assert again["action"] == "at_target"
    # The same padded file at tp 2: the released geometry divides; drift reported.
    at2 = tpp.config_plan(cfg, targets, 2, original=original)
    assert at2["action"] == "divides"
    assert at2["drift"] == ["text_config.moe_intermediate_size", "text_config.num_attention_heads"]


def test_config_plan_refusals():
    cfg = glm()
    with pytest.raises(tpp.PaddingError, match=r"target 1920 for text_config.moe_intermediate_size is below "
                                               r"the released value 2048"):
        tpp.config_plan(cfg, {"text_config.moe_intermediate_size": 1920, "text_config.num_attention_heads": 66}, 3)
    with pytest.raises(tpp.PaddingError, match="must be a positive integer"):
        tpp.config_plan(cfg, {"text_config.num_attention_heads": "66"}, 3)
    assert tpp.config_plan(cfg, {}, 3)["action"] == "empty"
    with pytest.raises(tpp.PaddingError, match=r"target 64 for text_config.linear_num_heads does not divide by "
                                               r"tensor-parallel size 3"):
        tpp.config_plan(cfg, {"text_config.num_attention_heads": 66, "text_config.linear_num_heads": 64}, 3)


def test_linear_num_heads_not_created_where_tp_divides_or_nothing_else_is_present():
    targets = {"text_config.num_attention_heads": 66, "text_config.linear_num_heads": 66}
    at2 = tpp.config_plan(glm(), targets, 2)
    assert at2["action"] == "divides"
    assert at2["keys"]["text_config.linear_num_heads"]["state"] == "absent"
    assert "create" not in at2["keys"]["text_config.linear_num_heads"]
    only = tpp.config_plan(glm(), {"text_config.linear_num_heads": 66}, 3)
    assert only["action"] == "empty"


def test_file_padded_before_linear_num_heads_was_written_gets_it_added():
    # A file padded by an earlier release (every other key at target, backup present, key missing) is not
    # refused as inconsistent: the missing key alone is written.
    original = glm()
    cfg = glm()
    cfg["text_config"].update({"num_attention_heads": 66, "num_key_value_heads": 66, "moe_intermediate_size": 2112})
    cfg["text_config"]["linear_attn_config"]["num_heads"] = 66
    targets = {"text_config.num_attention_heads": 66, "text_config.num_key_value_heads": 66,
               "text_config.linear_num_heads": 66, "text_config.linear_attn_config.num_heads": 66,
               "text_config.moe_intermediate_size": 2112}
    plan = tpp.config_plan(cfg, targets, 3, original=original)
    assert plan["action"] == "pad"
    assert tpp.apply_plan(cfg, plan) == {"text_config.linear_num_heads": (None, 66)}
    assert tpp.config_plan(cfg, targets, 3, original=original)["action"] == "at_target"


def test_divisibility():
    cfg = glm()
    keys = ["text_config.num_attention_heads", "text_config.moe_intermediate_size", "text_config.linear_num_heads",
            "text_config.intermediate_size"]
    assert tpp.divisibility(cfg, keys, 3) == [("text_config.num_attention_heads", 64),
                                              ("text_config.moe_intermediate_size", 2048)]
    assert tpp.divisibility(cfg, keys, 4) == []
    # kv heads fewer than tp are replicated by vLLM when tp is a multiple of them.
    tiny = {"num_attention_heads": 4, "num_key_value_heads": 2}
    assert tpp.divisibility(tiny, ["num_attention_heads", "num_key_value_heads"], 4) == []
    assert tpp.divisibility(tiny, ["num_attention_heads", "num_key_value_heads"], 3) == [
        ("num_attention_heads", 4), ("num_key_value_heads", 2)]
    assert tpp.divisibility({"num_key_value_heads": 3}, ["num_key_value_heads"], 4) == [("num_key_value_heads", 3)]


def drafter_cfg():
    return json.loads(read_fixture("model-configs", "dflash2-drafter-config.json"))


def test_heads_plan_drafter():
    geo = tpp.heads_plan(drafter_cfg(), 48, 12, 3, 32, 8)
    assert (geo["state"], geo["q"], geo["kv"], geo["group"], geo["head_dim"], geo["hidden"]) == \
        ("pad", 32, 8, 4, 128, 4096)
    assert tpp.heads_plan(drafter_cfg(), 48, 12, 2)["state"] == "divides"
    padded = tpp.padded_config(drafter_cfg(), geo, 3)
    assert tpp.heads_plan(padded, 48, 12, 3, 32, 8)["state"] == "at_target"
    assert padded["_tp3_head_pad"]["num_attention_heads"] == 32
    # A padded file run at tp 2: the record says 32/8, which divides by 2.
    assert tpp.heads_plan(padded, 48, 12, 2)["state"] == "divides"


def test_heads_plan_refusals():
    cfg = drafter_cfg()
    cfg["num_attention_heads"], cfg["num_key_value_heads"] = 48, 12
    with pytest.raises(tpp.PaddingError, match="expected an unpadded 32/8 checkpoint .* found 48/12"):
        tpp.heads_plan(cfg, 48, 12, 3, 32, 8)
    with pytest.raises(tpp.PaddingError, match="heads are 40/10, neither the released 32/8 nor the target 48/12"):
        padded = tpp.padded_config(drafter_cfg(), tpp.heads_plan(drafter_cfg(), 48, 12, 3), 3)
        padded["num_attention_heads"], padded["num_key_value_heads"] = 40, 10
        tpp.heads_plan(padded, 48, 12, 3)


def test_tensor_pad_spec():
    geo = tpp.heads_plan(drafter_cfg(), 48, 12, 3)
    assert tpp.tensor_pad_spec("layers.0.self_attn.q_proj.weight", [4096, 4096], geo) == (0, 4096, 6144, "pad")
    assert tpp.tensor_pad_spec("layers.0.self_attn.k_proj.weight", [1024, 4096], geo) == (0, 1024, 1536, "pad")
    assert tpp.tensor_pad_spec("layers.0.self_attn.o_proj.weight", [4096, 6144], geo) == \
        (1, 4096, 6144, "at_target")
    assert tpp.tensor_pad_spec("layers.0.self_attn.q_norm.weight", [128], geo) is None
    assert tpp.tensor_pad_spec("layers.0.mlp.up_proj.weight", [12288, 4096], geo) is None
    with pytest.raises(tpp.PaddingError, match=r"axis 0 is 1000, expected 1024 \(source 8 heads x 128\) or 1536"):
        tpp.tensor_pad_spec("layers.0.self_attn.v_proj.weight", [1000, 4096], geo)


def test_writer_matches_safetensors_library(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {"b.weight": rng.standard_normal((3, 5)).astype(np.float32),
              "a.bias": rng.standard_normal(7).astype(np.float16),
              "c": np.arange(4, dtype=np.int64)}
    save_file(arrays, str(tmp_path / "ref.safetensors"), metadata={"format": "pt"})
    raw = {"b.weight": ("F32", [3, 5], arrays["b.weight"].tobytes()), "a.bias": ("F16", [7], arrays["a.bias"].tobytes()),
           "c": ("I64", [4], arrays["c"].tobytes())}
    buf = io.BytesIO()
    tpp.write_safetensors(buf, raw, {"format": "pt"})
    assert buf.getvalue() == (tmp_path / "ref.safetensors").read_bytes()
    header, meta, start = tpp.read_header(str(tmp_path / "ref.safetensors"))
    assert meta == {"format": "pt"}
    data = tpp.tensor_bytes(str(tmp_path / "ref.safetensors"), start, header["b.weight"])
    assert np.array_equal(tpp.as_matrix(np, "F32", [3, 5], data), arrays["b.weight"].astype(np.float64))
    assert tpp.as_matrix(None, "F32", [3, 5], data) == arrays["b.weight"].astype(np.float64).tolist()
    # Copy-from-file sources give the same bytes.
    b, e = header["c"]["data_offsets"]
    raw["c"] = ("I64", [4], (str(tmp_path / "ref.safetensors"), start + b, e - b))
    buf2 = io.BytesIO()
    tpp.write_safetensors(buf2, raw, {"format": "pt"})
    assert buf2.getvalue() == buf.getvalue()


def test_bf16_decode():
    data = np.array([0x3F80, 0xC000, 0x0000, 0x3E80], dtype="<u2").tobytes()  # 1.0, -2.0, 0.0, 0.25
    assert tpp.decode_floats(data, "BF16") == [1.0, -2.0, 0.0, 0.25]
    assert tpp.as_matrix(np, "BF16", [2, 2], data).tolist() == [[1.0, -2.0], [0.0, 0.25]]


def test_pad_and_cut_bytes():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = tpp.pad_bytes(a.tobytes(), [3, 4], 0, 5, 4)
    assert np.array_equal(np.frombuffer(rows, np.float32).reshape(5, 4), np.vstack([a, np.zeros((2, 4))]))
    cols = tpp.pad_bytes(a.tobytes(), [3, 4], 1, 6, 4)
    assert np.array_equal(np.frombuffer(cols, np.float32).reshape(3, 6), np.hstack([a, np.zeros((3, 2))]))
    kept, tail = tpp.cut_bytes(cols, [3, 6], 1, 4, 4)
    assert kept == a.tobytes() and tail == b"\0" * 24
    kept, tail = tpp.cut_bytes(rows, [5, 4], 0, 3, 4)
    assert kept == a.tobytes() and tail == b"\0" * 32


def naive_attention(x, w, nq, nkv, hd):
    """Per-head loops, independent of attention_forward: q head h reads kv head h // (nq // nkv)."""
    seq = x.shape[0]
    out_heads = []
    for h in range(nq):
        g = h // (nq // nkv)
        q = x @ w["q"][h * hd:(h + 1) * hd].T
        k = x @ w["k"][g * hd:(g + 1) * hd].T
        v = x @ w["v"][g * hd:(g + 1) * hd].T
        ctx = np.zeros((seq, hd))
        for i in range(seq):
            s = np.array([q[i] @ k[j] / np.sqrt(hd) for j in range(i + 1)])
            p = np.exp(s - s.max())
            p /= p.sum()
            ctx[i] = p @ v[:i + 1]
        out_heads.append(ctx)
    return np.concatenate(out_heads, axis=1) @ w["o"].T


def small_weights(nq=4, nkv=2, hd=8, hidden=24, seed=5):
    rng = np.random.default_rng(seed)
    return {"q": rng.standard_normal((nq * hd, hidden)), "k": rng.standard_normal((nkv * hd, hidden)),
            "v": rng.standard_normal((nkv * hd, hidden)), "o": rng.standard_normal((hidden, nq * hd))}


def test_attention_forward_matches_naive_gqa():
    w = small_weights()
    x = np.random.default_rng(0).standard_normal((6, 24))
    assert np.allclose(tpp.attention_forward(np, x, w, 4, 2, 8), naive_attention(x, w, 4, 2, 8), atol=1e-10)


def test_python_forward_matches_numpy_forward():
    w = small_weights()
    rng = np.random.default_rng(2)
    w["q_norm"], w["k_norm"] = 1 + 0.1 * rng.standard_normal(8), 1 + 0.1 * rng.standard_normal(8)
    w["q_bias"], w["k_bias"], w["v_bias"] = (rng.standard_normal(n * 8) for n in (4, 2, 2))
    x = tpp.verify_inputs(24, seed=1, seq=5)
    ref = tpp.attention_forward(np, np.asarray(x), w, 4, 2, 8)
    py = tpp.attention_forward_py(x, dict((k, v.tolist()) for k, v in w.items()), 4, 2, 8)
    assert np.max(np.abs(ref - np.asarray(py))) < 1e-9


def _pad(w, nq, nkv, tq, tkv, hd, interleave=False):
    out = {}
    for key, n, t in (("q", nq, tq), ("k", nkv, tkv), ("v", nkv, tkv)):
        if interleave and key == "q":
            # wrong layout: one zero head after each real group of q heads (breaks i // group)
            blocks = []
            group = nq // nkv
            for g in range(nkv):
                blocks.append(w[key][g * group * hd:(g + 1) * group * hd])
                blocks.append(np.zeros((hd, w[key].shape[1])))
            out[key] = np.concatenate(blocks)
        else:
            out[key] = np.concatenate([w[key], np.zeros(((t - n) * hd, w[key].shape[1]))])
    if interleave:
        cols = []
        group = nq // nkv
        for g in range(nkv):
            cols.append(w["o"][:, g * group * hd:(g + 1) * group * hd])
            cols.append(np.zeros((w["o"].shape[0], hd)))
        out["o"] = np.concatenate(cols, axis=1)
    else:
        out["o"] = np.concatenate([w["o"], np.zeros((w["o"].shape[0], (tq - nq) * hd))], axis=1)
    return out


def test_verify_layer_exact_for_appended_and_catches_interleaved():
    w = small_weights()
    geo = {"q": 4, "kv": 2, "target_q": 6, "target_kv": 3, "head_dim": 8, "hidden": 24}
    diff, scale = tpp.verify_layer(np, w, _pad(w, 4, 2, 6, 3, 8), geo)
    assert diff <= 1e-12 and scale > 1
    # Interleaving the pad q heads moves real q heads onto other kv heads: the check must see it.
    diff, scale = tpp.verify_layer(np, w, _pad(w, 4, 2, 6, 3, 8, interleave=True), geo)
    assert diff > 1e-2 * scale

    # Same verdicts in plain Python (nodes without numpy).
    def as_lists(d):
        return dict((k, v.tolist()) for k, v in d.items())

    diff_py, scale_py = tpp.verify_layer(None, as_lists(w), as_lists(_pad(w, 4, 2, 6, 3, 8)), geo)
    assert diff_py <= 1e-12 and abs(scale_py - tpp.verify_layer(np, w, _pad(w, 4, 2, 6, 3, 8), geo)[1]) < 1e-9
    diff_py, scale_py = tpp.verify_layer(None, as_lists(w), as_lists(_pad(w, 4, 2, 6, 3, 8, interleave=True)), geo)
    assert diff_py > 1e-2 * scale_py


def test_verify_cost():
    # DFlash2 drafter 32/8 -> 48/12 at hidden 4096, head_dim 128: far above the plain-Python budget.
    geo = {"q": 32, "kv": 8, "target_q": 48, "target_kv": 12, "head_dim": 128, "hidden": 4096}
    assert tpp.verify_cost(geo) == 16 * 4096 * 48 * 128 + 16 * 32 * 128 * 4096 + 256 * 32 * 128 + \
        16 * 4096 * 72 * 128 + 16 * 48 * 128 * 4096 + 256 * 48 * 128
