"""Regression tests of chapter 7's exercises (Bahdanau attention), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch07_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

Found by independent solvers: a score promised as a Python float (ch07_ex4); an answer whose
output carries no gradient to the inputs is told so plainly (ch07_ex1). Found by the review of
issue 19: ch07_ex4's reversed comparison was not named. Found by a later independent solver: a
comparison of positions[i] with i was told it counted only strict increases (ch07_ex4). Issue 41
replaced ch07_ex3 (a greedy decoder, a retype of the printed loop) by a beam search: its
hand-made cases are tested here at 30 grading seeds, and an enumeration of every hypothesis
agrees with it where the beam keeps every candidate. A blind solver then found that a pool of
finished hypotheses (the beam refilled with unfinished ones) passed every check, and that a
shrinking beam, every finished candidate kept, length-normalised scores and bos left out got no
hint of their own: each is now kept, with a check that separates it.
"""
import itertools
import json

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


# ---- ch07_ex3: beam search (a transfer of the section on beam search), written by hand as a student would

def _beam_search(prefer_later=False, per_hypothesis=None, drop_finished=False, past_eos=False,
                 count_eos=True, steps=0, keep_all_finished=False, per_token=False, skip_bos=False):
    """A student's beam_search; every argument other than prefer_later makes it wrong on purpose.
    ``prefer_later`` breaks ties the other way (both tie rules are correct)."""
    def value(c):
        return c[1] / len(c[0]) if per_token and c[0] else c[1]

    def beam_search(log_probs, bos, eos, beam_size, max_len):
        beam = {(): 0.0}
        for t in range(max_len + steps):
            grown = []
            for hyp, score in beam.items():
                if hyp and hyp[-1] == eos and not past_eos:
                    if not drop_finished:
                        grown.append((hyp, score))
                    continue
                row = log_probs[min(t, len(log_probs) - 1), hyp[-1] if hyp else bos]
                mine = [(hyp + (v,), score + (float(row[v]) if v != eos or count_eos else 0.0))
                        for v in range(len(row)) if not (drop_finished and v == eos)
                        and not (skip_bos and v == bos)]
                if per_hypothesis:
                    mine = sorted(mine, key=lambda c: -c[1])[:per_hypothesis]
                grown += mine
            order = sorted(grown, key=lambda c: (value(c), c[0] if prefer_later else ()), reverse=True)
            beam = dict(order if per_hypothesis else order[:beam_size])
            if keep_all_finished:
                beam.update((h, s) for h, s in order[beam_size:] if h[-1] == eos)
        best = max(beam, key=lambda h: (value((h, beam[h])), h if prefer_later else ()))
        return list(best), beam[best]
    return beam_search


def _set_aside(shrink):
    """A student's beam_search that moves each finished hypothesis out of the beam into a list of
    its own; with ``shrink`` the beam also gives up a place for it, without it the beam is refilled
    with unfinished ones. Both are wrong: the contract keeps finished hypotheses in the beam."""
    def beam_search(log_probs, bos, eos, beam_size, max_len):
        done, live, width = [], [((), 0.0)], beam_size
        for t in range(max_len):
            if width <= 0 or not live:
                break
            options = []
            for hyp, score in live:
                row = log_probs[t, hyp[-1] if hyp else bos]
                options += [(hyp + (v,), score + float(row[v])) for v in range(len(row))]
            options.sort(key=lambda c: c[1], reverse=True)
            ended = [c for c in options[:width] if c[0][-1] == eos]
            done += ended
            if shrink:
                width -= len(ended)
                live = [c for c in options[:width + len(ended)] if c[0][-1] != eos]
            else:
                live = [c for c in options if c[0][-1] != eos][:width]
        hyp, score = max(done + live, key=lambda c: c[1])
        return list(hyp), score
    return beam_search


def _brute_force(log_probs, bos, eos, beam_size, max_len):
    """The most probable hypothesis of all: every sequence of max_len tokens, and every shorter one
    that ends with its only eos, scored token by token (beam_size is ignored)."""
    vocab_size = log_probs.shape[-1]
    best = None
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(vocab_size), repeat=n):
            if eos in seq[:-1] or (n < max_len and seq[-1] != eos):
                continue
            score = sum(float(log_probs[t, a, b]) for t, (a, b) in enumerate(zip((bos,) + seq, seq)))
            if best is None or score > best[1]:
                best = (list(seq), score)
    return best


