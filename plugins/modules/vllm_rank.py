#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_rank
short_description: Start, remove or query one vLLM rank container through the docker CLI
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Manages the container of one tensor-parallel rank from a spec rendered by the filter
    C(dgxspark.vllm.vllm_rank_spec) (lane + this host's own facts, C(plugins/module_utils/render.py)).
  - The container carries the spec hash as the label C(dgxspark.vllm.spec-hash); it is recreated only when
    that label differs from the wanted hash, when it is not running, or when O(recreate=true).
  - Before any removal the container's full C(docker logs) (stdout and stderr, with timestamps) is saved to
    C(<log_dir>/<name>-<log_stamp>.log) on the node (catalogue worker_orphaned, NVRM errors surface minutes later).
  - With O(state=started) or O(state=absent), a container found not running counts as an unexplained death; the
    count is kept in C(<log_dir>/<name>.deaths) and reset when such a run finds the rank running (the caller stops
    after two in a row, catalogue worker_orphaned). O(state=query) only reads it and writes nothing.
  - Uses only the docker CLI on the node; no Python docker SDK is needed. Containers run with C(--restart no)
    because docker restart policies cannot recover a multi-node mp group (catalogue worker_orphaned).
  - This module handles one rank. Ordering (tear down every rank, then workers from the highest rank down,
    then the head) is the job of the C(dgxspark.vllm.vllm_ranks) role.
options:
  name:
    description: Container name (the lane's C(container.name)).
    type: str
    required: true
  state:
    description:
      - V(started) makes the rank run the wanted spec (save logs, remove and start when needed).
      - V(absent) saves the logs and removes the container.
      - V(query) only reports.
    type: str
    choices: [started, absent, query]
    default: started
  spec:
    description:
      - The rendered rank spec (output of the C(dgxspark.vllm.vllm_rank_spec) filter) with keys
        C(image), C(docker_argv), C(mounts), C(env), C(labels), C(command) and C(hashed).
      - Required for O(state=started); ignored otherwise.
    type: dict
  recreate:
    description: Remove and start the container even when it runs the wanted spec (full group restart).
    type: bool
    default: false
  docker:
    description: The docker CLI to call (path or name on C(PATH)).
    type: str
    default: docker
  log_dir:
    description: Directory on the node where container logs are saved before removal, and the deaths counter.
    type: path
    default: /var/log/dgxspark-vllm
  log_stamp:
    description:
      - Suffix of the saved log file (C(<name>-<log_stamp>.log)); pass one value for every rank of a run so
        their logs pair up. Defaults to the current UTC time as C(YYYYmmddTHHMMSSZ).
    type: str
  wait_regex:
    description:
      - After starting, wait until the container log matches this Python regular expression (for a worker,
        the line that shows it is dialing the rendezvous). Without it the module only checks that the
        container is running right after C(docker run).
    type: str
  wait_timeout:
    description: Seconds to wait for O(wait_regex); the module fails when it expires or the container exits.
    type: int
    default: 600
  wait_interval:
    description: Seconds between two looks at the container while waiting.
    type: float
    default: 1.0
  reset_deaths:
    description:
      - Reset the unexplained-deaths counter of this rank to 0 (after the cause was fixed) before counting.
      - Ignored with O(state=query), which writes nothing.
    type: bool
    default: false
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports the actions it would take (save_logs, remove, start) without running them; writes nothing.
  diff_mode:
    support: full
    details: Before/after spec hash and state, plus the spec keys that differ.
notes:
  - Requires the docker CLI on the node and permission to use it (run with become, or as a docker group member).
"""

EXAMPLES = r"""
- name: Query rank 1
  dgxspark.vllm.vllm_rank:
    name: vllm_glm53
    state: query
  register: rank

- name: Start a worker and wait until it dials the rendezvous
  dgxspark.vllm.vllm_rank:
    name: "{{ spec.name }}"
    spec: "{{ vllm_lane_spec | dgxspark.vllm.vllm_rank_spec(facts) }}"
    wait_regex: "Connecting to|rendezvous"
    wait_timeout: 300

- name: Remove the rank, logs first
  dgxspark.vllm.vllm_rank:
    name: vllm_glm53
    state: absent
    log_stamp: "20261130T150000Z"
"""

# The state fields below are docker_cli.parse_container's, described as in docker_inspect's RETURN: ansible-doc
# reads RETURN as a literal and takes no fragment, so the text stands twice while the parser is one.
RETURN = r"""
container:
  description: The container after the module ran (before it, in check mode); C(exists=false) when there is none.
  returned: always
  type: dict
  contains:
    exists:
      description: Whether the container exists.
      type: bool
    status:
      description: Docker state, e.g. running, exited or created.
      type: str
    running:
      description: Whether it runs.
      type: bool
    exit_code:
      description: Exit code of the last run (0 while running).
      type: int
    started_at:
      description: Start time as docker reports it (RFC 3339, UTC).
      type: str
    finished_at:
      description: Stop time (RFC 3339, UTC); C(0001-01-01T00:00:00Z) while running.
      type: str
    spec_hash:
      description: The C(dgxspark.vllm.spec-hash) label.
      type: str
    id:
      description: Container id.
      type: str
  sample: {exists: true, status: running, running: true, exit_code: 0, started_at: "2026-11-30T15:01:02.123Z"}
previous:
  description: The container as found before any action (same shape as RV(container)).
  returned: always
  type: dict
spec_hash:
  description: The wanted spec hash (state started), else the found one.
  returned: always
  type: str
actions:
  description: What the module did (or would do in check mode), in order; empty when nothing was needed.
  returned: always
  type: list
  elements: str
  sample: [save_logs, remove, start]
changed_keys:
  description: Spec keys that differ between the running container and the wanted spec (e.g. C(command), C(env.NCCL_DEBUG)).
  returned: always
  type: list
  elements: str
log_path:
  description: Path on the node of the logs saved before removal; empty when nothing was removed.
  returned: always
  type: str
died:
  description: True when the container was found not running (an unexplained death).
  returned: always
  type: bool
deaths:
  description: Unexplained deaths in a row of this rank, including this one.
  returned: always
  type: int
last_errors:
  description: Error-looking lines (error, Traceback, Exception, NO_MEMORY, ...) from the saved or live log, last 20.
  returned: always
  type: list
  elements: str
wait:
  description: Outcome of the readiness wait (ready, exited, timeout, skipped).
  returned: always
  type: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import regex_problem

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import (
    DockerError,
    DockerRank,
    count_deaths,
    diff_keys,
    error_lines,
    plan,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.diagnose import explain
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import HASH_LABEL


def _public(info):
    if not info:
        return {"exists": False, "status": "absent", "running": False, "exit_code": None, "started_at": "",
                "finished_at": "", "spec_hash": "", "id": ""}
    out = dict((k, info[k]) for k in ("status", "running", "exit_code", "started_at", "finished_at",
                                      "spec_hash", "id", "oom_killed", "image"))
    out["exists"] = True
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "absent", "query"]),
            spec=dict(type="dict"),
            recreate=dict(type="bool", default=False),
            docker=dict(type="str", default="docker"),
            log_dir=dict(type="path", default="/var/log/dgxspark-vllm"),
            log_stamp=dict(type="str"),
            wait_regex=dict(type="str"),
            wait_timeout=dict(type="int", default=600),
            wait_interval=dict(type="float", default=1.0),
            reset_deaths=dict(type="bool", default=False),
        ),
        required_if=[("state", "started", ["spec"])],
        supports_check_mode=True,
    )
    p = module.params
    name, state, spec = p["name"], p["state"], p["spec"]
    # Every input is checked before docker is called: a bad regex found after `docker run` would leave a
    # started rank behind a failed task.
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", name):
        module.fail_json(msg="rank %r: not a container name (letters, digits and _ . -, Docker's rule); fix the lane's "
                             "container.name" % (name,))
    problem = regex_problem("wait_regex", p["wait_regex"])
    if problem:
        module.fail_json(msg="rank %s: %s" % (name, problem))
    if p["wait_timeout"] < 0 or p["wait_interval"] <= 0:
        module.fail_json(msg="rank %s: wait_timeout (%s s) must be >= 0 and wait_interval (%s s) > 0"
                             % (name, p["wait_timeout"], p["wait_interval"]))
    if state == "started":
        for key in ("image", "docker_argv", "mounts", "env", "labels", "command", "hashed"):
            if key not in spec:
                module.fail_json(msg="rank %s: spec has no %r; render it with the dgxspark.vllm.vllm_rank_spec filter"
                                 % (name, key))
        if spec.get("name") not in (None, name):
            module.fail_json(msg="rank %s: the spec is for container %r; pass name=%s" % (name, spec["name"], spec["name"]))
        if HASH_LABEL not in spec["labels"]:
            module.fail_json(msg="rank %s: spec labels lack %s" % (name, HASH_LABEL))
        for key, kind in (("docker_argv", list), ("mounts", list), ("env", dict), ("labels", dict), ("command", list),
                          ("hashed", dict)):
            if not isinstance(spec[key], kind):
                module.fail_json(msg="rank %s: spec %s must be a %s, got %s; render it with the dgxspark.vllm.vllm_rank_spec "
                                     "filter" % (name, key, kind.__name__, type(spec[key]).__name__))
        bad_env = sorted(k for k, v in spec["env"].items() if v is None or isinstance(v, (bool, dict, list)))
        if bad_env:
            module.fail_json(msg="rank %s: spec env %s hold no string value (null would reach the container as 'None'); "
                                 "fix container.env in the lane" % (name, ", ".join(bad_env)))

    def run(argv):
        return module.run_command(argv)

    dr = DockerRank(run, docker=p["docker"], log_dir=p["log_dir"], stamp=p["log_stamp"])
    result = dict(changed=False, actions=[], changed_keys=[], log_path="", died=False, deaths=0,
                  last_errors=[], wait="skipped")
    try:
        current = dr.inspect(name)
        result["previous"] = _public(current)
        want_hash = spec["labels"][HASH_LABEL] if state == "started" else (current or {}).get("spec_hash", "")
        result["spec_hash"] = want_hash
        actions = plan(state, current, spec, p["recreate"])
        result["actions"] = actions
        result["changed"] = bool(actions)
        if state == "started" and current and current.get("spec_hash") != want_hash:
            result["changed_keys"] = diff_keys(current.get("spec_json"), spec["hashed"])
        died = bool(current) and not current["running"]
        result["died"] = died
        stored = dr.deaths(name)
        # query only reports the stored count; the count changes where ranks are started or removed
        deaths = stored if state == "query" else count_deaths(stored, current, p["reset_deaths"])
        result["deaths"] = deaths
        found = (current or {}).get("status", "absent")
        after_state = {"started": "running", "absent": "absent"}.get(state, found)
        result["diff"] = {
            "before": {"state": found, "spec_hash": (current or {}).get("spec_hash", "")},
            "after": {"state": after_state, "spec_hash": want_hash if state != "absent" else "",
                      "changed_keys": result["changed_keys"]},
        }
        if module.check_mode or (not actions and deaths == stored):
            result["container"] = _public(current)
            if died and not module.check_mode:
                result["last_errors"] = error_lines(dr.logs_text(name))
            module.exit_json(**result)
        if deaths != stored:
            dr.set_deaths(name, deaths)
        if "save_logs" in actions:
            result["log_path"] = dr.save_logs(name)
            if died:
                result["last_errors"] = error_lines(dr.read_log(result["log_path"]))
        if "remove" in actions:
            dr.remove(name)
        if "start" in actions:
            dr.start(spec)
            outcome, info, tail = dr.wait(name, p["wait_regex"], p["wait_timeout"], p["wait_interval"])
            result["wait"] = outcome
            result["container"] = _public(info)
            if outcome != "ready":
                result["last_errors"] = error_lines(tail) or (tail or "").splitlines()[-20:]
                # the failure catalogue names the cause (module_utils/diagnose.py, docs/catalogue.md)
                result["diagnosis"] = explain(tail, info if outcome == "exited" else None)
                module.fail_json(msg="rank %s: %s after docker run (%s); %slast log lines: %s" % (
                    name, "the container exited" if outcome == "exited" else
                    "no line matching %r within %s s" % (p["wait_regex"], p["wait_timeout"]),
                    "status %s, exit code %s" % (info["status"], info["exit_code"]) if info else "container gone",
                    ("diagnosis: %s; " % result["diagnosis"]) if result["diagnosis"] else "",
                    " | ".join(result["last_errors"][-5:]) or "none"), **result)
        else:
            result["container"] = _public(dr.inspect(name))
    except DockerError as e:
        result["container"] = result.get("container") or {}
        module.fail_json(msg="rank %s: %s" % (name, e), rc=e.rc, stdout=e.stdout, stderr=e.stderr, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
