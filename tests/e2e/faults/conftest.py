"""Fault injection on the simulated fleet (issue 11): fixtures and helpers.

The inventory comes from DGXSPARK_FAULTS_INVENTORY (default inventories/sim/hosts.yml, the fleet
tests/e2e/test_demo_tp2.py deploys). When that fleet does not serve, the `fleet` fixture deploys it
(sim_up + site.yml). Playbooks run through ansible-runner; evidence is read from each node's own
dockerd (`docker exec <node> docker ...`) and from the runner's events. Each scenario writes
reports/faults/<scenario>.json with its "detected in" seconds (reported, never asserted).

This directory has no __init__.py, so pytest imports this file as `conftest` too: it re-exports the
helpers of tests/e2e/conftest.py, and `from conftest import ...` works from either directory.
"""
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error

import ansible_runner
import pytest
import yaml

_E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conftest.py")
_spec = importlib.util.spec_from_file_location("dgxspark_e2e_helpers", _E2E)
_e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e)

# Every helper of tests/e2e/conftest.py (not its fixtures), for `from conftest import ...` in either directory.
globals().update(dict((k, v) for k, v in vars(_e2e).items()
                      if not k.startswith("_") and callable(v) and getattr(v, "__module__", "") == _e2e.__name__
                      and not hasattr(v, "_pytestfixturefunction") and not hasattr(v, "_fixture_function_marker")))
ROOT = _e2e.ROOT
runner_output = _e2e.runner_output
total = _e2e.total
node_docker = _e2e.node_docker
http_json = _e2e.http_json

INVENTORY = os.environ.get("DGXSPARK_FAULTS_INVENTORY", "inventories/sim/hosts.yml")
REPORT_DIR = os.path.join(ROOT, "reports", "faults")
# Fault runs gate on vllm_health (smoke chat, canary, /metrics); the benchmark adds a minute per run and
# proves nothing about a fault, so it is skipped.
SKIP_BENCH = ["--skip-tags", "vllm_bench"]


# ------------------------------------------------------------------------------------------ playbooks

def _parse_created(stamp):
    t = datetime.datetime.fromisoformat(stamp)
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.timestamp()


def _text(value):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    return json.dumps(value, sort_keys=True)


class Run(object):
    """A finished playbook run: rc, stats, stdout, events (each with its epoch time `t`)."""

    def __init__(self, runner, t0, t1):
        self.runner = runner
        self.rc = runner.rc
        self.status = runner.status
        self.stats = runner.stats or {}
        self.t0, self.t1 = t0, t1
        self.output = runner_output(runner)
        self.events = []
        for ev in runner.events:
            ev = dict(ev)
            ev["t"] = _parse_created(ev["created"]) if ev.get("created") else None
            self.events.append(ev)

    @property
    def seconds(self):
        return round(self.t1 - self.t0, 1)

    def task_events(self, kinds, task=None, host=None):
        out = []
        for ev in self.events:
            if ev.get("event") not in kinds:
                continue
            data = ev.get("event_data") or {}
            if task and task not in (data.get("task") or ""):
                continue
            if host and data.get("host") != host:
                continue
            if data.get("ignore_errors"):
                continue
            out.append(ev)
        return out

    def failures(self):
        """Failed or unreachable task results (not looped items), first first."""
        return self.task_events(("runner_on_failed", "runner_on_unreachable"))

    def first_failure(self):
        found = self.failures()
        assert found, "expected a failed task; rc=%s\n%s" % (self.rc, self.output[-4000:])
        return found[0]

    def changed(self, task=None, host=None):
        return [ev for ev in self.task_events(("runner_on_ok",), task, host)
                if (ev["event_data"].get("res") or {}).get("changed")]

    def ok(self, task=None, host=None):
        return self.task_events(("runner_on_ok",), task, host)

    def since_start(self, ev):
        return round(ev["t"] - self.t0, 1)


def failure_message(ev):
    """The message of a failed result, with the messages of its failed loop items."""
    res = (ev.get("event_data") or {}).get("res") or {}
    parts = [_text(res.get("msg"))]
    for item in res.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            parts.append(_text(item.get("msg")))
    return " | ".join(p for p in parts if p)


def failed_hosts(run):
    return sorted(set(ev["event_data"]["host"] for ev in run.failures()))


