"""vllm_group_load writes the load record the watchdog reads (lifecycle.phase judges it)."""
import json
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle
from ansible_collections.dgxspark.vllm.plugins.modules import vllm_group_load
from tests.unit.plugins.modules.utils import run_module


def test_the_record_beside_the_rank_spec_file_makes_the_group_loading(tmp_path):
    spec = tmp_path / "rank.json"
    t0 = time.time()
    res, failed = run_module(vllm_group_load.main, {"rank_spec_file": str(spec), "deadline_s": 600})
    assert not failed and res["changed"] is True
    assert res["path"] == str(tmp_path / "group-load.json")
    rec = json.loads((tmp_path / "group-load.json").read_text())
    assert rec == res["record"]
    assert (rec["by"], rec["deadline_s"], rec["done"]) == ("vllm_ranks", 600.0, None)
    assert t0 <= rec["started"] <= time.time() and rec["deadline"] == rec["started"] + 600
    ranks = [{"rank": 0, "host": "h", "running": True}, {"rank": 1, "host": "w", "running": True}]
    assert lifecycle.phase(rec, rec["started"] + 30, ranks) == "loading"
    assert lifecycle.phase(rec, rec["started"] + 601, ranks) == "load_expired"


def test_check_mode_writes_nothing(tmp_path):
    res, failed = run_module(vllm_group_load.main, {"rank_spec_file": str(tmp_path / "rank.json"), "deadline_s": 60,
                                                    "_ansible_check_mode": True})
    assert not failed and res["changed"] is True
    assert not (tmp_path / "group-load.json").exists()


def test_bad_input_is_refused_with_the_path_and_the_fix(tmp_path):
    res, failed = run_module(vllm_group_load.main, {"rank_spec_file": str(tmp_path / "rank.json"), "deadline_s": 0})
    assert failed
    assert res["msg"] == ("%s: deadline_s must be positive, got 0.0. Fix: give a deadline in seconds above 0 (the "
                          "lane's health.ready_timeout_s)" % (tmp_path / "group-load.json"))
    res, failed = run_module(vllm_group_load.main, {"rank_spec_file": str(tmp_path / "no" / "rank.json"),
                                                    "deadline_s": 60})
    assert failed and "the folder of the rank spec file does not exist. Fix: run vllm_ranks" in res["msg"]
