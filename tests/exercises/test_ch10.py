"""Regression tests of chapter 10's exercises (attention as today's models run it), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch10_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Each wrong answer is written
by hand, the way a student would (never imported from the kept mistakes, nor the reference);
the shared helpers are in ``tests/exercise_helpers.py``.
"""
import math

import pytest
import torch

from attention_course.checks.calls import IN_PLACE_HINT
from attention_course.checks.checking import hidden_seed, judge, outcomes_for
from attention_course.checks.registry import all_exercises, get_exercise

from exercise_helpers import BLAMING, assert_mistake, failed_checks, passes_everywhere, statement


# ------------------------------------------------------------- ch10_ex1

def _bytes(config, context_len, bytes_per_number, *, two=2, gqa_key="num_kv_heads", mla="latent+rope",
           windows=True, every_layer=False):
    if config["attention"] == "mla":
        per = {"latent+rope": config["kv_latent_dim"] + config["rope_dim"], "latent": config["kv_latent_dim"],
               "heads": 2 * config["num_heads"] * config["head_dim"]}[mla]
    else:
        heads = config[gqa_key] if config["attention"] == "gqa" else config["num_heads"]
        per = two * heads * config["head_dim"]
    total = 0
    for layer in range(config["num_layers"]):
        slides = windows and config["window"] is not None and (every_layer or layer < config["window_layers"])
        total += per * (min(context_len, config["window"]) if slides else context_len)
    return total * bytes_per_number


def test_ch10_ex1_a_layer_by_layer_count_passes_everywhere():
    passes_everywhere("ch10_ex1", _bytes)


@pytest.mark.parametrize("mistake,options", [
    ("keys only", {"two": 1}),
    ("query heads in a grouped cache", {"gqa_key": "num_heads"}),
    ("latent attention counted up-projected", {"mla": "heads"}),
    ("latent without its RoPE key", {"mla": "latent"}),
    ("window ignored", {"windows": False}),
    ("every layer windowed", {"every_layer": True}),
], ids=lambda x: x if isinstance(x, str) else "")
def test_ch10_ex1_each_wrong_count_gets_its_hint(mistake, options):
    assert_mistake("ch10_ex1", lambda c, n, b: _bytes(c, n, b, **options), mistake)


def test_ch10_ex1_published_sizes_are_the_public_answers_but_earn_nothing_hidden():
    # Llama 2 7B at 4,096 tokens in 16 bits: 2 GiB; Llama 3 8B at 8,192: 1 GiB; DeepSeek-V2 at 32,768:
    # 60 layers x 576 numbers x 2 bytes = 69,120 bytes a token. Mistral 7B keeps 4,096 of 16,384 tokens:
    # 512 MiB. Gemma 2 9B: 21 layers at 4,096 and 21 at 8,192 (or 42 at 1,000) of 8 x 256 x 2 numbers.
    table = {(32, "mha", 4096): 2 * 1024 ** 3, (32, "gqa", 8192): 1024 ** 3, (60, "mla", 32768): 69120 * 32768,
             (32, "gqa", 16384): 512 * 1024 ** 2, (42, "gqa", 8192): 4096 * 2 * (21 * 4096 + 21 * 8192),
             (42, "gqa", 1000): 4096 * 2 * 42 * 1000}

    def looked_up(config, context_len, bytes_per_number):
        return table.get((config["num_layers"], config["attention"], context_len), 0)
    assert not failed_checks("ch10_ex1", looked_up)
    assert failed_checks("ch10_ex1", looked_up, hidden_seed=11)


def test_ch10_ex1_a_float_count_fails():
    results = failed_checks("ch10_ex1", lambda c, n, b: float(_bytes(c, n, b)))
    assert [r.check for r in results] == ["the count is a Python int (the named models)"], [r.line() for r in results]
    assert "float" in results[0].reason and "Python int" in results[0].reason


def test_ch10_ex1_a_numpy_integer_count_passes_as_the_contract_says():
    """Issue 40, item 3: the contract asks for a Python int and says a NumPy integer counts as one (it
    converts exactly); the type check and its hint say the same, and a 0-d tensor still fails."""
    import numpy as np
    passes_everywhere("ch10_ex1", lambda c, n, b: np.int64(_bytes(c, n, b)))
    assert "NumPy integer counts as one" in " ".join(statement("ch10_ex1").split())
    results = failed_checks("ch10_ex1", lambda c, n, b: torch.tensor(_bytes(c, n, b)))
    assert [r.check for r in results] == ["the count is a Python int (the named models)"], [r.line() for r in results]
    assert "NumPy integer counts as one" in results[0].reason and "NumPy integer counts as one" in results[0].hint


