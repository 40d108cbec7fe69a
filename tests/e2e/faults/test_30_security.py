"""Security checks on the deployed fleet (issue 11): no privileged rank, a narrow sudo rule, an API key
that the head enforces and that never shows anywhere but its one secret file, and a Hugging Face token that
never shows in the output (-vvv), the saved rank logs or the reports.

The API key test's keyed run also changes one serve argument and turns the watchdog on with short cycles, so its
one restart pair (key on, key off) proves three things: a changed serve argument recreates every rank and no other
role's state (issue 9), the key is enforced and never leaked (issue 11), and the watchdog's canary authenticates
with the key and leaves a healthy group alone (issue 16's API-key lane).

The last test is a full site.yml at -vvv: on a fleet the scenarios before left serving (the API key test ends
with the keyless group restored), it must pass and change nothing (a converged run: vllm_health's quick gate,
no benchmark; the API key test's run restarts the group, so it runs the full gate and the benchmark).
"""
import json
import os
import secrets
import time
import urllib.error
import urllib.request

import pytest

from conftest import (SKIP_BENCH, ROOT, WATCHDOG_FAST, WATCHDOG_SERVICE, WATCHDOG_STATE_DIR, assert_watchdog_left_alone,
                      node_docker, node_sh, record, start_playbook, total)

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


API_KEY_FILE = "/etc/dgxspark-vllm/api-key"
# Where a node keeps files a run could write: configuration, logs, state, caches, temporary files, the
# nested dockerd's container logs and configs. Image layers (/var/lib/docker/overlay2) are read-only
# copies of the engine image; the rank container's own writable layer is added per node below.
NODE_PATHS = ["/etc", "/var/log", "/var/lib/dgxspark-vllm", "/var/tmp", "/tmp", "/root", "/home", "/run",
              "/opt/sim", "/var/lib/docker/containers", WATCHDOG_STATE_DIR, "/opt/dgxspark-vllm"]
# The keyed run's one changed serve argument (issue 9) and the roles whose state it may change: the rank group
# (vllm_ranks, with node_prep's memory ritual before a start), the watchdog it turns on, and the full health gate
# and benchmark that follow a restart. Every other role (the fabric, the image, the fix files, the weights, the
# padded checkpoint) must report nothing changed.
SERVE_CHANGE = {"serve": {"max_model_len": 1024}}
RESTART_ROLES = {"vllm_ranks", "node_prep", "vllm_watchdog", "vllm_health", "vllm_bench"}


def _post(url, body, key=None, timeout=300):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _chat(fleet, key=None):
    return _post(fleet.base_url + "/v1/chat/completions",
                 {"model": fleet.model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                  "temperature": 0}, key)


def _node_files_with(node, needle, container):
    """Files on a node holding the needle (fixed string), the rank container's writable layer included."""
    _rc, upper, _err = node_docker(node, "inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", container)
    paths = NODE_PATHS + ([upper.strip()] if upper.strip().startswith("/") else [])
    rc, out, err = node_sh(node, "grep -rlsF -- '%s' %s; true" % (needle, " ".join(paths)), timeout=600)
    return sorted(ln for ln in out.splitlines() if ln.strip())


