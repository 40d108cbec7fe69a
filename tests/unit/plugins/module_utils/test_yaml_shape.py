"""yaml_shape: the shapes Ansible would hang on or misread are named by file and line (issue 29)."""
import glob
import os
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils.yaml_shape import MAX_DEPTH, shape_problems

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def bomb(levels=9):
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += ["l%d: &l%d [%s]" % (i, i, ",".join(["*l%d" % (i - 1)] * 9)) for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_named_fast():
    start = time.monotonic()
    problems = shape_problems("hosts.yml", bomb())
    assert time.monotonic() - start < 2
    assert problems == ["hosts.yml line 6: its aliases expand to more than 100000 values (an alias bomb); write the "
                        "values out, or alias a value at most once or twice"]


def test_a_few_aliases_and_merge_overrides_pass():
    assert shape_problems("h.yml", bomb(3)) == []
    assert shape_problems("h.yml", "a: &n {x: 1, y: 2}\nb:\n  <<: *n\n  x: 3\n") == []


def test_key_given_twice_names_both_places():
    assert shape_problems("h.yml", "a: 1\nb: {c: 2, c: 3}\n") == [
        "h.yml line 2: key c is given twice in one mapping (line:column 2:5 and 2:11); YAML keeps only the last one: "
        "remove one of them"]


def test_deep_nesting_and_non_yaml():
    assert shape_problems("h.yml", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)) == [
        "h.yml line 1: nested more than %d levels deep; flatten it" % MAX_DEPTH]
    assert shape_problems("h.ini", "[vllm_head]\nnode-a ansible_host=198.18.250.10\n") == []
    assert shape_problems("h.yml", "a:\n\tb: 1\n") == []  # a tab: Ansible's parser names it


def test_bom_file_reads(tmp_path):
    path = tmp_path / "h.yml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\na: 2\n")
    assert shape_problems(str(path)) == ["%s line 2: key a is given twice in one mapping (line:column 1:1 and 2:1); "
                                         "YAML keeps only the last one: remove one of them" % path]


def test_shipped_lanes_and_inventories_are_clean():
    files = glob.glob(os.path.join(ROOT, "lanes", "*.yml")) + \
        glob.glob(os.path.join(ROOT, "inventories", "**", "*.yml"), recursive=True)
    assert len(files) > 10
    assert [p for f in files for p in shape_problems(f)] == []
