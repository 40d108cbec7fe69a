"""Where outputs go (issue 31): the health and bench reports and the doctor's tarballs default to reports/ under the
directory ansible-playbook was started from, never inside the collection. The defaults are rendered by
ansible-playbook itself, started from an empty directory with PWD set as a shell sets it."""
import json
import os
import subprocess
import sys

import yaml

from tests.unit.conftest import ROOT

DEFAULTS = {"vllm_health_report_dir": "roles/vllm_health/defaults/main.yml",
            "vllm_bench_report_dir": "roles/vllm_bench/defaults/main.yml"}


def _doctor_dest_expr():
    with open(os.path.join(ROOT, "playbooks", "doctor.yml")) as f:
        plays = yaml.safe_load(f)
    return [p["vars"]["doctor_dest"] for p in plays if "doctor_dest" in (p.get("vars") or {})][0]


def _render(tmp_path, env_pwd):
    work = tmp_path / "work"
    work.mkdir()
    tasks = [{"name": "load %s" % path, "ansible.builtin.include_vars": {"file": os.path.join(ROOT, path)}}
             for path in sorted(set(DEFAULTS.values()))]
    show = dict((k, "{{ %s }}" % k) for k in DEFAULTS)
    show["doctor_dest"] = _doctor_dest_expr()
    tasks.append({"name": "show", "ansible.builtin.debug": {"msg": show}})
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    env.pop("ANSIBLE_CONFIG", None)
    if env_pwd is None:
        env.pop("PWD", None)
    else:
        env["PWD"] = env_pwd
    p = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                       capture_output=True, text=True, env=env, cwd=str(work), check=False)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = json.loads(p.stdout[p.stdout.index("{"):])
    return work, out["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"]


def test_reports_land_under_the_directory_the_user_ran_from(tmp_path):
    work, got = _render(tmp_path, str(tmp_path / "work"))
    assert got == {"vllm_health_report_dir": "%s/reports" % work, "vllm_bench_report_dir": "%s/reports" % work,
                   "doctor_dest": "%s/reports/doctor" % work}
    assert not any(v.startswith(ROOT) for v in got.values())


def test_without_pwd_the_playbooks_parent_is_the_fallback(tmp_path):
    # include_vars from a play in tmp_path: playbook_dir is tmp_path, so the fallback is its parent
    _work, got = _render(tmp_path, None)
    assert got["vllm_health_report_dir"] == "%s/reports" % tmp_path.parent


def test_a_run_whose_plan_id_differs_from_the_saved_plan_says_so(tmp_path):
    from tests.unit.conftest import run_local_play
    with open(os.path.join(ROOT, "lanes", "sim_cpu_tp2.yml")) as f:
        lane = yaml.safe_load(f)
    lane["tensor_parallel_size"] = 1
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "plan-latest.md").write_text("# Bring-up plan aaaaaaaaaaaa\n")
    task = {"name": "plan doc", "ansible.builtin.include_role": {"name": "dgxspark.vllm.preflight",
                                                                 "tasks_from": "plan_doc.yml"},
            "vars": {"preflight_plan_doc_plan": "{{ vllm_lane_spec | dgxspark.vllm.memory_plan }}",
                     "preflight_plan_doc_bringup": "{{ vllm_lane_spec | dgxspark.vllm.memory_plan_bringup({'node-a': 0},"
                                                   " vllm_lane_spec | dgxspark.vllm.memory_plan) }}",
                     "preflight_plan_doc_measured": True, "preflight_plan_dir": str(reports)}}
    rc, tasks, tail = run_local_play(tmp_path / "run", ["node-a"], {"vllm_lane_spec": lane}, [task],
                                     host_vars={"vllm_rank": 0, "ansible_host": "198.18.10.10"})
    assert rc == 0, tail
    (msg,) = [h["msg"] for name, hosts in tasks.items() if name.endswith("whether this run still follows the saved plan")
              for h in hosts.values()]
    pid = sorted(p.name for p in reports.iterdir() if p.name not in ("plan-latest.md",))[0][5:-3]
    assert msg == ("WARNING: the inventory or lane changed since plan aaaaaaaaaaaa was saved; this run follows another. "
                   "Advice: read the new plan before anything loads. plan %s (1 nodes, lane sim_cpu_tp2): %s/plan-%s.md"
                   % (pid, reports, pid))
    assert (reports / "plan-latest.md").read_text().startswith("# Bring-up plan %s\n" % pid)
