"""The Gradescope autograder zip runs offline in a Gradescope-like folder and writes results.json."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from attention_course.checks.registry import all_exercises  # noqa: E402

# Chapter 1 at full marks, from the registry (an author adding ch01_ex5 changes it)
CHAPTER1_POINTS = sum(ex.points for ex in all_exercises(1))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


def _build_zip(tmp_path, *options: str) -> Path:
    """`attention-course gradescope` for chapter 1 (seed 4, 5 s per exercise) into tmp_path."""
    cli = str(Path(sys.executable).with_name("attention-course"))
    zip_path = tmp_path / "autograder.zip"
    done = subprocess.run([cli, "gradescope", "--chapter", "1", "--out", str(zip_path), "--seed", "4",
                           "--time-limit", "5", *options], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return zip_path


def test_gradescope_zip_runs_offline(tmp_path):
    zip_path = _build_zip(tmp_path, "--jobs", "2")
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        setup = zf.read("setup.sh").decode()
        requirements = zf.read("requirements.txt").decode()
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder.json",
            "attention_course/exercises/ch01/ex1_attention_pool.py", "attention_course/tools/grading/zygote_main.py"} <= set(names)
    assert "torch==2.13.0\n" in requirements and "requirements.txt" in setup
    # Gradescope's layout: /autograder/{source,submission,results}
    gs = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(gs / "source")
    for name in ("run_autograder", "setup.sh"):
        path = gs / "source" / name
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (gs / "submission").mkdir()
    (gs / "submission" / "01_queries_keys_values.ipynb").write_text(
        next((ROOT / "solutions").glob("01_*.ipynb")).read_text())
    env = dict(os.environ, AUTOGRADER_ROOT=str(gs), AUTOGRADER_PYTHON=sys.executable)
    done = subprocess.run([str(gs / "source" / "run_autograder")], capture_output=True, text=True,
                          timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((gs / "results" / "results.json").read_text())
    assert results["score"] == results["max_score"] == CHAPTER1_POINTS
    # Per exercise, its public checks (visible) and its hidden-only checks (after_published).
    exercises = all_exercises(1)
    with_hidden = [e for e in exercises if any(not c.public for c in e.checks)]
    assert len(results["tests"]) == len(exercises) + len(with_hidden)
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] == "passed" and test["score"] == test["max_score"]
        assert test["visibility"] == ("after_published" if test["name"].endswith("hidden checks") else "visible")
    assert abs(sum(t["max_score"] for t in results["tests"]) - CHAPTER1_POINTS) < 1e-3
    # it graded with the unpacked copy of the package, not the editable install
    assert "seed: 4" in done.stdout and str(gs / "source" / "attention_course") in done.stdout


def test_a_grader_error_is_never_a_silent_zero_on_gradescope(tmp_path, monkeypatch):
    """Issue 38: run_autograder exits non-zero, and results.json says the grader failed, when the
    grader's own I/O fails (here: its scratch folder cannot be made, twice, for every exercise)."""
    import errno
    from attention_course.tools.grading import gradescope, sandbox as sandbox_module
    gs = tmp_path / "autograder"
    (gs / "source").mkdir(parents=True)
    (gs / "source" / "autograder.json").write_text(json.dumps({"chapter": 1, "seed": 4, "jobs": 1, "time_limit": 10}))
    (gs / "submission").mkdir()
    (gs / "submission" / "01_queries_keys_values.ipynb").write_text(
        next((ROOT / "solutions").glob("01_*.ipynb")).read_text())

    def full_disk(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sandbox_module, "make_scratch", full_disk)
    assert gradescope.run(gs) == 1
    results = json.loads((gs / "results" / "results.json").read_text())
    assert results["output"].startswith("The grader hit an error of its own on ch01_ex1")
    assert "not a judgement of your code" in results["output"]


def test_only_chapter_11s_zip_installs_the_kernels_extra(tmp_path):
    """Chapter 11's kernels are graded in triton's interpreter: its zip installs triton, pinned as the
    kernels extra pins it; a chapter 1-10 zip stays as small as the base install."""
    from attention_course.tools.grading.gradescope import build_zip
    pinned = (ROOT / "requirements-kernels.txt").read_text()
    assert "triton==3.9.0\n" in pinned
    for chapter in (1, 10, 11):
        if not all_exercises(chapter):
            continue
        zip_path = tmp_path / f"ch{chapter}.zip"
        build_zip(chapter, zip_path, seed=1, root=ROOT)
        with zipfile.ZipFile(zip_path) as zf:
            requirements = zf.read("requirements.txt").decode()
            setup = zf.read("setup.sh").decode()
        assert "torch==2.13.0\n" in requirements and "-r /autograder/source/requirements.txt" in setup
        if chapter == 11:
            assert "triton==3.9.0\n" in requirements, requirements
        else:
            assert "triton" not in requirements, (chapter, requirements)


def test_a_gradescope_zip_built_with_lang_zh_gives_chinese_feedback(tmp_path):
    """Issue 45: `gradescope --lang zh` ships the package's catalog and grades in Chinese."""
    import re
    zip_path = _build_zip(tmp_path, "--lang", "zh")
    gs = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        assert "attention_course/locales/zh/LC_MESSAGES/attention_course.po" in zf.namelist()
        zf.extractall(gs / "source")
    assert json.loads((gs / "source" / "autograder.json").read_text())["lang"] == "zh"
    path = gs / "source" / "run_autograder"
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (gs / "submission").mkdir()
    (gs / "submission" / "01_queries_keys_values.ipynb").write_text(
        (ROOT / "chapters" / "zh" / "01_queries_keys_values.ipynb").read_text(encoding="utf-8"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ATTENTION_COURSE_LANG"}
    env.update(AUTOGRADER_ROOT=str(gs), AUTOGRADER_PYTHON=sys.executable)
    done = subprocess.run([str(path)], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((gs / "results" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0
    text = results["output"] + "".join(t["output"] for t in results["tests"])
    assert len(re.findall(r"[\u4e00-\u9fff]", text)) > 200 and "提示：" in text, text[:1000]