def _greedy(log_probs, bos, eos, max_len):
    tokens, score = [], 0.0
    while len(tokens) < max_len and (not tokens or tokens[-1] != eos):
        row = log_probs[len(tokens), tokens[-1] if tokens else bos]
        tokens.append(int(row.argmax()))
        score += float(row.max())
    return tokens, score


def _same(answer, other):
    """The same tokens, and scores equal up to float64 rounding."""
    return answer[0] == other[0] and abs(answer[1] - other[1]) < 1e-9


def _calls(check_name_start, seed):
    from attention_course.checks.registry import get_exercise
    check = next(c for c in get_exercise("ch07_ex3").checks if c.name.startswith(check_name_start))
    return check.make_calls(check.seed if seed is None else seed)


SEEDS_30 = [None] + list(range(30))


def test_ch07_ex3_a_correct_answer_by_hand_passes_everywhere():
    passes_everywhere("ch07_ex3", _beam_search())
    passes_everywhere("ch07_ex3", _beam_search(prefer_later=True))


def test_ch07_ex3_the_statement_asks_for_what_the_chapter_does_not_print():
    """Issue 41: ch07_ex3 was a retype of the printed Seq2Seq.greedy; it is now a transfer. The chapter
    describes beam search and enumerates a made-up model's outputs, but prints no search."""
    text = " ".join(statement("ch07_ex3").split())
    for clause in ("beam_search(log_probs, bos, eos, beam_size, max_len)",
                   "every finished hypothesis of the beam, unchanged", "the `beam_size` candidates with the highest scores", "whose log-probability counts",
                   "No hypothesis gets more than `max_len` tokens", "finished or not", "either may be kept"):
        assert clause in text, clause
    from exercise_helpers import ROOT
    cells = json.loads((ROOT / "solutions" / "07_bahdanau.ipynb").read_text())["cells"]
    printed = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"
                      and "BEGIN SOLUTION" not in "".join(c["source"]))
    printed = printed.replace('check("ch07_ex3", beam_search)', "")
    assert "beam_search" not in printed and "beam_size" not in printed


def test_ch07_ex3_with_a_beam_wide_enough_the_answer_is_the_brute_force_optimum():
    """Enumerating every hypothesis passes the check whose beam keeps every candidate, at every
    seed, and fails the checks whose beam is narrower: the checks compare with a search, not with
    the optimum."""
    for seed in SEEDS_30:
        for call in _calls("a beam wide enough", seed):
            assert _same(_brute_force(*call.args), _beam_search()(*call.args)), seed
    failed = {r.check for r in failed_checks("ch07_ex3", _brute_force)}
    assert failed == {"a table where a beam of 2 beats greedy decoding (beam_size 1 and 2)",
                      "a hypothesis cut from a beam of 2 wins in a beam of 4",
                      "a finished hypothesis pushed out of the beam is lost"}, failed


def test_ch07_ex3_every_hand_made_case_shows_what_its_check_says_at_every_seed():
    """The public cases, and the same cases renamed and shaken at 30 grading seeds."""
    search = _beam_search()
    for seed in SEEDS_30:
        greedy_run, beam_run = _calls("a table where a beam of 2", seed)
        lp, bos, eos, _, max_len = greedy_run.args
        assert _same(search(*greedy_run.args), _greedy(lp, bos, eos, max_len)), seed
        assert _same(search(*beam_run.args), _brute_force(*beam_run.args)), seed
        assert search(*beam_run.args)[1] > search(*greedy_run.args)[1] + 0.3, seed

        for call in _calls("a finished hypothesis stays", seed):
            tokens, _ = search(*call.args)
            max_len, eos = call.args[4], call.args[2]
            assert len(tokens) == 2 and tokens[-1] == eos, seed       # finished at step 2 of 4 ...
            assert _beam_search(past_eos=True)(*call.args)[0] != tokens, seed   # ... and what follows eos matters
            assert len(_beam_search(drop_finished=True)(*call.args)[0]) == max_len, seed

        narrow, wide = _calls("a hypothesis cut from", seed)[:2]
        assert _same(search(*wide.args), _brute_force(*wide.args)), seed
        assert search(*wide.args)[1] > search(*narrow.args)[1] + 0.5, seed

        two_wide, one_wide, overtaken, _ = _calls("a finished hypothesis pushed out", seed)
        eos = two_wide.args[2]
        assert len(search(*two_wide.args)[0]) == 3, seed    # [eos] is lost to the beam ...
        set_aside = _set_aside(shrink=False)(*two_wide.args)
        assert set_aside[0] == [eos] and set_aside[1] > search(*two_wide.args)[1] + 0.1, seed  # ... yet scores more
        assert len(search(*one_wide.args)[0]) == 3, seed
        assert _beam_search(keep_all_finished=True)(*one_wide.args)[0] == [eos], seed
        assert len(search(*overtaken.args)[0]) == 3, seed
        assert search(*overtaken.args)[1] > _set_aside(shrink=True)(*overtaken.args)[1] + 0.1, seed

        for call in _calls("max_len stops", seed):
            tokens, _ = search(*call.args)
            lp, _, eos, _, max_len = call.args
            assert len(tokens) == max_len and eos not in tokens and lp.shape[0] > max_len, seed


