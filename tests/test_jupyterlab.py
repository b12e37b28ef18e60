"""The self-study path in a real notebook client: JupyterLab (the one `python3 tasks.py
lab` opens) served headless on a local port with a token, driven by Playwright and
Debian's Chromium, on a copy of a student notebook.

A reader opens the notebook, runs all cells (every check cell prints ✗ lines and no
cell fails otherwise), reads an exercise statement (formatted text, not markup),
types a correct solution into the exercise cell, runs it and its check cell, and sees
✓ lines. Screenshots land in ``_build/test-output/jupyterlab-*.png``.

The same walk runs on the Chinese student notebook (``chapters/zh/``) in JupyterLab's Chinese
interface: the ✗ lines and hints are Chinese, and the solved exercise shows ✓ (screenshots
``jupyterlab-zh-*.png``).
"""
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from attention_course.tools.notebook import _CHECK_RE, exercise_code, load_cells
from attention_course.checks.registry import get_exercise

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NOTEBOOK = "03_scoring_functions.ipynb"
SOLVE = "ch03_ex4"      # the exercise the test solves by typing (unit_variance_scale)
READ = "ch03_ex1"       # the exercise statement the test reads
RAW_MYST = ["{exercise}", ":label:", "{footcite", "{solution", "{footbibliography", "```"]
# User settings for this run only: every cell stays in the page (no windowing, so the
# test sees all of them) and no news pop-up covers the notebook.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cjk(text: str) -> int:
    return len(re.findall(r"[\u4e00-\u9fff]", text))


@pytest.fixture(scope="module", params=["en", "zh"])
def lab(request, tmp_path_factory):
    """JupyterLab serving a folder that holds a copy of one student notebook (English, or Chinese
    with JupyterLab's interface in Chinese)."""
    lang = request.param
    tmp = tmp_path_factory.mktemp(f"jupyterlab-{lang}")
    work = tmp / "work"
    work.mkdir()
    shutil.copy2(ROOT / "chapters" / ("zh" if lang == "zh" else "") / NOTEBOOK, work / NOTEBOOK)
    settings = dict(SETTINGS)
    if lang == "zh":
        settings["@jupyterlab/translation-extension/plugin.jupyterlab-settings"] = {"locale": "zh_CN"}
    for name, values in settings.items():
        path = tmp / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline backend
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
    log = open(tmp / "jupyterlab.log", "w")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}"]
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp / 'jupyterlab.log').read_text()[-3000:]}")
                time.sleep(0.2)
        # Without the token, the server refuses the API.
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}/api/contents", timeout=5)
        yield base, token, work, lang
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `python3 tasks.py test` installs Debian's chromium package")
    from playwright.sync_api import sync_playwright
    base, token, _, _ = lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
        _wait_for_kernel(page, base, token)
        yield page
        assert not errors, errors
        browser.close()


