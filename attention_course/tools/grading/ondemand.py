"""What a grading zygote loads only when a submission needs it, and the source a child's cells keep.

Chapter 11's kernels (``attention_course.kernels``) import triton, the kernels extra (about 1 GB
installed, ``triton==3.9.0``). The zygote of every chapter imports the library when it starts; it
imports these modules only when the first submission that imports them arrives (its setup cell or
exercise cell imports ``triton`` or ``attention_course.kernels``), before it forks that submission's child, since a child
can read neither the runtime's files nor import anything new of the course. Chapters 1-10 never wait
for triton.

A child never compiles a kernel: the sandbox refuses new processes (triton's compiler runs ``ptxas``)
and the GPU's device files, so triton runs in its interpreter (``TRITON_INTERPRET=1``, set in the
zygote before triton is imported, since ``triton.jit`` reads it when it decorates, and in the child's
fixed environment) on the CPU, GPU or not. ``TRITON_CACHE_DIR`` points into the child's scratch folder
(the interpreter writes nothing there; a compiler would).

``triton.jit`` reads a kernel's source with :mod:`inspect`, which finds it through :mod:`linecache`;
a child's cells are compiled from strings (``<setup cell>``, ``<exercise chNN_exM>``, one exercise
per child), so :func:`remember_sources` registers each cell's text under its file name.

Copied into the grading runtime as ``_ac_ondemand.py`` beside ``_ac_zygote.py``: standard library only.
"""
import linecache
import os
import re

# A submission needs a module when its setup or exercise cell imports it (a comment or a string that
# merely says "kernels" does not count: where triton is missing, such a cell must still run).
TRIGGERS = {"kernels": re.compile(r"^[ \t]*(?:from[ \t]+attention_course[ \t]+import[ \t][^#\n]*\bkernels\b"
                                  r"|(?:import|from)[ \t]+(?:attention_course\.kernels|triton)\b)", re.M)}
# The environment the zygote sets before importing the module, and every child's after it.
ENVIRONMENT = {"kernels": {"TRITON_INTERPRET": "1"}}


def needed(req: dict, names) -> list:
    """The on-demand modules (of ``names``) that this request's cells name."""
    text = f"{req.get('setup', '')}\n{req.get('code', '')}"
    return [name for name in names if name in TRIGGERS and TRIGGERS[name].search(text)]


def load(name: str, state: dict) -> None:
    """Import ``attention_course.<name>`` in the zygote, once, and warm it up; an error is kept
    (``state["on_demand"][name]``: '' when loaded) and reported to the child that needed it."""
    loaded = state.setdefault("on_demand", {})
    if name in loaded:
        return
    os.environ.update(ENVIRONMENT.get(name, {}))
    try:
        module = __import__(f"attention_course.{name}", fromlist=["_"])
    except Exception as error:  # noqa: BLE001 - e.g. triton missing: the kernels extra
        loaded[name] = f"{type(error).__name__}: {error}"[:500]
        return
    loaded[name] = ""
    if name == "kernels":  # the interpreter's own lazy imports, once (a child reads them from disk)
        try:
            import torch
            module.row_logsumexp(torch.ones(2, 3), 16)
        except Exception:  # noqa: BLE001 - a warm-up only
            pass


def child_environment(state: dict, scratch: str) -> dict:
    """What a child's fixed environment adds once an on-demand module was loaded in the zygote."""
    env = {}
    for name, error in state.get("on_demand", {}).items():
        if not error:
            env.update(ENVIRONMENT.get(name, {}))
    if "TRITON_INTERPRET" in env:
        env["TRITON_CACHE_DIR"] = os.path.join(scratch, ".triton")
    return env


def refusal(req: dict, state: dict) -> str:
    """Why this request's child cannot run (a module it needs failed to import), or ''."""
    errors = state.get("on_demand", {})
    for name in req.get("needs", ()):
        if errors.get(name):
            return (f"attention_course.{name} could not be imported by the grader ({errors[name]}); "
                    f"chapter 11 needs the kernels extra: python3 -m pip install 'triton==3.9.0'")
    return ""


def remember_sources(sources: dict) -> None:
    """Register each cell's text in :mod:`linecache` under its file name (no modification time: never
    evicted), so that ``inspect.getsource`` (``triton.jit``, tracebacks) finds it."""
    for filename, text in sources.items():
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
