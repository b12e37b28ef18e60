"""The text of a new exercise module, for ``attention-course new-exercise`` (:mod:`.scaffold`):
a skeleton that imports and registers, with the parts of an exercise module in their fixed order
(contract, imports and the ``Kept`` lists, the reference, the inputs of a public and a hidden
check, two kept mistakes, three kept alternatives, the registration; an optional error-message
check weighing ``ERROR_WEIGHT``). Every implementation is a placeholder raising
``NotImplementedError`` with the label, so that a forgotten TODO cannot pass as an answer.
"""
from __future__ import annotations

# ---------------------------------------------------------------- the contract

def contract_placeholder(name: str, kind: str, module: str) -> str:
    """The TODO contract: the same words in the notebook's statement and the module's docstring."""
    head = ("TODO: the precise contract (name, arguments with their shapes, dtype, what to return,\n"
            "what to raise on bad input), in the same words in this exercise's statement in the\n"
            f"solution notebook and in the docstring of\n`{module}`.\n\n")
    if kind == "class":
        return head + (
            f"Write a module `{name}(size)`, a subclass of `nn.Module`.\n\n"
            "- `size`: TODO what the constructor's arguments mean.\n"
            "- Parameters: TODO the name and shape of every parameter (the checks load their\n"
            "  values from a state dict, by name).\n"
            "- `forward(x)`: `x` is TODO a float tensor of shape `(batch, n, size)`; return TODO a\n"
            "  tensor of shape `(...)`, of the dtype of `x`, holding TODO.\n"
            "- Raise `ValueError` naming `x` and its shape when TODO (or drop this clause and the\n"
            "  error check).")
    return head + (
        f"Write `{name}(x)`.\n\n"
        "- `x`: TODO a float tensor of shape `(...)`.\n"
        "- Return TODO a tensor of shape `(...)`, of the dtype of `x`, holding TODO.\n"
        "- Raise `ValueError` naming `x` and its shape when TODO (or drop this clause and the\n"
        "  error check).")


def module_docstring(label: str, title: str, contract: str) -> str:
    """``chNN_exM: Title.`` and the contract, as the exercise modules open (raw when it has a backslash)."""
    prefix = "r" if "\\" in contract or "\\" in title else ""
    return f'{prefix}"""{label}: {title.rstrip(".")}.\n\n{contract}\n"""'


# ---------------------------------------------------------------- the module

def _section(title: str) -> str:
    return f"# {title} ".ljust(92, "-")


_IMPORTS = {
    "function": "import torch\n",
    "class": "import torch\nfrom torch import nn\n",
}

_REFERENCE = {
    "function": '''\
def {name}(x):
    """Reference: TODO how it computes the contract's result (one line)."""
    raise NotImplementedError("{label}: TODO write the reference {name}")
''',
    "class": '''\
class {name}(nn.Module):
    """Reference: TODO how it computes the contract's result (one line)."""

    def __init__(self, size):
        super().__init__()
        raise NotImplementedError("{label}: TODO write the reference {name}")

    def forward(self, x):
        raise NotImplementedError("{label}: TODO write the reference {name}.forward")
''',
}

_CALLS = {
    "function": '''\
def _public_calls(seed):
    """TODO: a small, typical input."""
    g = gen(seed)
    return [Call(args=(torch.randn(3, 5, generator=g),))]


def _hidden_calls(seed):
    """TODO: random sizes and values, edge cases included."""
    g = gen(seed)
    return [Call(args=(torch.randn(randint(g, 1, 4), randint(g, 1, 6), generator=g),))]


# OPTIONAL: the error-message check (delete it, with its Check below, when the contract
# raises nothing). Its first call is valid, so that raising on everything cannot pass.
# Error checks carry at most a fifth of a chapter's public checks and of its points.

def _bad_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 3, generator=g),)),
            Call(args=(torch.randn(2, 0, generator=g),))]  # TODO: an input the contract refuses
''',
    "class": '''\
def _public_calls(seed):
    """TODO: a small, typical input (init_args: the constructor's arguments)."""
    g = gen(seed)
    return [Call(init_args=(4,), init_seed=seed, args=(torch.randn(2, 3, 4, generator=g),))]


def _hidden_calls(seed):
    """TODO: random sizes and values, edge cases included."""
    g = gen(seed)
    size = randint(g, 2, 8)
    x = torch.randn(randint(g, 1, 3), randint(g, 1, 5), size, generator=g)
    return [Call(init_args=(size,), init_seed=seed, args=(x,))]


# OPTIONAL: the error-message check (delete it, with its Check below, when the contract
# raises nothing). Its first call is valid, so that raising on everything cannot pass.
# Error checks carry at most a fifth of a chapter's public checks and of its points.

def _bad_calls(seed):
    g = gen(seed)
    return [Call(init_args=(4,), init_seed=0, args=(torch.randn(2, 3, 4, generator=g),)),
            Call(init_args=(4,), init_seed=0, args=(torch.randn(2, 3, 5, generator=g),))]  # TODO
''',
}

