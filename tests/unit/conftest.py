import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# FQCN imports (ansible_collections.dgxspark.vllm...) resolve through the self-link.
sys.path.insert(0, os.path.join(ROOT, "collections"))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


@pytest.fixture
def fixture_path():
    def _path(*parts):
        p = os.path.join(FIXTURES, *parts)
        assert os.path.exists(p), "missing fixture %s" % p
        return p
    return _path


def read_fixture(*parts, strip_comments=True):
    """Read a captured fixture; leading '# ' metadata lines are dropped (fixtures/README)."""
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    if strip_comments:
        while lines and lines[0].startswith("#"):
            lines.pop(0)
    return "".join(lines)
