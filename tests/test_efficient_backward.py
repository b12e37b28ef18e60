"""Chapter 9's trainable tiled attention (attention_course.efficient.tiled_attention_trainable):
its gradients are those of softmax attention, and its backward pass keeps O(n) tensors, not
the O(n²) tiles that autograd keeps for the plain tiled loop. Expected gradients come from
autograd through a float64 definition written here and from F.scaled_dot_product_attention,
not from the code under test. No timing is asserted."""
import csv
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attention_course import efficient as eff


def _definition(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _inputs(shape_q, shape_k, d_v, dtype, seed, sharp=1.0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(*shape_q, generator=g, dtype=torch.float64) * sharp).to(dtype).requires_grad_()
    k = torch.randn(*shape_k, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    return q, k, v


def _grads(fn, q, k, v, d_out):
    out = fn(q, k, v)
    return (out,) + torch.autograd.grad(out, (q, k, v), d_out)


# n, block_q, block_k: blocks that divide n, that do not, one tile, one key per tile
SIZES = [(16, 4, 8), (21, 8, 5), (7, 16, 16), (9, 1, 1), (33, 10, 7)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,block_q,block_k", SIZES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_output_and_gradients_equal_the_definitions(causal, n, block_q, block_k, dtype, tol):
    q, k, v = _inputs((2, 3, n, 8), (2, 3, n, 8), 5, dtype, seed=n + block_q, sharp=2.0)
    d_out = torch.randn(2, 3, n, 5, generator=torch.Generator().manual_seed(n), dtype=torch.float64).to(dtype)
    mine = _grads(lambda *a: eff.tiled_attention_trainable(*a, block_q=block_q, block_k=block_k,
                                                            causal=causal), q, k, v, d_out)
    wanted = _grads(lambda *a: _definition(*(t.double() for t in a), causal), q, k, v, d_out.double())
    fused = _grads(lambda *a: F.scaled_dot_product_attention(*a, is_causal=causal), q, k, v, d_out)
    for name, got, want, sdpa in zip(("output", "dQ", "dK", "dV"), mine, wanted, fused):
        assert got.dtype == dtype and got.shape == want.shape, name
        torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol, msg=f"{name} vs definition")
        torch.testing.assert_close(got, sdpa, rtol=tol, atol=tol, msg=f"{name} vs SDPA")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,block_q,block_k", [(6, 4, 4), (7, 3, 2), (5, 5, 1)])
def test_gradcheck_in_float64(causal, n, block_q, block_k):
    q, k, v = _inputs((2, n, 4), (2, n, 4), 3, torch.float64, seed=n)
    assert torch.autograd.gradcheck(
        lambda *a: eff.tiled_attention_trainable(*a, block_q=block_q, block_k=block_k, causal=causal),
        (q, k, v), eps=1e-6, atol=1e-7)


def test_more_keys_than_queries_and_broadcast_leading_axes():
    q, _, _ = _inputs((2, 3, 5, 6), (1, 6), 1, torch.float64, seed=1)
    _, k, v = _inputs((1, 6), (3, 11, 6), 4, torch.float64, seed=2)       # keys shared by the batch
    assert torch.autograd.gradcheck(lambda *a: eff.tiled_attention_trainable(*a, block_q=2, block_k=4),
                                    (q, k, v), eps=1e-6, atol=1e-7)
    out = eff.tiled_attention_trainable(q, k, v, 2, 4)
    out.sum().backward()
    assert out.shape == (2, 3, 5, 4) and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_only_the_inputs_that_need_it_get_a_gradient():
    q, k, v = _inputs((4, 6), (4, 6), 3, torch.float32, seed=3)
    frozen = k.detach()
    eff.tiled_attention_trainable(q, frozen, v, 2, 2).sum().backward()
    assert q.grad is not None and v.grad is not None and frozen.grad is None


def test_forward_equals_the_plain_tiled_loop_without_autograd():
    q, k, v = (t.detach() for t in _inputs((2, 50, 8), (2, 50, 8), 8, torch.float32, seed=4, sharp=3.0))
    for causal in (False, True):
        torch.testing.assert_close(eff.tiled_attention_trainable(q, k, v, 16, 12, causal=causal),
                                   eff.tiled_attention(q, k, v, 16, 12, causal=causal), rtol=0, atol=1e-6)


def _saved_numels(fn, n, d=16, block=32):
    """The sizes of every tensor autograd saves for the backward pass of fn (forward only)."""
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, n, d, generator=g).requires_grad_() for _ in range(3))
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(q, k, v, block)
    return sizes


