"""The exercise registry: what every exercise of the course declares.

An exercise (label ``chNN_exM``) registers

* the **name** a student's notebook must define (a function or a class),
* its **reference** implementation (trusted code, never shipped to a grading child),
* its **checks**: each check builds one or more :class:`Call` objects from a seed.
  Public checks use the check's fixed seed; hidden checks use a seed chosen at
  grading time, so the expected values are only known once the grader runs the
  reference on freshly drawn inputs,
* its **mistakes**: plausible wrong implementations kept as test fixtures. When a
  student's output matches a mistake's output, the hint of that mistake is shown.

A :class:`Call` is plain data (tensors, numbers, strings), so the same check can run
in the notebook (in-process) or be handed to an untrusted child process by the
grader, which only needs :func:`attention_course.checks.calls.run_call` to execute it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

LABEL_RE = re.compile(r"^ch(\d\d)_ex(\d+)$")


@dataclass
class Call:
    """One invocation of a student's object, described as plain data.

    For a function: ``obj(*args, **kwargs)``.
    For a class (``init_args`` is not None): ``torch.manual_seed(init_seed)``, then
    ``instance = obj(*init_args, **init_kwargs)``, optionally
    ``instance.load_state_dict(state_dict)`` and ``instance.train(train)``, then
    ``getattr(instance, method or "__call__")(*args, **kwargs)``.
    ``call_seed`` seeds torch's global generator right before the call (dropout).
    ``grads_of`` lists positional args whose gradient of ``output.sum()`` is
    returned too (the args are made leaf tensors that require grad).
    ``report`` asks for extra facts about a module instance: ``"param_shapes"``
    (name -> shape of every parameter) and ``"buffer_names"``; ``"module_args_training"``
    reports the mode (``training``) each layer argument is left in after the call;
    ``"largest_tensor"`` reports the largest tensor the call created, in entries of the memory
    under it (``calls._LargestTensor``), for checks that an answer works tile by tile;
    ``"inputs_unchanged"`` names the tensor arguments the call changed in place (compared with a
    copy taken before it), so that every compare, a custom one too, fails an answer that writes
    into an input the reference leaves alone, and says which;
    ``"kernel_memory"`` records what the Triton kernels run in the interpreter during the call loaded
    and stored (``calls._KernelMemory``: loads and stores past a tensor, the largest load, the rows
    each program read), for chapter 11's kernel checks.
    An argument that is one of the course's layers is given as plain data, a dict
    ``{calls.MODULE_KEY: "multihead.MultiHeadAttention", "init_args": ..., "init_kwargs":
    ..., "state_dict": ..., "train": ...}``; each call builds its own layer from it.
    ``strict_state``: by default a persistent buffer that the answer registers on its
    own (a constant, a cached ``arange``) and that ``state_dict`` does not name keeps
    its value, because contracts fix parameters, not buffers; a missing parameter or
    an unexpected key still fails as ``load_state_dict`` says. ``True`` loads the
    state dict exactly, for contracts that say which buffers may be persistent.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    init_args: Optional[tuple] = None
    init_kwargs: dict = field(default_factory=dict)
    init_seed: Optional[int] = None
    state_dict: Optional[dict] = None
    train: Optional[bool] = None
    call_seed: Optional[int] = None
    method: Optional[str] = None
    grads_of: tuple = ()
    report: tuple = ()
    strict_state: bool = False


@dataclass
class Check:
    """One named check of an exercise.

    ``make_calls(seed)`` returns the calls to run. ``compare`` decides, from the
    student's and the reference's outcomes, whether the check passes; the default
    compares every returned value (type, dtype, shape, then values within
    ``rtol``/``atol``). ``hint`` is shown when the check fails and no kept mistake
    explains the failure, so it must stay neutral (what the check exercises, where to
    look), never blame one mistake. ``must_mention`` lists what an error message must
    contain when the reference raises: words (e.g. the argument's name) and shapes,
    given as tuples of ints, which match their numbers in any usual printed form
    (``(2, 3, 4)``, ``torch.Size([2, 3, 4])``, ``[2, 3, 4]``, ``2x3x4``); or it is a
    function of the call returning that list. ``weight`` sets the check's share of
    the exercise's points (points are split among the checks by weight).
    """

    name: str
    make_calls: Callable[[int], list]
    hint: str
    seed: int = 0
    compare: Optional[Callable] = None
    rtol: float = 1e-4
    atol: float = 1e-5
    must_mention: Any = ()
    public: bool = True
    weight: float = 1.0
    # In a student build: the reference's outcomes on this check's calls, stored at release.
    stored_outcomes: Optional[list] = None


@dataclass
class Mistake:
    """A plausible wrong implementation and the hint that names the mistake."""

    name: str
    hint: str
    impl: Any
    # In a student build: check name -> this mistake's outcomes on that check's calls.
    stored_outcomes: Optional[dict] = None