_CALLS_NOTE = {
    "function": "",
    "class": "# Parameter values come from a state_dict (by name), never from creation order.\n",
}

_KEPT = {
    "function": '''\
@{kept}.keep("TODO {what} {nth}", "TODO: {text}")
def _{what}_{number}(x):
    raise NotImplementedError("{label}: TODO write {todo}")
''',
    "class": '''\
@{kept}.keep("TODO {what} {nth}", "TODO: {text}")
class _{cls}{number}(nn.Module):
    def __init__(self, size):
        super().__init__()
        raise NotImplementedError("{label}: TODO write {todo}")
''',
}

_MODULE = '''\
{docstring}
from __future__ import annotations

{imports}
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


{s_reference}


{reference}

{s_inputs}


# Draw every input from gen(seed), never from the global RNG. The public check runs at
# its fixed seed (the student sees its outcome); the hidden check runs on inputs drawn
# afresh at grading time, so draw its sizes from the seed too. Every clause of the
# contract needs a check (a batch, a dtype, an edge case): one function per check.
{calls_note}
{calls}

def _bad_words(call):
    """What the error message must contain: the argument's name and its shape (any usual form)."""
    return ["x", shape_of(call.args[0])]


{s_mistakes}


# Plausible wrong answers that students write, each wrong in one way only (validate the
# inputs as the reference does, unless the mistake is the missing validation). A hint
# names the mistake, never the answer's code.

{mistakes}

{s_alternatives}


# Correct answers in clearly different styles (einsum or loops, float64 inside, another
# course's conventions, other words in the error message); each passes every check.

{alternatives}

{s_registration}

# Check hints stay neutral: what the check exercises and where to look, never which
# mistake was made (that is the kept mistakes' job).
register(Exercise(
    label={q_label}, title={q_title},
    name={q_name}, reference={name}, points={points}, kind={q_kind},
    checks=[
        Check("TODO what the public check exercises", _public_calls, seed=0,
              hint="TODO: what this check exercises, where to look."),
        Check("TODO what the hidden check exercises (hidden)", _hidden_calls, seed=1, public=False,
              hint="TODO: what this check exercises, where to look."),
        Check("TODO bad input raises ValueError naming x and its shape", _bad_calls, seed=2,
              must_mention=_bad_words, weight=ERROR_WEIGHT,  # OPTIONAL: see _bad_calls
              hint="TODO: which inputs are refused, and what the message must name."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
'''


def _quoted(text: str) -> str:
    """A Python string literal in double quotes, as the exercise modules write them."""
    return f'"{text}"' if '"' not in text and "\\" not in text and text.isprintable() else repr(text)


def _points_text(points: float) -> str:
    return str(int(points)) if float(points) == int(points) else repr(float(points))


def render_module(label: str, title: str, name: str, kind: str, points: float, contract: str) -> str:
    """The text of a new exercise module: a skeleton that imports and registers, its
    parts in the fixed order of every exercise module."""
    def kept(kind_of: str, what: str, cls: str, text: str, todos: list) -> str:
        return "\n\n".join(_KEPT[kind].format(kept=kind_of, what=what, cls=cls, nth=nth, number=i, text=text,
                                              label=label, todo=todo)
                           for i, (nth, todo) in enumerate(todos, start=1))
    mistakes = kept("mistakes", "mistake", "Mistake", "the hint naming this mistake.",
                    [("one", f"a plausible wrong {name}"), ("two", f"another plausible wrong {name}")])
    alternatives = kept("alternatives", "alternative", "Alternative", "the style in a few words",
                        [("one", f"{name} in another style"), ("two", f"{name} in a second other style"),
                         ("three", f"{name} in a third other style")])
    fields = dict(label=label, title=title, name=name, kind=kind)
    return _MODULE.format(
        docstring=module_docstring(label, title, contract), imports=_IMPORTS[kind],
        s_reference=_section("The reference"), reference=_REFERENCE[kind].format(**fields),
        s_inputs=_section("Inputs of the public and hidden checks"), calls_note=_CALLS_NOTE[kind],
        calls=_CALLS[kind], s_mistakes=_section("Kept mistakes, each with its hint"), mistakes=mistakes,
        s_alternatives=_section("Kept alternatives (correct answers in other styles)"),
        alternatives=alternatives, s_registration=_section("Registration"),
        points=_points_text(points), **fields, **{f"q_{key}": _quoted(value) for key, value in fields.items()})

