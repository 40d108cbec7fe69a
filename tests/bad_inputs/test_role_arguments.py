"""Role variables of the wrong type or choice (-e) stop `site.yml --tags <role>` at the role's
argument validation (roles/<role>/meta/argument_specs.yml), before any task reaches a node.

The lane is valid (sim_cpu_tp2) so the preflight play passes; hosts are unreachable, so a task
that tried to connect first would show UNREACHABLE instead of the refusal. vllm_ranks and
vllm_health run through playbooks/serve.yml: under site.yml their tags also select the fabric
discovery (rdma_fabric, read-only), which reaches the nodes first (see GAPS).
"""
import pytest

from .conftest import assert_refused_untouched, run_playbook, write_inventory

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
     "value of image_sync_mode must be one of: , pull, registry, stream, verify, got: carrier_pigeon"),
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

GAPS = [
    ("ranks-state-under-site", "vllm_ranks", "vllm_ranks_state", "stopped",
     "value of vllm_ranks_state must be one of: started, absent, got: stopped",
     "site.yml --tags vllm_ranks: roles/rdma_fabric/tasks/main.yml tags its (read-only) discovery vllm_ranks and "
     "vllm_health, and prepare.yml runs it before serve.yml, so every node is contacted before vllm_ranks' argument "
     "validation; validate vllm_ranks/vllm_health arguments before the fabric play (e.g. a no-connection "
     "ansible.builtin.validate_argument_spec play at the top of playbooks/site.yml)"),
    ("swap-size-negative", "node_prep", "node_prep_swap_size_gib", "-4", "node_prep_swap_size_gib",
     "roles/node_prep/meta/argument_specs.yml has no lower bound for node_prep_swap_size_gib and no task refuses "
     "it before the first node task: -4 runs on and reaches the (unreachable) nodes; add an assert at the start of "
     "roles/node_prep/tasks/main.yml (delegate_to localhost / no connection) that it is >= 1"),
    ("swappiness-250", "node_prep", "node_prep_swappiness", "250", "node_prep_swappiness",
     "roles/node_prep: node_prep_swappiness 250 (the kernel takes 0..200) is not refused before the nodes are "
     "reached; add a range check without connection at the start of the role"),
    ("fabric-mtu-100000", "rdma_fabric", "rdma_fabric_mtu", "100000", "rdma_fabric_mtu",
     "roles/rdma_fabric: rdma_fabric_mtu 100000 (no Ethernet port takes it; jumbo frames are ~9000) is not refused before the "
     "nodes are reached; add a range check without connection at the start of the role"),
]


def _run(tmp_path, tag, var, value, playbook="site.yml"):
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    return run_playbook(inv, playbook, tags=tag, extra_vars={var: value})


@pytest.mark.parametrize("case,tag,var,value,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_role_variable_is_refused(tmp_path, case, tag, var, value, expected):
    rc, out = _run(tmp_path, tag, var, value, "playbooks/serve.yml" if tag in SERVE_ONLY else "site.yml")
    assert_refused_untouched(rc, out, expected)
    assert "Validation of arguments failed" in out and "name: %s" % tag in out, out


@pytest.mark.parametrize("case,tag,var,value,expected,gap", [
    pytest.param(*g, marks=pytest.mark.xfail(strict=True, reason=g[5]), id=g[0]) for g in GAPS])
def test_role_variable_gap(tmp_path, case, tag, var, value, expected, gap):
    rc, out = _run(tmp_path, tag, var, value)
    assert_refused_untouched(rc, out, expected)
