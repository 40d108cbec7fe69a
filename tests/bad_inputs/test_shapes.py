"""YAML and inventory shapes (issue 29): each is a correct parse or a refusal naming the file/host, the key and the
fix, on the controller, never a traceback or a hang (run_playbook fails a run that outlasts its timeout).

Parsed: an INI inventory, anchors with merge keys, a UTF-8 BOM, a tab after a colon. Refused: an alias bomb (in the inventory, its
group_vars or a lane file; Ansible's own YAML plugin hangs on it, plugins/inventory/shape_guard.py claims it first),
a key given twice, an IPv6 address with a zone id, extra vars of the wrong type, a vault value that does
not decrypt, secrets with quotes or beyond the length bound, a playbook's own bad parameters.
"""
import json
import os
import re
import subprocess

import pytest
import yaml

from .conftest import BIN, assert_refused_untouched, run_playbook, write_case_inventory, write_inventory

# A run that takes longer is a hang: a good validate.yml takes under 15 s on a busy 2-core machine.
HANG_S = 120
HOSTS = {"node-a": {"ansible_host": "198.18.250.10", "vllm_rank": 0},
         "node-b": {"ansible_host": "198.18.250.11", "vllm_rank": 1}}
GROUP_VARS = "vllm_lane: sim_cpu_tp2\nansible_user: spark\n"


def _yaml_inventory(node_a="{ansible_host: 198.18.250.10, vllm_rank: 0}",
                    node_b="{ansible_host: 198.18.250.11, vllm_rank: 1}", extra_vars=""):
    return ("spark_cluster:\n  vars:\n    vllm_lane: sim_cpu_tp2\n    ansible_user: spark\n%s"
            "  children:\n    vllm_head:\n      hosts:\n        node-a: %s\n"
            "    vllm_workers:\n      hosts:\n        node-b: %s\n" % (extra_vars, node_a, node_b))


def _bomb(indent="", levels=9):
    lines = ['%sl0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]' % indent]
    lines += ["%sl%d: &l%d [%s]" % (indent, i, i, ",".join(["*l%d" % (i - 1)] * 9)) for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


def _assert_parsed(rc, out):
    """validate.yml passed: both ranks read as written, nothing contacted, no traceback."""
    assert rc == 0, out
    assert "node-a is rank 0 (head, serves the API)" in out, out
    assert "node-b is rank 1 (worker, --headless)" in out, out
    assert "SSH_ATTEMPTED" not in out and "Traceback" not in out, out


INI = """[vllm_head]
node-a ansible_host=198.18.250.10 vllm_rank=0

[vllm_workers]
node-b ansible_host=198.18.250.11 vllm_rank=1

[spark_cluster:children]
vllm_head
vllm_workers

[spark_cluster:vars]
vllm_lane=sim_cpu_tp2
ansible_user=spark
"""
MERGE = _yaml_inventory(node_a="&node\n          ansible_host: 198.18.250.10\n          vllm_rank: 0",
                        node_b="\n          <<: *node\n          ansible_host: 198.18.250.11\n          vllm_rank: 1")
# A tab after a colon is YAML 1.2 separation and Ansible's loader reads it; a tab indent is refused
# (test_inventory.py tab-indent).
PARSED = [("ini", "hosts.ini", INI), ("anchors-merge-keys", "hosts.yml", MERGE),
          ("tab-after-colon", "hosts.yml", _yaml_inventory().replace("ansible_user: spark", "ansible_user:\tspark")),
          ("utf8-bom", "hosts.yml", b"\xef\xbb\xbf" + _yaml_inventory().encode())]


@pytest.mark.parametrize("case,name,text", PARSED, ids=[c[0] for c in PARSED])
def test_inventory_shape_parses_as_written(tmp_path, case, name, text):
    assert case
    rc, out = run_playbook(_write(tmp_path, name, text), "playbooks/validate.yml", timeout=HANG_S)
    _assert_parsed(rc, out)


REFUSED = [
    ("bomb-in-inventory", {"hosts.yml": _yaml_inventory(extra_vars=_bomb("    "))},
     "hosts.yml line 10: its aliases expand to more than 100000 values (an alias bomb); write the values out, or "
     "alias a value at most once or twice"),
    ("bomb-in-group-vars", {"hosts.yml": _yaml_inventory(), "group_vars/spark_cluster/main.yml": GROUP_VARS + _bomb()},
     "group_vars/spark_cluster/main.yml line 8: its aliases expand to more than 100000 values (an alias bomb)"),
    ("duplicate-host-key", {"hosts.yml": _yaml_inventory(node_b="{ansible_host: 198.18.250.11, vllm_rank: 1, "
                                                                "vllm_rank: 0}")},
     "hosts.yml line 11: key vllm_rank is given twice in one mapping (line:column 11:47 and 11:61); YAML keeps only "
     "the last one: remove one of them"),
    ("duplicate-group-var", {"hosts.yml": _yaml_inventory(), "group_vars/spark_cluster.yml": GROUP_VARS +
                             "vllm_lane: tp2_dflash2\n"},
     "group_vars/spark_cluster.yml line 3: key vllm_lane is given twice in one mapping (line:column 1:1 and 3:1)"),
    ("ipv6-zone-id", {"hosts.yml": _yaml_inventory(node_a='{ansible_host: "fe80::1%enP7s7", vllm_rank: 0}')},
     "host node-a: ansible_host fe80::1%enP7s7 is an IPv6 address with a zone id (%enP7s7): the zone names one "
     "machine's interface, and the URLs built from the head's ansible_host cannot carry it. Give the node's "
     "routable address (IPv4 or global IPv6) or its host name"),
]


@pytest.mark.parametrize("case,files,expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_inventory_shape_is_refused_by_file_and_line(tmp_path, case, files, expected):
    assert case
    for name, text in files.items():
        _write(tmp_path, name, text)
    rc, out = run_playbook(str(tmp_path / "hosts.yml"), "playbooks/validate.yml", timeout=HANG_S)
    assert_refused_untouched(rc, out, expected)


def test_alias_bomb_in_a_lane_file_is_refused(tmp_path):
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "lanes", "sim_cpu_tp2.yml")) as f:
        lane = f.read()
    lanes = tmp_path / "lanes"
    _write(lanes, "sim_cpu_tp2.yml", lane + _bomb())
    (tmp_path / "inv").mkdir()
    inv = write_inventory(tmp_path / "inv", 2, {"vllm_lane": "sim_cpu_tp2", "preflight_lanes_dir": str(lanes)})
    rc, out = run_playbook(inv, "playbooks/validate.yml", timeout=HANG_S)
    assert_refused_untouched(rc, out, "lane sim_cpu_tp2 is refused (fix the lane file):")
    assert_refused_untouched(rc, out, "/lanes/sim_cpu_tp2.yml line %d: its aliases expand to more than 100000 values"
                             % (lane.count("\n") + 6))


