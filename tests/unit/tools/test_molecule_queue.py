"""tools/molecule_queue.py: make test's two lanes share the molecule scenarios through one queue file.

The scenarios are stand-ins (a shell line that records its name and the run that took it, sleeps, and fails for the
name `bad`), run for real by two processes of the tool at once; what each run did is read back from that record.
"""
import os
import subprocess
import sys

from tests.unit.conftest import ROOT

SCRIPT = os.path.join(ROOT, "tools", "molecule_queue.py")
# $0 is the scenario name the tool appends; RUN names the process that took it
STAND_IN = 'sh -c \'echo "$RUN $0" >> record; sleep 0.4; [ "$0" != bad ]\''


def start(tmp_path, run, scenarios, queue=True):
    argv = [sys.executable, SCRIPT, "--command", STAND_IN] + (["--queue", "q/queue"] if queue else []) + scenarios
    return subprocess.Popen(argv, cwd=str(tmp_path), env=dict(os.environ, RUN=run), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def record(tmp_path):
    with open(tmp_path / "record") as f:
        return [line.split() for line in f.read().splitlines()]


def test_two_runs_share_the_scenarios_each_runs_once_in_the_given_order(tmp_path):
    names = ["s%d" % i for i in range(6)]
    runs = [start(tmp_path, "one", names), start(tmp_path, "two", names)]
    outs = [p.communicate(timeout=60)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    rec = record(tmp_path)
    assert sorted(name for _run, name in rec) == names  # every scenario, none twice
    assert {run for run, _name in rec} == {"one", "two"}  # both worked (6 x 0.4 s, started together)
    assert (tmp_path / "q" / "queue").read_text().split() == names  # taken in the given order, whichever run took it
    assert "== molecule s0: " in "".join(outs) and "rc 0" in "".join(outs)


def test_a_failure_ends_both_runs_after_their_running_scenario(tmp_path):
    names = ["a", "bad", "c", "d", "e", "f", "g"]
    runs = [start(tmp_path, "one", names), start(tmp_path, "two", names)]
    for p in runs:
        p.communicate(timeout=60)
    assert sorted(p.returncode for p in runs) == [0, 1]
    taken = [name for _run, name in record(tmp_path)]
    assert "bad" in taken
    # at most the scenario the other run was running when bad failed, and nothing after that
    assert len(taken) <= 3, taken
    assert (tmp_path / "q" / "queue").read_text().split()[-1] == "FAILED"


def test_a_queue_left_failed_takes_nothing_and_without_a_queue_one_run_takes_all(tmp_path):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "queue").write_text("x\nFAILED\n")
    p = start(tmp_path, "one", ["a", "b"])
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 0 and "no scenario" in out
    assert not (tmp_path / "record").exists()
    p = start(tmp_path, "solo", ["a", "b", "c"], queue=False)
    p.communicate(timeout=30)
    assert p.returncode == 0
    assert record(tmp_path) == [["solo", "a"], ["solo", "b"], ["solo", "c"]]
