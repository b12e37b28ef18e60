"""Issue 38, item 6: identical outputs on different students' hidden inputs are listed.

Before: the record kept points and reasons only, so two students whose outputs of a hidden check were
the same bit for bit, on hidden inputs drawn for each of them, went unseen unless their code looked
alike. Now the grader records a digest of each hidden check's outputs and of the reference's, and
``similarity --graded`` lists every group whose outputs agree while the correct outputs do not.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from attention_course.tools.grading.collusion import SAME_OUTPUTS, outcome_digest, same_output_groups
from attention_course.tools.grading.grader import discover, run_grading
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.grading.shards import write_class_record
from attention_course.tools.grading.similarity import compare_class, read_outputs

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


def _ok(value, grads=None) -> dict:
    outcome = {"status": "ok", "value": value}
    if grads is not None:
        outcome["grads"] = grads
    return outcome


def test_a_digest_tells_outputs_apart_by_value_dtype_shape_and_gradient():
    x = torch.arange(6.0).reshape(2, 3)
    base = outcome_digest([_ok(x)])
    assert base == outcome_digest([_ok(x.clone())])
    assert base != outcome_digest([_ok(x.double())])
    assert base != outcome_digest([_ok(x.reshape(3, 2))])
    y = x.clone()
    y[1, 2] = torch.nextafter(y[1, 2], torch.tensor(100.0))  # one bit
    assert base != outcome_digest([_ok(y)])
    assert base != outcome_digest([_ok(x, grads={"__seq__": [x]})])
    assert outcome_digest([_ok({"__seq__": [1, 2.5, "a", None]})]) != outcome_digest([_ok({"__seq__": [1, 2.5, "b", None]})])
    raised = {"status": "raised", "error_type": "ValueError", "message": "bad", "error_mro": [], "note": ""}
    assert outcome_digest([_ok(x), raised]) is None and outcome_digest([]) is None


def test_groups_need_the_same_outputs_and_different_correct_outputs():
    outputs = {"ann": {"ch01_ex1": [("c", "d1", "r1")]}, "bob": {"ch01_ex1": [("c", "d1", "r2")]},
               "cat": {"ch01_ex1": [("c", "d3", "r3")]},
               # same inputs (one shared seed): the same correct outputs are no sign of anything
               "dan": {"ch01_ex2": [("c", "d4", "r4")]}, "eve": {"ch01_ex2": [("c", "d4", "r4")]},
               # no digest: a call raised
               "fay": {"ch01_ex1": [("c", "", "r5")]}, "gus": {"ch01_ex1": [("c", "", "r6")]}}
    assert same_output_groups(outputs) == [("ch01_ex1", "c", ["ann", "bob"])]


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("collusion") / "class"
    folder.mkdir()
    for name in ("ann", "bob", "cat"):
        (folder / f"{name}.ipynb").write_text(SOLUTION_1.read_text(encoding="utf-8"), encoding="utf-8")
    subs, _ = discover(folder)
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("box")) as box:
        run = run_grading(subs, 1, seed=5, sandbox=box, time_limit=20, per_student=True)
    return folder, run


@linux_only
def test_honest_students_on_their_own_inputs_are_not_listed(graded_class, tmp_path):
    folder, run = graded_class
    out = tmp_path / "graded"
    write_class_record(out, run.plan, run.results, per_student=True, log_header=[], ignored=[], seconds=1.0)
    outputs = read_outputs(out, 1)
    assert set(outputs) == {"ann", "bob", "cat"}
    by_check = {}
    for student, labels in outputs.items():
        for label, items in labels.items():
            for check, digest, reference in items:
                assert digest and reference, (student, label, check)
                by_check.setdefault((label, check), []).append(digest)
    assert by_check and all(len(set(d)) == 3 for d in by_check.values())  # their own inputs, their own outputs
    assert not same_output_groups(outputs)
    report = compare_class(discover(folder)[0], 1, known=False, graded=out)
    assert not [f for f in report.findings if f.kind == SAME_OUTPUTS]


@linux_only
def test_a_classmates_outputs_on_other_inputs_are_listed_with_the_points_they_earned(graded_class, tmp_path):
    folder, run = graded_class
    ann, bob = (next(r for r in run.results if r.student == name) for name in ("ann", "bob"))
    label = next(e.label for e in ann.exercises if e.outputs)
    # bob hands in ann's outputs of every hidden check of one exercise (answers passed between them)
    mine, theirs = (next(e for e in r.exercises if e.label == label) for r in (bob, ann))
    mine.outputs = [[check, digest, reference] for (check, digest, _), (_, _, reference)
                    in zip(theirs.outputs, mine.outputs)]
    out = tmp_path / "graded"
    write_class_record(out, run.plan, run.results, per_student=True, log_header=[], ignored=[], seconds=1.0)
    report = compare_class(discover(folder)[0], 1, known=False, graded=out)
    found = [f for f in report.findings if f.kind == SAME_OUTPUTS]
    assert {(f.label, f.student) for f in found} == {(label, "ann"), (label, "bob")}
    assert all("bit for bit" in f.detail and f.points is not None for f in found)
    assert any("bob" in f.detail for f in found if f.student == "ann")
    # the record holds what was handed in: bob's line carries ann's digests for that exercise
    records = [json.loads(line) for line in (out / "record.jsonl").read_text(encoding="utf-8").splitlines()[1:]]
    bob_line = next(r for r in records if r["student"] == "bob")
    stored = next(e["outputs"] for e in bob_line["exercises"] if e["label"] == label)
    assert stored == [list(item) for item in mine.outputs] and stored[0][1] == theirs.outputs[0][1]
