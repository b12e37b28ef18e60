"""An instructor's release (issue 27): a student repository that carries no answer to what it grades.

* the stored public checks of the student build are plain data (that they give the full checks'
  verdicts on every reference, stub, kept mistake and alternative: tests/test_exercises.py);
* a release of chapters 1-3: no line of a graded exercise's answer appears in any released file
  (and the search finds a line planted in a copy); the package pip installs from the student
  repository has no answer to import; the notebooks' setup, exercise and check cells, run by a
  Python that sees only that installed package (and the third-party ones), print the same check
  lines as under the full course, for the references and the stubs;
  its site builds with warnings as errors, with launch buttons on the student repository;
* a release of all nine chapters: the exercises it cannot grade are found (practice), and none
  of the graded ones shows its answer;
* course.yml: one exercise's points change the gradebook, the feedback, the exercise index and
  the Gradescope zip, with no edit of the package.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools.student_build import StudentBuildError, build_store
from attention_course.tools.student_release import exposure_report, release_students

ROOT = Path(__file__).resolve().parents[1]
STUDENT_REPO = "https://github.com/example-instructor/attention-students"
HUB = "https://hub.example.edu"


def _stub(*args, **kwargs):
    raise NotImplementedError("stub")


def test_stored_public_checks_are_plain_data():
    """What a student build stores loads with weights_only (no object of any class is built).
    That its verdicts equal the full checks' is proven per exercise in tests/test_exercises.py."""
    import io
    import torch
    labels = [ex.label for ex in all_exercises(3)]
    data, code, _ = build_store(labels)
    buffer = io.BytesIO()
    torch.save(data, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert sorted(loaded) == labels
    assert all(check["outcomes"] for entry in loaded.values() for check in entry["checks"])
    # The shipped compares hold no reference: ch03_ex2's is the shared parameter-shape compare.
    assert "def same_parameters" in code["ch03_ex2"] and "AdditiveAttention" not in code["ch03_ex2"]


@pytest.fixture(scope="module")
def release_1_3(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "students"
    result = release_students(ROOT, out, chapters=[1, 2, 3], repository_url=STUDENT_REPO,
                              practice=[], answers_released=[], build=True, jupyterhub_url=HUB)
    return result


def test_a_release_of_chapters_1_to_3_shows_no_graded_answer(release_1_3, tmp_path):
    result = release_1_3
    out = result.out
    assert result.plan.graded == [ex.label for ex in all_exercises() if ex.chapter <= 3]
    exposed = {row["label"]: row["found"] for row in result.report if row["status"] == "graded" and row["found"]}
    assert not exposed, exposed
    assert (out / "RELEASE.md").read_text(encoding="utf-8").count("| graded | nowhere |") == len(result.plan.graded)
    # What an answer is made of never ships: no exercises/, no grading kit, no solutions, no later chapter.
    package = out / "attention_course"
    assert not (package / "exercises").exists() and not (package / "grading").exists()
    assert not (out / "solutions").exists() and not (out / "instructors.md").exists()
    assert sorted(p.name for p in (out / "chapters").glob("*.ipynb")) == [
        "01_queries_keys_values.ipynb", "02_nadaraya_watson.ipynb", "03_scoring_functions.ipynb",
        "toolkit.ipynb"]  # the tensor toolkit's student notebook, beside the chapters'
    # The search can fail: a copy with one line of ch03_ex1's reference planted in it is caught.
    import inspect
    from attention_course.checks.registry import get_exercise
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("_build"))
    body = [line.strip() for line in inspect.getsource(get_exercise("ch03_ex1").reference).splitlines()
            if len(line.strip()) >= 25 and not line.strip().startswith(("def ", '"""', "#"))]
    (copy / "notes.txt").write_text(f"x = 1\n    {body[-1]}\n", encoding="utf-8")
    rows = {row["label"]: row for row in exposure_report(copy, result.plan, ROOT)}
    assert ("notes.txt", body[-1]) in rows["ch03_ex1"]["found"]


@pytest.fixture(scope="module")
def installed_1_3(release_1_3, tmp_path_factory):
    """The released package as pip installs it from the student repository (its package data too)."""
    target = tmp_path_factory.mktemp("site-packages")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(release_1_3.out)], check=True, timeout=300)
    return target


def _isolated_python(tmp_path: Path, package_root: Path) -> list:
    """A Python that sees the released package and the third-party packages, not the course's."""
    import site
    third_party = [p for p in site.getsitepackages() if Path(p).is_dir()]
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        "import sys, runpy\n"
        f"sys.path[:0] = [{str(package_root)!r}] + {third_party!r}\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n", encoding="utf-8")
    return [sys.executable, "-S", "-I", str(launcher)]