def _container_cmdlines(node, container):
    rc, out, err = node_docker(node, "exec", container, "sh", "-c",
                               "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
    assert rc == 0, (node, err)
    return [ln for ln in out.splitlines() if ln.strip()]


def _changed_roles(run):
    """Roles (or plays, for tasks outside a role) of the tasks that reported changed."""
    return set((ev["event_data"].get("role") or ev["event_data"].get("play")) for ev in run.changed())


def _max_model_len(node, container):
    rc, out, err = node_docker(node, "inspect", "-f", "{{json .Config.Cmd}}", container)
    assert rc == 0, (node, err)
    cmd = json.loads(out)
    return int(cmd[cmd.index("--max-model-len") + 1])


def _assert_key_absent(fleet, key, run, tmp_path, since, secret_on_head):
    assert key not in run.output
    artifacts = os.path.join(str(tmp_path), "artifacts")
    rank_logs = os.path.join(os.path.expanduser("~"), ".cache", "dgxspark-vllm", "rank-logs")
    leaked = _files_with(key, [artifacts, os.path.join(ROOT, "reports"), rank_logs], since)
    assert leaked == [], leaked
    found = {}
    for node in fleet.nodes:
        files = _node_files_with(node, key, fleet.container)
        allowed = [API_KEY_FILE] if (secret_on_head and node == fleet.head) else []
        assert files == allowed, (node, files)
        found[node] = files
        rc, out, _err = node_docker(node, "inspect", fleet.container)
        assert rc == 0 and key not in out, node
        cmdlines = _container_cmdlines(node, fleet.container)
        assert cmdlines and not [c for c in cmdlines if key in c], node
    return leaked, found


def test_api_key_enforced_and_never_leaked(serving, tmp_path):
    """vllm_api_key and one changed serve argument on a site.yml -vvv run (benchmark included, the watchdog on):
    every rank is recreated with the new argument and no other role changes anything; the head requires the key
    (401 without, 200 with) and the key is nowhere but the head's 0600 secret file; the watchdog's canary reads
    that file, answers, and nothing is restarted; --check --diff with another key leaks nothing and changes
    nothing; a run without the key (and the watchdog off, as the fault suite runs) restores the keyless group."""
    fleet = serving
    key = "sk-fltFAKE" + secrets.token_hex(16)
    since = time.time() - 1
    before = fleet.ranks()
    lane_len = _max_model_len(fleet.head, fleet.container)
    run = start_playbook("site.yml", tmp_path / "keyed", verbosity=3,
                         extravars=dict(WATCHDOG_FAST, vllm_api_key=key, vllm_lane_overrides=SERVE_CHANGE))
    assert run.rc == 0, run.output[-4000:]
    after = fleet.ranks()
    for node in fleet.nodes:  # a new key and a changed argument restart the whole group
        assert after[node]["running"] and after[node]["id"] != before[node]["id"], (node, before[node], after[node])
        assert _max_model_len(node, fleet.container) == SERVE_CHANGE["serve"]["max_model_len"] != lane_len, node
    roles = _changed_roles(run)
    assert "vllm_ranks" in roles and roles <= RESTART_ROLES, roles
    # the watchdog, installed by this run, authenticates its canary with the head's key file
    _rc, cfg, _err = node_sh(fleet.head, "cat /etc/dgxspark-vllm-watchdog/watchdog.json")
    assert json.loads(cfg)["api_key_file"] == API_KEY_FILE
    verdicts = assert_watchdog_left_alone(fleet, 20, 4)
    assert fleet.ranks() == after
    leaked, found = _assert_key_absent(fleet, key, run, tmp_path / "keyed", since, secret_on_head=True)
    _rc, mode, _err = node_sh(fleet.head, "stat -c '%%a %%U %%G' %s; stat -c '%%a %%U' %s"
                              % (API_KEY_FILE, os.path.dirname(API_KEY_FILE)))
    assert mode.splitlines() == ["600 root root", "700 root"], mode
    rc, _out, _err = node_sh(fleet.worker, "test -e %s" % API_KEY_FILE, check=False)
    assert rc != 0, "the worker holds a key file"
    _rc, env, _err = node_docker(fleet.head, "inspect", "-f", "{{json .Config.Env}}", fleet.container)
    assert "VLLM_API_KEY" not in env and "DGXSPARK_API_KEY_FILE=/run/secrets/dgxspark-vllm-api-key" in env, env
    status_without, body_without = _chat(fleet)
    status_wrong, _body = _chat(fleet, key + "x")
    status_with, body_with = _chat(fleet, key)
    assert (status_without, status_wrong, status_with) == (401, 401, 200), (body_without, body_with)
    assert body_with["usage"]["completion_tokens"] > 0, body_with
    assert fleet.health() == 200  # /health is not guarded by vLLM's AuthenticationMiddleware
    with open(os.path.join(ROOT, "reports", "health-latest.json")) as f:
        report = json.load(f)
    assert report["ok"] and report["smoke"]["auth"]["status_without_key"] == 401, report["smoke"]
    bench_ok = run.ok("Vllm_bench | verdict")
    assert bench_ok, "the benchmark did not pass with the key"

    other = "sk-fltFAKE" + secrets.token_hex(16)
    since_check = time.time() - 1
    check = start_playbook("site.yml", tmp_path / "check", verbosity=3,
                           extravars=dict(WATCHDOG_FAST, vllm_api_key=other, vllm_lane_overrides=SERVE_CHANGE),
                           cmdline=["--check", "--diff", "--tags", "vllm_ranks"])
    assert check.rc == 0, check.output[-4000:]
    assert "api_key_fingerprint" in check.output  # the would-be restart names the changed key, not the key
    _assert_key_absent(fleet, other, check, tmp_path / "check", since_check, secret_on_head=False)
    assert key not in check.output
    assert fleet.ranks() == after, "check mode changed the ranks"

    since_off = time.time() - 1
    off = start_playbook("site.yml", tmp_path / "keyless", extravars={}, cmdline=SKIP_BENCH)
    assert off.rc == 0, off.output[-4000:]
    assert key not in off.output
    assert _files_with(key, [os.path.join(str(tmp_path / "keyless"), "artifacts"), os.path.join(ROOT, "reports"),
                             os.path.join(os.path.expanduser("~"), ".cache", "dgxspark-vllm", "rank-logs")],
                       since_off) == []
    for node in fleet.nodes:
        assert _node_files_with(node, key, fleet.container) == [], node
    restored = fleet.ranks()
    assert all(restored[n]["running"] and restored[n]["id"] != after[n]["id"] for n in fleet.nodes), restored
    assert [_max_model_len(n, fleet.container) for n in fleet.nodes] == [lane_len] * len(fleet.nodes)
    status_plain, body_plain = _chat(fleet)
    assert status_plain == 200, body_plain
    rc, _out, _err = node_sh(fleet.head, "test -e %s" % API_KEY_FILE, check=False)
    assert rc != 0, "the key file outlived the key"
    _rc, active, _err = node_sh(fleet.head, "systemctl is-active %s" % WATCHDOG_SERVICE, check=False)
    assert active.strip() == "inactive", active
    record("security_api_key", fault="vllm_api_key=<random> and max_model_len %d on a site.yml -vvv run "
           "(benchmark included, the watchdog on), then --check --diff -vvv --tags vllm_ranks with another key, "
           "then site.yml without a key" % SERVE_CHANGE["serve"]["max_model_len"],
           rc=run.rc, run_s=run.seconds, check_s=check.seconds, keyless_s=off.seconds,
           output_bytes=len(run.output), leaked_files=leaked, node_files_with_key=found,
           http_without_key=status_without, http_wrong_key=status_wrong, http_with_key=status_with,
           http_after_key_removed=status_plain, secret_file_mode=mode.splitlines(),
           changed_roles_keyed=sorted(roles), watchdog_verdicts=sorted(set(m.split()[0] for m in verdicts)),
           watchdog_cycles=len(verdicts),
           changed_keyed=total(run.stats, "changed"), changed_check=total(check.stats, "changed"),
           changed_keyless=total(off.stats, "changed"))


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
    record("security_hf_token", fault="model_weights_hf_token=<fake> on a converged site.yml -vvv run",
           rc=run.rc, run_s=run.seconds, output_bytes=len(run.output), leaked_files=leaked,
           note="the simulated fleet's weights are preplaced, so no task sends the token anywhere; the run proves "
                "no task prints or writes it", changed=changed)
