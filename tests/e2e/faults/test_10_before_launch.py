"""Faults found before any rank starts (issue 11): no vLLM boot is needed.

Each scenario injects one fault on a node of a serving fleet, runs site.yml (without the benchmark),
asserts the outcome (failed host, task, the words of the message that name host, item and fix), that
the serving group was left alone (same containers, same start times, no saved rank log, files
unchanged), repairs the fault and records reports/faults/<scenario>.json. The three faults the
collection repairs itself (docker group, truncated weights, a missing fix file) are injected together
and repaired by one passing site.yml run, each found by its own task on its own host; its health gate
proves the group still serves, and the run also proves the cheap repairs before it.
"""
import hashlib
import os
import re

import pytest

from conftest import (
    SKIP_BENCH,
    assert_serving,
    assert_untouched,
    ensure_serving,
    failed_hosts,
    failure_message,
    node_docker,
    node_sh,
    record,
    start_playbook,
    state_summary,
)

pytestmark = pytest.mark.e2e

FABRIC_IF = "enp1s0f1np1"


def _failed_before_launch(fleet, run, before, snap):
    """rc != 0, no rank task ran, the group still runs untouched, nothing on the nodes changed."""
    assert run.rc != 0, run.output[-3000:]
    assert not run.task_events(("runner_on_ok", "runner_on_failed"), task="Vllm_ranks | Step "), \
        "a lifecycle step ran after a failed check"
    after = fleet.ranks()
    assert_untouched(before, after)
    assert fleet.snapshot() == snap, "files changed on a node although the run stopped before launch"
    return after


def _fabric_if(node):
    _rc, out, _err = node_sh(node, "ip -o link show %s" % FABRIC_IF)
    return out


def _node_prep_reached_a_node(run):
    """node_prep tasks that ran on a node. Its argument checks (tasks/arguments.yml) run on the controller in
    controller_checks.yml before any connection, so they do not count."""
    return [ev for ev in run.task_events(("runner_on_ok",), task="Node_prep")
            if not (ev["event_data"].get("task_path") or "").rsplit(":", 1)[0].endswith("/tasks/arguments.yml")]


def test_ssh_unreachable_worker(serving, tmp_path):
    """sshd stopped on a worker: the run fails on that host at its first connection, nothing starts."""
    fleet = serving
    w = fleet.worker
    before, snap = fleet.ranks(), fleet.snapshot()
    node_sh(w, "systemctl stop ssh")
    try:
        run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH)
    finally:
        node_sh(w, "systemctl start ssh")
    unreachable = [ev for ev in run.events if ev.get("event") == "runner_on_unreachable"]
    assert unreachable, run.output[-3000:]
    assert set(ev["event_data"]["host"] for ev in unreachable) == {w}
    # playbooks/reachable.yml: one message naming only the unreachable node, its address and what to check
    first = run.first_failure()
    told = run.task_events(("runner_on_failed",), task="Reachability | One message naming every node")
    assert len(told) == 1, run.output[-3000:]
    msg = failure_message(told[0])
    assert msg.startswith("1 of %d nodes did not answer over SSH, so nothing ran on any node: %s (%s:22 as "
                          % (len(fleet.nodes), w, fleet.address[w])), msg
    assert "port 22" in msg and "ansible.builtin.ping" in msg and fleet.head + " (" not in msg, msg
    # any_errors_fatal: no later play ran on the head either
    assert not _node_prep_reached_a_node(run), "node_prep ran although a rank was unreachable"
    after = _failed_before_launch(fleet, run, before, snap)
    assert "UNREACHABLE" in run.output and w in run.output
    record("ssh_unreachable_worker", fault="systemctl stop ssh on %s" % w,
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), unreachable=[w], message=msg[:400], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched, no file changed, no node_prep",
           repair="systemctl start ssh")


