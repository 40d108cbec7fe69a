"""playbooks/doctor.yml on the simulated fleet (issue 17): after each fault, the right cause on the right host.

CI runs this file after test_10..test_40 on the same fleet, so a scenario sets up the rank state it needs
rather than inheriting it. No fault: when the group serves every node is healthy; the API key and the HF
token planted in a saved rank log (stamped now, so it is among the newest saved logs doctor reads however
many restarts came before) reach neither the tarball, the summary nor the output. Node-state faults (the
ranks in any state): MTU 1500 on a worker with the fix file altered on the head; a worker's fabric port
down; another image tagged as the lane's on a worker. A worker's running rank killed; the head's rank
killed. With the ranks down (any rank that still runs is killed first): a truncated
shard on a worker with the API port taken on the head. Each node-state fault is repaired right after its
doctor run. Each run records reports/faults/doctor_<scenario>.json with the verdicts, the right cause's
rank and the run's seconds (reported, never asserted). With DOCTOR_SAVE_CAPTURES=1 each run's node
evidence is kept under tests/fixtures/doctor/sim for the unit tests. Not run here: an unreachable node
(tests/unit/plugins/modules/test_doctor.py), the docker group, a full disk, SIGINT.
"""
import json
import os
import secrets
import tarfile
import time

import pytest
import yaml

from conftest import (
    INVENTORY,
    Fleet,
    node_docker,
    node_sh,
    rank_state,
    record,
    start_playbook,
)

pytestmark = pytest.mark.e2e

FABRIC_IF = "enp1s0f1np1"
REPORT_TASK = "Doctor | name the cause on every node and write the report (controller)"
# what every node's directory in the tarball holds
NODE_FILES = ["docker-inspect.json", "kernel.txt", "journal.txt", "nvidia-smi.txt", "meminfo.txt", "sysctl-vm.txt",
              "ip-addr.json", "ibdev2netdev.txt", "listening.txt", "nccl-env.txt", "image-fingerprint.json",
              "fix-files.json", "weights-sizes.json", "safetensors-headers.json", "docker-group.txt", "verdict.json"]
# and where a rank container exists
RANK_FILES = ["spec-rendered-vs-received.json", "container-log.txt", "image-inspect.json"]


@pytest.fixture(scope="module")
def nodes():
    """The fleet of DGXSPARK_FAULTS_INVENTORY with its node containers up (the ranks may be in any state)."""
    f = Fleet(INVENTORY)
    for n in f.nodes:
        node_sh(n, "true")
    return f


def doctor(tmp_path, extravars=None, check=False):
    """Run doctor.yml; read its verdicts and evidence back from the tarball it wrote (the runner's events do
    not carry results this large)."""
    dest = tmp_path / "report"
    ev = {"doctor_dest": str(dest)}
    ev.update(extravars or {})
    run = start_playbook("playbooks/doctor.yml", tmp_path, extravars=ev, cmdline=["--check"] if check else [])
    assert run.rc == 0, run.output[-4000:]
    assert run.task_events(("runner_on_ok",), task="Doctor | name the cause"), run.output[-3000:]
    (outdir,) = [d for d in dest.iterdir() if d.name.startswith("doctor-")]
    tarball = outdir / (outdir.name + ".tar.gz")
    res = {"tarball": str(tarball), "summary": str(outdir / "doctor.md"), "verdicts": {}, "evidence": {}}
    with tarfile.open(str(tarball)) as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if len(parts) == 3 and parts[2] in ("verdict.json", "evidence.json"):
                data = json.loads(tar.extractfile(m).read().decode())
                res["verdicts" if parts[2] == "verdict.json" else "evidence"][parts[1]] = data
    res["lines"] = [line for line in run.output.splitlines() if "catalogue: " in line or ": healthy" in line
                    or ": unreachable" in line or ": unknown" in line or "no rank container" in line]
    return run, res


