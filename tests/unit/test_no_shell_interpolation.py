"""No inventory or lane string reaches a shell (issue 19): every task in roles/ and playbooks/ is read and a
task fails this test when it
  - runs ansible.builtin.shell / raw (or a pipe lookup) with a Jinja expression in its command text,
  - runs ansible.builtin.command free-form (a string, split on spaces) with a Jinja expression in it, or
  - passes a Jinja expression inside the script of `sh -c` / `bash -c` / `python3 -c` in an argv.
Values go in argv elements (or as positional parameters after a constant script), never into shell text.

The sim_fleet role is exempt: it builds the simulated fleet on the developer's machine from the repository's
own sim inventories and never runs against a deployment; its shell tasks are listed here so none is added.
"""
import glob
import json
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
JINJA = re.compile(r"{{|{%")
SHELL_MODULES = ("shell", "ansible.builtin.shell", "ansible.legacy.shell", "raw", "ansible.builtin.raw")
COMMAND_MODULES = ("command", "ansible.builtin.command", "ansible.legacy.command")
INTERPRETERS = re.compile(r"(^|/)(sh|bash|dash|zsh|python[0-9.]*)$")
EXEMPT_ROLES = ("sim_fleet",)


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(k in node for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")):
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key) or [])
        else:
            yield node


def _files():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
                       + glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml"))
                       + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + [os.path.join(ROOT, "site.yml")]):
        rel = os.path.relpath(path, ROOT)
        if rel.split(os.sep)[0] == "roles" and rel.split(os.sep)[1] in EXEMPT_ROLES:
            continue
        out.append(rel)
    return out


def _constant(script, task, constants):
    """True when the script is one reference to a constant string (task vars or the role's vars/main.yml)."""
    match = re.match(r"^{{\s*(_\w+)\s*}}$", str(script).strip())
    if not match:
        return False
    value = (task.get("vars") or {}).get(match.group(1), constants.get(match.group(1)))
    # a literal in braces ({{ '{{.Id}}' }}) is still constant text
    return isinstance(value, str) and not JINJA.search(re.sub(r"{{\s*'[^']*'\s*}}", "", value))


def problems(task, constants=None):
    """Why a task (dict) lets a value reach a shell; empty when it does not."""
    constants = constants or {}
    found = []
    for module in SHELL_MODULES:
        if module in task:
            args = task[module]
            text = args if isinstance(args, str) else (args or {}).get("cmd", "") or (args or {}).get("_raw_params", "")
            if JINJA.search(str(text)):
                found.append("%s with a Jinja expression in the shell text" % module)
    for module in COMMAND_MODULES:
        if module in task:
            args = task[module]
            if isinstance(args, str) and JINJA.search(args):
                found.append("%s free-form with a Jinja expression (split on spaces); use argv" % module)
            argv = (args or {}).get("argv") if isinstance(args, dict) else None
            if isinstance(argv, list):
                for idx, arg in enumerate(argv[:-1]):
                    if INTERPRETERS.search(str(arg)) and argv[idx + 1] == "-c" and idx + 2 < len(argv) \
                            and JINJA.search(str(argv[idx + 2])) and not _constant(argv[idx + 2], task, constants):
                        found.append("%s argv runs %s -c with a Jinja expression in the script" % (module, arg))
    text = json.dumps(task)
    if re.search(r"lookup\(\s*'(ansible\.builtin\.)?pipe'", text) and re.search(r"pipe'[^)]*~", text):
        found.append("a pipe lookup (a shell on the controller) built from a variable")
    return found


def _role_constants(rel):
    parts = rel.split(os.sep)
    path = os.path.join(ROOT, "roles", parts[1], "vars", "main.yml") if parts[0] == "roles" else ""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


def _all_tasks():
    for rel in _files():
        with open(os.path.join(ROOT, rel)) as f:
            data = yaml.safe_load(f) or []
        constants = _role_constants(rel)
        for task in _tasks(data):
            yield rel, task, constants


# Known and left: a pipe lookup hashing a file the role itself extracted (quoted path from a validated name).
ALLOWED = {("roles/kernel_fix/tasks/materialize.yml", "Kernel_fix | Point URL and image sources at their controller copies")}


def test_no_task_interpolates_a_value_into_a_shell():
    bad = []
    for rel, task, constants in _all_tasks():
        if (rel, task.get("name")) in ALLOWED:
            continue
        for why in problems(task, constants):
            bad.append("%s: %r: %s" % (rel, task.get("name"), why))
    assert bad == []


@pytest.mark.parametrize("task,expected", [
    ({"ansible.builtin.shell": "echo {{ x }}"}, 1),
    ({"ansible.builtin.shell": {"cmd": "rm -rf {{ path | quote }}"}}, 1),
    ({"shell": "echo 3 > /proc/sys/vm/drop_caches"}, 0),
    ({"ansible.builtin.command": "docker rm {{ name }}"}, 1),
    ({"ansible.builtin.command": {"argv": ["docker", "rm", "{{ name }}"]}}, 0),
    ({"ansible.builtin.command": {"argv": ["sh", "-c", "echo {{ name }}"]}}, 1),
    ({"ansible.builtin.command": {"argv": ["/bin/bash", "-c", "echo \"$1\"", "x", "{{ name }}"]}}, 0),
    ({"ansible.builtin.command": {"argv": ["/usr/bin/python3", "-c", "print('{{ v }}')"]}}, 1),
    ({"ansible.builtin.command": {"argv": ["python3", "-c", "{{ _script }}", "{{ v }}"]},
      "vars": {"_script": "import sys; print(sys.argv[1])"}}, 0),
    ({"ansible.builtin.command": {"argv": ["python3", "-c", "{{ _script }}"]}, "vars": {"_script": "print('{{ v }}')"}}, 1),
    ({"ansible.builtin.debug": {"msg": "{{ lookup('ansible.builtin.pipe', 'cat ' ~ f) }}"}}, 1),
])
def test_the_detector_finds_interpolation(task, expected):
    assert len(problems(task)) == expected


def test_sim_fleet_shell_tasks_are_counted():
    """The exempt role's shell tasks; a new one fails here and must be justified or written with argv."""
    count = 0
    for path in glob.glob(os.path.join(ROOT, "roles", "sim_fleet", "tasks", "*.yml")):
        with open(path) as f:
            for task in _tasks(yaml.safe_load(f) or []):
                count += bool(problems(task))
    assert count == 9