def test_fabric_interface_down_worker(serving, tmp_path):
    """The worker's fabric port goes down: rdma_fabric names host, port and the command that fixes it."""
    fleet = serving
    w = fleet.worker
    before, snap = fleet.ranks(), fleet.snapshot()
    node_sh(w, "ip link set %s down" % FABRIC_IF)
    try:
        run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH)
    finally:
        node_sh(w, "ip link set %s up" % FABRIC_IF)
    first = run.first_failure()
    msg = failure_message(first)
    assert first["event_data"]["task"].startswith("Rdma_fabric | the fabric as a whole must work"), first["event_data"]
    assert "%s: no Up RoCE netdev" % w in msg, msg
    assert "==> %s" % FABRIC_IF in msg and "ip link set %s up" % FABRIC_IF in msg, msg
    assert "%s: no Up RoCE" % fleet.head not in msg, msg
    after = _failed_before_launch(fleet, run, before, snap)
    assert "state UP" in _fabric_if(w) or ",UP" in _fabric_if(w)
    record("fabric_interface_down_worker", fault="ip link set %s down on %s" % (FABRIC_IF, w),
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), message=msg[:500], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched, no file changed",
           repair="ip link set %s up" % FABRIC_IF)


def test_fabric_mtu_changed_worker(serving, tmp_path):
    """MTU 1500 on the worker's fabric port: the plan names only the worker's netdev, both values and the fix."""
    fleet = serving
    w = fleet.worker
    before, snap = fleet.ranks(), fleet.snapshot()
    node_sh(w, "ip link set %s mtu 1500" % FABRIC_IF)
    try:
        run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH)
    finally:
        node_sh(w, "ip link set %s mtu 9000" % FABRIC_IF)
    first = run.first_failure()
    msg = failure_message(first)
    assert first["event_data"]["task"].startswith("Rdma_fabric | the fabric as a whole must work"), first["event_data"]
    assert "fabric MTU must be 9000" in msg, msg
    assert "%s %s has MTU 1500 (want 9000)" % (w, FABRIC_IF) in msg, msg
    assert "%s %s has MTU" % (fleet.head, FABRIC_IF) not in msg, msg  # the head is fine: not named
    assert "on %s: ip link set dev %s mtu 9000" % (w, FABRIC_IF) in msg, msg
    after = _failed_before_launch(fleet, run, before, snap)
    assert "mtu 9000" in _fabric_if(w)
    record("fabric_mtu_changed_worker", fault="ip link set %s mtu 1500 on %s" % (FABRIC_IF, w),
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), message=msg[:500], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched, no file changed",
           repair="ip link set %s mtu 9000" % FABRIC_IF)


def test_disk_nearly_full_worker(serving, tmp_path):
    """The filesystem of the checkpoint path on the worker is nearly full: preflight's disk rule names it."""
    fleet = serving
    w = fleet.worker
    parent = os.path.dirname(fleet.checkpoint)
    need = fleet.lane["requirements"]["disk_gib"]
    before, snap = fleet.ranks(), fleet.snapshot()
    # A small filesystem mounted over the checkpoint's parent and filled to ~94 % (the running rank keeps
    # its own bind of the directory below; nothing on the build machine's disk is filled).
    node_sh(w, "mount -t tmpfs -o size=64m flt-disk-full %s && fallocate -l 60m %s/fill" % (parent, parent))
    try:
        run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH)
    finally:
        node_sh(w, "rm -f %s/fill; umount %s" % (parent, parent))
    first = run.first_failure()
    msg = failure_message(first)
    assert first["event_data"]["task"] == "Preflight | Check this node against the lane", first["event_data"]
    assert failed_hosts(run) == [w], failed_hosts(run)
    assert re.search(r"%s: 0\.0\d GiB free on the filesystem of %s" % (w, re.escape(fleet.checkpoint)), msg), msg
    assert "needs %.2f GiB (requirements.disk_gib)" % need in msg and "Fix: free space there" in msg, msg
    assert not _node_prep_reached_a_node(run), "node_prep ran after a failed preflight"
    after = _failed_before_launch(fleet, run, before, snap)
    _rc, out, _err = node_sh(w, "ls %s" % fleet.checkpoint)
    assert "config.json" in out
    record("disk_nearly_full_worker", fault="tmpfs 64 MiB over %s on %s, 60 MiB allocated" % (parent, w),
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), message=msg[:500], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched, no file changed, no node_prep",
           repair="rm the fill file, umount")


