"""tp_config_pad on the real GLM-5.3-Flash config capture (catalogue drafter_heads)."""
import json
import os
import shutil
import stat

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import tp_config_pad
from ansible_collections.dgxspark.vllm.tests.unit.plugins.modules.utils import run_module

# The TP3 lane's targets (catalogue drafter_heads table, tp-padding-reference.yaml per_tp.3.targets).
TP3_TARGETS = {
    "text_config.num_attention_heads": 66,
    "text_config.num_key_value_heads": 66,
    "text_config.linear_num_heads": 66,
    "text_config.linear_attn_config.num_heads": 66,
    "text_config.moe_intermediate_size": 2112,
}


@pytest.fixture
def cfg(tmp_path, fixture_path):
    dst = tmp_path / "config.json"
    shutil.copyfile(fixture_path("model-configs", "glm-5.3-flash-config.json"), str(dst))
    os.chmod(str(dst), 0o600)
    return dst


def run(path, tp, targets=None, **kw):
    args = {"path": str(path), "tensor_parallel_size": tp,
            "targets": TP3_TARGETS if targets is None else targets}
    args.update(kw)
    return run_module(tp_config_pad.main, args)


def test_tp3_pads_exact_values_and_keeps_everything_else(cfg):
    released = cfg.read_bytes()
    before = json.loads(released)
    result, failed = run(cfg, 3)
    assert not failed, result
    assert result["changed"] is True and result["action"] == "pad"
    after = json.loads(cfg.read_bytes())
    tc = after["text_config"]
    assert (tc["num_attention_heads"], tc["num_key_value_heads"], tc["linear_attn_config"]["num_heads"],
            tc["moe_intermediate_size"]) == (66, 66, 66, 2112)
    assert tc["vocab_size"] == 154880
    # linear_num_heads is not in the capture; the runtime reads it, so it is created with the padded head
    # count (catalogue drafter_heads writes it unconditionally), appended at the end of text_config.
    assert "linear_num_heads" not in before["text_config"]
    assert tc["linear_num_heads"] == 66
    assert list(tc)[-1] == "linear_num_heads"
    assert result["plan"]["text_config.linear_num_heads"]["create"] is True
    assert "text_config.linear_num_heads absent->66" in result["msg"]
    # Every other key identical, order kept.
    for k in list(TP3_TARGETS) + ["text_config.linear_num_heads"]:
        parts = k.split(".")
        for d in (before, after):
            node = d
            for p in parts[:-1]:
                node = node[p]
            node.pop(parts[-1], None)
    assert after == before
    assert list(json.loads(cfg.read_bytes())["text_config"]) == \
        list(json.loads(released)["text_config"]) + ["linear_num_heads"]
    # The backup is the released file, byte for byte; the new file is 0644.
    assert (cfg.parent / "config.json.orig").read_bytes() == released
    assert stat.S_IMODE(os.stat(str(cfg)).st_mode) == 0o644
    assert result["changed_keys"] == {
        "text_config.num_attention_heads": [64, 66], "text_config.num_key_value_heads": [64, 66],
        "text_config.linear_attn_config.num_heads": [64, 66], "text_config.moe_intermediate_size": [2048, 2112],
        "text_config.linear_num_heads": [None, 66]}
    # Runtime companion: the four text_config keys at top level and in text_config (catalogue drafter_heads, Y3 serve.sh).
    four = {"num_attention_heads": 66, "num_key_value_heads": 66, "linear_num_heads": 66,
            "moe_intermediate_size": 2112}
    assert result["hf_overrides"] == dict(four, text_config=four)
    # Candidates explain the targets: ceil to tp for heads, lcm(3, 64) = 192 multiple for the width.
    assert result["plan"]["text_config.num_attention_heads"]["candidate"] == 66
    assert result["plan"]["text_config.moe_intermediate_size"]["candidate"] == 2112


def test_second_run_already_padded_and_backup_kept(cfg):
    released = cfg.read_bytes()
    run(cfg, 3)
    padded = cfg.read_bytes()
    result, failed = run(cfg, 3)
    assert not failed
    assert result["changed"] is False and result["action"] == "at_target"
    assert result["msg"].startswith("already padded")
    assert cfg.read_bytes() == padded
    assert (cfg.parent / "config.json.orig").read_bytes() == released


