"""The API key and the HF token never show in what a run leaves on the controller (issue 29), without the fleet:
validate.yml and doctor.yml (its report and tarball written, every node unreachable: ssh is the recorder) at -vvv,
then the output and every file the runs wrote are scanned: doctor_dest, reports/, ~/.ansible, ~/.cache, /tmp and
the checkout's untracked files, tarball members read uncompressed. The fleet's own scan (nodes, rank logs) is
tests/e2e/faults/test_30_security.py.
"""
import os
import secrets
import subprocess
import tarfile
import time

from .conftest import ROOT, run_playbook, write_inventory

HOME = os.path.expanduser("~")


def _new_files(roots, since, skip):
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.join(dirpath, d).startswith(skip)]
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    if os.path.isfile(path) and os.path.getmtime(path) >= since:
                        yield path
                except OSError:
                    continue


def _holds(path, needles):
    """The needles found in a file, a tarball's members included."""
    found = set()
    try:
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    data = tar.extractfile(member).read() if member.isfile() else b""
                    found |= set(n for n in needles if n.encode() in data)
        with open(path, "rb") as f:
            data = f.read()
        found |= set(n for n in needles if n.encode() in data)
    except (OSError, tarfile.TarError, EOFError):
        pass
    return found


def _untracked():
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                         text=True, check=False).stdout
    return [os.path.join(ROOT, ln[3:]) for ln in out.splitlines() if ln[3:]]


def test_secrets_never_in_output_or_any_file_a_run_leaves(tmp_path):
    key = "sk-leakscan" + secrets.token_hex(16)
    token = "hf_leakscan" + secrets.token_hex(16)
    since = time.time() - 1
    (tmp_path / "inv").mkdir()
    inv = write_inventory(tmp_path / "inv", 2, {"vllm_lane": "sim_cpu_tp2", "vllm_api_key": key,
                                                "model_weights_hf_token": token})
    dest = tmp_path / "out"
    rc_v, out_v = run_playbook(inv, "playbooks/validate.yml", args=["-vvv"], timeout=240)
    rc_d, out_d = run_playbook(inv, "playbooks/doctor.yml", args=["-vvv", "-e", "doctor_dest=%s" % dest],
                               timeout=240)
    assert rc_v == 0, out_v
    assert "Traceback" not in out_d, out_d
    tarballs = [p for p in _new_files([str(dest)], since, ()) if p.endswith(".tar.gz")]
    assert len(tarballs) == 1, (out_d, list(_new_files([str(dest)], since, ())))
    for output in (out_v, out_d):
        assert key not in output and token not in output
    roots = [str(dest), os.path.join(ROOT, "reports"), os.path.join(HOME, ".ansible"),
             os.path.join(HOME, ".cache"), "/tmp"]
    skip = (str(tmp_path / "inv"),)  # the inventory holds them by design
    scanned = 0
    leaks = {}
    for path in list(_new_files(roots, since, skip)) + _untracked():
        if path.startswith(skip) or not os.path.isfile(path):
            continue
        scanned += 1
        found = _holds(path, [key, token])
        if found:
            leaks[path] = sorted(found)
    assert scanned >= 3, scanned  # doctor.md, the tarball, the per-host files at least
    assert leaks == {}, leaks
