"""``attention-course progress [PATH]``: where a self-study reader stands.

It finds the reader's own chapter notebooks (a notebook, or every ``.ipynb`` under a
folder; by default ``chapters/``), runs the **public** checks of every exercise in
them -- the same checks as the notebook's check cells, at the same fixed seeds -- and
prints one table per notebook: each exercise, its checks passed, the next exercise
to do, and a total for the course.

The reader's code runs exactly as the grader runs a student's: in a sandboxed child
process (:mod:`attention_course.tools.grading`) that executes only the setup cell and the
exercise's cells, with a time and memory limit per exercise. An infinite loop, a
crash or a ``sys.exit()`` in one exercise costs that exercise, never the command.
Notebooks that are not course notebooks are named and skipped (the tensor toolkit beside the
chapters silently).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .notebook import _CHECK_RE, NotebookError, _src, exercise_code, load_cells, printable
from ..checks.language import N_, set_language, tr
from ..checks.registry import LABEL_RE
from .release import TOOLKIT

SKIP_DIRS = {"zh", ".git", ".venv", "venv", "_build", "node_modules", "__pycache__", ".ipynb_checkpoints", "site-packages"}

# How an exercise stands.
DONE, FAILING, NOT_STARTED, MISSING = "done", "failing", "not started", "missing"


class NotCourseNotebook(ValueError):
    """A file that is not one of the course's chapter notebooks."""


@dataclass
class ExerciseProgress:
    label: str
    title: str
    name: str
    passed: int
    total: int
    status: str
    reason: str = ""


@dataclass
class NotebookProgress:
    path: Path
    chapter: int
    title: str
    exercises: list = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(e.status == DONE for e in self.exercises)

    @property
    def next(self) -> Optional[ExerciseProgress]:
        return next((e for e in self.exercises if e.status != DONE), None)


# ------------------------------------------------------------------ finding notebooks

def find_notebooks(path: Path) -> list:
    """``path`` itself, or every notebook under the folder ``path`` (sorted)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such notebook or folder")
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".ipynb") and not f.startswith(".")]
    return sorted(found)


def identify(path: Path) -> tuple:
    """``(chapter, title)`` of a course notebook; :class:`NotCourseNotebook` otherwise."""
    from ..checks.registry import all_exercises
    try:
        cells = load_cells(path)
    except NotebookError as error:
        raise NotCourseNotebook(str(error)) from error
    labels = list(exercise_code(cells))
    labels += [m for c in cells if c.get("cell_type") == "code" for m in _CHECK_RE.findall(_src(c))]
    chapters = Counter(int(LABEL_RE.match(label).group(1)) for label in labels if LABEL_RE.match(label))
    if not chapters:
        raise NotCourseNotebook(f"{Path(path).name}: it has no exercise (such as \"Exercise 1 (ch01_ex1)\") "
                                f"and no check cell (check(\"chNN_exM\", ...))")
    chapter = chapters.most_common(1)[0][0]
    if not all_exercises(chapter):
        raise NotCourseNotebook(f"{Path(path).name}: its exercises belong to chapter {chapter}, "
                                f"which this course does not have")
    title = next((line[2:].strip() for c in cells if c.get("cell_type") == "markdown"
                  for line in _src(c).splitlines() if line.startswith("# ")), Path(path).stem)
    return chapter, printable(title)[:200]  # the notebook's own text: no escape sequence reaches the terminal


# ------------------------------------------------------------------ running the public checks

def public_plan(chapter: int, thorough_seed: Optional[int] = None):
    """A grading plan holding each exercise's public checks at their fixed seeds; with
    ``thorough_seed``, every check (hidden ones included) on inputs drawn from that seed: each
    exercise's plan as ``check()`` builds it (:func:`attention_course.checks.plan.exercise_plan`)."""
    from ..checks.plan import exercise_plan
    from ..checks.registry import all_exercises
    from .grading.grader import GradingPlan, standard_setup

    plans = [exercise_plan(ex, thorough_seed, hidden=thorough_seed is not None) for ex in all_exercises(chapter)]
    return GradingPlan(chapter, thorough_seed or 0, plans, standard_setup(chapter))


def _status(result) -> tuple:
    passed = sum(c.passed for c in result.checks)
    total = len(result.checks)
    if total and passed == total:
        return DONE, ""
    if result.stub or (result.checks and all(c.stub for c in result.checks)):
        return NOT_STARTED, ""
    if result.reason and not any(c.passed for c in result.checks):
        status = MISSING if "no cells for" in result.reason or "define no" in result.reason else FAILING
        return status, result.reason
    failed = next((c for c in result.checks if not c.passed), None)
    if not failed:
        return FAILING, result.reason
    # A kept mistake's hint names the mistake: worth its line (a check's own hint only restates it).
    named = f" Hint: {failed.hint}" if failed.mistake and failed.hint else ""
    return FAILING, f"{failed.check}: {failed.reason}{named}"