# ------------------------------------------------------------- ch10_ex2

def _ring(queries, keys, values, window, slope, *, pointer="wrap", extra=0, distance="true", shift=False):
    *lead, n, d = queries.shape
    kb, vb = keys.new_zeros(*lead, window, d), values.new_zeros(*lead, window, values.shape[-1])
    pos = [-1] * window
    outs = []
    for t in range(n):
        s = t % window if pointer == "wrap" else min(t, window - 1)
        kb[..., s, :], vb[..., s, :], pos[s] = keys[..., t, :], values[..., t, :], t
        scores, vals = [], []
        for slot, p in enumerate(pos):
            if p < 0:
                continue
            dist = t - p if distance == "true" else (t % window) - slot
            scores.append((queries[..., t, :] * kb[..., slot, :]).sum(-1) / math.sqrt(d) - slope * dist)
            vals.append(vb[..., slot, :])
        if extra and t - window >= 0:               # one more key than the window, from the inputs
            scores.append((queries[..., t, :] * keys[..., t - window, :]).sum(-1) / math.sqrt(d) - slope * window)
            vals.append(values[..., t - window, :])
        weights = torch.softmax(torch.stack(scores, -1), -1)
        outs.append((weights.unsqueeze(-1) * torch.stack(vals, -2)).sum(-2))
    if shift:                                       # oldest first instead of slot p % window
        order = sorted(range(window), key=lambda s: (pos[s] < 0, pos[s]))
        kb, vb = kb[..., order, :], vb[..., order, :]
    return torch.stack(outs, -2), kb, vb


def test_ch10_ex2_a_slot_by_slot_loop_passes_everywhere():
    passes_everywhere("ch10_ex2", _ring)


@pytest.mark.parametrize("mistake,options", [
    ("write pointer never wraps", {"pointer": "stuck"}),
    ("window one key too wide", {"extra": 1}),
    ("distances from slot numbers", {"distance": "slots"}),
    ("a shifting buffer instead of a ring", {"shift": True}),
], ids=lambda x: x if isinstance(x, str) else "")
def test_ch10_ex2_each_ring_bug_gets_its_hint(mistake, options):
    assert_mistake("ch10_ex2", lambda *a: _ring(*a, **options), mistake)


def test_ch10_ex2_outputs_without_the_buffers_fail():
    def no_buffers(queries, keys, values, window, slope):
        out, kb, vb = _ring(queries, keys, values, window, slope)
        return out, torch.zeros_like(kb), torch.zeros_like(vb)
    assert failed_checks("ch10_ex2", no_buffers)


def test_ch10_ex2_contract_states_the_window_and_the_slot():
    text = statement("ch10_ex2")
    assert "max(0, t - window + 1)" in text and "t % window" in text


# ------------------------------------------------------------- ch10_ex3

def _sinks(q, k, v, kc, vc, position, window, num_sinks, *, slot_rule="mod", attend="kept"):
    def slot(p):
        if p < num_sinks:
            return p
        return num_sinks + (p % window if slot_rule == "mod" else (p - num_sinks) % window)
    kc, vc = kc.clone(), vc.clone()
    kc[:, :, slot(position)], vc[:, :, slot(position)] = k[:, :, 0], v[:, :, 0]
    if attend == "all":
        slots = list(range(num_sinks + window))
    elif attend == "first slots":
        slots = list(range(min(position + 1, num_sinks + window)))
    elif attend == "one too wide":          # window + 1 recent positions ("<=" where "<" was meant)
        sinks = [p for p in range(num_sinks) if p <= position]
        slots = [slot(p) for p in sinks + list(range(max(num_sinks, position - window), position + 1))]
    elif attend == "sinks twice":           # the window's start not raised to num_sinks
        sinks = [p for p in range(num_sinks) if p <= position]
        slots = [slot(p) for p in sinks + list(range(max(0, position - window + 1), position + 1))]
    else:
        keep = [p for p in range(position + 1)
                if p > position - window or (attend in ("kept", "masked", "additive") and p < num_sinks)]
        slots = [slot(p) for p in keep]
    if attend in ("masked", "additive"):    # every slot scored, the others masked, every slot's value used
        mask = torch.full((num_sinks + window,), -math.inf)
        mask[slots] = 0.0
        scores = q @ kc.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores + mask if attend == "additive" else scores.masked_fill(mask < 0, -math.inf)
        return scores.softmax(-1) @ vc, kc, vc
    scores = q @ kc[:, :, slots].transpose(-1, -2) / math.sqrt(q.shape[-1])
    return scores.softmax(-1) @ vc[:, :, slots], kc, vc


