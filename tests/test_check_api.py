"""`check(label, obj)`: one line per check, ✓/✗ with a hint, never raises for the
object under test; unknown labels are a clear error listing the known ones."""
import os
import sys

import pytest
import torch

from attention_course import check
from attention_course.checks.checking import STUB_HINT, run_checks
from attention_course.checks.registry import REGISTRY, Call, Check, Exercise, Mistake, UnknownExerciseError, register


def _pool(weights, values):
    if weights.shape[-1] != values.shape[-2]:
        raise ValueError(f"weights {tuple(weights.shape)} and values {tuple(values.shape)} disagree")
    return weights @ values


def _students_pool(weights, values):
    """A student's own correct answer: check() refuses the registered reference itself, as the
    grader does (the reference cannot be imported in a grading child)."""
    if weights.shape[-1] != values.shape[-2]:
        raise ValueError(f"the weights' shape {list(weights.shape)} does not fit the values' {list(values.shape)}")
    return torch.einsum("...qk,...kd->...qd", weights, values)


def _calls(seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.softmax(torch.randn(3, 5, generator=g), dim=-1)
    return [Call(args=(weights, torch.randn(5, 2, generator=g)))]


def _bad(seed):
    return [Call(args=(torch.ones(2, 3), torch.ones(4, 2)))]


MEAN_HINT = "you averaged the values and ignored the weights."


@pytest.fixture()
def demo():
    ex = register(Exercise(
        "ch99_ex1", "demo", "pool", _pool,
        checks=[Check("pools 5 values", _calls, hint="weighted sum of rows", seed=4),
                Check("mismatch raises", _bad, hint="validate shapes", must_mention=["weights", "values"]),
                Check("hidden only", _calls, hint="hidden", public=False)],
        mistakes=[Mistake("mean", MEAN_HINT, lambda w, v: _pool(torch.full_like(w, 1 / w.shape[-1]), v))]))
    yield ex
    del REGISTRY["ch99_ex1"]


def test_reference_prints_one_tick_per_public_check(demo, capsys):
    assert check("ch99_ex1", _students_pool) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ch99_ex1 \u00b7 pool: 2/2 public checks passed"
    assert lines[1:] == ["  \u2713 pools 5 values", "  \u2713 mismatch raises"]


def test_kept_mistake_gets_its_hint(demo, capsys):
    check("ch99_ex1", lambda w, v: _students_pool(torch.full_like(w, 1 / w.shape[-1]), v))
    out = capsys.readouterr().out
    assert "\u2717 pools 5 values: the result has the right shape but wrong values" in out
    assert "Hint: " + MEAN_HINT in out


@pytest.mark.parametrize("obj,reason", [
    (None, "expected a function, got NoneType"),
    (42, "expected a function, got int"),
    (lambda w, v: sys.exit(3), "raised SystemExit: 3"),
    (lambda w, v: 1 / 0, "raised ZeroDivisionError"),
    (lambda w, v: (w @ v).double(), "dtype torch.float64, expected torch.float32"),
    (lambda w, v: (w @ v).T, "shape (2, 3), expected (3, 2)"),
    (lambda w, v: (w @ v).numpy(), "numpy.ndarray (return a torch.Tensor)"),
    (lambda w, v: [1.0], "expected a torch.Tensor"),
])
def test_never_raises_for_a_broken_object(demo, capsys, obj, reason):
    check("ch99_ex1", obj)
    out = capsys.readouterr().out
    assert "0/2 public checks passed" in out
    assert reason in out


def test_error_message_must_name_the_arguments(demo):
    def vague(weights, values):
        if weights.shape[-1] != values.shape[-2]:
            raise ValueError("bad shapes")
        return weights @ values
    results = run_checks("ch99_ex1", vague)
    assert [r.passed for r in results] == [True, False]
    assert "message should mention 'weights', 'values'" in results[1].reason


def test_stub_gets_the_stub_hint(demo):
    def stub(weights, values):
        raise NotImplementedError("ch99_ex1: implement pool")
    results = run_checks("ch99_ex1", stub)
    assert all(not r.passed and r.hint == STUB_HINT and "ch99_ex1: implement pool" in r.reason for r in results)


def test_inputs_are_copied_so_in_place_edits_do_not_leak(demo):
    def in_place(weights, values):
        out = weights @ values
        weights.zero_()
        values.zero_()
        return out
    assert run_checks("ch99_ex1", in_place)[0].passed


def test_hidden_checks_use_the_grading_seed_and_give_partial_credit(demo):
    calls_a = _calls(0)
    from attention_course.checks.checking import hidden_seed
    assert hidden_seed(1, 0) != hidden_seed(2, 0) != hidden_seed(1, 1)
    # A cheat that memorised the public inputs' answer fails the hidden checks.
    public_inputs = _calls(4)[0].args
    memorised = _pool(*public_inputs)
    cheat = lambda w, v: memorised if torch.equal(w, public_inputs[0]) else (_ for _ in ()).throw(ValueError("weights values"))
    assert all(r.passed for r in run_checks("ch99_ex1", cheat)[:1])
    hidden = run_checks("ch99_ex1", cheat, hidden=True, seed=123)
    assert [r.passed for r in hidden] == [False, True, False]
    assert sum(r.points for r in hidden) == pytest.approx(1 / 3)
    assert calls_a[0].args[0].shape == (3, 5)


def test_unknown_label_is_a_clear_error_listing_known_labels(demo):
    with pytest.raises(UnknownExerciseError) as info:
        check("ch99_ex7", _pool)
    assert "unknown exercise label 'ch99_ex7'" in str(info.value)
    assert "ch99_ex1" in str(info.value)


def test_register_rejects_bad_labels_and_duplicates(demo):
    with pytest.raises(ValueError, match="does not look like chNN_exM"):
        register(Exercise("chapter1", "x", "f", _pool, checks=[Check("c", _calls, hint="h")]))
    with pytest.raises(ValueError, match="registered twice"):
        register(Exercise("ch99_ex1", "x", "f", _pool, checks=[Check("c", _calls, hint="h")]))
    with pytest.raises(ValueError, match="registers no check"):
        register(Exercise("ch99_ex2", "x", "f", _pool, checks=[]))


def test_passing_the_packages_own_answer_is_refused(capsys):
    from attention_course import functional
    check("ch03_ex1", functional.masked_softmax)
    out = capsys.readouterr().out
    assert "ch03_ex1 \u00b7 masked_softmax: 0/" in out
    assert "attention_course.functional.masked_softmax, the course package's own version" in out
    assert "\u2713" not in out


# ------------------------------------------------------------ issue 10's root causes

from attention_course.checks.checking import mentions  # noqa: E402


@pytest.mark.parametrize("message", [
    "weights (2, 3) and values (4, 2) disagree",
    "weights torch.Size([2, 3]) and values torch.Size([4, 2]) disagree",
    "weights [2, 3] vs values [4, 2]",
    "weights 2x3 but values 4 \u00d7 2",
    "weights (num_queries=2, num_keys=3), values (num_keys=4, d=2)",
])
def test_a_shape_is_mentioned_in_any_usual_form(message):
    assert mentions(message, (2, 3)) and mentions(message, "(4, 2)")


@pytest.mark.parametrize("message,shape", [
    ("weights (2, 3) and values (4, 2)", (3, 4)),   # across two printed shapes
    ("weights (2, 3)", (2, 4)),
    ("check ch02_ex3 failed", (2, 3)),               # digits inside a label are not a shape
    ("p=2.5", (2,)),
])
def test_a_shape_is_not_mentioned_by_other_numbers(message, shape):
    assert not mentions(message, shape)


@pytest.mark.parametrize("message,word,named", [
    ("expected a 3-D tensor, got shape (3, 6)", "x", False),   # the x of "expected" is no mention
    ("x must be 3-D, got (3, 6)", "x", True),
    ("x.shape is (3, 6)", "x", True),
    ("got queries_per_head=3", "queries", False),
    ("valid_lens must be positive", "valid_lens", True),
    ("all widths must be positive", "width", True),            # the plural names it too
    ("p=0.50 must lie in [0, 1)", "0.5", True),                # not a name: as written
])
def test_a_name_is_mentioned_as_a_whole_word(message, word, named):
    assert mentions(message, word) is named


def test_a_torch_size_message_passes_a_shape_check(demo, capsys):
    def pool(weights, values):
        if weights.shape[-1] != values.shape[-2]:
            raise ValueError(f"weights {weights.shape} and values {values.shape} disagree")
        return weights @ values
    demo.checks[1].must_mention = lambda call: ["weights", "values", tuple(call.args[0].shape)]
    check("ch99_ex1", pool)
    assert "2/2 public checks passed" in capsys.readouterr().out


def test_a_mistake_hint_needs_the_same_error_message(demo, capsys):
    """Two answers that raise the same error type are not the same mistake."""
    demo.mistakes.append(Mistake("crashes", "CRASH HINT", lambda w, v: (_ for _ in ()).throw(RuntimeError("boom"))))
    check("ch99_ex1", lambda w, v: (_ for _ in ()).throw(RuntimeError("another bug")))
    out = capsys.readouterr().out
    assert "CRASH HINT" not in out and "Hint: weighted sum of rows" in out
    check("ch99_ex1", lambda w, v: (_ for _ in ()).throw(RuntimeError("boom")))
    assert "CRASH HINT" in capsys.readouterr().out


@pytest.fixture()
def shape_exercise():
    def size_of(x):
        return tuple(x.shape)
    ex = register(Exercise("ch99_ex2", "sizes", "size_of", size_of,
                           checks=[Check("a tuple of ints", lambda seed: [Call(args=(torch.ones(2, 3),))], hint="h")]))
    yield ex
    del REGISTRY["ch99_ex2"]


def test_a_tuple_contract_accepts_torch_size_and_refuses_a_list(shape_exercise):
    assert run_checks("ch99_ex2", lambda x: x.shape)[0].passed
    result = run_checks("ch99_ex2", lambda x: list(x.shape))[0]
    assert not result.passed and "a list of 2 items, expected a tuple" in result.reason


def test_an_endless_answer_fails_after_the_time_limit_and_the_checks_go_on(demo, capsys):
    import time
    def endless(weights, values):
        while True:
            try:
                time.sleep(0.01)
            except Exception:  # a student's own broad except must not swallow the limit
                pass
    start = time.monotonic()
    check("ch99_ex1", endless, time_limit=0.5)
    out = capsys.readouterr().out
    assert time.monotonic() - start < 5
    assert "took longer than 0.5 s \u2014 an infinite loop?" in out and "0/2 public checks passed" in out
    check("ch99_ex1", _students_pool)  # the process is still usable
    assert "2/2 public checks passed" in capsys.readouterr().out


def test_the_time_limit_also_works_outside_the_main_thread(demo):
    import threading
    import time
    results = []

    def worker():
        results.extend(run_checks("ch99_ex1", lambda w, v: [None for _ in iter(int, 1)], time_limit=0.5))
    thread = threading.Thread(target=worker)
    start = time.monotonic()
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - start < 5
    assert "an infinite loop?" in results[0].reason


def test_points_follow_check_weights(demo):
    from attention_course.checks.checking import check_points
    demo.checks[1].weight = 0.5
    shares = [check_points(demo, c) for c in demo.checks]
    assert shares == pytest.approx([demo.points * w / 2.5 for w in (1, 0.5, 1)])
    results = run_checks("ch99_ex1", _pool, hidden=True, seed=1)
    assert sum(r.points for r in results) == pytest.approx(demo.points)


def test_a_dict_contract_accepts_dict_subclasses():
    """An OrderedDict is a dict (found by an independent solver of the old ch03_ex4, the shapes warm-up)."""
    from collections import OrderedDict
    ex = register(Exercise("ch99_ex3", "dicts", "shapes_of", lambda x: {"x": tuple(x.shape)},
                           checks=[Check("a dict", lambda seed: [Call(args=(torch.ones(2, 3),))], hint="h")]))
    try:
        assert run_checks("ch99_ex3", lambda x: OrderedDict(x=tuple(x.shape)))[0].passed
        assert not run_checks("ch99_ex3", lambda x: [("x", tuple(x.shape))])[0].passed
    finally:
        del REGISTRY["ch99_ex3"]


def test_a_shape_error_names_the_inputs_by_argument(demo, capsys):
    """Issue 28: feedback on a shape error only restated the goal; it now says what went in."""
    check("ch99_ex1", lambda weights, values: weights @ values.T)
    out = capsys.readouterr().out
    assert "raised RuntimeError" in out
    assert "[inputs: weights of shape (3, 5), values of shape (5, 2)]" in out
    check("ch99_ex1", lambda weights, values: (weights @ values)[0])
    assert "has shape (2,), expected (3, 2) [inputs: weights of shape (3, 5), values of shape (5, 2)]" \
        in capsys.readouterr().out


# ------------------------------------------------------------- report=("largest_tensor",)

from attention_course.checks.calls import run_call  # noqa: E402


def _largest(fn, *args):
    return run_call(fn, Call(args=args, report=("largest_tensor",)))["extras"]["largest_tensor_entries"]


def test_the_largest_tensor_report_counts_the_memory_under_every_tensor_created():
    x = torch.randn(30, 4)
    y = torch.randn(40, 4)
    # A 30 x 40 product is the largest tensor; a slice of it still holds all 1,200 entries.
    assert _largest(lambda a, b: (a @ b.T)[:2, :2].clone(), x, y) == 1200
    # A view made by expand holds no new memory: it counts as the tensor it looks into.
    assert _largest(lambda a, b: a[0].expand(1000, 4).sum(), x, y) <= 120
    # Tensors made by autograd's backward pass count too: here only the backward makes a big one.
    class BigBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.sum()

        @staticmethod
        def backward(ctx, grad):
            return torch.zeros(50, 50)[:30, :4] + grad

    def through_autograd(a, b):
        with torch.enable_grad():
            a = a.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(BigBackward.apply(a), a)
        return g
    assert _largest(through_autograd, x, y) == 2500
    # Without the report, nothing is recorded and no extras are returned.
    assert "extras" not in run_call(lambda a, b: a @ b.T, Call(args=(x, y)))


def test_the_largest_tensor_report_does_not_import_torch_dynamo():
    # torch wraps a dispatch mode's __torch_dispatch__ in torch._dynamo.disable unless told not
    # to, and importing torch._dynamo takes seconds: too slow for a check.
    import subprocess
    code = ("import sys, torch; from attention_course.checks.calls import run_call; from attention_course.checks.registry import Call; "
            "out = run_call(lambda a: a @ a.T, Call(args=(torch.ones(5, 2),), report=('largest_tensor',))); "
            "assert out['extras']['largest_tensor_entries'] == 25, out; "
            "assert 'torch._dynamo' not in sys.modules")
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={**os.environ, "PYTHONPATH": root})


def test_a_kept_mistake_that_warns_prints_nothing_of_the_course_code_under_a_check(capsys):
    """A blind solver saw a check print a UserWarning with the path of ch04_ex1's module and a line of its
    kept mistake (`.T` on a batch, which torch warns about). The course's own code runs silenced; only
    the student's answer may warn."""
    import warnings

    from attention_course.exercises.ch04.ex1_self_attention import SelfAttention

    class Scaled(SelfAttention):  # wrong (scaled by sqrt(d_in) and by 2) and silent, so every kept mistake is tried
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return torch.softmax(q @ k.transpose(-2, -1) / (2 * x.shape[-1] ** 0.5), dim=-1) @ v
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check("ch04_ex1", Scaled, thorough=True)
    printed = capsys.readouterr()
    from_the_course = [w for w in caught if "attention_course" in str(w.filename)]
    assert from_the_course == [], [f"{w.filename}: {w.message}" for w in from_the_course]
    assert "attention_course/exercises" not in printed.out + printed.err
    assert "✗" in printed.out  # the answer did fail, so the kept mistakes ran
