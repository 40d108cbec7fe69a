"""tools/timed_stages.py: make test's steps and lanes, run for real on a throw-away Makefile.

Each target appends its name and its start and end times to a file, so the order and the overlap the runner
produced are read back from what the targets did, not from the runner's own table.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.unit.conftest import ROOT

SCRIPT = os.path.join(ROOT, "tools", "timed_stages.py")
_spec = importlib.util.spec_from_file_location("timed_stages", SCRIPT)
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)

STEP = """import os, sys, time
with open("trace", "a") as f:
    f.write("%s start %.3f\\n" % (sys.argv[1], time.time()))
    f.write("%s nice %d\\n" % (sys.argv[1], os.nice(0)))
    f.write("%s cgroup %s\\n" % (sys.argv[1], os.environ.get("DGXSPARK_CGROUP_PARENT", "-")))
time.sleep(float(sys.argv[2]))
with open("trace", "a") as f:
    f.write("%s end %.3f\\n" % (sys.argv[1], time.time()))
print("output of " + sys.argv[1])
"""
MAKEFILE = """\
a: ; @python3 step.py a 0.1
slow: ; @python3 step.py slow 3
quick: ; @python3 step.py quick 0.2
after: ; @python3 step.py after 0.1
bad: ; @python3 step.py bad 1 && printf '\\033[31mfatal: [pf-0]: FAILED! => {"msg": "why"}\\033[0m\\nok: [x] failed=0\\n' && exit 3
"""


@pytest.mark.parametrize("args, want", [
    (["a"], [[["a"]]]),
    (["a", "b"], [[["a"]], [["b"]]]),
    (["a,b|c", "d"], [[["a", "b"], ["c"]], [["d"]]]),
    (["x||y,", ""], [[["x"], ["y"]]]),
])
def test_steps_are_lanes_of_targets(args, want):
    assert ts.parse_steps(args) == want


def _run(tmp_path, *steps, cgroup_root=None, driver="cgroupfs"):
    """Runs the script on the throw-away Makefile; cgroup_root stands in for /sys/fs/cgroup/cpu (by default one
    that does not exist, so the machine's own cgroups are never touched)."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / "step.py").write_text(STEP)
    opts = ["--cgroup-root", str(cgroup_root or tmp_path / "no-cgroup"), "--docker-cgroup-driver", driver]
    # make test runs this very test inside its second lane, whose cgroup is in the environment
    env = dict((k, v) for k, v in os.environ.items() if k != "DGXSPARK_CGROUP_PARENT")
    proc = subprocess.run([sys.executable, SCRIPT, "--json", "t.json"] + opts + list(steps), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    trace = {}
    if (tmp_path / "trace").exists():
        for line in (tmp_path / "trace").read_text().splitlines():
            name, what, when = line.split()
            trace.setdefault(name, {})[what] = when if what == "cgroup" else float(when)
    table = json.loads((tmp_path / "t.json").read_text())
    return proc, trace, table


def test_lanes_run_side_by_side_and_steps_in_order(tmp_path):
    proc, trace, table = _run(tmp_path, "a", "slow|quick,after", "a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # lane 2 ran quick then after while lane 1's slow ran: the two lanes' spans overlap (on a loaded machine either
    # lane's first Python may start late, so which one starts first is not the point); the second step's a waited
    # for both lanes
    assert trace["quick"]["end"] <= trace["after"]["start"]
    assert max(trace["slow"]["start"], trace["quick"]["start"]) < min(trace["slow"]["end"], trace["after"]["end"])
    assert trace["a"]["start"] >= max(trace["slow"]["end"], trace["after"]["end"])
    # the first lane at the runner's own priority, the later lane's targets 10 lower (nice(1) stops at 19: make
    # test runs this very test in its own nice-10 lane)
    base = os.nice(0)
    later = min(base + ts.LATER_LANE_NICE, 19)
    assert [trace[t]["nice"] for t in ("a", "slow", "quick", "after")] == [base, base, later, later]
    rows = [(r["stage"], r["lane"], r["rc"], r["side_by_side"], r["nice"]) for r in table["stages"]]
    assert rows == [("a", 1, 0, False, 0), ("slow", 1, 0, True, 0), ("quick", 2, 0, True, 10),
                    ("after", 2, 0, True, 10), ("a", 1, 0, False, 0)]
    # a side-by-side target's output is printed whole, after its own header, never cut by the other lane's
    out = proc.stdout
    block = out[out.index("== stage slow output"):out.index("== stage slow: rc 0")]
    assert "output of slow" in block and "output of quick" not in block
    assert (tmp_path / "reports" / "stages" / "quick.log").read_text().strip().endswith("output of quick")


def test_a_later_lane_runs_in_its_own_cpu_cgroup_and_names_it_to_what_it_starts(tmp_path):
    root = tmp_path / "cpu"
    root.mkdir()
    (root / "cpu.shares").write_text("1024\n")  # what a cgroup-v1 CPU hierarchy has at its root
    (tmp_path / "cpuacct").mkdir()
    proc, trace, table = _run(tmp_path, "slow|quick,after", cgroup_root=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "dgxspark-lane2" / "cpu.shares").read_text() == "%d\n" % ts.LATER_LANE_CPU_SHARES
    # lane 2's make processes wrote their own pids, in the CPU group and its accounting twin (a plain file here
    # keeps the last; a real cgroup.procs adds)
    for hierarchy in (root, tmp_path / "cpuacct"):
        joined = (hierarchy / "dgxspark-lane2" / "cgroup.procs").read_text().split()
        assert len(joined) == 1 and int(joined[0]) > 1
    # no cpuacct.usage in the stand-in: the lane's CPU seconds are unknown, the machine's are counted
    assert [r["lane_cpu_s"] for r in table["stages"]] == [None, None, None]
    assert all(r["machine_cpu_s"] >= 0 for r in table["stages"])
    assert [trace[t]["cgroup"] for t in ("slow", "quick", "after")] == ["-", "/dgxspark-lane2", "/dgxspark-lane2"]
    assert [(r["stage"], r["cgroup"]) for r in table["stages"]] == [
        ("slow", None), ("quick", "/dgxspark-lane2"), ("after", "/dgxspark-lane2")]
    assert "cpu cgroup /dgxspark-lane2" in proc.stdout


@pytest.mark.parametrize("shares_file, driver", [(False, "cgroupfs"), (True, "systemd")])
def test_no_cpu_cgroup_where_docker_could_not_use_it(tmp_path, shares_file, driver):
    # cgroup v2 or no CPU controller (no cpu.shares), or docker's systemd driver (it takes slices, not paths)
    root = tmp_path / "cpu"
    root.mkdir()
    if shares_file:
        (root / "cpu.shares").write_text("1024\n")
    proc, trace, table = _run(tmp_path, "slow|quick", cgroup_root=root, driver=driver)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert trace["quick"]["cgroup"] == "-" and not (root / "dgxspark-lane2").exists()
    assert [r["cgroup"] for r in table["stages"]] == [None, None]


def test_a_lane_that_starts_before_dockerd_gets_its_cgroup_on_a_later_target(tmp_path):
    # a lane that starts beside the image build (which starts dockerd) finds no driver yet
    root = tmp_path / "cpu"
    root.mkdir()
    (root / "cpu.shares").write_text("1024\n")
    answers = iter([None, "cgroupfs"])
    runner = ts.Runner("make", 0, str(root), lambda: next(answers))
    assert runner.cgroup(2) is None and not (root / "dgxspark-lane2").exists()
    assert runner.cgroup(2) == "/dgxspark-lane2"
    assert runner.cgroup(2) == "/dgxspark-lane2"  # made once: the driver is not asked again (next() would raise)
    assert (root / "dgxspark-lane2" / "cpu.shares").read_text() == "%d\n" % ts.LATER_LANE_CPU_SHARES


def test_a_failing_target_ends_its_lane_and_the_run(tmp_path):
    proc, trace, table = _run(tmp_path, "bad,after|slow,quick", "a")
    assert proc.returncode == 2  # make's code for a failed recipe, passed through
    by = dict(((r["stage"], r["lane"]), r) for r in table["stages"])
    assert by[("bad", 1)]["rc"] == 2 and by[("after", 1)]["rc"] is None
    assert by[("slow", 2)]["rc"] == 0  # the other lane finishes the target it was running ...
    assert by[("quick", 2)]["rc"] is None and by[("a", 1)]["rc"] is None  # ... and starts no new one
    assert set(trace) == {"bad", "slow"}
    assert table["rc"] == 2 and "not run (a target failed)" in proc.stdout
    # after the table, the failed stage's error lines again (CI shows the end of the output), colours removed,
    # and not the recap line of a play that failed nothing
    tail = proc.stdout[proc.stdout.index("(a target failed)"):]
    why = tail[tail.index("== why stage bad failed"):].splitlines()
    assert why[1:] == ['fatal: [pf-0]: FAILED! => {"msg": "why"}']


def test_failure_lines_keep_the_last_distinct_ones():
    log = "\n".join(["ERROR boom %d" % (i % 50) for i in range(120)] + ["ok=3 failed=0", "E   assert 1 == 2"])
    lines = ts.failure_lines(log, limit=3)
    assert lines == ["ERROR boom 48", "ERROR boom 49", "E   assert 1 == 2"]


def test_lane_cpu_seconds_are_read_from_cpuacct_usage_in_nanoseconds(tmp_path):
    (tmp_path / "cpuacct.usage").write_text("2500000000\n")
    assert ts.cgroup_cpu_s(str(tmp_path)) == 2.5
    assert ts.cgroup_cpu_s(str(tmp_path / "gone")) is None