def test_ch10_ex3_a_position_list_passes_everywhere():
    passes_everywhere("ch10_ex3", _sinks)


@pytest.mark.parametrize("mistake,options", [
    ("sinks dropped from the attention", {"attend": "window"}),
    ("unwritten slots attended", {"attend": "all"}),
    ("slots assumed to fill in order", {"attend": "first slots"}),
    ("window slots counted after the sinks", {"slot_rule": "after", "attend": "first slots"}),
    # An independent solver's bugs that got only the check's hint (the chapter warns of the first).
    ("window one position too wide", {"attend": "one too wide"}),
    ("sinks attended twice", {"attend": "sinks twice"}),
    ("unwritten slots' inf and NaN reached the output", {"attend": "masked"}),
    ("unwritten slots' inf and NaN reached the output", {"attend": "additive"}),
], ids=lambda x: x if isinstance(x, str) else "-".join(x.values()))
def test_ch10_ex3_each_cache_bug_gets_its_hint(mistake, options):
    assert_mistake("ch10_ex3", lambda *a: _sinks(*a, **options), mistake)


def test_ch10_ex3_output_right_but_cache_unwritten_fails():
    def forgets_the_write(q, k, v, kc, vc, position, window, num_sinks):
        out, _, _ = _sinks(q, k, v, kc, vc, position, window, num_sinks)
        return out, kc, vc
    assert failed_checks("ch10_ex3", forgets_the_write)


def test_ch10_ex3_writing_into_the_given_caches_is_named():
    """Issue 40, item 3: a step that writes the new key and value into the caches it was given (and
    returns them) had every value right and passed, since the checks copy their inputs; the contract
    returns new caches and leaves its arguments as they were, and the reason names the caches."""
    def in_place(q, k, v, kc, vc, position, window, num_sinks):
        out, new_k, new_v = _sinks(q, k, v, kc, vc, position, window, num_sinks)
        kc.copy_(new_k)
        vc.copy_(new_v)
        return out, kc, vc
    assert_mistake("ch10_ex3", in_place, "wrote into the given caches")
    for r in failed_checks("ch10_ex3", in_place):
        assert "changed its arguments kc and vc in place" in r.reason, r.reason
    for seed in (11, 2026):
        assert failed_checks("ch10_ex3", in_place, seed), seed


def test_ch10_ex3_the_contract_says_the_arguments_stay_as_given():
    assert "leaves its arguments as they were" in " ".join(statement("ch10_ex3").split())


def test_ch10_ex3_the_new_bugs_fail_the_hidden_check_at_every_seed():
    """The solver's "sinks attended twice" answer passed the hidden check at its seed (no call had the
    window reaching back over the sinks) and "inf and NaN" answers passed everywhere (unwritten slots held
    finite numbers only). The hidden check now always holds both cases."""
    exercise = get_exercise("ch10_ex3")
    hidden = next(c for c in exercise.checks if not c.public)
    index = exercise.checks.index(hidden)
    for attend in ("sinks twice", "masked", "additive", "one too wide"):
        for seed in range(12):
            calls = hidden.make_calls(hidden_seed(seed, index))
            got = outcomes_for(lambda *a: _sinks(*a, attend=attend), calls, "function")
            assert not judge(exercise, hidden, calls, got).passed, (attend, seed)


def test_ch10_ex3_the_checks_hold_unwritten_slots_of_inf_and_nan():
    exercise = get_exercise("ch10_ex3")
    for index, check in enumerate(exercise.checks):
        if "wrapped" in check.name:
            continue
        for seed in [check.seed] if check.public else [hidden_seed(s, index) for s in (11, 2026, 7)]:
            caches = [call.args[4] for call in check.make_calls(seed)]
            assert any(bool(torch.isnan(c).any()) and bool(torch.isinf(c).any()) for c in caches), (check.name, seed)


def test_ch10_ex3_an_argument_changed_in_place_gets_a_hint_that_speaks_of_it():
    """Before: an answer that scaled q_new in place got the right reason, then the check's hint ("compares
    the output and both caches"), which does not fit. An in-place change that no kept mistake explains now
    gets the engine's in-place hint."""
    def scales_the_query(q, k, v, kc, vc, position, window, num_sinks):
        q /= math.sqrt(q.shape[-1])
        return _sinks(q * math.sqrt(q.shape[-1]), k, v, kc, vc, position, window, num_sinks)

    def squeezes_the_key(q, k, v, kc, vc, position, window, num_sinks):
        k.squeeze_(-2)
        return _sinks(q, k.unsqueeze(-2), v, kc, vc, position, window, num_sinks)
    for answer, name in ((scales_the_query, "q"), (squeezes_the_key, "k")):
        failed = failed_checks("ch10_ex3", answer)
        assert len(failed) == 2, [r.line() for r in failed]
        for r in failed:
            assert f"changed its argument {name} in place" in r.reason, r.reason
            assert r.mistake is None and r.hint == IN_PLACE_HINT, r.hint
        assert failed_checks("ch10_ex3", answer, 11)


