#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: doctor_report
short_description: Name each node's failure from the catalogue and bundle the evidence (controller side)
version_added: "0.2.0"
description:
  - Runs on the controller (delegated to localhost) after M(dgxspark.vllm.doctor_collect) ran on every
    node. For each host it derives the node facts and the facts that compare nodes (image and weights
    against the head's, a worker running without its head, a KV pool below the peers'), ranks the matching
    entries of the failure catalogue (docs/catalogue.md) and prints one line per match with the host,
    the cause, the evidence line, the fix and the catalogue id. A stopped rank that matches nothing is C(unknown)
    with its last log lines; a host that could not be reached is C(unreachable); the others are still
    diagnosed.
  - Writes one timestamped tarball with every node's collected files and the summary, and the summary
    C(doctor.md) beside it, under O(dest)/doctor-<stamp>/. It refuses to write a file that contains one of
    the O(redact) strings (the collector already removed them; this is the second check).
  - Beside each host's verdict, the recent incidents of the watchdog's log on the head (C(incidents.jsonl), the
    end M(dgxspark.vllm.doctor_collect) read) whose first cause names that host, and on the head the
    availability over the last day from that log (module_utils/lifecycle.py C(incident_report)).
  - It changes nothing on the nodes. The report files on the controller are its only output, so it
    reports C(changed=false) and writes them in check mode too.
author:
  - dgxspark.vllm maintainers (@dgxspark)
attributes:
  check_mode:
    support: full
    details: The report is written in check mode too (controller only).
  diff_mode:
    support: none
extends_documentation_fragment:
  - dgxspark.vllm.attributes
options:
  results:
    description: Per host, the registered result of M(dgxspark.vllm.doctor_collect) (C(unreachable) or
      C(failed) results are reported as such).
    type: dict
    required: true
  head:
    description: Inventory name of the head (rank 0); other nodes are compared with it.
    type: str
    required: true
  dest:
    description: Directory on the controller for the report.
    type: path
    required: true
  stamp:
    description: UTC timestamp naming the report (C(YYYYmmddTHHMMSSZ)); now when empty.
    type: str
    default: ""
  redact:
    description: Secret strings that must not appear in any written file.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Doctor | diagnose and bundle
  dgxspark.vllm.doctor_report:
    results: "{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, '_doctor'))) }}"
    head: "{{ groups['vllm_head'][0] }}"
    dest: "{{ playbook_dir }}/../reports/doctor"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
lines:
  description: The verdict lines, host by host (ranked matches, or healthy / unknown / unreachable).
  returned: always
  type: list
  elements: str
verdicts:
  description: Per host, C({status, matches, past, last_lines, incidents}); status is healthy, failed, unknown, absent or
    unreachable; C(past) holds the matches of the saved logs of earlier containers (incidents before the rank
    container, which never set its status);
    each match has id, class, cause, fix, source, evidence, score. C(incidents) lists the watchdog's recent
    incidents whose first cause names the host (start, first_cause, hosts, actions, end, seconds_without_service;
    times in UTC); the head's verdict also has C(availability), the last day's from the incident log, when the
    head has one.
  returned: always
  type: dict
tarball:
  description: Path of the tarball (gzip), with C(<host>/<file>) for every collected file, C(<host>/evidence.json)
    (what the catalogue ran over), C(<host>/verdict.json) and C(doctor.md).
  returned: always
  type: str
summary:
  description: Path of doctor.md beside the tarball.
  returned: always
  type: str
