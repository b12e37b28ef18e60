"""The stand-ins that disable code: how the course's own answer to an exercise earns no credit.

A function is disabled as an object, not a name: its code is replaced by code that raises a clear
"no credit" error, so aliases, references kept elsewhere and the object found through the garbage
collector all raise; a class refuses construction and subclassing and its own methods raise; and
re-importing or reloading the module that holds it raises the same kind of error.

Two places use them with the same words (:func:`attention_course.checks.answers.no_credit_message`):
the sandboxed grading child (:func:`block_answers`, for good) and ``check()`` in a notebook
(:func:`attention_course.checks.answers.answers_refused`, which restores the code afterwards).

Standard library only, and nothing of the course imported: a grading child imports it from its
runtime before its sandbox closes.
"""
import sys
import types


def _raising_code(message: str, freevars: int):
    """A code object that raises RuntimeError(message), with ``freevars`` free variables
    (a function's ``__code__`` may only be replaced by code with as many)."""
    names = [f"_free{i}" for i in range(freevars)]
    lines = ["def _outer():"] + [f"    {n} = None" for n in names] + ["    def _inner(*args, **kwargs):"]
    if names:
        lines.append(f"        ({', '.join(names)},)")
    lines += [f"        raise RuntimeError({message!r})", "    return _inner"]
    namespace = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - our own fixed template, no student text
    return namespace["_outer"]().__code__


def disable_function(function, message: str, undo=None) -> None:
    """Make this very function object raise: aliases, references kept elsewhere and the
    object found by walking the garbage collector all share its code. A decorated
    function's original (``__wrapped__``) is disabled too. With ``undo`` (a list), each
    ``(function, original code)`` is recorded so that the caller can restore it
    (``attention_course.checks.answers.answers_refused``; a grading child never restores)."""
    seen = set()
    while isinstance(function, types.FunctionType) and id(function) not in seen:
        seen.add(id(function))
        code = function.__code__
        if undo is not None:
            undo.append((function, code))
        function.__code__ = _raising_code(message, len(code.co_freevars))
        function = getattr(function, "__wrapped__", None)


def _own_functions(cls) -> list:
    """The functions defined in the body of ``cls`` (methods, class/static methods, property
    accessors), not a helper of the module that the class merely refers to."""
    found = []
    for member in vars(cls).values():
        if isinstance(member, (classmethod, staticmethod)):
            candidates = [member.__func__]
        elif isinstance(member, property):
            candidates = [member.fget, member.fset, member.fdel]
        else:
            candidates = [member]
        for function in candidates:
            if (isinstance(function, types.FunctionType) and function.__module__ == cls.__module__
                    and function.__qualname__.startswith(cls.__qualname__ + ".")):
                found.append(function)
    return found


def disable_class(cls, message: str, undo=None, _seen=None) -> None:
    """Make this very class refuse to be built, subclassed or used through its methods.

    With ``undo`` (restorable, for ``check()`` in a notebook) only its own methods are disabled
    and recorded: CPython cannot give a class back its inherited ``__new__`` once one was set,
    so construction and subclassing are refused only where nothing is restored (the child)."""
    _seen = set() if _seen is None else _seen
    if cls in _seen:
        return
    _seen.add(cls)

    def _new(klass, *args, __message=message, **kwargs):
        raise RuntimeError(__message)

    def _subclass(klass, __message=message, **kwargs):
        raise RuntimeError(__message)

    # Its own methods first: an instance made with object.__new__, a class whose
    # __bases__ are reassigned, or a method called on another object gets nowhere either.
    for function in _own_functions(cls):
        disable_function(function, message, undo)
    if undo is None:
        cls.__new__ = _new
        cls.__init_subclass__ = classmethod(_subclass)
    for sub in cls.__subclasses__():  # classes derived from it (the runtime's, or a student's)
        disable_class(sub, message, undo, _seen)


class _RefuseReimport:
    """A meta-path finder, first on ``sys.meta_path`` in the child: importing anew a runtime
    module that holds a blocked answer (``importlib.reload``, or deleting it from
    ``sys.modules`` and importing it again) would build fresh, working copies of the
    disabled objects, so it raises a clear "no credit" error instead."""

    def __init__(self, messages: dict):
        self.messages = messages

    def find_spec(self, name, path=None, target=None):
        if name not in self.messages:
            return None
        import importlib.machinery
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError(self.messages[module.__name__])


def block_answers(blocked: list) -> None:
    """Make the runtime's own answer to the exercise being graded raise, for no credit.

    Rebinding the name is not enough (the original object stays reachable through
    other references and the garbage collector): the original object itself is
    disabled, its code replaced; a class refuses construction and subclassing and its
    methods raise. Re-importing or reloading the module that holds it is refused too.
    (Reading the module's source to run it again is denied by Landlock: the runtime's
    ``.py`` files are not among the paths a child may read.)
    """
    reimport = {}
    for entry in blocked:
        module_name, attr, label = entry[:3]
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, attr):
            continue
        # The parent's words (attention_course.checks.answers.no_credit_message), which check() uses too.
        message = entry[3] if len(entry) > 3 else (
            f"{module_name}.{attr} is the course's answer to {label}: no credit for calling it; "
            f"write your own {attr}")
        reimport.setdefault(module_name, f"{module_name} holds the course's answer to {label} "
                                         f"({attr}): reloading or re-importing it earns no credit; "
                                         f"write your own {attr}")
        original = getattr(module, attr)
        if isinstance(original, type):
            disable_class(original, message)
        elif isinstance(original, types.FunctionType):
            disable_function(original, message)
        else:  # any other callable: at least the names refuse
            def _no_credit(*args, __message=message, **kwargs):
                raise RuntimeError(__message)
            setattr(module, attr, _no_credit)
    if reimport:
        sys.meta_path.insert(0, _RefuseReimport(reimport))
