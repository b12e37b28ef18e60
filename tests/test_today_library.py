"""Chapter 10's library (attention as today's models run it), tested against hand-worked cases, known
facts and brute-force loops written here, independently of the code under test:

* ``rope_scaling``: RoPE's frequencies and rotation; position interpolation, NTK-aware, YaRN and
  Llama 3 scaling against their published rules, written per pair in plain Python;
* ``windowed``: the sliding-window mask by hand; ring-buffer decoding (with and without sinks) over a
  sequence several windows long against a loop over the keys each query may see;
* ``linear_attention``: the delta rule's recurrent, parallel and chunked forms, gated and ungated,
  against a loop with the explicit matrix update, and scalar cases worked by hand;
* ``latent`` and ``grouped``: MLA's decode (plain and absorbed) against its full pass and against a
  per-head loop; GQA against key heads repeated and PyTorch's SDPA; cache sizes of published shapes;
* ``score_mods``: ALiBi slopes, soft-capping, document masks, and FlexAttention (eager) on the CPU.
"""
from __future__ import annotations

import math

import pytest
import torch

from attention_course import grouped, latent
from attention_course import linear_attention as la
from attention_course import rope_scaling as rs
from attention_course import score_mods as sm
from attention_course import windowed as win

F64 = torch.float64


def _rope_complex(x, positions, inv_freq):
    """RoPE written with complex numbers: pair i of token t times exp(1j * positions[t] * inv_freq[i])."""
    pairs = torch.view_as_complex(x.to(F64).reshape(*x.shape[:-1], -1, 2).contiguous())
    angles = positions.to(F64)[:, None] * inv_freq.to(F64)[None, :]
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape).to(x.dtype)


# ------------------------------------------------------------------------------------------- RoPE scaling

def test_inverse_frequencies_by_hand():
    assert torch.allclose(rs.rope_inverse_frequencies(8), torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=F64),
                          rtol=1e-12, atol=0)
    assert rs.rope_inverse_frequencies(8).dtype == F64
    with pytest.raises(ValueError, match="head_dim"):
        rs.rope_inverse_frequencies(7)


def test_apply_rope_quarter_turn_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])                    # two tokens, one pair
    out = rs.apply_rope(x, torch.tensor([1, 1]), torch.tensor([math.pi / 2], dtype=F64))
    assert torch.allclose(out, torch.tensor([[0.0, 1.0], [-1.0, 0.0]]), atol=1e-7)


def test_apply_rope_matches_complex_rotation_and_depends_on_offsets_only():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 16, generator=g, dtype=F64)
    inv = rs.rope_inverse_frequencies(16)
    pos = torch.arange(7) * 5 + 3
    assert torch.allclose(rs.apply_rope(x, pos, inv), _rope_complex(x, pos, inv), atol=1e-12)
    q, k = torch.randn(1, 16, generator=g, dtype=F64), torch.randn(1, 16, generator=g, dtype=F64)
    scores = [(rs.apply_rope(q, torch.tensor([m]), inv) * rs.apply_rope(k, torch.tensor([m + 4]), inv)).sum()
              for m in (0, 11, 250)]
    assert torch.allclose(torch.stack(scores), scores[0].expand(3), atol=1e-10)


def test_position_interpolation_maps_position_p_to_p_over_s():
    inv = rs.rope_inverse_frequencies(64)
    for s in (2.0, 4.0, 8.0):
        pos = torch.arange(0, 4096, 37)
        assert torch.allclose(rs.rope_angles(pos, rs.position_interpolation(inv, s)), rs.rope_angles(pos / s, inv),
                              rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="scale"):
        rs.position_interpolation(inv, 0.5)


