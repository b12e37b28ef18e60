"""Chapter 10 exercises: attention as today's language models run it.

ch10_ex1  kv_cache_bytes(config, context_len, bytes_per_number)            -> int
ch10_ex2  ring_window_attention(queries, keys, values, window, slope)      -> (outputs, k_buffer, v_buffer)
ch10_ex3  sink_cache_step(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks)
                                                                             -> (output, k_cache, v_cache)
ch10_ex4  delta_rule_wy(keys, values, beta)                                 -> (w, u)
ch10_ex5  mla_decode_step(x_new, latent_cache, rope_cache, weights)        -> (context, latent_cache, rope_cache)
ch10_ex6  base_for_context(head_dim, context_len)                         -> float

Conventions (the chapter's, stated again in each contract): queries, keys and values are
``(batch, num_heads, num_tokens, head_dim)``; a sliding ``window`` counts the keys a query sees
including itself (query ``i`` sees keys ``max(0, i - window + 1) .. i``) and a ring-buffer cache of
capacity ``window`` keeps position ``p`` in slot ``p % window``; attention sinks are the first
``num_sinks`` positions, kept forever; the delta rule's state ``S`` is ``(d_v, d_k)`` with
``S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``; RoPE pairs columns ``2i, 2i+1`` with
inverse frequency ``base ** (-2 i / d)``; a window layer with sinks keeps position ``p >= num_sinks``
in slot ``num_sinks + p % window``.

Exercises 1, 2, 4 and 6 are transfer exercises: an accounting of whole models, a ring buffer
under a relative position bias, the chunk (WY) form of the delta rule derived from its
recurrence, and the smallest RoPE base that covers a context, derived. Exercises 3 and 5 carry the
chapter's sink cache and latent attention into one decoding step.

One module per exercise, its parts in one order: the contract, the reference, the inputs of the
checks, the kept mistakes (each with its hint), the kept alternatives, the registration.
``_common.py`` holds the helper several of them share.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_kv_cache_bytes,
    ex2_ring_window_attention,
    ex3_sink_cache_step,
    ex4_delta_rule_wy,
    ex5_mla_decode_step,
    ex6_base_for_context,
)
