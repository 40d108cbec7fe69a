"""image_sync's probe step when the in-image probe cannot run (issue 30): the ranks' registry digests are compared
first, so a rank that holds another image is named even though no fingerprint could be taken.

Two local hosts run roles/image_sync/tasks/probe.yml for real (module image_fingerprint) against a stand-in docker
CLI: `docker image inspect` answers the captured registry-pulled image with a per-host RepoDigests entry, and
`docker run` fails the way an image without a shell does.
"""
import json
import os
import stat

import pytest

from tests.unit.conftest import ROOT, read_fixture, run_local_play

REF = "ghcr.io/lowlighter/metrics:v3.34"
HEAD_DIGEST = "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"
OTHER_DIGEST = "sha256:" + "1" * 64

DOCKER = r"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
host = os.environ.get("FAKE_DOCKER_HOST", "?")
if args[:1] == ["info"]:
    print(json.dumps({"Driver": "overlay2", "DockerRootDir": os.environ["FAKE_DOCKER_ROOT"]}))
elif args[:2] == ["image", "inspect"]:
    with open(os.environ["FAKE_DOCKER_INSPECT_" + host.replace("-", "_")]) as f:
        sys.stdout.write(f.read())
elif args[:1] == ["run"]:
    sys.stderr.write('docker: Error response from daemon: failed to create task for container: exec: "sh": '
                     'executable file not found in $PATH: unknown.\n')
    sys.exit(127)
else:
    sys.stderr.write("unexpected: %r\n" % args)
    sys.exit(2)
"""


def _inspect(digest):
    body = "[{" + read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt").strip().rstrip(",") + "}]"
    info = json.loads(body)
    info[0]["RepoDigests"] = ["ghcr.io/lowlighter/metrics@" + digest]
    return json.dumps(info)


@pytest.mark.parametrize("worker_digest", [OTHER_DIGEST, HEAD_DIGEST])
def test_a_probe_that_cannot_run_still_names_the_rank_whose_digest_differs(tmp_path, monkeypatch, worker_digest):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(DOCKER)
    (bindir / "docker").chmod(stat.S_IRWXU)
    (tmp_path / "docker-root").mkdir()
    for host, digest in (("n0", HEAD_DIGEST), ("n1", worker_digest)):
        (tmp_path / ("inspect-" + host)).write_text(_inspect(digest))
        monkeypatch.setenv("FAKE_DOCKER_INSPECT_" + host, str(tmp_path / ("inspect-" + host)))
    monkeypatch.setenv("FAKE_DOCKER_ROOT", str(tmp_path / "docker-root"))
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])
    probe = os.path.join(ROOT, "roles", "image_sync", "tasks", "probe.yml")
    tasks = [{"name": "probe step", "environment": {"FAKE_DOCKER_HOST": "{{ inventory_hostname }}"},
              "block": [{"name": "probe", "ansible.builtin.include_tasks": probe}]}]
    play_vars = {"_image_sync_ref": REF, "_image_sync_paths": [], "_image_sync_packages": [],
                 "_image_sync_head": "n0", "image_sync_state_dir": str(tmp_path / "state"),
                 "image_sync_probe_cache_dir": ""}
    rc, results, tail = run_local_play(tmp_path / "play", ["n0", "n1"], play_vars, tasks)
    assert rc != 0, tail
    probes = results["Image_sync | Probe the image (digest, storage driver, content fingerprint)"]
    assert [probes[h]["registry_digest"] for h in ("n0", "n1")] == [HEAD_DIGEST, worker_digest]
    assert probes["n0"]["fingerprint"] is None and "failed (rc 127)" in probes["n0"]["probe_error"]
    refusal = results["Image_sync | Refuse ranks whose probe could not run, naming a rank whose registry digest "
                      "differs"]["n0"]
    msg = refusal["msg"]
    assert msg[0] == "the content fingerprint of %s could not be taken (no rank was started):" % REF
    probe_lines = [line for line in msg if "the fingerprint probe in image" in line]
    assert [line.split(":")[0] for line in probe_lines] == ["n0", "n1"]
    assert probe_lines[0].endswith('exec: "sh": executable file not found in $PATH: unknown.; the image needs sh '
                                   'and sha256sum')
    digest_lines = [line for line in msg if "the tag named different images" in line]
    if worker_digest == HEAD_DIGEST:
        assert digest_lines == []  # the same image everywhere: only the probe is at fault
    else:
        assert digest_lines == ["n1: %s is %s here but %s on n0 (fingerprints not taken); the tag named different "
                                "images when they were pulled. Fix: pull one digest on every rank (image.reference "
                                "ghcr.io/lowlighter/metrics@%s) or re-run image_sync"
                                % (REF, OTHER_DIGEST, HEAD_DIGEST, HEAD_DIGEST)]
