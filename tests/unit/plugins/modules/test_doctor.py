"""doctor_collect helpers and doctor_report (the controller side of playbooks/doctor.yml).

The fleet run (tests/e2e/faults/test_50_doctor.py) exercises the collector on real nodes; here the
report is built from captured evidence and checked for verdict lines, tarball members and secrets.
"""
import json
import os
import struct
import tarfile

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import doctor_collect as DC
from ansible_collections.dgxspark.vllm.plugins.modules import doctor_report as DR
from tests.unit.conftest import read_fixture
from tests.unit.plugins.modules.utils import run_module

OOM = read_fixture("doctor", "kernel", "cgroup-oom-kill.iso.log")
CID = "672bcb1bc4438bdad3333c0e160b81185da1aca883403460c299ff0b97968f24"


def test_secrets_are_redacted_from_env_and_args():
    env = DC.redact_env(["HF_TOKEN=hf_abcdef", "VLLM_API_KEY=k-123", "NCCL_IB_HCA==rocep1s0f1", "PATH=/usr/bin"])
    assert env == ["HF_TOKEN=<redacted>", "VLLM_API_KEY=<redacted>", "NCCL_IB_HCA==rocep1s0f1", "PATH=/usr/bin"]
    assert DC.redact_args(["serve", "--api-key", "s3cret", "--port", "8000", "--api-key=other"]) == [
        "serve", "--api-key", "<redacted>", "--port", "8000", "--api-key=<redacted>"]


def test_kernel_lines_keep_only_this_ranks_oom_kill():
    since = DC.parse_time("2026-12-01T12:50:00Z")
    ours = DC.kernel_since(OOM, since, CID)
    assert "Killed process 31138 (sh)" in ours and "oom-kill:" in ours
    # another container's kill on the same kernel (the simulated nodes share it) is dropped
    assert DC.kernel_since(OOM, since, "0123456789ab") == ""
    # and so is anything before the rank started
    assert DC.kernel_since(OOM, DC.parse_time("2026-12-01T13:00:00Z"), CID) == ""


def _collected(container, logs="", raw=None, files=None):
    base = {"container": container, "links": [], "ibdev2netdev": "", "fix_files": [], "weights": {}}
    base.update(raw or {})
    return {"changed": False, "raw": base, "files": files or {"container-log.txt": logs},
            "evidence": {"logs": logs, "kernel": "", "journal": "", "container": container}}


def test_report_names_cause_per_host_unreachable_and_healthy(tmp_path):
    killed = json.loads(read_fixture("health", "sim-cpu", "rank1-killed.state.json"))
    results = {
        "node-a": _collected({"exists": True, "running": True, "exit_code": 0, "oom_killed": False},
                             logs=read_fixture("health", "sim-cpu", "tp1-ready.log")),
        "node-b": _collected({"exists": True, "running": False, "exit_code": killed["ExitCode"],
                              "oom_killed": killed["OOMKilled"]}, logs=read_fixture("health", "sim-cpu", "rank1-killed.log")),
        "node-c": {"unreachable": True, "msg": "Failed to connect to the host via ssh: port 22: Connection refused"},
    }
    res, failed = run_module(DR.main, {"results": results, "head": "node-a", "dest": str(tmp_path),
                                       "stamp": "20261201T120000Z", "redact": ["s3cret-key"]})
    assert not failed, res
    v = res["verdicts"]
    assert v["node-a"]["status"] == "healthy"
    assert v["node-b"]["status"] == "failed" and v["node-b"]["matches"][0]["id"] == "rank_killed"
    assert v["node-c"]["status"] == "unreachable"
    line = [l for l in res["lines"] if l.startswith("1. node-b: ")][0]
    assert line.endswith("catalogue: rank_killed")
    assert "container exited: exit code 137, OOMKilled False" in line
    # an unreachable node gets the catalogue's fix (node_unreachable); a failed collection does not (next test)
    assert v["node-c"]["matches"][0]["id"] == "node_unreachable"
    assert res["lines"][-2] == ("node-c: unreachable \u2014 Failed to connect to the host via ssh: port 22: Connection "
                                "refused")
    assert res["lines"][-1].startswith("node-c: Ansible could not open an SSH session to the node")
    assert "ansible.builtin.ping` must answer pong" in res["lines"][-1]
    assert res["lines"][-1].endswith("catalogue: node_unreachable")
    with tarfile.open(res["tarball"]) as tar:
        names = tar.getnames()
    assert "doctor-20261201T120000Z/doctor.md" in names
    assert "doctor-20261201T120000Z/node-b/container-log.txt" in names
    assert "doctor-20261201T120000Z/node-b/verdict.json" in names
    assert os.path.dirname(res["summary"]) == os.path.dirname(res["tarball"])
    with open(res["summary"]) as f:
        md = f.read()
    assert "## node-b: failed" in md and "| 1 | rank_killed |" in md and "## node-c: unreachable" in md


