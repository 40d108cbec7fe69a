"""Role variables of the wrong type or choice stop `site.yml --tags <role>` at the role's argument validation
(roles/<role>/meta/argument_specs.yml), before any task reaches a node.

Cases of one class share an ansible-playbook run, one host per case holding its variable (at most 8 hosts a run, the
lane's tensor_parallel_size set to the host count): each host is refused with its own message. The same values given
with -e (which outranks the inventory) go through the same checks: test_an_extra_var_is_refused_as_a_host_var_is.

The lane is valid (sim_cpu_tp2) so the lane check passes; ssh is a recorder that must stay unused
(conftest.py). Every playbook validates every role's arguments first, in playbooks/controller_checks.yml
(each role's `arguments` entry point, tagged always), so the refusal comes before any play that
connects whatever --tags are given (SITE_CASES: vllm_ranks / vllm_health under site.yml, whose tags also
select the fabric discovery). Ranges the argument specs cannot express are asserted in the role's
tasks/arguments.yml, also without connection (RANGE_CASES).
"""
import json

import pytest

from .conftest import (assert_batched, assert_refused_untouched, host_messages, host_name, run_playbook,
                       write_case_inventory, write_inventory)

# (id, role tag, variable, value, expected message fragment); playbook site.yml unless in SERVE_ONLY
CASES = [
    ("share-mode-ftp", "model_weights", "model_weights_share_mode", "ftp",
     "value of model_weights_share_mode must be one of: nfs, copy, local, got: ftp"),
    ("weights-source-s3", "model_weights", "model_weights_source", "s3",
     "value of model_weights_source must be one of: hub, preplaced, got: s3"),
    ("topology-mesh", "rdma_fabric", "rdma_fabric_topology", "mesh",
     "value of rdma_fabric_topology must be one of: auto, single_subnet, ring, got: mesh"),
    ("fabric-mtu-word", "rdma_fabric", "rdma_fabric_mtu", "jumbo",
     "argument 'rdma_fabric_mtu' is of type str and we were unable to convert to int"),
    ("image-mode-unknown", "image_sync", "image_sync_mode", "carrier_pigeon",
     "value of image_sync_mode must be one of: , pull, registry, stream, verify, build, got: carrier_pigeon"),
    ("stream-compress-lz4", "image_sync", "image_sync_stream_compress", "lz4",
     "value of image_sync_stream_compress must be one of: zstd, gzip, none, got: lz4"),
    ("ranks-state-stopped", "vllm_ranks", "vllm_ranks_state", "stopped",
     "value of vllm_ranks_state must be one of: started, absent, got: stopped"),
    ("pad-scope-unknown", "tp_pad", "tp_pad_scope", "everywhere",
     "value of tp_pad_scope must be one of: each_node, owner, got: everywhere"),
    ("health-timeout-word", "vllm_health", "vllm_health_ready_timeout_s", "soon",
     "argument 'vllm_health_ready_timeout_s' is of type str and we were unable to convert to int"),
    ("swap-required-word", "node_prep", "node_prep_swap_required", "maybe",
     "argument 'node_prep_swap_required' is of type str and we were unable to convert to bool"),
]

SERVE_ONLY = ("vllm_ranks", "vllm_health")

# Run through site.yml: under --tags vllm_ranks / vllm_health, rdma_fabric's discovery and kernel_fix reach the
# nodes before serve.yml runs these roles; playbooks/controller_checks.yml validates their arguments first.
SITE_CASES = [
    ("ranks-state-under-site", "vllm_ranks", "vllm_ranks_state", "stopped",
     "value of vllm_ranks_state must be one of: started, absent, got: stopped"),
    ("health-timeout-under-site", "vllm_health", "vllm_health_ready_timeout_s", "soon",
     "argument 'vllm_health_ready_timeout_s' is of type str and we were unable to convert to int"),
    ("watchdog-interval-word", "vllm_watchdog", "vllm_watchdog_interval_s", "often",
     "argument 'vllm_watchdog_interval_s' is of type str and we were unable to convert to float"),
    ("watchdog-strikes-word", "vllm_watchdog", "vllm_watchdog_max_failed_restarts", "three",
     "argument 'vllm_watchdog_max_failed_restarts' is of type str and we were unable to convert to int"),
]

