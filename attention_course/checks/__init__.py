"""The check engine: what runs an exercise's checks, in a notebook, in ``progress`` and in the grader.

One module per concern:

* :mod:`.registry`       – exercises, checks, kept mistakes and alternatives (labels ``chNN_exM``)
* :mod:`.calls`          – running a check's call and recording plain outcomes (a grading child imports it)
* :mod:`.plan`           – the plan of one exercise's checks (seed → calls → the reference's outcomes), the one
  function that ``check()``, ``progress``, the grader and Gradescope build it with
* :mod:`.checking`       – ``check(label, obj)``, the comparisons and the hints
* :mod:`.answers`        – the course library's own answers to exercises, refused credit
* :mod:`.disable`        – the stand-ins that disable code (a grading child imports it)
* :mod:`.dropout_checks` – checking dropout by its properties, never by one random stream

It imports the library (:mod:`attention_course.rooms` says what may import what) and finds the
exercises by name when first asked for one. Nothing here is imported when the package is.
"""
