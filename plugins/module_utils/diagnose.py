# -*- coding: utf-8 -*-
# Copyright: contributors to dgxspark.vllm
# SPDX-License-Identifier: MIT
"""The one classifier: evidence -> catalogue entries ranked by evidence.

Pure functions over plain data, Python stdlib only, so the same file runs inside AnsiballZ
modules (vllm_rank, vllm_health), in the doctor filter on the controller and in the head's watchdog.
The entries live in catalogue.py; nothing here names a failure.

Evidence (every key optional):
  logs     str   rank container log, current and saved
  kernel   str   kernel lines (dmesg / journalctl -k)
  journal  str   system journal lines
  api      str   an HTTP answer of the endpoint
  container dict exists, running, exit_code, oom_killed (docker inspect State)
  facts    dict  node facts (node_facts() derives them from collected raw state)
"""
import re

try:
    from ansible_collections.dgxspark.vllm.plugins.module_utils.catalogue import CATALOGUE
    from ansible_collections.dgxspark.vllm.plugins.module_utils import processes
except ImportError:  # the watchdog imports the file next to it, outside Ansible
    from catalogue import CATALOGUE  # type: ignore
    import processes  # type: ignore

# how much one kind of evidence weighs in the ranking; a generic entry never ranks above 1
WEIGHTS = {"state": 4, "kernel": 3, "journal": 3, "log": 3, "exit": 3, "api": 2}
TEXT_KINDS = (("log", "logs"), ("kernel", "kernel"), ("journal", "journal"), ("api", "api"))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_COMPILED = {}


def entries():
    return CATALOGUE


def entry(entry_id):
    for e in CATALOGUE:
        if e["id"] == entry_id:
            return e
    raise KeyError(entry_id)


def split_lines(text):
    """Lines of a log with ANSI colours and carriage-return progress frames removed."""
    out = []
    for raw in (text or "").splitlines():
        line = _ANSI.sub("", raw.split("\r")[-1]).rstrip()
        if line:
            out.append(line)
    return out


def _rx(pattern):
    rx = _COMPILED.get(pattern)
    if rx is None:
        rx = _COMPILED[pattern] = re.compile(pattern)
    return rx


