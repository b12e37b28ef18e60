"""Chapter 3 exercises: attention scoring functions.

ch03_ex1  masked_softmax(scores, valid_lens)  (warm-up: the printed masking, with its regression
          cases: valid length 0 gives an all-zero row and a zero gradient; 1-D and 2-D valid_lens)
ch03_ex2  AdditiveAttention(query_size, key_size, num_hiddens)  (an nn.Module; warm-up: the printed
          scoring, masking and pooling in one module, with the shape table's parameter shapes)
ch03_ex3  BilinearAttention(query_size, key_size)  (an nn.Module): the "general" score q^T W k
          (its kept mistakes include keys.T on 3-D keys, the dot-product warm-up's old hint)
ch03_ex4  unit_variance_scale(query_var, key_var): the scale that gives scores variance 1 when the
          coordinates of queries and keys have unequal variances (a derivation turned into code;
          TRANSFER: the page prints only the case of variance 1); one check samples 20,000 pairs
ch03_ex5  query_jacobian(queries, keys, values) -> (m, d_v, d): d output / d query of scaled
          dot-product attention, (1/sqrt d) sum_i a_i (v_i - o)(k_i - kbar)^T (a derivation turned
          into code; TRANSFER: the page prints the softmax's p(1 - p) but never how the output moves
          with the query). The checks compare with autograd's Jacobian in float64 (the compare
          recomputes it); they cannot forbid autograd, so the statement asks for the formula.
          Centring one side is enough (sum_i a_i (k_i - kbar) = 0): "values not centred" is a kept
          alternative, not a mistake
ch03_ex6  diagnose_masking(weights, grads, valid_lens) -> a dict of five bools: every way in which a
          masked softmax is wrong, judged only from what it returned on a batch with an empty row
          (NaN weights, weights on an empty row, exact leaks onto masked keys, rows not summing to
          1, NaN gradients), each on its own; a diagnosis (TRANSFER: the page prints the failures
          one at a time, never how to tell them apart from plain data; no order is given, and
          several implementations fail in two ways at once, so an if/elif chain is a kept
          mistake). The checks pass the outputs of twelve implementations kept in the module
          (two correct, among them a -1e9 fill with empty rows zeroed, and ten broken ones)

The references of ex1 and ex2 are the finished building blocks of
:mod:`attention_course.functional`. A row whose valid length is 0 gets all-zero
weights (so a zero output) and a zero gradient; the checks test both, forward and
backward (``grads_of``). ``masked_softmax`` must not modify ``scores`` in place: the
gradient checks pass ``scores`` as a leaf that requires grad, and autograd refuses
an in-place change of such a tensor.

Kept mistakes include the known bugs of other courses: d2l's masked softmax fills
padding with a finite -1e6 (a row of valid length 0 comes out uniform; d2l PR #2423),
and an additive -inf mask zeroed afterwards (right forward, NaN gradients).
Kept alternatives include d2l's own masked softmax and
AdditiveAttention (LazyLinear layers) adapted to this contract, einsum, loops,
float64 inside.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_masked_softmax,
    ex2_additive_attention,
    ex3_bilinear_attention,
    ex4_unit_variance_scale,
    ex5_query_jacobian,
    ex6_diagnose_masking,
)