def test_ch10_ex3_the_contract_is_plain_about_the_sinks_and_unwritten_slots():
    text = " ".join(statement("ch10_ex3").split())
    assert "those of the positions `0` to `num_sinks - 1` that are at most `position`" in text
    assert "each kept position counts once" in text
    assert "inf and NaN included" in text


# ------------------------------------------------------------- ch10_ex4

def _wy(keys, values, beta, *, beta_on_sum=True, later=False, first_order=False):
    k, v, b = keys.double(), values.double(), beta.double()
    n = k.shape[-2]
    w, u = torch.zeros_like(k), torch.zeros_like(v)
    order = list(range(n))[::-1] if later else list(range(n))
    for j, t in enumerate(order):
        sum_w, sum_u = torch.zeros_like(k[..., t, :]), torch.zeros_like(v[..., t, :])
        for i in order[:j]:
            dot = (k[..., i, :] * k[..., t, :]).sum(-1, keepdim=True)
            sum_w = sum_w + dot * (b[..., i, None] * k[..., i, :] if first_order else w[..., i, :])
            sum_u = sum_u + dot * (b[..., i, None] * v[..., i, :] if first_order else u[..., i, :])
        bt = b[..., t, None]
        w[..., t, :] = bt * k[..., t, :] - (bt if beta_on_sum else 1.0) * sum_w
        u[..., t, :] = bt * v[..., t, :] - (bt if beta_on_sum else 1.0) * sum_u
    return w.float(), u.float()


def test_ch10_ex4_wy_form_reproduces_the_recurrence():
    # The contract's identity, checked against the delta rule itself for a random starting state.
    g = torch.Generator().manual_seed(4)
    keys = torch.nn.functional.normalize(torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64), dim=-1)
    values = torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64)
    beta = torch.rand(2, 3, 7, generator=g, dtype=torch.float64)
    w, u = _wy(keys, values, beta)
    state0 = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    state, eye = state0, torch.eye(5, dtype=torch.float64)
    for t in range(7):
        kt, vt, bt = keys[..., t, :], values[..., t, :], beta[..., t, None, None]
        state = state @ (eye - bt * kt[..., :, None] * kt[..., None, :]) + bt * vt[..., :, None] * kt[..., None, :]
        wy = state0 @ (eye - w[..., :t + 1, :].double().transpose(-1, -2) @ keys[..., :t + 1, :]) \
            + u[..., :t + 1, :].double().transpose(-1, -2) @ keys[..., :t + 1, :]
        assert torch.allclose(wy, state, atol=1e-5), t


def test_ch10_ex4_forward_substitution_passes_everywhere():
    passes_everywhere("ch10_ex4", _wy)


@pytest.mark.parametrize("mistake,options", [
    ("beta left off the corrections", {"beta_on_sum": False}),
    ("corrections from later tokens", {"later": True}),
    ("corrections by the raw updates", {"first_order": True}),
], ids=lambda x: x if isinstance(x, str) else "")
def test_ch10_ex4_each_derivation_slip_gets_its_hint(mistake, options):
    assert_mistake("ch10_ex4", lambda *a: _wy(*a, **options), mistake)


def test_ch10_ex4_triangle_with_its_diagonal_gets_its_hint():
    def with_diagonal(keys, values, beta):
        b = beta.unsqueeze(-1)
        a = torch.eye(keys.shape[-2]) + (b * keys @ keys.transpose(-1, -2)).tril()
        return torch.linalg.solve(a, b * keys), torch.linalg.solve(a, b * values)
    assert_mistake("ch10_ex4", with_diagonal, "own key inside the triangular system")


def test_ch10_ex4_the_orthogonal_keys_shortcut_fails():
    def as_if_orthogonal(keys, values, beta):
        return beta.unsqueeze(-1) * keys, beta.unsqueeze(-1) * values
    assert failed_checks("ch10_ex4", as_if_orthogonal)


def test_ch10_ex4_statement_leaves_the_recursion_to_derive():
    text = statement("ch10_ex4")
    assert "Derive" in text and "solve_triangular" not in text and "tril" not in text


# ------------------------------------------------------------- ch10_ex5