def _num(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _state_hit(cond, facts):
    if cond["fact"] not in facts:
        return None
    value = facts[cond["fact"]]
    op = cond["op"]
    if op == "present":
        ok = bool(value)
    else:
        a, b = _num(value), _num(cond.get("value"))
        if a is None or b is None:
            return None
        ok = {"eq": a == b, "gt": a > b, "lt": a < b}[op]
    if not ok:
        return None
    shown = value if isinstance(value, str) else repr(value)
    return "%s: %s" % (cond["fact"], shown)


def _exit_hit(want, container):
    if not container or not container.get("exists", True) or container.get("running"):
        return None
    for key, value in want.items():
        if key not in container or container[key] != value:
            return None
    return "container exited: exit code %s, OOMKilled %s" % (
        container.get("exit_code"), container.get("oom_killed"))


def match_entry(e, evidence, lines=None):
    """Every piece of evidence for one entry: [{kind, line, pos, extract}] (empty: no match)."""
    hits = []
    m = e["matchers"]
    lines = lines if lines is not None else {}
    for kind, key in TEXT_KINDS:
        if kind not in m:
            continue
        if key not in lines:
            lines[key] = split_lines(evidence.get(key))
        for pos, line in enumerate(lines[key]):
            found = None
            for pattern in m[kind]:
                found = _rx(pattern).search(line)
                if found:
                    break
            if found:
                extract = dict((k, v) for k, v in found.groupdict().items() if v is not None)
                hits.append({"kind": kind, "line": line, "pos": pos, "extract": extract})
                break
    if "exit" in m:
        line = _exit_hit(m["exit"], evidence.get("container"))
        if line:
            hits.append({"kind": "exit", "line": line, "pos": None, "extract": {}})
    for cond in m.get("state", []):
        line = _state_hit(cond, evidence.get("facts") or {})
        if line:
            hits.append({"kind": "state", "line": line, "pos": None, "extract": {}})
            break
    return hits


def diagnose(evidence, exclude_classes=(), only=None):
    """Matching entries, best first: [{id, class, title, cause, fix, source, evidence, kind, score, extract}].

    Score: the sum of the weights of the kinds of evidence found (a node fact weighs most, then a log,
    kernel or journal line or the container's exit, then an API answer); a generic entry scores 1.
    Ties go to the earliest log line (the root cause precedes the cascade), then catalogue order. An entry that
    supersedes another (catalogue key `supersedes`) removes it when both match: its fix would be the wrong one.
    """
    lines = {}
    ranked = []
    for idx, e in enumerate(CATALOGUE):
        if e["class"] in exclude_classes or (only is not None and e["id"] not in only):
            continue
        hits = match_entry(e, evidence, lines)
        if not hits:
            continue
        score = sum(WEIGHTS[k] for k in set(h["kind"] for h in hits))
        if e.get("generic"):
            score = 1
        first = hits[0]
        positions = [h["pos"] for h in hits if h["pos"] is not None]
        extract = {}
        for h in hits:
            extract.update(h["extract"])
        ranked.append(((-score, min(positions) if positions else 1 << 30, idx), {
            "id": e["id"], "class": e["class"], "title": e["title"], "cause": e["cause"], "fix": e["fix"],
            "source": list(e["source"]), "evidence": first["line"], "kind": first["kind"],
            "evidence_all": [h["line"] for h in hits], "score": score, "extract": extract,
        }))
    ranked.sort(key=lambda r: r[0])
    matched = set(r[1]["id"] for r in ranked)
    dropped = set(s for e in CATALOGUE if e["id"] in matched for s in e.get("supersedes", ()))
    return [r[1] for r in ranked if r[1]["id"] not in dropped]


# ------------------------------------------------------------------------------ node facts

def _meminfo_kib(text, key):
    m = re.search(r"^%s:\s+(\d+) kB" % re.escape(key), text or "", re.M)
    return int(m.group(1)) if m else None


def _ibdev_netdevs(text):
    """{netdev: 'Up'|'Down'} from ibdev2netdev lines: 'dev port 1 ==> netdev (Up)'."""
    out = {}
    for line in (text or "").splitlines():
        m = re.search(r"==>\s*(\S+)\s*\((\w+)\)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _arg(argv, flag):
    """Value of `--flag value` or `--flag=value` in an argv list, else None."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def hca_prefix_extra(value, devices):
    """Devices an NCCL_IB_HCA value selects beyond the names it lists (NCCL matches names as prefixes
    unless the value starts with '='; '^' excludes; ':port' suffixes are ignored here)."""
    if not value or value.startswith("=") or value.startswith("^"):
        return []
    names = [item.split(":")[0] for item in value.split(",") if item]
    return sorted(d for d in devices if d not in names and any(d.startswith(n) for n in names))


def parse_sysctl(text):
    """{name: value} from `sysctl -a` style lines ('vm.swappiness = 0'); '#' lines skipped."""
    out = {}
    for line in (text or "").splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


# what the engine prints when a shard's header does not parse (safetensors' Rust reader)
_HEADER_ERROR = re.compile(r"[^\n]*(?:Error while deserializing header|SafetensorError)[^\n]*")
_LOAD_PROGRESS = re.compile(r"Loading safetensors checkpoint shards:[^\n|]*\|[^\n]*?(\d+)/(\d+)")


def _natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def shard_at_failure(logs, shards):
    """' (the load stopped after N of M shards: the next is <file>)' from the engine's last progress line, or ''.
    vLLM loads the files in natural order of their names; the bar counts the files already read."""
    found = _LOAD_PROGRESS.findall(logs or "")
    if not found:
        return ""
    done, total = int(found[-1][0]), int(found[-1][1])
    names = sorted(shards, key=_natural)
    if total != len(names) or done >= total:
        return " (the load stopped after %d of %d shards)" % (done, total)
    return " (the load stopped after %d of %d shards: the next is %s)" % (done, total, names[done])


def node_facts(raw):
    """Node facts for the state matchers, from what doctor_collect gathered on one node.

    raw keys (all optional): meminfo (text of /proc/meminfo), swap_required (bool), sysctl ({name: value}),
    links ([{ifname, operstate, mtu, ipv4: [...]}]), ibdev2netdev (text), fabric_mtu (int),
    fix_files ([{name, expected, node_sha256, rank_sha256}]), listeners ([{port, process}]),
    ports ([int]), container ({running}), docker_group ({user, member}), disk ([{path, free_gib, min_gib}]),
    nccl_conf (text), gpu ({util, sm_clock, app_clock, power}), nccl_env ({NCCL_*: value}),
    ib_devices ([name]), args (the rank's argv), processes ([{pid, comm, argv, rss_kib}], processes.read_processes),
    compute_apps (text of `nvidia-smi --query-compute-apps=pid,process_name,used_memory`, processes.COMPUTE_APPS_ARGV),
    safetensors_headers ({file: "ok" or why its header does not parse}), logs (the rank's log).
    """
    facts = {}
    if raw.get("unreachable"):  # the connection error Ansible gave for the node: nothing else was read
        facts["node_unreachable"] = " ".join(str(raw["unreachable"]).split())
    meminfo = raw.get("meminfo")
    if meminfo:
        swap = _meminfo_kib(meminfo, "SwapTotal")
        if raw.get("swap_required") and swap == 0:
            facts["swap_missing"] = "SwapTotal 0 kB and the lane requires swap"
        facts["swap_total_kib"] = swap
        cma = _meminfo_kib(meminfo, "CmaTotal")
        if cma is not None:
            facts["cma_total_kib"] = cma
    sysctl = raw.get("sysctl") or {}
    if isinstance(sysctl, str):
        sysctl = parse_sysctl(sysctl)
    for name, value in sysctl.items():
        if _num(value) is not None:
            facts[name] = int(_num(value))
    # fabric: the RoCE netdevs that carry an IPv4 address are the ones the ranks use
    roce = _ibdev_netdevs(raw.get("ibdev2netdev"))
    down, mtu_bad = [], []
    for link in raw.get("links") or []:
        name = link.get("ifname")
        if name not in roce or not link.get("ipv4"):
            continue
        state = (link.get("operstate") or "").upper()
        if state != "UP" or roce[name] != "Up":
            down.append("%s is %s (ibdev2netdev: %s)" % (name, state or "?", roce[name]))
        want = raw.get("fabric_mtu")
        if want and link.get("mtu") and int(link["mtu"]) != int(want):
            mtu_bad.append("%s mtu %s, the lane wants %s" % (name, link["mtu"], want))
    if down:
        facts["fabric_link_down"] = "; ".join(down)
    if mtu_bad:
        facts["fabric_mtu_mismatch"] = "; ".join(mtu_bad)
    drift = []
    for f in raw.get("fix_files") or []:
        if not f.get("expected"):
            continue
        if f.get("node_sha256") != f["expected"]:
            drift.append("%s on the node: %s" % (f["name"], f.get("node_sha256") or "missing"))
        if f.get("rank_sha256") is not None and f["rank_sha256"] != f["expected"]:
            drift.append("%s inside the rank: %s" % (f["name"], f["rank_sha256"] or "missing"))
    if drift:
        facts["fix_file_drift"] = "; ".join(drift) + " (lane sha256 %s)" % raw["fix_files"][0]["expected"]
    headers = raw.get("safetensors_headers") or {}
    bad = [(f, e) for f, e in sorted(headers.items()) if e != "ok"]
    read_error = _HEADER_ERROR.search(raw.get("logs") or "")
    if bad:
        facts["weights_header_bad"] = "; ".join("%s: %s" % fe for fe in bad[:3]) + (
            " (and %d more)" % (len(bad) - 3) if len(bad) > 3 else "")
    elif headers and read_error:
        facts["safetensors_read_failed"] = "every one of the %d shard headers parses on this node%s; the engine: %s" % (
            len(headers), shard_at_failure(raw.get("logs"), list(headers)), read_error.group(0).strip())
    container = raw.get("container") or {}
    if not container.get("running"):
        taken = ["port %s held by %s" % (l["port"], l.get("process") or "?") for l in raw.get("listeners") or []
                 if l.get("port") in (raw.get("ports") or [])]
        if taken:
            facts["port_taken"] = "; ".join(taken)
    held = leftover_engines(raw)
    if held:
        mem = meminfo or ""
        avail, total = _meminfo_kib(mem, "MemAvailable"), _meminfo_kib(mem, "MemTotal")
        facts["engine_memory_held"] = "%s hold %.2f GiB with the rank stopped%s" % (
            processes.describe(held), processes.held_gib(held),
            "; MemAvailable %.2f of %.2f GiB" % (avail / 1048576.0, total / 1048576.0) if avail and total else "")
    group = raw.get("docker_group") or {}
    if group.get("user") and group.get("member") is False:
        facts["docker_group_missing"] = "%s is not in the docker group" % group["user"]
    full = ["%s has %.1f GiB free (needs %s)" % (d["path"], d["free_gib"], d["min_gib"])
            for d in raw.get("disk") or [] if d.get("free_gib") is not None and d["free_gib"] < d.get("min_gib", 0)]
    if full:
        facts["disk_nearly_full"] = "; ".join(full)
    conf = [l for l in split_lines(raw.get("nccl_conf")) if not l.lstrip().startswith("#")]
    if conf:
        facts["nccl_conf_in_container"] = "/etc/nccl.conf: " + ", ".join(conf)
    hca = (raw.get("nccl_env") or {}).get("NCCL_IB_HCA")
    if hca and raw.get("ib_devices"):
        extra = hca_prefix_extra(hca, raw["ib_devices"])
        if extra:
            facts["nccl_hca_prefix_extra"] = "NCCL_IB_HCA=%s also selects %s (write =%s)" % (
                hca, ", ".join(extra), hca.lstrip("^"))
    args = list(raw.get("args") or [])
    pin, mnbt = _arg(args, "--kv-cache-memory"), _num(_arg(args, "--max-num-batched-tokens"))
    if pin and mnbt and mnbt > 8192:
        facts["kv_pin_large_batch"] = "--kv-cache-memory=%s with --max-num-batched-tokens=%d (> 8192)" % (pin, mnbt)
    gpu = raw.get("gpu") or {}
    stuck = gpu_stuck_low_power(*(_num(gpu.get(k)) for k in ("util", "sm_clock", "app_clock", "power")))
    if stuck:
        facts["gpu_stuck_low_power"] = stuck
    return facts


def leftover_engines(raw):
    """Engine processes (processes.py, by name) on a node whose rank container is not running: an earlier group's
    leftovers, which hold the memory a relaunch needs (catalogue engine_memory_held). While the rank runs, the engine
    processes are its own and nothing is reported."""
    if (raw.get("container") or {}).get("running") or not raw.get("processes"):
        return []
    return processes.engine_processes(raw["processes"], processes.parse_compute_apps(raw.get("compute_apps")))


def gpu_stuck_low_power(util, sm_clock, app_clock, power, throttle_active=None):
    """The catalogue gpu_low_power rule (catalogue gpu_low_power): busy (> 90 %), SM clock under half the applications clock and
    under 30 W with no throttle reason is a GB10 stuck in a low-power state. Returns the fact's text or None.
    throttle_active: the clocks_throttle_reasons.active bitmask; a reason other than GpuIdle (0x1) means the
    driver throttles on purpose (thermal, power cap), which is not this state."""
    if None in (util, sm_clock, app_clock, power) or app_clock <= 0:
        return None
    if throttle_active and int(throttle_active) & ~0x1:
        return None
    if util > 90 and sm_clock < 0.5 * app_clock and power < 30:
        return "util %d %%, SM %d MHz of %d, %.1f W" % (util, sm_clock, app_clock, power)
    return None


def fleet_facts(raw_by_host, head):
    """Facts that need the other nodes: image against the head's, weights against the head's, the head
    gone while a worker runs, a KV pool below the peers'. Returns {host: {fact: value}}."""
    out = dict((h, {}) for h in raw_by_host)
    ref = raw_by_host.get(head) or {}
    ref_image = ref.get("image") or {}
    # the head's rank exists and stopped (absent during a bring-up, workers first, is not a failure)
    head_rank = ref.get("container") or {}
    head_stopped = bool(head_rank.get("exists")) and not head_rank.get("running")
    kv = {}
    for host, raw in raw_by_host.items():
        facts = out[host]
        img = raw.get("image") or {}
        if host != head and ref_image:
            diffs = []
            # layers (content digests) survive docker save/load; image IDs are not compared across nodes
            for key, what in (("layers", "the lane's image tag"), ("running_layers", "the running rank's image")):
                mine, theirs = img.get(key), ref_image.get(key)
                if mine and theirs and mine != theirs:
                    extra = [l for l in mine if l not in theirs]
                    diffs.append("%s: layers differ from the head's (%d not on the head%s)" % (
                        what, len(extra), ", e.g. %s" % extra[0][:19] if extra else ""))
            for path, digest in sorted((img.get("files") or {}).items()):
                if (ref_image.get("files") or {}).get(path) not in (None, digest):
                    diffs.append("file %s differs from the head's" % path)
            if diffs:
                facts["image_differs"] = "; ".join(diffs)
        if host != head and ref.get("weights"):
            bad = []
            for path, size in sorted(ref["weights"].items()):
                mine = (raw.get("weights") or {}).get(path)
                if mine != size:
                    bad.append("%s is %s bytes, the head's %s" % (path, "missing" if mine is None else mine, size))
            if bad:
                facts["weights_mismatch"] = "; ".join(bad[:3])
        if host != head and head_stopped and (raw.get("container") or {}).get("running"):
            facts["head_down_worker_up"] = "the head's rank is not running while this worker's is"
        m = re.findall(r"Available KV cache memory: ([\d.]+) GiB", raw.get("logs") or "")
        if m:
            kv[host] = float(m[-1])
    if len(kv) > 1:
        top = max(kv.values())
        for host, value in kv.items():
            if value < 0.9 * top:
                out[host]["kv_pool_below_peers"] = "%.2f GiB here, %.2f GiB on a peer" % (value, top)
    return out


# ------------------------------------------------------------------------------ reports

def last_lines(text, n=20):
    return split_lines(text)[-n:]


def host_verdict(host, evidence, unreachable=None, connection=True):
    """{host, status: unreachable|healthy|failed|unknown|absent, matches, past, last_lines} for one host.

    unreachable: why nothing was collected; with connection (Ansible's connection error) the catalogue's
    node_unreachable entry is matched and its fix given, without it (the collection itself failed) nothing is.

    evidence["logs"] is the log the status is judged by; evidence["past_logs"] (doctor_collect: the saved logs
    of earlier containers) gives `past`, the matches of incidents before this container."""
    if unreachable:
        return {"host": host, "status": "unreachable", "past": [], "last_lines": [], "reason": unreachable,
                "matches": diagnose({"facts": node_facts({"unreachable": unreachable})}) if connection else []}
    matches = diagnose(evidence)
    container = evidence.get("container") or {}
    if matches:
        status = "failed"
    elif container.get("exists") is False:
        status = "absent"
    elif container and not container.get("running"):
        status = "unknown"
    else:
        status = "healthy"
    # saved logs of containers before this rank: their matches are history, never this rank's status
    past = diagnose({"logs": evidence["past_logs"]}) if evidence.get("past_logs") else []
    return {"host": host, "status": status, "matches": matches, "past": past,
            "last_lines": last_lines(evidence.get("logs")) if status == "unknown" else []}


def format_match(host, m):
    return "%s: %s \u2014 %s \u2014 %s \u2014 catalogue: %s" % (host, m["cause"], m["evidence"], m["fix"], m["id"])


def format_past(v):
    """One line naming the past incidents of a host (the saved logs of containers before its rank), or []."""
    if not v.get("past"):
        return []
    return ["%s: past incidents in the saved logs of earlier containers (not this rank's state): %s"
            % (v["host"], ", ".join(m["id"] for m in v["past"]))]


def format_verdict(v):
    if v["status"] == "unreachable":
        return ["%s: unreachable \u2014 %s" % (v["host"], v.get("reason") or "no connection")] + [
            format_match(v["host"], m) for m in v.get("matches") or []]
    if v["status"] == "healthy":
        return ["%s: healthy \u2014 no catalogue entry matches" % v["host"]] + format_past(v)
    if v["status"] == "absent":
        return ["%s: no rank container on this node and no catalogue entry matches (not started yet, or "
                "removed: site.yml starts the group)" % v["host"]]
    if v["status"] == "unknown":
        return (["%s: unknown \u2014 the rank stopped and no catalogue entry matches; last lines:" % v["host"]]
                + ["  " + line for line in v["last_lines"]])
    return ["%d. %s" % (i + 1, format_match(v["host"], m)) for i, m in enumerate(v["matches"])] + format_past(v)


def explain(logs, container=None, kernel="", journal=""):
    """One line naming the best-ranked catalogue entry for a stopped rank, for module failure messages:
    'cause - evidence line - fix - catalogue: id', or '' when nothing matches. Hang signatures excluded."""
    ev = {"logs": logs, "kernel": kernel, "journal": journal}
    if container:
        ev["container"] = dict(container, exists=True)
    matches = diagnose(ev, exclude_classes=("hang",))
    if not matches:
        return ""
    m = matches[0]
    return "%s \u2014 %s \u2014 %s \u2014 catalogue: %s" % (m["cause"], m["evidence"], m["fix"], m["id"])
