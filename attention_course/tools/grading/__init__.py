"""The class grader: ``attention-course grade``, ``gradescope`` and ``similarity``.

One module per concern:

* :mod:`.zygote_main` – the zygote and its sandboxed children (rlimits, clean env, the walls in order)
* :mod:`.walls`       – the kernel's walls around a child: private namespaces, Landlock, the seccomp allow-list
  (libseccomp; the hand-written deny-list where it is missing), capabilities (copied beside the zygote)
* :mod:`.syscalls`    – the system calls a child may make, frozen as data (copied beside the zygote)
* :mod:`.runtime`     – the student-facing runtime package a child may import
* :mod:`.sandbox`     – parent side: zygote processes, safe reading and validation of outcomes
* :mod:`.grader_io`   – the grader's own files: removal that never recurses or raises, grader-side I/O errors
* :mod:`.submissions` – who handed in which notebook, and one submission's cells read as data (bounded)
* :mod:`.grader`      – a class's plan (from :func:`attention_course.checks.plan.exercise_plan`), submissions, judging, scores
* :mod:`.classrun`    – one function per verb of the command line: grade a class, a shard or a regrade; merge shards
* :mod:`.extra`       – ``--extra-checks``: private checks added by an instructor
* :mod:`.reports`     – grades.csv, feedback, summary + histogram, log, Gradescope's results.json
* :mod:`.formats`     – the cells of every class CSV: escaped text, numbers, points
* :mod:`.items`       – item analysis: items.csv, misconceptions.csv, items.png, summary.md's sections
* :mod:`.lms`         – canvas.csv, Canvas's gradebook import (``--canvas-roster``: its download names matched),
  the unmatched list and the feedback zip for Canvas's re-upload
* :mod:`.moodle`      – Moodle's download folders, its grading worksheet filled (``--moodle-worksheet``), its feedback zip
* :mod:`.shards`      – ``grade --shard I/N``, ``merge`` and ``grade --regrade``: per-student records (JSON Lines)
* :mod:`.synthetic`   – a kept mistake as a stand-alone exercise cell (synthetic classes: tests, bench)
* :mod:`.similarity`  – ``attention-course similarity``: pairs of exercise cells worth a look (copydetect; read, never run)
* :mod:`.known_sources` – the course's published answers (solution cells, kept alternatives) the report compares with
* :mod:`.own_code`    – cells with no code of their own, or that reach outside the exercise (``similarity --graded``)
* :mod:`.gradescope`  – the Gradescope autograder zip and its ``run_autograder``

Trusted and untrusted code never share a process: the student's cells run only in a
forked, sandboxed child that returns plain outcomes; every decision is the parent's.
"""
from .grader import GradingRun, Submission, build_plan, discover, run_grading

__all__ = ["GradingRun", "Submission", "build_plan", "discover", "run_grading"]