def test_existing_backup_never_overwritten(cfg):
    (cfg.parent / "config.json.orig").write_bytes(cfg.read_bytes())
    marker = cfg.read_bytes() + b"\n"
    (cfg.parent / "config.json.orig").write_bytes(marker)
    result, failed = run(cfg, 3)
    assert not failed and result["changed"]
    assert (cfg.parent / "config.json.orig").read_bytes() == marker


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_divisible_tp_leaves_file_alone(cfg, tp):
    released = cfg.read_bytes()
    result, failed = run(cfg, tp)
    assert not failed
    assert result["changed"] is False and result["action"] == "divides"
    assert result["msg"] == "tensor-parallel size %d divides the released geometry; unchanged" % tp
    assert cfg.read_bytes() == released
    assert not (cfg.parent / "config.json.orig").exists()


def test_half_padded_refused_naming_both_values(cfg):
    data = json.loads(cfg.read_bytes())
    data["text_config"]["num_attention_heads"] = 66  # one key padded, the others not
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    before = cfg.read_bytes()
    result, failed = run(cfg, 3)
    assert failed
    assert "padded inconsistently at tensor-parallel size 3" in result["msg"]
    assert "text_config.num_attention_heads is already 66 (target 66)" in result["msg"]
    assert "text_config.moe_intermediate_size is still 2048 (target 2112)" in result["msg"]
    assert cfg.read_bytes() == before


def test_other_value_refused(cfg):
    # The upstream pad script writes 2049 (catalogue drafter_heads "this is the mismatch").
    data = json.loads(cfg.read_bytes())
    tc = data["text_config"]
    tc["num_attention_heads"] = tc["num_key_value_heads"] = tc["linear_attn_config"]["num_heads"] = 66
    tc["moe_intermediate_size"] = 2049
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    result, failed = run(cfg, 3)
    assert failed
    assert ("text_config.moe_intermediate_size is 2049 on disk but the lane's target is 2112 "
            "(released value unknown: no backup)") in result["msg"]


def test_other_value_refused_with_backup(cfg):
    shutil.copyfile(str(cfg), str(cfg) + ".orig")
    data = json.loads(cfg.read_bytes())
    data["text_config"]["moe_intermediate_size"] = 2304
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    result, failed = run(cfg, 3)
    assert failed
    assert ("text_config.moe_intermediate_size is 2304 on disk but the lane's target is 2112 "
            "(released value 2048)") in result["msg"]


def test_check_mode_writes_nothing_and_diff(cfg):
    released = cfg.read_bytes()
    result, failed = run(cfg, 3, _ansible_check_mode=True, _ansible_diff=True)
    assert not failed
    assert result["changed"] is True
    assert cfg.read_bytes() == released
    assert not (cfg.parent / "config.json.orig").exists()
    assert result["diff"]["before"] == (
        "text_config.num_attention_heads: 64\ntext_config.num_key_value_heads: 64\n"
        "text_config.linear_attn_config.num_heads: 64\ntext_config.moe_intermediate_size: 2048\n")
    assert result["diff"]["after"] == (  # linear_num_heads: created, so only on the after side
        "text_config.num_attention_heads: 66\ntext_config.num_key_value_heads: 66\n"
        "text_config.linear_num_heads: 66\n"
        "text_config.linear_attn_config.num_heads: 66\ntext_config.moe_intermediate_size: 2112\n")


def test_without_linear_attn_config(cfg):
    data = json.loads(cfg.read_bytes())
    del data["text_config"]["linear_attn_config"]
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    result, failed = run(cfg, 3)
    assert not failed and result["changed"]
    tc = json.loads(cfg.read_bytes())["text_config"]
    assert "linear_attn_config" not in tc
    assert (tc["num_attention_heads"], tc["num_key_value_heads"], tc["moe_intermediate_size"]) == (66, 66, 2112)
    assert result["plan"]["text_config.linear_attn_config.num_heads"]["state"] == "absent"


def test_exact_resulting_json_tp3(cfg, fixture_path):
    # Golden file: the released capture with the reference pad script's edits (catalogue drafter_heads) made by hand,
    # text_config.linear_num_heads included although the release lacks it.
    run(cfg, 3)
    with open(fixture_path("model-configs", "glm-5.3-flash-config.tp3-padded.json")) as f:
        golden = f.read()
    assert json.loads(golden)["text_config"]["linear_num_heads"] == 66
    assert cfg.read_text() == golden
    result, failed = run(cfg, 3)
    assert not failed and result["changed"] is False and result["action"] == "at_target"


