"""tools/cite_catalogue.py: the guard that keeps old citation labels out of the collection.

The labels come from documents users do not have (section labels such as A.6 or §C.6, field cases Fnn,
gotchas G#n, samples Snn); each must point at a catalogue entry, a shipped document or a shipped capture.
"""
import importlib.util
import os

import pytest

from tests.unit.conftest import ROOT

_spec = importlib.util.spec_from_file_location("cite_catalogue", os.path.join(ROOT, "tools", "cite_catalogue.py"))
cite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cite)
REFS = cite.load_refs()


def rewrite(text, rel="plugins/x.py"):
    missing = set()
    out = cite.rewrite(text, REFS, [], missing, None, rel)
    return out, missing


def test_no_label_is_left_in_the_collection(capsys):
    """The whole tree (the default paths) has nothing left to rewrite and no label nothing maps."""
    assert cite.main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("text, want", [
    ("first boots are slow (A.6).", "first boots are slow (docs/health.md)."),
    ("GID rule (§C.6, catalogue nccl_wrong_gid)", "GID rule (docs/rdma.md, catalogue nccl_wrong_gid)"),
    ("the flags (B.4/B.5) and", "the flags (docs/lanes.md) and"),
    ("marker (C.8/D.5); it is", "marker (catalogue fix_file_drift, docs/tp-padding.md); it is"),
    ("an empty directory (G #16/#22):", "an empty directory (catalogue file_not_found, image_differs):"),
    ("| G 16, D.4 |", "| catalogue file_not_found, docs/tp-padding.md |"),
    ("drafter heads (spec D.3, F12)", "drafter heads (catalogue drafter_heads; docs/tp-padding.md)"),
    ("[N/A] -> null (S05)", "[N/A] -> null (tests/fixtures/node/gb10-query-name-memory-total-driver.csv)"),
    ("(G11, G12)", "(catalogue tool_call_mangled)"),
    ("driver (C.3)", "driver (catalogue image_cuda_newer_than_driver)"),
])
def test_bare_labels_are_rewritten(text, want):
    assert rewrite(text) == (want, set())


@pytest.mark.parametrize("text", [
    'DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2}',  # safetensors dtypes, quoted
    "nvidia-nccl-cu13 2.30.7 and vLLM 0.12.0",  # versions
    "catalogue topk_wall; docs/tp-padding.md",  # already a citation
    "GB10 at 2.1 GHz, BF16 weights",
])
def test_other_text_is_left_alone(text):
    assert rewrite(text) == (text, set())


def test_a_document_does_not_cite_itself():
    # in docs/health.md, A.6 named the public source of the rule the page states
    assert rewrite("(A.6, A.7)", "docs/health.md")[0] == "(docs/sources.md, docs/watchdog.md)"


def test_check_fails_on_a_label_nothing_maps(tmp_path, capsys):
    f = tmp_path / "note.md"
    f.write_text("rule from gotcha G#99 and section A.6\n", encoding="utf-8")
    assert cite.main(["--check", str(f)]) == 1
    out = capsys.readouterr().out
    assert "G#99" in out and "1 lines in 1 files to rewrite" in out
    assert f.read_text(encoding="utf-8") == "rule from gotcha G#99 and section A.6\n"  # --check changes nothing


def test_check_fails_on_an_unmapped_label_alone(tmp_path, capsys):
    f = tmp_path / "note.md"
    f.write_text("see G#99\n", encoding="utf-8")
    assert cite.main(["--check", str(f)]) == 1
    assert "labels with no catalogue entry (left as they were): G#99" in capsys.readouterr().out


def test_every_target_is_shipped():
    """Each document and capture a label now points at exists in the collection."""
    for target in list(cite.DOC_REFS.values()) + list(cite.SAMPLE_REFS.values()):
        assert os.path.isfile(os.path.join(ROOT, target)), target
