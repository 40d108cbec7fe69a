# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""The one docker client of this collection's modules: the docker CLI, called with an argv list.

Shaped like community.docker's CLI helper (module_utils/_common_cli.py): a runner is injected
(`run(argv) -> (rc, stdout, stderr)`, usually AnsibleModule.run_command) and every call is an argv
list. Why the CLI and not the Docker SDK or community.docker's API client: those need the Python
`requests` library on the node, which a DGX Spark node of this collection is not required to carry
(the simulated nodes do not have it).

`docker inspect` JSON is parsed here and nowhere else: parse_container() for containers,
parse_image() for images. Callers keep the domain logic (rank state machine, fingerprints, health).

The one shell is MERGED_LOGS_SCRIPT, a fixed script that merges a command's stdout and stderr in
docker's order (run_command keeps them apart); every value reaches it as a positional argument,
never inside the script text, so nothing is quoted by hand.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# $0 is the docker CLI, "$@" its arguments: `docker logs ...` with stderr folded into stdout.
MERGED_LOGS_SCRIPT = 'exec "$0" logs "$@" 2>&1'
# Same, written to the file named by the last positional argument (saved before a removal).
SAVE_LOGS_SCRIPT = 'exec "$0" logs --timestamps "$1" >"$2" 2>&1'


class DockerError(Exception):
    """A docker call failed; rc, stdout and stderr are kept for the module's fail_json."""

    def __init__(self, msg, rc=None, stdout="", stderr=""):
        Exception.__init__(self, msg)
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


def is_not_found(stderr):
    """docker's "No such container/image/object" answer (an absent object, not a failure)."""
    text = (stderr or "").lower()
    return "no such" in text


def load_inspect(text):
    """`docker inspect` / `docker image inspect` stdout -> the first object, or None for `[]`.

    Output that is empty, HTML, not JSON or not objects raises DockerError naming it (never a traceback).
    """
    stripped = (text or "").strip()
    what = "docker inspect printed"
    fix = "check the docker CLI on this node (docker version)"
    if not stripped:
        raise DockerError("%s nothing; %s" % (what, fix), 0, text, "%s nothing" % what)
    if stripped[:1] == "<":
        raise DockerError("%s HTML, not JSON (starts %r); %s" % (what, stripped[:40], fix), 0, text[:300],
                          "%s HTML, not JSON (starts %r)" % (what, stripped[:40]))
    try:
        data = json.loads(stripped)
    except ValueError as e:
        raise DockerError("%s no JSON (%s; starts %r); %s" % (what, e, stripped[:40], fix), 0, text[:300],
                          "%s no JSON (%s; starts %r)" % (what, e, stripped[:40]))
    if isinstance(data, list):
        data = data[0] if data else None
    if data is not None and not isinstance(data, dict):
        raise DockerError("%s a JSON %s, not an object; %s" % (what, type(data).__name__, fix), 0, text[:300],
                          "%s a JSON %s, not an object" % (what, type(data).__name__))
    return data


def parse_container(obj):
    """One `docker inspect --type container` object -> the fields our modules and roles use."""
    if not obj:
        return None
    state = obj.get("State") or {}
    config = obj.get("Config") or {}
    env = {}
    for item in config.get("Env") or []:
        key, _sep, value = item.partition("=")
        env[key] = value
    return {
        "id": obj.get("Id", ""),
        "name": (obj.get("Name") or "").lstrip("/"),
        "image": config.get("Image", ""),
        "image_id": obj.get("Image", ""),
        "status": state.get("Status", ""),
        "running": bool(state.get("Running")),
        "exit_code": state.get("ExitCode"),
        "oom_killed": bool(state.get("OOMKilled")),
        "pid": state.get("Pid") or 0,
        "error": state.get("Error") or None,
        "started_at": state.get("StartedAt", ""),
        "finished_at": state.get("FinishedAt", ""),
        "labels": dict(config.get("Labels") or {}),
        "env": env,
        "mounts": [{"source": m.get("Source"), "destination": m.get("Destination"),
                    "rw": bool(m.get("RW")), "type": m.get("Type")} for m in obj.get("Mounts") or []],
    }


