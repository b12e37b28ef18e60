"""Regression tests of chapter 8's exercises (the Transformer), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch08_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

From issue 10, the findings of the independent chapter-8 solver "d":

* ch08_ex1: a tgt_lens that is 0-d or a (batch, 1) column, and a negative length, must raise
  (the contract: 1-D, lengths in [0, num_tokens]); answers that quietly accept them fail;
* ch08_ex2: the all-padding check's own hint no longer says "NaN / not uniform" for any
  failure; masking after the softmax and merging the heads without the transpose are kept
  mistakes with their own hints;
* ch08_ex3: the contract says the block hides exactly what self_mask marks; a block that ORs
  its own causal mask onto self_mask fails the padding-only check, with its own hint;
* ch08_ex4 (then a shapes exercise; issue 40 replaced it by an accounting of the parameters with
  tied embeddings): the counts must be ints, in a separate low-weight check with a plain reason;
* ch08_ex5: the encode-once check no longer blames re-encoding for int32 tokens or a dropped
  <eos>; clearing the <eos> step itself is a kept mistake with its own hint.

From issue 19 (an expert review):

* ch08_ex1 is now a transfer exercise, the decoder's mask for left-padded targets (the chapter
  prints the right-padded one); an answer that refuses a length of 0 is told about length 0;
  the right-padding mask and the causal mask alone are kept mistakes with their own hints;
* ch08_ex2's contract allows any key padding pattern, and its public checks include a
  left-padded mask and one with holes: an answer that turns the mask into lengths fails them.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import transformer as tf
from attention_course.checks.checking import run_checks
from attention_course.checks.registry import get_exercise

from exercise_helpers import (SEEDS, check_hint, failed_checks, failed_hidden_somewhere, mistake_hint,
                              passes_everywhere, statement)


# ------------------------------------------------------------------ ch08_ex1

def _student_mask(accept_0d=False, accept_column=False, check_negative=True, shape_text=None,
                  reject_empty=False, padding="left"):
    def left_padded_self_mask(tgt_lens, num_tokens):
        if accept_0d and tgt_lens.dim() == 0:
            tgt_lens = tgt_lens.reshape(1)
        if accept_column and tgt_lens.dim() == 2 and tgt_lens.shape[1] == 1:
            tgt_lens = tgt_lens[:, 0]
        if tgt_lens.dim() != 1:
            shape = shape_text(tgt_lens.shape) if shape_text else str(tuple(tgt_lens.shape))
            raise ValueError(f"tgt_lens must be 1-D, got shape {shape}")
        too_big = (tgt_lens > num_tokens).any()
        negative = (tgt_lens < 0).any() if check_negative else False
        if too_big or negative:
            raise ValueError(f"tgt_lens must lie in [0, {num_tokens}] for num_tokens={num_tokens}")
        if reject_empty and (tgt_lens < 1).any():
            raise ValueError("every target needs at least one token")
        i = torch.arange(num_tokens)
        future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        if padding == "left":
            pad = i.view(1, 1, -1) < (num_tokens - tgt_lens).view(-1, 1, 1)
        elif padding == "right":
            pad = i.view(1, 1, -1) >= tgt_lens.view(-1, 1, 1)
        else:                          # the causal mask alone: the right-padding shortcut
            pad = torch.zeros(len(tgt_lens), 1, num_tokens, dtype=torch.bool)
        return future.unsqueeze(0) | pad
    return left_padded_self_mask


def test_ch08_ex1_correct_answer_passes_with_any_printed_shape():
    passes_everywhere("ch08_ex1", _student_mask())
    # "x".join prints a 0-d shape as nothing: naming tgt_lens is enough for a 0-d tensor.
    passes_everywhere("ch08_ex1", _student_mask(shape_text=lambda s: "x".join(map(str, s))))


@pytest.mark.parametrize("kind", ["0-d accepted", "column accepted", "negative accepted"])
def test_ch08_ex1_invalid_tgt_lens_accepted_fails(kind):
    answer = {"0-d accepted": _student_mask(accept_0d=True),
              "column accepted": _student_mask(accept_column=True),
              "negative accepted": _student_mask(check_negative=False)}[kind]
    public = failed_checks("ch08_ex1", answer)
    assert [r.check for r in public] == [c.name for c in get_exercise("ch08_ex1").checks if "raises" in c.name]
    assert "should raise ValueError" in public[0].reason
    # the check's own hint describes what the calls pass and what must happen, nothing else
    assert public[0].hint == check_hint("ch08_ex1", "tgt_lens not 1-D")
    if kind != "0-d accepted":          # the hidden check has a column and a negative length
        assert failed_hidden_somewhere("ch08_ex1", answer)


def test_ch08_ex1_contract_names_the_invalid_shapes():
    cell = statement("ch08_ex1")
    assert "0-d" in cell and "(batch, 1)" in cell


def test_ch08_ex1_rejecting_length_0_is_told_about_length_0():
    """Issue 19: an answer that refused a length of 0 was told about the entries of the mask."""
    answer = _student_mask(reject_empty=True)     # its own words, not the kept mistake's
    public = failed_checks("ch08_ex1", answer)
    assert [r.check for r in public] == ["an all-padding target (length 0) beside targets of lengths 3 and 1"]
    assert "raised ValueError" in public[0].reason
    assert "length of 0 is allowed" in public[0].hint and "entry [b, i, j]" not in public[0].hint
    assert failed_hidden_somewhere("ch08_ex1", answer)


@pytest.mark.parametrize("padding,mistake", [("right", "padding on the right"),
                                             ("none", "causal mask only")])
def test_ch08_ex1_right_padding_answers_fail_with_their_hint(padding, mistake):
    """Chapter 8 shows that with right padding the causal mask alone hides the padding from every
    real query; with left padding it does not, and neither does a right-padding mask."""
    answer = _student_mask(padding=padding)
    public = failed_checks("ch08_ex1", answer)
    assert public and all(r.mistake == mistake and r.hint == mistake_hint("ch08_ex1", mistake)
                          for r in public), [r.line() for r in public]
    assert failed_hidden_somewhere("ch08_ex1", answer)


def test_ch08_ex1_graded_cases_keep_what_the_checks_promise():
    """Issue 38, item 4: the public checks give the printed case at their own seed, and at grading seeds
    other cases of the same kind (a full, a padded and a one-token target; unpadded targets and a single
    token; a length of 0 beside a full and a padded target; every kind of invalid tgt_lens)."""
    from attention_course.checks.plan import hidden_seed
    checks = get_exercise("ch08_ex1").checks
    main, = checks[0].make_calls(checks[0].seed)
    assert main.args[0].tolist() == [5, 3, 1] and main.args[1] == 5
    for seed in (11, 2026, 7, 5):
        (main,) = checks[0].make_calls(hidden_seed(seed, 0))
        lens, n = main.args
        assert sorted(lens.tolist()) == [1, sorted(lens.tolist())[1], n] and 1 < sorted(lens.tolist())[1] < n
        unpadded, single = checks[1].make_calls(hidden_seed(seed, 1))
        assert bool((unpadded.args[0] == unpadded.args[1]).all()) and single.args[1] == 1
        assert single.args[0].tolist() == [1] * len(single.args[0])
        (empty,) = checks[2].make_calls(hidden_seed(seed, 2))
        lens, n = sorted(empty.args[0].tolist()), empty.args[1]
        assert lens[0] == 0 and lens[2] == n and 0 < lens[1] < n
        row, column, zero_d, too_large, negative = checks[3].make_calls(hidden_seed(seed, 3))
        assert row.args[0].shape[0] == 1 and row.args[0].dim() == 2 and column.args[0].shape[1] == 1
        assert zero_d.args[0].dim() == 0
        assert int(too_large.args[0].max()) > too_large.args[1] and int(negative.args[0].min()) < 0


def test_ch08_ex1_contract_asks_for_left_padding():
    cell = statement("ch08_ex1")
    assert "left_padded_self_mask(tgt_lens, num_tokens)" in cell and "**left**" in cell
    assert "`num_tokens - tgt_lens[b]` padding positions followed by" in cell


# ------------------------------------------------------------------ ch08_ex2

def _student_cross(variant="correct"):
    class CrossAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h, self.e = num_heads, d_model // num_heads
            self.W_query = nn.Linear(d_model, d_model, bias=False)
            self.W_key = nn.Linear(d_model, d_model, bias=False)
            self.W_value = nn.Linear(d_model, d_model, bias=False)
            self.out_proj = nn.Linear(d_model, d_model)

        def forward(self, x, memory, key_padding_mask):
            b, nq, d = x.shape
            nk = memory.shape[1]
            if tuple(key_padding_mask.shape) != (b, nk):
                raise ValueError(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, "
                                 f"expected {(b, nk)}")
            if variant == "mask as lengths":      # valid keys counted, then hidden from there on
                src_lens = key_padding_mask.logical_not().long().sum(-1)
                key_padding_mask = torch.arange(nk).expand(b, nk) >= src_lens.unsqueeze(-1)
            q = self.W_query(x).view(b, nq, self.h, self.e).transpose(1, 2)
            k = self.W_key(memory).view(b, nk, self.h, self.e).transpose(1, 2)
            value_layer = self.W_key if variant == "values from W_key" else self.W_value
            v = value_layer(memory).view(b, nk, self.h, self.e).transpose(1, 2)
            s = q @ k.transpose(-1, -2) / math.sqrt(self.e)
            hide = key_padding_mask[:, None, None, :]
            if variant == "masked after softmax":
                w = torch.softmax(s, dim=-1) * (~hide)
            elif variant == "softmax over queries":
                w = torch.softmax(s.masked_fill(hide, -1e9), dim=-2) * (~hide)
            else:
                w = torch.softmax(s.masked_fill(hide, -1e9), dim=-1) * (~hide)
            ctx = w @ v
            if variant == "no transpose back":
                ctx = ctx.reshape(b, nq, d)
            else:
                ctx = ctx.transpose(1, 2).reshape(b, nq, d)
            if variant == "averaged weights":
                return self.out_proj(ctx), w.mean(dim=1)
            return self.out_proj(ctx), w
    return CrossAttention


def test_ch08_ex2_correct_answer_passes():
    passes_everywhere("ch08_ex2", _student_cross())


@pytest.mark.parametrize("variant,mistake", [("masked after softmax", "padding zeroed after the softmax"),
                                             ("no transpose back",
                                              "heads merged without moving the heads axis back")])
def test_ch08_ex2_typical_mistakes_get_their_own_hint(variant, mistake):
    answer = _student_cross(variant)
    public = failed_checks("ch08_ex2", answer)
    assert public
    assert all(r.mistake == mistake and r.hint == mistake_hint("ch08_ex2", mistake) for r in public), \
        [r.line() for r in public]
    assert failed_hidden_somewhere("ch08_ex2", answer)


def test_ch08_ex2_mask_turned_into_lengths_fails_a_public_check_with_its_hint():
    """Issue 19: an answer that read key_padding_mask as right-padded lengths passed every check,
    public and hidden; the contract now allows any pattern and the public checks include a
    left-padded mask and one with holes."""
    answer = _student_cross("mask as lengths")
    public = failed_checks("ch08_ex2", answer)
    assert [r.check for r in public] == ["3 heads: left-padded sources of lengths 5, 3 and 1 (the padding first)",
                                         "2 heads: padded keys scattered between valid ones"]
    assert all(r.mistake == "mask turned into lengths" and r.hint == mistake_hint("ch08_ex2", "mask turned into lengths")
               for r in public), [r.line() for r in public]
    assert failed_hidden_somewhere("ch08_ex2", answer, seeds=SEEDS)


def test_ch08_ex2_contract_allows_any_padding_pattern():
    cell = statement("ch08_ex2")
    assert "any pattern" in cell and "left padding" in cell and "scattered" in cell
    assert "`torch.bool`" in cell and "`True` at the padded keys" in cell


def test_ch08_ex2_package_layer_hides_any_pattern():
    """The chapter's own layer, tf.MaskedMultiHeadAttention, meets the contract for any pattern."""
    torch.manual_seed(0)
    layer = tf.MaskedMultiHeadAttention(4, 2)
    x, memory = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    holes = torch.tensor([[True, False, True, False, True], [False, False, True, True, False]])
    _, weights = layer(x, memory, key_padding_mask=holes, return_weights=True)
    assert torch.all(weights.masked_select(holes[:, None, None, :].expand_as(weights)) == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 3))


