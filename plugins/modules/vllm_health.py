#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Readiness, smoke and /metrics checks of a tensor-parallel vLLM group
version_added: "0.1.0"
description:
  - Read-only health gate of a vLLM group started by M(dgxspark.vllm.vllm_rank). It never reports
    C(changed) and never uses C(/v1/models) for liveness, which answers 200 with a dead engine
    (docs/health.md).
  - I(mode=wait) runs one readiness cycle on a rank's node. It polls C(GET /health) on the head for
    up to O(timeout_s) seconds while checking, every O(poll_s) seconds, the state of the local rank
    container with C(docker inspect). A container that is not running fails at once with its last
    log lines and a reason class (out of memory, NCCL/Gloo init, missing file, free-memory check,
    other). It returns the boot phase read from the container log (loading shards k/N, profiling,
    KV cache, graph capture, API up). Run it on every rank in the same task, in a loop of short
    cycles, so that a dead worker is seen within one cycle; see C(docs/health.md).
  - I(mode=smoke) sends one chat completion that must return non-empty C(content); on
    C(finish_reason=length) with reasoning present it retries with O(retry_max_tokens) and
    C(reasoning_effort=low) before failing. It reads both C(reasoning) and C(reasoning_content) and
    flags a closing think tag inside C(content) as a reasoning-parser misconfiguration (catalogue reasoning_empty_content).
    With O(tool_smoke) it sends a zero-argument tool and a tool with one argument (catalogue tool_parser_zero_arg).
    With O(canary) it sends a one-token C(/v1/completions) (docs/watchdog.md).
  - I(mode=metrics) scrapes C(/metrics) twice O(interval_s) seconds apart, for speculative-decoding
    acceptance from the deltas (docs/health.md), and a wedge verdict (requests running or waiting with the
    generation-token counter unchanged). With O(ranks) it also reports the KV pool across ranks
    (minimum, limiting rank, spread; docs/memory-plan.md, catalogue kv_pool_below_peers) and checks a KV pin against
    vLLM's suggestion (catalogue kv_pin_no_activation_reserve).
author:
  - dgxspark.vllm maintainers (@dgxspark)
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Every mode only reads; it runs the same in check mode.
  diff_mode:
    support: none
