r"""ch10_ex5: One decoding step of multi-head latent attention.

Write `mla_decode_step(x_new, latent_cache, rope_cache, weights)`, one decoding step of multi-head
latent attention whose cache holds only the latents and the shared RoPE keys. `x_new` is a float32
tensor of shape `(batch, d_model)`, the hidden state of the new token; `latent_cache`
`(batch, tokens, kv_latent_dim)` and `rope_cache` `(batch, tokens, rope_dim)` hold what the
`tokens >= 0` earlier tokens cached, so the new token sits at position `tokens`. `weights` is a
`dict` of float32 tensors: `"w_dkv"` `(d_model, kv_latent_dim)`, `"w_kr"` `(d_model, rope_dim)`,
`"w_q"` `(num_heads, d_model, head_dim)`, `"w_qr"` `(num_heads, d_model, rope_dim)`, `"w_uk"` and
`"w_uv"` `(num_heads, kv_latent_dim, head_dim)`. The new token caches its latent
`c = x_new @ w_dkv` and its RoPE key `rope(x_new @ w_kr)`, rotated at its position; `rope` rotates
columns `2i` and `2i + 1` (`i < rope_dim / 2`) by the angle `position * 10000 ** (-2 i / rope_dim)`.
Head `h` of the new token scores the token at position `j` (the new one included) by
`(q_h · k_hj + r_h · rope_cache[j]) / sqrt(head_dim + rope_dim)`, where `q_h = x_new @ w_q[h]`,
`r_h = rope(x_new @ w_qr[h])` at the new token's position, and `k_hj = latent_cache[j] @ w_uk[h]`;
its output is the softmax-weighted sum over the positions of `latent_cache[j] @ w_uv[h]`. Return
the tuple `(context, latent_cache, rope_cache)`: the outputs of shape `(batch, num_heads, head_dim)`
and the two caches with the new token appended, all float32.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _rotate(x, position, layout="pairs"):
    """RoPE at one position on the last axis (even size); pairs (2i, 2i+1), or halves (i, i + d/2)."""
    half = x.shape[-1] // 2
    angle = position * 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    first, second = (x[..., 0::2], x[..., 1::2]) if layout == "pairs" else (x[..., :half], x[..., half:])
    turned = (first * cos - second * sin, first * sin + second * cos)
    if layout == "pairs":
        return torch.stack(turned, dim=-1).flatten(-2)
    return torch.cat(turned, dim=-1)


def mla_decode_step(x_new, latent_cache, rope_cache, weights):
    """Absorbed MLA decode: queries moved into the latent space, values read from the latents."""
    position = latent_cache.shape[1]
    latent_cache = torch.cat([latent_cache, (x_new @ weights["w_dkv"]).unsqueeze(1)], dim=1)
    rope_cache = torch.cat([rope_cache, _rotate(x_new @ weights["w_kr"], position).unsqueeze(1)], dim=1)
    queries = torch.einsum("bm,hmd->bhd", x_new, weights["w_q"])
    rope_queries = _rotate(torch.einsum("bm,hmr->bhr", x_new, weights["w_qr"]), position)
    latent_queries = torch.einsum("bhd,hld->bhl", queries, weights["w_uk"])        # q_h w_uk[h]^T
    scores = (torch.einsum("bhl,btl->bht", latent_queries, latent_cache)
              + torch.einsum("bhr,btr->bht", rope_queries, rope_cache))
    attn = torch.softmax(scores / math.sqrt(weights["w_q"].shape[-1] + rope_cache.shape[-1]), dim=-1)
    read = torch.einsum("bht,btl->bhl", attn, latent_cache)                        # weighted latents
    return torch.einsum("bhl,hld->bhd", read, weights["w_uv"]), latent_cache, rope_cache


# Inputs of the public and hidden checks ---------------------------------------------------


def _case(g, batch, tokens, d_model, num_heads, head_dim, kv_latent_dim, rope_dim):
    scale = d_model ** -0.5
    weights = {"w_dkv": scale * torch.randn(d_model, kv_latent_dim, generator=g),
               "w_kr": scale * torch.randn(d_model, rope_dim, generator=g),
               "w_q": scale * torch.randn(num_heads, d_model, head_dim, generator=g),
               "w_qr": scale * torch.randn(num_heads, d_model, rope_dim, generator=g),
               "w_uk": torch.randn(num_heads, kv_latent_dim, head_dim, generator=g) / math.sqrt(kv_latent_dim),
               "w_uv": torch.randn(num_heads, kv_latent_dim, head_dim, generator=g) / math.sqrt(kv_latent_dim)}
    latent = torch.randn(batch, tokens, kv_latent_dim, generator=g)
    rope = torch.randn(batch, tokens, rope_dim, generator=g)
    return Call(args=(2 * torch.randn(batch, d_model, generator=g), latent, rope, weights))


def _first_token_calls(seed):
    """The first token (an empty cache), then a cache of 3 tokens; one sequence, 2 heads."""
    g = gen(seed)
    rope_dim = 2 * randint(g, 2, 3)
    return [_case(g, 1, tokens, 8, 2, 4, 6, rope_dim) for tokens in (0, 3)]


def _longer_calls(seed):
    """A cache of 20 to 40 tokens, 3 sequences, 4 heads, a latent wider than a head."""
    g = gen(seed)
    return [_case(g, 3, randint(g, 20, 40), 16, 4, 4, 10, 4)]


def _hidden_calls(seed):
    g = gen(seed)
    return [_case(g, randint(g, 1, 3), randint(g, 1, 30), randint(g, 4, 16), randint(g, 1, 4),
                  randint(g, 1, 8), randint(g, 2, 12), 2 * randint(g, 1, 4)) for _ in range(3)]


_HINT = ("this check compares the output and both caches after the step; the reason says which of them "
         "differs and by how much.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _step_variant(scale="both", rotate_key=True, offset=0, layout="pairs"):
    def step(x_new, latent_cache, rope_cache, weights):
        position = latent_cache.shape[1] + offset
        kr = x_new @ weights["w_kr"]
        latent_cache = torch.cat([latent_cache, (x_new @ weights["w_dkv"]).unsqueeze(1)], dim=1)
        rope_cache = torch.cat([rope_cache, (_rotate(kr, position, layout) if rotate_key else kr).unsqueeze(1)], 1)
        keys = torch.einsum("btl,hld->bhtd", latent_cache, weights["w_uk"])
        values = torch.einsum("btl,hld->bhtd", latent_cache, weights["w_uv"])
        q = torch.einsum("bm,hmd->bhd", x_new, weights["w_q"])
        r = _rotate(torch.einsum("bm,hmr->bhr", x_new, weights["w_qr"]), position, layout)
        scores = torch.einsum("bhd,bhtd->bht", q, keys) + torch.einsum("bhr,btr->bht", r, rope_cache)
        size = q.shape[-1] + (r.shape[-1] if scale == "both" else 0)
        return torch.einsum("bht,bhtd->bhd", torch.softmax(scores / math.sqrt(size), -1), values), \
            latent_cache, rope_cache
    return step


mistakes.add("scaled by head_dim alone",
             "the scores were divided by the square root of head_dim; each score is a dot product over "
             "head_dim + rope_dim numbers (the latent part and the RoPE part together).",
             _step_variant(scale="head"))
mistakes.add("new RoPE key cached unrotated",
             "the new token's RoPE key went into the cache before its rotation; the cache holds keys already "
             "rotated at their own positions, since only the query is rotated at decode time.",
             _step_variant(rotate_key=False))
mistakes.add("rotated one position too far",
             "the new token was rotated at position tokens + 1; with tokens earlier tokens at positions 0 to "
             "tokens - 1, the new one sits at position tokens.",
             _step_variant(offset=1))
mistakes.add("RoPE on halves instead of pairs",
             "the rotation paired column i with column i + rope_dim / 2 (the split-halves layout); the "
             "contract pairs columns 2i and 2i + 1.",
             _step_variant(layout="halves"))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("keys and values up-projected", "every cached token's keys and values rebuilt per head, in float64")
def _mla_alt_up_projected(x_new, latent_cache, rope_cache, weights):
    w = {name: value.double() for name, value in weights.items()}
    context, latent_cache, rope_cache = _step_variant()(x_new.double(), latent_cache.double(),
                                                        rope_cache.double(), w)
    return context.float(), latent_cache.float(), rope_cache.float()


@alternatives.keep("complex rotation, loops over heads",
                   "RoPE as multiplication by complex numbers; one head at a time, absorbed weights")
def _mla_alt_complex(x_new, latent_cache, rope_cache, weights):
    position = latent_cache.shape[1]

    def rope(x):
        pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
        freq = 10000.0 ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
        turned = pairs * torch.polar(torch.ones_like(freq), position * freq)
        return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)

    c_all = torch.cat([latent_cache, (x_new @ weights["w_dkv"])[:, None]], 1)
    kr_all = torch.cat([rope_cache, rope(x_new @ weights["w_kr"])[:, None]], 1)
    denominator = math.sqrt(weights["w_uk"].shape[-1] + kr_all.shape[-1])
    heads = []
    for h in range(weights["w_q"].shape[0]):
        absorbed = weights["w_q"][h] @ weights["w_uk"][h].T                    # (d_model, kv_latent_dim)
        s = (c_all @ (x_new @ absorbed).unsqueeze(-1)).squeeze(-1)
        s = s + (kr_all @ rope(x_new @ weights["w_qr"][h]).unsqueeze(-1)).squeeze(-1)
        p = torch.softmax(s / denominator, dim=-1)
        heads.append((p.unsqueeze(1) @ c_all).squeeze(1) @ weights["w_uv"][h])
    return torch.stack(heads, 1), c_all, kr_all


@alternatives.keep("one concatenated key", "latent query and RoPE query concatenated, scored against [latent, RoPE key] at once")
def _mla_alt_concat(x_new, latent_cache, rope_cache, weights):
    n = latent_cache.shape[1]
    c_new = torch.matmul(x_new, weights["w_dkv"])
    angle = n * torch.pow(10000.0, -torch.arange(0, rope_cache.shape[-1], 2).double() / rope_cache.shape[-1])
    rot = torch.stack([torch.cos(angle), -torch.sin(angle), torch.sin(angle), torch.cos(angle)], -1)
    rot = rot.reshape(-1, 2, 2).float()                                          # one 2x2 matrix per pair

    def rope(x):
        return torch.einsum("pij,...pj->...pi", rot, x.unflatten(-1, (-1, 2))).flatten(-2)

    latent_cache = torch.cat([latent_cache, c_new[:, None, :]], dim=1)
    rope_cache = torch.cat([rope_cache, rope(x_new @ weights["w_kr"])[:, None, :]], dim=1)
    q_lat = torch.einsum("bm,hmd,hld->bhl", x_new, weights["w_q"], weights["w_uk"])
    q_rope = rope(torch.einsum("bm,hmr->bhr", x_new, weights["w_qr"]))
    query = torch.cat([q_lat, q_rope], -1)
    key = torch.cat([latent_cache, rope_cache], -1)
    scores = query @ key.transpose(1, 2) / (weights["w_uk"].shape[-1] + rope_cache.shape[-1]) ** 0.5
    return torch.einsum("bht,btl,hld->bhd", scores.softmax(-1), latent_cache, weights["w_uv"]), \
        latent_cache, rope_cache


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex5", title="One decoding step of multi-head latent attention",
    name="mla_decode_step", reference=mla_decode_step, points=3,
    checks=[
        Check("the first token (an empty cache), then a cache of 3 tokens", _first_token_calls, seed=0, hint=_HINT),
        Check("a longer cache, 3 sequences, 4 heads", _longer_calls, seed=1, hint=_HINT),
        Check("random sizes (hidden)", _hidden_calls, seed=2, public=False, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
