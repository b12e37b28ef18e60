r"""ch09_ex7: What one decoding step costs.

Account for one decoding step of a decoder-only model with grouped-query attention, without
running it. Write `decode_accounting(config, context_len, batch, bytes_per_value)`, where
`config` is a `dict` of Python `int`s with the keys `"num_layers"`, `"num_heads"` (query heads),
`"num_kv_heads"` (a divisor of `num_heads`) and `"head_dim"`; `context_len >= 0` is the number
of tokens each sequence already holds in the cache; `batch >= 1` sequences are decoded together;
and every key, value, query and attention output is stored with `bytes_per_value` bytes per
number. In the step, each sequence feeds one new token: in every layer its key and value are
appended to the cache, then each of its `num_heads` query heads attends over the
`context_len + 1` keys (the cached ones and its own) of its key/value head, as in exercise 5.

Return a `dict` with exactly these keys:

- `"cache_bytes"`: the bytes of the key–value cache of all layers and all sequences after the
  step;
- `"attention_flops"`: the floating-point operations of the step's attention in all layers and
  all sequences: the scores (each query against each of its keys) and the weighted sums of the
  values, for every query head, a multiply-add counting as 2 FLOPs. Leave out the softmax, the
  scaling and the projections;
- `"bytes_moved"`: the bytes the step's attention reads from memory and writes to it, in all
  layers and all sequences: every key and value of the cache after the step read once (a
  key/value head once, however many query heads share it), every query read once and every
  output written once (one vector of `head_dim` numbers per query head). Leave out the write of
  the new key and value into the cache;
- `"intensity"`: `attention_flops / bytes_moved`, the FLOPs per byte.

The first three are Python `int`s (a float, even a whole one, or a tensor does not count), the
last a Python `float`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import compare_types as _compare_types

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)

_KEYS = ("num_layers", "num_heads", "num_kv_heads", "head_dim")


# The reference ----------------------------------------------------------------------------


def decode_accounting(config, context_len, batch, bytes_per_value):
    """Cache bytes, attention FLOPs, bytes moved and FLOPs per byte of one decoding step."""
    layers, heads, kv_heads, head_dim = (config[key] for key in _KEYS)
    tokens = context_len + 1                                  # the cached ones and the new one
    cache_bytes = 2 * layers * batch * kv_heads * tokens * head_dim * bytes_per_value   # K and V
    # Per query head: scores (tokens dot products of head_dim) and the weighted sum (as many).
    attention_flops = 2 * (2 * layers * batch * heads * tokens * head_dim)
    queries_and_outputs = 2 * layers * batch * heads * head_dim * bytes_per_value
    bytes_moved = cache_bytes + queries_and_outputs
    return {"cache_bytes": cache_bytes, "attention_flops": attention_flops, "bytes_moved": bytes_moved,
            "intensity": attention_flops / bytes_moved}


# Inputs of the public and hidden checks ---------------------------------------------------


def _config(layers, heads, kv_heads, head_dim):
    return dict(zip(_KEYS, (layers, heads, kv_heads, head_dim)))


def _fixed_or_drawn(seed, public_seed, fixed, draw):
    """``fixed`` (tuples of arguments) at ``public_seed``; at any other seed, ``draw(g)`` from that
    seed's generator, drawn again for as long as it repeats the public case."""
    cases = fixed
    g = gen(seed)
    while seed != public_seed and cases == fixed:
        cases = draw(g)
    return [Call(args=(_config(*cfg), *rest)) for cfg, *rest in cases]


def _large_gqa(g):
    kv_heads, group = (1, 2, 4, 8)[randint(g, 0, 3)], randint(g, 2, 8)
    return randint(g, 16, 96), kv_heads * group, kv_heads, (64, 80, 128)[randint(g, 0, 2)]