options:
  mode:
    description: Which check to run.
    type: str
    required: true
    choices: [wait, smoke, metrics]
  base_url:
    description:
      - The head's API, C(http://<ansible_host of the head>:<serve.api_port>), without C(/v1).
      - Required for I(mode=smoke) and I(mode=metrics). Optional for I(mode=wait) (without it the
        cycle only watches the container).
    type: str
  rank:
    description: Tensor-parallel rank of the node the module runs on; labels the result and messages.
    type: int
  container_name:
    description: Name of the rank container on this node (I(mode=wait)), C(vllm_lane_spec.container.name).
    type: str
    default: vllm_rank
  docker_bin:
    description: Docker CLI on this node (I(mode=wait)).
    type: str
    default: docker
  timeout_s:
    description:
      - I(mode=wait) length of one cycle in seconds; the module returns earlier when C(/health) answers
        200 and fails earlier when the container is not running.
    type: float
    default: 15
  poll_s:
    description: Seconds between two probes inside a wait cycle.
    type: float
    default: 3
  read_boot:
    description:
      - I(mode=wait) also parse this rank's full log into C(boot) when C(/health) did not answer 200 from this
        node (a head API bound to loopback, or a final collection pass after the head was ready).
    type: bool
    default: false
  rdma_expected:
    description:
      - I(mode=wait) with C(boot) the lane passes C(/dev/infiniband) to the ranks, so NCCL must run on its IB
        transport; a C(NET/Socket) line or C(Failed to initialize any NET plugin) in the rank log is a
        failure in C(boot_findings) (catalogue nccl_no_net_plugin, nccl_socket_fallback).
      - The module then also reads C(docker inspect) of the rank - C(HostConfig.Devices) must map
        C(/dev/infiniband) (catalogue nccl_no_net_plugin; a failure in C(boot_findings), returned as C(rdma_devices)); memlock
        not unlimited or no C(IPC_LOCK) warn. The simulated lanes pass no C(/dev/infiniband), so this is off there.
    type: bool
    default: false
  node:
    description: Inventory name of this host, prefixed to every C(boot_findings) message.
    type: str
  proc_root:
    description:
      - I(mode=wait) the C(/proc) tree read when a rank exited 143 (SIGTERM) or 137 (SIGKILL) without the kernel's OOM flag; a userspace OOM
        killer found among its processes is named in the failure (catalogue userspace_oom_killer).
    type: path
    default: /proc
  livelock_window_s:
    description:
      - I(mode=wait) seconds this rank's loaded shard count (its log's checkpoint-shards progress bar) may stand
        still while its GPU spins (utilisation at or above O(busy_util_pct) below O(power_floor_w)) before the
        cycle reports C(livelock) (catalogue uvm_livelock). Slow progress, a frozen count at normal power (an I/O
        stall) or a rank before its bar is not a livelock. 0 turns the watch off (no GPU sample is taken).
      - The same rule as the watchdog's (module_utils/verdict.py C(livelock_watch)). Untested on a Spark here (the
        simulated fleet has no GPU); molecule vllm_health runs it with a stand-in nvidia-smi.
    type: float
    default: 0
  livelock_mark:
    description:
      - I(mode=wait) the C(livelock_mark) this rank's previous cycle returned (C([since, shards_loaded]), seconds
        since the epoch); omitted at the start of a wait.
    type: list
    elements: raw
  nvidia_smi:
    description: I(mode=wait) the nvidia-smi of this node, for the GPU sample of the livelock watch.
    type: str
    default: nvidia-smi
  power_floor_w:
    description: I(mode=wait) watts under which a busy GPU spins rather than computes (GB10; a real decode draws 47-78 W).
    type: float
    default: 25.0
  busy_util_pct:
    description: I(mode=wait) GPU utilisation (percent) at or above which the GPU counts as busy.
    type: float
    default: 80.0
  log_tail:
    description: Number of log lines read each wait cycle to find the phase and the failure line.
    type: int
    default: 2000
  last_lines:
    description: Number of last log lines put into the failure message and result.
    type: int
    default: 25
  request_timeout_s:
    description: HTTP timeout of one C(/health) or C(/metrics) request, in seconds.
    type: float
    default: 10
  http_timeout_s:
    description: HTTP timeout of one smoke request (chat, tool call, canary), in seconds.
    type: float
    default: 300
  model:
    description: Served model name (C(vllm_lane_spec.checkpoint.served_model_name)); required for I(mode=smoke).
    type: str
  prompt:
    description: User message of the smoke chat completion.
    type: str
    default: "2+2=?"
  max_tokens:
    description: C(max_tokens) of the first smoke attempt (C(vllm_lane_spec.health.smoke_max_tokens)).
    type: int
    default: 64
  retry_max_tokens:
    description: C(max_tokens) of the retry when the reasoning used every token (catalogue reasoning_empty_content). Default 4 x O(max_tokens).
    type: int
  chat_template_kwargs:
    description: C(chat_template_kwargs) sent with every chat request.
    type: dict
  default_chat_template_kwargs:
    description: The lane's server default chat-template kwargs; only read to warn (catalogue reasoning_empty_content).
    type: dict
  reasoning_parser:
    description: The lane's C(--reasoning-parser); named in the catalogue reasoning_empty_content message.
    type: str
  tool_call_parser:
    description: The lane's C(--tool-call-parser); named in the catalogue tool_parser_zero_arg message.
    type: str
  chat:
    description:
      - Send the smoke chat completion. V(false) leaves only the canary and the key check, the quick gate
        of a converged run where the group was not restarted (C(roles/vllm_health), C(vllm_health_mode)).
    type: bool
    default: true
  tool_smoke:
    description: Send the two tool-call smokes (C(vllm_lane_spec.health.tool_smoke)).
    type: bool
    default: false
  tool_smoke_judge:
    description:
      - C(call) - each tool smoke must come back as the expected call with the expected arguments (docs/health.md, catalogue tool_call_mangled), and
        well-formed. C(wellformed) - only that the request is accepted (HTTP 200) and parsed into a well-formed
        assistant message (one choice, role, finish_reason, no tool-call markup in names or content, offered names,
        JSON-object arguments, calls behind finish_reason tool_calls); for random-weight models (the simulated
        lanes), which emit no real tool call, so the call itself and its arguments are not judged.
    type: str
    choices: [call, wellformed]
    default: call
  tool_concurrency:
    description:
      - Each tool smoke is sent this many times at once, non-streamed and then streamed (the lane's
        C(serve.max_num_seqs) is the deployed concurrency; the parser drops arguments only under
        concurrency and mangles streamed calls, catalogue tool_call_mangled). A failure names the tool, streamed or
        not, the concurrency and the count that failed.
    type: int
    default: 1
  corruption_passes:
    description:
      - Passes of the corruption probe (a Korean prompt, temperature 0, non-streamed); 0 skips it. Any U+FFFD in
        the content, reasoning or tool-call arguments of any pass fails, with the count per pass
        (catalogue token_corruption).
    type: int
    default: 0
  corruption_max_tokens:
    description: Tokens per corruption-probe pass.
    type: int
    default: 200
  checkpoint:
    description: The served checkpoint (repo id), named in the corruption verdict.
    type: str
  canary:
    description: Send the one-token C(/v1/completions) canary.
    type: bool
    default: true
  interval_s:
    description: Seconds between the two C(/metrics) scrapes (I(mode=metrics)).
    type: float
    default: 5
  ranks:
    description:
      - I(mode=metrics) boot figures of every rank, each the C(boot) return of I(mode=wait) plus
        C(rank) and C(host). Gives the KV pool across ranks.
    type: list
    elements: dict
  kv_spread_warn_gib:
    description: Warn when the available KV memory of two ranks differs by more than this (GiB, catalogue kv_pool_below_peers).
    type: float
    default: 2.0
  kv_pin_bytes:
    description: The lane's C(--kv-cache-memory) pin in bytes, compared with vLLM's suggestion (catalogue kv_pin_no_activation_reserve).
    type: int
  nccl_expected:
    description:
      - I(mode=metrics) the NCCL version every rank must log (C(vLLM is using nccl==X)), e.g. the lane's
        C(image.expected_packages) pin of C(nvidia-nccl-cu13). Without it the ranks must only agree with each other.
    type: str
  api_key:
    description:
      - The head's API key (C(vllm_api_key)); sent as the header C(Authorization) = C(Bearer <key>) with every request to the head.
        Never returned or logged (a no_log parameter).
      - With I(mode=smoke) the module also proves the key is enforced - one canary request without it must be
        refused with HTTP 401.
    type: str
  fail_on_error:
    description:
      - Fail when a smoke check fails or the group is stalled. With C(false) the verdicts are only
        returned (the role writes its report first, then fails).
    type: bool
    default: true
