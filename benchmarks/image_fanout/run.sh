#!/usr/bin/env bash
# Image fan-out on the simulated fleet: time to make the engine image present and verified on
# every node for each image_sync mode, against a sequential `docker save | ssh docker load`
# baseline measured in the same run, plus bytes moved for an update that adds one small layer.
# No asserts: figures go to benchmarks/results/ and docs/images.md.
#
#   benchmarks/image_fanout/run.sh INVENTORY IMAGE [extra ansible-playbook args...]
#
# The inventory's nodes are sim node containers named like their inventory hosts; the first host
# of vllm_head holds IMAGE and dgxspark-sim/registry:2 (registry.Dockerfile) in its dockerd.
set -euo pipefail
inv=$1; image=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/benchmarks/results"
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
json="$out/image_fanout-$stamp.json"
play="$here/play.yml"
fabric_if=${FABRIC_IF:-enp1s0f1np1}
state=/var/lib/dgxspark-vllm/image_sync

# shellcheck disable=SC1091
source "$root/.venv/bin/activate"
export ANSIBLE_CONFIG="$root/ansible.cfg"

hosts=$(ansible-inventory -i "$inv" --list | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(d["vllm_head"]["hosts"] + d.get("vllm_workers", {}).get("hosts", [])))')
read -r head workers <<<"$(echo "$hosts" | awk '{h=$1; $1=""; print h, $0}')"
n=$(echo "$hosts" | wc -w)
echo "fleet: head $head, workers $workers (N=$n), image $image"

now() { date +%s.%N; }
rx() { docker exec "$1" cat "/sys/class/net/$fabric_if/statistics/rx_bytes"; }
reset_workers() {
  for w in $workers; do
    docker exec "$w" sh -c "docker image rm -f '$image' >/dev/null 2>&1; docker image prune -af >/dev/null 2>&1; true"
  done
}
reset_registry() {
  docker exec "$head" sh -c "docker rm -f dgxspark-image-registry >/dev/null 2>&1; rm -rf $state/registry/data; true"
}
run_mode() {  # mode [args] -> seconds of the whole image_sync run (probe, transfer, verify)
  local t0 t1 mode=$1 log
  shift
  log="$out/image_fanout-$stamp-$mode.log"
  t0=$(now)
  ansible-playbook -i "$inv" "$play" -e "image_sync_mode=$mode" -e image_sync_reference="$image" \
    -e image_sync_registry_image=dgxspark-sim/registry:2 "$@" >>"$log" 2>&1 \
    || { echo "image_sync $mode failed, see $log" >&2; tail -20 "$log" >&2; exit 1; }
  t1=$(now)
  python3 -c "print(round($t1 - $t0, 1))"
}

# Trust between head and workers (the stream mode sets it up), then the image's size.
size=$(docker exec "$head" docker image inspect --format '{{.Size}}' "$image")

reset_workers
t_stream=$(run_mode stream "$@")
echo "stream: $t_stream s"

reset_workers
addrs=$(for w in $workers; do docker exec "$w" ip -4 -o addr show "$fabric_if" | awk '{print $4}' | cut -d/ -f1; done)
t0=$(now)
for a in $addrs; do
  docker exec "$head" sh -c "docker save '$image' | ssh -i $state/id_ed25519 -o BatchMode=yes -o UserKnownHostsFile=$state/known_hosts spark@$a docker load" >/dev/null
done
t1=$(now)
t_base=$(python3 -c "print(round($t1 - $t0, 1))")
echo "baseline (sequential save | ssh load, transfer only): $t_base s"

reset_workers
reset_registry
t_registry=$(run_mode registry "$@")
echo "registry: $t_registry s"

t_noop=$(run_mode registry "$@")
echo "registry, second run (identical everywhere): $t_noop s"

# Update: one new small layer on top of the image, under the same reference.
docker exec "$head" sh -c "mkdir -p /tmp/upd && head -c 1048576 /dev/urandom > /tmp/upd/blob && printf 'FROM %s\nCOPY blob /opt/update-blob\n' '$image' > /tmp/upd/Dockerfile && docker build -q -t '$image' /tmp/upd >/dev/null"
layer=$(docker exec "$head" docker history --format '{{.Size}}' --no-trunc --human=false "$image" | head -1)
first=$(echo "$workers" | awk '{print $1}')
b0=$(rx "$first"); t_upd=$(run_mode registry "$@"); b1=$(rx "$first")
upd_registry=$((b1 - b0))
b0=$(rx "$first"); t_upd_stream=$(run_mode stream "$@"); b1=$(rx "$first")
echo "update: registry moved $upd_registry B to $first in $t_upd s (layer $layer B); stream then found it identical ($t_upd_stream s)"
# The stream's cost for the same update: make the worker differ again (drop the new layer).
docker exec "$first" sh -c "docker image rm -f '$image' >/dev/null; docker image prune -af >/dev/null; true"
b0=$(rx "$first"); t_upd_stream2=$(run_mode stream "$@"); b1=$(rx "$first")
upd_stream=$((b1 - b0))

# The transfer alone, as image_stream reports it ("streamed X GiB (...) in N s").
t_stream_xfer=$(grep -ho "compressed per rank) in [0-9.]* s" "$out/image_fanout-$stamp-stream.log" | head -1 | awk '{print $5}')

python3 - "$json" <<EOF
import json, sys
r = {"stamp": "$stamp", "image": "$image", "image_bytes": int("$size"), "nodes": $n,
     "seconds": {"stream": $t_stream, "stream_transfer_only": ${t_stream_xfer:-None}, "registry": $t_registry, "baseline_sequential_transfer": $t_base,
                 "registry_second_run": $t_noop, "update_registry": $t_upd, "update_stream_full": $t_upd_stream2},
     "update": {"layer_bytes": int("$layer"), "registry_rx_bytes_on_$first": $upd_registry,
                "stream_rx_bytes_on_$first": $upd_stream}}
json.dump(r, open(sys.argv[1], "w"), indent=1)
print(json.dumps(r, indent=1))
EOF
