#!/usr/bin/env python3
"""Per-student hidden inputs against one shared seed: grading time per submission, side by side.

    .venv/bin/python bench/grading_seeds.py [--chapters 1 8] [--size 24] [--jobs 2] [--rounds 3]

Each round grades the same class (``size`` copies of the chapter's solution notebook, under
different student names) twice, alternating the order: once with every student's hidden inputs
drawn from their own seed (the default of ``attention-course grade``), once with one seed for
the class (``--one-seed``). It prints milliseconds per submission for both and their ratio,
per chapter, minimum and median over the rounds. Per-student inputs cost the reference's
outcomes once per student instead of once per class; the target is a ratio of at most 1.2.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import ROOT  # bench/_common.py; puts the repository root on sys.path
from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.sandbox import Sandbox


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chapters", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--size", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'chapter':>7} {'per student ms':>15} {'one seed ms':>12} {'ratio':>6}   (min / median of {args.rounds} rounds,"
          f" {args.size} submissions, {args.jobs} jobs)")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp, Sandbox(jobs=args.jobs, workdir=Path(tmp) / "sandbox") as box:
        for chapter in args.chapters:
            solution = next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))
            folder = Path(tmp) / f"class{chapter}"
            folder.mkdir()
            subs = []
            for i in range(args.size):
                path = folder / f"student{i:03d}.ipynb"
                shutil.copy(solution, path)
                subs.append(Submission(f"student{i:03d}", path))
            times = {True: [], False: []}
            run_grading(subs[:2], chapter, seed=1, sandbox=box)  # warm the sandbox's zygote
            for round_ in range(args.rounds):
                for per_student in ((True, False) if round_ % 2 == 0 else (False, True)):
                    start = time.perf_counter()
                    run = run_grading(subs, chapter, seed=100 + round_, sandbox=box, per_student=per_student)
                    times[per_student].append((time.perf_counter() - start) / len(subs) * 1000)
                    assert all(r.total == run.plan.max_total for r in run.results), "a solution lost points"
            each = {k: (min(v), statistics.median(v)) for k, v in times.items()}
            ratio = each[True][1] / each[False][1]
            worst = max(worst, ratio)
            print(f"{chapter:>7} {each[True][0]:>7.0f} / {each[True][1]:<5.0f} {each[False][0]:>5.0f} / "
                  f"{each[False][1]:<5.0f} {ratio:>6.2f}")
    print(f"largest ratio (medians): {worst:.2f} (target: at most 1.20)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
