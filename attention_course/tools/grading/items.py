"""Item analysis of a graded class: which checks the class passed, and which mistakes it made.

For every failed check, :func:`attention_course.checks.checking.judge` (in the grader's own process)
already decides which kept mistake the answer behaves like: same values, or the same error
and message, on the same calls. The feedback shows that mistake's hint; this module counts
those decisions over the class, so that an instructor reads "23 students scaled the scores
by d" instead of 23 feedback files.

Written beside ``summary.md`` (which gets the same tables in prose):

* ``items.csv``: one row per (exercise, check): how many attempted answers passed it;
* ``misconceptions.csv``: one row per (exercise, kept mistake the class's answers behaved
  like), then one per frequent failure that matched no kept mistake;
* ``items.png``: exercises by checks, coloured by pass rate.

The schema is documented in the instructor guide (``instructors.md``, "Item analysis").
Everything counted here is a decision of the parent; a submission decides only its own
outcomes, so it can add at most one to each count of each exercise (see that section).
"""
from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..notebook import printable
from .formats import csv_safe, fmt_points as _fmt, number_cell as _number

ITEMS_CSV, MISCONCEPTIONS_CSV, ITEMS_PNG = "items.csv", "misconceptions.csv", "items.png"

# A check is flagged when, of the attempted answers that pass every *other* check of its
# exercise (at least FLAG_MIN_ANSWERS of them), at most FLAG_MAX_SHARE pass it: the rest of
# the exercise is understood, this one check is not (an unclear check, or an unclear contract).
FLAG_MIN_ANSWERS = 4
FLAG_MAX_SHARE = 0.25
# Failures that matched no kept mistake: how many patterns summary.md shows per exercise.
TOP_UNMATCHED = 3
MAX_REASON_CHARS = 200

KEPT, UNMATCHED = "kept mistake", "no kept mistake"


@dataclass
class CheckItem:
    exercise: str
    number: int            # 1-based, in the exercise's order of checks
    check: str
    visibility: str        # "public" or "hidden"
    points: float          # what the check is worth
    attempted: int = 0
    passed: int = 0
    others_passed: int = 0         # attempted answers that pass every other check of the exercise
    passed_with_others: int = 0    # ... and this one too
    mistakes: Counter = field(default_factory=Counter)  # kept mistake -> answers failing here like it
    flag: str = ""

    @property
    def pass_rate(self) -> Optional[float]:
        return self.passed / self.attempted if self.attempted else None


@dataclass
class MistakeItem:
    exercise: str
    kind: str              # KEPT or UNMATCHED
    mistake: str           # the kept mistake's name ("" for UNMATCHED)
    description: str       # its hint; for UNMATCHED, the failure's reason with numbers as '#'
    students: list = field(default_factory=list)
    checks: Counter = field(default_factory=Counter)  # check -> students for whom it showed there


@dataclass
class ExerciseItems:
    label: str
    name: str
    points: float
    submissions: int
    attempted: int = 0
    full_marks: int = 0
    distribution: Counter = field(default_factory=Counter)  # points (attempted answers) -> students
    checks: list = field(default_factory=list)
    mistakes: list = field(default_factory=list)    # MistakeItem (KEPT), most frequent first
    unmatched: list = field(default_factory=list)   # MistakeItem (UNMATCHED), most frequent first


def reason_pattern(reason: str) -> str:
    """A failure's reason as a pattern shared by the answers that fail the same way: the inputs'
    description dropped and every number written '#' (hidden inputs differ per student), control
    characters escaped, at most MAX_REASON_CHARS characters."""
    text = re.sub(r"\s*\[inputs: [^\]]*\]", "", str(reason))
    text = re.sub(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "#", text)
    text = printable(re.sub(r"\s+", " ", text).strip())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"