notes:
  - Uses only the Python standard library and C(ansible.module_utils.urls); proxies are bypassed.
seealso:
  - name: docs/health.md
    description: The readiness design, the reason classes and the report.
    link: https://example.invalid/dgxspark/vllm/docs/health.md
"""

EXAMPLES = r"""
- name: One readiness cycle on every rank (see roles/vllm_health/tasks/wait_cycle.yml)
  dgxspark.vllm.vllm_health:
    mode: wait
    base_url: "http://{{ hostvars[groups['vllm_head'][0]].ansible_host }}:8000"
    rank: "{{ vllm_rank }}"
    container_name: vllm_rank
    timeout_s: 15

- name: Smoke the head
  dgxspark.vllm.vllm_health:
    mode: smoke
    base_url: http://198.18.10.10:8000
    model: tiny-glm
    max_tokens: 32
    tool_smoke: false

- name: Two scrapes, 10 s apart
  dgxspark.vllm.vllm_health:
    mode: metrics
    base_url: http://198.18.10.10:8000
    interval_s: 10
"""

RETURN = r"""
ready:
  description: I(mode=wait) C(/health) answered 200 during this cycle.
  returned: mode is wait
  type: bool
health_status:
  description: HTTP status of the last C(/health) probe; null when the API did not answer.
  returned: mode is wait
  type: int
container:
  description:
    - C(docker inspect) state of this rank's container, with C(image_id) (the image it runs) and C(spec_hash) (the
      label vllm_ranks set from the rendered rank spec), null when absent; the deployment history records both.
  returned: mode is wait
  type: dict
  sample: {name: vllm_rank, status: running, running: true, exit_code: 0, oom_killed: false, image_id: "sha256:5f0c...",
           spec_hash: 9a1e...}
phase:
  description:
    - Boot phase read from the log (C(phase), C(text), C(shards_loaded), C(shards_total), C(line)).
    - >-
      Once the head's /health answers 200 a rank whose log shows no C(api_up) milestone (a headless worker, or a long-serving
      rank whose log tail holds only requests) is reported as C(serving).
  returned: mode is wait
  type: dict
  sample: {phase: loading, text: loading shards 49/120, shards_loaded: 49, shards_total: 120}
livelock:
  description:
    - I(mode=wait) with O(livelock_window_s) above 0, the cause when this rank's shard count has stood still for the
      window while its GPU spins (catalogue uvm_livelock), else null. The role then stops every rank (logs saved)
      and fails the gate.
  returned: mode is wait
  type: str
  sample: "loading livelock on spark-b shard progress frozen at 48 for 310 s while the GPU reads 96.0 % at 12.4 W ..."