def test_stopped_rank_without_a_match_is_unknown_with_last_lines(tmp_path):
    results = {"node-a": _collected({"exists": True, "running": False, "exit_code": 3, "oom_killed": False},
                                    logs="INFO starting\nINFO loading the model\n")}
    res, failed = run_module(DR.main, {"results": results, "head": "node-a", "dest": str(tmp_path)})
    assert not failed
    assert res["verdicts"]["node-a"]["status"] == "unknown"
    assert res["lines"][0].startswith("node-a: unknown") and res["lines"][-1] == "  INFO loading the model"


def test_report_refuses_to_write_a_secret(tmp_path):
    results = {"node-a": _collected({"exists": True, "running": True}, logs="token hf_leaked_value here\n")}
    res, failed = run_module(DR.main, {"results": results, "head": "node-a", "dest": str(tmp_path),
                                       "redact": ["hf_leaked_value"]})
    assert failed and "contains a secret" in res["msg"]
    assert not os.listdir(str(tmp_path))


SIM = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "doctor", "sim")
SIM_CASES = sorted(n[:-len(".json")] for n in os.listdir(SIM) if n.endswith(".json")) if os.path.isdir(SIM) else []


def _sim(name):
    import yaml
    with open(os.path.join(SIM, name + ".json")) as f:
        cap = json.load(f)
    with open(os.path.join(SIM, name + ".expected.yaml")) as f:
        exp = yaml.safe_load(f)
    return cap, exp


@pytest.mark.parametrize("name", SIM_CASES)
def test_simulated_fleet_captures_name_the_right_cause_first(name):
    """Node evidence doctor_collect gathered on the simulated fleet after each fault (test_50_doctor.py)."""
    cap, exp = _sim(name)
    verdicts = DR.verdicts_for(cap["hosts"], exp["head"])
    for host, want in exp["hosts"].items():
        v = verdicts[host]
        got = v["matches"][0]["id"] if v["matches"] else v["status"]
        assert got == want["top"], (host, [m["id"] for m in v["matches"]], v["status"])


class _Node(object):
    """A node for doctor_collect.collect: the docker CLI answers from captures, every other tool is absent."""

    def __init__(self, tmp_path, answers):
        self.answers, self.calls = answers, []
        self.params = {"container_name": "vllm_rank", "log_dir": str(tmp_path / "logs"), "saved_logs": 3,
                       "log_lines": 50, "ports": [8000], "fabric_mtu": 9000, "fix_files": [], "weights_dir": None,
                       "swap_required": False, "docker_user": "", "disk": [], "watchdog_dirs": [],
                       "kernel_margin_s": 300, "redact": [], "image": "vllm-cpu:sim", "docker_bin": "docker",
                       "proc_root": str(tmp_path / "no-proc")}

    def get_bin_path(self, name):
        return "/usr/bin/docker" if name == "docker" else None

    def run_command(self, argv, check_rc=False):
        self.calls.append(argv)
        for prefix, answer in self.answers:
            if argv[1:1 + len(prefix)] == prefix:
                return answer
        return 1, "", "unexpected call"


