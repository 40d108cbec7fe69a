#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Time the demo flow: sim build (cold and/or warm), site.yml, engine boot, collection overhead.

Writes benchmarks/results/demo_timings-<UTC timestamp>.json. Measures only; asserts nothing.

  python benchmarks/demo_timings.py                 # warm sim_up, then site.yml
  python benchmarks/demo_timings.py --cold          # first remove the sim images, volumes and the
                                                    # .sim build caches, so sim_up builds everything
  python benchmarks/demo_timings.py --no-site       # sim build only

Figures (seconds unless noted):
  sim_up_cold_s / sim_up_warm_s   wall time of playbooks/sim_up.yml, with its recap `changed` count
  site_s                          wall time of site.yml, with its recap `changed` count
  engine_boot_s                   earliest rank container start (docker inspect .State.StartedAt on
                                  each node) to the head's "Application startup complete" log line
                                  (docker logs --timestamps); falls back to the first HTTP 200 of
                                  /health seen by this script's poller
  overhead_s                      site_s - engine_boot_s
  peak_host_mem_used_gib          peak (MemTotal - MemAvailable) of the machine during site.yml,
  baseline_host_mem_used_gib      and before it; GiB = 1024**3 bytes. Nested rank containers are
                                  not inside the node containers' cgroups (cgroupns=host), so the
                                  fleet's RAM is read from the host; other work on it adds noise.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def now():
    return time.time()


def run_playbook(args, log_path):
    start = now()
    with open(log_path, "w") as log:
        rc = subprocess.call(["ansible-playbook"] + args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    wall = now() - start
    with open(log_path) as f:
        text = f.read()
    changed = sum(int(m.group(3)) for m in RECAP.finditer(text))
    failed = sum(int(m.group(5)) + int(m.group(4)) for m in RECAP.finditer(text))
    return {"rc": rc, "wall_s": round(wall, 1), "changed": changed, "failed_or_unreachable": failed, "log": log_path}


def inventory(inv):
    out = subprocess.check_output(["ansible-inventory", "-i", inv, "--list"], cwd=REPO)
    data = json.loads(out)
    hv = data.get("_meta", {}).get("hostvars", {})
    head = data["vllm_head"]["hosts"][0]
    nodes = data.get("spark_cluster", {}).get("hosts", []) or [head] + data.get("vllm_workers", {}).get("hosts", [])
    if not nodes:
        nodes = [head] + data.get("vllm_workers", {}).get("hosts", [])
    return head, hv.get(head, {}).get("ansible_host", head), nodes


def mem_used_gib():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = int(v.split()[0]) * 1024
    return (info["MemTotal"] - info["MemAvailable"]) / 1024 ** 3


class Sampler(threading.Thread):
    """Samples host memory and the head's /health every second."""

    def __init__(self, health_url):
        super().__init__(daemon=True)
        self.health_url = health_url
        self.peak = 0.0
        self.first_200 = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, mem_used_gib())
            if self.first_200 is None:
                try:
                    with urllib.request.urlopen(self.health_url, timeout=2) as r:
                        if r.status == 200:
                            self.first_200 = now()
                except Exception:
                    pass
            self.stop.wait(1.0)


def parse_docker_time(text):
    # 2026-11-30T15:04:05.123456789Z -> epoch seconds (nanoseconds trimmed to microseconds)
    text = text.strip()
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", text)
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    dt = datetime.datetime.strptime(m.group(1) + frac, "%Y-%m-%dT%H:%M:%S.%f")
    return dt.replace(tzinfo=datetime.timezone.utc).timestamp()


def engine_boot(nodes, head, rank_container):
    starts = {}
    for node in nodes:
        try:
            out = subprocess.check_output(
                ["docker", "exec", node, "docker", "inspect", "--format", "{{.State.StartedAt}}", rank_container],
                stderr=subprocess.DEVNULL, text=True)
            starts[node] = parse_docker_time(out)
        except subprocess.CalledProcessError:
            starts[node] = None
    ready = None
    try:
        logs = subprocess.check_output(["docker", "exec", head, "docker", "logs", "--timestamps", rank_container],
                                       stderr=subprocess.STDOUT, text=True)
        for line in logs.splitlines():
            if "Application startup complete" in line:
                ready = parse_docker_time(line.split(" ", 1)[0])
    except subprocess.CalledProcessError:
        pass
    return starts, ready


