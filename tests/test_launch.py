"""Launching the student notebooks anywhere.

* The repository's address is one setting (``repository.url`` in ``_config.yml``):
  the README, the student notebooks' install cell and the site's launch buttons use it.
* A student notebook opened where the course package is missing installs it from its
  first code cell. Tested offline: a fresh virtual environment that lacks the package
  (torch, Jupyter and the rest come from the course's environment through a site
  folder, so nothing is downloaded) runs a student notebook top to bottom, the
  install cell taking the package from a copy of the checkout named by
  ``ATTENTION_COURSE_SOURCE``.
* Binder gets an environment file with the CPU build of torch, pinned like ours.
* ``python3 tasks.py lab`` opens JupyterLab on ``chapters/``; README and landing page say so.
"""
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import venv
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from attention_course.tools.notebook import _CHECK_RE
from attention_course.tools.release import INSTALL_TAG, SOURCE_ENV, course_settings

ROOT = Path(__file__).resolve().parents[1]
STUDENT = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
FRESH_NOTEBOOK = "01_queries_keys_values.ipynb"


def _pins(path: Path) -> dict:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


# ------------------------------------------------------------ one setting

def test_repository_url_is_one_setting_used_everywhere():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url), url
    settings = course_settings(ROOT)
    assert settings.repository_url.rstrip("/") == url
    # The notebooks: every student notebook's install cell installs from this repository.
    for path in STUDENT:
        nb = nbformat.read(path, as_version=4)
        install = [c for c in nb.cells if INSTALL_TAG in c.metadata.get("tags", [])]
        assert len(install) == 1, path.name
        assert f'"{settings.archive_url}"' in install[0].source, path.name
        assert settings.archive_url.startswith(url + "/archive/refs/heads/")
    # The README names it, and no other repository of the course.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert url in readme
    others = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme)) - {url}
    assert not others, others
    # The launch buttons are built by Jupyter Book from the same setting.
    assert config["launch_buttons"]["binderhub_url"] and config["launch_buttons"]["colab_url"]


def test_binder_installs_the_cpu_build_of_torch_pinned_like_ours():
    binder = ROOT / "binder" / "requirements.txt"
    text = binder.read_text(encoding="utf-8")
    assert re.search(r"^--extra-index-url https://download\.pytorch\.org/whl/cpu$", text, re.M)
    ours, theirs = _pins(ROOT / "requirements.txt"), _pins(binder)
    assert theirs["torch"] == ours["torch"] == "2.13.0"
    for name, version in theirs.items():
        assert ours.get(name) == version, f"binder pins {name}=={version}, requirements.txt {ours.get(name)}"
    assert re.search(r"^\.$", text, re.M), "binder must install the course package itself"
    # The main requirements never name another index: only Binder gets the CPU index.
    assert "extra-index-url" not in (ROOT / "requirements.txt").read_text(encoding="utf-8")


def test_readme_and_landing_page_say_how_to_open_the_notebooks():
    for name in ("README.md", "intro.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        assert "python3 tasks.py lab" in text, name
        assert "jupyter lab chapters" not in text.replace("`", ""), name
    assert "jupyterlab==" in (ROOT / "requirements.txt").read_text(encoding="utf-8")


# ------------------------------------------------------------ python3 tasks.py lab

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_tasks_lab_opens_jupyterlab_on_the_student_notebooks(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    port, token = _free_port(), secrets.token_hex(8)
    cmd = tasks.lab_command(["--no-browser", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}"])
    assert Path(cmd[0]) == ROOT / ".venv" / "bin" / "jupyter" and cmd[1] == "lab"
    cmd[0] = str(Path(sys.executable).parent / "jupyter")  # the environment running these tests
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"))
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=2) as r:
                    listing = json.loads(r.read())
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail((tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.2)
        names = sorted(item["name"] for item in listing["content"] if item["type"] == "notebook")
        assert names == sorted([p.name for p in STUDENT] + ["toolkit.ipynb"])  # the toolkit beside the chapters
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as r:
            assert b"JupyterLab" in r.read()
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()


# ------------------------------------------------------------ a fresh environment, offline

def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "MPLBACKEND")}


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory):
    """A virtual environment without the course package; everything else is reachable
    through a site folder of links into this environment's site-packages (minus the
    course package and its editable-install hooks)."""
    tmp = tmp_path_factory.mktemp("fresh")
    venv.EnvBuilder(with_pip=False).create(tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    shared = tmp / "shared"
    shared.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().replace("-", "_").lstrip("_").startswith(("attention_course", "editable__")):
            continue
        (shared / entry.name).symlink_to(entry)
    site = subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    Path(site, "course_env.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    probe = subprocess.run([python, "-c", "import torch, ipykernel, pip\nimport attention_course"],
                           capture_output=True, text=True, cwd=tmp, env=_clean_env())
    assert "No module named 'attention_course'" in probe.stderr, probe.stderr
    # The course, as a reader's copy of the repository would hold it.
    source = tmp / "course"
    source.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(ROOT / "attention_course", source / "attention_course",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    kernels = tmp / "jupyter" / "kernels" / "fresh"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (fresh)", "language": "python"}))
    return tmp, python, source


def test_fresh_environment_installs_the_package_and_runs_a_student_notebook(fresh_env, monkeypatch):
    tmp, python, source = fresh_env
    work = tmp / "work"
    work.mkdir()
    shutil.copy2(ROOT / "chapters" / FRESH_NOTEBOOK, work / FRESH_NOTEBOOK)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp / "jupyter"))
    monkeypatch.setenv(SOURCE_ENV, str(source))
    monkeypatch.setenv("PIP_NO_INDEX", "1")            # offline: nothing may come from an index
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # build with the setuptools at hand
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = nbformat.read(work / FRESH_NOTEBOOK, as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=300, kernel_name="fresh",
                   resources={"metadata": {"path": str(work)}}).execute()  # raises on any error
    seconds = time.monotonic() - start
    install = next(c for c in nb.cells if INSTALL_TAG in c.metadata.get("tags", []))
    printed = "".join(o.get("text", "") for o in install.outputs)
    assert f"installing the course package from {source} ..." in printed, printed
    assert "installed attention_course" in printed, printed
    where = subprocess.check_output([python, "-c", "import attention_course; print(attention_course.__file__)"],
                                    text=True, cwd=tmp, env=_clean_env()).strip()
    assert Path(where).is_relative_to(tmp / "venv"), where
    checks = [c for c in nb.cells if c.cell_type == "code" and _CHECK_RE.search(c.source)]
    assert len(checks) >= 4
    for cell in checks:
        label = _CHECK_RE.search(cell.source).group(1)
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert re.search(rf"^{label} \u00b7 \w+: 0/\d+ public checks passed$", text, re.M), text
        assert "\u2717" in text and "\u2713" not in text
    assert seconds < 120, f"the fresh environment took {seconds:.0f} s"
