"""Malformed module inputs end in fail_json naming what, where and the fix: never a traceback, never a secret,
and never after a side effect (issue 19). Each module runs in-process (tests/unit/plugins/modules/utils.py);
an exception escaping main() fails the test with its traceback, which is what this suite forbids.
"""
import json
import os
import struct

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import PaddingError, read_header
from ansible_collections.dgxspark.vllm.plugins.modules import drafter_pad, tp_config_pad, vllm_health, vllm_rank, weights_fetch
from tests.unit.plugins.module_utils.test_weights import glm_config
from tests.unit.plugins.modules.utils import run_module


def _write(path, text):
    with open(str(path), "w") as f:
        f.write(text)
    return str(path)


# ---- class: config.json that is not a JSON object -------------------------------------------------------------
@pytest.mark.parametrize("text,kind", [("[1, 2, 3]", "list"), ('"config"', "str"), ("42", "int"), ("null", "NoneType")],
                         ids=["array", "string", "number", "null"])
def test_config_that_is_not_an_object(tmp_path, text, kind):
    _write(tmp_path / "config.json", text)
    res, failed = run_module(tp_config_pad.main, {"path": str(tmp_path / "config.json"), "tensor_parallel_size": 3,
                                                  "targets": {"num_attention_heads": 66}})
    assert failed and res["msg"] == ("%s: a JSON %s, not an object; restore the checkpoint's config.json (the lane's "
                                     "checkpoint.host_path)" % (tmp_path / "config.json", kind))
    res, failed = run_module(drafter_pad.main, {"path": str(tmp_path), "tensor_parallel_size": 3,
                                                "num_attention_heads": 6, "num_key_value_heads": 3})
    assert failed and res["msg"].startswith("%s: a JSON %s, not an object" % (tmp_path / "config.json", kind))


# ---- class: zero (or negative) heads ----------------------------------------------------------------------------
@pytest.mark.parametrize("override", [{"num_attention_heads": 0}, {"num_key_value_heads": 0},
                                      {"hidden_size": 0}, {"num_attention_heads": -4}],
                         ids=["q-zero", "kv-zero", "hidden-zero", "q-negative"])
def test_zero_heads_in_the_drafter_config(tmp_path, override):
    cfg = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "head_dim": 16}
    cfg.update(override)
    _write(tmp_path / "config.json", json.dumps(cfg))
    res, failed = run_module(drafter_pad.main, {"path": str(tmp_path), "tensor_parallel_size": 3,
                                                "num_attention_heads": 6, "num_key_value_heads": 3})
    assert failed and "must be positive; the config is damaged, restore the checkpoint's config.json" in res["msg"]
    assert not os.path.exists(str(tmp_path / "config.json.orig")), "a backup was written before the refusal"


