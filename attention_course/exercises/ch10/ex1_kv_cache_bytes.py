r"""ch10_ex1: The bytes of a key–value cache, model by model.

Count the bytes of a decoder's key–value cache without building it. Write
`kv_cache_bytes(config, context_len, bytes_per_number)`. `config` is a `dict`:
`config["attention"]` is `"mha"`, `"gqa"` or `"mla"`; `"num_layers"`, `"num_heads"` (query heads)
and `"head_dim"` are always there; a `"gqa"` model also has `"num_kv_heads"`, and an `"mla"` model
has `"kv_latent_dim"` and `"rope_dim"` (multi-head latent attention caches, per token and layer,
the latent of `kv_latent_dim` numbers and the shared RoPE key of `rope_dim` numbers, nothing else).
`config["window"]` is `None` (every layer attends to the whole context) or an `int >= 1`; then
`config["window_layers"]` of the layers (between 0 and `num_layers`) are sliding-window layers,
whose ring-buffer cache keeps only the last `window` tokens, and the other layers keep every token.
The cache holds the keys and values of `context_len >= 0` tokens of one sequence, each number
stored in `bytes_per_number` bytes. Return the bytes of the whole cache (all layers) as a Python
`int` (a NumPy integer counts as one; a float, even a whole one, or a tensor does not).
"""
from __future__ import annotations

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def kv_cache_bytes(config, context_len, bytes_per_number):
    """Bytes of the key-value cache of one sequence of context_len tokens, all layers."""
    kind = config["attention"]
    if kind == "mla":
        per_token = config["kv_latent_dim"] + config["rope_dim"]          # latent + shared RoPE key
    else:
        kv_heads = config["num_kv_heads"] if kind == "gqa" else config["num_heads"]
        per_token = 2 * kv_heads * config["head_dim"]                     # a key and a value per head
    layers, window = config["num_layers"], config["window"]
    windowed = 0 if window is None else config["window_layers"]
    tokens = (layers - windowed) * context_len + windowed * min(context_len, window or 0)
    return per_token * tokens * bytes_per_number


# Inputs of the public and hidden checks ---------------------------------------------------


def _mha(layers, heads, head_dim, window=None, window_layers=0):
    return {"attention": "mha", "num_layers": layers, "num_heads": heads, "head_dim": head_dim,
            "window": window, "window_layers": window_layers}


def _gqa(layers, heads, kv_heads, head_dim, window=None, window_layers=0):
    return dict(_mha(layers, heads, head_dim, window, window_layers), attention="gqa", num_kv_heads=kv_heads)


def _mla(layers, heads, head_dim, latent, rope, window=None, window_layers=0):
    return dict(_mha(layers, heads, head_dim, window, window_layers), attention="mla",
                kv_latent_dim=latent, rope_dim=rope)


def _drawn_gqa(g, window=None, window_layers=0):
    kv_heads = randint(g, 1, 8)
    return _gqa(randint(g, 4, 64), kv_heads * randint(g, 2, 8), kv_heads, 16 * randint(g, 2, 16),
                window, window_layers)


def _drawn_mla(g):
    return _mla(randint(g, 4, 64), randint(g, 8, 128), 16 * randint(g, 4, 8), 64 * randint(g, 2, 8),
                16 * randint(g, 1, 4))


def _named_models_calls(seed):
    """Llama 2 7B (multi-head) at 4,096 tokens, Llama 3 8B (grouped) at 8,192, DeepSeek-V2 (latent)
    at 32,768, 2 bytes per number; at grading a drawn model of each kind."""
    public = [(_mha(32, 32, 128), 4096, 2), (_gqa(32, 32, 8, 128), 8192, 2),
              (_mla(60, 128, 128, 512, 64), 32768, 2)]

    def draw(g):
        return [(_mha(randint(g, 4, 48), randint(g, 4, 40), 64 * randint(g, 1, 2)), randint(g, 100, 9000), 2),
                (_drawn_gqa(g), randint(g, 100, 9000), (2, 4)[randint(g, 0, 1)]),
                (_drawn_mla(g), randint(g, 100, 40000), 2)]
    return [Call(args=case) for case in public_or_drawn(seed, 0, public, draw)]