"""

import io
import json
import os
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import diagnose as D
from ansible_collections.dgxspark.vllm.plugins.module_utils.lifecycle import INCIDENT_LOG_NAME, incident_report


def verdicts_for(results, head):
    raws, evid, verdicts = {}, {}, {}
    for host, res in sorted(results.items()):
        res = res or {}
        if res.get("unreachable"):
            verdicts[host] = D.host_verdict(host, {}, unreachable=res.get("msg") or "unreachable")
        elif res.get("failed") or "raw" not in res:
            verdicts[host] = D.host_verdict(host, {}, unreachable="collection failed: %s" % (
                res.get("msg") or "no result (the host did not run doctor_collect)"), connection=False)
        else:
            raws[host] = dict(res["raw"], logs=res["evidence"].get("logs", ""))
            evid[host] = res["evidence"]
    fleet = D.fleet_facts(raws, head) if head in raws else dict((h, {}) for h in raws)
    for host in raws:
        ev = dict(evid[host])
        facts = D.node_facts(raws[host])
        facts.update(fleet.get(host, {}))
        ev["facts"] = facts
        v = D.host_verdict(host, ev)
        v["facts"] = facts
        verdicts[host] = v
    add_incidents(verdicts, results.get(head) or {}, head)
    return verdicts


def add_incidents(verdicts, head_result, head, now=None, last=5):
    """The watchdog's recent incidents beside each host's verdict: those whose first cause names it (one that
    names no host stays with the head); the head also gets the availability. Nothing when the head has no log."""
    logs = [text for name, text in sorted((head_result.get("files") or {}).items())
            if name.startswith("watchdog/") and name.endswith("/" + INCIDENT_LOG_NAME)]
    if not logs:
        return
    rep = incident_report(logs[0], time.time() if now is None else now, last)
    for host, v in verdicts.items():
        v["incidents"] = [i for i in rep["incidents"] if host in i["hosts"] or (host == head and not i["hosts"])]
    if head in verdicts:
        verdicts[head]["availability"] = rep["availability"]


def incident_lines(v):
    """The verdict's incidents (add_incidents), one line each, and the head's availability."""
    out = ["%s: watchdog incident %s to %s, %s s without service, first cause: %s" % (
        v["host"], i["start"], i["end"], i["seconds_without_service"], i["first_cause"]) for i in v.get("incidents") or []]
    if v.get("availability"):
        out.append("%s: availability (watchdog incident log) %s" % (v["host"], v["availability"]["line"]))
    return out


def summary_md(verdicts, stamp, tar_name):
    out = ["# doctor %s" % stamp, "",
           "Evidence: `%s` (one directory per node). Causes and fixes: docs/catalogue.md." % tar_name, ""]
    for host in sorted(verdicts):
        v = verdicts[host]
        out.append("## %s: %s" % (host, v["status"]))
        out.append("")
        if v["status"] == "failed":
            out.append("| rank | catalogue id | cause | evidence | fix |")
            out.append("|---|---|---|---|---|")
            for i, m in enumerate(v["matches"]):
                cells = [str(i + 1), m["id"], m["cause"], "`%s`" % m["evidence"].replace("`", "'"), m["fix"]]
                out.append("| %s |" % " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells))
            out.extend(D.format_past(v))
        else:
            out.extend(D.format_verdict(v))
            if v.get("last_lines"):
                out.append("")
                out.append("```")
                out.extend(v["last_lines"])
                out.append("```")
        if v.get("incidents") or v.get("availability"):
            out.append("")
            out.extend("- %s" % line for line in incident_lines(v))
        out.append("")
    return "\n".join(out) + "\n"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type="dict", required=True),
            head=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            stamp=dict(type="str", default=""),
            redact=dict(type="list", elements="str", default=[], no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    stamp = p["stamp"] or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    verdicts = verdicts_for(p["results"], p["head"])
    lines = []
    for host in sorted(verdicts):
        lines.extend(D.format_verdict(verdicts[host]))
        lines.extend(incident_lines(verdicts[host]))

    outdir = os.path.join(p["dest"], "doctor-%s" % stamp)
    tar_name = "doctor-%s.tar.gz" % stamp
    md = summary_md(verdicts, stamp, tar_name)
    secrets = [s for s in p["redact"] if s and len(s) >= 4]
    members = [("doctor-%s/doctor.md" % stamp, md)]
    for host, res in sorted(p["results"].items()):
        for name, text in sorted(((res or {}).get("files") or {}).items()):
            members.append(("doctor-%s/%s/%s" % (stamp, host, name), text or ""))
        if (res or {}).get("raw") is not None:
            # what the catalogue ran over, so the verdict can be re-checked from the tarball alone
            members.append(("doctor-%s/%s/evidence.json" % (stamp, host), json.dumps(
                {"raw": res["raw"], "evidence": res.get("evidence") or {}}, indent=1, sort_keys=True) + "\n"))
        if host in verdicts:
            members.append(("doctor-%s/%s/verdict.json" % (stamp, host),
                            json.dumps(verdicts[host], indent=2, sort_keys=True, default=str) + "\n"))
    for name, text in members:
        for s in secrets:
            if s in text:
                module.fail_json(msg="doctor: %s contains a secret the collector should have removed; nothing was "
                                     "written. Report this as a bug (catalogue/doctor)." % name)
    if not os.path.isdir(outdir):
        os.makedirs(outdir, 0o700)
    tar_path = os.path.join(outdir, tar_name)
    with tarfile.open(tar_path, "w:gz") as tar:
        for name, text in members:
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    md_path = os.path.join(outdir, "doctor.md")
    with open(md_path, "w") as f:
        f.write(md)
    os.chmod(tar_path, 0o600)
    os.chmod(md_path, 0o600)
    module.exit_json(changed=False, lines=lines, verdicts=verdicts, tarball=tar_path, summary=md_path)


if __name__ == "__main__":
    main()