def start_playbook(playbook, tmp_dir, extravars=None, cmdline=(), verbosity=None, wait=True):
    """Run (or start, wait=False) a playbook from the checkout on the fault inventory.

    Each run gets its own SSH control directory: a master connection kept alive (ControlPersist) by an
    earlier run would hide a node whose sshd was stopped, or a deploy user whose groups changed.
    Returns a Run, or (thread, runner, t0) when wait is False.
    """
    cp_dir = tempfile.mkdtemp(prefix="flt-cp-")
    os.makedirs(str(tmp_dir), exist_ok=True)
    kwargs = dict(
        private_data_dir=str(tmp_dir),
        project_dir=ROOT,
        playbook=os.path.join(ROOT, playbook),
        inventory=os.path.join(ROOT, INVENTORY),
        # The watchdog (test_45_watchdog.py) would repair the other scenarios' faults behind their backs:
        # off unless a test turns it on.
        extravars=dict({"vllm_watchdog_enabled": False}, **(extravars or {})),
        cmdline=" ".join(cmdline) or None,
        envvars={"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_SSH_CONTROL_PATH_DIR": cp_dir},
        quiet=True,
    )
    if verbosity:
        kwargs["verbosity"] = verbosity
    t0 = time.time()
    if not wait:
        thread, runner = ansible_runner.run_async(**kwargs)
        return thread, runner, t0
    runner = ansible_runner.run(**kwargs)
    shutil.rmtree(cp_dir, ignore_errors=True)
    return Run(runner, t0, time.time())


def finish(thread, runner, t0, timeout=3600):
    thread.join(timeout)
    assert not thread.is_alive(), "the playbook did not finish within %s s" % timeout
    return Run(runner, t0, time.time())


def playbook_pids(inventory_path):
    """ansible-playbook processes started by this test process (ansible-runner's child) on the inventory."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                text = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and "ansible-playbook" in text and inventory_path in text:
            pids.append(int(entry))
    return sorted(pids)


def interrupt(pid):
    """Ctrl-C: SIGINT to the process group of ansible-playbook (its workers included)."""
    os.killpg(os.getpgid(pid), signal.SIGINT)


# ------------------------------------------------------------------------------------------ nodes

def node_sh(node, script, check=True, timeout=120):
    proc = subprocess.run(["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, "%s: %s -> rc %s: %s" % (node, script, proc.returncode, proc.stderr)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def set_gpu(fleet, node, **fields):
    """What the node's nvidia-smi stand-in reports (/run/sim/gpu.json; utilization_gpu -> utilization.gpu);
    no fields: its idle defaults again."""
    data = json.dumps(dict((k.replace("_", "."), v) for k, v in fields.items()))
    node_sh(node, "mkdir -p /run/sim && echo '%s' > /run/sim/gpu.json" % data if fields else "rm -f /run/sim/gpu.json")


def rank_state(node, name):
    """The rank container on one node, from that node's dockerd."""
    rc, out, err = node_docker(node, "inspect", "-f",
                               "{{.Id}}|{{.State.Status}}|{{.State.Running}}|{{.State.StartedAt}}|"
                               "{{.State.ExitCode}}|{{.HostConfig.Privileged}}", name)
    if rc != 0:
        assert "No such" in err or "no such" in err, "%s: %s" % (node, err)
        return {"exists": False, "running": False, "status": "absent"}
    cid, status, running, started, code, priv = out.split("|")
    return {"exists": True, "id": cid[:12], "status": status, "running": running == "true",
            "started_at": started, "started": docker_epoch(started), "exit_code": int(code),
            "privileged": priv == "true"}


def docker_epoch(stamp):
    """RFC 3339 with nanoseconds (docker) -> epoch seconds."""
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        head, frac = stamp.split(".")
        stamp = "%s.%s" % (head, frac[:6])
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()


def file_snapshot(node, paths):
    """{path: 'size mtime'} of every file under the given paths on a node (absent paths are skipped)."""
    script = "for p in %s; do [ -e \"$p\" ] && find \"$p\" -type f -printf '%%p %%s %%T@\\n'; done; true" % (
        " ".join("'%s'" % p for p in paths))
    _rc, out, _err = node_sh(node, script)
    snap = {}
    for line in out.splitlines():
        path, size, mtime = line.rsplit(" ", 2)
        snap[path] = "%s %s" % (size, mtime)
    return snap


