"""The course library's own answers to exercises, and how graded work is refused credit for them.

The student-facing library (``functional``, ``multihead``, ``translation``, ``transformer``, ...)
holds finished versions of some exercises, because later chapters build on them. Calling one of
them for the exercise it answers earns no credit. Two places enforce this, with the same words:

* the grader (:mod:`attention_course.tools.grading`): in the sandboxed child that runs an exercise, the
  library's answer to *that* exercise is disabled as an object (its code raises, a class refuses
  construction and subclassing); the parent hands the child the messages built here;
* :func:`attention_course.check` in a notebook: while the student's object runs the public checks,
  the same objects are disabled in the kernel for the duration of the check and restored afterwards,
  and the exercise's reference itself is disabled too (the grading child cannot import it at all).

What counts as the library's answer to an exercise: any runtime object named like the exercise's
answer (``functional.masked_softmax`` for ``ch03_ex1``), the reference object itself, and the
objects listed in :data:`LIBRARY_ANSWERS` (adapters of them answer the contract too, e.g. a thin
subclass of ``multihead.CausalAttention`` for ``ch05_ex3``). A later exercise may use them: the
refusal holds only while the exercise they answer is checked or graded.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import types
from typing import Iterator

from ..rooms import LIBRARY
from .disable import disable_class, disable_function

# label -> "module.attribute" of library objects that answer the exercise's contract (beyond the
# objects named like the answer, which are found by name). tests/test_library_contracts.py keeps
# this table and the exercises' kept alternatives in step.
LIBRARY_ANSWERS = {
    "ch03_ex1": ("functional.masked_softmax", "translation.masked_softmax"),
    "ch03_ex2": ("functional.AdditiveAttention",),
    "ch04_ex3": ("transformer.sinusoidal_encoding",),
    "ch05_ex1": ("transformer.causal_mask",),
    "ch05_ex3": ("multihead.CausalAttention",),
    "ch06_ex1": ("multihead.MultiHeadAttention", "multihead.SDPAMultiHeadAttention"),
    "ch08_ex2": ("transformer.MaskedMultiHeadAttention",),
    "ch08_ex3": ("transformer.DecoderBlock",),
}


def no_credit_message(module_name: str, attr: str, label: str, answer_name: str) -> str:
    """The words both the grader and ``check()`` use when graded work calls the course's answer."""
    return (f"{module_name}.{attr} is the course's answer to {label}: no credit for calling it; "
            f"write your own {answer_name}")




def blocked_answers(exercise) -> list:
    """``[(module, attribute, label, message)]``: the library's answers to ``exercise``, sorted."""
    out = set()
    listed = set(LIBRARY_ANSWERS.get(exercise.label, ()))
    ref = exercise.reference
    for name in LIBRARY:
        module_name = f"attention_course.{name}"
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a chapter module not written yet
            continue
        attrs = {exercise.name, getattr(ref, "__name__", None)}
        attrs |= {entry.split(".", 1)[1] for entry in listed if entry.split(".", 1)[0] == name}
        for attr in attrs:
            if not attr or not hasattr(module, attr):
                continue
            if attr == exercise.name or getattr(module, attr) is ref or f"{name}.{attr}" in listed:
                out.add((module_name, attr, exercise.label,
                         no_credit_message(module_name, attr, exercise.label, exercise.name)))
    # One object reached under two names (translation re-exports functional.masked_softmax) is
    # disabled once, under its first name, so that every route to it gives the same words.
    unique, seen = [], set()
    for entry in sorted(out):
        target = getattr(importlib.import_module(entry[0]), entry[1])
        if id(target) not in seen:
            seen.add(id(target))
            unique.append(entry)
    return unique


def _reference_entry(exercise) -> list:
    """The reference itself (in ``attention_course.exercises``, which no grading child can import)."""
    ref = exercise.reference
    module_name = getattr(ref, "__module__", "") or ""
    attr = getattr(ref, "__name__", exercise.name)
    return [(module_name, attr, exercise.label,
             no_credit_message(module_name, attr, exercise.label, exercise.name))]


def refusal_for(exercise, obj) -> str | None:
    """The no-credit message when ``obj`` itself is, or derives from, a library answer to
    ``exercise`` (the grader refuses such a class when the cell defines it); else None."""
    import sys
    if exercise.stored:  # a student build: it ships no answer to refuse
        return None
    for module_name, attr, _, message in blocked_answers(exercise) + _reference_entry(exercise):
        target = getattr(sys.modules.get(module_name), attr, None)
        if target is None:
            continue
        if obj is target or (inspect.isclass(obj) and inspect.isclass(target) and issubclass(obj, target)):
            return message
    return None


@contextlib.contextmanager
def answers_refused(exercise) -> Iterator[None]:
    """Disable, for the duration of the block, every library answer to ``exercise`` and its
    reference with the grading child's own disablers (:mod:`.disable`), and restore the code they replaced."""
    import sys
    if exercise.stored:  # a student build: it ships no answer to refuse
        yield
        return
    undo = []
    try:
        for module_name, attr, _, message in blocked_answers(exercise) + _reference_entry(exercise):
            target = getattr(sys.modules.get(module_name), attr, None)
            if isinstance(target, type):
                disable_class(target, message, undo)
            elif isinstance(target, types.FunctionType):
                disable_function(target, message, undo)
        yield
    finally:
        for function, code in reversed(undo):
            function.__code__ = code
