"""One licence everywhere it is stated: galaxy.yml, LICENSE, every role's meta and README, every Python header."""
import glob
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tracked(pattern):
    return sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))


def test_galaxy_licence_and_the_licence_file_agree():
    with open(os.path.join(ROOT, "galaxy.yml")) as f:
        assert yaml.safe_load(f)["license"] == ["MIT"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        assert f.readline().strip() == "MIT License"


def test_no_role_or_python_file_states_another_licence():
    stated = []
    for path in _tracked("roles/*/meta/main.yml"):
        with open(path) as f:
            lic = yaml.safe_load(f)["galaxy_info"]["license"]
        if lic != "MIT":
            stated.append("%s: %s" % (os.path.relpath(path, ROOT), lic))
    for pattern in ("plugins/**/*.py", "roles/**/*.md", "roles/*/files/*", "tests/**/*.py", "tools/*.py"):
        for path in _tracked(pattern):
            if not os.path.isfile(path) or path == os.path.abspath(__file__):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(2000)
            if "General Public License" in head or "GPL-3.0" in head:
                stated.append(os.path.relpath(path, ROOT))
    assert stated == [], stated
