#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: deployment_history
short_description: Record a deployment that passed the health gate on the head, its benchmark, or list the history
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The deployment history is one JSON object a line in C(<dir>/deployments.jsonl) on the head, oldest first; the
    newest entry is the last known good (docs/history.md). The rules (entry, identity, retention, parsing) live in
    C(plugins/module_utils/history.py).
  - I(state=recorded) builds an entry from the resolved lane, the gate's rank rows and the gate summary, and appends
    it when its deployment id differs from the newest entry's (a re-verified gate of the same deployment appends
    nothing and reports ok), then keeps the newest O(keep). The directory is made C(0700) and the file written
    C(0600) by the user the task runs as (root with become), atomically.
  - I(state=benched) attaches a passing vllm_bench report's figures (decode tok/s and TTFT medians, its path) to
    the newest entry, the deployment the benchmark measured; the same figures again change nothing. A report that did
    not pass fails naming why; an empty history, or a newest entry of another lane, records nothing and warns.
  - I(state=listed) only reads, newest first; with O(lane_name) it also returns the decode baseline of the last known
    good entry (vllm_monitoring's VllmDecodeSlow alert).
  - A damaged line (not JSON, not an object, lacking a key) never raises; it is named in C(problems) and left out.
    Recording into a damaged file first copies it to C(deployments.jsonl.damaged) and warns.
options:
  state:
    description: C(recorded) appends the entry when needed; C(benched) adds a benchmark to the newest; C(listed)
      only reads.
    type: str
    choices: [recorded, benched, listed]
    default: recorded
  dir:
    description: Directory of the history file (absolute path on the head).
    type: path
    required: true
  lane:
    description: The resolved lane (C(vllm_lane_spec)); its canonical JSON is hashed. Required with I(state=recorded).
    type: dict
  ranks:
    description:
      - One row a rank, C({host, rank, container}); C(container) as module M(dgxspark.vllm.vllm_health) I(mode=wait)
        returns it (C(name), C(image_id), C(spec_hash)). Required with I(state=recorded).
    type: list
    elements: dict
  gate:
    description: The gate passed, C({mode, report, ok, ready_after_s, finished, warnings}).
    type: dict
    default: {}
  verified:
    description: What this run verified, C({checkpoint_manifest_sha256, drafter_manifest_sha256, fix_files}); empty when
      model_weights and kernel_fix did not run.
    type: dict
    default: {}
  downtime_s:
    description: Seconds from the old group's stop to the first answered request; null when unknown.
    type: float
  recorded:
    description: UTC time of the gate, C(YYYY-mm-ddTHH:MM:SSZ).
    type: str
  keep:
    description: Entries kept (the newest), 1-1000.
    type: int
    default: 20
  count:
    description: I(state=listed) - entries returned, newest first.
    type: int
    default: 10
  bench_report:
    description: I(state=benched) - the benchmark's C(report.json) as files/vllm_bench.py of role vllm_bench writes it
      (C(ok), C(lane), C(generated), C(results.decode.decode_tok_s_median) in tokens/s, C(ttft_s_median) in seconds).
    type: dict
  bench_report_path:
    description: I(state=benched) - where that report is on the controller (kept in the entry, not read).
    type: str
  lane_name:
    description: I(state=listed) - the lane that serves now; the decode baseline is given only when the last known
      good entry is of this lane.
    type: str
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reports whether an entry would be appended; writes nothing.
  diff_mode:
    support: full
    details: The appended line.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Record the deployment that passed the gate
  dgxspark.vllm.deployment_history:
    dir: /var/lib/dgxspark-vllm/history
    lane: "{{ vllm_lane_spec }}"
    ranks: [{host: spark-1, rank: 0, container: {name: vllm_rank, image_id: "sha256:5f0c...", spec_hash: 9a1e...}}]
    gate: {mode: full, ok: true, report: reports/health-20261206T120000Z.json}
    recorded: "2026-12-06T12:00:03Z"

- name: The five newest entries
  dgxspark.vllm.deployment_history:
    state: listed
    dir: /var/lib/dgxspark-vllm/history
    count: 5
  register: history

- name: Attach a passing benchmark to the deployment that serves
  dgxspark.vllm.deployment_history:
    state: benched
    dir: /var/lib/dgxspark-vllm/history
    bench_report: "{{ lookup('ansible.builtin.file', 'reports/20261206T120500Z/report.json') | from_json }}"
    bench_report_path: reports/20261206T120500Z/report.json
"""

RETURN = r"""
recorded:
  description: Whether the entry was appended (would be, in check mode).
  returned: state is recorded
  type: bool
entry:
  description: The entry built from the inputs (appended or not).
  returned: state is recorded
  type: dict
last_known_good:
  description: The newest entry after the call, or null for an empty history.
  returned: always
  type: dict
bench:
  description: The figures attached to the newest entry, C(report), C(generated), C(lane), C(decode_tok_s_median),
    C(ttft_s_median); null when nothing was attached (with a warning).
  returned: state is benched
  type: dict
decode_baseline:
  description: Decode tokens/s (one stream) of the benchmark recorded on the last known good entry, or null (no
    entry, an entry of another lane than O(lane_name), no benchmark recorded).
  returned: state is listed and lane_name is given
  type: float
entries:
  description: The newest entries first (at most O(count)), each with C(id), C(recorded), C(lane), C(gate),
    C(downtime_s), C(ranks) (one line per rank) and C(last_known_good).
  returned: state is listed
  type: list
  elements: dict
total:
  description: Entries in the file after the call (damaged lines not counted).
  returned: always
  type: int
problems:
  description: Damaged lines, C(line N - why).
  returned: always
  type: list
  elements: str
path:
  description: The history file.
  returned: always
  type: str
"""

import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import history as H


def read(path):
    """(entries, problems) of the file; a missing file is an empty history."""
    try:
        with open(path) as f:
            return H.parse(f.read())
    except (IOError, OSError) as e:
        if not os.path.exists(path):
            return [], []
        return [], ["%s: unreadable (%s)" % (path, e)]


def write(module, directory, path, entries):
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".deployments.")
    with os.fdopen(fd, "w") as f:
        f.write(H.render(entries))
    os.chmod(tmp, 0o600)
    module.atomic_move(tmp, path)
    os.chmod(path, 0o600)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["recorded", "benched", "listed"], default="recorded"),
            dir=dict(type="path", required=True),
            lane=dict(type="dict"),
            ranks=dict(type="list", elements="dict"),
            gate=dict(type="dict", default={}),
            verified=dict(type="dict", default={}),
            downtime_s=dict(type="float"),
            recorded=dict(type="str"),
            keep=dict(type="int", default=20),
            count=dict(type="int", default=10),
            bench_report=dict(type="dict"),
            bench_report_path=dict(type="str"),
            lane_name=dict(type="str"),
        ),
        required_if=[("state", "recorded", ("lane", "ranks")), ("state", "benched", ("bench_report",))],
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["keep"] <= 1000:
        module.fail_json(msg="keep must be 1-1000, got %d" % p["keep"])
    path = os.path.join(p["dir"], H.FILE_NAME)
    entries, problems = read(path)
    out = {"changed": False, "path": path, "problems": problems}
    if p["state"] == "listed":
        out.update(entries=H.listing(entries, max(0, p["count"])), total=len(entries),
                   last_known_good=H.last_known_good(entries))
        if p["lane_name"] is not None:
            out["decode_baseline"] = H.decode_baseline(H.last_known_good(entries), p["lane_name"])
        module.exit_json(**out)
    if p["state"] == "benched":
        try:
            summary = H.bench_summary(p["bench_report"], p["bench_report_path"])
        except ValueError as e:
            module.fail_json(msg="deployment_history: cannot record the benchmark in %s: %s" % (path, e), **out)
        try:
            kept, changed = H.with_bench(entries, summary)
        except ValueError as e:
            # the benchmark passed; only the baseline of VllmDecodeSlow is not recorded (site.yml records one)
            module.warn("the benchmark is not recorded in %s: %s" % (path, e))
            module.exit_json(bench=None, total=len(entries), last_known_good=H.last_known_good(entries), **out)
        finish(module, p["dir"], path, entries, kept, changed, problems, out, bench=summary,
               total=len(kept), last_known_good=H.last_known_good(kept))
    try:
        entry = H.build_entry(p["lane"], p["ranks"], p["gate"],
                              p["recorded"] or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              verified=p["verified"], downtime_s=p["downtime_s"])
    except (ValueError, KeyError, TypeError) as e:
        module.fail_json(msg="deployment_history: cannot build the entry: %s" % e)
    kept, appended = H.record(entries, entry, p["keep"])
    # A shorter keep also rewrites the file (fewer entries), the same as an appended entry.
    changed = appended or len(kept) != len(entries)
    finish(module, p["dir"], path, entries, kept, changed, problems, out, recorded=appended, entry=entry,
           total=len(kept), last_known_good=H.last_known_good(kept))


def finish(module, directory, path, entries, kept, changed, problems, out, **result):
    """Write the kept entries when they changed (not in check mode), with the newest line's diff; exit."""
    out.update(result, changed=changed)
    if changed and module._diff:
        out["diff"] = {"before_header": path, "after_header": path,
                       "before": H.render(entries[-1:]), "after": H.render(kept[-1:])}
    if changed and not module.check_mode:
        if problems and os.path.exists(path):
            shutil.copyfile(path, path + ".damaged")
            module.warn("%s had damaged lines (%s); kept a copy in %s.damaged and rewrote it without them"
                        % (path, "; ".join(problems), path))
        write(module, directory, path, kept)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
