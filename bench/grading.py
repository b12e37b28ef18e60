#!/usr/bin/env python3
"""Benchmark the class grader on a synthetic class of 200 submissions of one chapter.

    .venv/bin/python bench/grading.py [--chapter 1] [--size 200] [--jobs 2] [--time-limit 5]

The class mixes correct notebooks (the solution), untouched student notebooks (stubs),
wrong implementations (every kept mistake whose source can be recovered, made a stand-alone
exercise cell by :func:`attention_course.tools.grading.synthetic.mistake_source`) and hostile or
broken submissions (infinite loops, memory bombs, exits, kills, monkeypatching, malformed
notebooks). It prints submissions per minute, the ratio to running the solution notebook's
exercise cells (and their checks) alone in-process, and whether the target of 200
submissions in under 60 s holds; then the time of the class reports (the item analysis
included) and how many of the kept mistakes pasted into the class the item analysis finds
with their counts; the size and cost of a shard record and of ``merge``; the cost per
submission in worker-seconds, and from it a projection (not a measurement) of grading
2,000 students x 9 chapters with 2 and 4 jobs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from _common import ROOT  # bench/_common.py; puts the repository root on sys.path
from attention_course.checks.checking import hidden_seed, outcomes_for
from attention_course.tools.grading.grader import discover, run_grading
from attention_course.tools.grading.reports import write_class_reports
from attention_course.tools.grading.synthetic import mistake_source
from attention_course.tools.notebook import exercise_cell_index, exercise_code, load_cells, setup_code, with_exercise_code
from attention_course.checks.registry import all_exercises

TARGET_SECONDS, TARGET_SIZE = 60.0, 200


def _cells_by_label(nb: dict) -> dict:
    return exercise_cell_index(nb["cells"])


_with = with_exercise_code


def _mistake_sources(chapter: int) -> list:
    """(label, mistake name, source) of the kept mistakes whose source can be recovered."""
    out = []
    for ex in all_exercises(chapter):
        for m in ex.mistakes:
            src = mistake_source(ex, m)
            if src is not None:
                out.append((ex.label, m.name, src))
    return out


HOSTILE = [
    ("loop", "while True:\n    pass\n"),
    ("membomb", "blocks = []\nwhile True:\n    blocks.append(bytearray(50_000_000))\n"),
    ("sysexit", "import sys\nsys.exit(0)\n"),
    ("osexit", "import os\nos._exit(3)\n"),
    ("killself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
    ("killparent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"),
    ("readrepo", f"print(open({str(ROOT / 'attention_course/checks/registry.py')!r}).read())\n"),
    ("network", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n"),
    ("printscore", "print('Score: 100/100')\n"),
    ("importfail", "import not_a_module\n"),
    ("monkeypatch", "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"),
]


def build_class(chapter: int, size: int, folder: Path) -> dict:
    sol_path = next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))
    stub_path = next((ROOT / "chapters").glob(f"{chapter:02d}_*.ipynb"))
    sol, stub = json.loads(sol_path.read_text()), json.loads(stub_path.read_text())
    labels = list(_cells_by_label(sol))
    mistakes = _mistake_sources(chapter)
    kinds = {"correct": 0, "stub": 0, "mistake": 0, "hostile": 0, "malformed": 0}
    built = Counter()  # (label, kept mistake) -> students given it
    plan = (["correct"] * 50 + ["stub"] * 15 + ["mistake"] * 25 + ["hostile"] * 8 + ["malformed"] * 2)
    for i in range(size):
        kind = plan[i % len(plan)]
        if kind == "mistake" and not mistakes:
            kind = "correct"
        name = f"student{i:03d}"
        if kind == "correct":
            data = json.dumps(sol)
        elif kind == "stub":
            data = json.dumps(stub)
        elif kind == "mistake":
            label, mistake, src = mistakes[kinds["mistake"] % len(mistakes)]
            built[label, mistake] += 1
            data = json.dumps(_with(sol, label, src))
        elif kind == "hostile":
            what, code = HOSTILE[kinds["hostile"] % len(HOSTILE)]
            label = labels[kinds["hostile"] % len(labels)]
            data = json.dumps(_with(sol, label, code))
        else:
            data = "{ not json" if kinds["malformed"] % 2 == 0 else json.dumps(dict(sol, nbformat=3))
        kinds[kind] += 1
        (folder / f"{name}.ipynb").write_text(data)
    return kinds, built


def reference_seconds(chapter: int, seed: int) -> tuple:
    """Running the solution's setup + exercise cells in-process, then also every graded check's calls."""
    sol_path = next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))
    cells = load_cells(sol_path)
    blocks = exercise_code(cells)
    exercises = all_exercises(chapter)
    start = time.perf_counter()
    namespace = {"__name__": "__main__"}
    exec(compile(setup_code(cells), "setup", "exec"), namespace)
    for ex in exercises:
        exec(compile(blocks[ex.label], ex.label, "exec"), namespace)
    cells_only = time.perf_counter() - start
    calls = [(ex, c.make_calls(hidden_seed(seed, i))) for ex in exercises for i, c in enumerate(ex.checks)]
    start = time.perf_counter()
    for ex, cs in calls:
        outcomes_for(namespace[ex.name], cs, ex.kind)
    return cells_only, cells_only + time.perf_counter() - start


PROJECTED = (2000, 9)  # students, chapters: the class that scales out


def shard_overhead(run, subs: list, folder: Path) -> tuple:
    """(bytes, seconds to write, seconds to merge) of the whole class as one shard (0/1): what a
    sharded run adds to grading (the record, and ``merge``'s reading, checks and reports)."""
    from attention_course.tools.grading.grader import build_plan
    from attention_course.tools.grading.shards import merge_shards, write_shard
    start = time.perf_counter()
    path = write_shard(folder, 0, 1, run.plan, [s.student for s in subs], run.results, list(range(len(subs))),
                       per_student=True, log_header=run.log_header, ignored=[], seconds=run.seconds)
    written = time.perf_counter() - start
    start = time.perf_counter()
    header, _, results = merge_shards([folder])
    plan = build_plan(header["chapter"], header["seed"])
    write_class_reports(results, plan, folder / "merged", [])
    return path.stat().st_size, written, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chapter", type=int, default=1)
    parser.add_argument("--size", type=int, default=TARGET_SIZE)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="ac-bench-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        kinds, built = build_class(args.chapter, args.size, folder)
        subs, _ = discover(folder)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        run = run_grading(subs, args.chapter, seed=args.seed, jobs=args.jobs, time_limit=args.time_limit)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        summary = write_class_reports(run.results, run.plan, Path(tmp) / "out", run.log)
        report_seconds = time.perf_counter() - start
        record_bytes, record_seconds, merge_seconds = shard_overhead(run, subs, Path(tmp) / "shard")
    cells_only, cells_and_calls = reference_seconds(args.chapter, args.seed)
    per_sub = seconds / len(subs)
    totals = [r.total for r in run.results]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} before the run "
          f"(other processes may share the CPU); Landlock ABI {run.landlock_abi}")
    print(f"class: {len(subs)} submissions of chapter {args.chapter:02d}: " + ", ".join(f"{v} {k}" for k, v in kinds.items()))
    print(f"graded in {seconds:.1f} s with {args.jobs} workers, time limit {args.time_limit:g} s "
          f"(includes starting the zygotes and waiting out the infinite loops)")
    print(f"throughput: {len(subs) / seconds * 60:.0f} submissions per minute ({per_sub * 1000:.0f} ms per submission)")
    print(f"reference: the solution's setup + exercise cells alone in-process {cells_only * 1000:.1f} ms; "
          f"with every graded check's calls {cells_and_calls * 1000:.1f} ms")
    print(f"ratio: grading one submission costs {per_sub / cells_and_calls:.1f}x running its cells and calls "
          f"in-process ({per_sub / cells_only:.0f}x the cells alone)")
    print(f"scores: full marks {sum(t == run.plan.max_total for t in totals)}, zero {sum(t == 0 for t in totals)}, "
          f"mean {sum(totals) / len(totals):.2f} / {run.plan.max_total:g}; zygote restarts {run.restarts}")
    print(f"class reports (grades.csv, feedback, summary.md, histogram, item analysis): {report_seconds:.2f} s")
    found = Counter({(m.exercise, m.mistake): len(m.students) for ex in summary["items"] for m in ex.mistakes})
    # Every pasted kept mistake must be found, at least as often as it was pasted (another
    # submission may behave like it too: a hostile one that returns zeros, say).
    missed = {key: (n, found.get(key, 0)) for key, n in built.items() if found.get(key, 0) < n}
    print(f"item analysis: {len(built) - len(missed)} of the {len(built)} kept mistakes pasted into the class "
          f"found with their counts" + (f"; short: {missed}" if missed else ""))
    print(f"shard record (grade --shard): {record_bytes / len(subs) / 1000:.1f} kB per submission, written in "
          f"{record_seconds:.2f} s; merge (read, check, rebuild the plan, class reports): {merge_seconds:.2f} s")
    # Worker-seconds per submission: the run's wall time times its workers, over the class
    # (zygote start-up, the reference outcomes and the hostile submissions' time-outs included).
    worker_seconds = seconds * args.jobs / len(subs)
    print(f"per-submission cost: {worker_seconds:.2f} worker-seconds (chapter {args.chapter:02d}, this class's mix)")
    students, chapters = PROJECTED
    for jobs in (2, 4):
        hours = students * chapters * worker_seconds / jobs / 3600
        print(f"projection, not a measurement: {students:,} students x {chapters} chapters on one machine with "
              f"{jobs} jobs: {hours:.1f} h ({hours * 60 / chapters:.0f} min per chapter); as 10 shards "
              f"(10 such machines): {hours * 60 / 10:.0f} min" + ("" if jobs <= (os.cpu_count() or 1) else
                                                                  f" (this machine has {os.cpu_count()} cores)"))
    print("  (assumes every chapter costs what this one did per submission, one free core per job, and the "
          "same mix of stubs, mistakes and time-outs)")
    scaled = seconds * TARGET_SIZE / len(subs)
    ok = scaled < TARGET_SECONDS
    print(f"target: {TARGET_SIZE} submissions in < {TARGET_SECONDS:.0f} s on 2 cores: "
          f"{'HOLDS' if ok else 'MISSED'} ({scaled:.1f} s for {TARGET_SIZE})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
