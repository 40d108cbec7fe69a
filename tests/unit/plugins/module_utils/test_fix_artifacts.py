"""Fix files the user supplies (issue 31): where a source is found, the user's pins, and the report validate prints.

Real lanes (lanes/*.yml) are read as shipped; the files are stand-ins written here with and without their markers.
"""
import hashlib
import os

import pytest
import yaml

from ansible_collections.dgxspark.vllm.plugins.module_utils import image as im
from ansible_collections.dgxspark.vllm.plugins.module_utils import kinds
from ansible_collections.dgxspark.vllm.plugins.module_utils.lane import validate_lane
from tests.unit.conftest import ROOT


def lane(name):
    with open(os.path.join(ROOT, "lanes", name + ".yml")) as f:
        return yaml.safe_load(f)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def supply(artifacts, item, data=None):
    """Write a stand-in for a lane's fix file where the user would put it; it holds the marker unless data is given."""
    path = artifacts / item["src"]
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = ("# stand-in for %s\n# %s\n" % (item["name"], item.get("marker") or "no marker")).encode()
    path.write_bytes(data)
    return data


REAL = ["tp2_dflash2", "tp2_dflash2_ct", "tp2_mtp", "tp3_dflash2", "tp3_dflash2_ct", "tp3_mtp", "tp3_mtp_ct",
        "tp4_dflash2_1m"]


@pytest.mark.parametrize("name", REAL)
def test_every_real_lane_leaves_its_controller_files_to_the_user_and_says_where_they_come_from(name):
    spec = lane(name)
    assert validate_lane(spec, name) == []
    files = [f for f in spec["fix_files"] if im.fix_file_kind(f["src"]) == "file"]
    assert files, name
    for f in files:
        # not shipped: no pin the collection could know, a source the user can look up, a path under the artifacts dir
        assert f["sha256"] is None and f["source"]["project"].count("/") == 1 and f["source"]["path"], f
        assert not f["src"].startswith(("/", "files/")), f
    # the only empty pin left is a file read out of the image (its own hash becomes the pin)
    assert [f["name"] for f in spec["fix_files"] if f["sha256"] == ""] == \
        [f["name"] for f in spec["fix_files"] if f["src"].startswith("image:")]


@pytest.mark.parametrize("item, want", [
    ({"name": "a", "src": "a.py", "sha256": "", "container_path": "/x/a.py"}, "only for an image: source"),
    ({"name": "a", "src": "https://example.invalid/a.py", "sha256": "", "container_path": "/x/a.py"},
     "only for an image: source"),
    ({"name": "a", "src": "a.py", "sha256": None, "container_path": "/x/a.py"}, "needs source:"),
])
def test_a_lane_may_not_leave_a_pin_empty_or_to_the_user_without_a_source(item, want):
    spec = dict(lane("sim_cpu_tp2"), fix_files=[item])
    errors = validate_lane(spec, "sim_cpu_tp2")
    assert len(errors) == 1 and want in errors[0] and "fix_files[0] (a)" in errors[0], errors


def test_near_misses_pass_the_lane_rules():
    # '' with an image: source, and null with a source: both are what the rules allow
    spec = dict(lane("sim_cpu_tp2"), fix_files=[
        {"name": "h", "src": "image:/usr/include/x.h", "sha256": "", "container_path": "/x/x.h"},
        {"name": "a", "src": "https://example.invalid/a.py", "sha256": None, "container_path": "/x/a.py",
         "source": {"project": "owner/repo", "path": "a.py"}}])
    assert validate_lane(spec, "sim_cpu_tp2") == []


def test_a_relative_source_is_the_users_file_first_then_the_collections(tmp_path):
    mine, coll = tmp_path / "inv" / "files", tmp_path / "coll"
    (coll / "files" / "fixes").mkdir(parents=True)
    (coll / "files" / "fixes" / "f.py").write_text("shipped")
    assert im.fix_file_path("files/fixes/f.py", str(mine), str(coll)) == str(coll / "files" / "fixes" / "f.py")
    (mine / "files" / "fixes").mkdir(parents=True)
    (mine / "files" / "fixes" / "f.py").write_text("mine")
    assert im.fix_file_path("files/fixes/f.py", str(mine), str(coll)) == str(mine / "files" / "fixes" / "f.py")
    assert im.fix_file_path("y3/x.py", str(mine), str(coll)) == str(coll / "y3" / "x.py")  # neither: the fallback
    assert im.fix_file_path("/abs/x.py", str(mine), str(coll)) == "/abs/x.py"
    assert im.fix_file_path("y3/x.py", "", str(coll)) == str(coll / "y3" / "x.py")


