"""vllm_bench with an API key (issue 11): the harness reads it from --api-key-file and sends it as
`Authorization: Bearer` on every request; the argv and the config never carry it."""
import importlib.util
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from tests.unit.conftest import ROOT

KEY = "sk-bench-0c2b9d6e"


def _load():
    spec = importlib.util.spec_from_file_location("vllm_bench_key", os.path.join(ROOT, "roles", "vllm_bench", "files",
                                                                                 "vllm_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_load_api_key_strips_the_newline(tmp_path):
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    assert _load().load_api_key(str(path)) == KEY


def test_requests_carry_the_bearer_header():
    bench = _load()
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == "Bearer " + KEY
            data = json.dumps({"ok": ok}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d/v1/completions" % server.server_address[1]
        status, _body, _s = bench.request("POST", url, {"prompt": "1"})
        assert status == 401
        bench.HEADERS["Authorization"] = "Bearer " + KEY
        status, body, _s = bench.request("POST", url, {"prompt": "1"})
        assert (status, body) == (200, {"ok": True})
    finally:
        server.shutdown()
    assert seen == [None, "Bearer " + KEY]