def test_collect_reads_docker_through_docker_cli(tmp_path):
    """The collector's docker calls go through module_utils/docker_cli (argv lists): an absent rank container
    is 'exists: false' (docker's 'No such object'), the lane's image is parsed from a captured inspect."""
    image_json = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    layers = json.loads(image_json)[0]["RootFS"]["Layers"]
    node = _Node(tmp_path, [
        (["inspect", "--type", "container", "vllm_rank"], (1, "[]", "Error: No such object: vllm_rank")),
        (["image", "inspect", "vllm-cpu:sim"], (0, image_json, "")),
    ])
    out = DC.collect(node)
    assert out["raw"]["container"] == {"exists": False}
    assert out["raw"]["image"]["layers"] == layers and out["raw"]["image"]["reference"] == "vllm-cpu:sim"
    assert out["files"]["docker-inspect.json"].startswith("$ docker inspect --type container vllm_rank\n[rc 1]")
    assert out["files"]["image-inspect-reference.json"].startswith("$ docker image inspect vllm-cpu:sim\n[rc 0]")
    assert ["/usr/bin/docker", "image", "inspect", "vllm-cpu:sim"] in node.calls
    # a tool the node lacks is evidence, not a failure
    assert "command not found" in out["files"]["nvidia-smi.txt"]


