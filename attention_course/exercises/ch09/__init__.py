"""Chapter 9 exercises: attention at scale.

ch09_ex1  merge_attention_partials(out_a, lse_a, out_b, lse_b) -> (out, lse)
ch09_ex2  online_softmax_stats(blocks)                           -> (maxima, sums)
ch09_ex3  causal_tiled_attention(queries, keys, values, block_size) -> (output, tiles)
ch09_ex4  cached_attention_step(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads)
                                                                 -> (context, k_cache, v_cache)
ch09_ex5  grouped_cached_step(q_new, k_new, v_new, k_cache, v_cache) -> (output, k_cache, v_cache)
ch09_ex6  split_attention_backward(queries, keys, values, output_part, lse_part, output, lse,
                           grad_output, grad_lse, block)
                                                                 -> (grad_queries, grad_keys, grad_values)
ch09_ex7  decode_accounting(config, context_len, batch, bytes_per_value)
                                                                 -> dict of cache_bytes, attention_flops,
                                                                    bytes_moved (ints) and intensity (float)
ch09_ex8  tiled_attention_traffic(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                                  causal=False, keys_outside=False) -> dict of reads, writes (ints)

Conventions fixed by this chapter (stated in each exercise's contract):

* Scores are scaled by ``1 / sqrt(d)``, ``d`` the size of the queries' (or, with heads,
  of one head's) last axis; a *log-sum-exp* ``lse`` of a set of keys is
  ``log(sum_j exp(score_j))`` over that set, ``-inf`` for a set with no visible key (whose
  attention output is then all zeros, the convention of Chapters 3 and 6).
* Masked scores are ``-inf``. A row whose every score so far is ``-inf`` has running
  maximum ``-inf`` and running sum ``0``, never NaN.
* Queries that come last (Chapter 5, exercise 4): with ``n_q`` queries and ``n_k`` keys,
  query ``i`` sits at position ``n_k - n_q + i`` and sees the keys at positions up to it.
* A key-value cache stores ``(batch, num_heads, tokens, head_dim)`` and grows along the
  tokens axis; feature ``h * head_dim + i`` of a projection belongs to head ``h``.
* Grouped-query attention (exercise 5): query head ``i`` uses key/value head
  ``i // (num_heads // num_kv_heads)`` (contiguous groups, as ``repeat_interleave`` gives).

Numerical checks use scores far above 88, where ``exp`` overflows in float32, so a
formula that is right on paper but exponentiates before subtracting the maximum fails.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``;
``_tiling.py`` holds exercise 3's check comparisons and the tile loop its kept mistakes share.
``_split_backward.py`` holds exercise 6's check of ``block`` and the tile loop its kept mistakes share.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_merge_attention_partials,
    ex2_online_softmax_stats,
    ex3_causal_tiled_attention,
    ex4_cached_attention_step,
    ex5_grouped_cached_step,
    ex6_split_attention_backward,
    ex7_decode_accounting,
    ex8_tiled_attention_traffic,
)