def test_tp3_missing_then_unpinned_then_pinned(tmp_path):
    spec = lane("tp3_dflash2")
    art = tmp_path / "files"
    report = im.fix_file_report(spec, str(art), ROOT)
    states = dict((r["name"], r["state"]) for r in report["rows"])
    files = [f for f in spec["fix_files"] if f["src"].startswith(("y3/", "fc/"))]
    assert states == dict([(f["name"], "missing") for f in files] + [("nvrtc_h", "from the image")])
    assert len(report["errors"]) == len(files) == 5
    first = report["errors"][0]
    assert "fix file sparse_attn_indexer_kpool is missing: no file %s/y3/sparse_attn_indexer_kpool.py" % art in first
    assert "yalindogusahin/glm53-flash-nvfp4-tp3, scripts/build-indexer-overlay.py" in first and "then pin it" in first

    data = dict((f["name"], supply(art, f)) for f in files)
    report = im.fix_file_report(spec, str(art), ROOT)
    assert [r["state"] for r in report["rows"]] == ["unpinned"] * 5 + ["from the image"]
    for f, err in zip(files, report["errors"]):
        # each file with its own hash, its marker found (or said to have none), and where to check it
        assert ": %s/%s has sha256 %s;" % (art, f["src"], sha(data[f["name"]])) in err, err
        assert ("its marker %r is there" % f.get("marker") in err) == bool(f.get("marker")), err
        assert ("it has no marker to check it by" in err) == (not f.get("marker")), err
    # then the one mapping to set: one key, every pin (separate lines would repeat the key)
    pins = dict((n, sha(d)) for n, d in data.items())
    assert len(report["errors"]) == 6
    assert report["errors"][-1].endswith("vllm_fix_file_sha256: {%s}" % ", ".join(
        "%s: %s" % kv for kv in sorted(pins.items())))
    pinned, errors = im.apply_fix_pins(spec, pins, kinds.check)
    assert errors == [] and validate_lane(pinned, "tp3_dflash2") == []
    report = im.fix_file_report(pinned, str(art), ROOT)
    assert report["errors"] == [] and [r["state"] for r in report["rows"]] == ["present"] * 5 + ["from the image"]
    assert spec["fix_files"][0]["sha256"] is None  # the shipped lane itself is left as it was


def test_a_wrong_file_is_not_offered_a_pin_and_a_changed_file_differs(tmp_path):
    spec = lane("tp2_dflash2")
    item = spec["fix_files"][0]
    art = tmp_path / "files"
    supply(art, item, b"def topk(x):\n    return persistent_topk(x)\n")  # the unfixed file: no marker
    report = im.fix_file_report(spec, str(art), ROOT)
    assert report["rows"][0]["state"] == "no marker"
    assert "does not contain its marker 'multi_processor_count >= 78'" in report["errors"][0]
    assert "vllm_fix_file_sha256" not in report["errors"][0]
    good = supply(art, item)
    pins = {item["name"]: sha(good)}
    pinned, errors = im.apply_fix_pins(spec, pins, kinds.check)
    assert errors == []
    edited = supply(art, item, good + b"# edited\n")
    report = im.fix_file_report(pinned, str(art), ROOT, user_pins=pins)
    assert report["rows"][0]["state"] == "differs"
    # the pin is the user's: re-pin it (the new mapping comes last), never "update the lane"
    assert "but your pin (vllm_fix_file_sha256) is %s: put back the file you pinned" % sha(good) in report["errors"][0]
    assert report["errors"][-1].endswith("vllm_fix_file_sha256: {%s: %s}" % (item["name"], sha(edited)))
    assert "fix_files[].sha256" not in " ".join(report["errors"])
    # without knowing the pin is the user's (a lane's own pin), the lane's message stands
    report = im.fix_file_report(pinned, str(art), ROOT)
    assert "the lane pins %s" % sha(good) in report["errors"][0]
    supply(art, item, b"")
    assert im.fix_file_report(pinned, str(art), ROOT)["rows"][0]["state"] == "empty"


@pytest.mark.parametrize("pins, want", [
    ({"sparse_attn_indexer": "0" * 64}, "has no fix file sparse_attn_indexer (its fix files: sparse_attn_indexer_kpool)"),
    ({"sparse_attn_indexer_kpool": "ABC"}, "is not a sha256"),
    ({"sparse_attn_indexer_kpool": "A" * 64}, "is not a sha256"),
    ({"sparse_attn_indexer_kpool": 12}, "= 12 must be a string"),
    (["sparse_attn_indexer_kpool"], "must be a mapping of fix file name to sha256, got a list; in group_vars write"),
    ("{sparse_attn_indexer_kpool: abc}", "got a string; in group_vars write"),
])
def test_bad_pins_are_refused_naming_the_key(pins, want):
    _lane, errors = im.apply_fix_pins(lane("tp4_dflash2_1m"), pins, kinds.check)
    assert len(errors) == 1 and want in errors[0], errors


def test_a_pin_for_a_file_the_lane_pins_itself_is_refused():
    spec = lane("sim_cpu_tp2")
    name = spec["fix_files"][0]["name"]
    _lane, errors = im.apply_fix_pins(spec, {name: "1" * 64}, kinds.check)
    assert errors and "pins this file itself (sha256 %s)" % spec["fix_files"][0]["sha256"] in errors[0]
    assert im.apply_fix_pins(spec, {}, kinds.check) == (spec, [])
    assert im.apply_fix_pins(spec, None, kinds.check) == (spec, [])


def test_an_unpinned_url_is_listed_and_refused_and_a_pinned_one_is_left_to_kernel_fix(tmp_path):
    item = {"name": "u", "src": "https://example.invalid/u.py", "sha256": None, "container_path": "/x/u.py",
            "source": {"project": "owner/repo", "path": "u.py"}}
    spec = dict(lane("sim_cpu_tp2"), fix_files=[item])
    report = im.fix_file_report(spec, str(tmp_path), ROOT)
    assert report["rows"][0]["state"] == "unpinned" and "download it, check it against owner/repo" in report["errors"][0]
    spec = dict(spec, fix_files=[dict(item, sha256="2" * 64)])
    report = im.fix_file_report(spec, str(tmp_path), ROOT)
    assert report["rows"][0]["state"] == "downloaded" and report["errors"] == []


def test_the_simulated_lane_finds_its_shipped_stand_in(tmp_path):
    report = im.fix_file_report(lane("sim_cpu_tp2"), str(tmp_path / "files"), ROOT)
    assert report["errors"] == [] and report["rows"][0]["state"] == "present"
    assert report["rows"][0]["path"] == os.path.join(ROOT, "files", "fixes", "sparse_attn_indexer_kpool_sim.py")
    assert report["lines"][0] == "fix files of lane sim_cpu_tp2 (1): name | source | pin | state"