# Ranges meta/argument_specs.yml cannot express: an assert at the start of the role, on the controller (no
# connection), refuses them before the first node task.
# Typed values (host vars keep their YAML type, as -e JSON does): each is refused by its kind (meta/kinds.yml) or by
# the role's own relation checks.
RANGE_CASES = [
    ("swap-size-negative", "node_prep", "node_prep_swap_size_gib", -4,
     "node_prep_swap_size_gib = -4 is outside 1..1024 (kind integer); choose a value in 1..1024. Fix the variable(s) "
     "in the inventory or -e; no node was touched."),
    ("swap-size-zero", "node_prep", "node_prep_swap_size_gib", 0, "node_prep_swap_size_gib = 0 is outside 1..1024"),
    ("swappiness-250", "node_prep", "node_prep_swappiness", 250, "node_prep_swappiness = 250 is outside 0..200"),
    ("swappiness-negative", "node_prep", "node_prep_swappiness", -1, "node_prep_swappiness = -1 is outside 0..200"),
    ("swappiness-digits-string", "node_prep", "node_prep_swappiness", "10",
     "node_prep_swappiness = '10' must be an integer, got a string (kind integer)"),
    ("fabric-mtu-100000", "rdma_fabric", "rdma_fabric_mtu", 100000, "rdma_fabric_mtu = 100000 is outside 0..9216"),
    ("fabric-mtu-576", "rdma_fabric", "rdma_fabric_mtu", 576, "rdma_fabric_mtu is 576; it must be 0"),
    # host bits set: refused by the controller checks (rdma_fabric's arguments.yml), with the subnet it meant
    ("fabric-cidr-host-bits", "rdma_fabric", "rdma_fabric_cidr", "10.10.0.5/24",
     "rdma_fabric_cidr is 10.10.0.5/24; it must be the fabric's IPv4 subnet in CIDR form with the host bits zero "
     "(for example 10.10.0.0/24, i.e. 10.10.0.0/24)."),
    # the discovery runs under --tags vllm_ranks too: the controller checks come first
    ("fabric-mtu-under-vllm-ranks", "vllm_ranks", "rdma_fabric_mtu", 100000, "rdma_fabric_mtu = 100000 is outside 0..9216"),
    # the watchdog's: site.yml's controller checks run the role's arguments entry point (no connection)
    ("watchdog-interval-zero", "vllm_watchdog", "vllm_watchdog_interval_s", 0,
     "vllm_watchdog_interval_s = 0 is outside 1..3600 (kind duration); choose a value in 1..3600. Fix the variable(s) "
     "in the inventory or -e; no node was touched."),
    ("watchdog-interval-nan", "vllm_watchdog", "vllm_watchdog_interval_s", float("nan"),
     "vllm_watchdog_interval_s = nan must be a finite number"),
    ("watchdog-window-below-interval", "vllm_watchdog", "vllm_watchdog_window_s", 5,
     "vllm_watchdog_window_s = 5 is shorter than vllm_watchdog_interval_s = 30.0"),
    ("watchdog-strikes-zero", "vllm_watchdog", "vllm_watchdog_max_failed_restarts", 0,
     "vllm_watchdog_max_failed_restarts = 0 is outside 1..100"),
    ("watchdog-power-floor-negative", "vllm_watchdog", "vllm_watchdog_power_floor_w", -5,
     "vllm_watchdog_power_floor_w = -5 is outside 1..1000"),
]


def _chunks(cases, size=8):
    """Cases in runs of at most 8 hosts: one host per case, and the lane's tensor_parallel_size (8 at most) set to
    the run's host count so the rank layout passes and each host reaches its own role's arguments."""
    return [cases[i:i + size] for i in range(0, len(cases), size)]