def _wait_for_kernel(page, base, token, timeout=60):
    """Until the notebook's kernel is started and idle: the server lists a session with a
    kernel for the notebook, and the status bar shows the kernel as idle (the notebook's
    own indicator reads "idle" before any kernel exists)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5) as response:
            sessions = json.loads(response.read())
        if any(s.get("path", "").endswith(NOTEBOOK) and s.get("kernel", {}).get("execution_state") == "idle"
               for s in sessions):
            break
        if time.monotonic() > deadline:
            pytest.fail(f"no idle kernel for {NOTEBOOK} after {timeout} s: {sessions}")
        time.sleep(0.2)
    page.wait_for_function(r"""() => {
        const bar = document.querySelector('#jp-main-statusbar');
        return bar && /\(ipykernel\) \| (Idle|空闲)/.test(bar.innerText);
    }""", timeout=timeout * 1000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout * 1000)


def _cells(page) -> list:
    """Each code cell as the reader sees it: its input, its prompt and its output text."""
    return page.eval_on_selector_all(".jp-Notebook .jp-CodeCell", """cells => cells.map(c => ({
        input: c.querySelector('.cm-content') ? c.querySelector('.cm-content').innerText : '',
        prompt: (c.querySelector('.jp-InputPrompt') || {}).textContent || '',
        output: c.querySelector('.jp-OutputArea') ? c.querySelector('.jp-OutputArea').innerText : '',
        errors: c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length,
    }))""")


def _wait_until_idle(page, timeout=120000):
    # Every code cell shows an execution count (no "[*]" left) and the kernel is idle.
    page.wait_for_function("""() => {
        const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
            .map(p => p.textContent.trim());
        const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
        return prompts.length > 0 && prompts.every(p => /^\\[\\d+\\]:$/.test(p))
            && indicator && indicator.dataset.status === 'idle';
    }""", timeout=timeout)


def test_run_all_read_an_exercise_solve_it_and_see_it_pass(lab, page, output_dir):
    base, token, work, lang = lab
    from attention_course.checks.language import tr
    shots = "jupyterlab-" if lang == "en" else "jupyterlab-zh-"
    start = time.monotonic()

    # 1. Run all cells from the Run menu, as a reader would.
    page.click("li.lm-MenuBar-item:has-text('Run')" if lang == "en" else "li.lm-MenuBar-item:has-text('运行')")
    page.click("li.lm-Menu-item[data-command='runmenu:run-all']")
    _wait_until_idle(page)
    cells = _cells(page)
    check_cells = [c for c in cells if _CHECK_RE.search(c["input"])]
    assert len(check_cells) >= 4
    for cell in cells:
        assert cell["errors"] == 0, f"a cell failed:\n{cell['input'][:300]}\n{cell['output'][-1500:]}"
    for cell in check_cells:
        label = _CHECK_RE.search(cell["input"]).group(1)
        exercise = get_exercise(label)
        header = tr(f"{label} \u00b7 {exercise.name}: 0/{len(exercise.public_checks)} public checks passed", lang)
        assert header in cell["output"], cell["output"]
        assert "\u2717" in cell["output"] and "\u2713" not in cell["output"], cell["output"]
        if lang == "zh":  # the check lines and their hints are Chinese
            assert _cjk(cell["output"]) > 10, cell["output"]

    # The saved notebook holds the same: no error output anywhere, ✗ lines in every check cell.
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=20000)
    saved = nbformat.read(work / NOTEBOOK, as_version=4)
    assert not [o for c in saved.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]

    # 2. Exercise statements and citations render as formatted text, not markup.
    markdown_text = page.eval_on_selector_all(".jp-Notebook .jp-MarkdownCell", "cs => cs.map(c => c.innerText)")
    found = [m for m in RAW_MYST for text in markdown_text if m in text]
    assert not found, f"raw markup shown to the reader: {sorted(set(found))}"
    assert any("(Vaswani et al., 2017)" in text for text in markdown_text)
    if lang == "zh":
        assert sum(_cjk(text) for text in markdown_text) > 2000
    read = get_exercise(READ)
    statement = page.locator(".jp-MarkdownCell", has_text=f"({READ})")
    heading = statement.locator("h1, h2, h3, h4").first
    word = "Exercise" if lang == "en" else "练习"
    assert re.fullmatch(rf"{word} \d+ \({READ}\)[:：] ?.+", heading.inner_text().strip()), heading.inner_text()
    assert statement.locator("li").count() >= 3 and statement.locator("code").count() >= 5
    assert read.name in statement.inner_text()
    statement.scroll_into_view_if_needed()
    page.screenshot(path=str(output_dir / f"{shots}exercise-statement.png"))
    failing = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text=f'check("{READ}"'))
    failing.screenshot(path=str(output_dir / f"{shots}check-fails.png"))

    # 3. Type a correct solution into an exercise cell, run it and its check cell: ✓ lines.
    solved = get_exercise(SOLVE)
    answer = exercise_code(load_cells(ROOT / "solutions" / NOTEBOOK))[SOLVE]
    where = [i for i, c in enumerate(_cells(page)) if f'raise NotImplementedError("{SOLVE}' in c["input"]]
    assert len(where) == 1, where
    stub = page.locator(".jp-Notebook .jp-CodeCell").nth(where[0])
    stub.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)
    page.keyboard.press("Shift+Enter")   # runs the exercise cell, selects its check cell
    page.keyboard.press("Shift+Enter")   # runs the check cell
    total = len(solved.public_checks)
    checked = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text=f'check("{SOLVE}"'))
    passed = tr(f"{SOLVE} \u00b7 {solved.name}: {total}/{total} public checks passed", lang)
    checked.locator(".jp-OutputArea", has_text=passed).wait_for(timeout=30000)
    output = checked.locator(".jp-OutputArea").inner_text()
    assert output.count("\u2713") == total and "\u2717" not in output, output
    stub.scroll_into_view_if_needed()
    page.screenshot(path=str(output_dir / f"{shots}solution-passes.png"))
    checked.screenshot(path=str(output_dir / f"{shots}check-passes.png"))
    assert time.monotonic() - start < 60, "the JupyterLab session took over a minute"