def _mla(x, lat, rope, wts, *, denominator="both", rotate_key=True, shift=0, halves=False):
    pos = lat.shape[1] + shift

    def rot(t):
        n = t.shape[-1] // 2
        ang = pos * torch.tensor([10000.0 ** (-2 * i / t.shape[-1]) for i in range(n)], dtype=torch.float64)
        c, s = ang.cos().float(), ang.sin().float()
        a, b = (t[..., :n], t[..., n:]) if halves else (t[..., 0::2], t[..., 1::2])
        ra, rb = a * c - b * s, a * s + b * c
        return torch.cat([ra, rb], -1) if halves else torch.stack([ra, rb], -1).reshape(t.shape)

    kr = x @ wts["w_kr"]
    lat = torch.cat([lat, (x @ wts["w_dkv"]).unsqueeze(1)], 1)
    rope = torch.cat([rope, (rot(kr) if rotate_key else kr).unsqueeze(1)], 1)
    outs = []
    for h in range(wts["w_q"].shape[0]):
        keys, vals = lat @ wts["w_uk"][h], lat @ wts["w_uv"][h]          # per-head keys, fine for a check
        s = (keys @ (x @ wts["w_q"][h]).unsqueeze(-1)).squeeze(-1)
        s = s + (rope @ rot(x @ wts["w_qr"][h]).unsqueeze(-1)).squeeze(-1)
        size = wts["w_q"].shape[-1] + (rope.shape[-1] if denominator == "both" else 0)
        outs.append((torch.softmax(s / math.sqrt(size), -1).unsqueeze(-1) * vals).sum(1))
    return torch.stack(outs, 1), lat, rope


def test_ch10_ex5_per_head_keys_pass_everywhere():
    passes_everywhere("ch10_ex5", _mla)


@pytest.mark.parametrize("mistake,options", [
    ("scaled by head_dim alone", {"denominator": "head"}),
    ("new RoPE key cached unrotated", {"rotate_key": False}),
    ("rotated one position too far", {"shift": 1}),
    ("RoPE on halves instead of pairs", {"halves": True}),
], ids=lambda x: x if isinstance(x, str) else "")
def test_ch10_ex5_each_latent_bug_gets_its_hint(mistake, options):
    assert_mistake("ch10_ex5", lambda *a: _mla(*a, **options), mistake)


def test_ch10_ex5_a_step_that_caches_nothing_fails():
    def no_append(x, lat, rope, wts):
        out, _, _ = _mla(x, lat, rope, wts)
        return out, lat, rope
    assert failed_checks("ch10_ex5", no_append)


# ------------------------------------------------------------- ch10_ex6

def test_ch10_ex6_the_derived_base_turns_the_slowest_pair_exactly_once():
    def derived(head_dim, context_len):
        return math.exp(math.log(context_len / (2 * math.pi)) * head_dim / (head_dim - 2))
    passes_everywhere("ch10_ex6", derived)
    for head_dim, context_len in [(128, 4096), (6, 100), (64, 1_000_000)]:
        base = derived(head_dim, context_len)
        slowest = base ** (-(head_dim - 2) / head_dim)
        assert abs(context_len * slowest - 2 * math.pi) < 1e-9


@pytest.mark.parametrize("mistake,answer", [
    ("exponent upside down", lambda d, n: (n / (2 * math.pi)) ** (1 - 2 / d)),
    ("one turn as one radian", lambda d, n: n ** (d / (d - 2))),
    ("slowest pair at exponent 1", lambda d, n: n / (2 * math.pi)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_ch10_ex6_each_slip_gets_its_hint(mistake, answer):
    assert_mistake("ch10_ex6", answer, mistake)


def test_ch10_ex6_the_published_base_is_not_the_answer():
    # Llama 3's 500,000 is enough for 131,072 positions but far from the smallest.
    assert failed_checks("ch10_ex6", lambda head_dim, context_len: 500000.0)
    assert "smallest" in statement("ch10_ex6")


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(10), ids=lambda e: e.label)
def test_ch10_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)


def test_ch10_ex6_a_tensor_base_fails_only_the_type_check():
    """A blind solver's 0-d float64 tensor passed every check although the contract asks for a Python float."""
    import torch

    def as_tensor(head_dim, context_len):
        return torch.tensor(context_len / (2 * math.pi), dtype=torch.float64) ** (head_dim / (head_dim - 2))
    results = failed_checks("ch10_ex6", as_tensor)
    assert [r.check for r in results] == ["the base is a Python float (heads of 128 numbers)"], [r.line() for r in results]
    assert "tensor" in results[0].reason and "Python float" in results[0].reason