def test_collect_files_a_docker_failure_and_goes_on(tmp_path):
    """dockerd not answering: the error docker_cli names is filed, the container counts as unreadable."""
    node = _Node(tmp_path, [(["inspect"], (1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"))])
    out = DC.collect(node)
    error = out["raw"]["container"]["error"]
    assert out["raw"]["container"]["exists"] is None
    assert error.startswith("docker inspect container vllm_rank failed (rc 1): Cannot connect to the Docker daemon")
    assert error in out["files"]["docker-inspect.json"]
    # not called absent (that reads "not started yet"): the stopped-rank verdict with no match, unknown
    assert DR.D.host_verdict("n", out["evidence"])["status"] == "unknown"


def _running_inspect():
    """A captured rank inspect (tests/fixtures/docker), renamed to vllm_rank and marked running since 12:50."""
    info = json.loads(read_fixture("docker", "inspect-rank-with-infiniband.json"))
    info = info[0] if isinstance(info, list) else info
    info["Name"] = "/vllm_rank"
    info["State"].update({"Status": "running", "Running": True, "Pid": 4242, "StartedAt": "2026-12-01T12:50:00Z"})
    return info


def _node_with_saved_log(tmp_path, running):
    info = _running_inspect()
    if not running:
        info["State"].update({"Status": "exited", "Running": False, "Pid": 0, "ExitCode": 1,
                              "FinishedAt": "2026-12-01T12:55:00Z"})
    (tmp_path / "logs").mkdir()
    past = read_fixture("health", "vllm-logs", "errors", "nccl-unhandled-system-error.log")
    (tmp_path / "logs" / "vllm_rank-20261201T124000Z.log").write_text(past)
    current = read_fixture("health", "sim-cpu", "tp1-ready.log")
    return _Node(tmp_path, [(["inspect", "--type", "container", "vllm_rank"], (0, json.dumps([info]), "")),
                            (["logs"], (0, current, ""))])


def test_running_rank_is_judged_by_its_own_log_and_saved_logs_are_past_incidents(tmp_path):
    """After a watchdog restart the head runs and serves, while the log saved from the group before it shows the
    cascade: the rank is healthy and the saved log's matches are reported as past incidents."""
    out = DC.collect(_node_with_saved_log(tmp_path, running=True))
    assert "Application startup complete" in out["evidence"]["logs"]
    assert "unhandled system error" in out["evidence"]["past_logs"]
    assert "unhandled system error" not in out["evidence"]["logs"]
    verdict = DR.D.host_verdict("node-a", out["evidence"])
    assert verdict["status"] == "healthy" and verdict["matches"] == []
    assert [m["id"] for m in verdict["past"]] == ["nccl_error", "engine_dead"]
    assert DR.D.format_verdict(verdict) == [
        "node-a: healthy \u2014 no catalogue entry matches",
        "node-a: past incidents in the saved logs of earlier containers (not this rank's state): nccl_error, engine_dead"]
    md = DR.summary_md({"node-a": verdict}, "20261201T130000Z", "doctor-20261201T130000Z.tar.gz")
    assert "## node-a: healthy" in md and "past incidents" in md


def test_stopped_rank_is_judged_by_its_own_log_not_by_older_saved_logs(tmp_path):
    """A stopped rank container: its own log and exit decide; a saved log is of a container before it (logs are
    saved on removal), so its matches stay past incidents."""
    out = DC.collect(_node_with_saved_log(tmp_path, running=False))
    assert "unhandled system error" in out["evidence"]["past_logs"]
    assert "unhandled system error" not in out["evidence"]["logs"]
    verdict = DR.D.host_verdict("node-a", out["evidence"])
    assert verdict["status"] == "unknown" and verdict["matches"] == [], verdict
    assert [m["id"] for m in verdict["past"]] == ["nccl_error", "engine_dead"]


def test_without_a_container_the_newest_saved_log_is_the_evidence(tmp_path):
    """No rank container (removed after its logs were saved): the newest saved log is the last rank's."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "vllm_rank-20261201T110000Z.log").write_text(
        read_fixture("health", "vllm-logs", "errors", "kv-cache-needed-exceeds-available.log"))
    (tmp_path / "logs" / "vllm_rank-20261201T124000Z.log").write_text(
        read_fixture("health", "vllm-logs", "errors", "nccl-unhandled-system-error.log"))
    node = _Node(tmp_path, [(["inspect", "--type", "container", "vllm_rank"], (1, "[]", "Error: No such object: vllm_rank"))])
    out = DC.collect(node)
    verdict = DR.D.host_verdict("node-a", out["evidence"])
    assert verdict["status"] == "failed" and verdict["matches"][0]["id"] == "nccl_error", verdict["matches"]
    assert [m["id"] for m in verdict["past"]] == ["kv_cache_too_small", "engine_dead"]


def test_collect_names_a_leftover_engine_and_the_report_frees_it(tmp_path):
    """The rank stopped after vLLM refused free memory; its old group's EngineCore and Worker_TP1 still run beside a
    tail -F, an exporter, a grep and the agent (a `ps` capture laid out as /proc; nvidia-smi's per-process figures).
    doctor names both holders with PID and GiB under engine_memory_held, not free_memory_refused."""
    from tests.unit.captures import proc_tree_from_ps
    proc_tree_from_ps(read_fixture("node", "ps-leftover-engine-after-relaunch.txt"), tmp_path / "proc")
    info = _running_inspect()
    info["State"].update({"Status": "exited", "Running": False, "Pid": 0, "ExitCode": 1})
    refusal = ("ValueError: Free memory on device cuda:0 (58.41/121.69 GiB) on startup is less than desired GPU "
               "memory utilization (0.87, 105.87 GiB)\n")
    node = _Node(tmp_path, [(["inspect", "--type", "container", "vllm_rank"], (0, json.dumps([info]), "")),
                            (["logs"], (0, refusal, ""))])
    node.params["proc_root"] = str(tmp_path / "proc")
    apps = read_fixture("node", "nvidia-smi-compute-apps-leftover.csv")
    node.get_bin_path = lambda name: "/usr/bin/" + name if name in ("docker", "nvidia-smi") else None
    node.answers.append((["--query-compute-apps=pid,process_name,used_memory"], (0, apps, "")))
    out = DC.collect(node)
    seen = [(p["pid"], p["comm"]) for p in out["raw"]["processes"]]
    assert seen == [(4242, "VLLM::EngineCor"), (4301, "VLLM::Worker_TP")]
    assert "4242, VLLM::EngineCore, 61383" in out["files"]["nvidia-smi-compute-apps.csv"]
    res, failed = run_module(DR.main, {"results": {"node-b": dict(out, changed=False)}, "head": "node-b",
                                       "dest": str(tmp_path / "out"), "stamp": "20261203T101500Z", "redact": []})
    assert not failed, res
    top = res["verdicts"]["node-b"]["matches"][0]
    assert top["id"] == "engine_memory_held"
    assert top["evidence"].startswith("engine_memory_held: VLLM::EngineCore pid 4242 (59.94 GiB), VLLM::Worker_TP1 "
                                      "pid 4301 (0.52 GiB) hold 60.46 GiB with the rank stopped")
    assert "free_memory_refused" not in [m["id"] for m in res["verdicts"]["node-b"]["matches"]]


def _shard(path, header):
    """A safetensors file: 8-byte little-endian header length, the header, then its data (zeros)."""
    blob = json.dumps(header).encode() if isinstance(header, dict) else header
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * 16)


@pytest.mark.parametrize("damaged", [False, True])
def test_a_header_error_is_judged_by_reading_every_shard_header_on_the_node(tmp_path, damaged):
    """The engine's "Error while deserializing header" after 2 of 4 shards (field case: the same shard failed 9
    times while its sha256 matched). doctor reads every header itself: all parse, so the read path is at fault and
    the next shard is named; one that does not parse is this node's bad copy. Never weights_mismatch from the log."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    names = ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)]
    for name in names:
        _shard(ckpt / name, {"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]}})
    if damaged:
        _shard(ckpt / names[2], b'{"w": {"dtype": "BF16", "shape": [2, 4], "data_offs')
    info = _running_inspect()
    info["State"].update({"Status": "exited", "Running": False, "Pid": 0, "ExitCode": 1})
    log = ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:41<00:41, 20.50s/it]\n"
           "safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in header: EOF while "
           "parsing a value at line 1 column 0\n")
    node = _Node(tmp_path, [(["inspect", "--type", "container", "vllm_rank"], (0, json.dumps([info]), "")),
                            (["logs"], (0, log, ""))])
    node.params["weights_dir"] = str(ckpt)
    out = DC.collect(node)
    headers = out["raw"]["safetensors_headers"]
    assert sorted(headers) == names
    assert [n for n in names if headers[n] != "ok"] == ([names[2]] if damaged else [])
    res, failed = run_module(DR.main, {"results": {"node-b": dict(out, changed=False)}, "head": "node-b",
                                       "dest": str(tmp_path / "out"), "stamp": "20261207T101500Z", "redact": []})
    assert not failed, res
    matches = res["verdicts"]["node-b"]["matches"]
    assert "weights_mismatch" not in [m["id"] for m in matches]
    if damaged:
        assert matches[0]["id"] == "weights_header_bad"
        assert matches[0]["evidence"].startswith("weights_header_bad: %s: not a safetensors file: its 51-byte header "
                                                 "is not JSON" % names[2]), matches[0]
    else:
        assert matches[0]["id"] == "safetensors_read_failed"
        assert matches[0]["evidence"] == (
            "safetensors_read_failed: every one of the 4 shard headers parses on this node (the load stopped after 2 "
            "of 4 shards: the next is %s); the engine: safetensors_rust.SafetensorError: Error while deserializing "
            "header: invalid JSON in header: EOF while parsing a value at line 1 column 0" % names[2])


def test_a_shard_cut_inside_its_header_is_a_size_mismatch_first():
    """The fault suite's truncated shard (1024 bytes, inside its header): the size against the head's names the
    interrupted copy (weights_mismatch), which replaces the header entry it causes."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose as D
    name = "model-00001-of-00001.safetensors"
    head = {"weights": {name: 40000}, "safetensors_headers": {name: "ok"}}
    worker = {"weights": {name: 1024},
              "safetensors_headers": {name: "not a safetensors file: its 5000-byte header is not JSON (x)"}}
    facts = D.node_facts(worker)
    facts.update(D.fleet_facts({"h": head, "w": worker}, "h")["w"])
    assert "weights_header_bad" in facts and "weights_mismatch" in facts
    got = [m["id"] for m in D.diagnose({"facts": facts})]
    assert got == ["weights_mismatch"], got
    # the same header without a size difference: this node's copy is bad in place
    assert [m["id"] for m in D.diagnose({"facts": D.node_facts(worker)})] == ["weights_header_bad"]


def test_a_failed_collection_is_not_called_unreachable_over_ssh(tmp_path):
    results = {"node-a": {"failed": True, "msg": "docker: command not found"},
               "node-b": {"unreachable": True,
                          "msg": "Failed to connect to the host via ssh: ssh: connect to host 198.18.10.12 port 2222: "
                                 "No route to host"}}
    res, failed = run_module(DR.main, {"results": results, "head": "node-a", "dest": str(tmp_path)})
    assert not failed, res
    v = res["verdicts"]
    assert (v["node-a"]["status"], v["node-a"]["matches"]) == ("unreachable", [])
    assert v["node-a"]["reason"] == "collection failed: docker: command not found"
    assert [m["id"] for m in v["node-b"]["matches"]] == ["node_unreachable"]
    assert v["node-b"]["matches"][0]["evidence"].endswith("198.18.10.12 port 2222: No route to host")


def _incident_log(path, incidents):
    """incidents.jsonl written as the watchdog writes it (lifecycle's event builders)."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import lifecycle as L
    for start, end, cause, hosts in incidents:
        inc, _new = L.open_incident(None, start, cause, hosts)
        L.append_incident(path, L.start_event(inc))
        L.append_incident(path, L.action_event(inc, start + 5, "restart_group", "20261201T130000Z"))
        if end is not None:
            L.append_incident(path, L.close_incident(inc, end))


def test_collect_reads_the_end_of_the_incident_log(tmp_path):
    """The log only grows: of a 64 KiB+ incidents.jsonl the collector keeps the end (the recent incidents)."""
    wd = tmp_path / "dgxspark-vllm-watchdog"
    wd.mkdir()
    _incident_log(str(wd / "incidents.jsonl"), [(1000.0 + 10 * i, 1005.0 + 10 * i, "head_down: old %d" % i, ["h"])
                                                for i in range(400)] + [(9000.0, None, "rank_dead: the last", ["w"])])
    assert (wd / "incidents.jsonl").stat().st_size > 64 << 10
    node = _Node(tmp_path, [(["inspect", "--type", "container", "vllm_rank"], (1, "[]", "Error: No such object"))])
    node.params["watchdog_dirs"] = [str(wd)]
    text = DC.collect(node)["files"]["watchdog/dgxspark-vllm-watchdog/incidents.jsonl"]
    assert len(text) == 64 << 10 and "rank_dead: the last" in text.splitlines()[-2]


def test_recent_incidents_stand_beside_each_hosts_verdict():
    """worker_killed on the simulated fleet, with the head's incident log: the worker's incident stands beside the
    worker's verdict, the head's beside the head's with the availability; a host no incident names gets none."""
    import tempfile
    cap, exp = _sim("worker_killed")
    head = exp["head"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "incidents.jsonl")
        now = 1764590000.0
        _incident_log(path, [(now - 4000, now - 3700, "head_down: the head's /health does not answer 200", [head]),
                             (now - 600, now - 480, "rank_dead: rank 2 on spark-tp3-2 is not running", ["spark-tp3-2"])])
        with open(path) as f:
            text = f.read()
    results = dict(cap["hosts"])
    results[head] = dict(results[head], files=dict(results[head].get("files") or {},
                                                   **{"watchdog/dgxspark-vllm-watchdog/incidents.jsonl": text}))
    verdicts = DR.verdicts_for(results, head)
    DR.add_incidents(verdicts, results[head], head, now=now)  # the same, at a fixed clock
    assert [i["first_cause"] for i in verdicts["spark-tp3-2"]["incidents"]] == [
        "rank_dead: rank 2 on spark-tp3-2 is not running"]
    assert verdicts["spark-tp3-2"]["incidents"][0]["seconds_without_service"] == 120.0
    assert [i["seconds_without_service"] for i in verdicts[head]["incidents"]] == [300.0]
    assert verdicts["spark-tp3-1"]["incidents"] == []
    assert verdicts[head]["availability"]["down_s"] == 420.0
    assert DR.incident_lines(verdicts["spark-tp3-2"]) == [
        "spark-tp3-2: watchdog incident 2025-12-01T11:43:20Z to 2025-12-01T11:45:20Z, 120.0 s without service, "
        "first cause: rank_dead: rank 2 on spark-tp3-2 is not running"]
    md = DR.summary_md(verdicts, "20261201T130000Z", "doctor-20261201T130000Z.tar.gz")
    assert "- %s: availability (watchdog incident log) 99.514 %% over the last 24 h" % head in md
    # the verdicts are unchanged by the log (the catalogue decides them)
    assert [verdicts[h]["matches"][0]["id"] if verdicts[h]["matches"] else verdicts[h]["status"]
            for h in sorted(verdicts)] == ["absent", "absent", "rank_killed"]
