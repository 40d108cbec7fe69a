#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: doctor_collect
short_description: Collect one node's evidence for playbooks/doctor.yml, read-only
version_added: "0.2.0"
description:
  - Reads, on one node, everything playbooks/doctor.yml needs to name why a rank failed. The rank
    container's log (current and the copies vllm_ranks saved before removals), C(docker inspect) with the
    spec the container was rendered from (its C(dgxspark.vllm.spec) label) next to what it received, kernel
    and journal lines since the rank started, C(nvidia-smi) (with C(--query-compute-apps) - what each process
    holds), the process list and the engine processes by name (module_utils/processes.py), C(/proc/meminfo) and the effective C(vm.*)
    values, C(ip) links and addresses, C(ibdev2netdev), the C(NCCL_*) environment and C(/etc/nccl.conf)
    inside the container, the image fingerprint, fix-file hashes on the node and inside the rank, the weight
    files' sizes, listening ports, docker group membership and the watchdog's state directory.
  - It changes nothing on the node (no file is written; every command only reads), so it runs the same in
    check mode. Commands run as argv lists, never through a shell.
  - Secrets never leave the node in the result. Environment values whose name contains TOKEN, KEY, SECRET
    or PASSWORD, the value after C(--api-key), and every string in O(redact) are replaced by the word
    redacted in angle brackets.
  - The classification is not done here. The controller runs the failure catalogue
    (plugins/module_utils/diagnose.py) over every node's result, because some facts compare nodes,
    (the image against the head's, weight sizes against the head's).
author:
  - dgxspark.vllm maintainers (@dgxspark)
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
options:
  container_name:
    description: Name of the rank container.
    type: str
    default: vllm_rank
  log_dir:
    description: Directory where vllm_ranks saves C(docker logs) of removed ranks (C(<name>-<stamp>.log)).
    type: path
    default: /var/log/dgxspark-vllm
  saved_logs:
    description: How many of the newest saved logs to read.
    type: int
    default: 3
  log_lines:
    description: Lines kept from the end of each log (current and saved), in lines.
    type: int
    default: 2000
  ports:
    description: TCP ports the rank needs on this node (API port on the head, master port); a listener on one
      of them while the rank does not run is reported.
    type: list
    elements: int
    default: []
  fabric_mtu:
    description: MTU the lane expects on the fabric ports (bytes); 0 skips the check.
    type: int
    default: 0
  fix_files:
    description: The lane's fix files, C({name, sha256, node_path, container_path}); hashed on the node and
      inside the running rank.
    type: list
    elements: dict
    default: []
  weights_dir:
    description: >-
      Host path of the checkpoint; the size of every file under it is reported (bytes), and the header of every
      C(.safetensors) file is read and parsed as JSON here, outside the engine (module_utils/tp_padding.py
      header_of), so an engine that failed to read a header is told apart from a file whose header is bad.
    type: path
  swap_required:
    description: The lane requires a swap area (node_prep creates it).
    type: bool
    default: false
  docker_user:
    description: The service user whose docker group membership is checked; empty skips it.
    type: str
    default: ""
  disk:
    description: Filesystems to check, C({path, min_gib}) (free space in GiB, 1024^3 bytes).
    type: list
    elements: dict
    default: []
  watchdog_dirs:
    description: Watchdog state directories; the files found there (up to 64 KiB each; of a C(.jsonl) log, its last
      64 KiB) are returned.
    type: list
    elements: path
    default: [/var/lib/dgxspark-vllm-watchdog, /var/lib/dgxspark-vllm/watchdog]
  kernel_margin_s:
    description: Kernel and journal lines from this many seconds before the rank started are kept too.
    type: int
    default: 300
  redact:
    description: Secret strings (API key, Hugging Face token) to remove from everything returned.
    type: list
    elements: str
    default: []
  image:
    description: The lane's image reference; inspected on the node when no rank container names one.
    type: str
    default: ""
  docker_bin:
    description: The docker client; every docker call goes through the collection's one docker client
      (module_utils/docker_cli.py, argv lists), which parses C(docker inspect) and tells an absent object from
      a failed call (filed in the evidence; the rank then reads unknown, not absent).
    type: str
    default: docker
  proc_root:
    description: The C(/proc) tree the engine processes are read from (their name, PID, resident memory, cgroup).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Doctor | collect this node's evidence
  dgxspark.vllm.doctor_collect:
    container_name: vllm_rank
    ports: [8000, 29501]
    fabric_mtu: 9000
    redact: ["{{ vllm_api_key }}"]
  no_log: false
