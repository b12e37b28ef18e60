"""Chapter 4 -- Self-attention, step by step.

Exercises
---------
Each line is marked RETYPE (the page prints the computation; the exercise has it written
again, with a contract), VARIATION (a printed computation in a new setting or layout) or
TRANSFER (something the page does not print: a new case, a derivation turned into code).
Issue 26: a chapter's points go mostly to understanding, so the RETYPE exercises are
one-point warm-ups; here RETYPE carries 4 of the chapter's 17 points, VARIATION and
TRANSFER 13. Issue 40: at most eight exercises a chapter and no retype that a warm-up does
not need, so the printed simple self-attention and its module are one warm-up (the module),
and the transposition into ``nn.Linear`` weights (once ``linear_state_dict``, a separate 1-point
exercise) is a question at the end of the module exercise.

* ``ch04_ex1`` ``SelfAttention(d_in, d_out, qkv_bias=False)``: scaled dot-product
  self-attention with ``nn.Linear`` projections ``W_query``, ``W_key``, ``W_value``; then, in a
  scratch cell, the chapter's ``(d_in, d_out)`` matrices loaded into it (transposed).
  RETYPE warm-up, 3 points (the page prints the simple self-attention and a module with
  ``nn.Parameter`` matrices). Issue 40: the retired ``simple_self_attention`` retype is merged
  into it; its kept mistakes (sum-normalised scores, softmax over the queries axis, ``.T`` or
  ``transpose(0, 1)`` on a batch) are kept here, adapted to the module.
* ``ch04_ex2`` ``attend_permuted(inputs, perm, W_query, W_key, W_value)``: attention
  on permuted tokens, and its output put back into the original token order.
  VARIATION, 2 points (the page permutes; undoing the permutation is the student's).
* ``ch04_ex3`` ``sinusoidal_encoding(num_positions, d_model)``: the sinusoidal
  positional encoding of Vaswani et al. (2017), interleaved sin/cos columns, float32.
  RETYPE, 1 point (the page prints a loop version; validation and float32 are added).
* ``ch04_ex4`` ``offset_matrix(k, d_model)``: the block-diagonal rotation ``M_k`` with
  ``M_k @ PE[pos] == PE[pos + k]`` for every position. VARIATION, 2 points (the chapter
  shows one 2x2 block; negative offsets, the pair layout and validation are the student's).
* ``ch04_ex5`` ``apply_rope(x, positions, base=10000.0, scale=1.0)``: rotary embedding in the
  chapter's interleaved layout at any positions (per sequence, fractional), with leading axes,
  angles in float64, and the ``scale`` of position interpolation (positions divided by it).
  TRANSFER, 3 points (the page prints ``rotate_pairs`` for one shared row of positions and
  describes interpolation only in words). Checks: a fixed case, the offset-only score at four
  starting positions, ``scale=s`` against positions divided by ``s``, lengths kept, far
  positions in float32; kept mistakes from real RoPE bugs (half-split pairs, the sine's sign,
  the exponent ``i/d``, the scale multiplying, positions taken as ``0, 1, 2, ...``, float32
  angles). No error check.
* ``ch04_ex6`` ``to_half_split(w)``: a ``(..., d_in, d_k)`` projection trained for the
  interleaved rotary layout, converted (a column reordering) for the half-split layout, so
  that every RoPE score is unchanged. TRANSFER, 3 points (the chapter only mentions the
  half-split layout; the checks implement both layouts and compare scores, plus the exact
  matrix). No error check.
* ``ch04_ex7`` ``offset_only_part(A)``: the offset-only part of ``A`` (``W_q W_k^T``):
  the closest matrix (Frobenius) among those commuting with every ``M_k``, i.e. on each
  pair (2i, 2i+1) the block [[a, b], [-b, a]] with a, b the means of A's diagonal entries
  and of its off-diagonal ones (the lower one negated), 0 elsewhere; leading axes allowed.
  TRANSFER, 3 points (the page prints one such matrix built by hand and never projects a
  given A; the student derives a and b). Checks: entries, commuting with ``M_k``, offset-only
  scores on the chapter's table, remainder orthogonal to the offset-only matrices, an
  offset-only ``A`` unchanged. No error check (an odd ``d_model`` is outside the contract):
  the chapter's error checks are 4 of its public checks, below the fifth.

Decisions (documented in the notebook's contracts as well):

* ``sinusoidal_encoding`` requires ``num_positions >= 1`` and an even ``d_model >= 2``
  (sines and cosines come in pairs); otherwise ``ValueError`` naming the argument.
* A check that expects an error holds only failing calls, so the test that caps
  error-message checks at a fifth of the chapter's points counts it; an untouched stub
  still fails it with the ``NotImplementedError`` reason (which names the label).
* Every exercise keeps at least three correct alternatives in other styles (loops,
  einsum, float64 inside, torch's fused SDPA, LLMs-from-scratch's and d2l's layouts,
  the Annotated Transformer's exp-log frequencies); the tests prove they pass. Error-
  message checks carry half the weight of a value check.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_self_attention,
    ex2_attend_permuted,
    ex3_sinusoidal_encoding,
    ex4_offset_matrix,
    ex5_apply_rope,
    ex6_to_half_split,
    ex7_offset_only_part,
)