# ------------------------------------------------------------------------------------------ fleet

class Fleet(object):
    def __init__(self, inventory):
        with open(os.path.join(ROOT, inventory)) as f:
            inv = yaml.safe_load(f)
        cluster = inv["spark_cluster"] if "spark_cluster" in inv else inv["all"]["children"]["spark_cluster"]
        groups = cluster["children"]
        (self.head,) = groups["vllm_head"]["hosts"]
        self.workers = sorted(groups["vllm_workers"]["hosts"])
        self.worker = self.workers[0]
        self.nodes = [self.head] + self.workers
        hosts = list(groups["vllm_head"]["hosts"].items()) + list(groups["vllm_workers"]["hosts"].items())
        self.address = dict((h, v["ansible_host"]) for h, v in hosts)
        # inventory rank of each host (vllm_rank; the head is 0)
        self.rank = dict((h, int(v.get("vllm_rank", 0))) for h, v in hosts)
        inv_dir = os.path.dirname(os.path.join(ROOT, inventory))
        with open(os.path.join(inv_dir, "group_vars", "spark_cluster", "fleet.yml")) as f:
            group_vars = yaml.safe_load(f)
        self.group_vars = group_vars
        with open(os.path.join(ROOT, "lanes", group_vars["vllm_lane"] + ".yml")) as f:
            self.lane = yaml.safe_load(f)
        self.container = self.lane["container"]["name"]
        self.api_port = self.lane["serve"]["api_port"]
        self.master_port = self.lane["serve"]["master_port"]
        self.base_url = "http://%s:%s" % (self.address[self.head], self.api_port)
        self.model = self.lane["checkpoint"]["served_model_name"]
        self.checkpoint = self.lane["checkpoint"]["host_path"]
        self.fix_dir = "/var/lib/dgxspark-vllm/fixes"
        self.fix_files = self.lane.get("fix_files") or []
        self.rank_log_dir = "/var/log/dgxspark-vllm"

    def ranks(self):
        return dict((n, rank_state(n, self.container)) for n in self.nodes)

    def health(self, timeout=10):
        try:
            status, _body = http_json(self.base_url + "/health", timeout=timeout)
            return status
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def serving(self):
        ranks = self.ranks()
        return all(r["running"] for r in ranks.values()) and self.health() == 200

    def chat(self):
        status, body = http_json(self.base_url + "/v1/chat/completions", {
            "model": self.model, "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0}, timeout=300)
        assert status == 200, body
        assert body["usage"]["completion_tokens"] > 0, body
        return body

    def snapshot(self):
        """Files the roles would change, per node: fix files, the checkpoint, the saved rank logs."""
        return dict((n, file_snapshot(n, [self.fix_dir, self.checkpoint, self.rank_log_dir])) for n in self.nodes)


def assert_serving(fleet):
    ranks = fleet.ranks()
    assert all(r["running"] for r in ranks.values()), ranks
    assert fleet.health() == 200
    fleet.chat()
    return ranks


def assert_untouched(before, after):
    """Same container, same start, still running, on every node: the group was left alone."""
    for node, was in before.items():
        now = after[node]
        assert now["exists"] and now["running"], (node, now)
        assert (now["id"], now["started_at"]) == (was["id"], was["started_at"]), (node, was, now)


def state_summary(ranks):
    """{node: 'running since <start>' | 'exited' | 'absent'} for the reports."""
    out = {}
    for node, r in ranks.items():
        out[node] = "running since %s" % r["started_at"][:19] if r["running"] else r["status"]
    return out


def record(scenario, **fields):
    """reports/faults/<scenario>.json (speed is reported here, never asserted)."""
    os.makedirs(REPORT_DIR, exist_ok=True)
    data = {"scenario": scenario, "inventory": INVENTORY,
            "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    data.update(fields)
    with open(os.path.join(REPORT_DIR, scenario + ".json"), "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    return data


def _serving(f):
    try:
        return f.serving()
    except (subprocess.SubprocessError, AssertionError, ValueError):
        return False


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """The fleet of DGXSPARK_FAULTS_INVENTORY, serving: deployed here (sim_up + site.yml) when it does not."""
    f = Fleet(INVENTORY)
    if not _serving(f):
        up = start_playbook("playbooks/sim_up.yml", tmp_path_factory.mktemp("sim_up"))
        assert up.rc == 0, up.output[-4000:]
        site = start_playbook("site.yml", tmp_path_factory.mktemp("site_deploy"), cmdline=SKIP_BENCH,
                              extravars={"vllm_ranks_reset_deaths": True})  # deaths a previous run caused on purpose
        assert site.rc == 0, site.output[-4000:]
    assert f.serving(), "the fleet of %s does not serve after deploying it" % INVENTORY
    # The watchdog is on by default and `make e2e` leaves it running on this fleet: it would repair the
    # scenarios' faults behind their backs. Stopped here, once; every run below passes it off (start_playbook).
    stop = start_playbook("playbooks/watchdog.yml", tmp_path_factory.mktemp("watchdog_stop"),
                          extravars={"vllm_watchdog_action": "stop"})
    assert stop.rc == 0, stop.output[-4000:]
    return f


def ensure_serving(fleet, tmp_dir):
    """Repair a fleet an earlier scenario left half-way with one site.yml run (no-op when it serves)."""
    if not _serving(fleet):
        # the deaths the scenarios caused on purpose are explained: reset the crash-loop guard's count (documented fix)
        site = start_playbook("site.yml", tmp_dir, cmdline=SKIP_BENCH, extravars={"vllm_ranks_reset_deaths": True})
        assert site.rc == 0, site.output[-4000:]
        assert fleet.serving()
    return fleet


# ------------------------------------------------------------------------------------------ the watchdog

WATCHDOG_STATE_DIR = "/var/lib/dgxspark-vllm-watchdog"
WATCHDOG_SERVICE = "dgxspark-vllm-watchdog"
# Short cycles for the scenarios (test_45_watchdog.py, and the API-key lane in test_30_security.py): 3 s cycle,
# 10 s window, two cycles to confirm.
WATCHDOG_FAST = {"vllm_watchdog_enabled": True, "vllm_watchdog_interval_s": 3, "vllm_watchdog_window_s": 10,
                 "vllm_watchdog_confirm_cycles": 2, "vllm_watchdog_health_gate_timeout_s": 900,
                 "vllm_watchdog_boot_wait_s": 600, "vllm_watchdog_canary_timeout_s": 30,
                 "vllm_watchdog_restart_cooldown_s": 10, "vllm_watchdog_min_uptime_s": 0}


def watchdog_state(fleet):
    """The watchdog's state file on the head; {} until its first cycle has written it."""
    rc, out, _err = node_sh(fleet.head, "cat %s/state.json" % WATCHDOG_STATE_DIR, check=False)
    return json.loads(out) if rc == 0 else {}


def watchdog_journal(fleet, since):
    """The watchdog's journal lines on the head since an epoch time, as (epoch, message)."""
    _rc, out, _err = node_sh(fleet.head, "journalctl -u %s -o short-unix --no-pager --since @%d"
                             % (WATCHDOG_SERVICE, int(since) - 1), timeout=60)
    lines = []
    for ln in out.splitlines():
        parts = ln.split(" ", 2)
        try:
            lines.append((float(parts[0]), parts[2].split(": ", 1)[-1]))
        except (ValueError, IndexError):
            continue
    return [(t, m) for t, m in lines if t >= since]


def assert_watchdog_left_alone(fleet, seconds, min_cycles):
    """Watch the running watchdog for `seconds`: at least `min_cycles` verdicts, every one without action and
    with an answered canary, no restart, the same rank containers. Returns the verdict lines."""
    before = fleet.ranks()
    t0 = time.time()
    time.sleep(seconds)
    lines = watchdog_journal(fleet, t0)
    verdicts = [m for _t, m in lines if m.startswith("verdict=")]
    assert len(verdicts) >= min_cycles, lines
    assert all("action=none" in m for m in verdicts), verdicts
    assert all(m.split()[0] in ("verdict=idle", "verdict=progressing", "verdict=unknown") for m in verdicts), verdicts
    assert all("canary=canary answered" in m for m in verdicts), verdicts
    assert not [m for _t, m in lines if "action=restart_group" in m], lines
    assert_untouched(before, fleet.ranks())
    return verdicts


@pytest.fixture
def serving(fleet, tmp_path_factory):
    """A serving fleet for a scenario that needs one, so one failed scenario does not fail every one after it."""
    return ensure_serving(fleet, tmp_path_factory.mktemp("site_repair"))
