"""Chapter 5 exercises: causal masking and dropout on attention weights.

ch05_ex5, ``diagnose_dropout(draws, p)``, is the course's diagnosis exercise (TRANSFER): from the
outputs of a dropout layer called many times on all-ones weights, tell a correct inverted dropout
from one that does not rescale, rescales by 1 - p, reuses one mask, or is switched off. Its checks
draw those outputs from trusted layers of each kind.

ch05_ex6, ``stacked_influence(allowed, num_layers, residual=True)`` (TRANSFER): which outputs of a
stack of layers can depend on which input tokens when every layer uses one attention pattern
(``allowed`` True = may attend, the opposite of the chapter's masks); the page only tests one
layer. One check compares with bumps of a real stack of float64 attention layers.

ch05_ex7, ``decode_step(layer, x_new, cache)`` (TRANSFER): one generation step of a causal layer
with a key-value cache (the page never writes one): the new token's context vector and the cache
grown by its key and value, so that steps fed token by token reproduce ``layer(x)`` row by row. The
layer is passed as the course's ``multihead.CausalAttention`` in eval mode; one check passes a cache
no layer made, so the cache must be used as given.

Conventions fixed by this chapter (stated in each exercise's contract):

* A boolean attention mask is ``True`` where a query must **not** attend to a key
  (the positions filled with ``-inf`` before the softmax), the same convention as
  ``Tensor.masked_fill`` and ``torch.nn.MultiheadAttention``'s boolean masks.
* ``CausalAttention`` keeps its mask as a **non-persistent** buffer named ``mask``:
  it is rebuilt from ``context_length`` in ``__init__``, so it stays out of
  ``state_dict()`` (checkpoints hold only the learned projections). Its dtype is
  the student's choice (the contract no longer asks for bool: nothing could check it).
  Parameter values are always loaded with ``state_dict``, so the order in which the
  layers are created does not matter.
* Dropout (ex2, ex3) is checked by properties with
  :func:`attention_course.checks.dropout_checks.dropout_compare`, never by one random stream:
  eval mode deterministic, ``p = 0`` equals eval mode, survivors scaled by ``1/(1-p)``
  with a fraction ``p`` zeroed, the mean of 40 seeded draws within 6 standard errors of
  the eval output, the spread of the draws that of dropout with drop probability ``p``,
  and (ex3) with every value vector equal, rows that stay multiples of it. Independence
  of the drops is checked too (``independent_along``): with uniform weights (ex2) no two
  rows, columns or batch entries, and with a batch of two equal sequences (ex3) no two
  sequences, may come out identical far more often than independent drops allow.
* Integer sizes (ex1, ex4) are stated as Python ints in the contracts and not checked:
  only sizes below 1 (and ex4's ``num_queries > num_keys``) must raise.
* Kept mistakes include LLMs-from-scratch #431 (survivors scaled by ``1/p``) and a
  persistent float mask buffer; kept alternatives include dropout drawn with
  ``torch.rand_like(w) >= p``, d2l's ``dropout_layer``, ``torch.bernoulli`` in float64,
  layers created keys first, torch's fused SDPA with its own dropout.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_causal_mask,
    ex2_attention_dropout,
    ex3_causal_attention,
    ex4_offset_causal_mask,
    ex5_diagnose_dropout,
    ex6_stacked_influence,
    ex7_decode_step,
)