def _llama70b_calls(seed):
    """Llama 2 70B with 8 sequences at 4,095 cached tokens (4,096 after the step), 16-bit numbers; at
    grading another large grouped-query model with its own batch and context."""
    return _fixed_or_drawn(seed, 0, [((80, 64, 8, 128), 4095, 8, 2)],
                           lambda g: [(_large_gqa(g), randint(g, 1000, 8191), randint(g, 1, 16), 2)])


def _llama7b_mistral_calls(seed):
    """Llama 2 7B (multi-head) and Mistral 7B (8 key/value heads for 32), one sequence each at 1,023
    cached tokens, in float32; at grading a drawn multi-head model and a drawn grouped one."""
    def draw(g):
        heads, context = randint(g, 8, 40), randint(g, 256, 4095)
        return [((randint(g, 12, 48), heads, heads, (64, 128)[randint(g, 0, 1)]), context, 1, 4),
                (_large_gqa(g), context, 1, 4)]
    return _fixed_or_drawn(seed, 1, [((32, 32, 32, 128), 1023, 1, 4), ((32, 32, 8, 128), 1023, 1, 4)], draw)


def _small_mqa_calls(seed):
    """A small multi-query model (one key/value head) of 3 sequences: the first step (an empty cache),
    then a step after 3 cached tokens, where the queries and outputs weigh as much as the cache."""
    def draw(g):
        cfg = (randint(g, 2, 4), randint(g, 2, 6), 1, 2 * randint(g, 2, 8))
        batch = randint(g, 2, 5)
        return [(cfg, 0, batch, 4), (cfg, randint(g, 1, 6), batch, 4)]
    return _fixed_or_drawn(seed, 2, [((2, 4, 1, 8), 0, 3, 4), ((2, 4, 1, 8), 3, 3, 4)], draw)


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(4):
        kv_heads = randint(g, 1, 8)
        cfg = _config(randint(g, 1, 48), kv_heads * randint(g, 1, 8), kv_heads, randint(g, 1, 256))
        calls.append(Call(args=(cfg, randint(g, 0, 10_000), randint(g, 1, 32), (1, 2, 4, 8)[randint(g, 0, 3)])))
    return calls


_HINT = ("this check compares the three counts exactly and the intensity to a relative 1e-9; the reason above "
         "names the first key that differs and the inputs. Count, per layer and per sequence, what the step "
         "keeps in the cache, what it computes for each query head, and what it reads and writes.")