def analyse(results: list, plan) -> list:
    """One :class:`ExerciseItems` per exercise of ``plan``, counted over ``results``."""
    out = []
    for ep in plan.exercises:
        ex = ep.exercise
        items = ExerciseItems(ep.label, ex.name, float(ex.points), len(results))
        mistakes = {m.name: m for m in ex.mistakes}
        checks = [CheckItem(ep.label, i + 1, cp.check.name, "public" if cp.check.public else "hidden",
                            _check_points(ex, cp.check)) for i, cp in enumerate(ep.checks)]
        by_name = {c.check: c for c in checks}
        kept: dict = {}
        unmatched: dict = {}
        for r in results:
            er = next((e for e in r.exercises if e.label == ep.label), None)
            if er is None or not getattr(er, "attempted", True):
                continue
            items.attempted += 1
            items.distribution[round(er.points, 4)] += 1
            if er.points >= er.max_points - 1e-9:
                items.full_marks += 1
            outcome = {c.check: c for c in er.checks}
            for item in checks:
                mine = outcome.get(item.check)
                if mine is None:
                    continue
                item.attempted += 1
                item.passed += mine.passed
                if all(o.passed for name, o in outcome.items() if name != item.check):
                    item.others_passed += 1
                    item.passed_with_others += mine.passed
                if not mine.passed and mine.mistake in mistakes:
                    item.mistakes[mine.mistake] += 1
            failed = [c for c in er.checks if not c.passed]
            if not failed:
                continue
            seen = [c for c in failed if c.mistake in mistakes]
            if seen:
                for name in dict.fromkeys(c.mistake for c in seen):
                    entry = kept.setdefault(name, MistakeItem(ep.label, KEPT, name, mistakes[name].hint))
                    entry.students.append(r.student)
                    entry.checks.update({c.check for c in seen if c.mistake == name})
            else:
                pattern = reason_pattern(er.reason or failed[0].reason)
                entry = unmatched.setdefault(pattern, MistakeItem(ep.label, UNMATCHED, "", pattern))
                entry.students.append(r.student)
                entry.checks.update({c.check for c in failed} if not er.reason else set())
        order = list(mistakes)
        items.mistakes = sorted(kept.values(), key=lambda m: (-len(m.students), order.index(m.mistake)))
        items.unmatched = sorted(unmatched.values(), key=lambda m: (-len(m.students), m.description))
        for item in checks:
            item.flag = _flag(item, len(checks), by_name)
        items.checks = checks
        out.append(items)
    return out


def _check_points(exercise, check) -> float:
    from ...checks.checking import check_points
    return round(check_points(exercise, check), 4)


def _flag(item: CheckItem, count: int, by_name: dict) -> str:
    if count < 2 or item.others_passed < FLAG_MIN_ANSWERS \
            or item.passed_with_others > FLAG_MAX_SHARE * item.others_passed:
        return ""
    text = (f"{item.passed_with_others} of the {item.others_passed} answers that pass every other check "
            f"of {item.exercise} pass this one")
    failing = item.others_passed - item.passed_with_others
    if item.mistakes:
        name, n = item.mistakes.most_common(1)[0]
        if n * 2 >= failing:
            text += f"; {n} of its failures behave like the kept mistake '{name}' (a shared misconception?)"
    return text


# ------------------------------------------------------------------ files


def _rate(passed: int, attempted: int):
    return round(passed / attempted, 4) if attempted else ""


def write_items_csv(items: list, chapter: int, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["chapter", "exercise", "function", "check_number", "check", "visibility", "points",
                         "submissions", "attempted", "passed", "pass_rate", "others_passed",
                         "passed_with_others", "top_mistake", "top_mistake_students", "flagged", "flag_reason"])
        for ex in items:
            for c in ex.checks:
                top, top_n = c.mistakes.most_common(1)[0] if c.mistakes else ("", 0)
                writer.writerow([chapter, ex.label, ex.name, c.number, csv_safe(c.check), c.visibility,
                                 _number(c.points), ex.submissions, c.attempted, c.passed,
                                 _rate(c.passed, c.attempted), c.others_passed, c.passed_with_others,
                                 csv_safe(top), top_n, int(bool(c.flag)), csv_safe(c.flag)])


def write_misconceptions_csv(items: list, chapter: int, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["chapter", "exercise", "function", "kind", "mistake", "description", "students",
                         "attempted", "share", "checks", "who"])
        for ex in items:
            for m in ex.mistakes + ex.unmatched:
                order = [c.check for c in ex.checks]
                checks = "; ".join(f"{name} ({m.checks[name]})" for name in order if name in m.checks)
                writer.writerow([chapter, ex.label, ex.name, m.kind, csv_safe(m.mistake), csv_safe(m.description),
                                 len(m.students), ex.attempted, _rate(len(m.students), ex.attempted),
                                 csv_safe(checks), csv_safe("; ".join(m.students))[:4000]])


