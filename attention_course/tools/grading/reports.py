"""What the grader writes: gradebook CSV, feedback per student, class summary, log, results.json.

Everything here is computed from the parent's own decisions (never from anything a
student's code printed or wrote).
"""
from __future__ import annotations

import csv
import json
import re
import sys
import time
from pathlib import Path
from typing import Optional

from ...checks.checking import FAIL, PASS
from ...checks.language import N_, frame, tr
from ..notebook import printable
from .formats import cap_bytes, csv_safe, fmt_points as _fmt, number_cell as _number  # noqa: F401 - csv_safe: tests
from .items import ITEMS_CSV, ITEMS_PNG, MISCONCEPTIONS_CSV, analyse, summary_sections, write_heatmap, \
    write_items_csv, write_misconceptions_csv

SUMMARY_MD, HISTOGRAM_PNG, GRADES_CSV, LOG_NAME = "summary.md", "histogram.png", "grades.csv", "grading.log"


def safe_name(student: str) -> str:
    """A file name's stem for ``student``: letters, digits, ``.-_``; at most 100 characters and
    :data:`.formats.MAX_STEM_BYTES` bytes (:func:`.formats.cap_bytes`)."""
    name = re.sub(r"[^\w.-]+", "_", student).strip("._") or "student"
    return cap_bytes(name[:100], student)


def feedback_names(results: list) -> list:
    """One feedback file name per result, never shared: ``same name`` and ``same_name`` both make
    ``same_name``, so the second becomes ``same_name~2.md`` (compared without case, for file
    systems that ignore it)."""
    names, taken = [], set()
    for r in results:
        base = safe_name(r.student)
        name, number = base, 2
        while name.lower() in taken:
            name, number = f"{base}~{number}", number + 1
        taken.add(name.lower())
        names.append(f"{name}.md")
    return names


# ------------------------------------------------------------------ feedback


def feedback_markdown(result, plan, title: Optional[str] = None) -> str:
    """A student's feedback, in the reader's language (attention_course.checks.language: ``grade
    --lang``, ``ATTENTION_COURSE_LANG``); the student's own words (names, messages) stay as written."""
    heading = tr(title or N_("Feedback"))
    lines = [f"# {heading}{frame('colon')}{result.student}", "",
             tr(f"Chapter {plan.chapter:02d} · **{_fmt(result.total)} / {_fmt(result.max_total)} points**"), ""]
    if result.problem:
        lines += [tr(f"**Your submission could not be graded:** {tr(result.problem)}"), ""]
    for note in result.notes:
        lines += [tr(f"> Note: {tr(note)}"), ""]
    for er in result.exercises:
        passed = sum(c.passed for c in er.checks)
        lines += [tr(f"## {er.label} · `{er.name}` — {_fmt(er.points)} / {_fmt(er.max_points)} points"),
                  tr(f"*{tr(er.title)}* · {passed}/{len(er.checks)} checks passed"), ""]
        if er.reason and not result.problem:
            why = N_("0 points") if er.points == 0 else N_("points were lost")
            lines += [tr(f"**Why {tr(why)}:** {tr(er.reason)}"), ""]
        for note in er.notes:
            lines += [tr(f"> Note: {tr(note)}"), ""]
        shown = set()
        for c in er.checks:
            worth = tr(f" ({_fmt(c.points)} of {_fmt(round(c.max_points, 2))} pt)")
            if c.passed:
                lines.append(f"- {PASS} {tr(c.check)}{worth}")
            else:
                reason = tr(c.reason) if c.reason != er.reason else tr("see above")
                lines.append(f"- {FAIL} {tr(c.check)}{worth}{frame('colon')}{reason}")
                if c.hint and c.hint not in shown:
                    lines.append(f"  - {frame('hint')}{tr(c.hint)}")
                    shown.add(c.hint)
        lines.append("")
    # Names and messages come from the submission: no control character reaches the reader.
    return printable("\n".join(lines).rstrip(), newlines=True) + "\n"


def feedback_text(result, plan) -> str:
    """The same feedback for a terminal (self-study)."""
    md = feedback_markdown(result, plan, title=N_("Grade"))
    text = re.sub(r"^#+ ", "", md, flags=re.M)
    text = re.sub(r"^\*([^*\n]+)\*", r"\1", text, flags=re.M)
    return text.replace("**", "").replace("`", "")


# ------------------------------------------------------------------ class files


def write_csv(results: list, plan, path: Path) -> None:
    """The gradebook: one row per student; text cells quoted and formula-safe, points as numbers."""
    labels = [ep.label for ep in plan.exercises]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["student"] + labels + ["total", "max_total", "notes"])
        for r in results:
            by_label = {e.label: e for e in r.exercises}
            notes = [r.problem] if r.problem else [f"{e.label}: {e.summary}" for e in r.exercises if e.summary]
            writer.writerow([csv_safe(r.student)] + [_number(by_label[l].points) for l in labels]
                            + [_number(r.total), _number(r.max_total), csv_safe(" | ".join(notes)[:2000])])