def top(res, host):
    v = res["verdicts"][host]
    return v["matches"][0]["id"] if v["matches"] else v["status"]


def rank_of(res, host, entry):
    ids = [m["id"] for m in res["verdicts"][host]["matches"]]
    return ids.index(entry) + 1 if entry in ids else None


def save_capture(scenario, run, res, expected):
    """With DOCTOR_SAVE_CAPTURES=1, keep each node's raw evidence as a unit-test fixture (tests/fixtures/doctor/sim):
    the unit tests re-diagnose it (test_catalogue, test_doctor)."""
    if os.environ.get("DOCTOR_SAVE_CAPTURES") != "1":
        return
    out = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "doctor", "sim")
    os.makedirs(out, exist_ok=True)
    hosts = res["evidence"]
    with open(os.path.join(out, scenario + ".json"), "w") as f:
        json.dump({"scenario": scenario, "hosts": hosts}, f, indent=1, sort_keys=True)
        f.write("\n")
    exp = {"scenario": scenario, "head": [h for h in hosts if h.endswith("-0")][0] if hosts else None,
           "hosts": dict((h, {"top": expected.get(h) or res["verdicts"][h]["status"]}) for h in hosts)}
    with open(os.path.join(out, scenario + ".expected.yaml"), "w") as f:
        f.write("---\n")
        yaml.safe_dump(exp, f, sort_keys=True)


def report(scenario, run, res, expected):
    save_capture(scenario, run, res, expected)
    rows = {}
    for host, entry in expected.items():
        rows[host] = {"expected": entry, "top": top(res, host), "rank_of_expected": rank_of(res, host, entry),
                      "matches": [m["id"] for m in res["verdicts"][host]["matches"]]}
    record("doctor_" + scenario, run_s=run.seconds, hosts=rows, lines=res["lines"][:12], tarball=res["tarball"])
    return rows


