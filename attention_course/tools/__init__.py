"""The instructor's tools: everything that makes, checks, releases and grades the course.

* :mod:`.cli`             – the ``attention-course`` command: parses arguments, calls one function per verb
* :mod:`.notebook`        – the one notebook grammar: setup, exercise, solution and check cells, read with
  bounded size and depth (release, scaffold, progress and the grader all parse with it)
* :mod:`.release`         – solution notebook → student notebook; :mod:`.portable` (MyST → portable Markdown),
  :mod:`.bibliography` (author–year citations), :mod:`.exercise_index` (``exercises.md``),
  :mod:`.course_files` (where a course's notebooks are), :mod:`.course_settings` (repository, install cell)
* :mod:`.editions`        – building the two editions of the site (full, student)
* :mod:`.pdf`             – the course as one PDF per edition
* :mod:`.course_config`   – ``course.yml``: chapters released, points, weights, practice
* :mod:`.student_build`   – an instructor's release: the package without answers; :mod:`.stored_checks`,
  its public checks stored as data
* :mod:`.student_release` – ``attention-course release-students``: the student repository, the exposure report
* :mod:`.progress`        – ``attention-course progress``: the public checks of a reader's notebooks
* :mod:`.scaffold`        – ``attention-course new-exercise``; :mod:`.exercise_skeleton`, the new module's text
* :mod:`.grading`         – the sandboxed class grader, its reports and the Gradescope zip

No student process imports any of them: ``check()`` in a notebook loads only the library, the
check engine (:mod:`attention_course.checks`) and the exercises (``tests/test_layout.py``).
"""
from . import course_config  # noqa: F401,E402 - course.yml's points and weights apply in every tool
