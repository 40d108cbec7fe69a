import hashlib
import json
import os
import stat

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import image_stream
from tests.unit.plugins.modules.utils import run_module

SIZE = 3 * 1024 * 1024 + 17

# Stand-ins for the docker and ssh CLIs: `docker save` writes a deterministic tar-sized stream,
# `ssh user@addr CMD` runs CMD locally with FAKE_TARGET=addr, and `docker load` (the remote side)
# stores what it received so the test can compare bytes.
FAKE_DOCKER = r"""#!/bin/sh
case "$1" in
  image) echo '[{"Id": "sha256:0123", "Size": %(size)d}]' ;;
  save) python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * (%(size)d // 256) + b"x" * (%(size)d %% 256))' ;;
  load) cat > "$FAKE_OUT/$FAKE_TARGET.tar"; echo "Loaded image: test:1" ;;
esac
"""

FAKE_SSH = r"""#!/bin/bash
target="${@: -2:1}"; target="${target#*@}"
if [ "$target" = "198.18.0.99" ]; then echo "ssh: connect to host $target port 22: Connection refused" >&2; exit 255; fi
FAKE_TARGET="$target" exec sh -c "${@: -1}"
"""


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    out = tmp_path / "out"
    bindir.mkdir()
    out.mkdir()
    for name, body in (("docker", FAKE_DOCKER % {"size": SIZE}), ("ssh", FAKE_SSH)):
        p = bindir / name
        p.write_text(body)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_OUT", str(out))
    return tmp_path


def _expected_stream():
    return bytes(range(256)) * (SIZE // 256) + b"x" * (SIZE % 256)


def _args(tmp_path, targets, compress="gzip"):
    return {"image": "test:1", "targets": targets, "ssh_key": str(tmp_path / "k"),
            "known_hosts": str(tmp_path / "kh"), "compress": compress, "compress_level": 1,
            "remote_docker": "docker", "progress_file": str(tmp_path / "progress.json"),
            "chunk_bytes": 65536}


@pytest.mark.parametrize("compress", ["gzip", "none"])
def test_one_save_reaches_every_peer_byte_for_byte(fakes, compress):
    targets = [{"host": "spark-1", "address": "198.18.11.11", "user": "spark"},
               {"host": "spark-2", "address": "198.18.11.12", "user": "spark"}]
    result, failed = run_module(image_stream.main, _args(fakes, targets, compress))
    assert not failed, result
    want = hashlib.sha256(_expected_stream()).hexdigest()
    for addr in ("198.18.11.11", "198.18.11.12"):
        assert hashlib.sha256((fakes / "out" / (addr + ".tar")).read_bytes()).hexdigest() == want
    assert result["bytes"] == SIZE
    assert result["targets"] == {"spark-1": "ok", "spark-2": "ok"}
    if compress == "none":
        assert result["compressed_bytes"] == SIZE
    else:
        assert 0 < result["compressed_bytes"] < SIZE
    progress = json.loads((fakes / "progress.json").read_text())
    assert progress["done"] is True and progress["bytes"] == SIZE and progress["total_bytes"] == SIZE
    assert progress["targets"] == {"spark-1": "ok", "spark-2": "ok"}


def test_an_unreachable_peer_is_named_and_the_others_still_load(fakes):
    targets = [{"host": "spark-1", "address": "198.18.11.11", "user": "spark"},
               {"host": "spark-9", "address": "198.18.0.99", "user": "spark"}]
    result, failed = run_module(image_stream.main, _args(fakes, targets))
    assert failed
    assert result["msg"].startswith("image test:1 did not load on spark-9: spark-9: ")
    assert "Connection refused" in result["targets"]["spark-9"]
    assert result["targets"]["spark-1"] == "ok"
    assert (fakes / "out" / "198.18.11.11.tar").read_bytes() == _expected_stream()


def test_no_targets_is_a_no_op(fakes):
    result, failed = run_module(image_stream.main, _args(fakes, []))
    assert not failed and result["changed"] is False and result["bytes"] == 0
