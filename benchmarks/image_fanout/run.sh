#!/usr/bin/env bash
# Image fan-out on the simulated fleet: time to make the engine image present and verified on
# every node for each image_sync mode, against a sequential `docker save | ssh docker load`
# baseline measured in the same run, plus the bytes each worker receives for an update that
# changes one small layer. No asserts: figures go to benchmarks/results/ and docs/images.md,
# each ansible-playbook log (profile_tasks timings) to .sim/bench-logs/.
#
#   benchmarks/image_fanout/run.sh INVENTORY IMAGE [extra ansible-playbook args...]
#
# The inventory's nodes are sim node containers named like their inventory hosts (TP2 or the
# TP3 ring). IMAGE and dgxspark-sim/registry:2 (registry.Dockerfile) are put into the head's
# dockerd from the host's if the head lacks them (not timed). What is fanned out is
# dgxspark-bench/engine:update, IMAGE plus one 1 MiB top layer built on the head; the update
# rebuilds that top layer with other random bytes (same layer count, one layer changed).
# Workers are emptied of IMAGE and the bench reference before each timed step; IMAGE is not put
# back on them afterwards (image_sync brings it back when a play needs it).
#
# Per worker, the address the head reaches it on is its address on a subnet it shares with
# the head, fabric first (what image_sync picks); rx bytes are read on the interface carrying
# that address (on the TP3 ring that is enp1s0f1np1 on tp3-1 and enp1s0f0np0 on tp3-2).
# Modes timed: stream (zstd, the default), stream with compression none, registry, registry
# again (nothing to move), the baseline; `pull` needs an upstream registry and is not timed.
set -euo pipefail
inv=$1; image=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/benchmarks/results"
mkdir -p "$out" "$root/.sim/bench-logs"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
json="$out/image_fanout-$stamp.json"
logs="$root/.sim/bench-logs"
steps="$logs/image_fanout-$stamp.steps"
play="$here/play.yml"
state=/var/lib/dgxspark-vllm/image_sync
ref=dgxspark-bench/engine:update
registry_image=dgxspark-sim/registry:2
: >"$steps"

# shellcheck disable=SC1091
source "$root/.venv/bin/activate"
export ANSIBLE_CONFIG="$root/ansible.cfg"
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=all