def parse_image(obj):
    """One `docker image inspect` object -> {id, layers, repo_tags, repo_digests, env, size}.

    `id` is local to one node (never compared across nodes); `layers` are the RootFS diff IDs,
    kept by save/load and registries and independent of the storage driver.
    """
    if not obj:
        return None
    config = obj.get("Config") or {}
    rootfs = obj.get("RootFS") or {}
    return {
        "id": obj.get("Id"),
        "layers": list(rootfs.get("Layers") or []),
        "repo_tags": list(obj.get("RepoTags") or []),
        "repo_digests": list(obj.get("RepoDigests") or []),
        "env": list(config.get("Env") or []),
        "size": obj.get("Size"),
    }


class DockerCLI(object):
    """argv-only docker calls through an injected runner."""

    def __init__(self, run, docker="docker", environ=None):
        self._run = run
        self.docker = docker or "docker"
        self.environ = environ

    def call(self, *args, **kw):
        """Run `docker <args>`; raise DockerError on a non-zero rc unless check=False."""
        argv = [self.docker] + [str(a) for a in args]
        rc, out, err = self._run(argv) if self.environ is None else self._run(argv, environ_update=self.environ)
        if rc != 0 and kw.get("check", True):
            raise DockerError("`docker %s` failed on this node (rc %s): %s"
                              % (" ".join(argv[1:4]), rc, (err or out).strip()), rc, out, err)
        return rc, out or "", err or ""

    def _inspect(self, args, what, name):
        rc, out, err = self.call(*args, check=False)
        if rc != 0:
            if is_not_found(err):
                return None
            raise DockerError("docker inspect %s %s failed (rc %s): %s" % (what, name, rc, (err or out).strip()),
                              rc, out, err)
        return load_inspect(out)

    def inspect_container_raw(self, name):
        return self._inspect(["inspect", "--type", "container", name], "container", name)

    def inspect_container(self, name):
        """The parsed container (parse_container), or None when there is none of that name."""
        return parse_container(self.inspect_container_raw(name))

    def inspect_image_raw(self, ref):
        return self._inspect(["image", "inspect", ref], "image", ref)

    def inspect_image(self, ref):
        """The parsed image (parse_image), or None when this node does not hold it."""
        return parse_image(self.inspect_image_raw(ref))

    def info(self):
        """`docker info` as JSON (a dict); raises DockerError when dockerd does not answer."""
        _rc, out, _err = self.call("info", "--format", "{{json .}}")
        return json.loads(out or "{}")

    def logs(self, name, tail=None):
        """stdout and stderr, each in order, stderr last (tracebacks go to stderr); '' on failure."""
        args = ["logs"] + (["--tail", str(int(tail))] if tail else []) + [name]
        rc, out, err = self.call(*args, check=False)
        return out + err if rc == 0 else ""

    def merged_logs(self, name, tail=None):
        """stdout and stderr interleaved in docker's order; falls back to logs() when sh fails."""
        argv = ["sh", "-c", MERGED_LOGS_SCRIPT, self.docker] + (["--tail", str(int(tail))] if tail else []) + [name]
        rc, out, _err = self._run(argv)
        if rc != 0:
            return self.logs(name, tail)
        return out or ""

    def save_logs(self, name, path):
        """Write the container's full log (timestamps, both streams) to path on this node."""
        rc, out, err = self._run(["sh", "-c", SAVE_LOGS_SCRIPT, self.docker, name, path])
        if rc != 0:
            raise DockerError("saving docker logs of %s to %s failed (rc %s): %s; the container is kept"
                              % (name, path, rc, (err or out).strip()), rc, out, err)
        return path

    def remove(self, name):
        self.call("rm", "-f", name)

    def run(self, argv_after_docker):
        """`docker run ...` from a rendered argv (without the leading docker); returns the new id."""
        _rc, out, _err = self.call(*argv_after_docker)
        return out.strip()
