"""The self-study reader's thorough check (issue 28, item 4): check(label, obj, thorough=True)
and `attention-course progress --thorough` run the hidden checks too, on fresh inputs, with their
feedback and no points, so an answer that only passes the public checks is found."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attention_course import check
from attention_course.checks.registry import REGISTRY, Call, Check, Exercise, Mistake, register

ROOT = Path(__file__).resolve().parents[1]


def _pool(weights, values):
    return weights @ values


def _plain_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(torch.softmax(torch.randn(3, 4, generator=g), -1), torch.randn(4, 2, generator=g)))]


def _batched_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(torch.softmax(torch.randn(2, 3, 4, generator=g), -1), torch.randn(2, 4, 2, generator=g)))]


@pytest.fixture()
def demo():
    register(Exercise("ch99_ex8", "thorough demo", "pool", _pool,
                      checks=[Check("2-D weights and values", _plain_calls, hint="a weighted sum of rows"),
                              Check("batched (hidden)", _batched_calls, hint="every batch element", public=False)],
                      mistakes=[Mistake("mean", "averaged", lambda w, v: v.mean(-2, keepdim=True).expand(
                          *w.shape[:-1], v.shape[-1]))]))
    yield
    del REGISTRY["ch99_ex8"]


def _only_2d(weights, values):
    """Passes the public check, fails on a batch: .T reverses every axis of a 3-D tensor."""
    return (values.T @ weights.T).T


def test_thorough_check_finds_what_only_the_hidden_checks_see(demo, capsys):
    check("ch99_ex8", _only_2d)
    public = capsys.readouterr().out
    assert "1/1 public checks passed" in public and "\u2717" not in public
    check("ch99_ex8", _only_2d, thorough=True)
    thorough = capsys.readouterr().out
    assert "1/2 checks passed on fresh inputs" in thorough and "no points" in thorough
    assert "\u2717 batched (hidden)" in thorough
    check("ch99_ex8", lambda w, v: torch.matmul(w, v), thorough=True)
    assert "2/2 checks passed on fresh inputs" in capsys.readouterr().out


def test_progress_thorough_runs_every_check():
    cli = str(Path(sys.executable).with_name("attention-course"))
    notebook = next((ROOT / "solutions").glob("01_*.ipynb"))
    done = subprocess.run([cli, "progress", str(notebook), "--thorough"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "hidden ones included, on fresh inputs" in done.stdout
    assert "public checks" not in done.stdout
    from attention_course.checks.registry import all_exercises
    total = sum(len(e.checks) for e in all_exercises(1))
    assert f"{total}/{total} checks passed" in done.stdout, done.stdout
