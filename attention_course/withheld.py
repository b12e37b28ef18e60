"""Stand-ins for library pieces that an instructor's release withholds.

In a student build (:mod:`attention_course.tools.student_build`), a library function or class that
is the answer to an exercise graded in that release is not shipped. Its name stays, bound to
a stand-in made here, so that the chapter's later cells and exercises that may use it keep
working on **the student's own answer**: the stand-in calls the function (or builds the class)
of the same name that the student's notebook defines. Before the student has written it, the
stand-in raises and says which exercise to do first.

Nothing here holds an answer; the full course package never uses this module.
"""
from __future__ import annotations

import sys
from typing import Any


class WithheldError(NotImplementedError):
    """A withheld piece was used before the student's own answer was defined."""


def _own_answer(where: str, label: str, answer_name) -> Any:
    if answer_name is None:  # a piece with a contract of its own: nothing of the student's fits it
        raise WithheldError(f"{where} is withheld in this release: it answers {label}, which is graded. "
                            "It ships with a later release, after the deadline.")
    main = sys.modules.get("__main__")
    own = getattr(main, answer_name, None)
    own_module = getattr(own, "__module__", "") or ""
    if own is None or own_module.split(".")[0] == __name__.split(".")[0]:
        raise WithheldError(
            f"{where} is withheld in this release: it is the answer to {label}, which is graded. "
            f"Until it is released, the course uses your own {answer_name}: run your {label} cell first.")
    return own


def function(where: str, label: str, answer_name):
    """A function that calls the student's own ``answer_name`` (None: one that always raises)."""
    def stand_in(*args, **kwargs):
        return _own_answer(where, label, answer_name)(*args, **kwargs)
    stand_in.__name__ = stand_in.__qualname__ = where.rsplit(".", 1)[-1]
    stand_in.__doc__ = f"Withheld in this release (the answer to {label}): calls your own {answer_name}."
    return stand_in


class _StandInClass:
    _where = _label = _answer_name = ""

    def __new__(cls, *args, **kwargs):
        return _own_answer(cls._where, cls._label, cls._answer_name)(*args, **kwargs)


def cls(where: str, label: str, answer_name) -> type:
    """A class whose construction builds the student's own ``answer_name`` (None: always raises)."""
    name = where.rsplit(".", 1)[-1]
    return type(name, (_StandInClass,), {
        "_where": where, "_label": label, "_answer_name": answer_name,
        "__doc__": f"Withheld in this release (the answer to {label}): builds your own {answer_name}.",
        "__module__": __name__})