def _window_calls(seed):
    """Mistral 7B v0.1 (a 4,096 window in all 32 layers) at 16,384 tokens, and Gemma 2 9B (a 4,096
    window in 21 of its 42 layers) at 8,192 and at 1,000 tokens; at grading drawn mixes."""
    gemma = _gqa(42, 16, 8, 256, 4096, 21)
    public = [(_gqa(32, 32, 8, 128, 4096, 32), 16384, 2), (gemma, 8192, 2), (gemma, 1000, 2)]

    def draw(g):
        window = 128 * randint(g, 1, 32)
        layers = 2 * randint(g, 4, 24)
        mixed = dict(_drawn_gqa(g, window, layers // 2), num_layers=layers)
        return [(_drawn_gqa(g, window, None), window * randint(g, 2, 6) + randint(g, 1, 99), 2),
                (mixed, window * randint(g, 2, 5) + randint(g, 0, 99), 2),
                (mixed, randint(g, 1, window - 1), 4)]
    cases = public_or_drawn(seed, 1, public, draw)
    for config, _, _ in cases:                      # every layer windowed where the draw left None
        if config["window_layers"] is None:
            config["window_layers"] = config["num_layers"]
    return [Call(args=case) for case in cases]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(6):
        kind = randint(g, 0, 2)
        config = (_mha(randint(g, 1, 64), randint(g, 1, 64), randint(g, 1, 256)) if kind == 0 else
                  _drawn_gqa(g) if kind == 1 else _drawn_mla(g))
        if randint(g, 0, 1):
            config["window"], config["window_layers"] = randint(g, 1, 8192), randint(g, 1, config["num_layers"])
        calls.append(Call(args=(config, randint(g, 0, 50000), (1, 2, 4)[randint(g, 0, 2)])))
    kinds = [_mha(8, 8, 64), _gqa(8, 8, 2, 64, 512, 4), _mla(8, 16, 64, 256, 32, 512, 8)]
    return calls + [Call(args=(config, randint(g, 600, 5000), 2)) for config in kinds]


def _compare_int(got, want, calls):
    """Only the type of each result: a Python int (its value is the other checks' business). A NumPy
    integer counts as one: the call's outcome records it as the Python int it equals exactly."""
    for i, (mine, call) in enumerate(zip(got, calls)):
        if mine.get("status") != "ok":
            return f"call {i + 1} of {len(calls)} raised {mine.get('error_type')}: {mine.get('message')}"[:300]
        if type(mine["value"]) is not int:
            value = mine["value"]
            shown = (f"a tensor of shape {tuple(value.shape)}" if hasattr(value, "shape")
                     else f"{type(value).__name__} {value!r}"[:60])
            return f"call {i + 1} of {len(calls)} returned {shown}; the contract asks for a Python int " \
                   f"(a NumPy integer counts as one)"
    return None


_TYPE_HINT = ("this check reads only the type of each result: the contract asks for a Python int (a NumPy "
              "integer counts as one; a float, even a whole one, or a tensor does not), the way bytes are counted.")

_HINT = ("this check compares the integer exactly, call by call (the reason says which call). Count, for one layer, "
         "the numbers the cache keeps per token, then the tokens each layer keeps.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _cache_variant(kv_factor=2, gqa_heads="num_kv_heads", mla="latent+rope", windows="as configured"):
    def cache_bytes(config, context_len, bytes_per_number):
        kind = config["attention"]
        if kind == "mla":
            per_token = {"latent+rope": config["kv_latent_dim"] + config["rope_dim"],
                         "latent": config["kv_latent_dim"],
                         "up-projected": 2 * config["num_heads"] * config["head_dim"]}[mla]
        else:
            heads = config[gqa_heads] if kind == "gqa" else config["num_heads"]
            per_token = kv_factor * heads * config["head_dim"]
        layers, window = config["num_layers"], config["window"]
        windowed = {"as configured": 0 if window is None else config["window_layers"],
                    "none": 0, "all": 0 if window is None else layers}[windows]
        tokens = (layers - windowed) * context_len + windowed * min(context_len, window or 0)
        return per_token * tokens * bytes_per_number
    return cache_bytes


mistakes.add("keys only",
             "the per-token count of a multi-head or grouped layer covers one tensor; the cache keeps a key and "
             "a value for every token and key/value head.",
             _cache_variant(kv_factor=1))
mistakes.add("query heads in a grouped cache",
             "a grouped-query layer was counted with num_heads cached heads; its cache holds only the "
             "num_kv_heads key/value heads that the query heads share.",
             _cache_variant(gqa_heads="num_heads"))
mistakes.add("latent attention counted up-projected",
             "a latent-attention layer was counted with the per-head keys and values it computes; what it "
             "caches is the latent and the shared RoPE key, from which those are rebuilt.",
             _cache_variant(mla="up-projected"))
mistakes.add("latent without its RoPE key",
             "a latent-attention layer was counted with the latent alone; the decoupled RoPE key of each "
             "token is cached beside it (it cannot be rebuilt from the latent).",
             _cache_variant(mla="latent"))
mistakes.add("window ignored",
             "the sliding-window layers were counted as if they kept the whole context; a window layer's "
             "ring buffer keeps at most window tokens.",
             _cache_variant(windows="none"))
mistakes.add("every layer windowed",
             "every layer was counted with the window; only window_layers of the layers slide, the others "
             "keep the whole context.",
             _cache_variant(windows="all"))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("a loop over layers", "layer by layer, each layer's tokens and numbers per token")
def _cache_alt_loop(config, context_len, bytes_per_number):
    total = 0
    for layer in range(config["num_layers"]):
        slides = config["window"] is not None and layer < config["window_layers"]
        kept = min(context_len, config["window"]) if slides else context_len
        if config["attention"] == "mla":
            total += kept * (config["kv_latent_dim"] + config["rope_dim"]) * bytes_per_number
        else:
            heads = config.get("num_kv_heads", config["num_heads"]) if config["attention"] == "gqa" \
                else config["num_heads"]
            total += 2 * kept * heads * config["head_dim"] * bytes_per_number
    return total


@alternatives.keep("bits, then bytes", "counts bits per token as in a hardware sheet, divides by 8 at the end")
def _cache_alt_bits(config, context_len, bytes_per_number):
    bits = 8 * bytes_per_number
    shapes = {"mha": lambda c: (2, c["num_heads"], c["head_dim"]),
              "gqa": lambda c: (2, c["num_kv_heads"], c["head_dim"]),
              "mla": lambda c: (1, 1, c["kv_latent_dim"] + c["rope_dim"])}
    a, b, c = shapes[config["attention"]](config)
    window = config["window"]
    short = config["window_layers"] if window is not None else 0
    token_layers = short * min(window or 0, context_len) + (config["num_layers"] - short) * context_len
    return (a * b * c * bits * token_layers) // 8


@alternatives.keep("a cache of meta tensors", "the caches built on the meta device; bytes from nbytes")
def _cache_alt_meta(config, context_len, bytes_per_number):
    import torch
    dtype = {1: torch.int8, 2: torch.float16, 4: torch.float32}[bytes_per_number]
    total = 0
    for layer in range(config["num_layers"]):
        n = context_len
        if config["window"] is not None and layer >= config["num_layers"] - config["window_layers"]:
            n = min(n, config["window"])                      # the last layers slide here: same count
        if config["attention"] == "mla":
            parts = [torch.empty(n, config["kv_latent_dim"], dtype=dtype, device="meta"),
                     torch.empty(n, config["rope_dim"], dtype=dtype, device="meta")]
        else:
            heads = config["num_kv_heads"] if config["attention"] == "gqa" else config["num_heads"]
            parts = [torch.empty(heads, n, config["head_dim"], dtype=dtype, device="meta") for _ in "kv"]
        total += sum(p.nbytes for p in parts)
    return int(total)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex1", title="The bytes of a key–value cache, model by model",
    name="kv_cache_bytes", reference=kv_cache_bytes, points=2,
    checks=[
        Check("Llama 2 7B, Llama 3 8B and DeepSeek-V2, 2 bytes per number", _named_models_calls, seed=0,
              hint=_HINT, rtol=0.0, atol=0.0),
        Check("sliding windows: Mistral 7B in every layer, Gemma 2 9B in half of them (a context longer "
              "and one shorter than the window)", _window_calls, seed=1, hint=_HINT, rtol=0.0, atol=0.0),
        Check("the count is a Python int (the named models)", _named_models_calls, seed=0, hint=_TYPE_HINT,
              compare=_compare_int, weight=0.25),
        Check("random models, windows, contexts and sizes of a number (hidden)", _hidden_calls, seed=2,
              public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