def write_heatmap(items: list, chapter: int, path: Path) -> None:
    """Exercises (rows) by checks (columns, numbered as in items.csv), coloured by pass rate
    among the attempted answers; each cell prints its rate, passed/attempted and whether the
    check is hidden; a flagged check is framed in red."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    width = max((len(ex.checks) for ex in items), default=1)
    rates = np.full((len(items), width), np.nan)
    for i, ex in enumerate(items):
        for c in ex.checks:
            if c.pass_rate is not None:
                rates[i, c.number - 1] = c.pass_rate
    fig, ax = plt.subplots(figsize=(1.6 + 1.05 * width + 2.2, 0.9 + 0.62 * max(1, len(items))))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(rates), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i, ex in enumerate(items):
        for j in range(width):
            c = ex.checks[j] if j < len(ex.checks) else None
            if c is None:
                continue
            if c.pass_rate is None:
                ax.text(j, i, "not\nattempted", ha="center", va="center", fontsize=7, color="#444444")
                continue
            colour = "black" if c.pass_rate > 0.55 else "white"
            hidden = "\nhidden" if c.visibility == "hidden" else ""
            ax.text(j, i, f"{c.pass_rate:.0%}\n{c.passed}/{c.attempted}{hidden}", ha="center", va="center",
                    fontsize=7.5, color=colour)
            if c.flag:
                ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, edgecolor="#d62728",
                                       linewidth=2.5))
    ax.set_xticks(range(width), [str(j + 1) for j in range(width)])
    ax.set_yticks(range(len(items)), [f"{ex.label} {ex.name}" for ex in items], fontsize=9)
    ax.set_xlabel("check number (as in items.csv; framed in red: flagged)")
    ax.set_title(f"Chapter {chapter:02d}: share of attempted answers passing each check")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="pass rate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ summary.md


# Not `_`, `#` or `~`: CommonMark reads no `_` inside a word (ch01_ex3) as emphasis and no `#`
# inside a line as a heading, and emphasis is harmless. Links, images (a remote image loads when
# the file is viewed), code spans, table cells and HTML are not: those marks are escaped.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")


def md_text(text: str) -> str:
    """Text from a submission made inert in Markdown: control characters escaped, Markdown's
    marks backslash-escaped, HTML's angle brackets as entities, on one line."""
    text = printable(re.sub(r"\s+", " ", str(text)))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def _students(n: int) -> str:
    return f"{n} student{'s' if n != 1 else ''}"


def summary_sections(items: list) -> list:
    """The item-analysis part of summary.md (lines)."""
    lines = ["## Item analysis", "",
             "Counted over the **attempted** answers of each exercise (an untouched stub, a missing "
             "exercise or an unreadable notebook is not attempted). Per check: `items.csv`; kept "
             "mistakes and other failures: `misconceptions.csv`.", "",
             f"![Heatmap of exercises by checks: the share of attempted answers passing each check, "
             f"from 0 (dark) to 1 (yellow), hidden checks marked; flagged checks are framed in red]({ITEMS_PNG})", ""]
    flagged = [(ex, c) for ex in items for c in ex.checks if c.flag]
    lines += ["### Checks to look at", ""]
    if flagged:
        lines += ["Almost nobody passes these checks while passing the rest of their exercise: the check "
                  "or the contract may be unclear.", ""]
        lines += [f"- {ex.label} check {c.number} ({c.visibility}) '{md_text(c.check)}': {md_text(c.flag)}."
                  for ex, c in flagged]
    else:
        lines.append(f"None flagged (a check is flagged when, of at least {FLAG_MIN_ANSWERS} answers that pass "
                     f"every other check of its exercise, at most {FLAG_MAX_SHARE:.0%} pass it).")
    lines.append("")
    for ex in items:
        lines += [f"### {ex.label} `{ex.name}`: {ex.attempted} of {ex.submissions} attempted, "
                  f"{ex.full_marks} at full marks", ""]
        dist = " · ".join(f"{_fmt(p)} pt: {n}" for p, n in sorted(ex.distribution.items()))
        lines += [f"Points (out of {_fmt(ex.points)}): {dist or 'none attempted'}"
                  + (f" · not attempted: {ex.submissions - ex.attempted}" if ex.submissions > ex.attempted else ""),
                  "", "| # | check | passed / attempted | |", "|---|---|---|---|"]
        for c in ex.checks:
            rate = f"{c.passed}/{c.attempted} ({c.pass_rate:.0%})" if c.attempted else "–"
            shown = c.check if c.visibility == "public" or "hidden" in c.check else f"{c.check} (hidden)"
            lines.append(f"| {c.number} | {md_text(shown)} | {rate} | "
                         f"{'**flagged**' if c.flag else ''} |")
        lines.append("")
        if ex.mistakes:
            lines += ["Kept mistakes the answers behaved like:", ""]
            lines += [f"- {md_text(m.description)} ('{md_text(m.mistake)}'): **{_students(len(m.students))}**"
                      for m in ex.mistakes]
            lines.append("")
        if ex.unmatched:
            lines += ["Failures that matched no kept mistake (candidates for the next one):", ""]
            lines += [f"- {md_text(m.description)}: **{_students(len(m.students))}**"
                      for m in ex.unmatched[:TOP_UNMATCHED]]
            if len(ex.unmatched) > TOP_UNMATCHED:
                rest = sum(len(m.students) for m in ex.unmatched[TOP_UNMATCHED:])
                lines.append(f"- {len(ex.unmatched) - TOP_UNMATCHED} other reasons: {_students(rest)} "
                             f"(misconceptions.csv)")
            lines.append("")
    return lines
