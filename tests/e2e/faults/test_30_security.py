"""Security checks on the deployed fleet (issue 11): no privileged rank, a narrow sudo rule, and a
Hugging Face token that never shows in the output (-vvv), the saved rank logs or the reports.

The last test is a full site.yml at -vvv (benchmark included): on a fleet the scenarios before left
serving, it must pass and change nothing.
"""
import os
import secrets
import time

import pytest

from conftest import ROOT, node_docker, node_sh, record, start_playbook, total

pytestmark = pytest.mark.e2e

SUDOERS = "/etc/sudoers.d/dgxspark-vllm-memory"


def test_no_rank_runs_privileged(fleet):
    for node in fleet.nodes:
        rc, out, err = node_docker(node, "inspect", "-f", "{{.HostConfig.Privileged}}|{{json .HostConfig.CapAdd}}",
                                   fleet.container)
        assert rc == 0, (node, err)
        privileged, cap_add = out.split("|")
        assert privileged == "false", (node, out)
        assert cap_add in ("null", "[]"), (node, out)


def test_sudoers_allows_only_cache_drop_and_compact(fleet):
    for node in fleet.nodes:
        _rc, text, _err = node_sh(node, "cat %s" % SUDOERS)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        assert lines == [
            "Cmnd_Alias DGXSPARK_VLLM_MEMORY = /usr/bin/tee /proc/sys/vm/drop_caches, /usr/bin/tee /proc/sys/vm/compact_memory",
            "spark ALL=(root) NOPASSWD: DGXSPARK_VLLM_MEMORY",
        ], (node, lines)
        _rc, mode, _err = node_sh(node, "stat -c '%%a %%U %%G' %s && visudo -cf %s >/dev/null" % (SUDOERS, SUDOERS))
        assert mode == "440 root root", (node, mode)


def _files_with(token, roots, since):
    found = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    if os.path.getmtime(path) < since:
                        continue
                    with open(path, "rb") as f:
                        if token.encode() in f.read():
                            found.append(path)
                except OSError:
                    continue
    return found


def test_hf_token_never_in_output_logs_or_reports(fleet, tmp_path):
    token = "hf_fltFAKE" + secrets.token_hex(12)
    since = time.time() - 1
    run = start_playbook("site.yml", tmp_path, verbosity=3, extravars={"model_weights_hf_token": token})
    assert run.rc == 0, run.output[-4000:]
    assert "<redacted>" not in token
    assert token not in run.output
    artifacts = os.path.join(str(tmp_path), "artifacts")
    rank_logs = os.path.join(os.path.expanduser("~"), ".cache", "dgxspark-vllm", "rank-logs")
    leaked = _files_with(token, [artifacts, os.path.join(ROOT, "reports"), rank_logs], since)
    assert leaked == [], leaked
    for node in fleet.nodes:
        rc, _out, _err = node_sh(node, "grep -rqsF %s /var/log/dgxspark-vllm /var/lib/dgxspark-vllm /etc/dgxspark-vllm"
                                 % token, check=False)
        assert rc != 0, "%s: the token is in a file on the node" % node
        rc, out, _err = node_docker(node, "inspect", fleet.container)
        assert token not in out
    changed = [(ev["event_data"]["host"], ev["event_data"]["task"]) for ev in run.changed()]
    assert total(run.stats, "changed") == 0, changed
    record("security_hf_token", fault="model_weights_hf_token=<fake> on a site.yml -vvv run (benchmark included)",
           rc=run.rc, run_s=run.seconds, output_bytes=len(run.output), leaked_files=leaked,
           note="the simulated fleet's weights are preplaced, so no task sends the token anywhere; the run proves "
                "no task prints or writes it", changed=changed)
