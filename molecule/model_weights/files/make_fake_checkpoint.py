#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a small fake Hugging Face checkpoint (stdlib only): config, tokenizer, chat template,
indexed safetensors shards with deterministic bytes. Usage: make_fake_checkpoint.py DIR model|drafter"""
import json
import os
import random
import struct
import sys

out, kind = sys.argv[1], sys.argv[2]
if os.path.exists(os.path.join(out, "config.json")):
    print("present")
    sys.exit(0)
os.makedirs(out, exist_ok=True)
rng = random.Random(7 if kind == "model" else 8)


def shard(path, tensors):
    header, data = {}, bytearray()
    for name, shape in tensors:
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + n]}
        data += bytes(rng.getrandbits(8) for _ in range(n))
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + bytes(data))


config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
          "vocab_size": 1536, "torch_dtype": "float32"}
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
if kind == "drafter":
    shard(os.path.join(out, "model.safetensors"), [("layers.0.self_attn.q_proj.weight", (128, 128))])
else:
    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(template)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}, f)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}, f)
    weight_map = {}
    for i in range(2):
        name = "model-%05d-of-00002.safetensors" % (i + 1)
        tensors = [("model.layers.%d.mlp.down_proj.weight" % i, (256, 512)),
                   ("model.layers.%d.self_attn.q_proj.weight" % i, (128, 128))]
        shard(os.path.join(out, name), tensors)
        weight_map.update((t, name) for t, _s in tensors)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
for dirpath, _d, files in os.walk(out):
    os.chmod(dirpath, 0o755)
    for n in files:
        os.chmod(os.path.join(dirpath, n), 0o644)
print("created")
