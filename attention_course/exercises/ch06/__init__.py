"""Chapter 6 exercises: multi-head attention.

ch06_ex1  MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)
          (the warm-up: assembles the chapter's printed layer, splitting and merging the heads; RETYPE,
          2 points)
ch06_ex2  fuse_head_weights(query_weights, key_weights, value_weights) -> in_proj_weight
ch06_ex3  per_head_masked_attention(queries, keys, values, mask) -> (output, weights)
ch06_ex4  attention_layer_cost(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim,
          qkv_bias) -> dict of ints: parameters, entries of the attention weights and multiply-adds of a
          cross-attention layer whose heads are not cut from d_in (a case the page never builds; TRANSFER)
ch06_ex5  head_contributions(layer, x) -> (batch, num_heads, num_tokens, d_out): each head's context
          through its column block of out_proj.weight, no bias, eval mode; they sum to layer(x) minus
          the bias (attribution to heads; TRANSFER, with an open question)
ch06_ex6  sdpa_masks(mask, dtype) -> (bool_mask, additive_mask): the course's mask in both of SDPA's
          forms, checked through SDPA (TRANSFER)
ch06_ex7  earlier_copy_head(vocab_size, context_length, head_dim) -> (W_query, W_key): a head crafted
          by its weights that attends to the earlier copies of its token, or to itself at a first
          occurrence, checked by behaviour on drawn sequences (TRANSFER: the page crafts a
          same-word head that also attends to itself, and never says how large the weights must be)

Conventions fixed by this chapter (stated in each exercise's contract):

* Feature ``h * head_dim + i`` of a ``d_out``-wide projection belongs to head ``h``
  (``head_dim = d_out // num_heads``), the layout of ``nn.MultiheadAttention`` and of
  :mod:`attention_course.multihead`.
* ``d_out`` not divisible by ``num_heads`` is a ``ValueError``; in the layer (ex1) its message
  names ``d_out`` and ``num_heads`` and gives their values.
* A boolean mask is ``True`` where a query must **not** attend to a key (Chapter 5);
  a query that sees no key at all gets all-zero weights and a zero output (Chapter 3).
* ``MultiHeadAttention`` keeps its causal mask as a non-persistent buffer ``mask``;
  the checks load the parameters with ``load_state_dict``, so the order in which a
  student creates the layers does not matter, but their names and shapes do. Its
  dropout is checked by properties of 40 seeded draws
  (:mod:`attention_course.checks.dropout_checks`), never by one random stream.
* Error-message checks weigh a fifth to two fifths of a value check, so that they carry
  less than a fifth of the chapter's points. Every exercise keeps at least three
  correct alternatives (unflatten, chunks stacked, loops over heads, SDPA, einsum in
  float64, LLMs-from-scratch's layout); kept mistakes include d2l #2056 (full-width
  heads) and a persistent float mask buffer (LLMs-from-scratch's register_buffer).

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_multi_head_attention,
    ex2_fuse_head_weights,
    ex3_per_head_masked_attention,
    ex4_attention_layer_cost,
    ex5_head_contributions,
    ex6_sdpa_masks,
    ex7_earlier_copy_head,
)
