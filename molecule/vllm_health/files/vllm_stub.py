# SPDX-License-Identifier: MIT
"""A tiny stdlib HTTP server that answers like a vLLM head from recorded bodies.

Used by the vllm_health unit tests and the molecule scenario (the e2e test covers the real
engine). Answers file (JSON): {"<METHOD> <path>": answer | [answer, ...]}, where a list is played
in order and its last entry repeats; a chat request that carries tools is looked up first as
"<METHOD> <path>#tool=<first tool name>", then "<METHOD> <path>#max_tokens=<n>". An answer is {"status": int, "body": str | object,
"delay_s": float}; a request with "stream": true is answered from "sse" (a list of event objects
sent as server-sent events, then [DONE]) when the answer has one. Every request is appended to --requests as one JSON line.
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class State(object):
    def __init__(self, answers, requests_path=None):
        self.answers = answers
        self.counts = {}
        self.lock = threading.Lock()
        self.requests_path = requests_path
        self.seen = []

    def pick(self, keys):
        with self.lock:
            for key in keys:
                if key in self.answers:
                    entry = self.answers[key]
                    if isinstance(entry, list):
                        i = self.counts.get(key, 0)
                        self.counts[key] = i + 1
                        return entry[min(i, len(entry) - 1)]
                    return entry
        return {"status": 404, "body": {"error": "no recorded answer for %s" % keys[-1]}}


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                req = json.loads(raw.decode("utf-8")) if raw else None
            except ValueError:
                req = None
            path = self.path.split("?", 1)[0]
            keys = []
            if isinstance(req, dict) and req.get("tools"):
                keys.append("%s %s#tool=%s" % (method, path, req["tools"][0]["function"]["name"]))
            if isinstance(req, dict) and "max_tokens" in req:
                keys.append("%s %s#max_tokens=%s" % (method, path, req["max_tokens"]))
            keys.append("%s %s" % (method, path))
            with state.lock:
                state.seen.append({"method": method, "path": path, "body": req})
                if state.requests_path:
                    with open(state.requests_path, "a") as f:
                        f.write(json.dumps({"method": method, "path": path, "body": req}) + "\n")
            ans = state.pick(keys)
            if ans.get("delay_s"):
                time.sleep(ans["delay_s"])
            if isinstance(req, dict) and req.get("stream") and "sse" in ans:
                self.send_response(int(ans.get("status", 200)))
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for ev in ans["sse"]:
                    if ans.get("event_delay_s"):
                        time.sleep(ans["event_delay_s"])
                    self.wfile.write(("data: %s\n\n" % json.dumps(ev)).encode("utf-8"))
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                return
            body = ans.get("body", "")
            if not isinstance(body, str):
                body = json.dumps(body)
                ctype = "application/json"
            else:
                ctype = "text/plain; version=0.0.4" if path == "/metrics" else "application/json"
            data = body.encode("utf-8")
            self.send_response(int(ans.get("status", 200)))
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer("GET")

        def do_POST(self):
            self._answer("POST")

        def log_message(self, *args):
            pass

    return Handler


def serve(answers, host="127.0.0.1", port=0, requests_path=None):
    """Start in a thread; returns (server, state). server.server_address[1] is the port."""
    state = State(answers, requests_path)
    server = HTTPServer((host, port), make_handler(state))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server, state


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--answers", required=True)
    ap.add_argument("--requests")
    a = ap.parse_args()
    with open(a.answers) as f:
        answers = json.load(f)
    state = State(answers, a.requests)
    HTTPServer((a.host, a.port), make_handler(state)).serve_forever()


if __name__ == "__main__":
    main()
