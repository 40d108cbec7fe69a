"""A userspace OOM killer's effective floor against the plan's free memory at peak (module_utils/oom_floors.py).

Inputs: tests/fixtures/node/oom-killers (the earlyoom defaults file, nohang's thresholds, systemd-oomd's oomd.conf and
a drop-in). MemTotal 121.69 GiB is the GB10's (vLLM's startup line). Free at peak is MemAvailable minus the plan's
resident memory (memory_plan: margin_gib + os_reserve_gib).
"""
import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import oom_floors as O

from tests.unit.conftest import read_fixture

TOTAL = 121.69


def _fx(name):
    return read_fixture("node", "oom-killers", name)


def test_earlyoom_defaults_file_the_lower_of_m_and_M_counts():
    opts = O.earlyoom_args(_fx("etc-default-earlyoom-debian.txt"))
    assert opts == {"m": 12.0, "M": 8388608.0}
    assert O.earlyoom_floor_gib(opts, TOTAL) == (8.0, "-M 8388608")
    # -m alone: percent of MemTotal; no option at all: earlyoom's default -m 10
    assert O.earlyoom_floor_gib({"m": 12.0, "M": None}, TOTAL)[0] == pytest.approx(14.6028)
    assert O.earlyoom_floor_gib(O.earlyoom_args("/usr/bin/earlyoom -r 3600"), TOTAL) == (
        pytest.approx(12.169), "-m 10 (default)")


@pytest.mark.parametrize("cmdline, m, M", [
    ("/usr/bin/earlyoom -r 3600 -m 4", 4.0, None),
    ("/usr/bin/earlyoom -m4,2 -s 100", 4.0, None),
    ("earlyoom -M 4194304,2097152", None, 4194304.0),
    ("/usr/bin/earlyoom --avoid ^(sshd|vllm)$ -n", None, None),      # near miss: --avoid is not -m
    ("/usr/bin/earlyoom -s 5,2 -S 1048576", None, None),              # near miss: swap floors, not memory
])
def test_earlyoom_command_line_variants(cmdline, m, M):
    assert O.earlyoom_args(cmdline) == {"m": m, "M": M}


def test_nohang_soft_threshold_is_its_sigterm_floor():
    assert O.nohang_floor_gib(_fx("nohang.conf.excerpt"), TOTAL) == (pytest.approx(9.7352), "soft_threshold_min_mem = 8 %")
    assert O.nohang_floor_gib("soft_threshold_min_mem = 6144 M\n", TOTAL) == (6.0, "soft_threshold_min_mem = 6144 M")
    # near misses: the warning threshold and the swap threshold are not the kill floor
    assert O.nohang_floor_gib("warning_threshold_min_mem = 20 %\nsoft_threshold_min_swap = 10 %\n", TOTAL) is None


def test_oomd_the_last_file_that_sets_a_key_wins_and_comments_do_not():
    conf = "/etc/systemd/oomd.conf"
    dropin = "/etc/systemd/oomd.conf.d/50-site.conf"
    got = O.oomd_settings([(conf, _fx("oomd.conf")), (dropin, _fx("oomd.conf.d-50-site.conf"))])
    assert got == {"SwapUsedLimit": ("80%", dropin), "DefaultMemoryPressureLimit": ("50%", dropin)}
    assert O.oomd_settings([(conf, _fx("oomd.conf"))]) == {}


def _earlyoom(active=True, floor=8.0):
    return {"name": "earlyoom", "active": active, "floor_gib": floor, "setting": "-M 8388608",
            "file": "/etc/default/earlyoom"}