@pytest.mark.parametrize("variant", ["softmax over queries", "values from W_key", "averaged weights",
                                     "no transpose back"])
def test_ch08_ex2_all_padding_hint_is_neutral(variant):
    answer = _student_cross(variant)
    empty = [r for r in failed_checks("ch08_ex2", answer) if r.check.startswith("a source that is all padding")]
    assert empty, variant
    r = empty[0]
    assert "NaN" not in r.reason
    if r.mistake is None:
        assert r.hint == check_hint("ch08_ex2", "a source that is all padding")
    assert "not NaN, not uniform" not in r.hint and "must stay finite" not in r.hint


# ------------------------------------------------------------------ ch08_ex3

def _student_block(or_causal=False, kpm_as_lengths=False):
    class Attn(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h = num_heads
            self.W_query = nn.Linear(d_model, d_model, bias=False)
            self.W_key = nn.Linear(d_model, d_model, bias=False)
            self.W_value = nn.Linear(d_model, d_model, bias=False)
            self.out_proj = nn.Linear(d_model, d_model)

        def forward(self, xq, xkv, hide):          # hide broadcastable to (b, h, q, k), True = hidden
            b, nq, d = xq.shape
            split = lambda t: t.view(b, t.shape[1], self.h, -1).transpose(1, 2)
            q, k, v = split(self.W_query(xq)), split(self.W_key(xkv)), split(self.W_value(xkv))
            s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            w = torch.softmax(s.masked_fill(hide, float("-inf")), dim=-1).nan_to_num(0.0)
            return self.out_proj((w @ v).transpose(1, 2).reshape(b, nq, d))

    class DecoderBlock(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            self.self_attn, self.cross_attn = Attn(d_model, num_heads), Attn(d_model, num_heads)
            self.ffn = nn.Module()
            self.ffn.linear1, self.ffn.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

        def forward(self, x, memory, self_mask, key_padding_mask):
            mask = self_mask
            if kpm_as_lengths:        # the source padding read as right padding
                src_len = memory.shape[1]
                valid = (~key_padding_mask).sum(-1, keepdim=True)
                key_padding_mask = torch.arange(src_len)[None, :] >= valid
            if or_causal:
                t = x.shape[1]
                mask = mask | torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            h = self.norm1(x)
            x = x + self.self_attn(h, h, mask.unsqueeze(1))
            x = x + self.cross_attn(self.norm2(x), memory, key_padding_mask[:, None, None, :])
            return x + self.ffn.linear2(F.relu(self.ffn.linear1(self.norm3(x))))
    return DecoderBlock


def test_ch08_ex3_correct_answer_passes():
    passes_everywhere("ch08_ex3", _student_block())


def test_ch08_ex3_causal_mask_ored_onto_self_mask_fails_with_its_hint():
    answer = _student_block(or_causal=True)
    public = failed_checks("ch08_ex3", answer)
    # Both checks whose self_mask is not causal (padding only) tell it apart, each with its hint.
    assert [r.check for r in public] == ["a self_mask that is not causal (padding only): the block uses "
                                         "self_mask as given",
                                         "a source that is all padding, and a target whose self_mask hides every key"]
    assert {r.hint for r in public} == {mistake_hint("ch08_ex3", "a causal mask added to self_mask")}
    assert failed_hidden_somewhere("ch08_ex3", answer, seeds=SEEDS)


def test_ch08_ex3_key_padding_mask_read_as_lengths_fails():
    """Issue 19: like ch08_ex2, the block takes a key_padding_mask of any pattern; one public check
    passes a left-padded source."""
    answer = _student_block(kpm_as_lengths=True)
    public = failed_checks("ch08_ex3", answer)
    assert [r.check for r in public] == ["3 heads: gradients with respect to x and memory"]
    assert public[0].hint == check_hint("ch08_ex3", "3 heads: gradients")
    assert failed_hidden_somewhere("ch08_ex3", answer, seeds=SEEDS)
    assert "in any pattern" in statement("ch08_ex3")


def test_ch08_ex3_contract_says_self_mask_is_used_as_given():
    cell = statement("ch08_ex3")
    assert "as given" in cell and "not causal" in cell


# ------------------------------------------------------------------ ch08_ex4

def _tied_model(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    model = tf.Transformer(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff)
    if tie != "none":
        model.out.weight = model.tgt_embedding.weight
    if tie == "all":
        model.src_embedding.weight = model.tgt_embedding.weight
    return model


@pytest.mark.parametrize("sizes", [(8, 2, 16, 2, 20, 12, "none"), (8, 2, 16, 2, 20, 12, "output"),
                                   (12, 4, 24, 1, 15, 15, "all"), (6, 3, 5, 3, 9, 30, "output"),
                                   (4, 1, 7, 1, 11, 11, "none")], ids=lambda s: "ch08_ex4-" + "-".join(map(str, s)))
def test_ch08_ex4_reference_counts_what_the_tied_model_holds(sizes):
    """The answer from the world: the page's model built with these sizes and its weights tied by
    assignment; every distinct tensor (by identity) counted once, grouped by the module that owns it."""
    model = _tied_model(*sizes)
    seen, groups = set(), dict.fromkeys(("embeddings", "attention", "feed_forward", "norms", "output"), 0)
    for module_name, module in model.named_modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            kind = ("embeddings" if isinstance(module, nn.Embedding) else "norms" if isinstance(module, nn.LayerNorm)
                    else "output" if module_name == "out" else "feed_forward" if ".ffn." in f".{module_name}."
                    else "attention")
            groups[kind] += p.numel()
    groups["total"] = sum(p.numel() for p in model.parameters())
    assert get_exercise("ch08_ex4").reference(*sizes) == groups


def _student_params(convert=int, slip=None):
    """A student's answer, sublayer by sublayer; ``slip`` switches on one counting error."""
    def transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
        if d_model % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide d_model ({d_model})")
        if tie == "all" and src_vocab != tgt_vocab:
            raise ValueError(f"src_vocab ({src_vocab}) and tgt_vocab ({tgt_vocab}) differ")
        d = d_model
        heads = num_heads if slip == "heads twice" else 1
        attention = heads * 3 * d * d + d * d + d
        norms_per_stack = [2 * num_layers, 3 * num_layers] if slip == "no final norms" else \
            [2 * num_layers + 1, 3 * num_layers + 1]
        out = {"embeddings": d * tgt_vocab + (0 if tie == "all" else d * src_vocab),
               "attention": 3 * num_layers * attention,
               "feed_forward": 2 * num_layers * (d * d_ff + d_ff + d_ff * d + d),
               "norms": sum(norms_per_stack) * 2 * d,
               "output": d * tgt_vocab + tgt_vocab}
        if tie != "none":
            out["output"] = 0 if slip == "bias dropped" else tgt_vocab
        out["total"] = sum(out.values())
        if slip == "modules summed" and tie != "none":     # each module's parameters() counted apart
            out["total"] += d * tgt_vocab * (2 if tie == "all" else 1)
        return {k: convert(v) for k, v in out.items()}
    return transformer_parameters


def test_ch08_ex4_correct_answers_pass():
    passes_everywhere("ch08_ex4", _student_params())
    passes_everywhere("ch08_ex4", _student_params(np.int64))


@pytest.mark.parametrize("slip,mistake", [("heads twice", "heads multiplied twice"),
                                          ("no final norms", "final layer norms left out"),
                                          ("bias dropped", "output bias dropped with the tied weight"),
                                          ("modules summed", "total counts a shared table twice")],
                         ids=lambda v: "ch08_ex4-" + v.replace(" ", "_"))
def test_ch08_ex4_a_counting_slip_gets_the_hint_of_its_mistake(slip, mistake):
    answer = _student_params(slip=slip)
    failures = failed_checks("ch08_ex4", answer)
    assert failures
    for r in failures:
        assert r.mistake == mistake and r.hint == mistake_hint("ch08_ex4", mistake), r.line()
    assert failed_hidden_somewhere("ch08_ex4", answer)


@pytest.mark.parametrize("convert,said", [(float, "float"), (torch.tensor, "tensor")],
                         ids=["ch08_ex4-float", "ch08_ex4-tensor"])
def test_ch08_ex4_a_float_or_tensor_count_fails_the_type_check_alone(convert, said):
    failures = failed_checks("ch08_ex4", _student_params(convert))
    assert [r.check for r in failures] == ["every count is a Python int (the first check's calls)"]
    assert said in failures[0].reason and "Python int" in failures[0].reason
    results = run_checks("ch08_ex4", _student_params(convert), hidden=True, seed=11)
    lost = sum(r.max_points for r in results if not r.passed)
    assert 0 < lost <= 0.2 * get_exercise("ch08_ex4").points


def test_ch08_ex4_an_empty_dict_does_not_pass_the_type_check():
    """Issue 21: a type check that skips missing keys would pay an empty dict."""
    def transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
        return {}
    failed = {r.check for r in run_checks("ch08_ex4", transformer_parameters) if not r.passed}
    assert "every count is a Python int (the first check's calls)" in failed


def test_ch08_ex4_no_hint_states_a_count():
    ex = get_exercise("ch08_ex4")
    for text in [m.hint for m in ex.mistakes] + [c.hint for c in ex.checks]:
        assert " * " not in text and "5 *" not in text, text


def test_ch08_ex4_graded_cases_keep_what_the_checks_promise():
    from attention_course.checks.plan import hidden_seed
    checks = get_exercise("ch08_ex4").checks
    for seed in (11, 2026, 7, 5):
        untied, tied = (c.args for c in checks[0].make_calls(hidden_seed(seed, 0)))
        assert untied[:6] == tied[:6] and (untied[6], tied[6]) == ("none", "output") and untied[4] != untied[5]
        for call in checks[2].make_calls(hidden_seed(seed, 2)):
            assert call.args[6] == "all" and call.args[4] == call.args[5] and call.args[0] % call.args[1] == 0
        heads = [c.args for c in checks[3].make_calls(hidden_seed(seed, 3))]
        assert len({a[:1] + a[2:] for a in heads}) == 1 and len({a[1] for a in heads}) == 3


# ------------------------------------------------------------------ ch08_ex5

def _student_greedy(variant="correct"):
    class GreedyTransformer(tf.Transformer):
        @torch.no_grad()
        def greedy_decode(self, src, src_lens, max_len):
            memory = None if variant == "re-encode" else self.encode(src, src_lens)
            seqs = torch.ones(src.shape[0], 1, dtype=torch.long)
            tokens, rows = [], []
            done = torch.zeros(src.shape[0], dtype=torch.bool)
            for _ in range(max_len):
                mem = self.encode(src, src_lens) if variant == "re-encode" else memory
                logits, w = self.decode(seqs, mem, src_lens, return_weights=True)
                nxt = logits[:, -1].argmax(-1)
                if variant == "eos step cleared":
                    done = done | (nxt == 2)
                tok = torch.where(done, torch.zeros_like(nxt), nxt)
                if variant == "eos dropped":
                    tok = torch.where(nxt == 2, torch.zeros_like(nxt), tok)
                tokens.append(tok)
                rows.append(w[:, :, :, -1] * (~done).float()[:, None, None, None])
                done = done | (nxt == 2)
                seqs = torch.cat([seqs, nxt[:, None]], dim=1)
            out = torch.stack(tokens, 1)
            return (out.int() if variant == "int32" else out), torch.stack(rows, 3)
    return GreedyTransformer


def test_ch08_ex5_correct_answer_passes():
    passes_everywhere("ch08_ex5", _student_greedy())


@pytest.mark.parametrize("variant", ["int32", "eos dropped"])
def test_ch08_ex5_encode_once_hint_does_not_blame_encoding(variant):
    answer = _student_greedy(variant)
    failures = failed_checks("ch08_ex5", answer) + failed_checks("ch08_ex5", answer, 11)
    assert failures
    for r in failures:
        assert r.mistake != "encoder run at every step", r.line()
        assert not r.hint.startswith("call self.encode once"), r.line()
    once = [r for r in failures if r.check.startswith("the source is encoded once")]
    if variant == "int32":
        assert once and "dtype torch.int32" in once[0].reason
        assert once[0].hint == check_hint("ch08_ex5", "the source is encoded once")


def test_ch08_ex5_eos_step_cleared_is_a_kept_mistake():
    answer = _student_greedy("eos step cleared")
    public = failed_checks("ch08_ex5", answer)
    assert public and all(r.hint == mistake_hint("ch08_ex5", "<eos> step cleared too") for r in public)


def test_ch08_ex5_reencoding_still_gets_its_hint():
    public = failed_checks("ch08_ex5", _student_greedy("re-encode"))
    assert public and all(r.mistake == "encoder run at every step" for r in public)


def test_ch08_ex5_resetting_a_counter_of_its_own_does_not_pass_encoded_once():
    """Issue 21: the count of encode calls lived on the student's model, so resetting it passed."""
    class GreedyTransformer(tf.Transformer):
        def greedy_decode(self, src, src_lens, max_len):
            batch = src.shape[0]
            prefix = torch.ones(batch, 1, dtype=torch.long)
            tokens, rows = [], []
            for _ in range(max_len):
                self.encode_calls = 0          # the old counter's name, reset before every call
                memory = self.encode(src, src_lens)
                logits, weights = self.decode(prefix, memory, src_lens, return_weights=True)
                token = logits[:, -1].argmax(-1)
                tokens.append(token)
                rows.append(weights[:, :, :, -1])
                prefix = torch.cat([prefix, token[:, None]], dim=1)
            return torch.stack(tokens, 1), torch.stack(rows, 3)
    failed = {r.check for r in run_checks("ch08_ex5", GreedyTransformer) if not r.passed}
    assert "the source is encoded once (the model allows one call of encode)" in failed


# ------------------------------------------------------------------ ch08_ex7

def _counted_multiply_adds(model, batch, src_len, tgt_len):
    """Multiply-adds of one teacher-forced forward pass of a real model, by torch's FLOP counter
    (two FLOPs per multiply-add), on random tokens with source lengths that differ (padding)."""
    from torch.utils.flop_counter import FlopCounterMode
    g = torch.Generator().manual_seed(batch * 100 + src_len)
    src = torch.randint(3, 10, (batch, src_len), generator=g)
    src_lens = torch.randint(1, src_len + 1, (batch,), generator=g)
    src_lens[0] = src_len
    tgt_in = torch.randint(3, 10, (batch, tgt_len), generator=g)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(src, src_lens, tgt_in)
    flops = counter.get_total_flops()
    assert flops % 2 == 0
    return flops // 2


@pytest.mark.parametrize("sizes", [
    # batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens
    (32, 16, 16, 64, 4, 128, 2, 32, 64),        # the chapter's two models (tr.build_model's defaults)
    (3, 11, 4, 24, 3, 40, 3, 8, 12),
    (2, 5, 9, 16, 1, 24, 1, 20, 10),
])
def test_ch08_ex7_reference_counts_what_torchs_flop_counter_counts_on_the_real_models(sizes):
    """The counts the checks expect are those torch.utils.flop_counter measures on tf.Transformer and on
    Chapter 7's Seq2Seq with attention (the real classes, run on real tensors), not a formula checked
    against itself."""
    from attention_course import translation as tr
    batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size, num_hiddens = sizes
    tgt_vocab = len(tr.TARGET_VOCAB)
    torch.manual_seed(0)
    transformer = tf.Transformer(len(tr.SOURCE_VOCAB), tgt_vocab, d_model, num_heads, num_layers, d_ff)
    if (embed_size, num_hiddens) == (32, 64):
        bahdanau = tr.build_model(attention=True)
    else:
        bahdanau = tr.Seq2Seq(tr.Encoder(len(tr.SOURCE_VOCAB), embed_size, num_hiddens),
                              tr.AttentionDecoder(tgt_vocab, embed_size, num_hiddens))
    want = get_exercise("ch08_ex7").reference(*sizes, tgt_vocab)
    assert want == {"transformer": _counted_multiply_adds(transformer, batch, src_len, tgt_len),
                    "bahdanau": _counted_multiply_adds(bahdanau, batch, src_len, tgt_len)}


def _student_counts(flops=False, as_float=False, output_over_source=False):
    """A student's answer, written out layer by layer."""
    def forward_multiply_adds(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, embed_size,
                              num_hiddens, tgt_vocab):
        d, h, hd = d_model, num_hiddens, d_model // num_heads
        enc = 0
        for _ in range(num_layers):
            enc += 3 * src_len * d * d + num_heads * 2 * src_len * src_len * hd + src_len * d * d
            enc += src_len * d * d_ff + src_len * d_ff * d
        dec = 0
        for _ in range(num_layers):
            dec += 3 * tgt_len * d * d + num_heads * 2 * tgt_len * tgt_len * hd + tgt_len * d * d
            dec += tgt_len * d * d + 2 * src_len * d * d + num_heads * 2 * tgt_len * src_len * hd + tgt_len * d * d
            dec += 2 * tgt_len * d * d_ff
        out_positions = src_len if output_over_source else tgt_len
        transformer = batch * (enc + dec + out_positions * d * tgt_vocab)
        encoder = src_len * (3 * h * embed_size + 3 * h * h) + src_len * h * h
        step = h * h + src_len * h + src_len * h + 3 * h * (embed_size + h) + 3 * h * h + 2 * h * tgt_vocab
        bahdanau = batch * (encoder + tgt_len * step)
        counts = {"transformer": transformer, "bahdanau": bahdanau}
        if flops:
            counts = {k: 2 * v for k, v in counts.items()}
        if as_float:
            counts = {k: float(v) for k, v in counts.items()}
        return counts
    return forward_multiply_adds


def test_ch08_ex7_an_answer_written_layer_by_layer_passes():
    passes_everywhere("ch08_ex7", _student_counts())


@pytest.mark.parametrize("variant", [dict(flops=True), dict(output_over_source=True)])
def test_ch08_ex7_other_wrong_counts_get_the_checks_neutral_hint(variant):
    """FLOPs (two per multiply-add) and an output layer over the source positions match no kept mistake:
    they fail the public checks (those whose source and target lengths differ, for the output layer) with
    the check's own hint, which blames nothing."""
    failed = failed_checks("ch08_ex7", _student_counts(**variant))
    assert len(failed) == (3 if variant.get("flops") else 2)
    for r in failed:
        assert r.mistake is None and r.hint == check_hint("ch08_ex7", r.check), (r.check, r.mistake)


def test_ch08_ex7_a_float_with_the_right_value_is_told_the_contract_asks_for_an_int():
    failed = failed_checks("ch08_ex7", _student_counts(as_float=True))
    assert len(failed) == 3
    assert all("has the right value but is a float" in r.reason for r in failed), [r.reason for r in failed]


def test_ch08_ex7_a_small_slip_in_a_large_count_is_caught():
    """The comparison is exact: a count off by one multiply-add in billions fails."""
    right = _student_counts()

    def off_by_one(*args):
        counts = right(*args)
        return {"transformer": counts["transformer"] + 1, "bahdanau": counts["bahdanau"]}
    assert len(failed_checks("ch08_ex7", off_by_one)) == 3


def test_ch08_ex7_check_hints_describe_rather_than_blame():
    from exercise_helpers import BLAMING
    for check in get_exercise("ch08_ex7").checks:
        assert not any(word in check.hint.lower() for word in BLAMING), check.name


def test_ch08_ex7_statement_does_not_print_the_counts_or_name_the_flop_counter():
    """The exercise is the accounting: the statement gives the rule for one product, not the models' totals,
    and does not point to the tool that measures them."""
    text = statement("ch08_ex7")
    assert "FlopCounter" not in text and "flop_counter" not in text
    assert "src_len * src_len" not in text and "tgt_len * src_len" not in text
