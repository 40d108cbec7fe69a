"""weights_read_check on a shard written by the safetensors library, opened as root and as nobody for real
(these tests run as root, as CI does; they skip elsewhere because only root can take another user's identity)."""
import os
import shutil
import tempfile

import pytest
from safetensors import safe_open

from ansible_collections.dgxspark.vllm.plugins.module_utils.tp_padding import header_of
from ansible_collections.dgxspark.vllm.plugins.modules import weights_read_check
from tests.unit.plugins.modules.utils import run_module

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="taking another user's identity needs root")


@pytest.fixture
def shard_dir(fixture_path):
    """A 0755 directory under /tmp (which nobody can traverse) holding a copy of the shard."""
    d = tempfile.mkdtemp(prefix="weights-read-check-", dir="/tmp")
    os.chmod(d, 0o755)
    dst = os.path.join(d, "model-00001-of-00001.safetensors")
    shutil.copyfile(fixture_path("weights", "layer45-toy.safetensors"), dst)
    yield dst
    shutil.rmtree(d)


def test_the_stdlib_reader_counts_what_the_safetensors_library_lists(fixture_path):
    path = fixture_path("weights", "layer45-toy.safetensors")
    header, start = header_of(path)
    with safe_open(path, framework="numpy") as f:
        names = sorted(f.keys())
        meta = f.metadata()
    assert sorted(k for k in header if k != "__metadata__") == names and len(names) == 3
    assert header["__metadata__"] == meta == {"format": "pt"}
    assert start + 192 == os.path.getsize(path)  # 3 float16 tensors of 32 elements after the header


@needs_root
def test_nobody_reads_a_0644_shard_and_counts_its_tensors(shard_dir):
    os.chmod(shard_dir, 0o644)
    got = weights_read_check.read_as(shard_dir, "nobody")
    assert got == {"readable": True, "tensors": 3, "error": "", "user": "nobody"}


@needs_root
def test_a_0600_shard_is_unreadable_for_nobody_but_not_for_root(shard_dir):
    os.chmod(shard_dir, 0o600)
    got = weights_read_check.read_as(shard_dir, "nobody")
    assert got["readable"] is False and got["tensors"] is None
    assert "Permission denied" in got["error"] and shard_dir in got["error"]
    assert weights_read_check.read_as(shard_dir, "root")["tensors"] == 3


@needs_root
def test_a_truncated_shard_is_reported_with_the_format_error(shard_dir):
    with open(shard_dir, "r+b") as f:
        f.truncate(100)  # the header says 384 bytes follow the length
    os.chmod(shard_dir, 0o644)
    got = weights_read_check.read_as(shard_dir, "nobody")
    assert got["readable"] is False and "not a safetensors file" in got["error"] and "not JSON" in got["error"]


@needs_root
def test_module_result_and_an_unknown_user(shard_dir):
    os.chmod(shard_dir, 0o644)
    result, failed = run_module(weights_read_check.main, {"path": shard_dir})
    assert not failed and result["readable"] is True and result["tensors"] == 3 and result["user"] == "nobody"
    assert result["path"] == shard_dir and result["changed"] is False
    result, failed = run_module(weights_read_check.main, {"path": shard_dir, "user": "no-such-user-15"})
    assert failed and "no-such-user-15 does not exist" in result["msg"]
    assert "model_weights_read_check_user" in result["msg"]