def _batch_run(tmp_path_factory, name, cases, playbook):
    """One ansible-playbook run for a list of cases (id, tag, variable, value, expected): one host per case holding
    its variable (host vars keep the value's type, as `-e` JSON does), --tags every case's role. Each host stops at
    its own first refusal and the others go on to theirs (controller_checks.yml), so each case reads its own
    host's message. Returns {case id: (rc, whole output, that host's message)}."""
    results = {}
    for n, chunk in enumerate(_chunks(cases)):
        tmp = tmp_path_factory.mktemp("%s-%d" % (name, n))
        inv = write_case_inventory(tmp, dict((c[0], {c[2]: c[3]}) for c in chunk),
                                   {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": {"tensor_parallel_size": len(chunk)}})
        rc, out = run_playbook(inv, playbook, tags=",".join(sorted(set(c[1] for c in chunk))))
        messages = host_messages(out)
        for case in chunk:
            results[case[0]] = (rc, out, messages.get(host_name(case[0]), ""))
    return results


@pytest.fixture(scope="module")
def role_batch(tmp_path_factory):
    assert_batched()
    site = [c for c in CASES if c[1] not in SERVE_ONLY]
    serve = [c for c in CASES if c[1] in SERVE_ONLY]
    return dict(_batch_run(tmp_path_factory, "site", site, "site.yml"),
                **_batch_run(tmp_path_factory, "serve", serve, "playbooks/serve.yml"))


@pytest.fixture(scope="module")
def site_batch(tmp_path_factory):
    assert_batched()
    return _batch_run(tmp_path_factory, "under-site", SITE_CASES, "site.yml")


@pytest.fixture(scope="module")
def range_batch(tmp_path_factory):
    assert_batched()
    return _batch_run(tmp_path_factory, "range", RANGE_CASES, "site.yml")


@pytest.mark.parametrize("case,tag,var,value,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_role_variable_is_refused(role_batch, case, tag, var, value, expected):
    rc, out, mine = role_batch[case]
    assert_refused_untouched(rc, out, expected)
    assert expected in mine and "Validation of arguments failed" in mine and "name: %s" % tag in mine, mine


@pytest.mark.parametrize("case,tag,var,value,expected", SITE_CASES, ids=[c[0] for c in SITE_CASES])
def test_serve_role_variable_is_refused_under_site(site_batch, case, tag, var, value, expected):
    rc, out, mine = site_batch[case]
    assert_refused_untouched(rc, out, expected)
    assert expected in mine and "Validation of arguments failed" in mine and "name: %s" % tag in mine, mine


@pytest.mark.parametrize("case,tag,var,value,expected", RANGE_CASES, ids=[c[0] for c in RANGE_CASES])
def test_out_of_range_variable_is_refused(range_batch, case, tag, var, value, expected):
    rc, out, mine = range_batch[case]
    assert_refused_untouched(rc, out, expected)
    assert "host %s: %s" % (host_name(case), expected) in out, mine


def test_an_extra_var_is_refused_as_a_host_var_is(tmp_path):
    """-e outranks every inventory value: a bad value given there is refused by the same check, on the controller
    (one case of each way in: -e key=value, a string, and -e JSON, typed)."""
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2", "vllm_watchdog_interval_s": 30})
    rc, out = run_playbook(inv, "site.yml", tags="vllm_watchdog", extra_vars={"vllm_watchdog_max_failed_restarts": "three"})
    assert_refused_untouched(rc, out, "argument 'vllm_watchdog_max_failed_restarts' is of type str and we were "
                                      "unable to convert to int")
    rc, out = run_playbook(inv, "site.yml", tags="vllm_watchdog", args=("-e", json.dumps({"vllm_watchdog_interval_s": 0})))
    assert_refused_untouched(rc, out, "host node-a: vllm_watchdog_interval_s = 0 is outside 1..3600 (kind duration)")


# Names node_prep writes into sudoers and /etc/fstab (tasks/arguments.yml): one host per value, one run
# (8 hosts: the lane's tensor_parallel_size is overridden to 8 so the rank layout passes).
SUDOERS_FSTAB = {
    "user-with-space": {"node_prep_deploy_user": "spark ALL=(ALL) NOPASSWD: ALL"},
    "user-newline": {"node_prep_deploy_user": "spark\nroot"},
    "tee-relative": {"node_prep_tee_path": "tee"},
    "tee-comma": {"node_prep_tee_path": "/usr/bin/tee, /bin/sh"},
    "sudoers-dot": {"node_prep_sudoers_file": "/etc/sudoers.d/dgxspark.vllm"},
    "sudoers-elsewhere": {"node_prep_sudoers_file": "/etc/sudoers"},
    "swap-space": {"node_prep_swap_file": "/swap file.img"},
    "swap-dotdot": {"node_prep_swap_file": "/var/../etc/shadow"},
}


def test_names_for_sudoers_and_fstab_are_refused(tmp_path):
    inv = write_case_inventory(tmp_path, SUDOERS_FSTAB, {"vllm_lane": "sim_cpu_tp2",
                                                         "vllm_lane_overrides": {"tensor_parallel_size": 8}})
    rc, out = run_playbook(inv, "site.yml", tags="node_prep")
    messages = host_messages(out)
    for case, values in SUDOERS_FSTAB.items():
        mine = messages.get(host_name(case), "")
        assert_refused_untouched(rc, out, "host %s: %s = " % (host_name(case), list(values)[0]))
        assert "(kind " in mine and "no node was touched" in mine, mine


def test_netplan_persist_without_an_mtu_is_refused(tmp_path):
    """Persisting the fabric MTU needs one (rdma_fabric_mtu 0 only compares the ranks): refused before any node."""
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "site.yml", tags="rdma_fabric",
                           args=("-e", json.dumps({"rdma_fabric_mtu": 0, "rdma_fabric_netplan_persist": True})))
    assert_refused_untouched(rc, out, "rdma_fabric_netplan_persist is on but rdma_fabric_mtu is 0; the netplan file "
                                      "needs the MTU to keep. Set rdma_fabric_mtu: 9000, or "
                                      "rdma_fabric_netplan_persist: false.")


@pytest.mark.parametrize("group, expected", [
    ("spark_cluster", "vllm_monitoring_server_group = 'spark_cluster' holds 2 hosts (node-a, node-b); Prometheus runs "
                      "on exactly one"),
    ("prometheus_hosts", "vllm_monitoring_server_group = 'prometheus_hosts' holds 0 hosts (no such group)"),
], ids=["two-hosts", "no-such-group"])
def test_monitoring_server_group_of_one_host(tmp_path, group, expected):
    """Prometheus runs on the one host of vllm_monitoring_server_group (a node or a host outside spark_cluster): any
    other size is refused by the role's arguments entry point, on the controller, naming the hosts."""
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2", "vllm_monitoring_enabled": True,
                                        "vllm_monitoring_server_group": group})
    rc, out = run_playbook(inv, "site.yml")
    assert_refused_untouched(rc, out, expected)
    assert "host node-a: " in out and "No node was touched" in out
