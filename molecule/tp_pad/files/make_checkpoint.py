# SPDX-License-Identifier: MIT
"""Write a small seeded safetensors checkpoint (stdlib only) for the tp_pad scenario.

--style drafter: DFlash2-style names (layers.N.self_attn.*, bf16), the real drafter's 32 q / 8 kv heads
                 (docs/tp-padding.md) with hidden size and head_dim scaled down;
--style tiny:    the sim's tiny model shape (model.layers.N.self_attn.*, float32, q/k norms), sharded
                 with model.safetensors.index.json.
"""
import argparse
import json
import os
import random
import struct


def tensor(rnd, shape, dtype, scale=0.05):
    n = 1
    for d in shape:
        n *= d
    vals = [rnd.gauss(0.0, scale) for dummy in range(n)]
    if dtype == "F32":
        return struct.pack("<%df" % n, *vals)
    words = struct.unpack("<%dI" % n, struct.pack("<%df" % n, *vals))
    return struct.pack("<%dH" % n, *[w >> 16 for w in words])  # bf16 by truncation


def write(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return offset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--style", choices=["drafter", "tiny"], required=True)
    ap.add_argument("--q", type=int, required=True)
    ap.add_argument("--kv", type=int, required=True)
    ap.add_argument("--head-dim", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if os.path.exists(os.path.join(a.out, "config.json")):
        print("exists")
        return
    os.makedirs(a.out, exist_ok=True)
    rnd = random.Random(a.seed)
    dtype = "BF16" if a.style == "drafter" else "F32"
    prefix = "layers.%d." if a.style == "drafter" else "model.layers.%d."
    shards = [{} for dummy in range(1 if a.style == "drafter" else 2)]
    for i in range(a.layers):
        p = prefix % i
        s = shards[i % len(shards)]
        s[p + "self_attn.q_proj.weight"] = (dtype, [a.q * a.head_dim, a.hidden],
                                            tensor(rnd, [a.q * a.head_dim, a.hidden], dtype))
        for proj in ("k_proj", "v_proj"):
            s[p + "self_attn.%s.weight" % proj] = (dtype, [a.kv * a.head_dim, a.hidden],
                                                   tensor(rnd, [a.kv * a.head_dim, a.hidden], dtype))
        s[p + "self_attn.o_proj.weight"] = (dtype, [a.hidden, a.q * a.head_dim],
                                            tensor(rnd, [a.hidden, a.q * a.head_dim], dtype))
        for norm in ("q_norm", "k_norm"):
            s[p + "self_attn.%s.weight" % norm] = (dtype, [a.head_dim], tensor(rnd, [a.head_dim], dtype, 1.0))
        s[p + "mlp.down_proj.weight"] = (dtype, [a.hidden, 3 * a.hidden], tensor(rnd, [a.hidden, 3 * a.hidden], dtype))
    config = {"architectures": ["DFlash2DraftModel" if a.style == "drafter" else "Qwen3ForCausalLM"],
              "model_type": "qwen3", "hidden_size": a.hidden, "head_dim": a.head_dim,
              "num_attention_heads": a.q, "num_key_value_heads": a.kv, "num_hidden_layers": a.layers,
              "intermediate_size": 3 * a.hidden, "vocab_size": 1536}
    if len(shards) == 1:
        write(os.path.join(a.out, "model.safetensors"), shards[0])
    else:
        weight_map, total = {}, 0
        for n, s in enumerate(shards):
            fname = "model-%05d-of-%05d.safetensors" % (n + 1, len(shards))
            total += write(os.path.join(a.out, fname), s)
            weight_map.update((k, fname) for k in s)
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print("written")


if __name__ == "__main__":
    main()
