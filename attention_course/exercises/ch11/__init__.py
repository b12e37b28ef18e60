"""Chapter 11 exercises: writing the kernel, FlashAttention in Triton.

ch11_ex1  masked_row_softmax(x, valid_lens, block)                       -> weights
ch11_ex2  causal_attention_last(q, k, v, block_m, block_n)               -> (out, lse)
ch11_ex3  window_attention(q, k, v, window, block_m, block_n)            -> out
ch11_ex4  causal_backward_dq(q, k, v, out, lse, grad_out, block_m, block_n) -> dq
ch11_ex5  split_kv_decode(q, k, v, num_splits, block_n)                  -> (out, partial_out, partial_lse)

Conventions (the chapter's, stated again in each contract): every exercise asks for a ``@triton.jit``
kernel and a plain Python function (the graded name) that allocates the outputs and launches it;
the checks call that function with contiguous float32 CPU tensors, and without a GPU the kernel runs
in Triton's interpreter. Attention inputs are ``(heads, tokens, d)`` with ``d`` a power of two of at
least 16 (``tl.dot`` needs 16); scores are scaled by ``1 / sqrt(d)``; a log-sum-exp is a natural
logarithm, ``-inf`` for a row that sees no key. Lengths need not be multiples of the blocks. Queries
that come last (Chapter 5, exercise 4): with ``n_q <= n_k``, query ``i`` sits at position
``n_k - n_q + i``. A window (Chapter 10) counts the keys a query sees including itself.

Every check records what the kernels did (``report=("kernel_memory",)``, a record the check engine's
call layer keeps, :class:`attention_course.checks.calls._KernelMemory`): a load or store outside the
tensors a kernel was given reads NaN or is dropped and fails the check (a missing boundary mask);
the largest single load is bounded by a block (a kernel that loads all the keys at once, and so
holds a whole row block of the score matrix, fails); and which rows of the keys and values each
program read is compared with the reference's (blocks a kernel must skip).

Exercises 3 and 5 are transfer exercises: a sliding window that also skips the blocks before it (the
chapter skips only the future), and decoding with the keys split across programs, partial log-sum-exps
and a merge. Exercises 1, 2 and 4 carry the chapter's row reduction, causal forward and dQ kernel to
valid lengths and to queries that come last.

One module per exercise, its parts in one order: the contract, the reference, the inputs of the
checks, the kept mistakes (each with its hint), the kept alternatives, the registration.
``_common.py`` holds the lazy ``jit`` (triton is imported on the first launch, never when the
exercises are imported) and the kernel checks' compare.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_masked_row_softmax,
    ex2_causal_attention_last,
    ex3_window_attention,
    ex4_causal_backward_dq,
    ex5_split_kv_decode,
)
