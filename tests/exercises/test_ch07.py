"""Regression tests of chapter 7's exercises (Bahdanau attention), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch07_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

Found by independent solvers: a score promised as a Python float (ch07_ex4); an answer whose
output carries no gradient to the inputs is told so plainly (ch07_ex1). Found by the review of
issue 19: ch07_ex3's public checks never made the model predict <eos> (an answer that stopped
there, or padded after it, passed them all); ch07_ex4's reversed comparison was not named.
Found by a later independent solver: a loop that stopped when every sequence predicted <eos>
at the same step passed every check (ch07_ex3); a comparison of positions[i] with i was told
it counted only strict increases (ch07_ex4).
"""
import pytest
import torch
from torch import nn

from attention_course.checks.checking import run_checks
from exercise_helpers import (assert_mistake, failed_checks, failed_hidden_somewhere, mistake_hint,
                              passes_everywhere, statement)


# ---- ch07_ex1: coverage (a transfer of the decoder step), written by hand as a student would

def _coverage_decoder(accumulate="sum", in_place=False):
    """A student's CoverageDecoder; ``accumulate`` and ``in_place`` make it wrong on purpose."""

    class CoverageDecoder(nn.Module):
        def __init__(self, embed_size, num_hiddens):
            super().__init__()
            self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
            self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
            self.w_c = nn.Linear(1, num_hiddens, bias=False)
            self.w_v = nn.Linear(num_hiddens, 1, bias=False)
            self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

        def forward(self, h0, embedded, enc_outputs, valid_lens):
            num_steps = enc_outputs.shape[1]
            pad = torch.arange(num_steps).unsqueeze(0) >= valid_lens.unsqueeze(1)
            s, cov = h0, torch.zeros(h0.shape[0], num_steps)
            states, weights = [], []
            for i in range(embedded.shape[1]):
                feats = torch.tanh(self.W_q(s).unsqueeze(1) + self.W_k(enc_outputs) + self.w_c(cov.unsqueeze(2)))
                a = self.w_v(feats).squeeze(2).masked_fill(pad, -float("inf")).softmax(dim=1)
                s = self.cell(torch.cat([embedded[:, i], (a.unsqueeze(2) * enc_outputs).sum(1)], 1), s)
                if accumulate == "last":
                    cov = a
                elif accumulate == "mean":
                    cov = (cov * i + a) / (i + 1)
                elif in_place:
                    cov += a
                else:
                    cov = cov + a
                states.append(s)
                weights.append(a)
            return torch.stack(states, 1), torch.stack(weights, 1), cov

    return CoverageDecoder


def test_ch07_ex1_a_correct_answer_by_hand_passes_everywhere():
    passes_everywhere("ch07_ex1", _coverage_decoder())


def test_ch07_ex1_the_statement_asks_for_what_the_chapter_does_not_print():
    """Issue 19: ch07_ex1 was a retype of the printed decoder step; it is now a transfer."""
    text = " ".join(statement("ch07_ex1").split())
    for clause in ("CoverageDecoder", "w_c", "inside the tanh", "at the output steps before `i` (zero at step 0)",
                   "the sum of the weights of all `num_outputs` steps", "differentiable"):
        assert clause in text, clause


def test_ch07_ex1_coverage_of_the_last_step_only_gets_its_hint():
    assert_mistake("ch07_ex1", _coverage_decoder(accumulate="last"), "coverage not accumulated")


def test_ch07_ex1_a_mean_in_place_of_the_sum_fails_the_public_checks():
    failed = failed_checks("ch07_ex1", _coverage_decoder(accumulate="mean"))
    assert {r.check for r in failed} >= {"3 sequences with padding, 4 output steps over 6 encoder steps",
                                         "a large w_c, and a sequence of one valid encoder step"}


def test_ch07_ex1_coverage_updated_in_place_fails_the_gradient_check():
    """cov += a changes a tensor autograd saved for w_c: the forward pass runs, the gradients fail."""
    in_place = _coverage_decoder(in_place=True)
    assert not failed_checks("ch07_ex1", in_place)
    for seed in (11, 2026):
        failed = failed_checks("ch07_ex1", in_place, seed)
        assert [r.check for r in failed] == ["random sizes, and gradients reach the inputs (hidden)"], \
            [r.line() for r in failed]


def test_ch07_ex1_no_gradient_to_the_inputs_is_said_plainly():
    class NoGrad(_coverage_decoder()):
        @torch.no_grad()
        def forward(self, *args):
            return super().forward(*args)

    failed = [r for r in run_checks("ch07_ex1", NoGrad, hidden=True, seed=11) if not r.passed]
    assert failed and all("no gradient reaches the inputs" in r.reason for r in failed), \
        [r.line() for r in failed]


# ---- ch07_ex3: a model that predicts <eos> early, written by hand as a student would

EOS_CHECK = "a model that predicts <eos> early in every sequence"


def _eos_check_calls(seed):
    from attention_course.checks.registry import get_exercise
    return next(c for c in get_exercise("ch07_ex3").checks if c.name == EOS_CHECK).make_calls(seed)


