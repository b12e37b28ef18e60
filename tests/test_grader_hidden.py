"""Hidden checks stay hidden and differ per student (issue 21, item 8).

Before: one grading seed gave every student the same hidden inputs (students who shared outputs
shared them), and the Gradescope zip marked every test visible, so each resubmission showed the
pass/fail of every hidden check.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from attention_course.tools.grading.gradescope import _student_identity
from attention_course.tools.grading.grader import Submission, build_plan, student_plan, run_grading, student_seed
from attention_course.tools.grading.reports import gradescope_results
from attention_course.tools.grading.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


def _first_hidden_input(plan):
    ep = next(ep for ep in plan.exercises if any(not cp.check.public for cp in ep.checks))
    cp = next(cp for cp in ep.checks if not cp.check.public)
    return next(a for a in cp.calls[0].args if isinstance(a, torch.Tensor))


def test_each_student_gets_their_own_reproducible_hidden_inputs(tmp_path):
    seeds = {name: student_seed(2024, name) for name in ("alice", "bob", "alice~2")}
    assert len(set(seeds.values())) == 3 and student_seed(2024, "alice") == seeds["alice"]
    assert student_seed(2025, "alice") != seeds["alice"]
    class_plan = build_plan(1, 2024)
    plans = {name: student_plan(class_plan, seed) for name, seed in seeds.items()}
    inputs = {name: _first_hidden_input(plan) for name, plan in plans.items()}
    assert not torch.equal(inputs["alice"], inputs["bob"]) or inputs["alice"].shape != inputs["bob"].shape
    # The public checks' grading inputs are the class's; the hidden ones are each student's (and since
    # a solution scores full marks below on each, the child ran each student's own hidden inputs).
    for ep_class, ep_alice in zip(class_plan.exercises, plans["alice"].exercises):
        for cp_class, cp_alice in zip(ep_class.checks, ep_alice.checks):
            assert (cp_class is cp_alice) == cp_class.check.public
    with Sandbox(jobs=2, workdir=tmp_path / "sandbox") as box:
        subs = [Submission(name, SOLUTION_1) for name in ("alice", "bob")]
        run = run_grading(subs, 1, seed=2024, sandbox=box, time_limit=10)
        shared = run_grading(subs, 1, seed=2024, sandbox=box, time_limit=10, per_student=False)
    assert {r.student: r.seed for r in run.results} == {"alice": seeds["alice"], "bob": seeds["bob"]}
    assert all(r.total == r.max_total for r in run.results)
    log = "\n".join(run.log)
    assert f"alice: {run.results[0].max_total:g}/{run.results[0].max_total:g} (hidden inputs: seed {seeds['alice']})" in log
    assert {r.seed for r in shared.results} == {2024}


def test_gradescope_keys_the_seed_to_the_submitter_and_hides_hidden_checks(tmp_path):
    (tmp_path / "submission_metadata.json").write_text(json.dumps(
        {"users": [{"email": "b@uni.edu", "id": 42}, {"email": "a@uni.edu", "id": 7}]}))
    assert _student_identity(tmp_path) == "42+7"
    (tmp_path / "submission_metadata.json").write_text("[" * 100_000)
    assert _student_identity(tmp_path) == "submission"
    with Sandbox(jobs=2, workdir=tmp_path / "sandbox") as box:
        run = run_grading([Submission("7", SOLUTION_1)], 1, seed=3, sandbox=box, time_limit=10)
    data = gradescope_results(run.results[0], run.plan)
    hidden = [t for t in data["tests"] if t["name"].endswith("hidden checks")]
    public = [t for t in data["tests"] if t["name"].endswith("public checks")]
    assert hidden and public and len(hidden) + len(public) == len(data["tests"])
    assert {t["visibility"] for t in hidden} == {"after_published"}
    assert {t["visibility"] for t in public} == {"visible"}
    assert {t["visibility"] for t in gradescope_results(run.results[0], run.plan,
                                                        hidden_visibility="visible")["tests"]} == {"visible"}
    with pytest.raises(ValueError, match="hidden_visibility"):
        gradescope_results(run.results[0], run.plan, hidden_visibility="soon")
