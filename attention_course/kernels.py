"""Chapter 11's Triton kernels: FlashAttention forward and backward, written block by block.

Every kernel here is a ``@triton.jit`` function plus a plain Python *launcher* that checks its
inputs, allocates the outputs and launches the kernel on a grid of programs. On a machine without
a CUDA GPU, importing this module switches Triton to its interpreter (``TRITON_INTERPRET=1``) before
anything is decorated, so the same kernels run on the CPU, block by block, on numpy arrays: right
for checking what a kernel computes and which blocks it touches, meaningless for its speed.

Nothing else in the package imports this module (chapters 1-10 need no Triton): it needs the
``kernels`` extra, ``python3 -m pip install 'triton==3.9.0'``.

Conventions of the attention kernels:

* ``q`` of shape ``(..., n_q, d)``, ``k`` and ``v`` of shape ``(..., n_k, d)`` with the same leading
  axes (batch, heads, or none); one program handles one block of queries (or keys) of one slice of
  the leading axes. ``d`` may be any size: blocks of the head dimension are padded to a power of two
  of at least 16 (``tl.arange`` needs a power of two; on NVIDIA GPUs, Triton 3.9's ``tl.dot`` needs
  the shared side of 16-bit blocks to be at least 16) and masked.
* ``block_m`` and ``block_n`` are powers of two of at least 16 (they are shared sides of ``tl.dot``
  in the backward pass). Lengths need not be multiples of them: the last block is masked.
* ``causal=True`` lets query ``i`` see keys ``j <= i`` (aligned at the top left, as
  ``F.scaled_dot_product_attention(..., is_causal=True)`` does).
* Scores are scaled by ``1 / sqrt(d)``; ``lse`` is the natural log-sum-exp of each row of scaled
  scores, in float32; the running statistics and accumulators are float32 whatever the input dtype.
"""
from __future__ import annotations

import math
import os
import sys

import torch

KERNELS_EXTRA = "chapter 11 needs the kernels extra: python3 -m pip install 'triton==3.9.0'"


def use_interpreter() -> bool:
    """Switch Triton to its CPU interpreter when there is no CUDA GPU and the user chose nothing.

    Must run before ``triton`` decorates any kernel: ``triton.jit`` reads ``TRITON_INTERPRET`` then.
    Returns whether the interpreter is in use."""
    if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
        if "triton" in sys.modules:
            # Triton's own library (tl.zeros, tl.max, ...) was decorated for a compiler it has no GPU
            # for; switching now would leave it half compiled, half interpreted.
            raise ImportError("there is no GPU, and triton was imported before attention_course.kernels could "
                              "switch it to its interpreter: import attention_course.kernels first, or set "
                              "TRITON_INTERPRET=1 before importing triton")
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


use_interpreter()

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(KERNELS_EXTRA) from error


def on_gpu() -> bool:
    """True when kernels are compiled for a CUDA GPU, False when Triton's interpreter runs them."""
    return not use_interpreter() and torch.cuda.is_available()


def _device():
    return torch.device("cuda") if on_gpu() else torch.device("cpu")


def _check_tensor(name, t, min_dims):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < min_dims:
        raise ValueError(f"{name} must have at least {min_dims} dimensions, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if t.device.type != _device().type:
        raise ValueError(f"{name} is on {t.device}, but the kernels run on {_device()} "
                         f"({'compiled' if on_gpu() else 'interpreter'})")


def _check_block(name, block, low=1):
    if not isinstance(block, int) or isinstance(block, bool) or block < low or block & (block - 1):
        raise ValueError(f"{name} must be a power of two of at least {low} (tl.arange needs one), got {block!r}")


# A first kernel: a 2-D grid of programs, each scaling one tile of a matrix ------------------------

@triton.jit
def _scale_rows_kernel(x_ptr, f_ptr, y_ptr, n_rows, n_cols, stride_row,
                       BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)          # (BLOCK_R,) row indices
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)          # (BLOCK_C,) column indices
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)       # (BLOCK_R, BLOCK_C) mask
    offsets = rows[:, None] * stride_row + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
    f = tl.load(f_ptr + rows, mask=rows < n_rows, other=0.0)
    tl.store(y_ptr + offsets, x * f[:, None], mask=inside)