@pytest.mark.parametrize("causal", [False, True])
def test_recomputing_version_saves_linear_memory_and_the_plain_loop_does_not(causal):
    recompute = {n: _saved_numels(lambda q, k, v, b: eff.tiled_attention_trainable(q, k, v, b, b, causal=causal), n)
                 for n in (128, 512)}
    plain = {n: _saved_numels(lambda q, k, v, b: eff.tiled_attention(q, k, v, b, b, causal=causal), n)
             for n in (128, 512)}
    for n in (128, 512):
        # Q, K, V, O of n x 16 and L of n: 4 * 16 n + n, whatever the number of tiles
        assert sum(recompute[n]) == 4 * 16 * n + n, recompute[n]
        assert max(recompute[n]) == 16 * n
    assert sum(recompute[512]) == 4 * sum(recompute[128])                 # linear in n
    # the plain loop under autograd keeps every tile: at least n² / 2 saved numbers (causal: half the tiles)
    assert sum(plain[512]) >= 512 ** 2 / 2
    assert sum(plain[512]) / sum(plain[128]) > 10                          # about 16x for 4x the length


def test_training_peak_memory_grows_linearly():
    def training_peak(fn, n):
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 1, n, 64, generator=g).requires_grad_() for _ in range(3))
        d_out = torch.randn(1, 1, n, 64, generator=g)
        return eff.peak_memory(lambda: fn(q, k, v).backward(d_out))[1]

    recompute = {n: training_peak(lambda q, k, v: eff.tiled_attention_trainable(q, k, v, 128, 128), n)
                 for n in (512, 2048)}
    naive_big = training_peak(eff.naive_attention, 2048)
    assert recompute[2048] / recompute[512] < 5                            # 4x the length: at most about 4x
    assert recompute[2048] * 10 < naive_big


def test_refuses_bad_arguments_naming_them():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="block_q"):
        eff.tiled_attention_trainable(x, x, x, block_q=0)
    with pytest.raises(ValueError, match="block_k"):
        eff.tiled_attention_trainable(x, x, x, block_k=2.0)
    with pytest.raises(ValueError, match=r"causal=True.*\(2, 3\).*\(4, 3\)"):
        eff.tiled_attention_trainable(x[:2], x, x, causal=True)
    with pytest.raises(ValueError, match=r"values \(3, 3\).*keys and values"):
        eff.tiled_attention_trainable(x, x, x[:3])
    with pytest.raises(ValueError, match=r"queries.*\(4, 5\)"):
        eff.tiled_attention_trainable(torch.randn(4, 5), x, x)
    with pytest.raises(ValueError, match=r"queries.*floating-point.*\(4, 3\)"):
        eff.tiled_attention_trainable(x.long(), x, x)
    with pytest.raises(ValueError, match="one dtype"):
        eff.tiled_attention_trainable(x.double(), x, x)
    with pytest.raises(ValueError, match=r"leading axes.*\(2, 4, 3\).*\(3, 4, 3\)"):
        eff.tiled_attention_trainable(torch.randn(2, 4, 3), torch.randn(3, 4, 3), torch.randn(3, 4, 3))
    with pytest.raises(ValueError, match="causal"):
        eff.tiled_attention_trainable(x, x, x, causal="yes")


def test_no_keys_give_zero_output_and_zero_gradients_like_sdpa():
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 0, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 0, 5, dtype=torch.float64, requires_grad=True)
    out = eff.tiled_attention_trainable(q, k, v, block_q=2, block_k=2)
    want = torch.nn.functional.scaled_dot_product_attention(q.detach(), k.detach(), v.detach())
    assert out.shape == (2, 3, 5) and torch.equal(want, torch.zeros(2, 3, 5, dtype=torch.float64))
    assert torch.equal(out.detach(), want)
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q)) and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_is_not_twice_differentiable():
    q, k, v = _inputs((4, 6), (4, 6), 3, torch.float64, seed=5)
    out = eff.tiled_attention_trainable(q, k, v, 2, 2)
    (d_q,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        d_q.sum().backward()


def test_shipped_training_table_meets_the_memory_and_accuracy_targets():
    root = Path(__file__).resolve().parents[1]
    lines = (root / "bench" / "efficient_training.csv").read_text(encoding="utf-8").splitlines()
    rows = {(int(r["tokens"]), r["variant"]): r
            for r in csv.DictReader(line for line in lines if not line.startswith("#"))}
    assert {n for n, _ in rows} == {1024, 2048, 4096, 8192}

    def peak(n, variant):
        return int(rows[(n, variant)]["peak_bytes"])

    assert peak(4096, "recompute") * 10 <= peak(4096, "naive")
    assert peak(8192, "tiled") * 2 >= peak(8192, "naive")              # the plain loop under autograd: no saving
    assert peak(8192, "recompute") / peak(1024, "recompute") < 10      # 8x the length: about linear
    for n in (1024, 2048, 4096, 8192):
        assert float(rows[(n, "recompute")]["max_abs_err_vs_sdpa"]) <= 1e-5
        assert float(rows[(n, "recompute")]["max_abs_grad_err_vs_sdpa"]) <= 1e-5
        assert int(rows[(n, "recompute")]["saved_bytes"]) == 4 * (4 * 64 * n + n)   # Q, K, V, O and L
