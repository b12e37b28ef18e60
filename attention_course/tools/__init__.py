"""The instructor's tools: everything that makes, checks, releases and grades the course.

* :mod:`.cli`             – the ``attention-course`` command: parses arguments, calls one function per verb
* :mod:`.notebook`        – the notebook grammar: setup, exercise, solution and check cells
* :mod:`.release`         – solution notebook → student notebook (portable Markdown)
* :mod:`.editions`        – building the two editions of the site (full, student)
* :mod:`.pdf`             – the course as one PDF per edition
* :mod:`.course_config`   – ``course.yml``: chapters released, points, weights, practice
* :mod:`.student_build`   – an instructor's release: the package without answers, stored public checks
* :mod:`.student_release` – ``attention-course release-students``: the student repository, the exposure report
* :mod:`.progress`        – ``attention-course progress``: the public checks of a reader's notebooks
* :mod:`.scaffold`        – ``attention-course new-exercise``: the skeleton of a new exercise
* :mod:`.grading`         – the sandboxed class grader, its reports and the Gradescope zip

No student process imports any of them: ``check()`` in a notebook loads only the library and
:mod:`attention_course.checks` (``tests/test_layout.py``).
"""
from . import course_config  # noqa: F401,E402 - course.yml's points and weights apply in every tool
