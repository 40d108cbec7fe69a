"""TP3 padding is exact: the tiny model served unpadded at TP1 and head-padded (4/2 -> 6/3) at TP3
across three real vLLM ranks gives the same greedy token ids (issue 8; operations spec D.3;
build-machine.md addendum "vLLM multi-rank and TP3").

Self-contained on the build machine's dockerd: the engine image generates the tiny checkpoint
(tools/make_tiny_model.py), dgxspark.vllm.drafter_pad pads a copy through ansible, and the ranks run
as containers on a test network in 198.18.44.0/24. TP1 runs first and is stopped before TP3 starts
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


# Rewrite the generated checkpoint as Qwen3 (same tokenizer, hidden 128, 4 q / 2 kv heads of 32,
# MLP width 384 = divisible by 2, 3 and 4), seeded, float32, q/k norms randomised so they matter.
QWEN3 = """
import glob, json, os, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
d = "/out/unpadded"
old = json.load(open(os.path.join(d, "config.json")))
for f in glob.glob(os.path.join(d, "*.safetensors")) + glob.glob(os.path.join(d, "*.index.json")):
    os.remove(f)
torch.manual_seed(0)
cfg = Qwen3Config(vocab_size=old["vocab_size"], hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                  bos_token_id=old.get("bos_token_id"), eos_token_id=old.get("eos_token_id"),
                  pad_token_id=old.get("pad_token_id"), tie_word_embeddings=False, torch_dtype="float32")
m = Qwen3ForCausalLM(cfg)
with torch.no_grad():
    for name, p in m.named_parameters():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            p.copy_(1 + 0.2 * torch.randn_like(p))
m.save_pretrained(d, max_shard_size="1MB", safe_serialization=True)
for f in os.listdir(d):
    os.chmod(os.path.join(d, f), 0o644)
"""


def docker(*args, check=True, timeout=600):
    proc = subprocess.run(["docker"] + list(args), capture_output=True, text=True, timeout=timeout, check=False)
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
           "-v", "%s:/models/m:ro" % model_dir, "-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", "HF_HUB_OFFLINE=1",
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


def greedy_ids(ip):
    out = []
    for prompt in PROMPTS:
        status, body = http_json("http://%s:8000/v1/completions" % ip, {
            "model": "m", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True})
        assert status == 200, body
        choice = body["choices"][0]
        assert choice.get("token_ids"), "no token_ids in the answer: %s" % json.dumps(choice)[:300]
        out.append(choice["token_ids"])
    return out


def test_tp3_padded_equals_tp1_unpadded(workdir):
    tools = os.path.join(ROOT, "tools", "make_tiny_model.py")
    docker("run", "--rm", "--network", "none", "-v", "%s:/work/m.py:ro" % tools, "-v", "%s:/out" % workdir, IMAGE,
           "python", "/work/m.py", "--out", "/out/unpadded", "--seed", "0")
    # Qwen3, the drafter's model type (issue 8): LlamaConfig in this image refuses hidden 128 with 6 heads
    # ("hidden size (128) is not a multiple of the number of attention heads (6)"); Qwen3 has its own head_dim.
    docker("run", "--rm", "--network", "none", "-v", "%s:/out" % workdir, IMAGE, "python", "-c", QWEN3)
    unpadded, padded = os.path.join(str(workdir), "unpadded"), os.path.join(str(workdir), "padded")
    shutil.copytree(unpadded, padded)
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
    reference = greedy_ids("198.18.44.10")
    docker("rm", "-f", PREFIX + "0")

    # TP3, padded: ranks 2 and 1 headless first, then rank 0 (operations spec A.4).
    ips = {0: "198.18.44.11", 1: "198.18.44.12", 2: "198.18.44.13"}
    for r in (2, 1, 0):
        args = ["--tensor-parallel-size", "3", "--distributed-executor-backend", "mp", "--nnodes", "3",
                "--node-rank", str(r), "--master-addr", ips[0], "--master-port", "29501"]
        rank(r, padded, ips[r], args + (["--headless"] if r else []))
    wait_ready(ips[0], [PREFIX + str(r) for r in (0, 1, 2)])
    tp3 = greedy_ids(ips[0])

    assert [len(ids) for ids in reference] == [MAX_TOKENS] * len(PROMPTS)
    assert tp3 == reference
