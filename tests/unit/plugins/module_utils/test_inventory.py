"""Controller-side inventory checks (plugins/module_utils/inventory.py) on hand-written host lists."""
import pytest

from ansible_collections.dgxspark.vllm.plugins.filter.inventory import declared_variables
from ansible_collections.dgxspark.vllm.plugins.module_utils.inventory import (
    address_errors,
    address_key,
    inventory_problems,
    secret_errors,
    variable_errors,
)


@pytest.mark.parametrize("a,b", [
    ("198.18.10.10", "198.18.10.10"),
    ("::ffff:198.18.10.10", "198.18.10.10"),
    ("[::ffff:c612:a0a]", "198.18.10.10"),
    ("FE80:0:0:0:0:0:0:1", "fe80::1"),
    ("2001:DB8::0:1", "2001:db8::1"),
    ("Spark-Node-1.example.", "spark-node-1.example"),
])
def test_one_address_in_any_spelling_has_one_key(a, b):
    assert address_key(a)[0] == address_key(b)[0]


def test_leading_zero_octet_is_refused_with_the_plain_spelling():
    key, problem = address_key("198.018.010.010")
    assert problem.endswith("write it without leading zeros, e.g. 198.18.10.10")


def test_shared_address_names_both_hosts_and_the_fix():
    hosts = [{"name": "a", "address": "198.18.10.10"}, {"name": "b", "address": "::ffff:198.18.10.10"},
             {"name": "c", "address": "198.18.10.10", "port": 2222}]
    assert address_errors(hosts) == [
        "hosts a (198.18.10.10), b (::ffff:198.18.10.10): one node at address 198.18.10.10 port 22; every rank needs "
        "its own node. Give each host its own ansible_host, or remove the duplicate"]


def test_host_without_ansible_host_uses_its_name():
    assert address_errors([{"name": "spark-1", "address": None}, {"name": "x", "address": "SPARK-1"}])


def test_misspelt_variable_gets_the_declared_name():
    known = declared_variables()
    assert "vllm_lane_overrides" in known and "node_prep_swappiness" in known
    assert variable_errors("n1", ["vllm_lane_override", "node_prep_swapiness", "ansible_host", "my_var"], known) == [
        "host n1: variable node_prep_swapiness is unknown; did you mean node_prep_swappiness? Rename or remove it "
        "(it would be ignored)",
        "host n1: variable vllm_lane_override is unknown; did you mean vllm_lane_overrides? Rename or remove it "
        "(it would be ignored)"]
    assert variable_errors("n1", ["vllm_xyzzy_qq"], known) == [
        "host n1: variable vllm_xyzzy_qq is unknown; no role of dgxspark.vllm declares it (see the roles' "
        "meta/argument_specs.yml). Rename or remove it (it would be ignored)"]


@pytest.mark.parametrize("value", ["sk-abc def", "sk-abc\n", "\tsk", "hf_x\r\n"])
def test_secret_with_whitespace_is_refused_without_its_value(value):
    errors = secret_errors("n1", {"vllm_api_key": value})
    assert errors and value.strip() not in " ".join(errors)
    assert errors[0].startswith("host n1: vllm_api_key contains whitespace or a newline (the value is not shown)")


def test_empty_inventory_names_the_sources():
    assert inventory_problems([], [], sources=["/x/hosts.yml"])[0].startswith(
        "the inventory (/x/hosts.yml) has no host in group spark_cluster: it did not parse")


def test_ipv6_zone_id_is_refused_and_shape_guard_refusals_come_alone():
    from ansible_collections.dgxspark.vllm.plugins.module_utils.inventory import address_errors
    assert address_errors([{"name": "n1", "address": "fe80::1%enP7s7"}, {"name": "n2", "address": "2001:db8::2"}]) == [
        "host n1: ansible_host fe80::1%enP7s7 is an IPv6 address with a zone id (%enP7s7): the zone names one "
        "machine's interface, and the URLs built from the head's ansible_host cannot carry it. Give the node's "
        "routable address (IPv4 or global IPv6) or its host name"]
    assert inventory_problems([], [], refused=["h.yml line 3: key a is given twice"]) == [
        "h.yml line 3: key a is given twice"]