def cold_reset(inv):
    subprocess.call(["ansible-playbook", "playbooks/sim_down.yml", "-i", inv,
                     "-e", "sim_fleet_purge=true", "-e", "sim_fleet_purge_images=true"], cwd=REPO,
                    stdout=subprocess.DEVNULL)
    for sub in ("build", "models", "cache"):
        shutil.rmtree(os.path.join(REPO, ".sim", sub), ignore_errors=True)


def main(argv):
    p = argparse.ArgumentParser(description="Time the simulated-fleet demo flow (no asserts).")
    p.add_argument("-i", "--inventory", default="inventories/sim/hosts.yml")
    p.add_argument("--cold", action="store_true", help="remove sim images/volumes/caches first (slow: rebuilds all)")
    p.add_argument("--no-site", action="store_true", help="time the sim build only")
    p.add_argument("--rank-container", default="vllm_rank", help="rank container name on the nodes (lane container.name)")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results_dir = os.path.join(REPO, "benchmarks", "results")
    logs_dir = os.path.join(REPO, ".sim", "bench-logs")
    os.makedirs(results_dir, exist_ok=True)
    os.makedirs(logs_dir, exist_ok=True)
    res = {"timestamp": stamp, "inventory": args.inventory, "cpus": os.cpu_count(),
           "loadavg_start": os.getloadavg()}

    if args.cold:
        cold_reset(args.inventory)
        cold = run_playbook(["playbooks/sim_up.yml", "-i", args.inventory], os.path.join(logs_dir, stamp + "-sim_up-cold.log"))
        res["sim_up_cold"] = cold
        res["sim_up_cold_s"] = cold["wall_s"]
    warm = run_playbook(["playbooks/sim_up.yml", "-i", args.inventory], os.path.join(logs_dir, stamp + "-sim_up-warm.log"))
    res["sim_up_warm"] = warm
    res["sim_up_warm_s"] = warm["wall_s"]

    images = {}
    for ref in ("dgxspark-sim/debian:bookworm", "dgxspark-sim/spark-node:latest", "dgxspark-sim/vllm-cpu:0.32.0"):
        try:
            size = subprocess.check_output(["docker", "image", "inspect", "--format", "{{.Size}}", ref], text=True)
            images[ref] = round(int(size) / 1e9, 2)
        except subprocess.CalledProcessError:
            images[ref] = None
    res["image_size_gb"] = images

    if not args.no_site:
        head, head_ip, nodes = inventory(args.inventory)
        res["baseline_host_mem_used_gib"] = round(mem_used_gib(), 2)
        sampler = Sampler("http://%s:%d/health" % (head_ip, args.port))
        sampler.start()
        site_start = now()
        site = run_playbook(["site.yml", "-i", args.inventory], os.path.join(logs_dir, stamp + "-site.log"))
        sampler.stop.set()
        sampler.join()
        res["site"] = site
        res["site_s"] = site["wall_s"]
        res["peak_host_mem_used_gib"] = round(sampler.peak, 2)
        starts, ready = engine_boot(nodes, head, args.rank_container)
        res["rank_started_at"] = starts
        first_start = min([t for t in starts.values() if t] or [None]) if any(starts.values()) else None
        if ready is None and sampler.first_200 is not None:
            ready = sampler.first_200
            res["engine_ready_source"] = "first /health 200 seen by the poller"
        else:
            res["engine_ready_source"] = "head log 'Application startup complete'"
        if first_start and ready and first_start >= site_start - 1:
            res["engine_boot_s"] = round(ready - first_start, 1)
            res["overhead_s"] = round(site["wall_s"] - res["engine_boot_s"], 1)
        else:
            # ranks were not (re)started by this run (second run: changed=0)
            res["engine_boot_s"] = None
            res["overhead_s"] = None

    res["loadavg_end"] = os.getloadavg()
    out = os.path.join(results_dir, "demo_timings-%s.json" % stamp)
    with open(out, "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
        f.write("\n")
    print(json.dumps(res, indent=2, sort_keys=True))
    print("written: %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
