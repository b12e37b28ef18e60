"""Print a fingerprint of every registered exercise: its fields and the bytecode of every
object it keeps (reference, check inputs and compares, mistakes, alternatives), so that a
move of the exercise modules can be shown to change nothing that runs.

    python tools/fingerprint_registry.py > before.txt   (then after the move: diff)
"""
import hashlib
import inspect
import sys
import types

RENAMES = {"_gen": "gen", "_randint": "randint", "_shape": "shape_of", "_shape_of": "shape_of",
           "_finite_then_close": "finite_then_close", "_same_parameters": "same_parameters",
           "_tensors": "tensors_of", "_ERROR_WEIGHT": "ERROR_WEIGHT"}


def code_fp(code, seen):
    parts = [code.co_code.hex(), repr(tuple(RENAMES.get(n, n) for n in code.co_names)),
             repr(code.co_varnames), repr(code.co_freevars), code.co_qualname]
    for c in code.co_consts:
        parts.append(code_fp(c, seen) if isinstance(c, types.CodeType) else repr(c))
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def fp(obj, seen=None):
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return "<cycle>"
    if isinstance(obj, types.FunctionType):
        seen.add(id(obj))
        cells = []
        for c in obj.__closure__ or ():
            try:
                cells.append(fp(c.cell_contents, seen))
            except ValueError:
                cells.append("<empty>")
        defaults = [fp(d, seen) for d in (obj.__defaults__ or ())]
        return f"fn {obj.__qualname__} {code_fp(obj.__code__, seen)} cells={cells} defaults={defaults}"
    if isinstance(obj, type):
        seen.add(id(obj))
        members = []
        for k, v in sorted(vars(obj).items()):
            if k in ("__module__", "__dict__", "__weakref__", "__doc__"):
                continue
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                v = v.fget
            members.append(f"{k}={fp(v, seen) if callable(v) else repr(v)[:80]}")
        bases = [b.__qualname__ for b in obj.__mro__[1:]]
        return f"class {obj.__qualname__} bases={bases} {hashlib.sha1(repr(members).encode()).hexdigest()[:12]}"
    if isinstance(obj, (list, tuple)):
        return repr([fp(o, seen) for o in obj])
    if callable(obj):
        return f"callable {type(obj).__name__}"
    return repr(obj)[:200]


def main():
    from attention_course.registry import all_exercises
    for ex in all_exercises():
        print(f"== {ex.label} {ex.title!r} name={ex.name} points={ex.points} kind={ex.kind}")
        print(f"  reference {fp(ex.reference)}")
        for c in ex.checks:
            print(f"  check {c.name!r} seed={c.seed} public={c.public} weight={c.weight} rtol={c.rtol} "
                  f"atol={c.atol} hint={c.hint!r}")
            print(f"    calls {fp(c.make_calls)}")
            print(f"    compare {fp(c.compare)}")
            print(f"    must_mention {fp(c.must_mention)}")
        for m in ex.mistakes:
            print(f"  mistake {m.name!r} hint={m.hint!r}")
            print(f"    {fp(m.impl)}")
        for a in ex.alternatives:
            print(f"  alternative {a.name!r} style={a.style!r}")
            print(f"    {fp(a.impl)}")


if __name__ == "__main__":
    sys.exit(main())