def test_ch07_ex3_no_check_depends_on_a_tie():
    """The statement accepts any tie rule: answers that break ties opposite ways agree on every call."""
    from attention_course.checks.registry import get_exercise
    first, later = _beam_search(), _beam_search(prefer_later=True)
    for check in get_exercise("ch07_ex3").checks:
        for seed in SEEDS_30:
            for call in check.make_calls(check.seed if seed is None else seed):
                assert first(*call.args) == later(*call.args), (check.name, seed)


@pytest.mark.parametrize("wrong,mistake", [
    (dict(per_hypothesis=2), None),
    (dict(per_hypothesis=1), "one extension per hypothesis"),
    (dict(drop_finished=True), "finished hypotheses dropped"),
    (dict(past_eos=True), "finished hypotheses extended past eos"),
    (dict(count_eos=False), "eos not counted"),
    (dict(steps=1), "one step too many"),
    (dict(keep_all_finished=True), "every finished hypothesis kept whatever its rank"),
    (dict(per_token=True), "length-normalised scores"),
    (dict(skip_bos=True), "bos never a candidate token"),
])
def test_ch07_ex3_a_wrong_search_by_hand_fails_publicly_with_its_hint(wrong, mistake):
    answer = _beam_search(**wrong)
    if mistake:
        assert_mistake("ch07_ex3", answer, mistake)
    else:   # keeping the best two extensions of each hypothesis equals the kept mistake's rule only at beam_size 2
        assert failed_checks("ch07_ex3", answer)
    assert failed_hidden_somewhere("ch07_ex3", answer)


@pytest.mark.parametrize("shrink,mistake", [(False, "finished hypotheses moved to a pool"),
                                             (True, "finished hypotheses leave a shrinking beam")])
def test_ch07_ex3_finished_hypotheses_set_aside_fail_publicly_with_their_hint(shrink, mistake):
    """A blind solver's loophole: a pool of finished hypotheses, the beam refilled with unfinished
    ones, passed every check; a beam that shrinks instead got the hint of dropped hypotheses."""
    answer = _set_aside(shrink)
    assert_mistake("ch07_ex3", answer, mistake)
    assert failed_hidden_somewhere("ch07_ex3", answer)
    failed = {r.check for r in failed_checks("ch07_ex3", answer)}
    assert "a finished hypothesis pushed out of the beam is lost" in failed, failed


def test_ch07_ex3_the_new_mistakes_have_hints_of_their_own():
    """Each of the blind solver's wrong answers is named by its own hint, none by another's."""
    hints = [mistake_hint("ch07_ex3", name) for name in (
        "finished hypotheses moved to a pool", "finished hypotheses leave a shrinking beam",
        "every finished hypothesis kept whatever its rank", "length-normalised scores",
        "bos never a candidate token", "finished hypotheses dropped",
        "top beam_size of each hypothesis, no cut over the whole beam", "one extension per hypothesis")]
    assert len(set(hints)) == len(hints)
    assert "pool" in hints[0] and "lost its place" in hints[1] and "divided by their length" in hints[3]


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