def test_guard_refuses_a_padded_file_without_linear_num_heads(cfg, fixture_path):
    # Golden padded file minus the key: what an earlier release (or a hand pad) left. The guard refuses
    # it; a pad run adds the key alone and keeps the backup.
    shutil.copyfile(str(cfg), str(cfg) + ".orig")
    with open(fixture_path("model-configs", "glm-5.3-flash-config.tp3-padded.json")) as f:
        golden = f.read()
    data = json.loads(golden)
    del data["text_config"]["linear_num_heads"]
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    result, failed = run(cfg, 3, guard=True)
    assert failed
    assert "text_config.linear_num_heads is None (needs 66)" in result["msg"]
    result, failed = run(cfg, 3)
    assert not failed and result["changed_keys"] == {"text_config.linear_num_heads": [None, 66]}
    assert cfg.read_text() == golden


def test_target_not_dividing_refused(cfg):
    targets = dict(TP3_TARGETS, **{"text_config.moe_intermediate_size": 2050})
    result, failed = run(cfg, 3, targets=targets)
    assert failed
    assert "target 2050 for text_config.moe_intermediate_size does not divide by tensor-parallel size 3" \
        in result["msg"]
    assert "candidate 2112" in result["msg"]


def test_guard(cfg):
    result, failed = run(cfg, 3, guard=True)
    assert failed
    assert result["msg"].startswith("%s is not padded for tensor-parallel size 3: text_config.num_attention_heads "
                                    "is 64 (needs 66)" % cfg)
    assert "--tags tp_pad" in result["msg"]
    run(cfg, 3)
    result, failed = run(cfg, 3, guard=True)
    assert not failed and result["action"] == "at_target"
    result, failed = run(cfg, 2, guard=True)
    assert not failed and result["action"] == "divides"


def test_guard_without_targets_names_keys(cfg):
    # A TP3 lane that forgot its padding targets: the launch guard stops it (catalogue drafter_heads).
    result, failed = run(cfg, 3, targets={}, guard=True)
    assert failed
    assert result["msg"].startswith(
        "%s: text_config.num_attention_heads = 64 does not divide by tensor-parallel size 3, "
        "text_config.num_key_value_heads = 64 does not divide by tensor-parallel size 3, "
        "text_config.linear_attn_config.num_heads = 64 does not divide by tensor-parallel size 3, "
        "text_config.moe_intermediate_size = 2048 does not divide by tensor-parallel size 3;" % cfg)
    assert "ansible-playbook site.yml --tags tp_pad" in result["msg"]
    result, failed = run(cfg, 4, targets={}, guard=True)
    assert not failed and result["action"] == "empty"


def test_guard_drafter_config(tmp_path, fixture_path):
    # catalogue drafter_heads: the DFlash2 drafter's 32/8 heads at TP3.
    path = tmp_path / "config.json"
    shutil.copyfile(fixture_path("model-configs", "dflash2-drafter-config.json"), str(path))
    result, failed = run(path, 3, targets={}, guard=True)
    assert failed
    assert result["msg"].startswith("%s: num_attention_heads = 32 does not divide by tensor-parallel size 3, "
                                    "num_key_value_heads = 8 does not divide by tensor-parallel size 3;" % path)
    data = json.loads(path.read_text())
    data["num_attention_heads"], data["num_key_value_heads"] = 48, 12
    path.write_text(json.dumps(data))
    result, failed = run(path, 3, targets={}, guard=True)
    assert not failed


def test_guard_kv_replication(tmp_path):
    # 4 q / 2 kv at TP4: vLLM replicates the 2 kv heads, so only the q heads must divide.
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_attention_heads": 4, "num_key_value_heads": 2}))
    assert run(path, 4, targets={}, guard=True)[1] is False
    result, failed = run(path, 3, targets={}, guard=True)
    assert failed and "num_attention_heads = 4 does not divide by tensor-parallel size 3, " \
        "num_key_value_heads = 2 does not divide" in result["msg"]