def _greedy_decoder(after_eos="run on"):
    """A student's GreedyDecoder; ``after_eos`` other than "run on" is a mistake."""
    from attention_course.translation import AttentionDecoder

    class GreedyDecoder(AttentionDecoder):
        def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
            state, token = h0, torch.full((len(h0),), bos, dtype=torch.long)
            finished = torch.zeros(len(h0), dtype=torch.bool)
            tokens, weights = [], []
            while len(tokens) < max_len:
                logits, state, w = self.step(state, token, enc_outputs, valid_lens)
                token = logits.argmax(-1)
                if after_eos == "pad":
                    token = torch.where(finished, torch.zeros_like(token), token)
                elif after_eos == "repeat eos":
                    token = torch.where(finished, torch.full_like(token, 2), token)
                tokens.append(token)
                weights.append(w)
                finished = finished | (token == 2)
                if after_eos == "stop" and finished.all():
                    break
                if after_eos == "stop when all at once" and (token == 2).all():
                    break
            return torch.stack(tokens, 1), torch.stack(weights, 1)

    return GreedyDecoder


def test_ch07_ex3_every_sequence_of_the_eos_check_predicts_eos_then_goes_on():
    """The check's model, at any seed: <eos> before the last three steps, then neither <eos> nor pad;
    in the first batch not all at one step, in the second all at one step."""
    decoder_class = _greedy_decoder()
    for seed in range(30):
        first_steps = []
        for call in _eos_check_calls(seed):
            decoder = decoder_class(*call.init_args)
            decoder.load_state_dict(call.state_dict)
            with torch.no_grad():
                tokens, _ = decoder.greedy(*call.args)
            first_steps.append({row.index(2) for row in tokens.tolist()})
            for row in tokens.tolist():
                first = row.index(2)
                assert first <= len(row) - 4, (seed, row)
                assert all(t not in (0, 2) for t in row[first + 1:]), (seed, row)
        assert [len(steps) > 1 for steps in first_steps] == [True, False], (seed, first_steps)


@pytest.mark.parametrize("after_eos,hint_of", [("stop", "stopped at <eos>"),
                                               ("stop when all at once",
                                                "stopped when every sequence predicts <eos> at the same step"),
                                               ("pad", "padding after <eos>, fed back"),
                                               ("repeat eos", None)])
def test_ch07_ex3_stopping_or_padding_at_eos_fails_publicly_and_at_every_hidden_seed(after_eos, hint_of):
    answer = _greedy_decoder(after_eos)
    failed = failed_checks("ch07_ex3", answer)
    assert [r.check for r in failed] == [EOS_CHECK], [r.line() for r in failed]
    if hint_of:
        assert failed[0].hint == mistake_hint("ch07_ex3", hint_of)
        assert "<eos>" in failed[0].hint and "each step is fed" not in failed[0].hint
    for seed in (11, 2026):
        assert EOS_CHECK in {r.check for r in failed_checks("ch07_ex3", answer, seed)}, (after_eos, seed)
    # At every seed the check's calls tell the answer from a correct one (running the whole
    # hidden check 30 times per answer would take a minute).
    correct = _greedy_decoder()
    for seed in range(30):
        differs = False
        for call in _eos_check_calls(seed):
            outputs = []
            for decoder_class in (answer, correct):
                decoder = decoder_class(*call.init_args)
                decoder.load_state_dict(call.state_dict)
                with torch.no_grad():
                    outputs.append(decoder.greedy(*call.args))
            (tokens, weights), (want_tokens, want_weights) = outputs
            differs = differs or tokens.shape != want_tokens.shape or not torch.equal(tokens, want_tokens)
        assert differs, (after_eos, seed)


def test_ch07_ex3_stopping_when_every_sequence_predicts_eos_at_once_gets_its_hint_at_30_hidden_seeds():
    """An independent solver's loop broke when all sequences predicted <eos> at the same step;
    no check had such a step, so it passed everything."""
    answer = _greedy_decoder("stop when all at once")
    hint = mistake_hint("ch07_ex3", "stopped when every sequence predicts <eos> at the same step")
    assert "at once" in hint and "fewer than max_len" in hint
    for seed in range(30):
        failed = failed_checks("ch07_ex3", answer, seed)
        assert EOS_CHECK in {r.check for r in failed}, (seed, [r.line() for r in failed])
        assert next(r.hint for r in failed if r.check == EOS_CHECK) == hint, (seed, [r.line() for r in failed])
        # A random model may make every sequence predict <eos> at its first step; there the
        # two stopping mistakes look alike, and either hint says the loop stopped early.
        assert all("fewer than max_len steps" in r.hint for r in failed), (seed, [r.line() for r in failed])


def test_ch07_ex3_a_correct_answer_by_hand_passes_everywhere():
    passes_everywhere("ch07_ex3", _greedy_decoder())