def test_ntk_aware_is_the_frequencies_of_a_larger_base():
    d, base, s = 128, 10000.0, 4.0
    new_base = base * s ** (d / (d - 2))
    expected = torch.tensor([new_base ** (-2 * i / d) for i in range(d // 2)], dtype=F64)
    got = rs.ntk_aware(rs.rope_inverse_frequencies(d, base), s)
    assert torch.allclose(got, expected, rtol=1e-10, atol=0)
    inv = rs.rope_inverse_frequencies(d, base)
    assert got[0] == inv[0] and math.isclose(got[-1].item(), inv[-1].item() / s, rel_tol=1e-12)


def _ramp_by_hand(inv, scale, context, low, high):
    """The by-parts rule per pair, in wavelengths (YaRN's paper; Llama 3.1's published code)."""
    out = []
    for theta in inv.tolist():
        wavelength = 2 * math.pi / theta
        turns = context / wavelength
        if turns < low:
            out.append(theta / scale)
        elif turns > high:
            out.append(theta)
        else:
            blend = (turns - low) / (high - low)
            out.append((1 - blend) * theta / scale + blend * theta)
    return torch.tensor(out, dtype=F64)


def test_yarn_follows_the_by_parts_rule_pair_by_pair():
    inv = rs.rope_inverse_frequencies(128, 10000.0)
    got = rs.yarn(inv, 16.0, 4096)
    assert torch.allclose(got, _ramp_by_hand(inv, 16.0, 4096, 1.0, 32.0), rtol=1e-12, atol=0)
    assert got[0] == inv[0]                                     # the fastest pair: many turns, kept
    assert math.isclose(got[-1].item(), inv[-1].item() / 16, rel_tol=1e-12)  # the slowest: interpolated
    blended = (got != inv) & ~torch.isclose(got, inv / 16, rtol=1e-12, atol=0)
    assert 0 < blended.sum() < 64                               # some pairs are on the ramp
    assert math.isclose(rs.yarn_attention_scale(16.0), 0.1 * math.log(16) + 1, rel_tol=1e-12)
    assert rs.yarn_attention_scale(1.0) == 1.0


def test_llama3_scaling_against_its_published_rule():
    # Llama 3.1: rope_theta 500000, head_dim 128, factor 8, low_freq_factor 1, high_freq_factor 4, 8192 tokens
    inv = rs.rope_inverse_frequencies(128, 500000.0)
    got = rs.llama3(inv)
    assert torch.allclose(got, _ramp_by_hand(inv, 8.0, 8192, 1.0, 4.0), rtol=1e-12, atol=0)
    wavelength = 2 * math.pi / inv
    assert torch.equal(got[wavelength < 8192 / 4], inv[wavelength < 8192 / 4])
    assert torch.allclose(got[wavelength > 8192], inv[wavelength > 8192] / 8, rtol=1e-12, atol=0)


# ------------------------------------------------------------------------------------------- windows

def test_sliding_window_mask_by_hand():
    expected = torch.tensor([[0, 1, 1, 1, 1],
                             [0, 0, 1, 1, 1],
                             [1, 0, 0, 1, 1],
                             [1, 1, 0, 0, 1],
                             [1, 1, 1, 0, 0]], dtype=torch.bool)          # True = masked, window 2
    assert torch.equal(win.sliding_window_mask(5, 2), expected)
    with_sink = expected.clone()
    with_sink[2:, 0] = False                                             # key 0 stays visible as a sink
    assert torch.equal(win.sliding_window_mask(5, 2, num_sinks=1), with_sink)
    assert torch.equal(win.sliding_window_mask(4, None), torch.ones(4, 4, dtype=torch.bool).triu(1))


def test_window_mask_mod_and_window_mask_agree():
    allowed = ~sm.mask_from_mask_mod(sm.sliding_window_mask_mod(3), 1, 1, 9, 9)[0, 0]
    assert torch.equal(allowed, ~win.sliding_window_mask(9, 3))


def _visible(i, window, num_sinks):
    return [j for j in range(i + 1) if i - j < window or j < num_sinks]


def _windowed_by_loop(q, k, v, window, num_sinks):
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[2]):
        keys = _visible(i, window, num_sinks)
        scores = q[:, :, i:i + 1] @ k[:, :, keys].transpose(-2, -1) / math.sqrt(q.shape[-1])
        out[:, :, i] = (torch.softmax(scores, dim=-1) @ v[:, :, keys])[:, :, 0]
    return out


@pytest.mark.parametrize("num_sinks", [0, 2])
def test_ring_buffer_decoding_reproduces_the_windowed_pass(num_sinks):
    window, T = 5, 18                                                    # 3.6 windows
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, T, 4, generator=g, dtype=F64) for _ in range(3))
    full = win.windowed_attention(q, k, v, window, num_sinks)
    assert torch.allclose(full, _windowed_by_loop(q, k, v, window, num_sinks), atol=1e-12)
    cache = win.RingKVCache(2, 3, 4, window, num_sinks, dtype=F64)
    steps = []
    for t in range(T):
        steps.append(cache.attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1]))
        held = sorted(p for p in cache.positions.tolist() if p >= 0)
        assert held == _visible(t, window, num_sinks), (t, held)
        assert cache.keys.shape[2] == window + num_sinks
    assert torch.allclose(torch.cat(steps, dim=2), full, atol=1e-12)
    assert [cache.slot_of(p) for p in (num_sinks, num_sinks + window, 13)] == \
        [num_sinks + num_sinks % window, num_sinks + num_sinks % window, num_sinks + 13 % window]


