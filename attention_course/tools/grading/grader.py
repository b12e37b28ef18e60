"""Grading orchestration: plan (calls + reference outcomes), submissions, children, judging.

Trusted work happens here, in the grader's process: drawing every check's inputs from the grading
seed (each exercise's plan by :func:`attention_course.checks.plan.exercise_plan`), computing the
reference's outcomes once per class, judging each student's outcomes with
:func:`attention_course.checks.checking.judge`, and scoring. The student's code runs only in
sandboxed children (:mod:`.sandbox`), which get plain calls and return plain outcomes.
"""
from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from ...checks.checking import CheckResult, check_points, judge, stub_reason
from ...checks.plan import ExercisePlan, exercise_plan
from ..notebook import NotebookError, load_cells, printable, setup_code
from ...checks.registry import all_exercises
from .extra import ExerciseTable, load_extra_checks
from .collusion import outcome_digest
from .grader_io import grader_error_reason
from .runtime import PACKAGE_DIR, RUNTIME_MODULES
# Reading submissions lives in .submissions; these names stay importable from here.
from .submissions import (MAX_NOTEBOOK_BYTES, Prepared, Submission, _defines, _mentions, discover,  # noqa: F401
                          prepare, submission_cells)

# ------------------------------------------------------------------ the plan

@dataclass
class GradingPlan:
    chapter: int
    seed: int
    exercises: list
    standard_setup: str
    extra_files: list = field(default_factory=list)

    @property
    def max_total(self) -> float:
        return float(sum(p.exercise.points for p in self.exercises))

    def calls_data(self, hidden_only: bool = False) -> dict:
        """Every check's calls by exercise; ``hidden_only``: None in place of the public checks'
        (a student's file, read over the class's)."""
        return {p.label: [None if hidden_only and cp.check.public else [asdict(c) for c in cp.calls]
                          for cp in p.checks] for p in self.exercises}


def standard_setup(chapter: int, root: Optional[Path] = None) -> str:
    """The setup cell of the chapter's own student notebook (used when a submission lost its tag)."""
    root = Path(root) if root else PACKAGE_DIR.parent
    for folder in ("chapters", "solutions"):
        for path in sorted((root / folder).glob(f"{chapter:02d}_*.ipynb")):
            try:
                return setup_code(load_cells(path))
            except NotebookError:
                continue
    return "import math\nimport torch\nfrom torch import nn\nfrom attention_course import check\n"