def test_doctor_without_fault_and_tarball_without_secrets(nodes, tmp_path):
    fleet = nodes
    before = fleet.ranks()
    serving = fleet.serving()
    api_key, hf_token = "dk-" + secrets.token_hex(12), "hf_" + secrets.token_hex(12)
    # plant both secrets where doctor reads: a saved rank log on the head (removed afterwards), stamped now as
    # vllm_ranks stamps them, so it is among the newest doctor reads (saved_logs) however many restarts the
    # earlier fault files saved
    planted = "%s/%s-%s.log" % (fleet.rank_log_dir, fleet.container, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    node_sh(fleet.head, "mkdir -p %s && printf 'HF_TOKEN=%s --api-key %s\\n' > %s" % (
        fleet.rank_log_dir, hf_token, api_key, planted))
    try:
        run, res = doctor(tmp_path, {"vllm_api_key": api_key, "model_weights_hf_token": hf_token}, check=True)
    finally:
        node_sh(fleet.head, "rm -f %s" % planted)
    for host in fleet.nodes:
        want = {"healthy"} if serving or before[host]["running"] else {"healthy", "absent", "unknown"}
        assert res["verdicts"][host]["status"] in want, res["lines"]
        if before[host]["running"]:
            # a running rank is judged by its own log: what the saved logs of earlier containers match (the
            # cascades of the restarts before, e.g. the watchdog's) is a past incident, printed as such
            assert res["verdicts"][host]["matches"] == [], res["lines"]
            past = [m["id"] for m in res["verdicts"][host]["past"]]
            line = "%s: past incidents in the saved logs of earlier containers (not this rank's state): %s" % (
                host, ", ".join(past))
            with open(res["summary"]) as f:  # doctor.md: the play's output folds long lines
                assert (line in f.read()) == bool(past), res["lines"]
    assert fleet.ranks() == before, "doctor changed a rank"
    stamp_dir = os.path.basename(os.path.dirname(res["tarball"]))
    with tarfile.open(res["tarball"]) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    for host in fleet.nodes:
        for name in NODE_FILES + (RANK_FILES if before[host]["exists"] else []):
            assert "%s/%s/%s" % (stamp_dir, host, name) in names, (host, name)
    assert "%s/%s/saved-logs/%s" % (stamp_dir, fleet.head, os.path.basename(planted)) in names
    assert api_key.encode() not in blob and hf_token.encode() not in blob
    with open(res["summary"]) as f:
        md = f.read()
    assert api_key not in md and hf_token not in md
    assert api_key not in run.output and hf_token not in run.output
    save_capture("no_fault", run, res, {})
    record("doctor_no_fault", run_s=run.seconds, check_mode=True, serving=serving, members=len(names),
           statuses=dict((h, res["verdicts"][h]["status"]) for h in fleet.nodes),
           past_incidents=dict((h, [m["id"] for m in res["verdicts"][h].get("past", [])]) for h in fleet.nodes))


def test_doctor_mtu_on_worker_and_fix_file_on_head(nodes, tmp_path):
    fleet = nodes
    fix = fleet.fix_files[0]
    path = "%s/%s" % (fleet.fix_dir, fix["name"])
    node_sh(fleet.head, "cp -p %s /tmp/doctor-fix.bak && printf '\\n# altered on the node\\n' >> %s" % (path, path))
    node_sh(fleet.worker, "ip link set %s mtu 1500" % FABRIC_IF)
    try:
        run, res = doctor(tmp_path)
    finally:
        node_sh(fleet.worker, "ip link set %s mtu 9000" % FABRIC_IF)
        node_sh(fleet.head, "cat /tmp/doctor-fix.bak > %s && rm -f /tmp/doctor-fix.bak" % path)
    expected = {fleet.worker: "fabric_mtu_mismatch", fleet.head: "fix_file_drift"}
    report("mtu_worker_fix_file_head", run, res, expected)
    assert top(res, fleet.worker) == "fabric_mtu_mismatch", res["lines"]
    assert "%s mtu 1500, the lane wants 9000" % FABRIC_IF in res["verdicts"][fleet.worker]["matches"][0]["evidence"]
    assert top(res, fleet.head) == "fix_file_drift", res["lines"]
    assert fix["name"] in res["verdicts"][fleet.head]["matches"][0]["evidence"]
    assert "ip link set <netdev> mtu 9000" in res["verdicts"][fleet.worker]["matches"][0]["fix"]
    with open(res["summary"]) as f:
        assert "| 1 | fabric_mtu_mismatch |" in f.read()


def test_doctor_fabric_port_down_on_worker(nodes, tmp_path):
    fleet = nodes
    node_sh(fleet.worker, "ip link set %s down" % FABRIC_IF)
    try:
        run, res = doctor(tmp_path)
    finally:
        node_sh(fleet.worker, "ip link set %s up" % FABRIC_IF)
    report("fabric_down_worker", run, res, {fleet.worker: "fabric_link_down"})
    assert top(res, fleet.worker) == "fabric_link_down", res["lines"]
    assert FABRIC_IF in res["verdicts"][fleet.worker]["matches"][0]["evidence"]
    assert res["verdicts"][fleet.head]["status"] != "unreachable"


def test_doctor_other_image_on_worker(nodes, tmp_path):
    fleet = nodes
    w = fleet.worker
    ref = fleet.lane["image"]["reference"]
    rc, original, err = node_docker(w, "image", "inspect", "-f", "{{.Id}}", ref)
    assert rc == 0, err
    changed_file = "/opt/vllm/lib/python3.11/site-packages/vllm/platforms/cpu.py"
    node_sh(w, "docker rm -f doctor-engine-edit >/dev/null 2>&1; docker create --name doctor-engine-edit %s true"
               " >/dev/null && echo '# not the engine the lane pins' > /tmp/doctor-cpu.py"
               " && docker cp /tmp/doctor-cpu.py doctor-engine-edit:%s && docker commit doctor-engine-edit %s"
               " >/dev/null && docker rm doctor-engine-edit >/dev/null" % (ref, changed_file, ref))
    try:
        _rc, other, _err = node_docker(w, "image", "inspect", "-f", "{{.Id}}", ref)
        assert other != original
        run, res = doctor(tmp_path)
    finally:
        node_docker(w, "tag", original, ref)
        node_docker(w, "rmi", other)
        node_sh(w, "rm -f /tmp/doctor-cpu.py")
    report("other_image_worker", run, res, {w: "image_differs"})
    assert top(res, w) == "image_differs", res["lines"]
    assert res["verdicts"][fleet.head]["status"] != "failed", res["lines"]


def test_doctor_worker_killed(nodes, tmp_path):
    fleet = nodes
    running = [w for w in fleet.workers if rank_state(w, fleet.container)["running"]]
    if not running:
        pytest.skip("no worker rank runs on %s: nothing to kill" % INVENTORY)
    w = running[-1]
    rc, _out, err = node_docker(w, "kill", fleet.container)
    assert rc == 0, err
    run, res = doctor(tmp_path)
    now = rank_state(w, fleet.container)
    assert (now["running"], now["exit_code"]) == (False, 137)
    report("worker_killed", run, res, {w: "rank_killed"})
    assert top(res, w) == "rank_killed", res["lines"]
    assert "container exited: exit code 137, OOMKilled False" in res["verdicts"][w]["matches"][0]["evidence"]


def test_doctor_head_killed(nodes, tmp_path):
    """The head's rank killed (after the worker's, which it outlives while idle: vLLM watches only its local
    worker processes): doctor names it on the head."""
    fleet = nodes
    head = fleet.head
    if not rank_state(head, fleet.container)["running"]:
        pytest.skip("the head's rank does not run on %s: nothing to kill" % INVENTORY)
    rc, _out, err = node_docker(head, "kill", fleet.container)
    assert rc == 0, err
    run, res = doctor(tmp_path)
    now = rank_state(head, fleet.container)
    assert (now["running"], now["exit_code"]) == (False, 137)
    report("head_killed", run, res, {head: "rank_killed"})
    assert top(res, head) == "rank_killed", res["lines"]
    assert "container exited: exit code 137, OOMKilled False" in res["verdicts"][head]["matches"][0]["evidence"]


def test_doctor_truncated_shard_and_port_taken_while_ranks_down(nodes, tmp_path):
    """The ranks are down (a rank that still runs is killed first: this scenario must not depend on what the one
    before it left), a worker's shard is truncated and another process holds the API port on the head."""
    fleet = nodes
    w, head = fleet.worker, fleet.head
    for node in fleet.nodes:
        if rank_state(node, fleet.container)["running"]:
            rc, _out, err = node_docker(node, "kill", fleet.container)
            assert rc == 0, err
    assert not any(r["running"] for r in fleet.ranks().values())
    _rc, shard, _err = node_sh(w, "ls %s/*.safetensors | head -1" % fleet.checkpoint)
    node_sh(w, "cp -p %s /tmp/doctor-shard.bak && truncate -s 1024 %s" % (shard, shard))
    _rc, pid, _err = node_sh(head, "nohup python3 -m http.server %d >/dev/null 2>&1 & echo $!" % fleet.api_port)
    try:
        run, res = doctor(tmp_path)
    finally:
        node_sh(head, "kill %s" % pid, check=False)
        node_sh(w, "cat /tmp/doctor-shard.bak > %s && rm -f /tmp/doctor-shard.bak" % shard)
    report("truncated_shard_worker_port_taken_head", run, res, {w: "weights_mismatch", head: "port_taken"})
    assert top(res, w) == "weights_mismatch", res["lines"]
    assert os.path.basename(shard) in res["verdicts"][w]["matches"][0]["evidence"]
    assert top(res, head) == "port_taken", res["lines"]
    assert "port %d held by python3" % fleet.api_port in res["verdicts"][head]["matches"][0]["evidence"]
