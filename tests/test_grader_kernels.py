"""Issue 43: the sandboxed grader grades chapter 11's Triton kernels, written by a student in their
exercise cell, through triton's interpreter on the CPU, under the same walls as every chapter (the
seccomp allow-list, Landlock, namespaces); and the zygote of chapters 1-10 never imports triton.

The student's kernel below is our own, written for this test in another style than the solution
notebook's (three passes over the row: maximum, sum, weights); its twin without the boundary masks
must lose points (the interpreter reads past the row, the check sees it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.ondemand import needed
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.notebook import _src, exercise_cell_index, with_exercise_code

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")

KERNEL = '''import os
assert os.environ.get("TRITON_INTERPRET") == "1", "the child runs kernels in the interpreter"
assert os.environ["TRITON_CACHE_DIR"].startswith(os.environ["HOME"]), "triton's cache stays in the scratch folder"


@triton.jit
def three_pass_softmax(src, lengths, dst, width, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    keep = tl.load(lengths + r)
    lanes = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)
    for start in range(0, keep, BLOCK):
        cols = start + lanes
        top = tl.maximum(top, tl.max(tl.load(src + r * width + cols, mask=keep > cols >= 0, other=float("-inf")), 0))
    total = tl.full((), 0.0, tl.float32)
    for start in range(0, keep, BLOCK):
        cols = start + lanes
        vals = tl.load(src + r * width + cols, mask=keep > cols >= 0, other=float("-inf"))
        total += tl.sum(tl.exp(vals - top), 0)
    for start in range(0, width, BLOCK):
        cols = start + lanes
        vals = tl.load(src + r * width + cols, mask=keep > cols >= 0, other=float("-inf"))
        out = tl.where(cols < keep, tl.exp(vals - top) / total, 0.0)
        tl.store(dst + r * width + cols, out, mask=cols < width)


import inspect
# triton's interpreter rewrites a kernel from its source (chained comparisons such as the masks above):
# the child's cells are strings, so the grader must make their source findable
assert "def three_pass_softmax(" in inspect.getsource(three_pass_softmax.fn)


def masked_row_softmax(x, valid_lens, block):
    result = torch.zeros_like(x)
    three_pass_softmax[(x.shape[0],)](x, valid_lens, result, x.shape[1], BLOCK=block)
    return result
'''
# The same kernel with no boundary masks on its loads and stores: the last block runs past the row.
UNMASKED = (KERNEL.replace(", mask=keep > cols >= 0, other=float(\"-inf\")", "")
            .replace(", mask=cols < width", ""))


def _ch11_submission(code: str) -> dict:
    """The solution notebook with ``code`` in ch11_ex1's cell and the other exercise cells emptied."""
    nb = json.loads(next((ROOT / "solutions").glob("11_*.ipynb")).read_text(encoding="utf-8"))
    for label in exercise_cell_index(nb["cells"]):
        nb = with_exercise_code(nb, label, code if label == "ch11_ex1" else "")
    return nb


def test_the_trigger_words():
    names = ("kernels",)
    assert needed({"setup": "from attention_course import kernels", "code": ""}, names) == ["kernels"]
    assert needed({"setup": "import torch", "code": "import triton.language as tl"}, names) == ["kernels"]
    assert needed({"setup": "import torch", "code": "    from attention_course.kernels import flash_forward"},
                  names) == ["kernels"]
    assert needed({"setup": "import torch", "code": "def attention_pool(w, v):\n    return w @ v\n"}, names) == []
    assert needed({"setup": "# fused kernels and triton come in chapter 11", "code": "x = 'import triton'"},
                  names) == []


def test_a_students_interpreted_kernel_is_graded_in_the_sandbox(tmp_path):
    pytest.importorskip("attention_course.kernels", reason="chapter 11 needs the kernels extra")  # interpreter first
    if not list((ROOT / "solutions").glob("11_*.ipynb")):
        pytest.skip("chapter 11's notebook has not landed yet")
    from attention_course.checks.registry import all_exercises
    ex1 = next((ex for ex in all_exercises(11) if ex.label == "ch11_ex1"), None)
    if ex1 is None:
        pytest.skip("chapter 11's exercises have not landed yet")
    chapter1 = json.loads(next((ROOT / "solutions").glob("01_*.ipynb")).read_text(encoding="utf-8"))
    first = exercise_cell_index(chapter1["cells"])
    label1 = next(iter(first))
    # A chapter-1 cell that fails if the zygote holds triton (naming it, it does not import it).
    no_triton = ("import sys\nassert not [m for m in sys.modules if m.split('.')[0] == 'triton'], "
                 "'the zygote imported triton for chapter 1'\n")
    probe = with_exercise_code(chapter1, label1, no_triton + _src(chapter1["cells"][first[label1]]))
    subs = {"ch1": probe, "kernel": _ch11_submission(KERNEL), "unmasked": _ch11_submission(UNMASKED)}
    for name, nb in subs.items():
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with Sandbox(jobs=1, workdir=tmp_path / "box") as box:
        run1 = run_grading([Submission("ch1", tmp_path / "ch1.ipynb")], 1, seed=11, sandbox=box, time_limit=20)
        result1 = {e.label: e for e in run1.results[0].exercises}[label1]
        assert result1.checks and all(c.passed for c in result1.checks), result1.reason
        run = run_grading([Submission("kernel", tmp_path / "kernel.ipynb"),
                           Submission("unmasked", tmp_path / "unmasked.ipynb")], 11, seed=5, sandbox=box,
                          time_limit=60)
        protections = box.info["protections"]
    by = {r.student: {e.label: e for e in r.exercises} for r in run.results}
    good, bad = by["kernel"]["ch11_ex1"], by["unmasked"]["ch11_ex1"]
    assert all(c.passed for c in good.checks), (good.reason, [c.reason for c in good.checks if not c.passed])
    assert good.points == ex1.points
    assert bad.points < ex1.points and not all(c.passed for c in bad.checks), bad.reason
    assert run.restarts == 0
    # the walls every chapter gets (where this kernel allows them) held while the kernels ran
    if "seccomp allow-list" in protections:
        assert "Landlock ABI" in protections, protections
