"""ch08_ex7: Counting the work of one forward pass.

The speed table above timed a training step of both models; this exercise counts their work
instead. Write `forward_multiply_adds(batch, src_len, tgt_len, d_model, num_heads, d_ff,
num_layers, embed_size, num_hiddens, tgt_vocab)` (all Python `int`s, `num_heads` dividing
`d_model`) that returns a `dict` with exactly the keys `"transformer"` and `"bahdanau"`, each a
Python `int`: the number of multiply-adds in the matrix products of one teacher-forced forward
pass, `model(src, src_lens, tgt_in)`, on `batch` sources padded to `src_len` tokens and decoder
inputs of `tgt_len` tokens, of

- `"transformer"`: `tf.Transformer(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff)`,
  this chapter's model (any `src_vocab`);
- `"bahdanau"`: Chapter 7's model with attention, `tr.build_model(attention=True,
  embed_size=embed_size, num_hiddens=num_hiddens)` with a target vocabulary of `tgt_vocab`
  tokens: an `nn.GRU(embed_size, num_hiddens)` encoder runs over the source; the decoder applies
  `W_k` to the encoder states once, then at each target position scores every encoder state
  with additive attention (`W_q` and `W_k` map `num_hiddens` features to `num_hiddens`, `w_v`
  to 1), averages the states into a context, feeds `[embedding; context]` to an
  `nn.GRUCell(embed_size + num_hiddens, num_hiddens)` and maps `[state; context]` to the
  logits with `out = nn.Linear(2 * num_hiddens, tgt_vocab)`.

A product of an `(m, k)` matrix by a `(k, n)` matrix counts `m * k * n` multiply-adds (a batch
of products, their sum), so an `nn.Linear(k, n)` applied to `m` vectors counts `m * k * n`. A
GRU step with input size `k` and hidden size `h` computes three gates, each from one product of
its input and one of its previous state. Biases, element-wise operations (gates, `tanh`,
residual sums, scaling), softmax, layer norms, embedding look-ups and positional encodings count
nothing. Count what the code computes: every position up to the padded length, and every score
of an attention matrix, masked or not (the masks are applied to scores already computed).
"""
from __future__ import annotations

from torch import nn
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def forward_multiply_adds(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size,
                          num_hiddens, tgt_vocab):
    """Multiply-adds of one teacher-forced forward pass of tf.Transformer and of Chapter 7's model."""
    S, T, d, e, h, V = src_len, tgt_len, d_model, embed_size, num_hiddens, tgt_vocab

    def attention(queries, keys):
        """W_query on the queries; W_key, W_value on the keys; scores and weighted values (all heads
        together: num_heads products of head_dim = d // num_heads features); out_proj."""
        return queries * d * d + 2 * keys * d * d + 2 * queries * keys * d + queries * d * d

    ffn = lambda positions: 2 * positions * d * d_ff                              # noqa: E731
    encoder_block = attention(S, S) + ffn(S)
    decoder_block = attention(T, T) + attention(T, S) + ffn(T)
    transformer = num_layers * (encoder_block + decoder_block) + T * d * V

    gru_step = lambda inputs: 3 * h * (inputs + h)                                # noqa: E731
    encoder = S * gru_step(e)
    keys = S * h * h                                   # W_k on the encoder states, once
    step = h * h + S * h + S * h + gru_step(e + h) + 2 * h * V   # W_q, w_v, context, cell, out
    bahdanau = encoder + keys + T * step
    return {"transformer": batch * transformer, "bahdanau": batch * bahdanau}


# Inputs of the public and hidden checks ---------------------------------------------------


def _draw_sizes(g, src_len, tgt_len):
    """Random sizes of both models around the given lengths (several heads and layers)."""
    heads = randint(g, 2, 4)
    return (randint(g, 1, 40), src_len, tgt_len, heads * randint(g, 2, 6), heads, randint(g, 8, 96),
            randint(g, 2, 3), randint(g, 4, 32), randint(g, 8, 64), randint(g, 8, 40))


def _chapter_calls(seed):
    """The chapter's two models at the speed table's batch of 32 and length 32 (sources and targets of one
    length); at any other seed, other sizes with one length for both."""
    def draw(g):
        length = randint(g, 3, 48)
        return [Call(args=_draw_sizes(g, length, length))]
    return _public_or_drawn(seed, lambda: [Call(args=(32, 32, 32, 64, 4, 128, 2, 32, 64, 15))], draw)


def _lengths_calls(seed):
    """A source longer than its target, then a target longer than its source (other sizes too)."""
    def draw(g):
        short = randint(g, 2, 10)
        return [Call(args=_draw_sizes(g, short + randint(g, 1, 20), short)),
                Call(args=_draw_sizes(g, short, short + randint(g, 1, 20)))]
    return _public_or_drawn(seed, lambda: [Call(args=(2, 9, 4, 16, 2, 24, 3, 8, 12, 11)),
                                           Call(args=(3, 5, 12, 24, 3, 40, 1, 10, 20, 30))], draw)


