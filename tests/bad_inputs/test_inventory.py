"""Bad inventories are refused by the first plays of every playbook (playbooks/controller_checks.yml), on the
controller, before any connection: ssh is a recorder (conftest.py) and must never have been called.

Classes (issue 19): inventory did not parse / has no spark_cluster hosts, one address on two hosts in any
spelling, a host in both head and workers, host count != the lane's tensor-parallel size after overrides,
misspelt variables of the collection's namespace, secrets with whitespace.
"""
import pytest
import yaml

from .conftest import assert_refused_untouched, run_playbook, write_case_inventory, write_inventory

NO_HOSTS = "has no host in group spark_cluster: it did not parse (see Ansible's warnings above) or defines no " \
    "spark_cluster group. Check it with: ansible-inventory -i <inventory> --graph spark_cluster"

UNPARSABLE = [
    ("unclosed-flow", "spark_cluster:\n  hosts: {a: {ansible_host: 198.18.250.10}\n"),
    ("tab-indent", "spark_cluster:\n\thosts:\n\t\ta:\n"),
    ("bad-mapping", "spark_cluster:\n  hosts:\n    a: ansible_host: 198.18.250.10\n"),
]
NO_GROUP = [
    ("other-group", {"sparks": {"hosts": {"a": {"ansible_host": "198.18.250.10", "vllm_rank": 0}}}}),
    ("empty-group", {"spark_cluster": {"hosts": None}}),
    ("empty-file", {}),
]
PLAYBOOKS = [("validate", "playbooks/validate.yml", []), ("site-check", "site.yml", ["--check"]),
             ("site-tags-vllm-ranks", "site.yml", ["--tags", "vllm_ranks"]),
             ("teardown", "playbooks/teardown.yml", ["-e", "vllm_teardown_confirm=yes"])]


def _raw_inventory(tmp_path, text):
    (tmp_path / "hosts.yml").write_text(text)
    return str(tmp_path / "hosts.yml")


@pytest.mark.parametrize("case,text", UNPARSABLE, ids=[c[0] for c in UNPARSABLE])
@pytest.mark.parametrize("name,playbook,args", PLAYBOOKS[:2], ids=[p[0] for p in PLAYBOOKS[:2]])
def test_inventory_that_did_not_parse_fails_the_run(tmp_path, case, text, name, playbook, args):
    rc, out = run_playbook(_raw_inventory(tmp_path, text), playbook, args=args)
    assert_refused_untouched(rc, out, NO_HOSTS)


@pytest.mark.parametrize("case,inv", NO_GROUP, ids=[c[0] for c in NO_GROUP])
@pytest.mark.parametrize("name,playbook,args", PLAYBOOKS, ids=[p[0] for p in PLAYBOOKS])
def test_inventory_without_spark_cluster_hosts_fails_the_run(tmp_path, case, inv, name, playbook, args):
    if name in ("site-tags-vllm-ranks", "teardown") and case != "other-group":
        pytest.skip("one value per class is enough for these playbooks")
    rc, out = run_playbook(_raw_inventory(tmp_path, yaml.safe_dump(inv)), playbook, args=args)
    assert_refused_untouched(rc, out, NO_HOSTS)


# (host, ansible_host, ansible_port): pairs that are one node, in different spellings
SHARED = {
    "v4-a": ("198.18.250.10", None), "v4-b": ("198.18.250.10", None),
    "mapped-a": ("198.18.250.11", None), "mapped-b": ("::ffff:198.18.250.11", None),
    "v6-a": ("2001:db8::a", None), "v6-b": ("2001:DB8:0:0:0:0:0:A", None),
    "name-a": ("Spark-Node.example", None), "name-b": ("spark-node.example.", None),
    "port-a": ("198.18.250.12", 2222), "port-b": ("198.18.250.12", "2222"),
    "zero": ("198.18.250.013", None),
}


def test_one_address_on_two_hosts_is_refused_in_any_spelling(tmp_path):
    cases = {}
    for host, (address, port) in SHARED.items():
        cases[host] = {"ansible_host": address}
        if port is not None:
            cases[host]["ansible_port"] = port
    inv = write_case_inventory(tmp_path, cases, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "site.yml", args=["--check"])
    for expected in [
            "hosts v4-a (198.18.250.10), v4-b (198.18.250.10): one node at address 198.18.250.10 port 22; every rank "
            "needs its own node. Give each host its own ansible_host, or remove the duplicate",
            "hosts mapped-a (198.18.250.11), mapped-b (::ffff:198.18.250.11): one node at address 198.18.250.11",
            "hosts v6-a (2001:db8::a), v6-b (2001:DB8:0:0:0:0:0:A): one node at address 2001:db8::a port 22",
            "hosts name-a (Spark-Node.example), name-b (spark-node.example.): one node at address spark-node.example",
            "hosts port-a (198.18.250.12), port-b (198.18.250.12): one node at address 198.18.250.12 port 2222",
            "host zero: ansible_host 198.18.250.013 has a leading zero in an octet, which ssh's resolver may read "
            "as octal; write it without leading zeros, e.g. 198.18.250.13"]:
        assert_refused_untouched(rc, out, expected)
    # five pairs, each printed twice (the [ERROR] line and the task result)
    assert out.count("one node at address") == 10, out


