"""spec_decode_stats filter on the 7-position and lane A captures (tests/fixtures/health/metrics, docs/health.md)."""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.spec_decode_stats import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.health import parse_metrics
from tests.unit.conftest import FIXTURES, read_fixture

f = FilterModule().filters()["spec_decode_stats"]
SPEC_7POS = read_fixture("health", "metrics", "glm53-spec-decode-7pos.prom", strip_comments=False)


def expected(name):
    with open(os.path.join(FIXTURES, "health", "metrics", name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def first_scrape():
    """SPEC_7POS with lane A's first-position counts subtracted: the difference is known exactly."""
    return SPEC_7POS.replace("11325.0", "1325.0").replace("78806.0", "8806.0").replace("29746.0", "4746.0") \
        .replace("8856.0", "856.0").replace("6387.0", "1387.0").replace("4677.0", "677.0") \
        .replace("3480.0", "480.0").replace("2608.0", "608.0").replace("2073.0", "73.0").replace("1665.0", "665.0")


def test_cumulative_s08_text():
    exp = expected("glm53-spec-decode-7pos.expected.yaml")["derived"]
    s = f(SPEC_7POS)
    assert s["acceptance_rate"] == 0.3775 == exp["acceptance_rate"]
    assert s["mean_acceptance_length"] == 3.63 == exp["mean_acceptance_length"]
    assert s["per_position_rate"] == [exp["per_position_rate"][p] for p in range(7)]
    assert s["draft_tokens_per_draft"] == 6.96


def test_two_scrapes_exact_deltas():
    s = f(SPEC_7POS, first_scrape())
    assert (s["drafts"], s["draft_tokens"], s["accepted"]) == (10000.0, 70000.0, 25000.0)
    assert s["acceptance_rate"] == 0.3571
    assert s["accepted_per_draft"] == 2.5
    assert s["mean_acceptance_length"] == 3.5
    assert s["draft_tokens_per_draft"] == 7.0
    assert s["per_position_accepted"] == [8000.0, 5000.0, 4000.0, 3000.0, 2000.0, 2000.0, 1000.0]
    assert s["per_position_rate"] == [0.8, 0.5, 0.4, 0.3, 0.2, 0.2, 0.1]
    assert s["per_position_sum_matches"] is True


def test_samples_list_and_lane_a():
    exp = expected("glm53-tp4-nvidia-laneA-specacc.expected.yaml")["derived"]
    text = read_fixture("health", "metrics", "glm53-tp4-nvidia-laneA-specacc.txt")
    s = f(parse_metrics(text))
    assert round(s["acceptance_rate"], 3) == exp["acceptance_rate"]
    assert round(s["mean_acceptance_length"], 2) == exp["tokens_per_step"]


def test_swapped_scrapes_fail_clearly():
    with pytest.raises(AnsibleFilterError, match=r"fewer drafts \(1325\) than 'before' \(11325\)"):
        f(first_scrape(), SPEC_7POS)


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="must be /metrics text"):
        f(42)


def test_no_drafter():
    s = f('vllm:generation_tokens_total{engine="0"} 10.0\n')
    assert s["present"] is False and s["acceptance_rate"] is None