def test_the_released_package_has_no_answer_to_import(release_1_3, installed_1_3, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import importlib, attention_course\n"
        "print('file', attention_course.__file__)\n"
        "for name in ('attention_course.exercises', 'attention_course.exercises.ch03', 'attention_course.tools.grading'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        print('imported', name)\n"
        "    except ImportError:\n"
        "        print('absent', name)\n"
        "from attention_course import functional as attn\n"
        "import torch\n"
        "try:\n"
        "    attn.masked_softmax(torch.zeros(1, 2, 3), torch.tensor([1]))\n"
        "except NotImplementedError as error:\n"
        "    print('withheld', error)\n"
        "from attention_course.checks.registry import all_exercises\n"
        "print('exercises', len(all_exercises()))\n", encoding="utf-8")
    run = subprocess.run(_isolated_python(tmp_path, installed_1_3) + [str(script)], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"file {installed_1_3 / 'attention_course' / '__init__.py'}"
    assert lines[1:4] == ["absent attention_course.exercises", "absent attention_course.exercises.ch03",
                          "absent attention_course.tools.grading"]
    assert lines[4].startswith("withheld attention_course.functional.masked_softmax is withheld in this release: "
                               "it is the answer to ch03_ex1")
    assert lines[5] == f"exercises {len(release_1_3.plan.released_labels())}"


def _check_script(notebook: Path, out: Path) -> None:
    """The notebook's setup, exercise and check cells (as the grader runs them), as one script."""
    from attention_course.tools.notebook import _CHECK_RE, exercise_code, load_cells, setup_code
    cells = load_cells(notebook)
    parts = ["import matplotlib\nmatplotlib.use('Agg')", setup_code(cells)]
    blocks = exercise_code(cells)
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        match = cell["cell_type"] == "code" and _CHECK_RE.search(source)
        if match:
            parts += [blocks.get(match.group(1), ""), source]
    out.write_text("\n\n".join(parts) + "\n", encoding="utf-8")


@pytest.mark.parametrize("stem", ["01_queries_keys_values", "02_nadaraya_watson", "03_scoring_functions"])
def test_the_released_checks_print_what_the_full_course_prints(release_1_3, installed_1_3, tmp_path, stem):
    """References (the solution notebook's cells) and stubs (the student notebook's), under the
    released package alone and under the full course: the same check lines."""
    for kind, notebook in (("reference", ROOT / "solutions" / f"{stem}.ipynb"),
                           ("stub", release_1_3.out / "chapters" / f"{stem}.ipynb")):
        script = tmp_path / f"{kind}.py"
        _check_script(notebook, script)
        env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "PYTHONPATH")}
        released = subprocess.run(_isolated_python(tmp_path, installed_1_3) + [str(script)], capture_output=True,
                                  text=True, timeout=600, cwd=tmp_path, env=env)
        full = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                              cwd=tmp_path, env=env)
        assert released.returncode == 0 and full.returncode == 0, released.stderr[-2000:] + full.stderr[-2000:]
        checks = [line for line in full.stdout.splitlines() if "public checks passed" in line]
        assert len(checks) == len([ex for ex in all_exercises() if ex.chapter == int(stem[:2])])
        if kind == "reference":
            assert all(" 0/" not in line and line.split(": ")[1].split("/")[0] == line.split("/")[1].split()[0]
                       for line in checks), checks
        else:
            assert all(": 0/" in line for line in checks), checks
        assert released.stdout == full.stdout


def test_the_release_site_builds_with_launch_buttons_on_the_student_repository(release_1_3):
    out = release_1_3.out
    assert release_1_3.build_status == 0
    html = out / "_build" / "html"
    page = (html / "pages" / "03_scoring_functions.html").read_text(encoding="utf-8")
    assert f"{STUDENT_REPO.replace('https://github.com/', 'github/')}/blob/main/chapters/03_scoring_functions.ipynb" \
        in page
    # JupyterHub: nbgitpuller pulls the student repository and opens the chapter's student notebook.
    assert (f'href="{HUB}/hub/user-redirect/git-pull?repo=https%3A//github.com/example-instructor/attention-students'
            f'&amp;urlpath=lab/tree/attention-students/chapters/03_scoring_functions.ipynb&amp;branch=main"') in page \
        or (f'href="{HUB}/hub/user-redirect/git-pull?repo=https%3A//github.com/example-instructor/attention-students'
            f'&urlpath=lab/tree/attention-students/chapters/03_scoring_functions.ipynb&branch=main"') in page
    assert "BEGIN SOLUTION" not in page and "solution-start" not in page
    assert not (html / "instructors.html").exists()
    # The download is the portable student notebook, whose install cell points at the student repository.
    download = json.loads((html / "_sources" / "pages" / "03_scoring_functions.ipynb").read_text(encoding="utf-8"))
    install = next("".join(c["source"]) for c in download["cells"] if "install" in c["metadata"].get("tags", []))
    assert f"{STUDENT_REPO}/archive/refs/heads/main.zip" in install
    index = (html / "exercises.html").read_text(encoding="utf-8")
    assert "ch03_ex6" in index and "ch04_ex1" not in index