def _large_calls(seed):
    """Vaswani et al.'s base model (d_model 512, 8 heads, d_ff 2048, 6 layers, 37 000 tokens) against a
    GRU model of width 1024, 25 sequences of 50 and 40 tokens; at any other seed, other large sizes."""
    def draw(g):
        heads = 2 ** randint(g, 2, 4)
        return [Call(args=(randint(g, 8, 64), randint(g, 20, 120), randint(g, 20, 120), heads * 64, heads,
                           256 * randint(g, 4, 16), randint(g, 4, 8), 128 * randint(g, 1, 4),
                           256 * randint(g, 2, 6), randint(g, 8000, 60000)))]
    return _public_or_drawn(seed, lambda: [Call(args=(25, 50, 40, 512, 8, 2048, 6, 256, 1024, 37000))], draw)


def _hidden_calls(seed):
    g = gen(seed)
    return [Call(args=_draw_sizes(g, randint(g, 2, 40), randint(g, 2, 40))) for _ in range(3)]


_EXACT = Check("exact counts", lambda seed: [], hint="", rtol=0.0, atol=0.0)   # for compare_outcome only


def _compare_counts(got, want, calls):
    """Both counts exactly, each a Python int (a float or a tensor with the right value is named as such)."""
    from ...checks.checking import compare_outcome
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        reason = compare_outcome(g, w, _EXACT, c)
        if reason is None and g.get("status") == "ok":
            for key, value in g["value"]["__dict__"].items():
                if type(value) is not int:
                    kind = "a tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
                    reason = f"result[{key!r}] has the right value but is {kind}; the contract asks for a Python int"
                    break
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


