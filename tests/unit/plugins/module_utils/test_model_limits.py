# -*- coding: utf-8 -*-
"""What the engine derives as the longest context from config.json, checked before any rank stops (issue 32).

Inputs: the GLM-5.3-Flash config.json (text_config.max_position_embeddings 1048576; the TP4 lane asks exactly that),
the DFlash2 drafter's config.json, the simulated fleet's tiny checkpoint config as tools/make_tiny_model.py writes it
(max_position_embeddings 2048: the issue's max_model_len 4096 case), and rope_scaling variants in the shapes
Hugging Face configs carry (linear, dynamic, yarn with original_max_position_embeddings, llama3, longrope)."""

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.vllm_rank import vllm_rank_max_model_len_errors
from ansible_collections.dgxspark.vllm.plugins.module_utils import model_limits as M
from tests.unit.conftest import ROOT, read_fixture

GLM = json.loads(read_fixture("model-configs", "glm-5.3-flash-config.json"))
DRAFTER = json.loads(read_fixture("model-configs", "dflash2-drafter-config.json"))
TINY = {"architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 2048, "rope_scaling": None,
        "vocab_size": 1536}


def _lane_len(name):
    import yaml
    with open(os.path.join(ROOT, "lanes", "%s.yml" % name)) as f:
        return yaml.safe_load(f)["serve"]["max_model_len"]


def test_shipped_lanes_fit_their_checkpoint_and_the_issue_case_does_not():
    assert M.derived_max_model_len(GLM) == (1048576, "max_position_embeddings=1048576")
    for lane in ("tp4_dflash2_1m", "tp2_dflash2_ct", "tp3_mtp"):
        assert M.max_model_len_errors("node-a", "/models/glm/config.json", GLM, _lane_len(lane)) == [], lane
    assert M.max_model_len_errors("spark-sim-0", "/x/config.json", TINY, _lane_len("sim_cpu_tp2")) == []
    (msg,) = M.max_model_len_errors("spark-sim-0", "/var/lib/models/tiny-glm/config.json", TINY, 4096)
    assert msg == ("spark-sim-0: serve.max_model_len 4096 is above the 2048 tokens the engine derives from "
                   "/var/lib/models/tiny-glm/config.json (max_position_embeddings=2048): every rank would exit at "
                   "startup ('User-specified max_model_len ... is greater than the derived max_model_len'), so no rank "
                   "was stopped. Fix: set serve.max_model_len to at most 2048 in vllm_lane_overrides, or use a "
                   "checkpoint whose config.json allows it")


@pytest.mark.parametrize("extra, limit", [
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, 4096),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 4}}, 8192),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}}, 4096),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 2048),       # not scaled by vLLM
    ({"rope_scaling": {"type": "longrope", "factor": 4.0}}, 2048),
    ({"rope_scaling": {"rope_type": "default"}}, 2048),                     # no factor: 1
    ({"n_positions": 1536}, 1536),                                          # the smallest length key counts
    ({"seq_length": 8192}, 2048),
])
def test_rope_scaling_and_other_length_keys(extra, limit):
    cfg = dict(TINY, **extra)
    assert M.derived_max_model_len(cfg)[0] == limit
    assert M.max_model_len_errors("n", "p", cfg, limit) == []               # exactly the limit: fits
    assert len(M.max_model_len_errors("n", "p", cfg, limit + 1)) == 1


def test_nothing_to_judge_or_allowed_long_stays_quiet():
    assert M.derived_max_model_len({"hidden_size": 64})[0] is None
    assert M.max_model_len_errors("n", "p", {"hidden_size": 64}, 10 ** 7) == []
    assert M.max_model_len_errors("n", "p", TINY, None) == []
    assert M.max_model_len_errors("n", "p", TINY, 4096, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}) == []
    assert len(M.max_model_len_errors("n", "p", TINY, 4096, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"})) == 1
    # a bool or a string is not a length; the drafter's own config is read the same way
    assert M.derived_max_model_len({"max_position_embeddings": True, "seq_len": "4096"})[0] is None
    assert M.derived_max_model_len(DRAFTER)[0] == DRAFTER["max_position_embeddings"]


def test_filter_refuses_what_is_not_a_config_or_a_length():
    assert len(vllm_rank_max_model_len_errors(TINY, 4096, "spark-sim-0", "/m/config.json")) == 1
    with pytest.raises(AnsibleFilterError, match="is not a JSON object"):
        vllm_rank_max_model_len_errors(["x"], 4096, "spark-sim-0", "/m/config.json")
    with pytest.raises(AnsibleFilterError, match="must be an integer"):
        vllm_rank_max_model_len_errors(TINY, 4096.0, "spark-sim-0", "/m/config.json")