def test_the_release_gives_students_the_toolkit_without_myst_targets(release_1_3):
    """Issue 28: the toolkit beside chapters/ is the portable one (no `(toolkit-…)=` line shown as
    text in Jupyter); the site's page is built from the MyST source under pages/, whose targets the
    chapters' references need, and its download and launch buttons give the portable one."""
    import re
    out = release_1_3.out
    raw_target = re.compile(r"^\([^()\s]+\)=\s*$", re.M)

    def markdown(path):
        return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                if c["cell_type"] == "markdown"]
    assert not any(raw_target.search(cell) for cell in markdown(out / "chapters" / "toolkit.ipynb"))
    assert any(raw_target.search(cell) for cell in markdown(out / "pages" / "toolkit.ipynb"))
    html = out / "_build" / "html"
    download = html / "_sources" / "pages" / "toolkit.ipynb"
    assert download.read_text(encoding="utf-8") == (out / "chapters" / "toolkit.ipynb").read_text(encoding="utf-8")
    page = (html / "pages" / "toolkit.html").read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]*toolkit\.ipynb[^"]*)"', page)
    assert any("blob/main/chapters/toolkit.ipynb" in link for link in links), links          # Colab: the portable one
    assert not [link for link in links if "pages/toolkit.ipynb" in link and "_sources" not in link], links
    # A chapter page's reference to a toolkit section lands on that section of the toolkit's page.
    chapter = (html / "pages" / "01_queries_keys_values.html").read_text(encoding="utf-8")
    assert 'href="toolkit.html#toolkit-keepdim"' in chapter


def test_a_release_needing_a_graded_answer_is_refused_with_the_way_out(tmp_path):
    with pytest.raises(StudentBuildError) as caught:
        release_students(ROOT, tmp_path / "r", chapters=[4, 6], repository_url=STUDENT_REPO, practice=[],
                         answers_released=[])
    message = str(caught.value)
    assert "attention_course.multihead.CausalAttention (the answer to ch05_ex3) is used by" in message
    assert "ch05_ex3" in caught.value.labels


def test_a_release_of_all_eleven_chapters_grades_only_what_it_hides(tmp_path):
    result = release_students(ROOT, tmp_path / "all", chapters=range(1, 12), repository_url=STUDENT_REPO,
                              practice="auto", answers_released=[])
    graded = [row for row in result.report if row["status"] == "graded"]
    assert graded and all(not row["found"] for row in graded)
    assert set(result.auto_practice) == {row["label"] for row in result.report if row["status"] == "practice"}
    # Chapter 7 grades ch07_ex1 since issue 19 (a coverage decoder) and ch07_ex3 since issue 41 (a
    # beam search, no longer the greedy() of the chapter's Seq2Seq): no library piece answers
    # them, and no line of their answers is a line of the library's.
    assert "ch07_ex1" not in result.auto_practice
    assert "ch07_ex3" not in result.auto_practice
    assert len(graded) >= 25


def test_course_yml_points_reach_gradebook_feedback_index_and_zip(tmp_path):
    config = tmp_path / "course.yml"
    config.write_text("chapters: 1-3\nexercises:\n  ch01_ex6:\n    points: 7\n", encoding="utf-8")
    env = dict(os.environ, ATTENTION_COURSE_CONFIG=str(config))
    cli = [sys.executable, "-m", "attention_course.tools.cli"]
    submissions = tmp_path / "class"
    submissions.mkdir()
    shutil.copy(ROOT / "solutions" / "01_queries_keys_values.ipynb", submissions / "alice.ipynb")
    graded = subprocess.run(cli + ["grade", str(submissions), "--chapter", "1", "--seed", "3", "--out",
                                   str(tmp_path / "grades")], capture_output=True, text=True, env=env, timeout=600)
    assert graded.returncode == 0, graded.stderr
    import csv
    with open(tmp_path / "grades" / "grades.csv", encoding="utf-8", newline="") as handle:
        row = next(csv.DictReader(handle))
    assert float(row["ch01_ex6"]) == 7 and float(row["max_total"]) == 14  # 1+1+1+2+2 and 7
    feedback = next((tmp_path / "grades" / "feedback").iterdir()).read_text(encoding="utf-8")
    assert "ch01_ex6" in feedback and "7/7" in feedback.replace(" ", "").replace(".0", "")
    refused = subprocess.run(cli + ["grade", str(submissions), "--chapter", "4"], capture_output=True, text=True,
                             env=env, timeout=120)
    assert refused.returncode == 2 and "chapter 4 is not released" in refused.stderr
    index = subprocess.run([sys.executable, "-c", "from attention_course.tools.release import exercise_index; "
                            f"print(exercise_index({str(ROOT)!r}))"], capture_output=True, text=True, env=env)
    assert "| `temperature_for_peak` | 7 |" in index.stdout
    archive = tmp_path / "autograder.zip"
    zipped = subprocess.run(cli + ["gradescope", "--chapter", "1", "--seed", "3", "--out", str(archive)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert zipped.returncode == 0, zipped.stderr
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        import yaml
        zipped_config = yaml.safe_load(zf.read("course.yml").decode())
        assert zipped_config["exercises"] == {"ch01_ex6": {"points": 7}} and zipped_config["chapters"] == [1]
    assert any(n.startswith("attention_course/exercises/ch01/") for n in names)
    assert not any(n.startswith("attention_course/exercises/ch02/") for n in names)
    # Run as Gradescope runs it, with no environment variable: the zip's own course.yml sets the points.
    import stat
    gs = tmp_path / "autograder"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(gs / "source")
    runner = gs / "source" / "run_autograder"
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
    (gs / "submission").mkdir()
    shutil.copy(ROOT / "solutions" / "01_queries_keys_values.ipynb", gs / "submission")
    plain = {k: v for k, v in os.environ.items() if k != "ATTENTION_COURSE_CONFIG"}
    done = subprocess.run([str(runner)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(plain, AUTOGRADER_ROOT=str(gs), AUTOGRADER_PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((gs / "results" / "results.json").read_text())
    assert results["score"] == results["max_score"] == 14
    assert sum(t["max_score"] for t in results["tests"] if t["name"].startswith("ch01_ex6")) == pytest.approx(7)


def test_the_release_carries_a_lint_free_workflow_that_publishes_its_site(release_1_3):
    """Issue 39, item 3: the release publishes itself. Its workflow passes actionlint, installs the
    release's requirements (torch's CPU wheel) and package, builds the site with the command the
    release's README gives, and deploys _build/html to GitHub Pages; RELEASE.md gives the steps."""
    import yaml
    from test_workflows import _actionlint  # tests/ is on sys.path (tests/conftest.py)
    from attention_course.tools.student_release import SITE_BUILD, SITE_INSTALL
    out = release_1_3.out
    workflow = out / ".github" / "workflows" / "pages.yml"
    lint = _actionlint(workflow)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    data = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    assert data["on"]["push"]["branches"] == ["main"] and "workflow_dispatch" in data["on"]
    build, deploy = data["jobs"]["build"], data["jobs"]["deploy"]
    runs = [step["run"].strip() for step in build["steps"] if "run" in step]
    assert runs == ["\n".join(SITE_INSTALL), SITE_BUILD] == [
        "python3 -m pip install -r requirements.txt\npython3 -m pip install .", "jupyter-book build . -W -n --keep-going"]
    assert "download.pytorch.org/whl/cpu" in build["env"]["PIP_INDEX_URL"]
    assert build["container"].startswith("python:3.11")
    uses = [step.get("uses", "").split("@")[0] for step in build["steps"]]
    assert uses.index("actions/checkout") < uses.index("actions/configure-pages") \
        < uses.index("actions/upload-pages-artifact")
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    # What the release's requirements.txt installs builds the site: jupyter-book and the extensions.
    requirements = (out / "requirements.txt").read_text(encoding="utf-8")
    for pin in ("torch==", "jupyter-book==", "sphinx-exercise==", "sphinxcontrib-bibtex==", "myst-nb=="):
        assert pin in requirements, pin
    assert "-e ." not in requirements.splitlines()
    # The docs the instructor reads give the same command and the three steps.
    assert SITE_BUILD in (out / "README.md").read_text(encoding="utf-8")
    report = (out / "RELEASE.md").read_text(encoding="utf-8")
    steps = report[report.index("## Publishing it"):]
    assert f"git remote add origin {STUDENT_REPO}" in steps and "git push -u origin main" in steps
    assert "GitHub Actions" in steps and "repos/example-instructor/attention-students/pages" in steps
    guide = (ROOT / "instructors.md").read_text(encoding="utf-8")
    assert "### Publishing the release" in guide and SITE_BUILD in guide
    assert "Publish its `_build/html`" not in guide
    # _build/ stays out of git; nothing else the workflow needs is ignored (tested by the build below).
    assert "_build/" in (out / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_the_release_committed_to_a_fresh_repository_builds_with_the_workflow_command(release_1_3, tmp_path):
    """What the workflow's checkout holds (a fresh git repository of the release, cloned), with the
    release's own package installed from it (not the course's), builds with the workflow's command."""
    import shlex
    from attention_course.tools.student_release import SITE_BUILD
    repo, clone, target = tmp_path / "repo", tmp_path / "clone", tmp_path / "site-packages"
    shutil.copytree(release_1_3.out, repo, ignore=shutil.ignore_patterns("_build"))
    git = ["git", "-c", "user.name=Instructor", "-c", "user.email=instructor@example.edu", "-c", "init.defaultBranch=main"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "Chapters 1-3"]):
        subprocess.run(git + command, cwd=repo, check=True, capture_output=True, timeout=120)
    subprocess.run(git + ["clone", "-q", str(repo), str(clone)], check=True, capture_output=True, timeout=120)
    tracked = subprocess.run(["git", "ls-files"], cwd=clone, capture_output=True, text=True, check=True).stdout
    assert ".github/workflows/pages.yml" in tracked.splitlines() and "_build" not in tracked
    assert any(line.startswith("attention_course/public_checks/") and line.endswith(".pt")
               for line in tracked.splitlines())
    # `python3 -m pip install .` (its dependencies are the pinned requirements, already here)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(clone)], check=True, timeout=300)
    argv = shlex.split(SITE_BUILD)
    assert argv[0] == "jupyter-book"
    script = tmp_path / "jupyter_book_main.py"
    script.write_text("import sys\nfrom jupyter_book.cli.main import main\n"
                      f"sys.argv = {argv!r}\nmain()\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "PYTHONPATH")}
    done = subprocess.run(_isolated_python(tmp_path, target) + [str(script)], cwd=clone, capture_output=True,
                          text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    html = clone / "_build" / "html"
    assert (html / "index.html").is_file() and (html / "pages" / "03_scoring_functions.html").is_file()
    assert "ch03_ex6" in (html / "exercises.html").read_text(encoding="utf-8")


def test_list_shows_each_exercise_s_checks_as_course_yml_names_them(capsys):
    """Issue 39, item 5: under each exercise, one line per check (public or hidden, weight, points,
    the name in quotes as `weights` spells it); --brief keeps the one line per exercise."""
    from attention_course.tools.cli import main
    exercises = all_exercises(1)
    assert main(["list", "--chapter", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if not line.startswith("    ")]
    assert [line.split("\t")[0] for line in heads] == [ex.label for ex in exercises]
    assert len(lines) == len(exercises) + sum(len(ex.checks) for ex in exercises)
    for ex in exercises:
        start = lines.index(next(line for line in heads if line.startswith(ex.label + "\t"))) + 1
        for check, line in zip(ex.checks, lines[start:start + len(ex.checks)]):
            assert line.split()[0] == ("public" if check.public else "hidden"), line
            assert line.endswith(json.dumps(check.name, ensure_ascii=False)), line
            assert f"weight {check.weight:g}" in line
    assert main(["list", "--chapter", "1", "--brief"]) == 0
    assert capsys.readouterr().out.splitlines() == heads


@pytest.mark.parametrize("text, where", [
    ("chapters: 1-3\nexercises:\n  ch01_ex6:\n    points: -1\n",
     ":4: exercises: ch01_ex6: points: expected a number of at least 0, got -1"),
    ("chapters: 1-3\nexercises:\n  ch01_ex6:\n    weights:\n      nope: 2\n",
     ":5: exercises: ch01_ex6: weights: nope: no check named 'nope'"),
    ("chapters: 1-3\npractice:\n  - ch01_ex1\n  - ch09_ex99\n", ":4: practice: unknown exercise 'ch09_ex99'"),
    ("# the term\nchapters: 1-3\nchapterz: 1\n", ":3: chapterz: unknown setting"),
    ("chapters: 1-x\n", ":1: chapters: '1-x' is not a chapter number"),
    ("chapters: 1-3\nexercises:\n  ch01_ex1:\n    pionts: 3\n", ":4: exercises: ch01_ex1: pionts: unknown setting"),
    ("chapters: [1, 2\nanswers_released: []\n", ":2:"),
    ("chapters: 1-3\n  practice: x\n", ":2:"),
])
def test_a_course_yml_error_names_the_file_the_line_and_the_key(tmp_path, text, where):
    from attention_course.tools.course_config import CourseConfigError, load
    config = tmp_path / "course.yml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(CourseConfigError) as caught:
        load(config)
    message = str(caught.value)
    assert message.startswith(f"{config}{where}"), message
    assert "\n" not in message


def test_every_command_reports_a_course_yml_error_in_one_line(tmp_path):
    config = tmp_path / "course.yml"
    config.write_text("chapters: 1-3\nexercises:\n  ch01_ex6:\n    points: many\n", encoding="utf-8")
    env = dict(os.environ, ATTENTION_COURSE_CONFIG=str(config))
    expected = f"{config}:4: exercises: ch01_ex6: points: expected a number of at least 0, got 'many'"
    for command in (["list"], ["gradescope", "--chapter", "1", "--out", str(tmp_path / "a.zip")],
                    ["grade", str(tmp_path), "--chapter", "1"], ["release", "--check", "--root", str(ROOT)],
                    ["release-students", str(tmp_path / "out"), "--repository-url", STUDENT_REPO]):
        done = subprocess.run([sys.executable, "-m", "attention_course.tools.cli", *command], capture_output=True,
                              text=True, env=env, timeout=300)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.strip().splitlines() == [f"attention-course {command[0]}: {expected}"], done.stderr


def test_the_gradescope_zip_runs_one_worker_on_python_3_11_or_newer(tmp_path):
    """Gradescope's default container (768 MB, half a CPU) needs --jobs 1: the default. setup.sh
    makes sure of Python 3.11 or newer (Ubuntu 22.04's python3 is 3.10) and installs into a venv
    that run_autograder uses."""
    from attention_course.tools.cli import main
    archive = tmp_path / "autograder.zip"
    assert main(["gradescope", "--chapter", "1", "--seed", "5", "--out", str(archive)]) == 0
    with zipfile.ZipFile(archive) as zf:
        config = json.loads(zf.read("autograder.json"))
        setup, runner = zf.read("setup.sh").decode(), zf.read("run_autograder").decode()
    assert config["jobs"] == 1
    for name, script in (("setup.sh", setup), ("run_autograder", runner)):
        path = tmp_path / name
        path.write_text(script, encoding="utf-8")
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, name
    assert "sys.version_info < (3, 11)" in setup and "apt-get install -y python3.11 python3.11-venv" in setup
    assert "/autograder/venv/bin/python -m pip install" in setup and "/autograder/venv/bin/python" in runner
    guide = (ROOT / "instructors.md").read_text(encoding="utf-8")
    assert "Python 3.11 or newer" in guide and "`--jobs 1`, the zip's default" in guide


def test_a_regrade_after_a_course_yml_change_is_refused_naming_course_yml(tmp_path):
    config = tmp_path / "course.yml"
    config.write_text("chapters: 1-3\nexercises:\n  ch01_ex6:\n    points: 7\n", encoding="utf-8")
    env = dict(os.environ, ATTENTION_COURSE_CONFIG=str(config))
    cli = [sys.executable, "-m", "attention_course.tools.cli"]
    submissions = tmp_path / "class"
    submissions.mkdir()
    shutil.copy(ROOT / "solutions" / "01_queries_keys_values.ipynb", submissions / "alice.ipynb")
    out = tmp_path / "grades"
    graded = subprocess.run(cli + ["grade", str(submissions), "--chapter", "1", "--seed", "3", "--jobs", "1",
                                   "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert graded.returncode == 0, graded.stderr
    config.write_text("chapters: 1-3\nexercises:\n  ch01_ex6:\n    points: 3\n", encoding="utf-8")
    again = subprocess.run(cli + ["grade", str(submissions), "--chapter", "1", "--regrade", str(out)],
                           capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 2
    assert "the grading plan changed" in again.stderr and "course.yml" in again.stderr, again.stderr
