"""Filters kv_cache_bytes and vllm_rank_* through their Ansible entry points."""
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.kv_cache_bytes import FilterModule as KvFilters
from ansible_collections.dgxspark.vllm.plugins.filter.vllm_rank import FilterModule as RankFilters

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
KV = KvFilters().filters()
RANK = RankFilters().filters()


def test_kv_cache_bytes_filter_gives_the_recipe_product():
    with open(os.path.join(ROOT, "tests", "fixtures", "kv-sizing", "tp3-kv-cache-memory-formula.yaml")) as f:
        data = yaml.safe_load(f)
    i = data["input"]
    assert KV["kv_cache_bytes"](i["max_model_len"], i["target_concurrency"], i["bytes_per_token_per_rank"]) \
        == 11525160960
    # the recipe wrote 11523000000: 0.019 % below the product, within rounding by hand
    assert abs(data["expected"]["value_written_by_recipe"] - 11525160960) / 11525160960 < 0.0002


def test_kv_cache_bytes_filter_raises_a_filter_error():
    with pytest.raises(AnsibleFilterError) as e:
        KV["kv_cache_bytes"](524288, -1, 8793)
    assert str(e.value) == "kv_cache_bytes: concurrency must be positive, got -1"


def test_vllm_rank_spec_names_the_host_on_bad_facts():
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")) as f:
        lane = yaml.safe_load(f)
    with pytest.raises(AnsibleFilterError) as e:
        RANK["vllm_rank_spec"](lane, {"rank": 1, "host_ip": "198.18.11.11"}, "spark-sim-1")
    assert str(e.value) == ("vllm_rank_spec (host spark-sim-1): master_addr is not set (fact rdma_fabric_master_addr); "
                            "run the rdma_fabric role (it is tagged vllm_ranks too)")


def test_vllm_kv_pin_warning_is_empty_without_a_suggestion():
    assert RANK["vllm_kv_pin_warning"]("INFO nothing here", 8589934592) == ""