def run_progress(notebooks: list, jobs: int = 2, time_limit: float = 10.0, memory_mb: int = 1024,
                 progress=None, thorough_seed: Optional[int] = None) -> list:
    """Check every exercise of the course notebooks ``notebooks`` ((path, chapter, title)
    triples); ``progress()`` is called once per exercise checked."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    import torch

    from .grading.grader import Grader, Submission, prepare
    from .grading.grader_io import grader_error_reason
    from .grading.sandbox import Sandbox

    if not notebooks:
        return []
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    sandbox = Sandbox(jobs=jobs)
    try:
        sandbox.launch()  # the sandbox's processes import torch while the plans are computed
        plans = {chapter: public_plan(chapter, thorough_seed) for chapter in sorted({c for _, c, _ in notebooks})}
        sandbox.wait_ready()
        graders = {chapter: Grader(plan, sandbox, time_limit, memory_mb) for chapter, plan in plans.items()}
        books, tasks = [], []
        for path, chapter, title in notebooks:
            plan = plans[chapter]
            book = NotebookProgress(path, chapter, title,
                                    [ExerciseProgress(ep.label, ep.exercise.title, ep.exercise.name, 0,
                                                      len(ep.checks), MISSING) for ep in plan.exercises])
            books.append(book)
            try:
                prepared = prepare(Submission(path.stem, path), plan)
            except (NotebookError, OSError) as error:
                for e in book.exercises:
                    e.reason = f"the notebook cannot be read: {error}"
                continue
            tasks += [(book, i, graders[chapter], ep, prepared) for i, ep in enumerate(plan.exercises)]

        def work(task):
            book, i, grader, ep, prepared = task
            try:
                result = grader.grade_exercise(ep, prepared)
            except Exception as error:  # noqa: BLE001 - one exercise's trouble must not stop the report
                book.exercises[i].reason = f"could not be checked: {grader_error_reason(error)}"
                return
            status, reason = _status(result)
            e = book.exercises[i]
            e.passed, e.total, e.status, e.reason = sum(c.passed for c in result.checks), len(result.checks), \
                status, reason

        with ThreadPoolExecutor(max_workers=sandbox.jobs) as pool:
            for future in as_completed([pool.submit(work, task) for task in tasks]):
                future.result()
                if progress:
                    progress()
        return books
    finally:
        sandbox.close()
        torch.set_num_threads(old_threads)


# ------------------------------------------------------------------ the report

class _Style:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, *codes: str) -> str:
        if not self.color or not codes:
            return text
        table = {"bold": "1", "dim": "2", "green": "32", "red": "31", "yellow": "33", "cyan": "36"}
        return "\033[" + ";".join(table[c] for c in codes) + "m" + text + "\033[0m"


_MARK = {DONE: ("\u2713", "green"), FAILING: ("\u2717", "red"), MISSING: ("\u2717", "red"),
         NOT_STARTED: ("\u00b7", "dim")}


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else 0
    return "\u2588" * filled + "\u2591" * (width - filled)


def _shorten(text: str, width: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= width else text[: max(0, width - 1)] + "\u2026"


def _width(text: str) -> int:
    """Columns a text takes in a terminal: a CJK character takes two."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def render(books: list, skipped: list, color: bool = False, width: Optional[int] = None) -> str:
    """The report: one table per notebook, then the total."""
    style = _Style(color)
    width = width or shutil.get_terminal_size((100, 24)).columns
    lines = []
    for book in sorted(books, key=lambda b: (b.chapter, str(b.path))):
        lines.append(style(tr(f"Chapter {book.chapter} \u00b7 {printable(book.title)}"), "bold") + "  "
                     + style(printable(book.path), "dim"))
        title_width = max(_width(tr(e.title)) for e in book.exercises)
        for e in book.exercises:
            mark, colour = _MARK[e.status]
            state = tr({DONE: N_("done"), NOT_STARTED: N_("not started"), FAILING: N_("failing"),
                        MISSING: N_("missing")}.get(e.status, e.status))
            title = tr(e.title)
            lines.append(f"  {style(mark, colour)} {e.label}  {title}{' ' * (title_width - _width(title))}  "
                         + tr(f"{e.passed}/{e.total} checks") + "  "
                         + style(state, "dim" if e.status == NOT_STARTED else colour))
            if e.reason and e.status in (FAILING, MISSING):
                # An error message the reader's code raised: no escape sequence reaches the terminal.
                wrapped = textwrap.wrap(printable(re.sub(r"\s+", " ", tr(e.reason))), max(40, width - 6))
                if len(wrapped) > 3:
                    wrapped = wrapped[:3]
                    wrapped[-1] = _shorten(wrapped[-1] + " …", max(40, width - 6))
                lines += [style("      " + line, "dim") for line in wrapped]
        nxt = book.next
        summary = f"  {_bar(book.done, len(book.exercises))} " + tr(f"{book.done}/{len(book.exercises)} exercises done")
        lines.append(style(summary, "green" if nxt is None else "cyan"))
        if nxt is None:
            lines.append(style("  " + tr("every exercise of this chapter passes its public checks"), "green"))
        else:
            lines.append("  " + tr(f"next: {style(nxt.label, 'bold')} {tr(nxt.title)} (write `{nxt.name}`)"))
        lines.append("")
    for path, reason in skipped:
        lines.append(style(printable(tr(f"skipped {path}: {reason}")), "yellow"))
    if skipped:
        lines.append("")
    if books:
        exercises = [e for b in books for e in b.exercises]
        done = sum(e.status == DONE for e in exercises)
        checks = sum(e.passed for e in exercises), sum(e.total for e in exercises)
        pending = [(b, b.next) for b in sorted(books, key=lambda b: (b.chapter, str(b.path))) if b.next]
        lines.append(style(tr(f"Total: {done}/{len(exercises)} exercises done, {checks[0]}/{checks[1]} public checks "
                              f"passed, in {len(books)} notebook{'s' if len(books) != 1 else ''}"), "bold"))
        if pending:
            book, nxt = pending[0]
            lines.append(tr(f"Next:  {style(nxt.label, 'bold')} {tr(nxt.title)} ({printable(book.path)})"))
        else:
            lines.append(style(tr("All done: every exercise passes its public checks."), "green", "bold"))
    return "\n".join(lines) + "\n"