EXTRA_VARS = [
    ("overrides-list", {"vllm_lane_overrides": []},
     "host node-a: vllm_lane_overrides must be a mapping of lane keys, e.g. {\"serve\": {\"max_model_len\": 8192}}; "
     "a list was given (group_vars or -e)"),
    ("section-list", {"vllm_lane_overrides": {"serve": []}}, "lane sim_cpu_tp2: serve: expected dict, got list ([])"),
    ("string-for-int", {"vllm_lane_overrides": {"serve": {"max_model_len": "8192"}}},
     "lane sim_cpu_tp2: serve.max_model_len: expected int, got string ('8192')"),
    ("lane-list", {"vllm_lane": ["sim_cpu_tp2"]}, "host node-a: vllm_lane is not set (or not a string)"),
    ("role-int-as-word", {"vllm_health_ready_timeout_s": "soon"},
     "argument 'vllm_health_ready_timeout_s' is of type str and we were unable to convert to int"),
]


@pytest.mark.parametrize("case,extra,expected", EXTRA_VARS, ids=[c[0] for c in EXTRA_VARS])
def test_extra_vars_json_of_the_wrong_type_is_refused(tmp_path, case, extra, expected):
    assert case
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "site.yml", args=["--check", "-e", json.dumps(extra)], timeout=HANG_S)
    assert_refused_untouched(rc, out, expected)


