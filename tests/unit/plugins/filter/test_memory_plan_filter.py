"""Filters memory_plan, memory_plan_compare and memory_plan_bringup through their Ansible entry points."""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.memory_plan import FilterModule
from tests.unit.conftest import ROOT

F = FilterModule().filters()


def lane(name):
    with open(os.path.join(ROOT, "lanes", name + ".yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_plan_from_a_host_map_with_ranks():
    nodes = {"spark-b": {"mem_total_gib": 121.69, "mem_available_gib": 117.0, "swap_total_gib": 16.0},
             "spark-a": {"mem_total_gib": 121.69, "mem_available_gib": 118.0, "swap_total_gib": 16.0}}
    plan = F["memory_plan"](lane("tp2_mtp"), nodes, {"spark-a": 0, "spark-b": 1})
    rows = [(r["rank"], r["host"], r["margin_gib"]) for r in plan["ranks"]]
    assert rows == [(0, "spark-a", 9.94), (1, "spark-b", 8.94)]
    assert plan["pool_tokens"] == 505680 and plan["lane_only"] is False


def test_lane_only_plan_and_errors_as_filter_errors():
    assert F["memory_plan"](lane("tp3_mtp"))["lane_only"] is True
    with pytest.raises(AnsibleFilterError, match="no rank for host spark-c"):
        F["memory_plan"](lane("tp2_mtp"), {"spark-c": {"mem_total_gib": 1}}, {})
    with pytest.raises(AnsibleFilterError, match="expected the resolved lane"):
        F["memory_plan"]("tp2_mtp")


def test_compare_and_bringup_filters():
    plan = F["memory_plan"](lane("sim_cpu_tp2"), None, None,
                            {"model_config": {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 32}})
    kv = {"per_rank": [{"rank": 0, "host": "spark-sim-0", "available_kv_cache_gib": 1.0}],
          "pool_tokens": 4194304, "max_concurrency": {"max_model_len": 512, "factor": 8192.0}}
    out = F["memory_plan_compare"](plan, kv)
    assert out["lines"][-2:] == ["pool: predicted 4,194,304 tokens, logged 4,194,304 tokens, error +0.0 %",
                                 "max concurrency: predicted 8192.00x, logged 8192.00x, error +0.0 %"]
    b = F["memory_plan_bringup"](lane("sim_cpu_tp2"), {"spark-sim-0": 0, "spark-sim-1": 1}, plan)
    assert b["nodes"][0]["role"] == "head: serves the API on port 8000, rendezvous on 29501"
    with pytest.raises(AnsibleFilterError, match="ranks must be a mapping"):
        F["memory_plan_bringup"](lane("sim_cpu_tp2"), ["spark-sim-0"])