"""

RETURN = r"""
files:
  description: Text of every collected piece, by file name (what doctor.yml writes into the tarball).
  returned: always
  type: dict
  sample: {"container-log.txt": "...", "meminfo.txt": "MemTotal: ...", "ibdev2netdev.txt": "..."}
raw:
  description: Parsed state for diagnose.node_facts and diagnose.fleet_facts (no secrets).
  returned: always
  type: dict
evidence:
  description: >-
    C(logs), the log the rank is judged by (the rank container's own log while it exists, running or stopped;
    without one, the newest saved copy), C(past_logs) (the saved copies of earlier containers; diagnose.host_verdict
    reports their matches as past incidents), kernel and journal lines, and the container state, for
    diagnose.diagnose.
  returned: always
  type: dict
"""

import calendar
import glob
import hashlib
import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import DockerCLI, DockerError, parse_container, parse_image
from ansible_collections.dgxspark.vllm.plugins.module_utils import processes
from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import PaddingError, header_of

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD", re.I)
REDACTED = "<redacted>"


class Collector(object):
    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.secrets = sorted([s for s in self.p["redact"] if s and len(s) >= 4], key=len, reverse=True)
        self.files = {}
        self.last = ([], 0, "", "")
        self.cli = DockerCLI(self._docker_run, docker=self.p["docker_bin"])

    def clean(self, text):
        text = text or ""
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        return text

    def _exec(self, argv):
        exe = argv[0] if os.path.isabs(argv[0]) else self.m.get_bin_path(argv[0])
        if not exe:  # a missing tool is evidence too (run_command would fail the module)
            return 127, "", "%s: command not found" % argv[0]
        rc, out, err = self.m.run_command([exe] + list(argv[1:]), check_rc=False)
        return rc, out or "", err or ""

    def _record(self, name, argv, rc, out, err):
        text = self.clean(out + (("\n[stderr] " + err) if err.strip() else ""))
        self.files[name] = "$ %s\n[rc %s]\n%s" % (" ".join(argv), rc, text)

    def run(self, argv, name=None):
        rc, out, err = self._exec(argv)
        if name:
            self._record(name, argv, rc, out, err)
        return rc, self.clean(out), self.clean(err)

    def _docker_run(self, argv, **_kw):
        """The runner of docker_cli.DockerCLI: keeps the last call, so its output can be filed."""
        self.last = (argv,) + self._exec(argv)
        return self.last[1:]

    def docker(self, *args, **kw):
        """`docker <args>` through docker_cli (rc, out, err; never raises), filed under name when given."""
        _rc, _out, _err = self.cli.call(*args, check=False)
        argv, rc, out, err = self.last
        if kw.get("name"):
            self._record(kw["name"], argv, rc, out, err)
        return rc, self.clean(out), self.clean(err)

    def inspect(self, what, ref, name):
        """(raw `docker inspect` object or None when absent, error or None), filed under name; docker_cli
        parses the JSON and tells an absent object from a failed call."""
        try:
            obj = self.cli.inspect_container_raw(ref) if what == "container" else self.cli.inspect_image_raw(ref)
            error = None
        except DockerError as e:
            obj, error = None, self.clean(str(e))
        argv, rc, out, err = self.last
        self._record(name, argv, rc, out, err + ("\n" + error if error else ""))
        return obj, error

    def read(self, path, limit=1 << 20, tail=False):
        """The first `limit` bytes of a file, or its last ones (tail: a log that only grows)."""
        try:
            with open(path, "rb") as f:
                if tail:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
                return self.clean(f.read(limit).decode("utf-8", "replace"))
        except (IOError, OSError):
            return None


def tail(text, n):
    lines = (text or "").splitlines()
    return "\n".join(lines[-n:]) + ("\n" if lines else "")


def redact_env(env):
    out = []
    for item in env or []:
        k, _sep, v = item.partition("=")
        out.append("%s=%s" % (k, REDACTED) if SECRET_NAME.search(k) and v else item)
    return out


def redact_args(args):
    out, hide = [], False
    for a in args or []:
        if hide:
            out.append(REDACTED)
            hide = False
        elif a == "--api-key":
            out.append(a)
            hide = True
        elif a.startswith("--api-key="):
            out.append("--api-key=" + REDACTED)
        else:
            out.append(a)
    return out


def parse_time(stamp):
    """Epoch seconds of a docker/dmesg ISO timestamp (fractions and zone suffix tolerated, UTC assumed)."""
    if not stamp or stamp.startswith("0001-"):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", stamp)
    if not m:
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))


def kernel_since(text, since, container_id):
    """Kernel lines (dmesg --time-format iso) at or after `since`; OOM-killer lines only when they name this
    rank's container cgroup (the node's kernel also logs other containers' kills)."""
    keep, last_oom_ours = [], False
    for line in (text or "").splitlines():
        t = parse_time(line.split(" ", 1)[0])
        if since is not None and t is not None and t < since:
            continue
        if "oom-kill:" in line:
            last_oom_ours = bool(container_id) and container_id[:12] in line
            if not last_oom_ours:
                continue
        elif "Killed process" in line and not last_oom_ours:
            continue
        keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