def test_layer_patterns_and_cached_tokens():
    assert win.layer_pattern(4, 1) == ["local", "global"] * 2            # Gemma 2
    assert win.layer_pattern(12, 5) == (["local"] * 5 + ["global"]) * 2  # Gemma 3
    assert win.layer_pattern(3, 0) == ["global"] * 3
    assert win.cached_tokens(["local", "global"], context=10, window=4) == 14
    assert win.cached_tokens(["local"] * 3, context=3, window=4) == 9
    with pytest.raises(ValueError, match="local"):
        win.cached_tokens(["sliding"], 10, 4)


# ------------------------------------------------------------------------------------------- delta rule

def _delta_by_loop(q, k, v, beta, alpha):
    """The update written with the identity matrix, one (batch, head) at a time."""
    B, H, T, dk = q.shape
    out = torch.zeros(B, H, T, v.shape[-1], dtype=q.dtype)
    states = torch.zeros(B, H, v.shape[-1], dk, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(v.shape[-1], dk, dtype=q.dtype)
            for t in range(T):
                kt = k[b, h, t][:, None]
                a = 1.0 if alpha is None else alpha[b, h, t]
                erase = torch.eye(dk, dtype=q.dtype) - beta[b, h, t] * kt @ kt.T
                S = a * S @ erase + beta[b, h, t] * v[b, h, t][:, None] @ kt.T
                out[b, h, t] = S @ q[b, h, t]
            states[b, h] = S
    return out, states


def _delta_inputs(T, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 2, T, 6, generator=g, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(2, 2, T, 6, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(2, 2, T, 3, generator=g, dtype=dtype)
    beta = torch.rand(2, 2, T, generator=g, dtype=dtype) * 0.98 + 0.01
    alpha = torch.rand(2, 2, T, generator=g, dtype=dtype) * 0.5 + 0.5
    return q, k, v, beta, alpha


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_three_forms_agree_with_a_loop(gated):
    q, k, v, beta, alpha = _delta_inputs(23)
    alpha = alpha if gated else None
    expected_out, expected_state = _delta_by_loop(q, k, v, beta, alpha)
    results = [la.delta_rule_recurrent(q, k, v, beta, alpha), la.delta_rule_parallel(q, k, v, beta, alpha)]
    results += [la.delta_rule_chunked(q, k, v, beta, alpha, chunk_size=c) for c in (1, 4, 7, 23, 64)]
    for out, state in results:
        assert torch.allclose(out, expected_out, atol=1e-10)
        assert torch.allclose(state, expected_state, atol=1e-10)


def test_delta_rule_forms_agree_in_float32_over_a_long_sequence():
    q, k, v, beta, alpha = _delta_inputs(300, seed=3, dtype=torch.float32)
    ref, _ = la.delta_rule_recurrent(q, k, v, beta, alpha)
    for out, _ in (la.delta_rule_parallel(q, k, v, beta, alpha), la.delta_rule_chunked(q, k, v, beta, alpha, 64)):
        assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max()


def test_delta_rule_scalar_cases_by_hand():
    one = torch.ones(1, 1, 2, 1, dtype=F64)
    v = torch.tensor([2.0, 4.0], dtype=F64).view(1, 1, 2, 1)
    beta = torch.full((1, 1, 2), 0.5, dtype=F64)
    # S1 = 0.5 * 2 = 1; S2 = 1 * (1 - 0.5) + 0.5 * 4 = 2.5
    out, _ = la.delta_rule_parallel(one, one, v, beta)
    assert torch.allclose(out.flatten(), torch.tensor([1.0, 2.5], dtype=F64))
    # gated with alpha_2 = 0.5: S2 = 0.5 * 1 * (1 - 0.5) + 2 = 2.25
    alpha = torch.tensor([1.0, 0.5], dtype=F64).view(1, 1, 2)
    out, _ = la.delta_rule_chunked(one, one, v, beta, alpha, chunk_size=1)
    assert torch.allclose(out.flatten(), torch.tensor([1.0, 2.25], dtype=F64))


def test_delta_rule_with_beta_one_stores_orthonormal_keys_exactly():
    keys = torch.eye(4, dtype=F64)[None, None]                           # four orthonormal keys
    g = torch.Generator().manual_seed(5)
    v = torch.randn(1, 1, 4, 3, generator=g, dtype=F64)
    v2 = torch.randn(1, 1, 4, 3, generator=g, dtype=F64)                 # then overwrite every value
    k = torch.cat([keys, keys], dim=2)
    _, state = la.delta_rule_recurrent(k, k, torch.cat([v, v2], dim=2), torch.ones(1, 1, 8, dtype=F64))
    assert torch.allclose((state[0, 0] @ keys[0, 0].T).T, v2[0, 0], atol=1e-12)  # S k_j = the latest v_j


def test_chunked_state_carries_over_and_plain_linear_attention():
    q, k, v, beta, alpha = _delta_inputs(20, seed=7)
    whole, state = la.delta_rule_chunked(q, k, v, beta, alpha, 8)
    first, mid = la.delta_rule_chunked(q[:, :, :9], k[:, :, :9], v[:, :, :9], beta[:, :, :9], alpha[:, :, :9], 4)
    second, end = la.delta_rule_chunked(q[:, :, 9:], k[:, :, 9:], v[:, :, 9:], beta[:, :, 9:], alpha[:, :, 9:], 5,
                                        initial_state=mid)
    assert torch.allclose(torch.cat([first, second], dim=2), whole, atol=1e-10)
    assert torch.allclose(end, state, atol=1e-10)
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    expected = ((q @ k.transpose(-2, -1)) * causal) @ v
    assert torch.allclose(la.linear_attention_recurrent(q, k, v), expected, atol=1e-10)
    with pytest.raises(ValueError, match="beta"):
        la.delta_rule_parallel(q, k, v, beta[:, :, :3])


# ------------------------------------------------------------------------------------------- MLA and GQA

def _mla_by_loop(m, x):
    """MLA written per head and per query from the layer's weights, RoPE by complex numbers."""
    B, T, _ = x.shape
    H, hd, rd = m.num_heads, m.head_dim, m.rope_dim
    pos = torch.arange(T)
    latent = x @ m.W_dkv.weight.T
    k_rope = _rope_complex(x @ m.W_kr.weight.T, pos, m.inv_freq)
    heads = []
    for h in range(H):
        rows = slice(h * hd, (h + 1) * hd)
        q_c = x @ m.W_q.weight[rows].T
        q_r = _rope_complex(x @ m.W_qr.weight[h * rd:(h + 1) * rd].T, pos, m.inv_freq)
        k_c, v = latent @ m.W_uk.weight[rows].T, latent @ m.W_uv.weight[rows].T
        out = torch.zeros(B, T, hd, dtype=x.dtype)
        for i in range(T):
            s = (torch.einsum("bd,bjd->bj", q_c[:, i], k_c[:, :i + 1])
                 + torch.einsum("bd,bjd->bj", q_r[:, i], k_rope[:, :i + 1])) / math.sqrt(hd + rd)
            out[:, i] = torch.einsum("bj,bjd->bd", torch.softmax(s, dim=-1), v[:, :i + 1])
        heads.append(out)
    return torch.cat(heads, dim=-1) @ m.W_o.weight.T


def test_mla_full_pass_matches_a_per_head_loop():
    torch.manual_seed(0)
    m = latent.MultiHeadLatentAttention(d_model=24, num_heads=3, head_dim=8, kv_latent_dim=10, rope_dim=4).double()
    x = torch.randn(2, 9, 24, dtype=F64)
    assert torch.allclose(m(x), _mla_by_loop(m, x), atol=1e-12)


@pytest.mark.parametrize("absorb", [False, True])
def test_mla_decode_with_the_compressed_cache_equals_the_full_pass(absorb):
    torch.manual_seed(1)
    m = latent.MultiHeadLatentAttention(d_model=32, num_heads=4, head_dim=8, kv_latent_dim=12, rope_dim=6)
    x = torch.randn(2, 15, 32)
    cache = m.new_cache(batch=2, max_len=15)
    steps = torch.cat([m.decode_step(x[:, t:t + 1], cache, absorb=absorb) for t in range(15)], dim=1)
    assert torch.allclose(steps, m(x), atol=1e-5), (steps - m(x)).abs().max()
    assert cache.nbytes() == 2 * 15 * (12 + 6) * 4                     # batch x tokens x (latent + rope) x float32
    with pytest.raises(ValueError, match="max_len"):
        m.decode_step(x[:, :1], cache)


def _gqa_by_sdpa(layer, x):
    """Keys and values repeated per query head, then PyTorch's SDPA with the window as a boolean mask."""
    B, T, _ = x.shape
    pos = torch.arange(T)

    def split(w, heads):
        return (x @ w.weight.T).view(B, T, heads, layer.head_dim).transpose(1, 2)
    q = _rope_complex(split(layer.W_q, layer.num_heads), pos, layer.inv_freq)
    k = _rope_complex(split(layer.W_k, layer.num_kv_heads), pos, layer.inv_freq)
    v = split(layer.W_v, layer.num_kv_heads)
    k, v = (t.repeat_interleave(layer.num_heads // layer.num_kv_heads, dim=1) for t in (k, v))
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i) & ((i - j < layer.window) if layer.window else torch.ones(T, T, dtype=torch.bool))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.transpose(1, 2).reshape(B, T, -1) @ layer.W_o.weight.T


@pytest.mark.parametrize("num_kv_heads,window", [(4, None), (2, None), (1, None), (2, 4)])
def test_gqa_full_pass_and_decoding(num_kv_heads, window):
    torch.manual_seed(2)
    layer = grouped.GroupedQueryAttention(d_model=32, num_heads=4, num_kv_heads=num_kv_heads, head_dim=8,
                                          window=window).double()
    x = torch.randn(2, 13, 32, dtype=F64)
    full = layer(x)
    assert torch.allclose(full, _gqa_by_sdpa(layer, x), atol=1e-12)
    cache = layer.new_cache(batch=2, max_len=13)
    steps = torch.cat([layer.decode_step(x[:, t:t + 1], cache) for t in range(13)], dim=1)
    assert torch.allclose(steps, full, atol=1e-12)


def test_cache_bytes_of_published_shapes():
    # Llama 2 7B: 32 layers x 32 heads x 128, fp16 -> 0.5 MiB per token; Llama 3 8B: 8 key/value heads
    assert grouped.kv_cache_bytes_per_token(32, 32, 128, 2) == 512 * 1024
    assert grouped.kv_cache_bytes_per_token(32, 8, 128, 2) == 128 * 1024
    # DeepSeek-V3: 61 layers x (512 + 64) numbers x 2 bytes
    assert latent.mla_cache_bytes_per_token(61, 512, 64, 2) == 61 * 576 * 2 == 70272


# ------------------------------------------------------------------------------------------- score mods

def test_alibi_slopes_by_hand():
    assert torch.equal(sm.alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)], dtype=F64))
    assert torch.equal(sm.alibi_slopes(4), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8], dtype=F64))
    # 6 heads: the 4-head slopes, then slopes 1 and 3 of the 8-head list (2^-1, 2^-3)
    assert torch.equal(sm.alibi_slopes(6), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8,
                                                         2.0 ** -1, 2.0 ** -3], dtype=F64))


