"""The NFS export of model_weights (issue 11, security): roles/model_weights/templates/exports.j2 rendered by
Ansible's templar with the role's own client expression (tasks/nfs.yml) and a real inventory's addresses
(the nodes' fabric and management networks as sim_up creates them). Every export must be read-only and
reach only the workers' fabric addresses: never '*', never the management network, never the owner."""
import ipaddress
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
import jinja2
from ansible.template import Templar, trust_as_template

from ansible_collections.dgxspark.vllm.plugins.filter.weights import model_weights_exports_line
from tests.unit.conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "model_weights")


def _nfs_task(name_prefix):
    with open(os.path.join(ROLE, "tasks", "nfs.yml")) as f:
        tasks = yaml.safe_load(f)
    (task,) = [t for t in tasks if t["name"].startswith(name_prefix)]
    return task


def inventory(name):
    """Hosts, groups, the owner and the fabric/management networks of inventories/<name>."""
    base = os.path.join(ROOT, "inventories", name)
    with open(os.path.join(base, "hosts.yml")) as f:
        inv = yaml.safe_load(f)
    with open(os.path.join(base, "group_vars", "all", "sim_fleet.yml")) as f:
        nets = yaml.safe_load(f)["sim_fleet_networks"]
    groups = inv["all"]["children"]["spark_cluster"]["children"]
    hosts = dict(list(groups["vllm_head"]["hosts"].items()) + list(groups["vllm_workers"]["hosts"].items()))
    mgmt = ipaddress.ip_network(nets[0]["subnet"])  # the first network is management (sim_fleet.yml)
    fabric = [ipaddress.ip_network(n["subnet"]) for n in nets[1:]]
    hostvars = {}
    for h, v in hosts.items():
        # rdma_fabric_host_ip: the node's address on the fabric (what rdma_fabric discovers there).
        fab = [i["address"] for i in v["sim_fleet_interfaces"]
               if any(ipaddress.ip_address(i["address"]) in n for n in fabric)]
        hostvars[h] = {"rdma_fabric_host_ip": fab[0], "ansible_host": v["ansible_host"]}
    return {"hosts": hostvars, "head": list(groups["vllm_head"]["hosts"])[0],
            "groups": {"spark_cluster": sorted(hosts), "vllm_head": list(groups["vllm_head"]["hosts"]),
                       "vllm_workers": sorted(groups["vllm_workers"]["hosts"])},
            "mgmt": mgmt, "fabric": fabric}


def render(inv, clients_override=None, mounts=()):
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")) as f:
        lane = yaml.safe_load(f)
    variables = {"groups": inv["groups"], "hostvars": inv["hosts"], "model_weights_owner": inv["head"],
                 "model_weights_nfs_clients": clients_override or [], "model_weights_nfs_crossmnt": "auto",
                 "_model_weights_artifacts": [{"name": "checkpoint", "host_path": lane["checkpoint"]["host_path"]}],
                 "_model_weights_mounts": {"stdout_lines": list(mounts)}, "ansible_managed": "Ansible managed"}
    templar = Templar(loader=DataLoader(), variables=variables)
    expr = _nfs_task("NFS | client networks of the export")["ansible.builtin.set_fact"]["_model_weights_nfs_clients"]
    clients = templar.template(trust_as_template(expr.strip()))
    variables["_model_weights_nfs_clients"] = clients
    # exports.j2 calls only the collection's filter: render it with Jinja and that filter as the template
    # module would (trim_blocks), without installing Ansible's collection loader into this test process
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["dgxspark.vllm.model_weights_exports_line"] = model_weights_exports_line
    with open(os.path.join(ROLE, "templates", "exports.j2")) as f:
        text = env.from_string(f.read()).render(**variables)
    return clients, text


def exports(text):
    """[(path, [(client, [options])])] of the non-comment lines."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path, *entries = line.split()
        out.append((path, [(e.split("(")[0], e.split("(")[1].rstrip(")").split(",")) for e in entries]))
    return out


@pytest.mark.parametrize("name", ["sim_faults", "sim"])
def test_export_is_read_only_and_limited_to_the_workers_fabric_addresses(name):
    inv = inventory(name)
    clients, text = render(inv)
    rows = exports(text)
    assert [row[0] for row in rows] == ["/var/tmp/models/tiny-glm"]
    workers = sorted(inv["hosts"][w]["rdma_fabric_host_ip"] for w in inv["groups"]["vllm_workers"])
    entries = rows[0][1]
    assert sorted(entry[0] for entry in entries) == ["%s/32" % ip for ip in workers]
    for client, opts in entries:
        assert opts[0] == "ro" and "rw" not in opts, (client, opts)
        assert "no_root_squash" not in opts and "insecure" not in opts
        assert "*" not in client
        net = ipaddress.ip_network(client)
        assert any(net.subnet_of(f) for f in inv["fabric"]), (client, inv["fabric"])
        assert not net.overlaps(inv["mgmt"]), (client, inv["mgmt"])
        assert inv["hosts"][inv["head"]]["rdma_fabric_host_ip"] not in client  # not the owner itself
        assert not any(ipaddress.ip_address(v["ansible_host"]) in net for v in inv["hosts"].values())
    assert clients == ["%s/32" % ip for ip in workers]


def test_sim_faults_values():
    """The concrete export line on the fault fleet (fabric 198.18.21.0/24, management 198.18.20.0/24)."""
    text = render(inventory("sim_faults"))[1]
    assert "/var/tmp/models/tiny-glm 198.18.21.11/32(ro,sync,no_subtree_check)" in text.splitlines()


def test_crossmnt_only_when_a_mount_lies_below():
    text = render(inventory("sim_faults"), mounts=["/", "/var/tmp/models/tiny-glm/sub"])[1]
    assert "/var/tmp/models/tiny-glm 198.18.21.11/32(ro,sync,no_subtree_check,crossmnt)" in text.splitlines()


@pytest.mark.parametrize("clients,ok", [
    (["198.18.21.0/24"], True),
    (["198.18.21.11"], True),
    (["*"], False),
    (["198.18.21.0/24", "*.example.com"], False),
    (["@trusted"], False),
    (["spark-flt-1"], False),
])
def test_the_role_refuses_wildcard_or_named_clients(clients, ok):
    task = _nfs_task("NFS | the export has clients")
    variables = {"_model_weights_nfs_clients": clients, "inventory_hostname": "spark-flt-0"}
    variables.update(task["vars"])
    templar = Templar(loader=DataLoader(), variables=variables)
    results = [templar.template(trust_as_template("{{ %s }}" % cond)) for cond in task["ansible.builtin.assert"]["that"]]
    assert all(results) is ok, results