def test_engine_image_differs_worker(serving, tmp_path):
    """Another image tagged as the lane's reference on the worker: the fingerprints differ and no rank starts.

    Run with image_sync_mode=verify (compare, move nothing). In the default stream mode the same probe
    makes image_sync stream the head's image to the worker again (4 GB), which repairs it.
    """
    fleet = serving
    w = fleet.worker
    ref = fleet.lane["image"]["reference"]
    before, snap = fleet.ranks(), fleet.snapshot()
    rc, original, err = node_docker(w, "image", "inspect", "-f", "{{.Id}}", ref)
    assert rc == 0, err
    changed_file = "/opt/vllm/lib/python3.11/site-packages/vllm/platforms/cpu.py"
    # a one-file change committed on top of the engine and tagged as the lane's reference
    node_sh(w, "docker rm -f flt-engine-edit >/dev/null 2>&1; docker create --name flt-engine-edit %s true >/dev/null"
               " && echo '# not the engine the lane pins' > /tmp/flt-cpu.py"
               " && docker cp /tmp/flt-cpu.py flt-engine-edit:%s && docker commit flt-engine-edit %s >/dev/null"
               " && docker rm flt-engine-edit >/dev/null" % (ref, changed_file, ref))
    try:
        rc, other, err = node_docker(w, "image", "inspect", "-f", "{{.Id}}", ref)
        assert other != original
        run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH, extravars={"image_sync_mode": "verify"})
    finally:
        node_docker(w, "tag", original, ref)
        node_docker(w, "rmi", other)
        node_sh(w, "rm -f /tmp/flt-cpu.py")
    first = run.first_failure()
    msg = failure_message(first)
    assert first["event_data"]["task"].startswith("Image_sync | Refuse ranks whose image differs"), first["event_data"]
    assert "is not identical on every rank (no rank was started)" in msg, msg
    assert "%s: file %s is" % (w, changed_file) in msg and "redistribute the image (image_sync)" in msg, msg
    assert "%s: image layers differ" % w in msg, msg
    assert "%s: " % fleet.head not in msg, msg
    after = _failed_before_launch(fleet, run, before, snap)
    rc, now, _err = node_docker(w, "image", "inspect", "-f", "{{.Id}}", ref)
    assert now == original
    record("engine_image_differs_worker", fault="one-file commit tagged %s on %s" % (ref, w),
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), message=msg[:600], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched (ranks keep the old image id)",
           repair="docker tag <original id> %s; docker rmi the other image" % ref,
           note="image_sync_mode=verify; the default stream mode re-streams the head's image to the worker")


# Three faults the collection repairs itself, injected together and repaired by ONE site.yml run: each is
# found by its own task on its own host, so the run tells them apart (one run instead of three).
USER = "spark"
SHARED = ["docker_group_lost_head", "weights_truncated_worker", "fix_file_missing_head"]


def _sha256(node, path):
    _rc, out, _err = node_sh(node, "sha256sum %s" % path)
    return out.split()[0]


