"""Chapter 7 exercises: Bahdanau attention in a GRU encoder-decoder.

ch07_ex1  CoverageDecoder(embed_size, num_hiddens)  forward(h0, embedded, enc_outputs, valid_lens) -> (states, weights, coverage)
ch07_ex2  LuongDecoderStep(embed_size, num_hiddens)     forward -> (hidden, attentional, weights)
ch07_ex3  beam_search(log_probs, bos, eos, beam_size, max_len) -> (tokens, score)
ch07_ex4  hard_alignment(weights) -> (positions, monotonicity)
ch07_ex5  BidirectionalEncoder(vocab_size, embed_size, num_hiddens)  forward(src, src_lens) -> outputs

Each exercise teaches one thing: ex1 a transfer of the decoder of Bahdanau et al. to a
case the chapter does not print, coverage (the sum of the earlier weights enters the additive
score inside the tanh; query = the *previous* state, the context feeds the GRU update), run
with teacher forcing; ex2 the other recipe, of
Luong et al. (update first, query = the *new* state, a bilinear score, an
attentional vector), which the chapter describes but does not show; ex3 a transfer of the
section on beam search, which prints no search: beam search over a table of next-token
log-probabilities (one ranking over the whole beam, finished hypotheses kept unchanged, max_len
tokens at most), checked against greedy decoding, a beam wide enough to enumerate every
hypothesis and hand-made tables (it replaced a retype of the printed greedy loop, issue 41);
ex4 reading an alignment; ex5 the bidirectional
encoder of the paper on a padded batch, where the backward direction must start at
each sequence's own last character (the chapter only mentions it).

Parameter values always come from a ``state_dict`` given by the check, so the order
in which a module creates its parameters never matters. Every exercise keeps
mistakes (wrong in one way each, with their own hint) and correct alternatives in
other styles, which the tests run through every check.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_coverage_decoder,
    ex2_luong_decoder_step,
    ex3_beam_search,
    ex4_hard_alignment,
    ex5_bidirectional_encoder,
)
