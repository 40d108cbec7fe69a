"""Golden launch lines: render each seed lane with the source fleet's facts and compare with
tests/fixtures/launch-lines/*.yaml (copied from the shared fixtures; docs/lanes.md).

The facts fed in are the ones the source fleet had: per-rank rendezvous IP, the head's address,
the NCCL/Gloo device names rdma_fabric computes on that fleet, the fix-file mounts kernel_fix
publishes, and the site paths of the sample cluster file (tp3-y3-cluster.env.example).
"""
import copy
import json
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import deep_merge, validate_lane
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import PER_HOST_ENV, render_rank

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "launch-lines")

# Site paths of the source fleets: $HOME of user 'user'; the Y3 cluster file's MODEL_DIR; Y3's
# default overlay dir (build-indexer-overlay --out ~/src/glm53-overlay, docs/tp-padding.md) and upstream clone.
SITE = {
    "$HOME": "/home/user",
    "~": "/home/user",
    "$MODEL_DIR": "/home/user/models/GLM-5.3-Flash-NVFP4",
    "$OVERLAY_DIR": "/home/user/src/glm53-overlay",
    "$UPSTREAM_DIR": "/home/user/src/glm53-upstream",
}


def expand(path):
    for key in sorted(SITE, key=len, reverse=True):
        if path.startswith(key + "/") or path == key:
            return SITE[key] + path[len(key):]
    return path


def golden(name):
    with open(os.path.join(GOLDEN, name + ".yaml")) as f:
        return yaml.safe_load(f)


def lane(name, overrides=None):
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        data = deep_merge(yaml.safe_load(f), overrides or {})
    assert validate_lane(data, name) == []
    return data


def fabric_env(g):
    """What rdma_fabric computes per host on the source fleet: device names and the fabric subnet."""
    keys = set(PER_HOST_ENV) | {"NCCL_IB_ADDR_RANGE"}
    return dict((k, v) for k, v in g["env"].items() if k in keys and k != "VLLM_HOST_IP")


def fix_mounts(g, the_lane, key="mounts"):
    """kernel_fix_mounts as kernel_fix publishes them: one per fix file of the lane."""
    wanted = set(f["container_path"] for f in the_lane.get("fix_files") or [])
    out = []
    for m in g[key]:
        if m["container"] in wanted:
            mode = m["mode"] if m["mode"] in ("ro", "rw") else "ro"
            out.append({"host": expand(m["host"]), "container": m["container"], "mode": mode})
    return out


def head_ip(g):
    return g["env_per_rank"][0]["VLLM_HOST_IP"]


def facts(g, the_lane, rank, key="mounts"):
    return {
        "rank": rank,
        "host_ip": g["env_per_rank"][rank]["VLLM_HOST_IP"],
        "master_addr": head_ip(g),
        "fabric_env": fabric_env(g),
        "kernel_fix_mounts": fix_mounts(g, the_lane, key),
    }


def expected_env(g, rank):
    env = dict(g["env"])
    env["VLLM_HOST_IP"] = g["env_per_rank"][rank]["VLLM_HOST_IP"]
    return env


def assert_mounts_equal(rendered, stated):
    """Same targets, same host paths; the mode too wherever the golden states it (docker -v order is free)."""
    got = dict((m["container"], (m["host"], m["mode"])) for m in rendered)
    want = dict((m["container"], (expand(m["host"]), m["mode"])) for m in stated)
    assert len(got) == len(rendered) and len(want) == len(stated)
    assert sorted(got) == sorted(want)
    for target, (host, mode) in want.items():
        assert got[target][0] == host, target
        if mode != "not stated":
            assert got[target][1] == mode, target


def parse_args(command, positional):
    assert command[0] == positional
    out, idx = {}, 1
    while idx < len(command):
        flag = command[idx]
        assert flag.startswith("--"), "stray value %r in %r" % (flag, command)
        if idx + 1 < len(command) and not command[idx + 1].startswith("--"):
            assert flag not in out, "flag %s given twice" % flag
            out[flag] = command[idx + 1]
            idx += 2
        else:
            out[flag] = True
            idx += 1
    return out


# ---------------------------------------------------------------------------------------------
# TP2 DFlash2: the one launch line given verbatim; argv order, env and mounts must be identical.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [0, 1])
def test_tp2_dflash2_equals_the_t2_launcher(rank):
    g = golden("tp2-dflash2-t2-abb38bb")
    the_lane = lane("tp2_dflash2")
    spec = render_rank(the_lane, facts(g, the_lane, rank))
    assert spec["image"] == g["image"]
    assert spec["docker_argv"] == g["docker_argv"]
    assert spec["command"] == g["serve_argv_rendered"][rank]
    assert spec["env"] == expected_env(g, rank)
    assert_mounts_equal(spec["mounts"], g["mounts"])
    assert the_lane["checkpoint"]["host_path"] == g["weights_host_path"]


def test_tp2_dflash2_ranks_hash_equal_and_differ_only_in_per_host_values():
    g = golden("tp2-dflash2-t2-abb38bb")
    the_lane = lane("tp2_dflash2")
    head = render_rank(the_lane, facts(g, the_lane, 0))
    worker = render_rank(the_lane, facts(g, the_lane, 1))
    assert head["spec_hash"] == worker["spec_hash"]
    assert head["per_host"]["VLLM_HOST_IP"] == "192.168.192.2"
    assert worker["per_host"]["VLLM_HOST_IP"] == "192.168.192.4"
    assert worker["labels"]["dgxspark.vllm.spec-hash"] == worker["spec_hash"]
    assert worker["labels"]["dgxspark.vllm.rank"] == "1"