_TYPE_HINT = ("this check reads the small model of the third check and compares its values first (the reason "
              "above says which one differs, if any); once they are right, each count must be a Python int and "
              "the intensity a Python float, as the contract says.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _accounting_variant(kv_factor=2, cache_heads="kv", layers_in_bytes=True, new_token=True, flop_factor=2,
                        flop_heads="query", queries_and_outputs=True, one_layer_intensity=False):
    def accounting(config, context_len, batch, bytes_per_value):
        layers, heads, kv_heads, head_dim = (config[key] for key in _KEYS)
        tokens = context_len + (1 if new_token else 0)
        byte_layers = layers if layers_in_bytes else 1
        cached_heads = kv_heads if cache_heads == "kv" else heads
        cache = kv_factor * byte_layers * batch * cached_heads * tokens * head_dim * bytes_per_value
        flops = flop_factor * 2 * layers * batch * (heads if flop_heads == "query" else kv_heads) * tokens * head_dim
        moved = cache + (2 * byte_layers * batch * heads * head_dim * bytes_per_value if queries_and_outputs else 0)
        return {"cache_bytes": cache, "attention_flops": flops, "bytes_moved": moved,
                "intensity": (flops // layers if one_layer_intensity else flops) / moved}
    return accounting


mistakes.add("keys only",
             "the cache and the bytes moved hold one vector per token and key/value head; every cached token "
             "keeps a value vector beside its key, and attention reads both.",
             _accounting_variant(kv_factor=1))
mistakes.add("one cached head per query head",
             "the cache was counted with num_heads heads per layer; grouped-query attention keeps only "
             "num_kv_heads key/value heads, each shared by a group of query heads, and the step reads each "
             "of them once.",
             _accounting_variant(cache_heads="query"))
mistakes.add("bytes of one layer",
             "cache_bytes and bytes_moved were counted for one layer; the model holds a cache in each of its "
             "num_layers layers, and the step reads each of them.",
             _accounting_variant(layers_in_bytes=False))
mistakes.add("one layer's FLOPs over every layer's bytes",
             "the three counts are right, but the intensity divides one layer's FLOPs by the bytes moved in all "
             "layers: numerator and denominator must cover the same layers.",
             _accounting_variant(one_layer_intensity=True))
mistakes.add("new token left out",
             "the step was counted over context_len tokens; after the new token's key and value are appended, "
             "the cache holds context_len + 1 tokens, and the new query attends to its own key too.",
             _accounting_variant(new_token=False))
mistakes.add("a multiply-add as one FLOP",
             "attention_flops counts each multiply-add once; the contract counts a multiply-add as 2 FLOPs "
             "(a multiplication and an addition).",
             _accounting_variant(flop_factor=1))
mistakes.add("FLOPs with num_kv_heads",
             "attention_flops was counted for num_kv_heads heads; sharing keys and values saves memory, not "
             "arithmetic: each of the num_heads query heads computes its own scores and weighted sum.",
             _accounting_variant(flop_heads="kv"))
mistakes.add("queries and outputs left out",
             "bytes_moved holds only the cache; the step also reads one query and writes one output per query "
             "head, which weighs most when the cache is short (the page's FLOPs per byte of decode attention "
             "leave them out).",
             _accounting_variant(queries_and_outputs=False))


@mistakes.keep("intensity from the long-context limit",
               "the three counts are right, but the intensity is the page's FLOPs per byte of decode attention "
               "over a long cache, which leaves out the queries and outputs; the contract's intensity divides "
               "the step's attention_flops by its bytes_moved.")
def _accounting_page_limit(config, context_len, batch, bytes_per_value):
    result = decode_accounting(config, context_len, batch, bytes_per_value)
    result["intensity"] = 2 * (config["num_heads"] // config["num_kv_heads"]) / bytes_per_value
    return result


@mistakes.keep("a count computed as a float",
               "your values are right, but attention_flops is a float: a true division (/) gives a float even "
               "where it divides evenly, and everything multiplied by it is a float too. The contract asks for "
               "Python ints (// divides ints into an int).")
def _accounting_float_group(config, context_len, batch, bytes_per_value):
    layers, heads, kv_heads, head_dim = (config[key] for key in _KEYS)
    group = heads / kv_heads
    result = decode_accounting(config, context_len, batch, bytes_per_value)
    result["attention_flops"] = 4 * layers * batch * kv_heads * group * (context_len + 1) * head_dim
    return result


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("loops over layers and heads", "every layer, sequence and head counted in nested loops")
def _accounting_alt_loops(config, context_len, batch, bytes_per_value):
    cache = flops = traffic = 0
    group = config["num_heads"] // config["num_kv_heads"]
    for _layer in range(config["num_layers"]):
        for _sequence in range(batch):
            for _kv_head in range(config["num_kv_heads"]):
                kv = 2 * (context_len + 1) * config["head_dim"] * bytes_per_value
                cache += kv
                traffic += kv
                for _query_head in range(group):
                    flops += 2 * (context_len + 1) * config["head_dim"]       # q . k for every key
                    flops += 2 * (context_len + 1) * config["head_dim"]       # weights times values
                    traffic += 2 * config["head_dim"] * bytes_per_value       # read q, write o
    return {"cache_bytes": cache, "attention_flops": flops, "bytes_moved": traffic, "intensity": flops / traffic}


@dataclass(frozen=True)
class _Model:
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    def kv_numbers_per_token(self):
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    def flops_per_key(self):
        return 4 * self.num_layers * self.num_heads * self.head_dim

    def query_and_output_numbers(self):
        return 2 * self.num_layers * self.num_heads * self.head_dim


@alternatives.keep("a dataclass of the model", "a frozen dataclass built from the config, with per-token methods")
def _accounting_alt_dataclass(config, context_len, batch, bytes_per_value):
    model = _Model(**config)
    keys = batch * (context_len + 1)
    counts = {"cache_bytes": model.kv_numbers_per_token() * keys * bytes_per_value,
              "attention_flops": model.flops_per_key() * keys}
    counts["bytes_moved"] = counts["cache_bytes"] + batch * model.query_and_output_numbers() * bytes_per_value
    counts["intensity"] = float(Fraction(counts["attention_flops"], counts["bytes_moved"]))
    return counts


@alternatives.keep("formula first", "math.prod of the factors, the intensity from its closed form in float64")
def _accounting_alt_formula(config, context_len, batch, bytes_per_value):
    n, h, g = context_len + 1, config["num_heads"], config["num_kv_heads"]
    common = math.prod((config["num_layers"], batch, config["head_dim"], bytes_per_value))
    cache = 2 * g * n * common
    moved = cache + 2 * h * common
    flops = 4 * h * n * math.prod((config["num_layers"], batch, config["head_dim"]))
    # n, layers, batch and head_dim cancel but for the new token's share of queries and outputs.
    intensity = 2.0 * h * n / (bytes_per_value * (g * n + h))
    return {"intensity": intensity, "bytes_moved": int(moved), "cache_bytes": int(cache), "attention_flops": flops}


@alternatives.keep("tensor shapes on the meta device",
                   "the cache, queries and outputs built as meta tensors (no memory); bytes from numel")
def _accounting_alt_meta(config, context_len, batch, bytes_per_value):
    layers, heads, kv_heads, head_dim = (config[key] for key in _KEYS)
    with torch.device("meta"):
        k_cache = torch.empty(layers, batch, kv_heads, context_len + 1, head_dim)
        queries = torch.empty(layers, batch, heads, 1, head_dim)
    per_layer_keys = k_cache[0]
    wide = per_layer_keys.repeat_interleave(heads // kv_heads, dim=1)     # what each query head sees
    scores = wide.shape[0] * wide.shape[1] * wide.shape[2] * head_dim     # (batch, heads, 1, n) entries x d
    flops = layers * 2 * (2 * scores)
    cache = 2 * k_cache.numel() * bytes_per_value
    moved = cache + 2 * queries.numel() * bytes_per_value
    return {"cache_bytes": cache, "attention_flops": flops, "bytes_moved": moved, "intensity": flops / moved}


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex7", title="What one decoding step costs",
    name="decode_accounting", reference=decode_accounting, points=2,
    checks=[
        Check("Llama 2 70B (80 layers, 64 query heads, 8 key/value heads of 128): 8 sequences at 4,095 "
              "cached tokens, 2 bytes per number", _llama70b_calls, seed=0, hint=_HINT, rtol=1e-9, atol=0.0),
        Check("Llama 2 7B (multi-head) and Mistral 7B (grouped), one sequence at 1,023 cached tokens, "
              "4 bytes per number", _llama7b_mistral_calls, seed=1, hint=_HINT, rtol=1e-9, atol=0.0),
        Check("a small multi-query model, 3 sequences: an empty cache, then 3 cached tokens",
              _small_mqa_calls, seed=2, hint=_HINT, rtol=1e-9, atol=0.0),
        Check("every count is a Python int and the intensity a float (the small model)", _small_mqa_calls,
              seed=2, hint=_TYPE_HINT, compare=_compare_types, weight=0.25),
        Check("random models, contexts, batches and sizes of a number (hidden)", _hidden_calls, seed=3,
              public=False, hint=_HINT, rtol=1e-9, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