@dataclass
class Alternative:
    """A correct implementation in another style (einsum, loops, float64 inside, another
    course's conventions, another module layout). Kept so that the tests prove the
    checks accept every correct answer, not only the reference's form. ``style``
    says in a few words how it differs from the reference."""

    name: str
    style: str
    impl: Any


@dataclass
class Exercise:
    label: str
    title: str
    name: str
    reference: Any
    checks: list
    mistakes: list = field(default_factory=list)
    alternatives: list = field(default_factory=list)
    points: float = 1.0
    kind: str = "function"  # or "class"
    # A student build (attention_course.tools.student_build) registers exercises without their
    # reference: the public checks' expected outcomes and the kept mistakes' outcomes are
    # stored data, and the argument names (for feedback) are stored beside them.
    input_names: Optional[list] = None
    stored: bool = False

    @property
    def chapter(self) -> int:
        return int(LABEL_RE.match(self.label).group(1))

    @property
    def public_checks(self) -> list:
        return [c for c in self.checks if c.public]


REGISTRY: dict[str, Exercise] = {}


class UnknownExerciseError(LookupError):
    """Raised for a label that no exercise registered."""


def register(exercise: Exercise) -> Exercise:
    if not LABEL_RE.match(exercise.label):
        raise ValueError(
            f"exercise label {exercise.label!r} does not look like chNN_exM (e.g. ch03_ex2)")
    if exercise.label in REGISTRY:
        raise ValueError(f"exercise label {exercise.label!r} is registered twice")
    if not exercise.checks:
        raise ValueError(f"exercise {exercise.label} registers no check")
    names = [c.name for c in exercise.checks]
    if len(set(names)) != len(names):
        raise ValueError(f"exercise {exercise.label} has two checks with the same name")
    REGISTRY[exercise.label] = exercise
    return exercise


def _load_exercises() -> bool:
    """Import the exercise modules (which fills the registry); False in a student build, whose
    public checks are stored data registered by its ``public_checks`` package. The engine finds
    the exercises by name, as plug-ins: it depends on none of their code."""
    import importlib
    import importlib.util
    package = __package__.split(".")[0]
    if importlib.util.find_spec(f"{package}.exercises") is None:
        importlib.import_module(f"{package}.public_checks")
        return False
    importlib.import_module(f"{package}.exercises")
    return True


_LOADED: list = []   # [True] once the full course's exercises are loaded ([False]: a student build's)
_PENDING: list = []  # hooks to run on the next lookup, once (see when_loaded)


def when_loaded(hook: Callable[[bool], None]) -> None:
    """Run ``hook(full)`` once, on the first lookup of an exercise from now on, after the exercises
    are loaded (``full`` is False in a student build). The instructor's tools set the points and
    weights of ``course.yml`` this way (:mod:`attention_course.tools.course_config`): the engine
    itself knows nothing of a course's configuration."""
    _PENDING.append(hook)


def _load_all() -> None:
    if not _LOADED:
        _LOADED.append(_load_exercises())
    while _PENDING:  # every lookup comes here: once loaded and configured, nothing to do
        _PENDING.pop(0)(_LOADED[0])


def get_exercise(label: str) -> Exercise:
    _load_all()
    if not isinstance(label, str) or label not in REGISTRY:
        known = ", ".join(sorted(REGISTRY)) or "(none)"
        raise UnknownExerciseError(
            f"unknown exercise label {label!r}; known labels: {known}")
    return REGISTRY[label]


def all_exercises(chapter: Optional[int] = None) -> list:
    _load_all()
    out = [ex for _, ex in sorted(REGISTRY.items())]
    if chapter is not None:
        out = [ex for ex in out if ex.chapter == chapter]
    return out


def exercises_from_store(data: dict, compares) -> list:
    """The exercises of a student build, from its stored public checks (see
    :mod:`attention_course.tools.student_build`): ``data`` as stored, ``compares(label)`` the module
    holding that exercise's shipped compares. No reference: the checks carry the reference's
    stored outcomes, the kept mistakes theirs."""
    out = []
    for label, entry in sorted(data.items()):
        checks = []
        for item in entry["checks"]:
            calls = [Call(**fields) for fields in item["calls"]]
            mention = {id(call): words for call, words in zip(calls, item["must_mention"])}
            compare = getattr(compares(label), item["compare"]) if item["compare"] else None
            checks.append(Check(item["name"], (lambda seed, calls=calls: calls), item["hint"], seed=item["seed"],
                                compare=compare, rtol=item["rtol"], atol=item["atol"],
                                must_mention=(lambda call, mention=mention: mention.get(id(call), [])),
                                weight=item["weight"], stored_outcomes=item["outcomes"]))
        mistakes = [Mistake(m["name"], m["hint"], None, stored_outcomes=m["outcomes"]) for m in entry["mistakes"]]
        out.append(Exercise(label, entry["title"], entry["name"], None, checks, mistakes, [], entry["points"],
                            entry["kind"], input_names=entry["input_names"], stored=True))
    return out