livelock_mark:
  description: I(mode=wait) C([since, shards_loaded]) to pass to the next cycle as O(livelock_mark); null off the bar.
  returned: mode is wait
  type: list
  elements: raw
  sample: [1765015200.0, 48]
gpu:
  description: I(mode=wait) with O(livelock_window_s) above 0, this node's GPU sample (null when nvidia-smi failed).
  returned: mode is wait and not ready and livelock_window_s > 0
  type: dict
  sample: {utilization_pct: 96.0, power_w: 12.4, clocks_sm_mhz: 2405.0}
boot:
  description: Boot figures of this rank's full log, read once C(/health) answered 200 or with O(read_boot) (docs/memory-plan.md).
  returned: mode is wait and (ready or read_boot)
  type: dict
  sample: {available_kv_cache_gib: 5.54, kv_cache_tokens: 603144, max_concurrency: {max_model_len: 262144, factor: 2.3}}
boot_findings:
  description:
    - What in this rank's boot log forbids declaring the group ready (C(failures)) or leaves something unproven
      (C(warnings)); each message names the host, both values and the fix. A negative CUDA-graph memory estimate
      (catalogue negative_cuda_graph_estimate, with the over-allocation in GiB against the pin the same log
      suggests) and, with O(rdma_expected), NCCL on sockets or without a NET plugin.
  returned: when C(boot) is
  type: dict
  sample: {failures: ["node-b: negative CUDA-graph memory estimate (-10.33 GiB); KV over-allocated by ~10.6 GiB ..."],
           warnings: []}
rdma_devices:
  description: With O(rdma_expected), the rank's C(HostConfig.Devices) host paths and the catalogue nccl_no_net_plugin findings.
  returned: when C(boot) is and O(rdma_expected)
  type: dict
  sample: {devices: ["/dev/infiniband"], checked: true, failures: [], warnings: []}
failure:
  description: Reason class, signature, the matched line, a fix hint and its source, for a rank that stopped.
  returned: failed in mode wait
  type: dict
  sample: {reason_class: collective_init, signature: gloo_no_address, hint: "..."}
last_lines:
  description: The last O(last_lines) lines of the rank's log.
  returned: mode is wait
  type: list
  elements: str
elapsed_s:
  description: Seconds spent in this call.
  returned: always
  type: float
smoke:
  description: >-
    I(mode=smoke) verdicts, C(chat) (with every attempt), C(canary), C(tools) (one row per tool and streamed or
    not - C(tool), C(streamed), C(concurrency), C(failed), C(judge), C(http_status), C(msg), C(ok)), C(corruption)
    (C(counts) per pass, C(msg), C(ok)) when O(corruption_passes) is set, C(warnings), C(ok), and with
    O(api_key) C(auth) (C(ok), C(status_without_key)).
  returned: mode is smoke
  type: dict
metrics:
  description: >-
    I(mode=metrics) C(first)/C(second) serving counters, C(wedge) (tokens frozen with requests in flight), C(stall)
    (the watchdog's stall rule, module_utils/verdict.py C(stall_verdict), without GPU readings here - C(verdict),
    C(cause)), C(spec_decode) (deltas between the
    scrapes) and C(spec_decode_cumulative), C(kv_pool) and C(nccl) (C(by_rank), C(versions), C(failures),
    C(warnings): the NCCL version every rank logged, which must agree; catalogue nccl_version_skew) when O(ranks)
    is given.
  returned: mode is metrics
  type: dict
