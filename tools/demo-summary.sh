#!/usr/bin/env bash
# Print what `make demo` produced: the endpoint, one chat reply, where the logs and reports are.
# Usage: tools/demo-summary.sh [inventory]   (default inventories/sim/hosts.yml)
# Env: DEMO_PORT (default 8000), DEMO_MODEL (default tiny-glm), DEMO_PROMPT.
set -euo pipefail
cd "$(dirname "$0")/.."
inv="${1:-inventories/sim/hosts.yml}"
port="${DEMO_PORT:-8000}"
model="${DEMO_MODEL:-tiny-glm}"
prompt="${DEMO_PROMPT:-Say hello to the DGX Spark fleet.}"

# Head = first host of vllm_head; its management address serves the API.
read -r head head_ip workers < <(ansible-inventory -i "$inv" --list | python3 -c '
import json, sys
inv = json.load(sys.stdin)
hv = inv.get("_meta", {}).get("hostvars", {})
head = inv["vllm_head"]["hosts"][0]
workers = inv.get("vllm_workers", {}).get("hosts", [])
print(head, hv.get(head, {}).get("ansible_host", head), ",".join(workers) or "-")')
base="http://${head_ip}:${port}"

echo "== dgxspark.vllm demo"
echo "endpoint:  ${base}/v1   (OpenAI-compatible; model \"${model}\")"
code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "${base}/health" || true)"
echo "health:    GET ${base}/health -> ${code}"

body="$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "max_tokens": 24,
  "messages": [{"role": "user", "content": sys.argv[2]}]}))' "$model" "$prompt")"
echo "request:   curl -s ${base}/v1/chat/completions -H 'Content-Type: application/json' -d '${body}'"
reply="$(curl -s --max-time 60 "${base}/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" || true)"
printf '%s' "$reply" | python3 -c '
import json, sys
raw = sys.stdin.read()
try:
    doc = json.loads(raw)
    msg = doc["choices"][0]["message"]
    text = msg.get("content") or msg.get("reasoning_content") or ""
    print("reply:     %r (%s tokens, finish_reason=%s)" % (text, doc.get("usage", {}).get("completion_tokens"), doc["choices"][0].get("finish_reason")))
except Exception:
    print("reply:     no completion (%s)" % raw[:200])
'
echo "(the checkpoint is a random tiny model: the reply is well-formed noise, which is expected)"

echo "rank logs: live:  source .venv/bin/activate && ansible -i ${inv} ${head} -a 'docker logs --tail 50 vllm_rank'"
echo "                  (any node: head=${head}, workers=${workers}; Ansible holds the SSH key and user)"
echo "           kept:  /var/log/dgxspark-vllm/ on each node (docker logs saved before a rank is removed)"
echo "           here:  ~/.cache/dgxspark-vllm/rank-logs/<host>/ (fetched by vllm_ranks)"
echo "reports:   $(pwd)/reports/ (vllm_bench JSON + Markdown)"
echo "tear down: make demo-down"
