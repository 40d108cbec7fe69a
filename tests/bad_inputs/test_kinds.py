"""Values of the watchdog, node_prep and rdma_fabric refused by their kind (meta/kinds.yml, plugins/module_utils/
kinds.py) on the controller, before any node is contacted: the injections and type slips of issue 29, each on its
own host of one inventory so one ansible-playbook run checks a whole class (every host fails at the same task)."""
import pytest

from .conftest import assert_refused_untouched, host_messages, host_name, run_playbook, write_case_inventory

# case id -> (host variables, expected fragment of that host's message)
INJECTIONS = {
    "ssh-user-newline-rule": ({"vllm_watchdog_ssh_user": "vw\nvw ALL=(ALL) NOPASSWD: ALL"},
                              "vllm_watchdog_ssh_user = 'vw\\nvw ALL=(ALL) NOPASSWD: ALL' holds a newline"),
    "agent-comma-shell": ({"vllm_watchdog_agent": "/usr/local/sbin/dgxspark-vllm-agent,/bin/sh"},
                          "vllm_watchdog_agent = '/usr/local/sbin/dgxspark-vllm-agent,/bin/sh' is not an absolute path"),
    "agent-quote": ({"vllm_watchdog_agent": '/usr/local/sbin/a" x'}, "is not an absolute path"),
    "program-newline-unit-line": ({"vllm_watchdog_program": "/opt/w\nExecStartPre=/bin/touch /tmp/p"},
                                  "vllm_watchdog_program = '/opt/w\\nExecStartPre=/bin/touch /tmp/p' holds a newline"),
    "config-specifier": ({"vllm_watchdog_config_file": "/etc/%h/watchdog.json"},
                         "vllm_watchdog_config_file = '/etc/%h/watchdog.json' is not an absolute path"),
    "service-semicolon": ({"vllm_watchdog_service": "a;b"}, "vllm_watchdog_service = 'a;b' is not a systemd unit name"),
}
NUMBERS = {
    "interval-nan": ({"vllm_watchdog_interval_s": float("nan")}, "vllm_watchdog_interval_s = nan must be a finite number"),
    "interval-inf": ({"vllm_watchdog_interval_s": float("inf")}, "vllm_watchdog_interval_s = inf must be a finite number"),
    "state-dir-relative": ({"vllm_watchdog_state_dir": "var/lib/w"}, "vllm_watchdog_state_dir = 'var/lib/w' is not an absolute"),
    "settle-above-spark-memory": ({"vllm_watchdog_settle_min_available_gib": 500},
                                  "vllm_watchdog_settle_min_available_gib = 500 is outside 0..121"),
    "cycles-integral-float": ({"vllm_watchdog_confirm_cycles": 2.0}, "vllm_watchdog_confirm_cycles = 2.0 must be an integer"),
    "mtu-map-traversal": ({"vllm_watchdog_ready_mtu": {"../../../etc": 9000}}, "entry '../../../etc' is not an interface"),
}
# node_prep's, checked before the watchdog's (controller_checks.yml runs the roles' arguments in site order)
NODE_PREP = {
    "deploy-user-trailing-newline": ({"node_prep_deploy_user": "spark\n"}, "node_prep_deploy_user = 'spark\\n' holds a newline"),
    "swappiness-digits-string": ({"node_prep_swappiness": "10"}, "node_prep_swappiness = '10' must be an integer"),
    "swap-size-bool": ({"node_prep_swap_size_gib": True}, "node_prep_swap_size_gib = True must be a number, got a bool"),
}


# Every host of one run fails at the same task (any_errors_fatal stops the play after it): one role per run,
# one host per case, the lane's tensor-parallel size the number of hosts.
@pytest.mark.parametrize("cases", [INJECTIONS, NUMBERS, NODE_PREP], ids=["injections", "numbers", "node_prep"])
def test_each_value_is_refused_by_its_kind_on_its_host(tmp_path, cases):
    inv = write_case_inventory(tmp_path, {c: v[0] for c, v in cases.items()},
                               {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": {"tensor_parallel_size": len(cases)}})
    rc, out = run_playbook(inv, "playbooks/validate.yml")
    messages = host_messages(out)
    for case, value in cases.items():
        expected = value[1]
        assert_refused_untouched(rc, out, "host %s: " % host_name(case))
        assert expected in messages.get(host_name(case), ""), (case, messages.get(host_name(case)))
        assert "no node was touched" in messages.get(host_name(case), "")