"""

import json
import os
import time
from urllib.error import HTTPError, URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import redact, secret_problem

from ansible_collections.dgxspark.vllm.plugins.module_utils import health as H
from ansible_collections.dgxspark.vllm.plugins.module_utils import node_checks as NC
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import HASH_LABEL
from ansible_collections.dgxspark.vllm.plugins.module_utils import verdict as V


def http(method, url, timeout, body=None, api_key=None):
    """(status, text) of one request; status None when nothing answered. Proxies are bypassed."""
    data = json.dumps(body) if body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    try:
        resp = open_url(url, method=method, data=data, headers=headers, timeout=timeout, use_proxy=False,
                        validate_certs=False, follow_redirects="none")
        return resp.getcode(), resp.read().decode("utf-8", "replace")
    except HTTPError as e:
        try:
            text = e.read().decode("utf-8", "replace")
        except Exception:
            text = ""
        return e.code, text
    except (URLError, OSError, ValueError) as e:
        return None, str(e)
    except Exception as e:  # socket timeouts surface as several types across Python versions
        return None, str(e)


def post_json(url, body, timeout, api_key=None):
    status, text = http("POST", url, timeout, body, api_key)
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    return status, parsed, text


# ---- wait -----------------------------------------------------------------------------------

STATE_KEYS = ("status", "running", "exit_code", "oom_killed", "error", "started_at", "finished_at")


def _cli(module):
    return DockerCLI(module.run_command, module.params["docker_bin"])


def container_state(module, name):
    p = module.params
    try:
        info = _cli(module).inspect_container(name)
    except DockerError as e:
        module.fail_json(msg="rank %s: docker inspect %s failed (rc %s): %s. Fix: check that the deploy user can "
                             "run %s on this node (catalogue docker_group_missing)" % (p["rank"], name, e.rc, e.stderr.strip(), p["docker_bin"]),
                         rc=e.rc, stderr=e.stderr)
    if info is None:
        return {"name": name, "status": "absent", "running": False, "exit_code": None,
                "oom_killed": False, "error": None}
    out = dict((k, info[k]) for k in STATE_KEYS)
    out["name"] = name
    # what runs, for the deployment history (module_utils/history.py): the image and the rendered spec's hash label
    out["image_id"] = info.get("image_id") or None
    out["spec_hash"] = (info.get("labels") or {}).get(HASH_LABEL) or None
    return out


def merged_log(module, name, tail):
    """stdout and stderr merged in docker's order (tracebacks go to stderr, INFO lines to stdout)."""
    return _cli(module).merged_logs(name, tail)


def run_wait(module):
    p = module.params
    name = p["container_name"]
    start = time.time()
    status = None
    ready = False
    state = None
    while True:
        state = container_state(module, name)
        if not state["running"]:
            fail_stopped(module, state, start)
        if p["base_url"]:
            status, _text = http("GET", p["base_url"].rstrip("/") + "/health", p["request_timeout_s"])
            if status == 200:
                ready = True
                break
            if status is not None and status >= 500 and p["rank"] == 0:
                fail_stopped(module, state, start, health_status=status)
        if time.time() - start + p["poll_s"] > p["timeout_s"]:
            break
        time.sleep(p["poll_s"])
    text = merged_log(module, name, p["log_tail"])
    phase = H.parse_phase(text)
    if ready:
        phase = H.serving_phase(phase, p["rank"])
    result = {"changed": False, "ready": ready, "health_status": status, "container": state, "rank": p["rank"],
              "phase": phase, "last_lines": H.split_log_lines(text)[-p["last_lines"]:],
              "elapsed_s": round(time.time() - start, 1), "livelock": None, "livelock_mark": None}
    if not ready and p["livelock_window_s"] > 0:
        result.update(livelock_cycle(module, phase))
    if ready or p["read_boot"]:
        boot = H.parse_boot_log(merged_log(module, name, 0))
        result["boot"] = boot
        host = p["node"] or "rank %s" % p["rank"]
        findings = H.boot_findings(boot, host, p["rdma_expected"])
        if p["rdma_expected"]:
            # catalogue nccl_no_net_plugin: the NET line proves the transport only at NCCL_DEBUG=INFO; docker inspect proves the devices
            try:
                raw = _cli(module).inspect_container_raw(name)
            except DockerError as e:
                raw = None
                findings["warnings"].append("%s: docker inspect %s failed, /dev/infiniband of the rank not proven: %s"
                                            % (host, name, e))
            devices = H.rdma_devices_findings(raw, host, True)
            result["rdma_devices"] = devices
            findings["failures"] += devices["failures"]
            findings["warnings"] += devices["warnings"]
        result["boot_findings"] = findings
    module.exit_json(**result)


def livelock_cycle(module, phase):
    """One cycle of the loading-livelock watch on this rank (verdict.livelock_watch, the watchdog's rule):
    {livelock: cause or None, livelock_mark: [since, shards] or None, gpu: sample or None}."""
    p = module.params
    host = p["node"] or "rank %s" % p["rank"]
    gpu = None
    exe = p["nvidia_smi"] if os.path.isabs(p["nvidia_smi"]) else module.get_bin_path(p["nvidia_smi"])
    if exe and os.access(exe, os.X_OK):  # no nvidia-smi is no GPU reading, never a livelock
        argv = V.gpu_query_argv(exe, V.WATCH_QUERY_FIELDS)
        bounded = module.get_bin_path("timeout")
        # a wedged driver can hang nvidia-smi: the cycle must still end (the watchdog's agent bounds it alike)
        rc, out, _err = module.run_command(([bounded, "20"] + argv) if bounded else argv)
        if rc == 0:
            gpu = V.parse_gpu_query(out)
    mark = p["livelock_mark"]
    marks = {host: list(mark)} if isinstance(mark, list) and len(mark) == 2 else {}
    marks, cause, _hosts = V.livelock_watch(
        marks, time.time(), {host: {"phase": phase["phase"], "shards_loaded": phase["shards_loaded"]}},
        {host: gpu or {}}, p["livelock_window_s"], p["power_floor_w"], p["busy_util_pct"])
    return {"livelock": cause, "livelock_mark": marks.get(host), "gpu": gpu}


