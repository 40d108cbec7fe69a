#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the simulated fleet's tiny checkpoint: a random Qwen3 causal LM in HF format.

Run inside the vllm-cpu engine image (it has torch, transformers, tokenizers); sim_fleet does:
  docker run --rm -v tools/make_tiny_model.py:/work/make_tiny_model.py:ro -v .sim/models:/out \
    dgxspark-sim/vllm-cpu:0.32.0 python /work/make_tiny_model.py --out /out/tiny-glm

Geometry (docs/simulated-fleet.md): 4 query heads, 2 KV heads, head_dim 32 (hidden 128), so TP3
needs head padding like the real checkpoint; vocab 1536, a multiple of 768, so vLLM's padded
vocabulary divides by TP 2, 3 and 4; MLP width 384 divides by 2, 3 and 4 (vLLM splits it unpadded,
256 fails at TP3). The BPE tokenizer is trained on the license texts in
/usr/share/common-licenses (present in every Debian image). Seeded: the same image gives the same
bytes. Weights are bfloat16 safetensors, sharded so that model.safetensors.index.json exists.
"""
import argparse
import glob
import json
import os
import sys

SPECIALS = ["<|pad|>", "<|begin|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="checkpoint directory to write (created)")
    p.add_argument("--corpus", default="/usr/share/common-licenses", help="directory of text files for BPE training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=1536)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--intermediate-size", type=int, default=384)
    p.add_argument("--max-position", type=int, default=2048)
    return p.parse_args(argv)


def train_tokenizer(corpus_dir, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(f for f in glob.glob(os.path.join(corpus_dir, "*")) if os.path.isfile(f))
    if not files:
        raise SystemExit("no corpus files in %s" % corpus_dir)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    return tok


def main(argv):
    args = parse_args(argv)
    if args.intermediate_size % 12:
        raise SystemExit("intermediate size %d does not divide by 2, 3 and 4" % args.intermediate_size)
    if args.vocab_size % 768:
        raise SystemExit("vocab size %d is not a multiple of 768 (needed for TP 2, 3 and 4)" % args.vocab_size)
    if args.hidden_size % args.heads or args.heads % args.kv_heads:
        raise SystemExit("hidden size must divide by heads and heads by kv heads")

    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    tok = train_tokenizer(args.corpus, args.vocab_size)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
        model_max_length=args.max_position,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(args.out)
    with open(os.path.join(args.out, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE + "\n")
    # Keep the template in tokenizer_config.json too (older loaders read it only there).
    cfg_path = os.path.join(args.out, "tokenizer_config.json")
    with open(cfg_path) as f:
        tok_cfg = json.load(f)
    tok_cfg["chat_template"] = CHAT_TEMPLATE
    with open(cfg_path, "w") as f:
        json.dump(tok_cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    # Qwen3 carries its own head_dim: padded to 6 heads at TP3 the config stays valid, where a Llama
    # config is refused (hidden 128 is not a multiple of 6 heads). It is also the DFlash2 drafter's type.
    config = Qwen3Config(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden_size // args.heads,
        max_position_embeddings=args.max_position,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        use_sliding_window=False,
        torch_dtype="bfloat16",
    )
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    # Small shards so the index file exists, as in real multi-file checkpoints.
    model.save_pretrained(args.out, max_shard_size="1MB", safe_serialization=True)
    gen = os.path.join(args.out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)  # greedy/sampling defaults come from the request, not the checkpoint
    for name in os.listdir(args.out):
        os.chmod(os.path.join(args.out, name), 0o644)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"out": args.out, "params": n, "vocab": args.vocab_size, "tokenizer_vocab": tok.get_vocab_size(),
                      "files": sorted(os.listdir(args.out))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
