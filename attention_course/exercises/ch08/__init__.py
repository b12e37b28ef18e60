"""Chapter 8 exercises: from Bahdanau to the Transformer.

ch08_ex1  left_padded_self_mask(tgt_lens, num_tokens) -> bool (batch, num_tokens, num_tokens), left padding
ch08_ex2  CrossAttention(d_model, num_heads); forward(x, memory, key_padding_mask) -> (output, weights)
ch08_ex3  DecoderBlock(d_model, num_heads, d_ff); forward(x, memory, self_mask, key_padding_mask)  (pre-LN)
ch08_ex4  transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie)
          -> dict of ints: the model's parameters by kind with the output (and source) embeddings tied
          (an accounting the page never prints; TRANSFER)
ch08_ex5  GreedyTransformer(Transformer).greedy_decode(src, src_lens, max_len) -> (tokens, weights)
ch08_ex6  head_entropy(weights, tgt_lens) -> (num_heads,) mean entropy of each head's rows
ch08_ex7  forward_multiply_adds(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers,
                                embed_size, num_hiddens, tgt_vocab) -> {"transformer": int, "bahdanau": int}

Conventions fixed by the chapter (and stated in every contract):

* A boolean mask is ``True`` where a query must **not** attend to a key (Chapters 5 and 6,
  ``nn.MultiheadAttention``); a ``key_padding_mask`` ``(batch, num_keys)`` is ``True`` at padding,
  in any pattern (right, left or scattered), so it is used entry by entry, never as lengths.
* A query whose keys are all hidden gets all-zero weights and so a zero context (Chapter 3).
* Attention modules have ``W_query``, ``W_key``, ``W_value`` (``nn.Linear(d_model, d_model,
  bias=False)``) and ``out_proj`` (``nn.Linear(d_model, d_model)``), as in Chapter 6; the checks
  load every parameter with ``load_state_dict``, so the order in which a student creates the
  layers does not matter, only their names and shapes.
* ``GreedyTransformer`` subclasses :class:`attention_course.transformer.Transformer`; its check
  builds it with ``max_encodes=1``, so encoding the source a second time raises.

Exercises 1, 4, 6 and 7 ask for something the chapter does not show step by step: the decoder's
mask for left-padded targets (the case where the causal mask alone lets real queries read
padding), the parameter count of the whole model from its sizes, a measure of how sharp
each head attends, and the multiply-adds of one forward pass of both models (the chapter
times them; tests/exercises/test_ch08.py checks the count against torch's FLOP counter).

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_left_padded_self_mask,
    ex2_cross_attention,
    ex3_decoder_block,
    ex4_transformer_parameters,
    ex5_greedy_transformer,
    ex6_head_entropy,
    ex7_forward_multiply_adds,
)