def fail_stopped(module, state, start, health_status=None):
    p = module.params
    text = merged_log(module, state["name"], p["log_tail"]) if state["status"] != "absent" else ""
    lines = H.split_log_lines(text)
    failure = H.classify_failure(text, oom_killed=state.get("oom_killed"), exit_code=state.get("exit_code"))
    last = lines[-p["last_lines"]:]
    if health_status is not None:
        what = "the head's /health answers %s (engine dead) while its container still runs" % health_status
    elif state["status"] == "absent":
        what = "container %s does not exist on this node" % state["name"]
        failure = {"reason_class": "other", "signature": "absent", "line": None,
                   "hint": "the rank was never started or was removed: run the vllm_ranks role (all ranks)",
                   "cause": "no rank container on this node", "source": "catalogue: worker_orphaned", "extract": {}}
    else:
        what = "container %s is %s (exit code %s, OOMKilled %s)" % (
            state["name"], state["status"], state.get("exit_code"), state.get("oom_killed"))
        if state.get("exit_code") in NC.KILLED_FROM_OUTSIDE and not state.get("oom_killed"):
            # killed from outside: a userspace OOM killer on this node is the first suspect (catalogue userspace_oom_killer)
            note = NC.oom_killer_note(NC.read_oom_killers(p["proc_root"]))
            if note:
                what += "; %s" % note
    msg = ("rank %s: %s. Reason class: %s (%s). %s%s Fix: %s [%s]. Last %d log lines:\n%s"
           % (p["rank"], what, failure["reason_class"], failure["signature"],
              ("Cause: %s " % failure["cause"]) if failure.get("cause") else "",
              ("Line: %s." % failure["line"]) if failure.get("line") else "",
              failure["hint"], failure["source"], len(last), "\n".join(last)))
    module.fail_json(msg=msg, ready=False, health_status=health_status, container=state, rank=p["rank"],
                     failure=failure, last_lines=last, phase=H.parse_phase(text),
                     elapsed_s=round(time.time() - start, 1))


# ---- smoke ----------------------------------------------------------------------------------

def chat_request(p, max_tokens, extra_kwargs=None, messages=None, tools=None):
    body = {"model": p["model"], "messages": messages or [{"role": "user", "content": p["prompt"]}],
            "max_tokens": max_tokens, "temperature": 0}
    kwargs = dict(p["chat_template_kwargs"] or {})
    kwargs.update(extra_kwargs or {})
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"  # a named choice would bypass the tool parser under test (catalogue tool_parser_zero_arg)
    return body