def main(args) -> int:
    """The ``attention-course progress`` command (arguments parsed by :mod:`attention_course.tools.cli`)."""
    if getattr(args, "lang", None):
        set_language(args.lang)
    target = Path(args.path) if args.path else (Path("chapters") if Path("chapters").is_dir() else Path("."))
    try:
        paths = find_notebooks(target)
    except FileNotFoundError as error:
        print(f"attention-course progress: {error}", file=sys.stderr)
        return 2
    notebooks, skipped = [], []
    for path in paths:
        try:
            chapter, title = identify(path)
        except NotCourseNotebook as error:
            if path.name == Path(TOOLKIT).name and not target.is_file():
                continue  # the course's tensor toolkit, beside the chapters: it has nothing to check
            reason = str(error)
            skipped.append((path, reason[len(path.name) + 2:] if reason.startswith(path.name + ": ") else reason))
            continue
        notebooks.append((path, chapter, title))
    if not notebooks:
        if target.is_file():
            reason = skipped[0][1] if skipped else "not a notebook"
            print(printable(f"attention-course progress: {target} is not a course notebook: {reason}"), file=sys.stderr)
        else:
            print(f"attention-course progress: no course notebook under {target}"
                  + (f" ({len(skipped)} other notebook{'s' if len(skipped) != 1 else ''}):" if skipped else ""),
                  file=sys.stderr)
            for path, reason in skipped:
                print(printable(f"  {path}: {reason}"), file=sys.stderr)
        print("A course notebook is a chapter's student notebook (chapters/NN_slug.ipynb), with its exercises "
              "(\"Exercise 1 (ch01_ex1): ...\") and check cells (check(\"ch01_ex1\", ...)).", file=sys.stderr)
        return 2
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm
        from ..checks.registry import all_exercises
        total = sum(len(all_exercises(chapter)) for _, chapter, _ in notebooks)
        bar = tqdm(total=total, desc="checking your exercises", unit="exercise", file=sys.stderr, leave=False)
    start = time.perf_counter()
    thorough_seed = None
    if getattr(args, "thorough", False):
        import secrets
        thorough_seed = secrets.randbelow(2 ** 31)
    try:
        books = run_progress(notebooks, jobs=args.jobs, time_limit=args.time_limit,
                             progress=(lambda: bar.update(1)) if bar else None, thorough_seed=thorough_seed)
    finally:
        if bar:
            bar.close()
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    text = render(books, skipped, color=color)
    if thorough_seed is not None:
        text = text.replace("public checks", "checks").replace(tr("public checks"), tr("checks"))
    print(text, end="")
    if thorough_seed is None:
        note = (f"(the public checks of the check cells, run in a sandbox in {time.perf_counter() - start:.1f} s; "
                f"a graded assignment uses hidden checks too: `attention-course progress --thorough` runs them)")
    else:
        note = (f"(every check, the hidden ones included, on fresh inputs (seed {thorough_seed}), run in a sandbox "
                f"in {time.perf_counter() - start:.1f} s; no points)")
    print(_Style(color)(tr(note), "dim"), flush=True)
    return 0
