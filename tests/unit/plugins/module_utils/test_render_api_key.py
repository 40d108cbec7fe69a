"""The API key lane option (issue 11, vllm_api_key): the head reads the key from a bound 0600 file into
VLLM_API_KEY, so the rendered spec, the `docker run` argv and the labels carry its path and a salted
fingerprint, never the key; a changed key changes every rank's spec hash (the group restarts), no key keeps
the hash a keyless group had before the option existed."""
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.filter.vllm_rank import vllm_api_key_fingerprint
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import (
    API_KEY_CONTAINER_FILE,
    API_KEY_WRAPPER,
    RenderError,
    api_key_fingerprint,
    group_errors,
    render_rank,
    run_argv,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
KEY = "sk-test-5d41402abc4b2a76b9719d911017c592"
KEY_FILE = "/etc/dgxspark-vllm/api-key"


def lane(name):
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        return yaml.safe_load(f)


def host(the_lane, rank, key=None):
    mounts = [{"host": "/var/lib/dgxspark-vllm/fixes/" + f["name"], "container": f["container_path"], "mode": "ro"}
              for f in the_lane.get("fix_files") or []]
    return {"rank": rank, "host_ip": "198.18.21.1%d" % rank, "master_addr": "198.18.21.10",
            "fabric_env": {"GLOO_SOCKET_IFNAME": "enp1s0f1np1"}, "kernel_fix_mounts": mounts,
            "api_key_fingerprint": api_key_fingerprint(key), "api_key_file": KEY_FILE}


def test_fingerprint_is_salted_stable_and_not_the_key():
    fp = api_key_fingerprint(KEY)
    assert fp == api_key_fingerprint(KEY)
    assert fp.startswith("pbkdf2-sha256:") and len(fp) == len("pbkdf2-sha256:") + 32
    assert KEY not in fp
    assert fp != api_key_fingerprint(KEY + "x")
    assert api_key_fingerprint("") == "" and api_key_fingerprint(None) == ""
    assert vllm_api_key_fingerprint(KEY) == fp


def test_fingerprint_error_never_holds_the_key():
    with pytest.raises(RenderError) as e:
        api_key_fingerprint(12345)
    assert str(e.value) == "vllm_api_key must be a string, got int"


def test_no_key_keeps_the_keyless_spec_and_argv():
    the_lane = lane("sim_cpu_tp2")
    before = dict(host(the_lane, 0))
    before.pop("api_key_fingerprint")
    before.pop("api_key_file")
    plain, keyless = render_rank(the_lane, before), render_rank(the_lane, host(the_lane, 0))
    assert keyless["spec_hash"] == plain["spec_hash"]
    assert run_argv(keyless) == run_argv(plain)
    assert "api_key" not in keyless


def test_head_argv_reads_the_key_from_the_file_and_execs_the_lane_entrypoint():
    the_lane = lane("sim_cpu_tp2")
    head = render_rank(the_lane, host(the_lane, 0, KEY))
    argv = run_argv(head)
    image_at = argv.index("dgxspark-sim/vllm-cpu:0.32.0")
    assert argv[argv.index("--entrypoint") + 1] == "/bin/sh"
    assert argv[image_at + 1:image_at + 7] == ["-c", API_KEY_WRAPPER, "vllm-rank", "vllm", "serve", "/models/tiny-glm"]
    assert "%s:%s:ro" % (KEY_FILE, API_KEY_CONTAINER_FILE) in argv
    assert "DGXSPARK_API_KEY_FILE=%s" % API_KEY_CONTAINER_FILE in argv
    assert "--api-key" not in argv
    assert KEY not in json.dumps(head) and KEY not in " ".join(argv)


def test_worker_gets_neither_file_nor_wrapper_but_the_same_hash():
    the_lane = lane("sim_cpu_tp2")
    head, worker = render_rank(the_lane, host(the_lane, 0, KEY)), render_rank(the_lane, host(the_lane, 1, KEY))
    argv = run_argv(worker)
    assert argv[argv.index("--entrypoint") + 1] == "vllm"
    assert not any(API_KEY_CONTAINER_FILE in a for a in argv)
    assert worker["api_key"]["host_file"] is None
    assert head["spec_hash"] == worker["spec_hash"]
    assert group_errors({"h": head, "w": worker}) == []


def test_a_changed_or_removed_key_changes_every_ranks_hash():
    the_lane = lane("sim_cpu_tp2")
    hashes = {}
    for key in (None, KEY, KEY + "2"):
        hashes[key] = [render_rank(the_lane, host(the_lane, r, key))["spec_hash"] for r in (0, 1)]
    assert len(set(h[0] for h in hashes.values())) == 3
    assert all(h[0] == h[1] for h in hashes.values())
    label = json.loads(render_rank(the_lane, host(the_lane, 0, KEY))["labels"]["dgxspark.vllm.spec"])
    assert label["api_key_fingerprint"] == api_key_fingerprint(KEY)


def test_lane_without_entrypoint_uses_vllm_serve():
    the_lane = lane("tp2_dflash2")
    assert the_lane["container"]["entrypoint"] is None
    h = host(the_lane, 0, KEY)
    h["fabric_env"] = {}
    argv = run_argv(render_rank(the_lane, h))
    at = argv.index("--entrypoint")
    assert argv[at + 1] == "/bin/sh"
    image_at = argv.index(the_lane["image"]["reference"])
    assert argv[image_at + 1:image_at + 6] == ["-c", API_KEY_WRAPPER, "vllm-rank", "vllm", "serve"]


def test_head_without_a_key_file_is_refused():
    the_lane = lane("sim_cpu_tp2")
    h = host(the_lane, 0, KEY)
    h["api_key_file"] = ""
    with pytest.raises(RenderError) as e:
        render_rank(the_lane, h)
    assert "api_key_file" in str(e.value) and KEY not in str(e.value)


@pytest.mark.parametrize("content,rc,env_key,err", [
    (KEY + "\n", 0, KEY, ""),
    ("", 64, "", "dgxspark.vllm: the API key file {path} is empty"),
])
def test_the_wrapper_exports_the_key_and_execs(tmp_path, content, rc, env_key, err):
    path = tmp_path / "key"
    path.write_text(content)
    proc = subprocess.run(["/bin/sh", "-c", API_KEY_WRAPPER, "vllm-rank", "sh", "-c",
                           'printf "%s|%s" "$VLLM_API_KEY" "$*"', "x", "serve", "--port", "8000"],
                          env={"DGXSPARK_API_KEY_FILE": str(path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == rc
    if rc == 0:
        assert proc.stdout == "%s|serve --port 8000" % env_key
    assert proc.stderr.strip() == err.format(path=path)


def test_missing_key_file_stops_the_wrapper(tmp_path):
    proc = subprocess.run(["/bin/sh", "-c", API_KEY_WRAPPER, "vllm-rank", "true"],
                          env={"DGXSPARK_API_KEY_FILE": str(tmp_path / "absent"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 64
    assert "No such file" in proc.stderr