def run_smoke(module):
    p = module.params
    base = p["base_url"].rstrip("/")
    start = time.time()
    warnings = H.default_kwargs_warnings(p["default_chat_template_kwargs"], p["reasoning_parser"])
    failures = []
    attempts = []
    plan = [(p["max_tokens"], None),
            (p["retry_max_tokens"] or 4 * p["max_tokens"], {"reasoning_effort": "low"})]
    chat_ok = False
    for max_tokens, extra in (plan if p["chat"] else []):
        body = chat_request(p, max_tokens, extra)
        t0 = time.time()
        status, parsed, text = post_json(base + "/v1/chat/completions", body, p["http_timeout_s"], p["api_key"])
        if status != 200:
            msg = "chat completion returned HTTP %s: %s%s" % (
                status, redact((text or "")[:300], p["api_key"]), auth_hint(status, p["api_key"]))
            verdict = {"ok": False, "action": "fail", "issue": "http_%s" % status, "msg": msg}
        else:
            verdict = H.evaluate_chat(parsed, p["reasoning_parser"])
        verdict.update({"max_tokens": max_tokens, "chat_template_kwargs": body.get("chat_template_kwargs"),
                        "http_status": status, "seconds": round(time.time() - t0, 2),
                        "usage": (parsed or {}).get("usage") if isinstance(parsed, dict) else None})
        attempts.append(verdict)
        if verdict["action"] != "retry":
            chat_ok = verdict["ok"]
            break
    if not chat_ok and attempts:
        failures.append("chat: " + attempts[-1]["msg"])
    if len(attempts) > 1 and chat_ok:
        warnings.append("the first chat attempt ran out of tokens in reasoning (%d max_tokens); passed with %d and "
                        "reasoning_effort low: raise health.smoke_max_tokens (catalogue reasoning_empty_content)"
                        % (attempts[0]["max_tokens"], attempts[-1]["max_tokens"]))
    result = {"chat": {"ok": chat_ok, "attempts": attempts, "skipped": not p["chat"]}, "warnings": warnings}

    if p["canary"]:
        status, parsed, text = post_json(base + "/v1/completions",
                                         H.canary_request(p["model"]),
                                         p["http_timeout_s"], p["api_key"])
        canary = H.evaluate_canary(parsed) if status == 200 else {
            "ok": False, "msg": "canary returned HTTP %s: %s%s" % (
                status, redact((text or "")[:300], p["api_key"]), auth_hint(status, p["api_key"]))}
        canary["http_status"] = status
        result["canary"] = canary
        if not canary["ok"]:
            failures.append("canary: " + canary["msg"])

    if p["corruption_passes"]:
        counts = []
        for _i in range(p["corruption_passes"]):
            body = chat_request(p, p["corruption_max_tokens"], None,
                                messages=[{"role": "user", "content": H.CORRUPTION_PROBE_PROMPT}])
            status, parsed, text = post_json(base + "/v1/chat/completions", body, p["http_timeout_s"], p["api_key"])
            counts.append(H.count_replacement_chars(H.message_text(parsed)) if status == 200 and parsed
                          else "HTTP %s: %s" % (status, redact((text or "")[:200], p["api_key"])))
        corruption = H.evaluate_corruption(counts, p["checkpoint"])
        result["corruption"] = corruption
        if not corruption["ok"]:
            failures.append(corruption["msg"])

    tools = []
    if p["tool_smoke"]:
        # a real call needs room for the reasoning and the call; a well-formedness check does not
        tokens = max(p["max_tokens"], 256) if p["tool_smoke_judge"] == "call" else p["max_tokens"]

        def make_body(question, spec, streamed):
            body = chat_request(p, tokens, None, messages=[{"role": "user", "content": question}], tools=spec)
            if streamed:
                body["stream"] = True
            return body
        smoke = H.tool_smoke(lambda body: post_json(base + "/v1/chat/completions", body, p["http_timeout_s"],
                                                    p["api_key"]),
                             make_body, p["tool_concurrency"], p["tool_smoke_judge"], p["tool_call_parser"],
                             redact=lambda text: redact(text, p["api_key"]))
        tools = smoke["rows"]
        failures += smoke["failures"]
    result["tools"] = tools
    if p["api_key"]:
        auth = check_auth_enforced(base, p["model"], p["http_timeout_s"])
        result["auth"] = auth
        if not auth["ok"]:
            failures.append("api key: " + auth["msg"])
    result["ok"] = not failures
    result["failures"] = failures
    out = {"changed": False, "smoke": result, "elapsed_s": round(time.time() - start, 1)}
    if failures and p["fail_on_error"]:
        module.fail_json(msg="smoke failed on %s: %s" % (base, "; ".join(failures)), **out)
    module.exit_json(**out)


def auth_hint(status, api_key):
    if status != 401:
        return ""
    if api_key:
        return (". Fix: the head runs with another API key than vllm_api_key; re-run the vllm_ranks role "
                "(a changed key restarts the group)")
    return (". Fix: the head requires an API key: set vllm_api_key (ansible-vault), or re-run the vllm_ranks "
            "role to restart the group without one")


def check_auth_enforced(base, model, timeout):
    """One canary without the Authorization header: a head that enforces the key answers 401."""
    status, _parsed, text = post_json(base + "/v1/completions", H.canary_request(model), timeout)
    if status == 401:
        return {"ok": True, "status_without_key": status, "msg": "a request without the key was refused (401)"}
    return {"ok": False, "status_without_key": status,
            "msg": "POST %s/v1/completions without the API key returned HTTP %s (expected 401): the head does not "
                   "enforce vllm_api_key (%s). Fix: re-run the vllm_ranks role so the head restarts with the key file; "
                   "check VLLM_API_KEY reaches vLLM (docs/troubleshooting.md)" % (base, status, (text or "")[:200])}


# ---- metrics --------------------------------------------------------------------------------

def scrape(module, url):
    status, text = http("GET", url, module.params["request_timeout_s"], api_key=module.params["api_key"])
    if status != 200:
        module.fail_json(msg="GET %s returned %s: %s. Fix: the head's API must be up (run mode wait first)"
                             % (url, status, (text or "")[:200]))
    return H.parse_metrics(text)