def test_alibi_attention_against_a_bias_loop():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 4, 6, 8, generator=g, dtype=F64) for _ in range(3))
    slopes = sm.alibi_slopes(4)
    got = sm.attention_with_mods(q, k, v, sm.alibi_score_mod(slopes), sm.causal_mask_mod)
    bias = torch.full((4, 6, 6), float("-inf"), dtype=F64)
    for h in range(4):
        for i in range(6):
            for j in range(i + 1):
                bias[h, i, j] = -slopes[h] * (i - j)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) + bias, dim=-1) @ v
    assert torch.allclose(got, expected, atol=1e-12)


def test_softcap_by_hand():
    cap = 50.0
    assert math.isclose(sm.softcap(torch.tensor(cap * math.atanh(0.5), dtype=F64), cap).item(), 25.0, rel_tol=1e-12)
    big = sm.softcap(torch.tensor([1e4, -1e4, 0.01], dtype=F64), cap)
    assert big[0] <= cap and big[1] >= -cap and math.isclose(big[2].item(), 0.01, rel_tol=1e-6)


def test_document_mask_by_hand():
    mod = sm.and_mask_mods(sm.causal_mask_mod, sm.document_mask_mod(torch.tensor([0, 0, 1, 1, 1])))
    masked = sm.mask_from_mask_mod(mod, 1, 1, 5, 5)[0, 0]
    expected = torch.tensor([[0, 1, 1, 1, 1],
                             [0, 0, 1, 1, 1],
                             [1, 1, 0, 1, 1],
                             [1, 1, 0, 0, 1],
                             [1, 1, 0, 0, 0]], dtype=torch.bool)         # True = masked
    assert torch.equal(masked, expected)


def test_flex_attention_runs_eagerly_on_the_cpu():
    pytest.importorskip("torch.nn.attention.flex_attention")
    result = sm.probe_flex_attention(compiled=False, num_tokens=64)
    assert result["ran"], result["error"]
    assert result["max_abs_diff"] < 1e-5


def test_the_librarys_mods_run_in_flex_attention_unchanged():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    import warnings
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 8, 64, 16, generator=g) for _ in range(3))
    cases = [(sm.alibi_score_mod(sm.alibi_slopes(8)), sm.causal_mask_mod),
             (sm.softcap_score_mod(10.0), sm.and_mask_mods(sm.sliding_window_mask_mod(5),
                                                           sm.document_mask_mod(torch.arange(64) // 20)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # eager FlexAttention warns that it is unfused
        for score_mod, mask_mod in cases:
            block_mask = flex.create_block_mask(mask_mod, None, None, 64, 64, device="cpu")
            out = flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
            assert torch.allclose(out, sm.attention_with_mods(q, k, v, score_mod, mask_mod), atol=1e-5)