def scale_rows(x, factors, block=(16, 16)):
    """``x * factors[:, None]`` for ``x`` of shape ``(rows, cols)``, one program per tile of
    ``block = (block_rows, block_cols)``; returns a new tensor."""
    _check_tensor("x", x, 1)
    _check_tensor("factors", factors, 1)
    if x.dim() != 2 or factors.shape != x.shape[:1]:
        raise ValueError(f"scale_rows needs x of shape (rows, cols) and factors of shape (rows,), "
                         f"got {tuple(x.shape)} and {tuple(factors.shape)}")
    block_r, block_c = block
    _check_block("block rows", block_r)
    _check_block("block cols", block_c)
    x, factors = x.contiguous(), factors.to(x.dtype).contiguous()
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.shape[0], block_r), triton.cdiv(x.shape[1], block_c))
    _scale_rows_kernel[grid](x, factors, y, x.shape[0], x.shape[1], x.stride(0),
                             BLOCK_R=block_r, BLOCK_C=block_c)
    return y


# A reduction across blocks: the log-sum-exp of each row, with a running maximum -----------------

@triton.jit
def _row_logsumexp_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((), float("-inf"), tl.float32)                          # running maximum
    total = tl.zeros((), tl.float32)                                    # running sum of exp(x - m)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x.to(tl.float32), axis=0))
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x.to(tl.float32) - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(total))


def row_logsumexp(x, block=16):
    """``torch.logsumexp(x, dim=1)`` in float32 for ``x`` of shape ``(rows, cols)`` with finite
    entries: one program per row, reading ``block`` columns at a time."""
    _check_tensor("x", x, 1)
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"row_logsumexp needs x of shape (rows, cols) with cols >= 1, got {tuple(x.shape)}")
    _check_block("block", block)
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _row_logsumexp_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block)
    return out


# The forward kernel --------------------------------------------------------------------------------