def _vault_inventory(tmp_path, secret):
    (tmp_path / "pw-right").write_text("right-password\n")
    (tmp_path / "pw-wrong").write_text("wrong-password\n")
    enc = subprocess.run([os.path.join(BIN, "ansible-vault"), "encrypt_string", "--vault-password-file",
                          str(tmp_path / "pw-right"), secret, "--name", "model_weights_hf_token"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    with open(tmp_path / "group_vars" / "spark_cluster" / "main.yml", "a") as f:
        f.write(enc)
    return inv


@pytest.mark.parametrize("password", [None, "pw-wrong"], ids=["no-vault-password", "wrong-vault-password"])
def test_vault_value_that_does_not_decrypt_is_named(tmp_path, password):
    secret = "hf_vaultedTokenValue123"
    inv = _vault_inventory(tmp_path, secret)
    args = ["--check"] + (["--vault-password-file", str(tmp_path / password)] if password else [])
    rc, out = run_playbook(inv, "site.yml", args=args, timeout=HANG_S)
    assert_refused_untouched(rc, out, "host node-a: model_weights_hf_token is vault-encrypted and does not decrypt "
                                      "with the vault secrets given: run with --ask-vault-pass or --vault-password-file")
    assert secret not in out


def test_vault_value_that_decrypts_passes(tmp_path):
    secret = "hf_vaultedTokenValue123"
    inv = _vault_inventory(tmp_path, secret)
    rc, out = run_playbook(inv, "playbooks/validate.yml", args=["--vault-password-file", str(tmp_path / "pw-right")],
                           timeout=HANG_S)
    _assert_parsed(rc, out)
    assert secret not in out


SECRETS = {
    "key-double-quote": ("vllm_api_key", 'sk-abc"def'), "key-single-quote": ("vllm_api_key", "sk-abc'def"),
    "key-backtick": ("vllm_api_key", "sk-abc`id`"), "key-unicode": ("vllm_api_key", "sk-abc\u00e9def"),
    "token-nul": ("model_weights_hf_token", "hf_abc\u0001def"),
    "token-too-long": ("model_weights_hf_token", "hf_" + "x" * 600),
    "token-vault-text": ("model_weights_hf_token", "$ANSIBLE_VAULT;1.1;AES256\n3132"),
}


def test_secret_outside_printable_ascii_or_too_long_is_refused_and_never_shown(tmp_path):
    cases = dict((host, {var: value}) for host, (var, value) in SECRETS.items())
    inv = write_case_inventory(tmp_path, cases, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "site.yml", args=["--check"], timeout=HANG_S)
    rules = {"token-too-long": "model_weights_hf_token is 603 characters long, more than 512 (the value is not shown)",
             "token-vault-text": "model_weights_hf_token holds Ansible vault ciphertext as plain text"}
    for host, (var, value) in SECRETS.items():
        rule = rules.get(host, "%s may hold only printable ASCII without quotes" % var)
        assert_refused_untouched(rc, out, "host %s: %s" % (host, rule))
        assert value not in out and value[3:] not in out, "secret of %s leaked" % host


PARAMETERS = [
    ("watchdog-action-typo", "playbooks/watchdog.yml", {"action": "paus"},
     "host localhost: action = 'paus' is not one of 'status', 'pause', 'resume', 'reset', 'stop' (kind choice); "
     "choose one of them. Fix the variable(s) in the inventory or -e; no node was touched."),
    ("watchdog-action-list", "playbooks/watchdog.yml", {"vllm_watchdog_action": ["pause"]},
     "vllm_watchdog_action = ['pause'] is not one of 'status', 'pause', 'resume', 'reset', 'stop'"),
    ("doctor-stamp-traversal", "playbooks/doctor.yml", {"doctor_stamp": "../../etc"},
     "host localhost: doctor_stamp = '../../etc' is not a UTC stamp YYYYmmddTHHMMSSZ (kind timestamp); e.g. "
     "20260101T000000Z, or leave it unset."),
    ("doctor-head-unknown", "playbooks/doctor.yml", {"doctor_head": "node-z"},
     "doctor_head=node-z is not one of node-a, node-b; nothing was changed"),
    ("restart-state-absent", "playbooks/restart.yml", {"vllm_ranks_state": "absent"},
     "vllm_ranks_state=absent is not one of started; nothing was changed. Fix: remove -e vllm_ranks_state; "
     "playbooks/teardown.yml removes the group"),
    ("restart-not-forced", "playbooks/restart.yml", {"vllm_ranks_force_restart": False},
     "vllm_ranks_force_restart=false is not one of true, yes, 1; nothing was changed"),
]


@pytest.mark.parametrize("case,playbook,extra,expected", PARAMETERS, ids=[c[0] for c in PARAMETERS])
def test_playbook_parameter_is_refused_on_the_controller(tmp_path, case, playbook, extra, expected):
    assert case
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, playbook, args=["-e", json.dumps(extra)], timeout=HANG_S)
    assert_refused_untouched(rc, out, expected)


@pytest.mark.parametrize("text", ["spark_cluster:\n  hosts: {a: {ansible_host: 198.18.250.10}\n",
                                  yaml.safe_dump({"spark_clusters": {"hosts": {"a": {"vllm_rank": 0}}}})],
                         ids=["unparsable", "misspelt-group"])
def test_watchdog_playbook_fails_on_an_inventory_it_cannot_use(tmp_path, text):
    rc, out = run_playbook(_write(tmp_path, "hosts.yml", text), "playbooks/watchdog.yml", timeout=HANG_S)
    assert_refused_untouched(rc, out, "has no host in group spark_cluster: it did not parse")


def test_watchdog_playbook_fails_on_a_misspelt_head_group(tmp_path):
    inv = {"spark_cluster": {"vars": {"vllm_lane": "sim_cpu_tp2", "ansible_user": "spark"}, "children": {
        "vllm_heads": {"hosts": {"node-a": HOSTS["node-a"]}}, "vllm_workers": {"hosts": {"node-b": HOSTS["node-b"]}}}}}
    rc, out = run_playbook(_write(tmp_path, "hosts.yml", yaml.safe_dump(inv)), "playbooks/watchdog.yml",
                           timeout=HANG_S)
    assert_refused_untouched(rc, out, "group vllm_head has 0 hosts (none); it must hold exactly one host, rank 0")


def test_restart_accepts_its_own_values(tmp_path):
    """The parameter check passes the values restart.yml sets itself (the run then stops at the unreachable head)."""
    inv = write_inventory(tmp_path, 2, {"vllm_lane": "sim_cpu_tp2"})
    rc, out = run_playbook(inv, "playbooks/restart.yml", args=["-e", "vllm_ranks_state=started", "-e",
                                                               "vllm_ranks_force_restart=true"], timeout=HANG_S)
    assert "is not one of" not in out and "Traceback" not in out, out
    assert re.search(r"are not overridden\] \**\s*ok: \[localhost\]", out), out
    assert rc != 0  # every node is the ssh recorder's
