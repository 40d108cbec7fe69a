"""The bring-up plan as a document (issue 31): its id follows the lane and the rank layout, and its page holds one
row per node with the memory plan's figures, the phases with their sources and every warning with advice. Inputs:
the shipped lanes (tp2_dflash2_ct, tp4_dflash2_1m) and the sample inventories' layouts."""
import os

import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import memory_plan as M
from tests.unit.conftest import ROOT


def _lane(name):
    with open(os.path.join(ROOT, "lanes", "%s.yml" % name)) as f:
        return yaml.safe_load(f)


HOSTS4 = [{"host": "node-%s" % c, "rank": i, "address": "192.0.2.%d" % (10 + i)} for i, c in enumerate("abcd")]


def test_the_id_follows_the_lane_and_the_layout_only():
    lane = _lane("tp4_dflash2_1m")
    pid = M.plan_id(lane, HOSTS4)
    assert len(pid) == 12 and int(pid, 16) >= 0
    assert M.plan_id(lane, list(reversed(HOSTS4))) == pid                 # host order does not matter
    moved = [dict(h, address="192.0.2.99") if h["rank"] == 3 else h for h in HOSTS4]
    assert M.plan_id(lane, moved) != pid                                   # a node's address changed
    longer = dict(lane, serve=dict(lane["serve"], max_model_len=524288))
    assert M.plan_id(longer, HOSTS4) != pid                                # the lane changed


def test_the_page_of_the_tp4_lane_on_four_nodes():
    lane = _lane("tp4_dflash2_1m")
    plan = M.memory_plan(lane)
    bring = M.bringup_plan(lane, HOSTS4, plan)
    page = M.plan_markdown(lane, bring, plan, "0123456789ab", "2026-12-06T08:00:00Z", measured=False)
    lines = page.splitlines()
    assert lines[0] == "# Bring-up plan 0123456789ab"
    rows = [l for l in lines if l.startswith("| node-")]
    want = [["| node-a", "0"], ["| node-b", "1"], ["| node-c", "2"], ["| node-d", "3"]]
    assert [r.split(" | ")[0:2] for r in rows] == want
    kv = plan["ranks"][0]["kv_gib"]
    assert "| %g | %s |" % (kv, "{:,}".format(plan["ranks"][0]["pool_tokens"])) in rows[0]
    ports = (lane["serve"]["api_port"], lane["serve"]["master_port"])
    assert rows[0].endswith("| not read | API %s, rendezvous %s |" % ports)
    assert "| 5 | vllm_ranks: workers first, then the head; weights load | ~780 s |" in lines
    assert "Expected durations come from a four-Spark TP4 deployment" in page
    warned = [l for l in lines if l.startswith("- rank ")]
    assert warned == ["- %s" % w for w in plan["warnings"]]
    assert all("Advice:" in w for w in warned if "can kill the engine" in w)