def test_a_floor_that_would_fire_at_peak_is_refused_with_file_value_and_fix():
    [msg] = O.killer_floor_errors("spark-b", [_earlyoom()], 9.5)
    assert msg == (
        "spark-b: earlyoom's floor is 8.00 GiB (-M 8388608 in /etc/default/earlyoom) and the plan leaves 9.50 GiB free "
        "at peak (margin 2.00 GiB): it would kill the rank as its weights finish loading (catalogue "
        "userspace_oom_killer). Fix: lower -m/-M there (or add the rank to --avoid), or stop it on serving nodes "
        "(systemctl disable --now earlyoom); the floor must stay below 7.50 GiB.")
    nohang = {"name": "nohang", "active": True, "floor_gib": 9.74, "setting": "soft_threshold_min_mem = 8 %",
              "file": "/etc/nohang/nohang.conf"}
    [msg] = O.killer_floor_errors("spark-a", [nohang], 9.5)
    assert msg.startswith("spark-a: nohang's floor is 9.74 GiB (soft_threshold_min_mem = 8 % in /etc/nohang/nohang.conf)")
    assert "lower soft_threshold_min_mem there" in msg


@pytest.mark.parametrize("killer, free", [
    (_earlyoom(active=False), 9.5),   # installed, not running
    (_earlyoom(floor=4.87), 9.5),     # -m 4 on 121.69 GiB: well below
    (_earlyoom(), 10.0),              # exactly floor + margin: stays quiet
    (_earlyoom(floor=None), 1.0),     # floor unknown (unreadable config): preflight's process-name warning stays
])
def test_near_misses_stay_quiet(killer, free):
    assert O.killer_floor_errors("spark-b", [killer], free) == []


# ---- read_killer_floors: the running killers of a /proc tree with the configs of an /etc tree (node_facts) ----------

def _proc(tmp_path, procs):
    """A /proc tree: {pid: (comm, argv)}."""
    root = tmp_path / "proc"
    for pid, (comm, argv) in procs.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return str(root)


def _etc(tmp_path, files):
    root = tmp_path / "root"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(root)


def test_running_earlyoom_reads_its_command_line_first_then_the_defaults_file(tmp_path):
    etc = _etc(tmp_path, {"etc/default/earlyoom": _fx("etc-default-earlyoom-debian.txt")})
    proc = _proc(tmp_path, {1: ("systemd", ["/sbin/init"]), 812: ("earlyoom", ["/usr/bin/earlyoom", "-m", "6"])})
    assert O.read_killer_floors(TOTAL, proc, etc) == [
        {"name": "earlyoom", "active": True, "floor_gib": 7.3, "setting": "-m 6", "file": "its command line"}]
    proc = _proc(tmp_path / "b", {812: ("earlyoom", ["/usr/bin/earlyoom", "-r", "3600"])})
    assert O.read_killer_floors(TOTAL, proc, etc) == [
        {"name": "earlyoom", "active": True, "floor_gib": 8.0, "setting": "-M 8388608",
         "file": "/etc/default/earlyoom"}]


def test_nohang_reads_the_config_its_command_line_names(tmp_path):
    etc = _etc(tmp_path, {"opt/site/nohang.conf": "soft_threshold_min_mem = 20 %\n",
                          "etc/nohang/nohang.conf": _fx("nohang.conf.excerpt")})
    proc = _proc(tmp_path, {90: ("nohang", ["/usr/bin/python3", "/usr/sbin/nohang", "--config",
                                            "/opt/site/nohang.conf"])})
    (got,) = O.read_killer_floors(TOTAL, proc, etc)
    want = (24.34, "soft_threshold_min_mem = 20 %", "/opt/site/nohang.conf")
    assert (got["floor_gib"], got["setting"], got["file"]) == want
    # the default config path; an unreadable config is reported with no floor (not judged)
    proc = _proc(tmp_path / "b", {90: ("nohang", ["/usr/sbin/nohang"])})
    assert O.read_killer_floors(TOTAL, proc, etc)[0]["file"] == "/etc/nohang/nohang.conf"
    assert O.read_killer_floors(TOTAL, proc, _etc(tmp_path / "c", {}))[0]["floor_gib"] is None


def test_nothing_running_or_only_oomd_gives_nothing(tmp_path):
    proc = _proc(tmp_path, {1: ("systemd", ["/sbin/init"]), 77: ("systemd-oomd", ["/lib/systemd/systemd-oomd"]),
                            78: ("tail", ["tail", "-F", "/var/log/earlyoom.log"])})   # a helper naming it: not it
    assert O.read_killer_floors(TOTAL, proc, _etc(tmp_path, {})) == []