def write_summary(results: list, plan, out: Path, failed: Optional[list] = None) -> dict:
    """Per-exercise pass rates and mean points; a histogram of totals (PNG, matplotlib Agg); the
    item analysis (:mod:`.items`: items.csv, misconceptions.csv, items.png and its sections).
    With ``failed`` (a list), a file that cannot be written is added to it and the others are written."""
    if failed is None:
        def attempt(name, write):
            write()
    else:
        def attempt(name, write):
            _attempt(failed, name, write)
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    n = len(results)
    rows = []
    for ep in plan.exercises:
        ers = [e for r in results for e in r.exercises if e.label == ep.label]
        full = sum(1 for e in ers if e.points >= e.max_points - 1e-9)
        checks_passed = sum(c.passed for e in ers for c in e.checks)
        checks_total = sum(len(e.checks) for e in ers)
        mean = sum(e.points for e in ers) / n if n else 0.0
        rows.append({"label": ep.label, "name": ep.exercise.name, "points": float(ep.exercise.points),
                     "full_marks_rate": full / n if n else 0.0,
                     "check_pass_rate": checks_passed / checks_total if checks_total else 0.0,
                     "mean_points": mean})
    totals = [r.total for r in results]
    max_total = plan.max_total
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = max(1, min(20, int(max_total) + 1))
    ax.hist(totals, bins=bins, range=(0, max_total), color="#b03a2e", edgecolor="white")
    ax.set_xlabel(f"total points (out of {_fmt(max_total)})")
    ax.set_ylabel("submissions")
    ax.set_title(f"Chapter {plan.chapter:02d}: {n} submissions")
    fig.tight_layout()
    try:
        attempt(HISTOGRAM_PNG, lambda: fig.savefig(out / HISTOGRAM_PNG, dpi=100))
    finally:
        plt.close(fig)
    mean_total = sum(totals) / n if n else 0.0
    median = sorted(totals)[n // 2] if n else 0.0
    lines = [f"# Chapter {plan.chapter:02d}: class summary", "",
             f"- submissions: {n}", f"- mean total: {mean_total:.2f} / {_fmt(max_total)}",
             f"- median total: {_fmt(median)}", f"- full marks: {sum(1 for t in totals if t >= max_total - 1e-9)}",
             f"- zero: {sum(1 for t in totals if t == 0)}", f"- grading seed: {plan.seed}", "",
             "| exercise | function | points | full marks | checks passed | mean points |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['label']} | `{row['name']}` | {_fmt(row['points'])} | {row['full_marks_rate']:.0%} | "
                     f"{row['check_pass_rate']:.0%} | {row['mean_points']:.2f} |")
    lines += ["", f"![Histogram of totals]({HISTOGRAM_PNG})", ""]
    items = analyse(results, plan)
    attempt(ITEMS_CSV, lambda: write_items_csv(items, plan.chapter, out / ITEMS_CSV))
    attempt(MISCONCEPTIONS_CSV, lambda: write_misconceptions_csv(items, plan.chapter, out / MISCONCEPTIONS_CSV))
    attempt(ITEMS_PNG, lambda: write_heatmap(items, plan.chapter, out / ITEMS_PNG))
    lines += summary_sections(items)
    attempt(SUMMARY_MD, lambda: (out / SUMMARY_MD).write_text("\n".join(lines), encoding="utf-8"))
    return {"submissions": n, "mean_total": mean_total, "exercises": rows, "items": items}


class ClassReportsError(OSError):
    """Some class files could not be written; every other one was. ``failed``: (file, reason) pairs;
    ``summary``: what :func:`write_class_reports` answers otherwise."""

    def __init__(self, failed: list, summary: dict):
        shown = "; ".join(f"{name}: {why}" for name, why in failed[:5])
        more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
        super().__init__(printable(f"could not write {len(failed)} class file(s), the others were written: "
                                   f"{shown}{more}"))
        self.failed, self.summary = failed, summary


def _attempt(failed: list, name: str, write) -> None:
    """``write()``; a failure (a full disk, a name too long) is added to ``failed``, never raised."""
    try:
        write()
    except Exception as error:  # noqa: BLE001 - one file's trouble must not cost the others
        failed.append((name, f"{type(error).__name__}: {getattr(error, 'strerror', None) or error}"))


def write_class_reports(results: list, plan, out: Path, log_lines: list) -> dict:
    """grades.csv, a feedback file per student, summary.md and the item analysis, grading.log. Each file
    is written even when another one fails; then :class:`ClassReportsError` names what failed."""
    out = Path(out)
    failed: list = []
    summary: dict = {}
    _attempt(failed, "feedback/", lambda: (out / "feedback").mkdir(parents=True, exist_ok=True))
    _attempt(failed, GRADES_CSV, lambda: write_csv(results, plan, out / GRADES_CSV))
    for r, name in zip(results, feedback_names(results)):
        _attempt(failed, f"feedback/{name}",
                 lambda r=r, name=name: (out / "feedback" / name).write_text(feedback_markdown(r, plan),
                                                                               encoding="utf-8"))
    _attempt(failed, SUMMARY_MD, lambda: summary.update(write_summary(results, plan, out, failed)))
    _attempt(failed, LOG_NAME, lambda: (out / LOG_NAME).write_text("\n".join(log_lines) + "\n", encoding="utf-8"))
    if not summary:  # the summary itself failed: what the command line prints of it still holds
        totals = [r.total for r in results]
        summary.update(submissions=len(totals), mean_total=sum(totals) / len(totals) if totals else 0.0,
                       exercises=[], items=[])
    if failed:
        raise ClassReportsError(failed, summary)
    return summary


# ------------------------------------------------------------------ Gradescope


HIDDEN_VISIBILITIES = ("after_published", "after_due_date", "hidden", "visible")


def gradescope_results(result, plan, execution_time: float = 0.0,
                       hidden_visibility: str = "after_published") -> dict:
    """Gradescope's results.json for one submission: per exercise, one test of its public checks
    (visible: the student ran them in the notebook already) and one of its hidden-only checks,
    with ``hidden_visibility`` (by default shown once the instructor publishes the grades, so that
    resubmitting cannot probe the hidden checks)."""
    if hidden_visibility not in HIDDEN_VISIBILITIES:
        raise ValueError(f"hidden_visibility must be one of {', '.join(HIDDEN_VISIBILITIES)}, "
                         f"not {hidden_visibility!r}")
    public = {ep.label: {cp.check.name for cp in ep.checks if cp.check.public} for ep in plan.exercises}
    tests = []
    for er in result.exercises:
        for hidden in (False, True):
            checks = [c for c in er.checks if (c.check in public.get(er.label, set())) != hidden]
            if not checks:
                continue
            score = round(sum(c.points for c in checks), 4)
            top = round(sum(c.max_points for c in checks), 4)
            out = [tr(f"{sum(c.passed for c in checks)}/{len(checks)} checks passed")]
            if er.reason:
                out.append(tr(f"Why: {tr(er.reason)}"))
            if not hidden:
                out += [tr(note) for note in er.notes]
            for c in checks:
                out.append(c.line() if c.reason != er.reason or c.passed else f"{FAIL} {tr(c.check)}")
            kind = tr("hidden checks") if hidden else tr("public checks")
            tests.append({"name": f"{er.label} · {er.name} ({tr(er.title)}): {kind}", "score": score,
                          "max_score": top, "status": "passed" if score >= top - 1e-9 else "failed",
                          "output": printable("\n".join(out), newlines=True),
                          "visibility": hidden_visibility if hidden else "visible"})
    general = [tr(f"Chapter {plan.chapter:02d}: {_fmt(result.total)} / {_fmt(result.max_total)} points.")]
    if result.problem:
        general.append(tr(f"Your submission could not be graded: {tr(result.problem)}"))
    general += [tr(f"Note: {tr(n)}") for n in result.notes]
    return {"score": result.total, "max_score": result.max_total, "execution_time": round(execution_time, 2),
            "output": "\n".join(general), "visibility": "visible", "stdout_visibility": "hidden",
            "tests": tests}


def write_json(data: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


# ------------------------------------------------------------------ progress


class ProgressBar:
    """Grading progress drawn by ``tqdm.auto``: a text bar on a terminal (a widget when the
    grader runs inside a notebook), and when the stream is not a terminal (a log file, a CI
    job) no redraws at all, one plain summary line at the end."""

    def __init__(self, label: str = "grading", stream=None, width: int = 30):
        self.label, self.stream = label, stream or sys.stderr
        self._bar = None
        self.start = time.monotonic()

    def _interactive(self) -> bool:
        try:
            if self.stream.isatty():
                return True
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            return False
        return self.stream is sys.stderr and "ipykernel" in sys.modules  # a notebook: tqdm.auto's widget

    def __call__(self, done: int, total: int) -> None:
        from tqdm.auto import tqdm
        if self._bar is None:
            self._bar = tqdm(total=total, desc=self.label, unit="submission", file=self.stream,
                             disable=not self._interactive(), dynamic_ncols=True, leave=True)
            self.start = time.monotonic()
        self._bar.update(done - self._bar.n)
        if done >= total:
            drawn = not self._bar.disable  # read before close(), which sets disable
            self._bar.close()
            if not drawn:
                self.stream.write(f"{self.label}: {done}/{total} submissions graded in "
                                  f"{time.monotonic() - self.start:.1f} s\n")
            self.stream.flush()