def student_seed(seed: int, student: str) -> int:
    """The seed of one student's hidden inputs: from the grading seed (the course's secret) and the
    student's identity, so that no two students see the same hidden inputs and each one's are
    reproducible from the log (``--seed``)."""
    digest = hashlib.sha256(f"{int(seed)}\0{student}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def student_plan(plan: GradingPlan, seed: int, reference: bool = True) -> GradingPlan:
    """One student's plan: the class ``plan`` with its **hidden** checks drawn afresh from ``seed``
    (:func:`student_seed`), their reference outcomes computed for this student.

    The grading inputs of the public checks' kinds come from the class seed, shared by the class
    (students never see them either; the secret seed decides them): recomputing the reference on
    every check for every student cost up to twice the grading time of a class (bench/grading_seeds.py).
    """
    exercises = [exercise_plan(ep.exercise, seed, hidden=True, keep=ep, reference=reference) for ep in plan.exercises]
    return GradingPlan(plan.chapter, seed, exercises, plan.standard_setup, plan.extra_files)


def build_plan(chapter: int, seed: int, extra_checks: Optional[Path] = None,
               root: Optional[Path] = None) -> GradingPlan:
    exercises = all_exercises(chapter)
    if not exercises:
        raise ValueError(f"chapter {chapter} has no registered exercise")
    table = ExerciseTable(exercises)
    extra = load_extra_checks(extra_checks, table) if extra_checks else []
    plans = [exercise_plan(ex, seed, hidden=True, cells_from=table.cells_from[ex.label]) for ex in table.ordered()]
    return GradingPlan(chapter, seed, plans, standard_setup(chapter, root), extra)


# ------------------------------------------------------------------ results

@dataclass
class ExerciseResult:
    label: str
    name: str
    title: str
    max_points: float
    points: float = 0.0
    checks: list = field(default_factory=list)  # CheckResult
    reason: str = ""                           # why the whole exercise scored 0 (if it did)
    notes: list = field(default_factory=list)
    elapsed: float = 0.0
    # False when nothing of the student's was tried: the untouched stub, no cells for the
    # exercise, or an unreadable submission (the item analysis counts the others).
    attempted: bool = True
    stub: bool = False  # the exercise's stub, untouched: its cell or every failed check raised NotImplementedError
    # [check, digest of the student's outputs, digest of the reference's] for each hidden check (.collusion)
    outputs: list = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One short reason for a CSV cell (empty at full marks)."""
        if self.points >= self.max_points - 1e-9:
            return ""
        if self.reason:
            return self.reason
        failed = [c for c in self.checks if not c.passed]
        return f"{len(failed)}/{len(self.checks)} checks failed: {failed[0].reason}" if failed else ""


@dataclass
class SubmissionResult:
    student: str
    path: Optional[Path]
    exercises: list = field(default_factory=list)
    problem: str = ""
    notes: list = field(default_factory=list)
    seed: Optional[int] = None  # the seed of this student's hidden inputs

    @property
    def total(self) -> float:
        return round(sum(e.points for e in self.exercises), 4)

    @property
    def max_total(self) -> float:
        return round(sum(e.max_points for e in self.exercises), 4)


ERROR_CHECKS_NOTE = ("the checks of error messages ({names}) count once every other check of the exercise "
                     "passes: raising the right error without computing the result earns nothing")


def _pay_error_checks_with_the_work(ep: ExercisePlan, result: ExerciseResult) -> None:
    """A check whose reference raises on some call tests an error message. It pays only when the
    exercise's value checks all pass: an answer that only raises ValueError naming every argument
    once earned 0.4-1.3 points per chapter for computing nothing."""
    errors = {cp.check.name for cp in ep.checks if any(o.get("status") == "raised" for o in cp.reference)}
    if not errors or all(c.passed for c in result.checks if c.check not in errors):
        return
    withheld = [c for c in result.checks if c.check in errors and c.passed and c.points > 0]
    for c in withheld:
        c.points = 0.0
    if withheld:
        result.notes.append(ERROR_CHECKS_NOTE.format(names=", ".join(f"'{c.check}'" for c in withheld)))


class Grader:
    """Grade submissions of one chapter with a :class:`~.sandbox.Sandbox`."""

    def __init__(self, plan: GradingPlan, sandbox, time_limit: float = 10.0, memory_mb: int = 1024,
                 plan_for_seed: Optional[Callable] = None):
        """``plan_for_seed(seed) -> GradingPlan``: each student's hidden inputs come from
        :func:`student_seed` (without it, every student gets ``plan``'s inputs)."""
        self.plan, self.sandbox = plan, sandbox
        self.time_limit, self.memory_mb = float(time_limit), int(memory_mb)
        self.plan_for_seed = plan_for_seed
        self._plans = {}  # seed -> (plan, path of the student's hidden calls)
        self._written = {}  # seed -> path of the student's hidden calls, or the OSError writing them
        self._plan_lock = threading.Lock()  # building a plan saves and restores torch's global RNG
        self.calls_path = self._calls_file(plan)
        self._judge_lock = threading.Lock()  # kept mistakes may seed torch's global RNG

    def _calls_file(self, plan: GradingPlan) -> str:
        return self.sandbox.write_calls(f"ch{plan.chapter:02d}-{plan.seed}-{id(plan)}", plan.calls_data())

    def plan_of(self, student: str) -> tuple:
        """(seed, plan, calls file) of one student's hidden inputs."""
        if self.plan_for_seed is None:
            return self.plan.seed, self.plan, self.calls_path
        seed = student_seed(self.plan.seed, student)
        with self._plan_lock:
            if seed not in self._plans:
                written = self._written.get(seed)
                if isinstance(written, OSError):
                    raise written
                plan = self.plan_for_seed(seed)
                path = written or self._write_hidden_calls(plan)
                self._plans[seed] = (plan, path)
            plan, calls_path = self._plans[seed]
        return seed, plan, calls_path

    def _write_hidden_calls(self, plan: GradingPlan) -> str:
        return self.sandbox.write_calls(f"ch{plan.chapter:02d}-{plan.seed}-{id(self)}-hidden",
                                        plan.calls_data(hidden_only=True))

    def write_all_hidden_calls(self, students: list) -> None:
        """Write every student's hidden calls before the first child runs (their inputs only: the
        reference's outcomes are computed when each student is graded), so that nothing a child does
        while the class is graded can stop the grader writing a classmate's. A write that fails is that
        student's grader error, reported when they are graded."""
        if self.plan_for_seed is None:
            return
        for student in students:
            seed = student_seed(self.plan.seed, student)
            if seed not in self._written:
                try:
                    self._written[seed] = self._write_hidden_calls(self.plan_for_seed(seed, reference=False))
                except OSError as error:
                    self._written[seed] = error

    def forget(self, student: str) -> None:
        """Drop a graded student's plan and hidden calls (two students of one seed share them)."""
        if self.plan_for_seed is None:
            return
        seed = student_seed(self.plan.seed, student)
        with self._plan_lock:
            entry = self._plans.pop(seed, None)
            self._written.pop(seed, None)
        if entry is not None:
            try:
                os.unlink(entry[1])
            except OSError:
                pass

    # ---------------------------------------------------------- one exercise
    def _request(self, ep: ExercisePlan, setup: str, code: str, calls_path: Optional[str] = None) -> dict:
        """``calls_path``: a student's own hidden calls, read over the class's (``self.calls_path``)."""
        ex = ep.exercise
        own = calls_path if calls_path and calls_path != self.calls_path else None
        return {"label": ex.label, "name": ex.name, "kind": ex.kind, "setup": setup, "code": code,
                "blocked": ep.blocked, "calls_path": self.calls_path, "student_calls_path": own,
                "timeout": self.time_limit, "memory_mb": self.memory_mb}

    def grade_exercise(self, ep: ExercisePlan, prepared: Prepared, calls_path: Optional[str] = None) -> ExerciseResult:
        ex = ep.exercise
        result = ExerciseResult(ex.label, ex.name, ex.title, float(ex.points),
                                notes=list(prepared.notes.get(ex.label, [])))
        if prepared.code.get(ex.label) is None:
            result.reason = prepared.problem.get(ex.label, "nothing to run")
            result.checks = self._all_failed(ep, result.reason)
            result.attempted = False
            return result
        start = time.perf_counter()
        report, outcome, problem, stderr = self.sandbox.run(self._request(ep, prepared.setup, prepared.code[ex.label],
                                                                          calls_path))
        result.elapsed = time.perf_counter() - start
        self._decide(ep, result, report, outcome, problem, stderr)
        _pay_error_checks_with_the_work(ep, result)
        result.points = round(sum(c.points for c in result.checks), 4)
        if result.points == 0 and not result.reason:
            failed = [c for c in result.checks if not c.passed]
            if failed and all(c.stub for c in failed):
                result.reason = stub_reason("the exercise cell still raises NotImplementedError")
                result.stub = True
        if result.stub:
            result.attempted = False
        return result

    def _all_failed(self, ep: ExercisePlan, reason: str) -> list:
        return [CheckResult(ep.label, cp.check.name, False, reason, "", None, 0.0,
                            check_points(ep.exercise, cp.check)) for cp in ep.checks]

    def _ended(self, report) -> str:
        if report.zygote_died:
            return ("the grading process that ran this exercise was killed (a submission must not signal other "
                    "processes); the grader restarted it and scored this exercise 0")
        if report.timed_out:
            return f"timed out after {self.time_limit:g} s (infinite loop, or far too slow?)"
        if report.signal is not None:
            try:
                name = signal.Signals(report.signal).name
            except ValueError:
                name = f"signal {report.signal}"
            if report.signal == signal.SIGXCPU:
                return f"used more CPU time than allowed ({name})"
            return f"the process was killed by {name} (it crashed, or killed itself)"
        if report.exit_code == 71:
            return "the grader could not set up its sandbox (an error of the grader, not of the submission)"
        return f"the process ended without finishing (exit code {report.exit_code}: sys.exit()/os._exit()?)"

    def _decide(self, ep, result, report, outcome, problem, stderr) -> None:
        if report.exit_code == 71 and "sandbox setup failed" in stderr:
            result.reason = f"the grader could not set up its sandbox: {stderr.strip()[:300]}"
            result.checks = self._all_failed(ep, result.reason)
            return
        if report.zygote_died or outcome is None:
            if not report.zygote_died and not report.timed_out and problem and problem != "no outcome":
                result.reason = (f"the grader rejected the results ({problem}); this happens when the code "
                                 f"tampers with how results are saved")
            else:
                result.reason = self._ended(report)
            result.checks = self._all_failed(ep, result.reason)
            return
        phase, error = outcome["phase"], outcome.get("error")
        cell = "setup cell" if phase == "setup" else "exercise cell"
        if phase in ("setup", "exercise"):
            if error is not None:
                result.reason = self._error_reason(cell, error)
                result.stub = error["type"] == "NotImplementedError"
            else:
                result.reason = f"while running the {cell}: " + self._ended(report)
            result.checks = self._all_failed(ep, result.reason)
            return
        if phase == "missing":
            defined = outcome.get("defined", [])
            result.reason = (f"the exercise's cells define no `{ep.exercise.name}`"
                             + (f" (they define {', '.join(defined[:8])}; renamed?)" if defined else ""))
            result.checks = self._all_failed(ep, result.reason)
            return
        got_all = outcome["outcomes"]
        checks = []
        for i, cp in enumerate(ep.checks):
            points = check_points(ep.exercise, cp.check)
            if i < len(got_all) and len(got_all[i]) == len(cp.calls):
                with self._judge_lock:
                    try:
                        r = judge(ep.exercise, cp.check, cp.calls, got_all[i], cp.reference)
                    except Exception as error:  # noqa: BLE001 - a malformed value the comparison chokes on
                        r = CheckResult(ep.label, cp.check.name, False,
                                        f"the result could not be compared ({type(error).__name__})", cp.check.hint)
            elif i < len(got_all):
                r = CheckResult(ep.label, cp.check.name, False, "the results have the wrong number of calls", "")
            else:
                r = CheckResult(ep.label, cp.check.name, False, "not run: " + self._ended(report), "")
            r.max_points = points
            r.points = points if r.passed else 0.0
            checks.append(r)
            if not cp.check.public and i < len(got_all) and cp.reference is not None:
                result.outputs.append([cp.check.name, outcome_digest(got_all[i]) or "",
                                       outcome_digest(cp.reference) or ""])
        result.checks = checks
        if phase != "done" and not any(c.passed for c in checks):
            result.reason = self._ended(report)

    def _error_reason(self, cell: str, error: dict) -> str:
        kind, message, where = error["type"], error["message"], error["where"]
        at = f" ({where})" if where else ""
        if kind == "SystemExit":
            return f"the {cell} called sys.exit(){at}; remove it"
        if kind == "MemoryError" or "allocate" in message.lower():
            return f"the {cell} ran out of memory (limit {self.memory_mb} MB above the baseline){at}"
        if kind == "NotImplementedError":
            return stub_reason(f"the {cell} raised NotImplementedError") + at
        return f"the {cell} raised {kind}: {message[:300]}{at}"

    # ---------------------------------------------------------- a class
    def grade(self, submissions: list, progress: Optional[Callable] = None) -> list:
        results = {}
        pending = {}
        tasks = []
        for sub in submissions:
            res = SubmissionResult(sub.student, sub.path)
            results[sub.student] = res
            try:
                prepared = prepare(sub, self.plan)
            except (NotebookError, OSError) as error:
                res.problem = str(error)
                for ep in self.plan.exercises:
                    er = ExerciseResult(ep.label, ep.exercise.name, ep.exercise.title, float(ep.exercise.points),
                                        reason=f"malformed submission: {error}", attempted=False)
                    er.checks = self._all_failed(ep, er.reason)
                    res.exercises.append(er)
                continue
            res.notes = prepared.general
            res.exercises = [None] * len(self.plan.exercises)
            pending[sub.student] = len(self.plan.exercises)
            for i, ep in enumerate(self.plan.exercises):
                tasks.append((sub.student, i, ep, prepared))
        self.write_all_hidden_calls(list(pending))
        done = [sum(1 for r in results.values() if r.student not in pending)]
        lock = threading.Lock()
        if progress:
            progress(done[0], len(submissions))

        def work(task):
            student, i, ep, prepared = task
            try:
                seed, plan, calls_path = self.plan_of(student)
                results[student].seed = seed
                er = self.grade_exercise(plan.exercises[i], prepared, calls_path)
            except Exception as error:  # noqa: BLE001 - a grader bug (or its disk) must not stop the class
                er = ExerciseResult(ep.label, ep.exercise.name, ep.exercise.title, float(ep.exercise.points),
                                    reason=grader_error_reason(error), attempted=False)
                er.checks = self._all_failed(ep, er.reason)
            with lock:
                results[student].exercises[i] = er
                pending[student] -= 1
                if pending[student] == 0:
                    self.forget(student)  # a class of any size: one plan per student in flight
                    done[0] += 1
                    if progress:
                        progress(done[0], len(submissions))

        with ThreadPoolExecutor(max_workers=self.sandbox.jobs) as pool:
            list(pool.map(work, tasks))
        return [results[s.student] for s in submissions]


def default_seed() -> int:
    import secrets
    return secrets.randbelow(2**31 - 1)


# ------------------------------------------------------------------ entry points

@dataclass
class GradingRun:
    plan: GradingPlan
    results: list
    log: list
    seconds: float
    landlock_abi: int
    restarts: int
    log_header: list = field(default_factory=list)  # the log's lines before the students'


def _log_header(plan: GradingPlan, sandbox, time_limit, memory_mb, jobs) -> list:
    import platform
    from ... import __version__
    lines = [f"attention-course {__version__} grade · chapter {plan.chapter:02d}",
             f"started: {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"seed: {plan.seed}  (pass --seed {plan.seed} to reproduce these hidden inputs; each student's are "
             f"drawn from it and their name, seed shown on their line)",
             f"exercises: {', '.join(f'{p.label} ({p.exercise.points:g} pt, {len(p.checks)} checks)' for p in plan.exercises)}",
             f"limits: {time_limit:g} s and {memory_mb} MB per exercise; {jobs} worker(s)",
             f"python {platform.python_version()}, torch {torch.__version__}",
             f"course package (checks, references): {PACKAGE_DIR}"]
    if plan.extra_files:
        lines.append(f"extra checks: {', '.join(plan.extra_files)}")
    abi = sandbox.landlock_abi
    lines.append(f"sandbox: Landlock ABI {abi}" + (" (files, TCP, signals, abstract sockets)" if abi >= 6 else "")
                 if abi else "sandbox: WARNING Landlock unavailable; children are not confined to their scratch folder")
    lines.append(f"protections: {sandbox.info.get('protections', 'not reported by the zygote')}")
    for w in sandbox.warnings:
        lines.append(f"warning: {w}")
    blocked = [f"{m}.{a} ({l})" for p in plan.exercises for m, a, l, *_ in p.blocked]
    if blocked:
        lines.append(f"the course's own answers refused in the children: {', '.join(blocked)}")
    return lines


def result_log_line(r: SubmissionResult, per_student: bool = True) -> str:
    """One student's line of grading.log."""
    reasons = "; ".join(f"{e.label}: {e.summary}" for e in r.exercises if e.summary)
    seed_note = f" (hidden inputs: seed {r.seed})" if per_student and r.seed is not None else ""
    return printable(f"{r.student}: {r.total:g}/{r.max_total:g}{seed_note}") + (
        printable(f"  [{r.problem or reasons}]")[:400] if (r.problem or reasons) else "")


def run_grading(submissions: list, chapter: int, *, seed: Optional[int] = None, jobs: int = 2,
                time_limit: float = 10.0, memory_mb: int = 1024, extra_checks: Optional[Path] = None,
                progress: Optional[Callable] = None, sandbox=None, landlock: bool = True,
                root: Optional[Path] = None, per_student: bool = True) -> GradingRun:
    """Grade ``submissions`` (from :func:`discover`); reuse ``sandbox`` when given.

    With ``per_student`` (the default), each student's hidden inputs are drawn from
    :func:`student_seed` (``seed`` and the student's name); otherwise all share ``seed``'s."""
    from .sandbox import Sandbox
    start = time.perf_counter()
    seed = default_seed() if seed is None else int(seed)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        own = sandbox is None
        if own:
            sandbox = Sandbox(jobs=jobs, landlock=landlock)
            sandbox.launch()  # the zygotes import torch while the reference outcomes are computed
        try:
            plan = build_plan(chapter, seed, extra_checks, root)
            if own:
                sandbox.wait_ready()
            log = _log_header(plan, sandbox, time_limit, memory_mb, sandbox.jobs)
            grader = Grader(plan, sandbox, time_limit, memory_mb,
                            (lambda s, reference=True: student_plan(plan, s, reference)) if per_student else None)
            results = grader.grade(submissions, progress)
            restarts = sandbox.restarts
            abi = sandbox.landlock_abi
        finally:
            if own:
                sandbox.close()
    finally:
        torch.set_num_threads(old_threads)
    seconds = time.perf_counter() - start
    header = list(log)
    log += [result_log_line(r, per_student) for r in results]
    log.append(f"graded {len(results)} submission(s) in {seconds:.1f} s; zygote restarts: {restarts}")
    return GradingRun(plan, results, log, seconds, abi, restarts, header)
