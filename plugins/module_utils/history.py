# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""The deployment history on the head (issue 32, docs/history.md): one JSON line per deployment that passed the
health gate, the newest line being the last known good.

An entry names what served: the lane (its name and the sha256 of the resolved lane spec), every rank's running
container (image id and the spec hash label vllm_ranks put on it), the fix files and checkpoint/drafter the lane
pins (with the manifest and fix-file hashes this run verified, when it did), the gate it passed (mode, report path,
figures), when (UTC) and the downtime when the run restarted the group and measured it. Its `id` is the sha256 of
what identifies the deployment - the lane hash and each rank's (host, rank, image id, spec hash) - so a re-run that
changed nothing has the id of the newest entry and records nothing (changed=0).

An entry's `bench` is what a passing vllm_bench measured on it (decode tok/s and TTFT medians, the report's path),
added to the newest entry after the gate; vllm_monitoring's VllmDecodeSlow alert takes its decode rate as the
baseline when none is set.

Callers: module deployment_history (roles/vllm_health `history.yml` after a passing gate, and its `history` entry
point for playbooks/history.yml; roles/vllm_bench after a passing bench; roles/vllm_monitoring reads the baseline).
Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

FORMAT = 1
FILE_NAME = "deployments.jsonl"
# Keys an entry must carry to be read back as one (a line without them is reported as damaged).
REQUIRED = ("format", "id", "recorded", "lane", "nodes")
LIST_FIELDS = ("id", "recorded", "lane", "gate", "downtime_s")


def canonical_sha256(value):
    """sha256 hex of the value as canonical JSON (sorted keys, no spaces): the same data gives the same hash."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _artifact(spec, manifest_sha256):
    if not spec:
        return None
    return {"repo_id": spec.get("repo_id"), "revision": spec.get("revision"), "manifest_sha256": manifest_sha256 or None}


def _node(row):
    """One rank's row of the gate (host, rank, container as vllm_health's wait returns it) -> the entry's node."""
    container = row.get("container") or {}
    return {"host": str(row["host"]), "rank": int(row["rank"]), "container": container.get("name"),
            "image_id": container.get("image_id") or None, "spec_hash": container.get("spec_hash") or None}


def deployment_id(lane_sha256, nodes):
    """The identity of a deployment: the resolved lane and what each rank runs (not the time, not the reports)."""
    return canonical_sha256({"lane_sha256": lane_sha256,
                             "nodes": [[n["host"], n["rank"], n["image_id"], n["spec_hash"]] for n in nodes]})


def build_entry(lane, ranks, gate, recorded, verified=None, downtime_s=None):
    """One history entry.

    lane: the resolved lane (vllm_lane_spec). ranks: [{host, rank, container: {name, image_id, spec_hash}}], one per
    rank. gate: {mode, report, ok, ready_after_s, finished, warnings}. recorded: UTC 'YYYY-mm-ddTHH:MM:SSZ'.
    verified: {checkpoint_manifest_sha256, drafter_manifest_sha256, fix_files: [{name, sha256, ...}]} - what this
    run's model_weights and kernel_fix verified (absent when they did not run). downtime_s: seconds from the old
    group's stop to the first answered request, None when the run did not restart the group or did not measure it.
    Raises ValueError naming what is missing.
    """
    if not isinstance(lane, dict) or not lane.get("name"):
        raise ValueError("the resolved lane (vllm_lane_spec) with its name is needed")
    if not ranks:
        raise ValueError("no rank rows: the gate saw no rank")
    for row in ranks:
        if not isinstance(row, dict) or "host" not in row or "rank" not in row:
            raise ValueError("a rank row lacks host or rank: %r" % (row,))
    verified = verified or {}
    nodes = sorted((_node(r) for r in ranks), key=lambda n: n["rank"])
    lane_sha256 = canonical_sha256(lane)
    fixed = dict((f.get("name"), f.get("sha256")) for f in verified.get("fix_files") or [] if isinstance(f, dict))
    fix_files = [{"name": f.get("name"), "sha256": f.get("sha256"), "verified_sha256": fixed.get(f.get("name"))}
                 for f in lane.get("fix_files") or []]
    return {
        "format": FORMAT,
        "id": deployment_id(lane_sha256, nodes),
        "recorded": recorded,
        "lane": {"name": lane["name"], "sha256": lane_sha256, "tensor_parallel_size": lane.get("tensor_parallel_size"),
                 "image": (lane.get("image") or {}).get("reference"),
                 "max_model_len": (lane.get("serve") or {}).get("max_model_len")},
        "nodes": nodes,
        "fix_files": fix_files,
        "checkpoint": _artifact(lane.get("checkpoint"), verified.get("checkpoint_manifest_sha256")),
        "drafter": _artifact(lane.get("drafter"), verified.get("drafter_manifest_sha256")),
        "gate": dict(gate or {}),
        # what a passing vllm_bench measured on this deployment, added after the gate (with_bench)
        "bench": None,
        "downtime_s": downtime_s,
    }