# ---------------------------------------------------------------------------------------------
# Partial goldens: every stated argument with its exact value, unstated ones absent, env and
# stated mounts equal. Values the golden gives in words are resolved from the sources here.
# ---------------------------------------------------------------------------------------------

LEGACY_TP4 = {
    # tp4_dflash2_1m turned into the legacy MTP launcher by single-key overrides (inventory path).
    "image": {"reference": "radixark/vllm-glm53-flash:sm121-v8"},
    "checkpoint": {"host_path": "/var/tmp/glm-5.3-flash-nvfp4", "guard_mode": "mtp"},
    "drafter": None,
    "fix_files": [],
    "serve": {"max_num_seqs": 6, "max_num_batched_tokens": None, "enforce_eager": True,
              "compilation_config": None, "block_size": None,
              "kv_policy": {"mode": "pin", "bytes": 9663676416},
              # null drops a key the base lane has (deep merge cannot delete)
              "speculative_config": {"method": "mtp", "model": None, "num_speculative_tokens": 4}},
}

PARTIAL = [
    # (golden, lane, overrides, resolved values of args stated in words)
    ("tp2-mtp-t2", "tp2_mtp", {}, {}),
    ("tp3-y3-mtp-7d20368", "tp3_mtp",
     {"checkpoint": {"host_path": SITE["$MODEL_DIR"]}},
     # cluster.env.example sets KV_CACHE_MEMORY=11523000000; the lane's template kwargs are the default form.
     {"--kv-cache-memory": "11523000000", "--default-chat-template-kwargs": '{"enable_thinking":true}'}),
    ("tp3-y3-dflash2-7d20368", "tp3_dflash2",
     {"checkpoint": {"host_path": SITE["$MODEL_DIR"]}, "drafter": {"host_path": "/home/user/glm53-dflash2-draft-tp3"}},
     {"--default-chat-template-kwargs": '{"enable_thinking":true}'}),
    ("tp4-fp8-marlin-t4-current-ac9c55e", "tp4_dflash2_1m", {},
     {"--chat-template": "/models/glm-5.3-flash-nvfp4/chat_template_mm.jinja"}),
    ("tp4-legacy-mtp-t4-11f43b5", "tp4_dflash2_1m", LEGACY_TP4,
     {"--chat-template": "/models/glm-5.3-flash-nvfp4/chat_template_mm.jinja"}),
]


def _partial_cases():
    for gname, lname, overrides, resolved in PARTIAL:
        for r in golden(gname)["ranks"]:
            yield pytest.param(gname, lname, overrides, resolved, r["rank"], id="%s-rank%d" % (gname, r["rank"]))


@pytest.mark.parametrize("gname,lname,overrides,resolved,rank", list(_partial_cases()))
def test_partial_golden(gname, lname, overrides, resolved, rank):
    g = golden(gname)
    the_lane = lane(lname, copy.deepcopy(overrides))
    assert the_lane["tensor_parallel_size"] == len(g["ranks"])
    spec = render_rank(the_lane, facts(g, the_lane, rank, "mounts_stated"))
    assert spec["image"] == g["image"].split()[0]
    assert spec["docker_argv"] == g["docker_argv"]
    assert spec["env"] == expected_env(g, rank)
    assert_mounts_equal(spec["mounts"], g["mounts_stated"])
    args = parse_args(spec["command"], the_lane["checkpoint"]["container_path"])
    for flag, want in g["args_stated"].items():
        if flag == "--headless":
            assert (flag in args) == (rank > 0)
            continue
        if flag == "--node-rank":
            assert args[flag] == str(rank)
            continue
        want = resolved.get(flag, want)
        assert flag in args, "%s missing from %s" % (flag, spec["command"])
        if want is True:
            assert args[flag] is True
        elif isinstance(want, dict):
            assert json.loads(args[flag]) == want
        elif want.startswith("{"):
            assert json.loads(args[flag]) == json.loads(want)
        else:
            assert args[flag] == want, flag
    for flag in g["args_not_set"]:
        assert flag not in args


def test_tp3_hf_overrides_are_the_y3_runtime_companion():
    g = golden("tp3-y3-mtp-7d20368")
    the_lane = lane("tp3_mtp")
    spec = render_rank(the_lane, facts(g, the_lane, 2, "mounts_stated"))
    args = parse_args(spec["command"], "/models/glm-5.3-flash-nvfp4")
    # the on-disk-only key (linear_attn_config.num_heads) stays out of the runtime overrides (catalogue drafter_heads)
    assert args["--hf-overrides"] == (
        '{"num_attention_heads":66,"num_key_value_heads":66,"linear_num_heads":66,"moe_intermediate_size":2112,'
        '"text_config":{"num_attention_heads":66,"num_key_value_heads":66,"linear_num_heads":66,'
        '"moe_intermediate_size":2112}}')
    # Y3's serve.sh passes --port (not --host) on every rank; workers add --headless
    assert args["--port"] == "8045" and "--host" not in args and args["--headless"] is True


def test_tp3_worker_spec_hash_ignores_the_head_only_api_args():
    g = golden("tp3-y3-dflash2-7d20368")
    the_lane = lane("tp3_dflash2")
    hashes = set(render_rank(the_lane, facts(g, the_lane, r, "mounts_stated"))["spec_hash"] for r in (0, 1, 2))
    assert len(hashes) == 1