@pytest.fixture(scope="module")
def self_repair(fleet, tmp_path_factory):
    """docker group lost on the head, a shard truncated on the worker, a fix file removed on the head;
    then one site.yml run (benchmark skipped)."""
    head, w = fleet.head, fleet.worker
    _rc, out, _err = node_sh(w, "ls -S %s/*.safetensors | head -1" % fleet.checkpoint)
    shard = out.strip()
    fix = fleet.fix_files[0]
    fix_path = "%s/%s" % (fleet.fix_dir, fix["name"])
    ensure_serving(fleet, tmp_path_factory.mktemp("site_repair"))
    ctx = {"shard": shard, "shard_sha256": _sha256(head, shard), "fix": fix, "fix_path": fix_path,
           "before": fleet.ranks()}
    node_sh(head, "gpasswd -d %s docker >/dev/null" % USER)
    node_sh(w, "truncate -s 1024 %s" % shard)
    node_sh(head, "rm %s" % fix_path)
    try:
        ctx["run"] = start_playbook("site.yml", tmp_path_factory.mktemp("self_repair"), cmdline=SKIP_BENCH)
    finally:
        node_sh(head, "id -nG %s | grep -qw docker || gpasswd -a %s docker >/dev/null" % (USER, USER))
    ctx["after"] = fleet.ranks()
    return ctx


def _repaired_and_serving(fleet, ctx):
    run = ctx["run"]
    assert run.rc == 0, run.output[-4000:]
    assert_untouched(ctx["before"], ctx["after"])
    assert_serving(fleet)
    return run


def test_docker_group_lost_head(fleet, self_repair):
    """The deploy user left the docker group on the head: preflight reports it, node_prep adds it back."""
    head = fleet.head
    run = _repaired_and_serving(fleet, self_repair)
    probe = run.ok("Preflight | Report the docker and sudo probes", host=head)
    assert probe, "preflight did not report the docker probe of %s" % head
    msg = probe[0]["event_data"]["res"]["msg"]
    assert "%s: docker as %s: not usable yet (permission denied" % (head, USER) in msg, msg
    assert "docker.sock" in msg and "node_prep adds the docker group (catalogue docker_group_missing)" in msg, msg
    assert not run.ok("Preflight | Report the docker and sudo probes", host=fleet.worker)
    fixed = run.changed("Node_prep | Add the deploy user to the docker group")
    assert [ev["event_data"]["host"] for ev in fixed] == [head]
    assert run.ok("Node_prep | Check that the deploy user can use docker without sudo", host=head)
    _rc, groups, _err = node_sh(head, "id -nG %s" % USER)
    assert "docker" in groups.split()
    record("docker_group_lost_head", fault="gpasswd -d %s docker on %s" % (USER, head),
           detected_in_s=run.since_start(probe[0]), detected_by=probe[0]["event_data"]["task"],
           repaired_by=fixed[0]["event_data"]["task"], repaired_in_s=run.since_start(fixed[0]),
           message=msg[:400], rc=run.rc, run_s=run.seconds, run_shared_with=SHARED,
           state_after=state_summary(self_repair["after"]), nothing_lost="group untouched and serving",
           repair="node_prep (same run)")


def test_weights_truncated_worker(fleet, self_repair):
    """A shard truncated on the worker: model_weights finds it against the owner's manifest and copies it again."""
    w, shard = fleet.worker, self_repair["shard"]
    run = _repaired_and_serving(fleet, self_repair)
    found = run.ok("Copy | compare this node's copy with the owner's manifest", host=w)
    assert found, run.output[-3000:]
    res = found[0]["event_data"]["res"]
    assert os.path.basename(shard) in " ".join(sum(res["plan"].values(), [])), res["plan"]
    problems = " ".join(str(p) for p in res["problems"])
    assert os.path.basename(shard) in problems and "'actual': 1024" in problems, problems
    copied = run.changed("Copy | rsync from the owner's fabric address", host=w)
    assert copied, "the shard was not copied again"
    assert _sha256(w, shard) == self_repair["shard_sha256"]
    record("weights_truncated_worker", fault="truncate -s 1024 %s on %s" % (shard, w),
           detected_in_s=run.since_start(found[0]), detected_by=found[0]["event_data"]["task"],
           repaired_by=copied[0]["event_data"]["task"], repaired_in_s=run.since_start(copied[0]),
           message=problems[:400], rc=run.rc, run_s=run.seconds, run_shared_with=SHARED,
           state_after=state_summary(self_repair["after"]),
           nothing_lost="group untouched and serving (the loaded weights are in memory); shard sha256 restored",
           repair="model_weights (same run)")