hosts=$(ansible-inventory -i "$inv" --list | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(d["vllm_head"]["hosts"] + d.get("vllm_workers", {}).get("hosts", [])))')
read -r head workers <<<"$(echo "$hosts" | awk '{h=$1; $1=""; print h, $0}')"
n=$(echo "$hosts" | wc -w)
head_mgmt=$(ansible-inventory -i "$inv" --host "$head" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ansible_host"])')
echo "fleet: head $head, workers $workers (N=$n), image $image"

now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
secs() { python3 -c "print(round($2 - $1, 1))"; }

# worker -> "address ifname": the worker's address on a subnet the head is on, not the head's
# management subnet when another is shared (image_sync's image_peer_address rule).
peer_of() {
  python3 - "$head_mgmt" "$(docker exec "$head" ip -4 -o addr)" "$(docker exec "$1" ip -4 -o addr)" <<'EOF'
import ipaddress, sys
mgmt, head_out, peer_out = sys.argv[1:]
def addrs(text):
    for line in text.splitlines():
        f = line.split()
        if len(f) > 3 and f[2] == "inet" and f[1] != "lo":
            yield f[1], ipaddress.ip_interface(f[3])
head_nets = [i.network for _, i in addrs(head_out)]
mgmt_net = next((n for n in head_nets if ipaddress.ip_address(mgmt) in n), None)
fallback = None
for ifname, i in addrs(peer_out):
    if i.network in head_nets:
        if i.network == mgmt_net:
            fallback = fallback or "%s %s" % (i.ip, ifname)
        else:
            print(i.ip, ifname)
            sys.exit(0)
print(fallback or "none none")
EOF
}
declare -A peer_addr peer_if
for w in $workers; do
  read -r a i <<<"$(peer_of "$w")"
  peer_addr[$w]=$a; peer_if[$w]=$i
  echo "peer $w: $a on $i"
done
rx() { docker exec "$1" cat "/sys/class/net/${peer_if[$1]}/statistics/rx_bytes"; }
rx_all() { for w in $workers; do echo "$w $(rx "$w")"; done; }

record() {  # key json-value: one line of the steps file
  echo "$1 $2" >>"$steps"
}

# --- set-up (not timed): IMAGE and the registry image in the head's dockerd, the bench reference
for img in "$image" "$registry_image"; do
  if ! docker exec "$head" docker image inspect "$img" >/dev/null 2>&1; then
    echo "loading $img into $head"
    docker save "$img" | docker exec -i "$head" docker load >/dev/null
  fi
done
build_update() {  # fresh random 1 MiB top layer on IMAGE, tagged $ref on the head
  docker exec "$head" sh -c "rm -rf /tmp/upd && mkdir -p /tmp/upd && head -c 1048576 /dev/urandom > /tmp/upd/blob && printf 'FROM %s\nCOPY blob /opt/update-blob\n' '$image' > /tmp/upd/Dockerfile && docker build -q -t '$ref' /tmp/upd >/dev/null && docker image prune -f >/dev/null"
}
build_update
size=$(docker exec "$head" docker image inspect --format '{{.Size}}' "$ref")
nlayers=$(docker exec "$head" docker image inspect --format '{{len .RootFS.Layers}}' "$ref")
echo "bench image $ref: $size B, $nlayers layers"

reset_workers() {
  for w in $workers; do
    docker exec "$w" sh -c "docker image rm -f '$ref' '$image' >/dev/null 2>&1; docker image prune -f >/dev/null 2>&1; true"
  done
}
reset_registry() {
  docker exec "$head" sh -c "docker rm -f dgxspark-image-registry >/dev/null 2>&1; rm -rf $state/registry/data; true"
}
run_mode() {  # name mode [args] -> seconds of the whole image_sync run (probe, transfer, verify)
  local t0 t1 name=$1 mode=$2 log l0
  shift 2
  log="$logs/image_fanout-$stamp-$name.log"
  l0=$(load)
  t0=$(now)
  ansible-playbook -i "$inv" "$play" -e "image_sync_mode=$mode" -e image_sync_reference="$ref" \
    -e image_sync_registry_image="$registry_image" "$@" >"$log" 2>&1 \
    || { echo "image_sync $mode failed, see $log" >&2; tail -20 "$log" >&2; exit 1; }
  t1=$(now)
  record "load_$name" "[\"$l0\", \"$(load)\"]"
  record "changed_$name" "$(grep -o 'changed=[0-9]*' "$log" | cut -d= -f2 | python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))')"
  secs "$t0" "$t1"
}
phase_s() {  # log, first task, task after the phase -> wall seconds (phase.py)
  python3 "$here/phase.py" "$@"
}

# --- stream (zstd -3, the role default), then stream without compression
reset_workers
t=$(run_mode stream stream "$@"); echo "stream: $t s"; record stream "$t"
x=$(grep -ho "compressed per rank) in [0-9.]* s" "$logs/image_fanout-$stamp-stream.log" | head -1 | awk '{print $5}')
record stream_transfer_only "${x:-null}"
reset_workers
t=$(run_mode stream_none stream -e image_sync_stream_compress=none "$@"); echo "stream, no compression: $t s"; record stream_none "$t"
x=$(grep -ho "compressed per rank) in [0-9.]* s" "$logs/image_fanout-$stamp-stream_none.log" | head -1 | awk '{print $5}')
record stream_none_transfer_only "${x:-null}"

# --- baseline: sequential docker save | ssh docker load to every worker, transfer only
# (the fleet-internal key and pinned host keys come from the stream runs above)
reset_workers
l0=$(load); t0=$(now)
for w in $workers; do
  docker exec "$head" sh -c "docker save '$ref' | ssh -i $state/id_ed25519 -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$state/known_hosts spark@${peer_addr[$w]} docker load" >/dev/null
done
t1=$(now)
record load_baseline "[\"$l0\", \"$(load)\"]"
t=$(secs "$t0" "$t1"); echo "baseline (sequential save | ssh load, transfer only): $t s"; record baseline_sequential_transfer "$t"

# --- registry from empty (no registry data, workers without the image), then a second run
reset_workers
reset_registry
t=$(run_mode registry registry "$@"); echo "registry: $t s"; record registry "$t"
lg="$logs/image_fanout-$stamp-registry.log"
record registry_push "$(phase_s "$lg" "Push the image into the head's registry" "Pull from the head's registry over the fabric")"
record registry_pull "$(phase_s "$lg" "Pull from the head's registry over the fabric" "Give the pulled image the lane's name")"
t=$(run_mode registry_second registry "$@"); echo "registry, second run (identical everywhere): $t s"; record registry_second_run "$t"

# --- update: the top 1 MiB layer changes on the head; registry moves it, then (another update)
# stream moves the whole image again
build_update
layer=$(docker exec "$head" docker history --format '{{.Size}}' --no-trunc --human=false "$ref" | head -1)
record layer_bytes "$layer"
declare -A b0
while read -r w v; do b0[$w]=$v; done < <(rx_all)
t=$(run_mode update_registry registry "$@"); echo "update via registry: $t s"; record update_registry "$t"
lg="$logs/image_fanout-$stamp-update_registry.log"
record update_registry_push "$(phase_s "$lg" "Push the image into the head's registry" "Pull from the head's registry over the fabric")"
record update_registry_pull "$(phase_s "$lg" "Pull from the head's registry over the fabric" "Give the pulled image the lane's name")"
while read -r w v; do record "update_registry_rx_$w" "$((v - b0[$w]))"; echo "  $w received $((v - b0[$w])) B on ${peer_if[$w]}"; done < <(rx_all)

build_update
while read -r w v; do b0[$w]=$v; done < <(rx_all)
t=$(run_mode update_stream stream "$@"); echo "update via stream: $t s"; record update_stream "$t"
while read -r w v; do record "update_stream_rx_$w" "$((v - b0[$w]))"; echo "  $w received $((v - b0[$w])) B on ${peer_if[$w]}"; done < <(rx_all)

# --- clean up (not timed): the bench reference and its registry aliases on every node, the
# registry and its data on the head; IMAGE stays on the head
for h in $hosts; do
  docker exec "$h" sh -c "for i in \$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '$ref\$'); do docker image rm -f \$i; done >/dev/null 2>&1; docker image prune -f >/dev/null 2>&1; true"
done
reset_registry

peers=$(for w in $workers; do printf '"%s": {"address": "%s", "interface": "%s"}, ' "$w" "${peer_addr[$w]}" "${peer_if[$w]}"; done)
python3 - "$json" "$steps" <<EOF
import json, sys
s = {}
for line in open(sys.argv[2]):
    k, v = line.rstrip("\n").split(" ", 1)
    s[k] = json.loads(v)
workers = "$workers".split()
r = {"stamp": "$stamp", "inventory": "$inv", "nodes": $n, "head": "$head", "workers": workers,
     "peers": {${peers%, }},
     "image": "$image", "bench_reference": "$ref", "image_bytes": int("$size"), "image_layers": int("$nlayers"),
     "what_is_timed": {
       "whole_run": "wall time of ansible-playbook benchmarks/image_fanout/play.yml (Ansible start-up, lane, probe of every rank, transfer, probe, verify)",
       "stream_transfer_only": "image_stream's own timer (docker save to the last docker load)",
       "registry_push/pull": "wall time of the push phase (start, waits) and of the pull phase (all workers in parallel), from profile_tasks timestamps",
       "baseline_sequential_transfer": "docker save | ssh worker docker load from the head, one worker after the other, transfer only"},
     "seconds": {k: s[k] for k in ["stream", "stream_transfer_only", "stream_none", "stream_none_transfer_only",
                                    "baseline_sequential_transfer", "registry", "registry_push", "registry_pull",
                                    "registry_second_run", "update_registry", "update_registry_push",
                                    "update_registry_pull", "update_stream"]},
     "changed": {k[8:]: v for k, v in s.items() if k.startswith("changed_")},
     "loadavg": {k[5:]: v for k, v in s.items() if k.startswith("load_")},
     "update": {"layer_bytes": s["layer_bytes"],
                "registry_rx_bytes": {w: s["update_registry_rx_" + w] for w in workers},
                "stream_rx_bytes": {w: s["update_stream_rx_" + w] for w in workers}}}
r["update"]["registry_ratio_to_layer"] = {w: round(v / r["update"]["layer_bytes"], 3) for w, v in r["update"]["registry_rx_bytes"].items()}
r["update"]["stream_ratio_to_layer"] = {w: round(v / r["update"]["layer_bytes"], 1) for w, v in r["update"]["stream_rx_bytes"].items()}
json.dump(r, open(sys.argv[1], "w"), indent=1)
print(json.dumps(r, indent=1))
EOF
rm -f "$steps"