def sha256_file(path):
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except (IOError, OSError):
        return None


def collect(module):
    c = Collector(module)
    p = module.params
    name = p["container_name"]
    raw = {"swap_required": p["swap_required"], "fabric_mtu": p["fabric_mtu"] or None, "ports": p["ports"]}

    # the rank container: state, what it received, the rendered spec from its label
    info, error = c.inspect("container", name, "docker-inspect.json")
    # docker not answering is no absent rank: exists None (the verdict reads unknown, with the error)
    container = {"exists": None, "error": error} if error else {"exists": info is not None}
    since = None
    cid = ""
    if info:
        parsed = parse_container(info)
        cfg = info.get("Config") or {}
        hc = info.get("HostConfig") or {}
        cid = parsed["id"]
        container.update({k: parsed[k] for k in ("running", "status", "exit_code", "oom_killed",
                                                 "started_at", "finished_at", "image_id")})
        container["id"] = cid[:12]
        since = parse_time(parsed["started_at"])
        labels = parsed["labels"]
        rendered = labels.get("dgxspark.vllm.spec")
        try:
            rendered = json.loads(rendered) if rendered else None
        except ValueError:
            pass
        received = {"image": cfg.get("Image"), "image_id": info.get("Image"), "entrypoint": cfg.get("Entrypoint"),
                    "args": redact_args(info.get("Args") or cfg.get("Cmd")), "env": redact_env(cfg.get("Env")),
                    "mounts": [{"source": mt.get("Source"), "destination": mt.get("Destination"),
                                "mode": mt.get("Mode"), "rw": mt.get("RW")} for mt in info.get("Mounts") or []],
                    "network_mode": hc.get("NetworkMode"), "ipc_mode": hc.get("IpcMode"),
                    "devices": hc.get("Devices"), "restart_policy": hc.get("RestartPolicy"),
                    "spec_hash": labels.get("dgxspark.vllm.spec-hash")}
        c.files["spec-rendered-vs-received.json"] = c.clean(json.dumps(
            {"rendered (label dgxspark.vllm.spec)": rendered, "received (docker inspect)": received},
            indent=2, sort_keys=True)) + "\n"
        raw["args"] = received["args"]
        raw["nccl_env"] = dict(e.split("=", 1) for e in received["env"] if e.startswith("NCCL_") and "=" in e)
        # docker inspect itself carries the environment: keep only the redacted copy
        info["Config"]["Env"] = received["env"]
        info["Args"] = redact_args(info.get("Args"))
        if cfg.get("Cmd"):
            info["Config"]["Cmd"] = redact_args(cfg.get("Cmd"))
        c.files["docker-inspect.json"] = c.clean(json.dumps(info, indent=2, sort_keys=True)) + "\n"
    raw["container"] = container

    # logs: current, then the newest saved copies (oldest first, so the log reads in time order)
    logs = []
    if info:
        rc, out, err = c.docker("logs", "--tail", str(p["log_lines"]), name)
        current = tail(out + err, p["log_lines"])
        c.files["container-log.txt"] = current
    else:
        current = ""
    saved = sorted(glob.glob(os.path.join(p["log_dir"], "%s-*.log" % name)))[-p["saved_logs"]:]
    for path in saved:
        text = tail(c.read(path, 64 << 20) or "", p["log_lines"])
        c.files["saved-logs/" + os.path.basename(path)] = text
        logs.append(text)
    # Logs are saved when a rank is removed, so while a rank container exists (running or stopped) every saved
    # log is of a container before it: the rank is judged by its own log and the saved ones are past incidents,
    # reported apart. Without a container the newest saved log is the last rank's and is the evidence.
    if container.get("exists"):
        raw["logs"], past_logs = current, "".join(logs)
    else:
        raw["logs"], past_logs = (logs[-1] if logs else ""), "".join(logs[:-1])

    # kernel and journal since the rank started (minus a margin); without a container, the last hour
    start = (since - p["kernel_margin_s"]) if since else time.time() - 3600
    rc, out, _err = c.run(["dmesg", "--time-format", "iso"])
    kernel = kernel_since(out, start, cid) if rc == 0 else ""
    if rc != 0:
        rc, out, _err = c.run(["journalctl", "-k", "--no-pager", "-o", "short-iso", "--since",
                               "@%d" % int(start)])
        kernel = kernel_since(out, None, cid) if rc == 0 else ""
    c.files["kernel.txt"] = kernel
    rc, out, _err = c.run(["journalctl", "--no-pager", "-o", "short-iso", "-n", "2000", "--since",
                           "@%d" % int(start)])
    journal = out if rc == 0 else ""
    c.files["journal.txt"] = journal

    # GPU, memory, sysctl
    c.run(["nvidia-smi"], "nvidia-smi.txt")
    rc, out, _err = c.run(["nvidia-smi", "--query-gpu=utilization.gpu,clocks.sm,clocks.applications.graphics,"
                           "power.draw", "--format=csv,noheader,nounits"], "nvidia-smi-query.csv")
    vals = [v.strip() for v in out.strip().split(",")] if rc == 0 else []
    if len(vals) == 4:
        raw["gpu"] = dict(zip(("util", "sm_clock", "app_clock", "power"), vals))
    # who holds memory: the engine processes by name (module_utils/processes.py) and what the driver says each holds
    rc, out, _err = c.run(["nvidia-smi"] + processes.COMPUTE_APPS_ARGV, "nvidia-smi-compute-apps.csv")
    raw["compute_apps"] = out if rc == 0 else ""
    # names only in the listing: a command line may carry a secret (--api-key); the engines' argv is redacted
    c.run(["ps", "-eo", "pid,ppid,rss:10,etimes,comm:16"], "ps.txt")
    raw["processes"] = [dict(pr, argv=[c.clean(a) for a in redact_args(pr["argv"])])
                        for pr in processes.read_processes(p["proc_root"])
                        if processes.engine_name(pr["comm"], pr["argv"])]
    c.files["engine-processes.json"] = json.dumps(raw["processes"], indent=2, sort_keys=True) + "\n"
    meminfo = c.read("/proc/meminfo") or ""
    c.files["meminfo.txt"] = meminfo
    raw["meminfo"] = meminfo
    sysctl = {}
    for path in sorted(glob.glob("/proc/sys/vm/*")):
        v = c.read(path, 4096)
        if v is not None:
            sysctl["vm." + os.path.basename(path)] = v.strip()
    raw["sysctl"] = sysctl
    c.files["sysctl-vm.txt"] = "".join("%s = %s\n" % kv for kv in sorted(sysctl.items()))
    c.run(["swapon", "--show", "--bytes"], "swapon.txt")

    # network
    rc, out, _err = c.run(["ip", "-j", "addr", "show"], "ip-addr.json")
    links = []
    try:
        for link in json.loads(out) if rc == 0 else []:
            links.append({"ifname": link.get("ifname"), "operstate": link.get("operstate"), "mtu": link.get("mtu"),
                          "ipv4": [a.get("local") for a in link.get("addr_info") or [] if a.get("family") == "inet"]})
    except ValueError:
        pass
    raw["links"] = links
    rc, out, _err = c.run(["ibdev2netdev"], "ibdev2netdev.txt")
    raw["ibdev2netdev"] = out if rc == 0 else ""
    try:
        raw["ib_devices"] = sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        raw["ib_devices"] = []
    rc, out, _err = c.run(["ss", "-H", "-ltnp"], "listening.txt")
    listeners = []
    for line in out.splitlines() if rc == 0 else []:
        cols = line.split()
        if len(cols) >= 4:
            port = cols[3].rsplit(":", 1)[-1]
            proc = re.search(r'users:\(\("([^"]+)",pid=(\d+)', line)
            if port.isdigit():
                listeners.append({"port": int(port), "process": "%s pid %s" % proc.groups() if proc else None})
    raw["listeners"] = listeners

    # inside the running rank: NCCL env, /etc/nccl.conf, fix files
    running = container.get("running")
    if running:
        rc, out, _err = c.docker("exec", name, "cat", "/etc/nccl.conf")
        raw["nccl_conf"] = out if rc == 0 else ""
        c.files["container-etc-nccl.conf"] = out if rc == 0 else "(none)\n"
    c.files["nccl-env.txt"] = "".join("%s=%s\n" % kv for kv in sorted((raw.get("nccl_env") or {}).items()))
    fixes = []
    for f in p["fix_files"]:
        node_sha = sha256_file(f.get("node_path") or "")
        rank_sha = None
        if running and f.get("container_path"):
            rc, out, _err = c.docker("exec", name, "sha256sum", f["container_path"])
            rank_sha = out.split()[0] if rc == 0 and out.split() else ""
        fixes.append({"name": f.get("name"), "expected": f.get("sha256") or "", "node_sha256": node_sha,
                      "rank_sha256": rank_sha})
    raw["fix_files"] = fixes
    c.files["fix-files.json"] = json.dumps(fixes, indent=2, sort_keys=True) + "\n"

    # image: what the rank runs, and what the lane's tag names on this node now (the next start uses that)
    def image_inspect(ref, file_name):
        img = parse_image(c.inspect("image", ref, file_name)[0]) or {}
        return {k: img.get(k) for k in ("id", "repo_tags", "repo_digests", "layers")}

    image = {}
    if container.get("image_id"):
        running = image_inspect(container["image_id"], "image-inspect.json")
        image.update({"running_id": running["id"], "running_layers": running["layers"]})
    ref = ((info or {}).get("Config") or {}).get("Image") or p["image"]
    if ref:
        tagged = image_inspect(ref, "image-inspect-reference.json")
        image.update({"reference": ref, "id": tagged["id"], "layers": tagged["layers"],
                      "repo_tags": tagged["repo_tags"], "repo_digests": tagged["repo_digests"]})
    raw["image"] = image
    c.files["image-fingerprint.json"] = json.dumps(image, indent=2, sort_keys=True) + "\n"

    # weights: sizes (bytes) of every file under the checkpoint
    weights = {}
    if p["weights_dir"] and os.path.isdir(p["weights_dir"]):
        for root, _dirs, names in os.walk(p["weights_dir"]):
            for n in names:
                full = os.path.join(root, n)
                try:
                    weights[os.path.relpath(full, p["weights_dir"])] = os.path.getsize(full)
                except OSError:
                    pass
    raw["weights"] = weights
    c.files["weights-sizes.json"] = json.dumps(weights, indent=2, sort_keys=True) + "\n"
    # each shard's header as the format defines it (8-byte length, a JSON object): "ok" or why not
    headers = {}
    for rel in sorted(weights):
        if rel.endswith(".safetensors"):
            try:
                header_of(os.path.join(p["weights_dir"], rel))
                headers[rel] = "ok"
            except (PaddingError, IOError, OSError) as e:
                headers[rel] = str(e).replace(os.path.join(p["weights_dir"], rel) + ": ", "", 1)
    raw["safetensors_headers"] = headers
    c.files["safetensors-headers.json"] = json.dumps(headers, indent=2, sort_keys=True) + "\n"

    # docker group, disk
    if p["docker_user"]:
        rc, out, _err = c.run(["id", "-nG", p["docker_user"]], "docker-group.txt")
        raw["docker_group"] = {"user": p["docker_user"], "member": "docker" in out.split()} if rc == 0 else {}
    disk = []
    for d in p["disk"]:
        try:
            st = os.statvfs(d["path"])
            disk.append({"path": d["path"], "free_gib": st.f_bavail * st.f_frsize / float(1 << 30),
                         "min_gib": d.get("min_gib", 0)})
        except (OSError, KeyError):
            pass
    raw["disk"] = disk
    c.files["disk.json"] = json.dumps(disk, indent=2, sort_keys=True) + "\n"

    # watchdog state
    for wd in p["watchdog_dirs"]:
        if os.path.isdir(wd):
            for root, _dirs, names in os.walk(wd):
                for n in sorted(names):
                    full = os.path.join(root, n)
                    # the incident log only grows: its end holds the recent incidents doctor_report shows
                    text = c.read(full, 64 << 10, tail=n.endswith(".jsonl"))
                    if text is not None:
                        c.files["watchdog/" + os.path.relpath(full, os.path.dirname(wd))] = text

    evidence = {"logs": raw["logs"], "past_logs": past_logs, "kernel": kernel, "journal": journal,
                "container": container}
    raw_out = dict((k, v) for k, v in raw.items() if k != "logs")
    return {"files": c.files, "raw": raw_out, "evidence": evidence}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container_name=dict(type="str", default="vllm_rank"),
            log_dir=dict(type="path", default="/var/log/dgxspark-vllm"),
            saved_logs=dict(type="int", default=3),
            log_lines=dict(type="int", default=2000),
            ports=dict(type="list", elements="int", default=[]),
            fabric_mtu=dict(type="int", default=0),
            fix_files=dict(type="list", elements="dict", default=[]),
            weights_dir=dict(type="path"),
            swap_required=dict(type="bool", default=False),
            docker_user=dict(type="str", default=""),
            disk=dict(type="list", elements="dict", default=[]),
            watchdog_dirs=dict(type="list", elements="path", default=["/var/lib/dgxspark-vllm-watchdog", "/var/lib/dgxspark-vllm/watchdog"]),
            kernel_margin_s=dict(type="int", default=300),
            redact=dict(type="list", elements="str", default=[], no_log=True),
            image=dict(type="str", default=""),
            docker_bin=dict(type="str", default="docker"),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    result = collect(module)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