def test_host_in_head_and_workers_is_refused(tmp_path):
    inv = {"spark_cluster": {"children": {
        "vllm_head": {"hosts": {"node-a": {"ansible_host": "198.18.250.10", "vllm_rank": 0}}},
        "vllm_workers": {"hosts": {"node-a": None, "node-b": {"ansible_host": "198.18.250.11", "vllm_rank": 1}}}}}}
    path = _raw_inventory(tmp_path, yaml.safe_dump(inv))
    (tmp_path / "group_vars" / "spark_cluster").mkdir(parents=True)
    (tmp_path / "group_vars" / "spark_cluster" / "main.yml").write_text("vllm_lane: sim_cpu_tp2\n")
    rc, out = run_playbook(path, "site.yml", args=["--tags", "vllm_health"])
    assert_refused_untouched(rc, out, "host node-a: is in both vllm_head and vllm_workers; put it in one of them")


@pytest.mark.parametrize("size,overrides,expected", [
    (3, {}, "group spark_cluster has 3 hosts but the lane's tensor_parallel_size is 2; add or remove hosts, "
            "or pick a lane for 3 nodes"),
    (1, {}, "group spark_cluster has 1 hosts but the lane's tensor_parallel_size is 2"),
    (2, {"tensor_parallel_size": 4}, "group spark_cluster has 2 hosts but the lane's tensor_parallel_size is 4"),
], ids=["three-hosts-tp2", "one-host-tp2", "override-tp4-two-hosts"])
def test_host_count_differs_from_tp_size_after_overrides(tmp_path, size, overrides, expected):
    inv = write_inventory(tmp_path, size, {"vllm_lane": "sim_cpu_tp2", "vllm_lane_overrides": overrides})
    rc, out = run_playbook(inv, "site.yml", args=["--tags", "vllm_ranks"])
    assert_refused_untouched(rc, out, expected)


TYPOS = {
    "lane-override": ("vllm_lane_override", {"serve": {"max_model_len": 256}}, "vllm_lane_overrides"),
    "swappiness": ("node_prep_swapiness", 10, "node_prep_swappiness"),
    "mtu": ("rdma_fabric_mtuu", 9000, "rdma_fabric_mtu"),
    "image-mode": ("image_sync_mod", "pull", "image_sync_mode"),
    "ranks-state": ("vllm_ranks_stat", "absent", "vllm_ranks_state"),
    "weights-share": ("model_weights_share_mod", "nfs", "model_weights_share_mode"),
}


def test_misspelt_collection_variables_are_refused_with_did_you_mean(tmp_path):
    cases = dict((host, {spec[0]: spec[1]}) for host, spec in TYPOS.items())
    inv = write_case_inventory(tmp_path, cases, {"vllm_lane": "sim_cpu_tp2"})
    # an -e typo too, and a tag that selects no role these variables belong to
    rc, out = run_playbook(inv, "site.yml", args=["--tags", "vllm_bench", "-e", "vllm_healt_ready_timeout_s=5"])
    for host, (var, unused, right) in TYPOS.items():
        assert unused is not None
        assert_refused_untouched(rc, out, "host %s: variable %s is unknown; did you mean %s? Rename or remove it "
                                          "(it would be ignored)" % (host, var, right))
    assert_refused_untouched(rc, out, "variable vllm_healt_ready_timeout_s is unknown; did you mean "
                                      "vllm_health_ready_timeout_s?")


SECRETS = {
    "key-space": ("vllm_api_key", "sk-abc def"),
    "key-newline": ("vllm_api_key", "sk-abc123\n"),
    "key-tab": ("vllm_api_key", "\tsk-abc123"),
    "token-crlf": ("model_weights_hf_token", "hf_abcdef\r\n"),
    "token-inner-newline": ("model_weights_hf_token", "hf_abc\nhf_def"),
}


def test_secret_with_whitespace_is_refused_and_never_shown(tmp_path):
    cases = dict((host, {var: value}) for host, (var, value) in SECRETS.items())
    inv = write_case_inventory(tmp_path, cases, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "playbooks/serve.yml")
    for host, (var, value) in SECRETS.items():
        assert_refused_untouched(rc, out, "host %s: %s contains whitespace or a newline (the value is not shown)"
                                 % (host, var))
        for part in value.split():
            assert part not in out, "secret %s of %s leaked" % (var, host)
