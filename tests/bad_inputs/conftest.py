"""Shared helpers for the bad-input suite (issue 11).

Every inventory points at 198.18.250.0/24 (benchmark range, no node answers there) and ssh is replaced
by a recorder (ANSIBLE_SSH_EXECUTABLE): a check that tried to reach a node leaves a line in its log, and
assert_refused_untouched fails on it. The refusal must come before the first connection attempt.
"""
import os
import re
import signal
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)


# Test functions whose parametrized cases share one ansible-playbook run (a module-scoped batch fixture). Under -n
# (make units) xdist's default `load` distribution hands cases of one function to both workers, and each worker
# that got one runs the whole batch (the 115-host lane-overrides batch ran twice). BatchScheduling sends each of
# these functions to one worker, every other test alone as `load` does, the functions with most cases first.
# (xdist's own `--dist loadgroup` with xdist_group marks groups nothing under pytest 9: it renames item._nodeid,
# which pytest 9 no longer reads.)
BATCHED = (
    "test_lane_overrides.py::test_bad_override_is_refused",
    "test_role_arguments.py::test_bad_role_variable_is_refused",
    "test_role_arguments.py::test_serve_role_variable_is_refused_under_site",
    "test_role_arguments.py::test_out_of_range_variable_is_refused",
)


def batched_function(nodeid):
    """The test function (module file::name) of a node id whose cases share a batch, else None."""
    function = nodeid.split("[", 1)[0]
    return function if function.rsplit("/", 1)[-1] in BATCHED else None


def assert_batched():
    """Called by a batch fixture: the test function it serves is in BATCHED (else each worker would run it)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    assert batched_function(current), "add %s to BATCHED in tests/bad_inputs/conftest.py" % current.split("[")[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # an explicit --dist: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

    class BatchScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return batched_function(nodeid) or nodeid

    return BatchScheduling(config, log)


def write_inventory(tmp_path, size, group_vars):
    """A head (rank 0) and size-1 workers, all on unreachable addresses; returns hosts.yml path."""
    names = ["node-%s" % chr(ord("a") + i) for i in range(size)]
    hosts = {n: {"vllm_rank": i, "ansible_host": "198.18.250.%d" % (10 + i)} for i, n in enumerate(names)}
    inv = {"spark_cluster": {"children": {
        "vllm_head": {"hosts": {names[0]: hosts[names[0]]}},
        "vllm_workers": {"hosts": {n: hosts[n] for n in names[1:]} or None}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    gv = tmp_path / "group_vars" / "spark_cluster"
    gv.mkdir(parents=True)
    # The deploy user (node_prep writes it into sudoers) is the SSH user; CI may have no $USER to default to.
    (gv / "main.yml").write_text(yaml.safe_dump(dict({"ansible_user": "spark"}, **group_vars)))
    return str(tmp_path / "hosts.yml")


SSH_RECORDER = """#!/bin/sh
echo "$@" >> "%s"
echo "ssh recorder: no node may be contacted in tests/bad_inputs" >&2
exit 255
"""


def ssh_recorder(directory):
    """An ssh stand-in that logs every call; returns (script path, log path)."""
    log = os.path.join(str(directory), "ssh-calls.log")
    script = os.path.join(str(directory), "ssh-recorder")
    with open(script, "w") as f:
        f.write(SSH_RECORDER % log)
    os.chmod(script, 0o755)
    return script, log


def run_playbook(inventory, playbook, tags=None, extra_vars=None, args=(), timeout=600):
    """Run ansible-playbook from the collection root; return (rc, whitespace-flattened output).

    A refusal that came after an SSH attempt is reported in the output as SSH_ATTEMPTED. A run that outlasts
    timeout fails the test as a hang (its whole process group is killed, forks included).
    """
    script, log = ssh_recorder(os.path.dirname(inventory))
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, playbook] + list(args)
    if tags:
        cmd += ["--tags", tags]
    for key, value in (extra_vars or {}).items():
        cmd += ["-e", "%s=%s" % (key, value)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_TIMEOUT="5",
               ANSIBLE_SSH_EXECUTABLE=script, PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail("ansible-playbook %s hung: no result within %d s\n%s" % (playbook, timeout, stdout[-3000:]))
    # The YAML callback doubles quotes inside single-quoted strings; undo it so messages read as written.
    out = " ".join((stdout + stderr).split()).replace("''", "'")
    if os.path.exists(log):
        with open(log) as f:
            out += " SSH_ATTEMPTED: " + " | ".join(f.read().splitlines())
    return proc.returncode, out


def assert_refused_untouched(rc, out, expected):
    """The run failed, printed the expected message, contacted no node and changed nothing."""
    assert rc != 0, out
    assert expected in out, out
    assert "UNREACHABLE" not in out and "unreachable=1" not in out, "a node was contacted:\n" + out
    assert "SSH_ATTEMPTED" not in out, "ssh was run before the refusal:\n" + out
    assert "Traceback" not in out, "a traceback instead of a message:\n" + out
    assert not re.search(r"changed=[1-9]", out), "something changed before the refusal:\n" + out


def host_name(case):
    """An inventory host name for a case id."""
    return re.sub(r"[^a-z0-9-]", "-", case.lower())


def write_case_inventory(tmp_path, cases, group_vars):
    """One host per case (host vars = the case's variables), all in spark_cluster; returns hosts.yml path.

    Used to check many values of one class in one ansible-playbook run: every host fails at the same task
    with its own message (per-host variables), and any_errors_fatal stops the run right after that task.
    """
    names = [host_name(c) for c in cases]
    hosts = {}
    for i, (name, case) in enumerate(zip(names, cases)):
        hvars = {"vllm_rank": i, "ansible_host": "198.18.%d.%d" % (250 + (10 + i) // 250, (10 + i) % 250)}
        hvars.update(cases[case])
        hosts[name] = hvars
    inv = {"spark_cluster": {"children": {
        "vllm_head": {"hosts": {names[0]: hosts[names[0]]}},
        "vllm_workers": {"hosts": {n: hosts[n] for n in names[1:]} or None}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    gv = tmp_path / "group_vars" / "spark_cluster"
    gv.mkdir(parents=True)
    # The deploy user (node_prep writes it into sudoers) is the SSH user; CI may have no $USER to default to.
    (gv / "main.yml").write_text(yaml.safe_dump(dict({"ansible_user": "spark"}, **group_vars)))
    return str(tmp_path / "hosts.yml")


def host_messages(out):
    """{host: the text of its failure} from a flattened ansible-playbook output."""
    blocks = {}
    for match in re.finditer(r"fatal: \[([^\]]+)\]: FAILED! => (.*?)(?=fatal: \[|\[ERROR\]|NO MORE HOSTS|PLAY RECAP|$)",
                             out):
        blocks[match.group(1)] = match.group(2)
    return blocks