@triton.jit
def _forward_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n0, offs_d, n_k, head_dim,
                    stride_kn, stride_vn, scale, lo, hi, visits_ptr, visit_row,
                    BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, RECORD: tl.constexpr):
    """Key blocks ``lo, lo + BLOCK_N, ... < hi`` for one block of queries: the online softmax."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        key_ok = offs_n < n_k
        k = tl.load(k_ptrs + start_n * stride_kn, mask=key_ok[:, None] & (offs_d[None, :] < head_dim), other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vn, mask=key_ok[:, None] & (offs_d[None, :] < head_dim), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale          # (BLOCK_M, BLOCK_N) scores
        visible = key_ok[None, :]
        if CAUSAL_MASK:                                                      # only diagonal blocks pay this
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)                                          # rescales what came before
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
        if RECORD:                                                           # 1: full block, 2: masked
            tl.store(visits_ptr + visit_row + start_n // BLOCK_N, 2 if CAUSAL_MASK else 1)
    return acc, m_i, l_i


@triton.jit
def _flash_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, visits_ptr,
                          n_q, n_k, head_dim, scale,
                          stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                          stride_ob, stride_on, n_key_blocks,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                          CAUSAL: tl.constexpr, RECORD: tl.constexpr):
    pid_m, b = tl.program_id(0), tl.program_id(1)          # which block of queries, which slice
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    q = tl.load(q_ptr + b * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :],
                mask=(offs_m[:, None] < n_q) & d_ok, other=0.0)
    k_ptrs = k_ptr + b * stride_kb + offs_n0[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = v_ptr + b * stride_vb + offs_n0[:, None] * stride_vn + offs_d[None, :]
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    visit_row = (b * tl.num_programs(0) + pid_m) * n_key_blocks
    if CAUSAL:
        # Key blocks entirely at or below the diagonal for every query of the block need no mask;
        # the blocks crossing the diagonal do; the blocks past the last query are never visited.
        first_query = pid_m * BLOCK_M
        diag_end = tl.minimum(first_query + BLOCK_M, n_k)
        full_end = tl.minimum(((first_query + 1) // BLOCK_N) * BLOCK_N, diag_end)
        acc, m_i, l_i = _forward_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n0, offs_d, n_k,
                                        head_dim, stride_kn, stride_vn, scale, 0, full_end,
                                        visits_ptr, visit_row, BLOCK_N, False, RECORD)
        acc, m_i, l_i = _forward_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n0, offs_d, n_k,
                                        head_dim, stride_kn, stride_vn, scale, full_end, diag_end,
                                        visits_ptr, visit_row, BLOCK_N, True, RECORD)
    else:
        acc, m_i, l_i = _forward_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n0, offs_d, n_k,
                                        head_dim, stride_kn, stride_vn, scale, 0, n_k,
                                        visits_ptr, visit_row, BLOCK_N, False, RECORD)
    row_ok = offs_m < n_q
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok)
    tl.store(lse_ptr + b * n_q + offs_m, m_i + tl.log(l_i), mask=row_ok)


def _flatten_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 2)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if (k.shape != v.shape or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]
            or q.shape[-2] == 0 or k.shape[-2] == 0 or q.shape[-1] == 0):
        raise ValueError(f"attention needs q (..., n_q, d) and k, v (..., n_k, d) with the same leading axes "
                         f"and n_q, n_k, d >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    lead = q.shape[:-2]
    flat = [t.reshape(-1, t.shape[-2], t.shape[-1]).contiguous() for t in (q, k, v)]
    return lead, flat


def _head_block(d):
    return max(16, triton.next_power_of_2(d))


def flash_forward(q, k, v, causal=False, block_m=16, block_n=16, visits=None):
    """FlashAttention's forward pass: ``(out, lse)``, ``out`` shaped like ``q``, ``lse`` shaped
    ``q.shape[:-1]`` (float32). One program per block of ``block_m`` queries of each slice walks the
    keys ``block_n`` at a time with the online softmax; causal programs skip the blocks above the
    diagonal. ``visits``, if given, is an int32 tensor of shape ``(slices, query blocks, key blocks)``
    into which the kernel writes 1 for each block it computes in full and 2 for each block it masks."""
    lead, (qf, kf, vf) = _flatten_qkv(q, k, v)
    _check_block("block_m", block_m, 16)
    _check_block("block_n", block_n, 16)
    slices, n_q, d = qf.shape
    n_k = kf.shape[1]
    out = torch.empty_like(qf)
    lse = torch.empty(slices, n_q, dtype=torch.float32, device=qf.device)
    grid = (triton.cdiv(n_q, block_m), slices)
    n_key_blocks = triton.cdiv(n_k, block_n)
    if visits is not None and tuple(visits.shape) != (slices, grid[0], n_key_blocks):
        raise ValueError(f"visits must have shape {(slices, grid[0], n_key_blocks)}, got {tuple(visits.shape)}")
    _flash_forward_kernel[grid](
        qf, kf, vf, out, lse, visits if visits is not None else lse,
        n_q, n_k, d, 1.0 / math.sqrt(d),
        qf.stride(0), qf.stride(1), kf.stride(0), kf.stride(1), vf.stride(0), vf.stride(1),
        out.stride(0), out.stride(1), n_key_blocks,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_head_block(d), CAUSAL=bool(causal),
        RECORD=visits is not None)
    return out.reshape(q.shape), lse.reshape(lead + (n_q,))


# The backward kernels: FlashAttention-2's loop order, recomputing P from the log-sum-exp ------------

@triton.jit
def _row_dot_kernel(o_ptr, do_ptr, delta_ptr, n_rows, head_dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """D = rowsum(dO * O) for a block of rows of the flattened (rows, d) tensors."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    inside = (rows[:, None] < n_rows) & (offs_d[None, :] < head_dim)
    o = tl.load(o_ptr + rows[:, None] * head_dim + offs_d[None, :], mask=inside, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + rows[:, None] * head_dim + offs_d[None, :], mask=inside, other=0.0).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)