# ---- class: safetensors header that is not JSON ---------------------------------------------------------------
def _shard(path, blob):
    with open(str(path), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
    return str(path)


@pytest.mark.parametrize("blob,expected", [
    (b"\xff\xfe not json", "header is not JSON"),
    (b"<html>404</html>", "header is not JSON"),
    (b"[1, 2]", "its header is a JSON list, not an object"),
    (b'{"w": "catalogue kv_pool_below_peers"}', "tensor w has a malformed header entry 'catalogue kv_pool_below_peers'"),
    (b'{"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}', "tensor w has unsupported dtype 'Q4'"),
], ids=["binary", "html", "array", "entry-string", "dtype-unknown"])
def test_safetensors_header_that_is_not_json(tmp_path, blob, expected):
    path = _shard(tmp_path / "model.safetensors", blob)
    with pytest.raises(PaddingError) as e:
        read_header(path)
    assert str(e.value).startswith(path + ": ") and expected in str(e.value)


# ---- class: empty, garbage or HTML where JSON is expected (docker inspect output, module_utils/docker_cli.py) --
@pytest.mark.parametrize("output,expected", [
    ("", "docker inspect printed nothing"),
    ("<!DOCTYPE html><html>", "docker inspect printed HTML, not JSON (starts '<!DOCTYPE html><html>')"),
    ("Status: running", "docker inspect printed no JSON ("),
    ('"running"', "docker inspect printed a JSON str, not an object"),
], ids=["empty", "html", "garbage", "string"])
def test_docker_output_that_is_not_json(tmp_path, output, expected):
    script = _write(tmp_path / "docker", "#!/bin/sh\nprintf '%%s' '%s'\n" % output.replace("'", "'\\''"))
    os.chmod(script, 0o755)
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": script, "timeout_s": 5})
    assert failed and res["msg"].startswith("rank 1: docker inspect vllm_rank failed (rc 0): " + expected), res["msg"]
    assert res["msg"].endswith("Fix: check that the deploy user can run %s on this node (catalogue docker_group_missing)" % script)


# ---- class: invalid regex, refused before any docker call -------------------------------------------------------
@pytest.mark.parametrize("regex", ["(", "[a-", "*rendezvous", "(?P<x>a)(?P<x>b)"])
def test_invalid_wait_regex_is_refused_before_docker_runs(tmp_path, regex):
    log = tmp_path / "docker-calls"
    script = _write(tmp_path / "docker", "#!/bin/sh\necho \"$@\" >> %s\nexit 1\n" % log)
    os.chmod(script, 0o755)
    spec = {"name": "vllm_rank", "image": "x", "docker_argv": [], "mounts": [], "env": {}, "command": [],
            "hashed": {}, "labels": {"dgxspark.vllm.spec-hash": "0"}}
    res, failed = run_module(vllm_rank.main, {"name": "vllm_rank", "spec": spec, "docker": script, "wait_regex": regex,
                                              "log_dir": str(tmp_path)})
    assert failed and res["msg"].startswith("rank vllm_rank: wait_regex %r is not a valid regular expression (" % regex)
    assert not log.exists(), "docker was called before the refusal"


@pytest.mark.parametrize("name", ["vllm rank", "-v", "a;b", "../x"])
def test_bad_container_name_is_refused_before_docker_runs(tmp_path, name):
    log = tmp_path / "docker-calls"
    script = _write(tmp_path / "docker", "#!/bin/sh\necho \"$@\" >> %s\nexit 1\n" % log)
    os.chmod(script, 0o755)
    res, failed = run_module(vllm_rank.main, {"name": name, "state": "absent", "docker": script})
    assert failed and res["msg"].startswith("rank %r: not a container name" % name)
    assert not log.exists()


# ---- class: secrets with whitespace, never shown ----------------------------------------------------------------
SECRETS = ["sk-live abc", "sk-live-abc\n", "\tsk-live-abc", "sk-live\r\nabc"]


@pytest.mark.parametrize("secret", SECRETS, ids=["space", "newline", "tab", "crlf"])
def test_api_key_with_whitespace_is_refused_unseen(secret):
    res, failed = run_module(vllm_health.main, {"mode": "metrics", "base_url": "http://198.18.250.10:8000",
                                                "api_key": secret})
    assert failed and res["msg"].startswith("api_key (vllm_api_key) contains whitespace or a newline (the value is "
                                            "not shown)")
    assert all(part not in json.dumps(res) for part in secret.split())


@pytest.mark.parametrize("secret", SECRETS, ids=["space", "newline", "tab", "crlf"])
def test_hf_token_with_whitespace_is_refused_unseen(tmp_path, secret):
    res, failed = run_module(weights_fetch.main, {"repo_id": "x/y", "local_dir": str(tmp_path / "w"), "token": secret})
    assert failed and res["msg"].startswith("token (model_weights_hf_token) contains whitespace or a newline")
    assert all(part not in json.dumps(res) for part in secret.split())
    assert not (tmp_path / "w").exists()


def test_glm_config_fixture_still_passes_the_object_check(tmp_path):
    """The real config capture is an object: the new check refuses nothing real."""
    assert isinstance(glm_config(), dict)


# ---- class: empty or garbage command output (rdma_facts, node_facts parsers) ----------------------------------
GARBAGE = ["<html><body>502 Bad Gateway</body></html>", "\x00\xff garbage ==> ??", "{}", "null"]


@pytest.mark.parametrize("text", GARBAGE + [""], ids=["html", "binary", "object", "null", "empty"])
def test_garbage_ip_json_output_is_named(text):
    from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import RdmaError, parse_ip_json_addr
    with pytest.raises(RdmaError) as e:
        parse_ip_json_addr(text)
    assert str(e.value).startswith("ip -j addr output is not ")


@pytest.mark.parametrize("text", GARBAGE, ids=["html", "binary", "object", "null"])
def test_garbage_ibdev2netdev_output_is_named(text):
    from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import RdmaError, parse_ibdev2netdev
    with pytest.raises(RdmaError) as e:
        parse_ibdev2netdev(text)
    assert str(e.value).startswith("ibdev2netdev line 1 is not '<hca> port <n> ==> <netdev> (Up|Down)'")


@pytest.mark.parametrize("text", GARBAGE + [""], ids=["html", "binary", "object", "null", "empty"])
def test_garbage_free_output_is_named(text):
    from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import NodeCheckError
    from tests.unit.captures import parse_free
    with pytest.raises(NodeCheckError) as e:
        parse_free(text)
    assert str(e.value) == "no 'Mem:' row in free output"
