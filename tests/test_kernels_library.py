"""attention_course.kernels: chapter 11's Triton kernels against PyTorch (interpreter on a CPU).

Every expected value comes from PyTorch (``F.scaled_dot_product_attention``, ``torch.logsumexp``,
autograd), never from the kernels. Shapes include lengths that no block divides, causal and not.
"""
import importlib.util
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

if importlib.util.find_spec("triton") is None:
    pytest.skip("chapter 11's kernels extra (triton) is not installed", allow_module_level=True)
from attention_course import kernels  # noqa: E402  (imported before triton: it picks the interpreter first)

ATOL = 1e-5          # float32, head sizes <= 64: the kernels' error measured below 2e-6


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _scores(q, k, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return s


def test_import_switches_to_the_interpreter_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the kernels compile")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    assert kernels.on_gpu() is False


def test_the_package_does_not_import_the_kernels_or_triton():
    code = ("import sys, attention_course, attention_course.functional, attention_course.efficient\n"
            "print('attention_course.kernels' in sys.modules, 'triton' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_missing_triton_says_which_extra_to_install():
    code = ("import sys\nsys.modules['triton'] = None\n"
            "try:\n    import attention_course.kernels\nexcept ImportError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "chapter 11 needs the kernels extra" in done.stdout
    assert "triton==3.9.0" in done.stdout


def test_triton_imported_first_without_a_gpu_is_refused_clearly():
    code = ("import os, triton\nos.environ.pop('TRITON_INTERPRET', None)\n"
            "try:\n    import attention_course.kernels\nexcept ImportError as e:\n    print(e)\n")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    if not torch.cuda.is_available():
        assert "import attention_course.kernels first" in done.stdout


def test_interpreter_is_chosen_only_when_nothing_was_set():
    code = ("import os, torch\nimport attention_course.kernels as k\n"
            "print(os.environ.get('TRITON_INTERPRET'), k.use_interpreter())")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    if not torch.cuda.is_available():
        assert done.stdout.split() == ["1", "True"]


@pytest.mark.parametrize("shape,block", [((37, 45), (16, 16)), ((1, 1), (16, 32)), ((64, 48), (32, 16)),
                                          ((5, 100), (4, 64))])
def test_scale_rows_matches_broadcasting(shape, block):
    g = _gen(1)
    x, factors = torch.randn(*shape, generator=g), torch.randn(shape[0], generator=g)
    torch.testing.assert_close(kernels.scale_rows(x, factors, block), x * factors[:, None], rtol=0, atol=0)


@pytest.mark.parametrize("shape,block", [((7, 45), 16), ((3, 1), 16), ((4, 64), 64), ((2, 129), 32)])
def test_row_logsumexp_matches_torch(shape, block):
    x = torch.randn(*shape, generator=_gen(2)) * 5
    torch.testing.assert_close(kernels.row_logsumexp(x, block), torch.logsumexp(x, dim=1), rtol=1e-6, atol=1e-5)


def test_row_logsumexp_survives_scores_whose_exp_overflows():
    x = torch.tensor([[1000.0, 999.0, -1000.0], [-5.0, 88.0, 95.0]])
    assert torch.isinf(torch.exp(x).sum(dim=1)).all()
    torch.testing.assert_close(kernels.row_logsumexp(x, block=2), torch.logsumexp(x, dim=1))


SHAPES = [  # (leading axes, n_q, n_k, d, block_m, block_n)
    ((), 48, 48, 16, 16, 16),
    ((2,), 50, 50, 16, 16, 16),           # 50: no block divides it
    ((2, 3), 100, 100, 32, 32, 16),
    ((1,), 70, 90, 24, 16, 32),           # d = 24: padded to 32 inside
    ((2,), 90, 70, 16, 16, 16),           # more queries than keys
    ((1,), 1, 17, 8, 16, 16),             # one query; d = 8 padded to 16
    ((1,), 128, 128, 64, 64, 32),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lead,n_q,n_k,d,block_m,block_n", SHAPES)
def test_flash_forward_matches_sdpa_and_logsumexp(lead, n_q, n_k, d, block_m, block_n, causal):
    g = _gen(3)
    q = torch.randn(*lead, n_q, d, generator=g)
    k, v = torch.randn(2, *lead, n_k, d, generator=g)
    out, lse = kernels.flash_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    assert out.shape == q.shape and out.dtype == torch.float32
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=0, atol=ATOL)
    torch.testing.assert_close(lse, torch.logsumexp(_scores(q, k, causal), dim=-1), rtol=0, atol=ATOL)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lead,n_q,n_k,d,block_m,block_n", SHAPES)
def test_flash_backward_matches_autograd(lead, n_q, n_k, d, block_m, block_n, causal):
    g = _gen(4)
    q = torch.randn(*lead, n_q, d, generator=g, requires_grad=True)
    k = torch.randn(*lead, n_k, d, generator=g, requires_grad=True)
    v = torch.randn(*lead, n_k, d, generator=g, requires_grad=True)
    grad_out = torch.randn(*lead, n_q, d, generator=g)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), grad_out)
    q, k, v = q.detach(), k.detach(), v.detach()
    out, lse = kernels.flash_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    got = kernels.flash_backward(q, k, v, out, lse, grad_out, causal=causal, block_m=block_m, block_n=block_n)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=0, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")


def test_flash_backward_uses_the_saved_logsumexp():
    """The backward rebuilds P from lse: a wrong lse gives wrong gradients (so the test above can fail)."""
    g = _gen(5)
    q, k, v, grad_out = torch.randn(4, 1, 40, 16, generator=g)
    out, lse = kernels.flash_forward(q, k, v)
    right = kernels.flash_backward(q, k, v, out, lse, grad_out)
    wrong = kernels.flash_backward(q, k, v, out, lse + 0.5, grad_out)
    assert (right[1] - wrong[1]).abs().max() > 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_function_backpropagates(causal):
    g = _gen(6)
    q, k, v = (torch.randn(2, 2, 33, 16, generator=g, requires_grad=True) for _ in range(3))
    out = kernels.flash_attention(q, k, v, causal)
    got = torch.autograd.grad((out * out).sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, rtol=0, atol=ATOL)
    want = torch.autograd.grad((ref * ref).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=4 * ATOL)


@pytest.mark.parametrize("n,block_m,block_n", [(100, 16, 16), (100, 32, 16), (100, 16, 32), (64, 16, 16)])
def test_causal_kernel_visits_only_blocks_on_or_below_the_diagonal(n, block_m, block_n):
    g = _gen(7)
    q, k, v = torch.randn(3, 2, n, 16, generator=g)
    rows, cols = -(-n // block_m), -(-n // block_n)
    visits = torch.zeros(2, rows, cols, dtype=torch.int32)
    kernels.flash_forward(q, k, v, causal=True, block_m=block_m, block_n=block_n, visits=visits)
    for a in range(rows):
        last_query = min(a * block_m + block_m, n) - 1
        for b in range(cols):
            first_key, last_key = b * block_n, min(b * block_n + block_n, n) - 1
            if first_key > last_query:
                expected = 0                            # every key after every query: skipped
            elif last_key > a * block_m:
                expected = 2                            # some key after some query: masked
            else:
                expected = 1
            assert visits[:, a, b].tolist() == [expected, expected], (a, b)
    full = torch.zeros(2, rows, cols, dtype=torch.int32)
    kernels.flash_forward(q, k, v, causal=False, block_m=block_m, block_n=block_n, visits=full)
    assert (full == 1).all()


def test_bad_inputs_get_clear_errors():
    q = torch.randn(2, 10, 16)
    with pytest.raises(ValueError, match=r"\(2, 10, 16\).*\(2, 12, 8\)"):
        kernels.flash_forward(q, torch.randn(2, 12, 8), torch.randn(2, 12, 8))
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        kernels.flash_forward(q, q, q, block_m=24)
    with pytest.raises(ValueError, match="at least 16"):
        kernels.flash_forward(q, q, q, block_n=8)
    with pytest.raises(TypeError, match="share a dtype"):
        kernels.flash_forward(q, q.double(), q)
    with pytest.raises(ValueError, match="lse must have shape"):
        kernels.flash_backward(q, q, q, q, torch.zeros(2, 11), q)
    with pytest.raises(ValueError, match="visits must have shape"):
        kernels.flash_forward(q, q, q, visits=torch.zeros(1, 1, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"\(rows, cols\)"):
        kernels.row_logsumexp(torch.randn(3))
    with pytest.raises(ValueError, match="factors"):
        kernels.scale_rows(torch.randn(3, 4), torch.randn(4))


COMPILE_FOR_A_GPU = r'''
import os
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attention_course import kernels as K

attention = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16"}
common = {"n_q": "i32", "n_k": "i32", "head_dim": "i32", "scale": "fp32"}
blocks = {"BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr", "CAUSAL": "constexpr"}
forward = {**attention, "o_ptr": "*fp16", "lse_ptr": "*fp32", "visits_ptr": "*i32", **common,
           **{f"stride_{t}{a}": "i32" for t in "qkvo" for a in "bn"}, "n_key_blocks": "i32", **blocks,
           "RECORD": "constexpr"}
backward = {**attention, "do_ptr": "*fp16", "lse_ptr": "*fp32", "delta_ptr": "*fp32"}
cases = [(K._flash_forward_kernel, forward, {"RECORD": True}),
         (K._dkdv_kernel, {**backward, "dk_ptr": "*fp16", "dv_ptr": "*fp16", **common, **blocks}, {}),
         (K._dq_kernel, {**backward, "dq_ptr": "*fp16", **common, **blocks}, {})]
for fn, signature, extra in cases:
    for causal in (False, True):
        constexprs = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_D": 64, "CAUSAL": causal, **extra}
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32))
        assert compiled.asm["cubin"], fn
        print(fn.__name__, causal, "compiled")
'''


def test_the_attention_kernels_compile_for_a_gpu_even_without_one():
    """The interpreter forgives what the compiler refuses (types carried through loops, constexpr
    branches): the forward and backward kernels are compiled here for an H100 (sm_90), down to its
    machine code, in float16, causal and not. Nothing runs: compiling needs no GPU."""
    env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_A_GPU], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("compiled") == 6, done.stdout
