"""Grading a class, one function per verb of the command line: what ``attention-course grade`` and
``attention-course merge`` decide and write.

* :func:`grade` -- ``grade TARGET``: one notebook (self-study), a whole class, one shard of a class
  (``--shard I/N``: :mod:`.shards`), or a class again (``--regrade DIR``: only the submissions that are
  new or changed since that run, with its seed);
* :func:`merge` -- ``merge OUT SHARDS...``: the shards of one run joined into the class files of a single run.

A class's files are the same whichever way it was graded (:func:`write_class_files`): grades.csv,
feedback, summary.md and the item analysis (:mod:`.reports`, :mod:`.items`), canvas.csv with a roster
(:mod:`.lms`), moodle-worksheet.csv with a Moodle grading worksheet (:mod:`.moodle`), and the class's
record (``record.jsonl``, which ``--regrade`` reuses).

These functions print nothing but the progress bar: they return what was done, and the command line
(:mod:`attention_course.tools.cli`) prints it. What they refuse to do raises :class:`Refused`, whose
message the command line prints after ``attention-course VERB:`` (exit status 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..notebook import printable
from .grader import Submission, build_plan, discover, result_log_line, run_grading
from .lms import CANVAS_CSV, RosterError, read_roster, write_canvas_files
from .moodle import WorksheetError, read_worksheet, write_moodle_files
from .grader_io import is_grader_error
from .reports import ClassReportsError, ProgressBar, feedback_text, write_class_reports
from .shards import (RECORD_NAME, ShardError, merge_shards, parse_shard, plan_fingerprint, regrade_split,
                     shard_positions, write_class_record, write_shard)


class Refused(Exception):
    """A grading the command refuses (an option, a folder, a roster, a record that cannot be used);
    the message says which and why."""


@dataclass
class GradeOptions:
    """How every submission is graded (``grade``'s options, which a regrade and the shards share)."""
    seed: Optional[int] = None
    jobs: int = 2
    time_limit: float = 10.0
    memory_mb: int = 1024
    extra_checks: Optional[Path] = None
    per_student: bool = True  # False: --one-seed

    def run_options(self, **changes) -> dict:
        """The keyword arguments of :func:`.grader.run_grading`."""
        return dict(dict(seed=self.seed, jobs=self.jobs, time_limit=self.time_limit, memory_mb=self.memory_mb,
                         extra_checks=self.extra_checks, per_student=self.per_student), **changes)


@dataclass
class NotebookGraded:
    """One notebook graded (self-study): its feedback as text for a terminal."""
    feedback: str
    seed: int
    seconds: float


@dataclass
class ShardGraded:
    """Shard ``index`` of ``count`` graded into its record, ``path``, in the folder ``out``."""
    chapter: int
    index: int
    count: int
    graded: int       # submissions of this shard
    class_size: int   # submissions of the whole class
    seconds: float
    seed: int
    path: Path
    out: Path


@dataclass
class ClassFiles:
    """The class files written in ``out`` (:func:`write_class_files`)."""
    out: Path
    plan: object
    results: list
    summary: dict                     # :func:`.reports.write_class_reports`'s answer
    canvas: Optional[dict] = None     # :func:`.lms.write_canvas_csv`'s answer, with a roster
    canvas_assignment: str = ""
    canvas_name: str = CANVAS_CSV
    moodle: Optional[dict] = None     # :func:`.moodle.write_moodle_files`'s answer, with a worksheet
    # Why canvas.csv, or another class file, could not be written (the others were), or which exercises the
    # grader itself failed to grade (grader errors: regrade them). The command line prints them last and
    # exits 2.
    problems: list = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(printable(text))

    @property
    def flagged(self) -> int:
        """Checks that almost nobody passes while passing the rest of their exercise (summary.md)."""
        return sum(1 for ex in self.summary["items"] for c in ex.checks if c.flag)


@dataclass
class ClassGraded:
    """A class graded (``how``: "graded"), graded again ("regraded") or merged from shards ("merged")."""
    how: str
    files: ClassFiles
    seconds: float    # grading time (summed over the shards when merged)
    graded: int       # submissions graded by this run (a regrade: those graded again)
    kept: int = 0     # a regrade: results kept from the earlier run
    shards: int = 0   # a merge: the shards joined


_IGNORED = "ignored (hidden, or not a notebook nor a folder): {}"


def grade(target: Path, chapter: int, options: GradeOptions, *, out: Optional[Path] = None,
          shard: Optional[str] = None, regrade: Optional[Path] = None, only: Optional[list] = None,
          canvas_roster: Optional[Path] = None, canvas_assignment: Optional[str] = None,
          moodle_worksheet: Optional[Path] = None):
    """``attention-course grade``: grade one notebook (``target`` a file) or the folder of a class.

    Returns :class:`NotebookGraded`, :class:`ShardGraded` (with ``shard`` "I/N") or :class:`ClassGraded`
    (a class, or with ``regrade`` the folder of an earlier run); ``only`` (names) are the submissions
    the regrade grades again, changed or not. The class files go to ``out`` (default ``grades-chNN``;
    for one notebook, only when given). Raises :class:`Refused`."""
    target = Path(target)
    try:
        if target.is_file() and shard is not None:
            raise Refused(f"--shard splits a folder of submissions; {target} is one notebook")
        if target.is_file():
            return _grade_notebook(target, chapter, options, out)
        if not target.is_dir():
            raise Refused(f"{target} is neither a notebook nor a folder")
        submissions, ignored = discover(target)
        if canvas_roster:
            read_roster(Path(canvas_roster))  # a bad roster stops before the class is graded
        if moodle_worksheet:
            read_worksheet(Path(moodle_worksheet))  # so does a bad worksheet
        if not submissions:
            raise Refused(f"no submission (.ipynb, or a folder holding one) in {target}")
        if regrade:
            if shard is not None:
                raise ValueError("--regrade rewrites a whole class's files; it does not take --shard")
            return _regrade(submissions, ignored, chapter, options, Path(regrade), out, only,
                            canvas_roster, canvas_assignment, moodle_worksheet)
        if only:
            raise ValueError("--only names the submissions --regrade grades again; give --regrade DIR too")
        class_names, positions, index_count = [s.student for s in submissions], None, None
        if shard is not None:
            index_count = parse_shard(shard)
            if options.seed is None:
                raise ValueError("--shard needs --seed: every shard must draw the same hidden inputs, and without "
                                 "--seed each would draw its own random seed")
            if canvas_roster or moodle_worksheet:
                raise ValueError(("--canvas-roster" if canvas_roster else "--moodle-worksheet")
                                 + " goes to `attention-course merge`, which writes the class files")
            positions = shard_positions(len(submissions), *index_count)
            submissions = [submissions[i] for i in positions]
        out = Path(out or (f"grades-ch{chapter:02d}" if index_count is None else f"grades-ch{chapter:02d}-shards"))
        label = f"chapter {chapter:02d}" + (f", shard {index_count[0]}/{index_count[1]}" if index_count else "")
        run = run_grading(submissions, chapter, progress=ProgressBar(label), **options.run_options())
    except ValueError as error:  # ExtraChecks-, Notebook-, Roster-, Worksheet- and ShardError are ValueErrors
        raise Refused(str(error)) from error
    if ignored:
        run.log.append(printable(_IGNORED.format(', '.join(ignored))))
    if index_count is not None:
        index, count = index_count
        path = write_shard(out, index, count, run.plan, class_names, run.results, positions,
                           per_student=options.per_student, log_header=run.log_header, ignored=ignored,
                           seconds=run.seconds)
        (out / path.name.replace(".jsonl", ".log")).write_text("\n".join(run.log) + "\n", encoding="utf-8")
        return ShardGraded(chapter, index, count, len(run.results), len(class_names), run.seconds, run.plan.seed,
                           path, out)
    files = write_class_files(run.results, run.plan, out, run.log, canvas_roster=canvas_roster,
                              canvas_assignment=canvas_assignment, moodle_worksheet=moodle_worksheet,
                              per_student=options.per_student,
                              log_header=run.log_header, ignored=ignored, seconds=run.seconds)
    return ClassGraded("graded", files, run.seconds, len(run.results))


def _grade_notebook(path: Path, chapter: int, options: GradeOptions, out: Optional[Path]) -> NotebookGraded:
    """Self-study: one notebook's feedback; its class files too when ``out`` is given (no record)."""
    run = run_grading([Submission(path.stem, path)], chapter, **options.run_options())
    done = NotebookGraded(printable(feedback_text(run.results[0], run.plan), newlines=True), run.plan.seed,
                          run.seconds)
    if out:
        try:
            write_class_reports(run.results, run.plan, Path(out), run.log)
        except ClassReportsError as error:
            raise Refused(f"{done.feedback}\n{error}") from error
    return done


def _regrade(submissions: list, ignored: list, chapter: int, options: GradeOptions, earlier: Path,
             out: Optional[Path], only: Optional[list], canvas_roster, canvas_assignment,
             moodle_worksheet=None) -> ClassGraded:
    """Grade again only the submissions that are new or changed since the run in ``earlier`` (or are
    named in ``only``), with that run's seed; keep the others' results; rewrite the class files."""
    only = [n.strip() for n in only if n.strip()] if only else None
    try:
        if not (earlier / RECORD_NAME).is_file():
            raise ShardError(f"--regrade {earlier}: no {RECORD_NAME} there (the record a class run or a merge "
                             f"writes beside grades.csv); grade the class without --regrade first")
        header, keep, again = regrade_split(earlier / RECORD_NAME, submissions, only)
        if header["chapter"] != chapter:
            raise ShardError(f"--regrade {earlier}: that run graded chapter {header['chapter']}, not {chapter}")
        if options.seed is not None and options.seed != header["seed"]:
            raise ShardError(f"--seed {options.seed} differs from the seed of the run in {earlier} "
                             f"({header['seed']}); regrading keeps that run's seed: leave --seed out")
        if options.per_student != header["per_student"]:
            raise ShardError(f"the run in {earlier} was graded " + ("without" if header["per_student"] else "with")
                             + " --one-seed; regrade with the same choice")
        plan = build_plan(chapter, header["seed"], options.extra_checks)
        if plan_fingerprint(plan) != header["plan"]:
            raise ShardError(f"the grading plan changed since the run in {earlier} (another course version, other "
                             f"points or check weights in course.yml, or other --extra-checks): put them back as "
                             f"they were, or grade the whole class again, without --regrade")
    except ShardError as error:
        raise Refused(printable(str(error))) from error
    new, log_header, seconds = {}, list(header["log_header"]), 0.0
    if again:
        run = run_grading(again, chapter, progress=ProgressBar(f"chapter {chapter:02d}, regrade"),
                          **options.run_options(seed=header["seed"]))
        new, log_header, seconds = {r.student: r for r in run.results}, run.log_header, run.seconds
    results = [keep[s.student] if s.student in keep else new[s.student] for s in submissions]
    log = log_header + [printable(f"regraded {len(again)} submission(s) (new, changed since the run in {earlier}, "
                                  f"unreadable, or named by --only); kept {len(keep)} from that run")]
    log += [result_log_line(r, header["per_student"]) for r in results]
    if ignored:
        log.append(printable(_IGNORED.format(', '.join(ignored))))
    log.append(f"graded {len(again)} submission(s) in {seconds:.1f} s")
    files = write_class_files(results, plan, Path(out or earlier), log, canvas_roster=canvas_roster,
                              canvas_assignment=canvas_assignment, moodle_worksheet=moodle_worksheet,
                              per_student=header["per_student"],
                              log_header=log_header, ignored=ignored, seconds=seconds)
    return ClassGraded("regraded", files, seconds, len(again), kept=len(keep))


def merge(out: Path, shard_paths: list, *, extra_checks: Optional[Path] = None,
          canvas_roster: Optional[Path] = None, canvas_assignment: Optional[str] = None,
          moodle_worksheet: Optional[Path] = None) -> ClassGraded:
    """``attention-course merge``: join the records of ``grade --shard`` (files, or folders holding them)
    into the class files of one single run in ``out``. Raises :class:`Refused`."""
    try:
        header, shards, results = merge_shards(shard_paths)
        if canvas_roster:
            read_roster(Path(canvas_roster))
        if moodle_worksheet:
            read_worksheet(Path(moodle_worksheet))
        plan = build_plan(header["chapter"], header["seed"], extra_checks)
        if plan_fingerprint(plan) != header["plan"]:
            raise ShardError(f"the shards were graded with another grading plan than this course's chapter "
                             f"{header['chapter']:02d}" + (f" with --extra-checks {extra_checks}" if extra_checks
                                                           else "")
                             + " (another course version, other points or check weights in course.yml, or other "
                             "--extra-checks): merge with the same ones")
    except ValueError as error:  # ShardError, ExtraChecksError, RosterError and WorksheetError are ValueErrors
        raise Refused(printable(str(error))) from error
    count = header["shards"]
    seconds = sum(s.header["seconds"] for s in shards)
    log = list(header["log_header"])
    log.append(f"merged from {count} shard(s): " + ", ".join(
        f"{s.header['shard']}/{count} ({len(s.records)} submissions, {s.header['seconds']:.1f} s)" for s in shards))
    log += [result_log_line(r, header["per_student"]) for r in results]
    if header["ignored"]:
        log.append(printable(_IGNORED.format(', '.join(header['ignored']))))
    log.append(f"graded {len(results)} submission(s) in {seconds:.1f} s summed over {count} shard(s)")
    files = write_class_files(results, plan, Path(out), log, canvas_roster=canvas_roster,
                              canvas_assignment=canvas_assignment, moodle_worksheet=moodle_worksheet,
                              per_student=header["per_student"],
                              log_header=header["log_header"], ignored=header["ignored"], seconds=seconds)
    return ClassGraded("merged", files, seconds, len(results), shards=count)


def write_class_files(results: list, plan, out: Path, log: list, *, canvas_roster: Optional[Path] = None,
                      canvas_assignment: Optional[str] = None, moodle_worksheet: Optional[Path] = None,
                      per_student: bool, log_header: list, ignored: list, seconds: float) -> ClassFiles:
    """The class files of a graded class (a single run, a regrade or merged shards), the same for all:
    the reports, the Canvas files with a roster and the Moodle files with a worksheet (a roster or
    worksheet that cannot be used, or that matches no submission, is reported in ``problems``, the
    other files are written), then the class's record. Each file is written whatever another one's
    trouble; what failed, and the exercises that the grader itself could not grade, are in ``problems``."""
    try:
        files = ClassFiles(Path(out), plan, results, write_class_reports(results, plan, out, log))
    except ClassReportsError as error:
        files = ClassFiles(Path(out), plan, results, error.summary)
        files.problem(str(error))
    if canvas_roster:
        files.canvas_assignment = canvas_assignment or f"Chapter {plan.chapter:02d}"
        try:
            files.canvas = write_canvas_files(results, plan, Path(canvas_roster), files.out, files.canvas_assignment)
        except RosterError as error:
            files.problem(str(error))
        except OSError as error:
            files.problem(f"could not write {CANVAS_CSV}: {error}")
        if files.canvas is not None and results and not files.canvas["matched"]:
            files.problem(f"no submission matches a student of the Canvas roster {canvas_roster}: {CANVAS_CSV} "
                          f"has no student (see {files.canvas['unmatched_file']})")
    if moodle_worksheet:
        try:
            files.moodle = write_moodle_files(results, plan, Path(moodle_worksheet), files.out)
        except WorksheetError as error:
            files.problem(str(error))
        except OSError as error:
            files.problem(f"could not write the Moodle files: {error}")
        if files.moodle is not None and results and not files.moodle["matched"]:
            files.problem(f"no submission matches a participant of the Moodle worksheet {moodle_worksheet}: "
                          f"{files.moodle['worksheet']} has no grade (see {files.moodle['unmatched_file']})")
    try:
        write_class_record(files.out, plan, results, per_student=per_student, log_header=log_header,
                           ignored=ignored, seconds=seconds)
    except OSError as error:
        files.problem(f"could not write {RECORD_NAME}: {error}")
    ungraded = [f"{r.student} {e.label}" for r in results for e in r.exercises if is_grader_error(e.reason)]
    if ungraded:
        files.problem(f"the grader itself failed on {len(ungraded)} exercise(s), which scored 0 marked "
                      f"'grader error' in grades.csv and their feedback: grade them again (--regrade DIR "
                      f"--only NAMES): {', '.join(ungraded[:10])}" + (" ..." if len(ungraded) > 10 else ""))
    return files
