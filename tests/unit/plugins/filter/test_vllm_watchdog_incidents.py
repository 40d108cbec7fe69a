"""plugins/filter/vllm_watchdog.py: playbooks/watchdog.yml status reads the head's incident log through it."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.vllm_watchdog import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle as L

F = FilterModule().filters()["vllm_watchdog_incidents"]


def test_the_status_report_from_the_text_the_head_gives():
    inc, _new = L.open_incident(None, 1764900000.0, "rank_dead: rank 1 on w does not answer (node unreachable)", ["w"])
    lines = [L.start_event(inc), L.action_event(inc, 1764900010.0, "restart_group", "20251205T020010Z"),
             L.close_incident(inc, 1764900300.0)]
    # what `tail -c` returns (no trailing newline)
    text = "\n".join(json.dumps(x, sort_keys=True) for x in lines)
    rep = F(text, "1764950000", last="3")  # the head's `date +%s` as a string
    assert rep["availability"]["down_s"] == 300.0 and rep["availability"]["availability_pct"] == 99.653
    assert [(i["start"], i["end"], i["first_cause"][:9]) for i in rep["incidents"]] == [
        ("2025-12-05T02:00:00Z", "2025-12-05T02:05:00Z", "rank_dead")]
    assert F(None, 1764950000.0)["incidents"] == []  # no log yet


def test_a_bad_clock_is_refused_naming_the_filter():
    with pytest.raises(AnsibleFilterError) as e:
        F("", "yesterday")
    assert str(e.value).startswith("vllm_watchdog_incidents: could not convert string to float")