_HINT = ("each count is compared exactly with the multiply-adds of the matrix products that the model's forward "
         "pass computes at these sizes; the reason above says which model's count differs. Listing every "
         "product of one encoder block, one decoder block and one decoder step as (m, k, n) helps.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _variant(transformer=lambda s: 0, bahdanau=lambda s: 0):
    """The reference plus a wrong term: each function of the sizes returns what to add (per sequence)."""
    def impl(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens, tgt_vocab):
        out = forward_multiply_adds(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size,
                                    num_hiddens, tgt_vocab)
        s = dict(B=batch, S=src_len, T=tgt_len, d=d_model, H=num_heads, f=d_ff, N=num_layers, e=embed_size,
                 h=num_hiddens, V=tgt_vocab)
        return {"transformer": out["transformer"] + batch * transformer(s),
                "bahdanau": out["bahdanau"] + batch * bahdanau(s)}
    return impl


mistakes.add("cross-attention keys and values from the target",
             "your count projects the cross-attention's keys and values from the target positions; in "
             "cross-attention they are projected from the memory, one vector per source position.",
             _variant(transformer=lambda s: s["N"] * 2 * (s["T"] - s["S"]) * s["d"] ** 2))


mistakes.add("memory projected once for the whole decoder",
             "your count projects the memory into keys and values once for the whole decoder; each decoder "
             "block's cross-attention has its own W_key and W_value and projects the memory again.",
             _variant(transformer=lambda s: -(s["N"] - 1) * 2 * s["S"] * s["d"] ** 2))


mistakes.add("every head d_model wide",
             "your count gives every head's scores and weighted values the full d_model features; a head works "
             "on its head_dim = d_model // num_heads features, so splitting into heads adds no multiply-adds.",
             _variant(transformer=lambda s: (s["H"] - 1) * s["N"] * 2 * s["d"]
                      * (s["S"] * s["S"] + s["T"] * s["T"] + s["T"] * s["S"])))


mistakes.add("masked decoder scores left out",
             "your count gives the decoder's self-attention only the pairs the causal mask allows; the layer "
             "computes the full tgt_len x tgt_len matrix of scores (and its weighted values) and hides the "
             "future afterwards.",
             _variant(transformer=lambda s: -s["N"] * 2 * s["d"] * (s["T"] * s["T"] - s["T"] * (s["T"] + 1) // 2)))


mistakes.add("weighted values left out",
             "your count has each attention layer's scores but not the product of the weights with the values, "
             "in the Transformer's attention layers and in the Bahdanau decoder's context.",
             _variant(transformer=lambda s: -s["N"] * s["d"] * (s["S"] * s["S"] + s["T"] * s["T"] + s["T"] * s["S"]),
                      bahdanau=lambda s: -s["T"] * s["S"] * s["h"]))


mistakes.add("W_k applied at every decoder step",
             "your count applies W_k to the encoder states at every target position; the Bahdanau decoder "
             "computes these keys once and reuses them at every step.",
             _variant(bahdanau=lambda s: (s["T"] - 1) * s["S"] * s["h"] ** 2))


mistakes.add("decoder GRU cell without the context",
             "your count gives the decoder's GRUCell the embedding alone as input; it reads the embedding and "
             "the context side by side, embed_size + num_hiddens features.",
             _variant(bahdanau=lambda s: -s["T"] * 3 * s["h"] * s["h"]))


mistakes.add("output layer reads the state alone",
             "your count gives the Bahdanau model's output layer num_hiddens input features; it reads the "
             "state and the context side by side.",
             _variant(bahdanau=lambda s: -s["T"] * s["h"] * s["V"]))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("measured with torch's FLOP counter",
                   "the chapter's blocks, an nn.GRU and one step of Chapter 7's decoder on the meta device, "
                   "under torch.utils.flop_counter.FlopCounterMode; FLOPs halved")
def _alt_measured(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens,
                  tgt_vocab):
    """Run the real layers on meta tensors (no data, no memory) and read the counter."""
    from torch.utils.flop_counter import FlopCounterMode
    from ... import transformer as tf
    from ... import translation as tr
    longest = max(src_len, tgt_len)
    with torch.device("meta"):
        encoder_block = tf.EncoderBlock(d_model, num_heads, d_ff, context_length=longest)
        decoder_block = tf.DecoderBlock(d_model, num_heads, d_ff, context_length=longest)
        out = nn.Linear(d_model, tgt_vocab)
        gru = nn.GRU(embed_size, num_hiddens, batch_first=True)
        decoder = tr.AttentionDecoder(tgt_vocab, embed_size, num_hiddens)
        source, target = torch.empty(batch, src_len, d_model), torch.empty(batch, tgt_len, d_model)
        with FlopCounterMode(display=False) as counter:
            for _ in range(num_layers):
                encoder_block(source)
                decoder_block(target, source)
            out(target)
        transformer = counter.get_total_flops() // 2
        with FlopCounterMode(display=False) as counter:
            states, _ = gru(torch.empty(batch, src_len, embed_size))
            keys = decoder.W_k(states)                      # once, as the decoder's forward does
        once = counter.get_total_flops() // 2
        with FlopCounterMode(display=False) as counter:     # every target position costs the same
            decoder.step(torch.empty(batch, num_hiddens), torch.zeros(batch, dtype=torch.long), states, None, keys)
        return {"transformer": int(transformer), "bahdanau": int(once + tgt_len * (counter.get_total_flops() // 2))}


@alternatives.keep("a list of (m, k, n) products",
                   "every matrix product written out as a triple and summed; batch kept inside m")
def _alt_triples(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens,
                 tgt_vocab):
    B, S, T, d, H, e, h = batch, src_len, tgt_len, d_model, num_heads, embed_size, num_hiddens
    hd = d // H

    def attention(q, k):
        return [(B * q, d, d), (B * k, d, d), (B * k, d, d)] + [(q, hd, k)] * (B * H) + [(q, k, hd)] * (B * H) \
            + [(B * q, d, d)]

    products = []
    for _ in range(num_layers):
        products += attention(S, S) + [(B * S, d, d_ff), (B * S, d_ff, d)]
        products += attention(T, T) + attention(T, S) + [(B * T, d, d_ff), (B * T, d_ff, d)]
    products.append((B * T, d, tgt_vocab))
    transformer = sum(m * k * n for m, k, n in products)

    gru = [(B * S, e, 3 * h)] + [(B, h, 3 * h)] * S
    gru.append((B * S, h, h))                                     # W_k, once
    for _ in range(T):
        gru += [(B, h, h), (B * S, h, 1)] + [(1, S, h)] * B      # W_q, w_v, the context (one per sequence)
        gru += [(B, e + h, 3 * h), (B, h, 3 * h), (B, 2 * h, tgt_vocab)]
    return {"transformer": transformer, "bahdanau": sum(m * k * n for m, k, n in gru)}


@alternatives.keep("per token and per pair",
                   "grouped by what each cost scales with: weights per source and target token, "
                   "score pairs, vocabulary; int64 tensors, then int()")
def _alt_grouped(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens,
                 tgt_vocab):
    n = torch.tensor([batch, src_len, tgt_len, d_model, d_ff, num_layers, embed_size, num_hiddens, tgt_vocab],
                     dtype=torch.int64)
    B, S, T, d, f, N, e, h, V = n
    per_source_token = N * (4 * d * d + 2 * d * f) + N * 2 * d * d       # encoder block; memory -> K, V
    per_target_token = N * (4 * d * d + 2 * d * d + 2 * d * f) + d * V
    pairs = N * 2 * d * (S * S + T * T + T * S)
    transformer = B * (S * per_source_token + T * per_target_token + pairs)
    per_source_state = 3 * h * (e + h) + h * h
    per_target_step = h * h + 3 * h * (e + 2 * h) + 2 * h * V
    bahdanau = B * (S * per_source_state + T * per_target_step + 2 * T * S * h)
    return {"transformer": int(transformer), "bahdanau": int(bahdanau)}


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex7", title="Counting the work of one forward pass", name="forward_multiply_adds",
    reference=forward_multiply_adds, points=2,
    checks=[
        Check("the chapter's two models, batch 32, sources and targets of 32 tokens", _chapter_calls,
              hint=_HINT, compare=_compare_counts),
        Check("a source longer than its target (3 layers); a target longer than its source (1 layer)",
              _lengths_calls, hint=_HINT, compare=_compare_counts),
        Check("Vaswani et al.'s base sizes against a GRU of width 1024 (counts in the billions)", _large_calls,
              hint=_HINT, compare=_compare_counts),
        Check("random sizes (hidden)", _hidden_calls, public=False, hint=_HINT, compare=_compare_counts),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
