"""TP3 padding is exact: the tiny model served unpadded at TP1 and head-padded (4/2 -> 6/3) at TP3
across three real vLLM ranks gives the same greedy token ids (issue 8; docs/tp-padding.md;
build-machine.md addendum "vLLM multi-rank and TP3").

Self-contained on the build machine's dockerd: a seeded random Qwen3 checkpoint (the drafter's model
type; hidden 128, 4 q / 2 kv heads of 32) is written with the sim tiny model's tokenizer,
dgxspark.vllm.drafter_pad pads a copy through ansible, and the ranks run as containers of the engine
image on a test network in 198.18.44.0/24. TP1 runs first and is stopped before TP3 starts
(two cores). `--dtype float32` for the comparison.
"""
import json
import os
import shutil
import subprocess
import time
import urllib.error

import pytest

from conftest import ROOT, http_json

pytestmark = pytest.mark.e2e

IMAGE = os.environ.get("TP_PAD_E2E_IMAGE", "dgxspark-sim/vllm-cpu:0.32.0")
NET, SUBNET, GATEWAY = "dgxspark-tp3pad-e2e", "198.18.44.0/24", "198.18.44.1"
PREFIX = "dgxspark-tp3pad-"
PROMPTS = [
    "The license grants you",
    "Permission is hereby granted, free of charge,",
    "This program is distributed in the hope that",
    "Redistribution and use in source and binary forms",
    "You may not use this file except",
]
MAX_TOKENS = 24
SERVE = ["vllm", "serve", "/models/m", "--served-model-name", "m", "--dtype", "float32", "--enforce-eager",
         "--max-model-len", "512", "--port", "8000"]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def write_qwen3(out, tokenizer_dir, seed=0):
    """A seeded random Qwen3 checkpoint (the drafter's model type, issue 8), written with the stdlib codec.

    hidden 128, 4 q / 2 kv heads of 32, MLP 384 (divisible by 2, 3 and 4), vocab 1536 (a multiple of 768),
    2 layers, float32; q/k norms away from 1 so they matter. Tokenizer files come from the sim's tiny model.
    """
    import random
    import struct

    from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import write_safetensors

    os.makedirs(out)
    with open(os.path.join(tokenizer_dir, "config.json")) as f:
        tiny = json.load(f)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(tokenizer_dir, name)):
            shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    rnd = random.Random(seed)
    hidden, heads, kv, hd, mlp, vocab, layers = 128, 4, 2, 32, 384, tiny["vocab_size"], 2

    def t(shape, std=0.05, mean=0.0):
        n = 1
        for d in shape:
            n *= d
        return ("F32", list(shape), struct.pack("<%df" % n, *[mean + rnd.gauss(0.0, std) for dummy in range(n)]))

    w = {"model.embed_tokens.weight": t([vocab, hidden], 0.5), "model.norm.weight": t([hidden], 0.1, 1.0),
         "lm_head.weight": t([vocab, hidden], 0.1)}
    for i in range(layers):
        p = "model.layers.%d." % i
        w.update({
            p + "input_layernorm.weight": t([hidden], 0.1, 1.0), p + "post_attention_layernorm.weight": t([hidden], 0.1, 1.0),
            p + "self_attn.q_proj.weight": t([heads * hd, hidden]), p + "self_attn.k_proj.weight": t([kv * hd, hidden]),
            p + "self_attn.v_proj.weight": t([kv * hd, hidden]), p + "self_attn.o_proj.weight": t([hidden, heads * hd]),
            p + "self_attn.q_norm.weight": t([hd], 0.2, 1.0), p + "self_attn.k_norm.weight": t([hd], 0.2, 1.0),
            p + "mlp.gate_proj.weight": t([mlp, hidden]), p + "mlp.up_proj.weight": t([mlp, hidden]),
            p + "mlp.down_proj.weight": t([hidden, mlp]),
        })
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        write_safetensors(f, w, {"format": "pt"})
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
              "intermediate_size": mlp, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-6, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "hidden_act": "silu", "attention_bias": False,
              "tie_word_embeddings": False, "use_sliding_window": False, "torch_dtype": "float32",
              "bos_token_id": tiny.get("bos_token_id"), "eos_token_id": tiny.get("eos_token_id"),
              "pad_token_id": tiny.get("pad_token_id")}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in os.listdir(out):
        os.chmod(os.path.join(out, name), 0o644)