def parse(text):
    """The history file's text -> (entries in file order, problems). A line that is not a JSON object with the
    REQUIRED keys is a problem ('line N: why') and is left out; nothing raises."""
    entries, problems = [], []
    for number, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            problems.append("line %d: not JSON (%s)" % (number, e))
            continue
        if not isinstance(entry, dict):
            problems.append("line %d: not a JSON object" % number)
            continue
        missing = [k for k in REQUIRED if k not in entry]
        if missing:
            problems.append("line %d: lacks %s" % (number, ", ".join(missing)))
            continue
        entries.append(entry)
    return entries, problems


def render(entries):
    """Entries -> the file's text, one JSON object a line (oldest first)."""
    return "".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n" for e in entries)


def last_known_good(entries):
    """The newest entry (the deployment that passed the last gate), or None for an empty history."""
    return entries[-1] if entries else None


def needs_record(entries, entry):
    """True when the entry's deployment differs from the newest one: a re-verified gate of the same deployment
    appends nothing."""
    newest = last_known_good(entries)
    return newest is None or newest.get("id") != entry["id"]


def retain(entries, keep):
    """The newest `keep` entries (keep >= 1), oldest first."""
    if int(keep) < 1:
        raise ValueError("keep must be at least 1, got %r" % (keep,))
    return list(entries[-int(keep):])


def record(entries, entry, keep):
    """(entries after recording, recorded?): the entry appended when needs_record, then the newest `keep` kept."""
    if not needs_record(entries, entry):
        return retain(entries, keep), False
    return retain(list(entries) + [entry], keep), True


def listing(entries, count):
    """Newest first, at most `count`: each entry's id, recorded, lane, gate, downtime_s, ranks as
    'host:rank image_id[:19] spec_hash[:12]', and last_known_good true on the newest."""
    rows = []
    for i, e in enumerate(reversed(entries[-int(count):] if int(count) > 0 else [])):
        row = dict((k, e.get(k)) for k in LIST_FIELDS)
        row["ranks"] = ["%s:%s image %s spec %s" % (n.get("host"), n.get("rank"), (n.get("image_id") or "?")[:19],
                                                    (n.get("spec_hash") or "?")[:12]) for n in e.get("nodes") or []]
        row["last_known_good"] = i == 0
        rows.append(row)
    return rows


def _positive(value):
    """A finite number above 0 (not a bool, not NaN: NaN > 0 is false)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def bench_summary(report, path):
    """What the history keeps of a vllm_bench report (files/vllm_bench.py's report.json): {report, generated, lane,
    decode_tok_s_median (tokens/s of one stream), ttft_s_median (seconds)}. Raises ValueError for a report that did
    not pass (a failed bench is no baseline) or has no positive decode rate."""
    if not isinstance(report, dict) or report.get("ok") is not True:
        raise ValueError("the benchmark report did not pass (ok is not true): a failed benchmark is no baseline")
    decode = (report.get("results") or {}).get("decode") or {}
    rate, ttft = decode.get("decode_tok_s_median"), decode.get("ttft_s_median")
    if not _positive(rate):
        raise ValueError("the report has no positive results.decode.decode_tok_s_median (got %r)" % (rate,))
    return {"report": path, "generated": report.get("generated"), "lane": report.get("lane"),
            "decode_tok_s_median": float(rate), "ttft_s_median": float(ttft) if _positive(ttft) else None}


def with_bench(entries, summary):
    """(entries, changed?): the newest entry - the deployment that serves, the one the benchmark measured - carries
    the summary as its `bench`. The same summary again changes nothing. Raises ValueError on an empty history or a
    summary of another lane than the newest entry's."""
    newest = last_known_good(entries)
    if newest is None:
        raise ValueError("the history has no deployment to attach the benchmark to (the health gate records one)")
    lane = (newest.get("lane") or {}).get("name")
    if summary.get("lane") != lane:
        raise ValueError("the benchmark measured lane %r but the last known good deployment is lane %r"
                         % (summary.get("lane"), lane))
    if newest.get("bench") == summary:
        return list(entries), False
    return list(entries[:-1]) + [dict(newest, bench=summary)], True


def decode_baseline(entry, lane_name):
    """The decode tok/s (one stream) a passing benchmark measured on the entry, or None: no entry, an entry of
    another lane (its figure says nothing of this one), or no benchmark recorded on it."""
    if not isinstance(entry, dict) or (entry.get("lane") or {}).get("name") != lane_name:
        return None
    rate = (entry.get("bench") or {}).get("decode_tok_s_median")
    return float(rate) if _positive(rate) else None
