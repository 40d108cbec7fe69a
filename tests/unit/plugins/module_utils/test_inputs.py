"""inputs.py: the secret rule (one implementation for the controller checks and the modules) and the refusals
of playbook parameters (issue 29)."""
import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import (
    SECRET_MAX_LEN, choice_problem, pattern_problem, secret_problem)
from ansible_collections.dgxspark.vllm.plugins.module_utils.inventory import secret_errors


@pytest.mark.parametrize("value", [None, "", "sk-" + "a" * 61, "hf_AbC123", "a!#$%&()*+,-./:;<=>?@[]^_{|}~z",
                                   "x" * SECRET_MAX_LEN])
def test_secret_accepted(value):
    assert secret_problem("vllm_api_key", value) is None


@pytest.mark.parametrize("value,rule", [
    ('sk"abc', "printable ASCII without quotes"), ("sk'abc", "printable ASCII without quotes"),
    ("sk`abc", "printable ASCII without quotes"), ("sk\x00abc", "printable ASCII without quotes"),
    ("skéabc", "printable ASCII without quotes"), ("sk\u200babc", "printable ASCII without quotes"),
    ("sk abc", "contains whitespace or a newline"), ("skabc\n", "contains whitespace or a newline"),
    ("x" * (SECRET_MAX_LEN + 1), "is %d characters long, more than %d" % (SECRET_MAX_LEN + 1, SECRET_MAX_LEN)),
    ("$ANSIBLE_VAULT;1.1;AES256\n6162", "holds Ansible vault ciphertext as plain text"),
    (12345, "must be a string, got integer; quote it"), (["k"], "must be a string, got list"),
])
def test_secret_refused_without_its_value(value, rule):
    problem = secret_problem("vllm_api_key", value)
    assert problem.startswith("vllm_api_key ") and rule in problem, problem
    assert "(the value is not shown)" in problem or not isinstance(value, str)
    if isinstance(value, str):
        assert value.strip("x") == "" or value not in problem


def test_inventory_secret_errors_use_the_same_rule():
    assert secret_errors("n1", {"vllm_api_key": 'a"b', "model_weights_hf_token": "ok_token"}) == [
        "host n1: " + secret_problem("vllm_api_key", 'a"b')]


def test_choice_names_parameter_value_and_fix():
    assert choice_problem("action", "pause", ["status", "pause"], "-e action=status") is None
    assert choice_problem("action", "paus", ["status", "pause"], "-e action=status") == (
        "action=paus is not one of status, pause; nothing was changed. Fix: -e action=status")
    assert choice_problem("action", ["pause"], ["pause"], "f").startswith("action=(list) is not one of pause")
    assert choice_problem("action", True, ["true"], "f").startswith("action=(boolean) is not")
    # a newline is shown escaped, a long value cut: the message stays one short line
    assert choice_problem("action", "pause\nx", ["pause"], "f").startswith("action=pause\\nx is not")
    assert "action=" + "y" * 60 + "... is not" in choice_problem("action", "y" * 5000, ["pause"], "f")


def test_pattern_is_matched_in_full():
    stamp = "[0-9]{8}T[0-9]{6}Z"
    assert pattern_problem("doctor_stamp", "20260101T000000Z", stamp, "YYYYmmddTHHMMSSZ", "unset it") is None
    for bad in ("20260101T000000Z\n", "../20260101T000000Z", "20260101T000000Z/..", 20260101):
        assert pattern_problem("doctor_stamp", bad, stamp, "YYYYmmddTHHMMSSZ", "unset it").endswith(
            "is not of the form YYYYmmddTHHMMSSZ; nothing was changed. Fix: unset it"), bad


def test_vault_value_that_did_not_decrypt_is_named_with_its_fix():
    from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import Undecryptable
    assert secret_problem("model_weights_hf_token", Undecryptable()) == (
        "model_weights_hf_token is vault-encrypted and does not decrypt with the vault secrets given: run with "
        "--ask-vault-pass or --vault-password-file (the vault id it was encrypted with), or encrypt it again: "
        "ansible-vault encrypt_string --name model_weights_hf_token")