def docker(*args, check=True, timeout=600):
    args = list(args)
    if args[0] == "run" and os.environ.get("DGXSPARK_CGROUP_PARENT"):
        # make test's later lane: its containers share that lane's low CPU share (tools/timed_stages.py)
        args[1:1] = ["--cgroup-parent", os.environ["DGXSPARK_CGROUP_PARENT"]]
    proc = subprocess.run(["docker"] + args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode:
        raise AssertionError("docker %s: %s" % (" ".join(args[:3]), proc.stderr.strip()[-2000:]))
    return proc


def cleanup():
    for r in range(4):
        docker("rm", "-f", "%s%d" % (PREFIX, r), check=False)
    docker("network", "rm", NET, check=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if shutil.which("docker") is None or docker("image", "inspect", IMAGE, check=False).returncode:
        pytest.skip("engine image %s not available on this machine's dockerd (make sim-images)" % IMAGE)
    cleanup()
    docker("network", "create", "--subnet", SUBNET, "--gateway", GATEWAY, NET)
    d = tmp_path_factory.mktemp("tp3pad")
    os.chmod(str(d), 0o755)
    yield d
    cleanup()


def rank(r, model_dir, ip, args, env=None):
    cmd = ["run", "-d", "--name", "%s%d" % (PREFIX, r), "--network", NET, "--ip", ip, "--shm-size", "1g",
           "-v", "%s:/models/m:ro" % model_dir, "-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", "HF_HUB_OFFLINE=1", "-e", "TORCH_COMPILE_DISABLE=1",
           "-e", "GLOO_SOCKET_IFNAME=eth0", "-e", "VLLM_HOST_IP=%s" % ip]
    for k, v in (env or {}).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    docker(*(cmd + [IMAGE] + SERVE + args))


def wait_ready(ip, names, timeout=int(os.environ.get("TP_PAD_E2E_READY_S", "1200"))):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            status, dummy = http_json("http://%s:8000/health" % ip, timeout=5)
            if status == 200:
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        for name in names:
            state = docker("inspect", "-f", "{{.State.Running}}", name, check=False).stdout.strip()
            if state != "true":
                logs = docker("logs", "--tail", "40", name, check=False)
                raise AssertionError("%s exited before ready:\n%s%s" % (name, logs.stdout, logs.stderr))
        time.sleep(3)
    logs = docker("logs", "--tail", "20", names[0], check=False)
    raise AssertionError("%s not ready after %d s (a loaded machine starts vLLM slowly; TP_PAD_E2E_READY_S "
                         "raises the wait):\n%s%s" % (ip, timeout, logs.stdout, logs.stderr))


def greedy_ids(ip, head):
    out = []
    for prompt in PROMPTS:
        try:
            status, body = http_json("http://%s:8000/v1/completions" % ip, {
                "model": "m", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                "ignore_eos": True, "return_token_ids": True})
        except urllib.error.HTTPError as e:
            logs = docker("logs", "--tail", "60", head, check=False)
            raise AssertionError("%s answered %s: %s\n%s%s" % (head, e.code, e.read()[:2000], logs.stdout, logs.stderr))
        assert status == 200, body
        choice = body["choices"][0]
        assert choice.get("token_ids"), "no token_ids in the answer: %s" % json.dumps(choice)[:300]
        out.append(choice["token_ids"])
    return out


def test_tp3_padded_equals_tp1_unpadded(workdir):
    # Tokenizer of the sim's tiny model (sim_up writes it to .sim/models/tiny-glm); generated here otherwise.
    tok_dir = os.environ.get("TP_PAD_E2E_TOKENIZER", os.path.join(ROOT, ".sim", "models", "tiny-glm"))
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        tools = os.path.join(ROOT, "tools", "make_tiny_model.py")
        docker("run", "--rm", "--network", "none", "-v", "%s:/work/m.py:ro" % tools, "-v", "%s:/out" % workdir,
               IMAGE, "python", "/work/m.py", "--out", "/out/tiny-glm", "--seed", "0", timeout=3600)
        tok_dir = os.path.join(str(workdir), "tiny-glm")
    write_qwen3(os.path.join(str(workdir), "unpadded"), tok_dir)
    unpadded, padded = os.path.join(str(workdir), "unpadded"), os.path.join(str(workdir), "padded")
    shutil.copytree(unpadded, padded)
    os.chmod(padded, 0o755)
    with open(os.path.join(unpadded, "config.json")) as f:
        released = json.load(f)
    assert (released["num_attention_heads"], released["num_key_value_heads"]) == (4, 2)

    pad = subprocess.run(
        ["ansible", "localhost", "-c", "local", "-m", "dgxspark.vllm.drafter_pad", "-a",
         json.dumps({"path": padded, "tensor_parallel_size": 3, "num_attention_heads": 6, "num_key_value_heads": 3,
                     "expect_num_attention_heads": 4, "expect_num_key_value_heads": 2})],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert pad.returncode == 0, pad.stdout + pad.stderr
    assert "padded 4/2 -> 6/3 heads" in pad.stdout
    with open(os.path.join(padded, "config.json")) as f:
        cfg = json.load(f)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (6, 3)

    # TP1, unpadded.
    rank(0, unpadded, "198.18.44.10", [])
    wait_ready("198.18.44.10", [PREFIX + "0"])
    reference = greedy_ids("198.18.44.10", PREFIX + "0")
    docker("rm", "-f", PREFIX + "0")

    # TP3, padded: ranks 2 and 1 headless first, then rank 0 (catalogue rendezvous_timeout).
    ips = {0: "198.18.44.11", 1: "198.18.44.12", 2: "198.18.44.13"}
    for r in (2, 1, 0):
        args = ["--tensor-parallel-size", "3", "--distributed-executor-backend", "mp", "--nnodes", "3",
                "--node-rank", str(r), "--master-addr", ips[0], "--master-port", "29501"]
        rank(r, padded, ips[r], args + (["--headless"] if r else []))
    wait_ready(ips[0], [PREFIX + str(r) for r in (0, 1, 2)])
    tp3 = greedy_ids(ips[0], PREFIX + "0")

    assert [len(ids) for ids in reference] == [MAX_TOKENS] * len(PROMPTS)
    assert tp3 == reference