# Issue 40: an argmax over the batch axis got only the checks' generic hints.
def _greedy_decoder_argmax_over_axis_0():
    from attention_course.translation import AttentionDecoder

    class GreedyDecoder(AttentionDecoder):
        def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
            token = torch.tensor([bos] * h0.shape[0])
            state, tokens, weights = h0, [], []
            for _ in range(max_len):
                logits, state, w = self.step(state, token, enc_outputs, valid_lens)
                token = torch.argmax(logits, 0)          # the batch axis, not the vocabulary
                tokens.append(token)
                weights.append(w)
            return torch.stack(tokens, 1), torch.stack(weights, 1)

    return GreedyDecoder


def test_ch07_ex3_argmax_over_the_batch_axis_is_named_with_the_shapes():
    answer = _greedy_decoder_argmax_over_axis_0()
    assert_mistake("ch07_ex3", answer, "argmax over the batch axis")
    hint = mistake_hint("ch07_ex3", "argmax over the batch axis")
    assert "(batch, vocab_size)" in hint and "(vocab_size,)" in hint and "(batch,)" in hint
    assert failed_hidden_somewhere("ch07_ex3", answer)


# ---- ch07_ex4: the score is a Python float

def _hard_alignment(score_as):
    def hard_alignment(weights):
        if not isinstance(weights, torch.Tensor) or weights.dim() != 2 or 0 in weights.shape:
            raise ValueError(f"weights must be a non-empty 2-D tensor, got {weights!r:.40}")
        positions = weights.argmax(dim=-1)
        pairs = positions.numel() - 1
        share = 1.0 if pairs == 0 else (positions[1:] >= positions[:-1]).sum().item() / pairs
        return positions, score_as(share)
    return hard_alignment


def test_ch07_ex4_monotonicity_must_be_a_python_float():
    as_float = _hard_alignment(float)
    assert all(r.passed for r in run_checks("ch07_ex4", as_float))
    as_tensor = _hard_alignment(lambda v: torch.tensor(v, dtype=torch.float64))
    failed = [r for r in run_checks("ch07_ex4", as_tensor) if not r.passed]
    assert [r.check for r in failed] == ["the score is a Python float"], [r.line() for r in failed]
    assert "Python float" in failed[0].reason and "tensor" in failed[0].reason


def test_ch07_ex4_a_constant_float_does_not_pass_the_type_check():
    """Issue 21: the check of the score's type accepted any float, so a constant earned its points."""
    def hard_alignment(weights):
        if weights.dim() != 2 or weights.numel() == 0:
            raise ValueError(f"weights must be a non-empty 2-D tensor, got shape {tuple(weights.shape)}")
        return weights.argmax(dim=-1), 0.5
    failed = {r.check for r in run_checks("ch07_ex4", hard_alignment) if not r.passed}
    assert "the score is a Python float" in failed


# ---- ch07_ex4: a reversed comparison is named as such

def test_ch07_ex4_a_reversed_comparison_gets_its_own_hint():
    """Issue 19: counting the pairs that do not increase was told 'you counted only strict increases'."""
    assert_mistake("ch07_ex4", _pairs_counted(lambda earlier, later: earlier >= later), "reversed comparison",
                   must_not=("strict",))


def test_ch07_ex4_one_minus_the_non_increasing_share_is_told_it_counts_strict_increases():
    answer = _pairs_counted(lambda earlier, later: ~(later <= earlier))
    assert_mistake("ch07_ex4", answer, "strictly increasing")
    assert "1 minus" in mistake_hint("ch07_ex4", "strictly increasing")


def _pairs_counted(counts):
    def hard_alignment(weights):
        if weights.dim() != 2 or 0 in weights.shape:
            raise ValueError(f"weights must be 2-D and non-empty, got {tuple(weights.shape)}")
        best = weights.argmax(1)
        if len(best) == 1:
            return best, 1.0
        return best, counts(best[:-1], best[1:]).float().mean().item()
    return hard_alignment


# ---- ch07_ex4: a comparison with the step index (the diagonal) is named as such

@pytest.mark.parametrize("pair_index", ["step i", "pair i"])
def test_ch07_ex4_comparing_with_the_step_index_gets_its_own_hint(pair_index):
    """An independent solver's answer compared positions[i] with i, not with positions[i - 1]; it was
    told it counted only strict increases."""
    offset = 0 if pair_index == "step i" else 1   # positions[i] >= i, or positions[i + 1] >= i

    def hard_alignment(weights):
        if weights.dim() != 2 or 0 in weights.shape:
            raise ValueError(f"weights must be 2-D and non-empty, got {tuple(weights.shape)}")
        positions = weights.argmax(dim=1)
        n = len(positions)
        if n == 1:
            return positions, 1.0
        return positions, sum(int(positions[i]) >= i - offset for i in range(1, n)) / (n - 1)

    assert_mistake("ch07_ex4", hard_alignment, "compared with the step index instead of the previous position",
                   must_not=("strict",))
    assert failed_hidden_somewhere("ch07_ex4", hard_alignment)