@triton.jit
def _recompute_p(q, k, lse, offs_m, offs_n, n_q, n_k, scale, CAUSAL: tl.constexpr):
    """The weights P of one tile, rebuilt from Q, K and the saved log-sum-exp (0 outside the tile)."""
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    valid = (offs_m[:, None] < n_q) & (offs_n[None, :] < n_k)
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    return tl.where(valid, tl.exp(s - lse[:, None]), 0.0)


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                 n_q, n_k, head_dim, scale,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr):
    """One program per block of keys: dV = sum P^T dO and dK = sum dS^T Q over the query blocks."""
    pid_n, b = tl.program_id(0), tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    kv_mask = (offs_n[:, None] < n_k) & d_ok
    k = tl.load(k_ptr + b * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    lo = 0
    if CAUSAL:                                   # queries before this key block never see it
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
    for start_m in range(lo, n_q, BLOCK_M):
        offs_m = start_m + offs_m0
        row_ok = offs_m < n_q
        rows = b * n_q * head_dim + offs_m[:, None] * head_dim + offs_d[None, :]
        q = tl.load(q_ptr + rows, mask=row_ok[:, None] & d_ok, other=0.0)
        do = tl.load(do_ptr + rows, mask=row_ok[:, None] & d_ok, other=0.0)
        lse = tl.load(lse_ptr + b * n_q + offs_m, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + b * n_q + offs_m, mask=row_ok, other=0.0)
        p = _recompute_p(q, k, lse, offs_m, offs_n, n_q, n_k, scale, CAUSAL)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee")
    out = b * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :]
    tl.store(dk_ptr + out, (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
               n_q, n_k, head_dim, scale,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr):
    """One program per block of queries: dQ = sum dS K over the key blocks it sees."""
    pid_m, b = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    row_ok = offs_m < n_q
    rows = b * n_q * head_dim + offs_m[:, None] * head_dim + offs_d[None, :]
    q = tl.load(q_ptr + rows, mask=row_ok[:, None] & d_ok, other=0.0)
    do = tl.load(do_ptr + rows, mask=row_ok[:, None] & d_ok, other=0.0)
    lse = tl.load(lse_ptr + b * n_q + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(delta_ptr + b * n_q + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    hi = n_k
    if CAUSAL:                                   # keys after this block's last query are never seen
        hi = tl.minimum(n_k, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_mask = (offs_n[:, None] < n_k) & d_ok
        k = tl.load(k_ptr + b * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
        p = _recompute_p(q, k, lse, offs_m, offs_n, n_q, n_k, scale, CAUSAL)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(dq_ptr + rows, (dq * scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok)


def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_m=16, block_n=16):
    """Gradients ``(dq, dk, dv)`` of attention from the saved ``q, k, v, out, lse`` and ``grad_out``
    (the gradient of the loss with respect to ``out``), without the score matrix: one kernel computes
    ``D = rowsum(dO * O)``, one program per key block accumulates dK and dV over the query blocks
    (recomputing each tile's weights from ``lse``), and one program per query block accumulates dQ.
    Two kernels instead of atomic additions into dQ: each gradient is written by exactly one
    program, so the result does not depend on the order in which programs finish."""
    lead, (qf, kf, vf) = _flatten_qkv(q, k, v)
    _check_block("block_m", block_m, 16)
    _check_block("block_n", block_n, 16)
    for name, t, shape in (("out", out, q.shape), ("grad_out", grad_out, q.shape), ("lse", lse, q.shape[:-1])):
        _check_tensor(name, t, 1)
        if t.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    slices, n_q, d = qf.shape
    n_k = kf.shape[1]
    of = out.reshape(slices, n_q, d).to(qf.dtype).contiguous()
    dof = grad_out.reshape(slices, n_q, d).to(qf.dtype).contiguous()
    lsef = lse.reshape(slices, n_q).to(torch.float32).contiguous()
    delta = torch.empty(slices, n_q, dtype=torch.float32, device=qf.device)
    block_d = _head_block(d)
    _row_dot_kernel[(triton.cdiv(slices * n_q, block_m),)](of, dof, delta, slices * n_q, d,
                                                           BLOCK_M=block_m, BLOCK_D=block_d)
    dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
    args = (n_q, n_k, d, 1.0 / math.sqrt(d))
    meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, CAUSAL=bool(causal))
    _dkdv_kernel[(triton.cdiv(n_k, block_n), slices)](qf, kf, vf, dof, lsef, delta, dk, dv, *args, **meta)
    _dq_kernel[(triton.cdiv(n_q, block_m), slices)](qf, kf, vf, dof, lsef, delta, dq, *args, **meta)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


class FlashAttention(torch.autograd.Function):
    """Attention through the kernels: ``FlashAttention.apply(q, k, v, causal, block_m, block_n)``
    saves only ``q, k, v, out`` and ``lse`` for the backward pass."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_m=16, block_n=16):
        out, lse = flash_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = dict(causal=causal, block_m=block_m, block_n=block_n)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, grad_out, **ctx.settings)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """Attention whose backward pass runs the kernels too (a differentiable ``flash_forward``)."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)