def test_fix_file_missing_head(fleet, self_repair):
    """The kernel fix file removed on the head: kernel_fix copies it back, checked against the lane's sha256.

    The running rank still holds the removed file's bytes (its bind keeps the inode), which equal the
    pin, so the group is left alone (vllm_ranks hashes the fix inside the running rank).
    """
    head, fix, path = fleet.head, self_repair["fix"], self_repair["fix_path"]
    run = _repaired_and_serving(fleet, self_repair)
    copied = run.changed("Kernel_fix | Copy each fix file", host=head)
    assert copied, run.output[-3000:]
    assert not run.changed("Kernel_fix | Copy each fix file", host=fleet.worker)
    assert run.ok("Kernel_fix | Check each node's copy against the lane's sha256", host=head)
    assert _sha256(head, path) == fix["sha256"]
    assert run.ok("Vllm_ranks | Hash the lane's fix files inside this running rank", host=head)
    rc, out, err = node_docker(head, "exec", fleet.container, "sha256sum", fix["container_path"])
    assert rc == 0 and out.split()[0] == fix["sha256"], (out, err)
    record("fix_file_missing_head", fault="rm %s on %s" % (path, head),
           detected_in_s=run.since_start(copied[0]), detected_by=copied[0]["event_data"]["task"],
           message="copied again: %s" % ", ".join(r.get("dest", "?") for r in copied[0]["event_data"]["res"]["results"]
                                                  if r.get("changed")),
           rc=run.rc, run_s=run.seconds, run_shared_with=SHARED, state_after=state_summary(self_repair["after"]),
           nothing_lost="group untouched and serving; file sha256 = lane pin", repair="kernel_fix (same run)")


def test_max_model_len_the_engine_refuses_leaves_the_group_serving(serving, tmp_path):
    """serve.max_model_len 4096 on the tiny checkpoint (max_position_embeddings 2048): refused from the head's
    config.json before the rank spec file is written or any rank stops; the group keeps serving (issue 32)."""
    fleet = serving
    before, snap = fleet.ranks(), fleet.snapshot()
    run = start_playbook("site.yml", tmp_path, cmdline=SKIP_BENCH,
                         extravars={"vllm_lane_overrides": {"serve": {"max_model_len": 4096}}})
    first = run.first_failure()
    msg = failure_message(first)
    assert first["event_data"]["task"] == "Vllm_ranks | Launch guard | serve.max_model_len fits the checkpoint", first
    assert msg.startswith("%s: serve.max_model_len 4096 is above the 2048 tokens the engine derives from %s/config.json "
                          "(max_position_embeddings=2048)" % (fleet.head, fleet.checkpoint)), msg
    assert "Fix: set serve.max_model_len to at most 2048" in msg, msg
    after = _failed_before_launch(fleet, run, before, snap)
    assert_serving(fleet)
    record("max_model_len_refused", fault="-e vllm_lane_overrides serve.max_model_len 4096 (checkpoint 2048)",
           detected_in_s=run.since_start(first), detected_by=first["event_data"]["task"],
           failed_hosts=failed_hosts(run), message=msg[:400], rc=run.rc, run_s=run.seconds,
           state_after=state_summary(after), nothing_lost="group untouched and serving, no file changed",
           repair="none needed")


def test_fleet_healthy_after_before_launch_faults(fleet):
    """Every repair above left a serving group with the lane's files on every node."""
    assert_serving(fleet)
    for node in fleet.nodes:
        for fix in fleet.fix_files:
            assert _sha256(node, "%s/%s" % (fleet.fix_dir, fix["name"])) == fix["sha256"]
    digest = [hashlib.sha256(node_sh(n, "cd %s && sha256sum $(ls | sort)" % fleet.checkpoint)[1].encode()).hexdigest()
              for n in fleet.nodes]
    assert len(set(digest)) == 1