def run_metrics(module):
    p = module.params
    url = p["base_url"].rstrip("/") + "/metrics"
    start = time.time()
    s1 = scrape(module, url)
    time.sleep(p["interval_s"])
    s2 = scrape(module, url)
    c1, c2 = V.serving_counters(s1), V.serving_counters(s2)
    sd1, sd2 = H.spec_decode_counters(s1), H.spec_decode_counters(s2)
    # the watchdog's rule (verdict.stall_verdict); the role adds every node's GPU samples (filter gpu_stall_verdict)
    stall = V.stall_verdict(c1, c2, p["interval_s"])
    metrics = {"first": c1, "second": c2, "wedge": stall["wedge"], "stall": stall,
               "spec_decode": H.spec_decode_stats(sd2, sd1), "spec_decode_cumulative": H.spec_decode_stats(sd2),
               "samples": len(s2)}
    if p["ranks"]:
        metrics["kv_pool"] = H.kv_pool_summary(p["ranks"], p["kv_spread_warn_gib"], p["kv_pin_bytes"])
        metrics["nccl"] = H.nccl_version_agreement(p["ranks"], p["nccl_expected"])
    out = {"changed": False, "metrics": metrics, "elapsed_s": round(time.time() - start, 1)}
    if stall["verdict"] == "wedged" and p["fail_on_error"]:
        module.fail_json(msg="%s: %s" % (url, metrics["wedge"]["msg"]), **out)
    module.exit_json(**out)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", required=True, choices=["wait", "smoke", "metrics"]),
            base_url=dict(type="str"),
            rank=dict(type="int"),
            container_name=dict(type="str", default="vllm_rank"),
            docker_bin=dict(type="str", default="docker"),
            timeout_s=dict(type="float", default=15),
            poll_s=dict(type="float", default=3),
            read_boot=dict(type="bool", default=False),
            rdma_expected=dict(type="bool", default=False),
            proc_root=dict(type="path", default="/proc"),
            node=dict(type="str"),
            log_tail=dict(type="int", default=2000),
            livelock_window_s=dict(type="float", default=0),
            livelock_mark=dict(type="list", elements="raw"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            power_floor_w=dict(type="float", default=V.DEFAULT_POWER_FLOOR_W),
            busy_util_pct=dict(type="float", default=V.DEFAULT_BUSY_UTIL_PCT),
            last_lines=dict(type="int", default=25),
            request_timeout_s=dict(type="float", default=10),
            http_timeout_s=dict(type="float", default=300),
            model=dict(type="str"),
            prompt=dict(type="str", default="2+2=?"),
            max_tokens=dict(type="int", default=64, no_log=False),
            retry_max_tokens=dict(type="int", no_log=False),
            chat_template_kwargs=dict(type="dict"),
            default_chat_template_kwargs=dict(type="dict"),
            reasoning_parser=dict(type="str"),
            tool_call_parser=dict(type="str"),
            chat=dict(type="bool", default=True),
            tool_smoke=dict(type="bool", default=False),
            tool_smoke_judge=dict(type="str", default="call", choices=["call", "wellformed"]),
            tool_concurrency=dict(type="int", default=1),
            corruption_passes=dict(type="int", default=0, no_log=False),
            corruption_max_tokens=dict(type="int", default=200, no_log=False),
            checkpoint=dict(type="str"),
            canary=dict(type="bool", default=True),
            interval_s=dict(type="float", default=5),
            ranks=dict(type="list", elements="dict"),
            kv_spread_warn_gib=dict(type="float", default=2.0),
            kv_pin_bytes=dict(type="int"),
            nccl_expected=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            fail_on_error=dict(type="bool", default=True),
        ),
        required_if=[("mode", "smoke", ["base_url", "model"]), ("mode", "metrics", ["base_url"])],
        supports_check_mode=True,
    )
    p = module.params
    problem = secret_problem("api_key (vllm_api_key)", p["api_key"])
    if problem:
        module.fail_json(msg=problem)
    if p["poll_s"] <= 0 or p["timeout_s"] <= 0:
        module.fail_json(msg="timeout_s (%s) and poll_s (%s) must be positive seconds" % (p["timeout_s"], p["poll_s"]))
    if p["base_url"] and not p["base_url"].startswith(("http://", "https://")):
        module.fail_json(msg="base_url %r must start with http:// or https:// (the head's API, e.g. "
                             "http://<head ansible_host>:<serve.api_port>)" % p["base_url"])
    if p["mode"] == "wait":
        run_wait(module)
    elif p["mode"] == "smoke":
        run_smoke(module)
    run_metrics(module)


if __name__ == "__main__":
    main()
