"""ch07_ex3: Beam search over a table of next-token log-probabilities.

Write `beam_search(log_probs, bos, eos, beam_size, max_len)`, the beam search of the section
on beam search, for a small model whose next token depends only on its position and on the
token before it: `log_probs` is a `torch.float64` tensor of shape
`(num_positions, vocab_size, vocab_size)`, with `num_positions >= max_len`, and
`log_probs[t, a, b]` is the log-probability that the token at position `t` (counted from 0) is
`b` when the token before it is `a` (the exponentials of every row `log_probs[t, a]` sum to 1).
`bos` and `eos` are the indices of `<bos>` and `<eos>`; `beam_size` and `max_len` are positive
Python ints.

A *hypothesis* is a list of tokens that follows `<bos>` (which it does not include). Its score is
the sum of the log-probabilities of its tokens, each given the token before it (`bos` before the
first): `log_probs[0, bos, y[0]] + log_probs[1, y[0], y[1]] + ...`. It is *finished* when its
last token is `eos`, whose log-probability counts in the score like any other token's.

Start from a beam that holds one hypothesis, the empty one (score 0), and repeat `max_len`
times: the candidates are every finished hypothesis of the beam, unchanged, and every unfinished
one extended by each token of the vocabulary (`0` to `vocab_size - 1`, `eos` and `bos` included);
the new beam is the `beam_size` candidates with the highest scores (all of them when there are
fewer). A finished hypothesis is never extended again, so it stays in the beam as long as fewer
than `beam_size` candidates score higher. No hypothesis gets more than `max_len` tokens; one that
has `max_len` tokens without `eos` stays unfinished. Return the pair `(tokens, score)` of the
hypothesis with the highest score in the last beam, finished or not: `tokens` a Python list of
ints (ending with `eos` when it is finished) and `score` its score, a Python float. When two
candidates tie, either may be kept: no check depends on a tie.
"""
from __future__ import annotations

import heapq
import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def beam_search(log_probs, bos, eos, beam_size, max_len):
    """The best hypothesis of a beam search of width beam_size, over max_len steps."""
    beam = [([], 0.0)]
    for t in range(max_len):
        candidates = []
        for tokens, score in beam:
            if tokens and tokens[-1] == eos:
                candidates.append((tokens, score))              # finished: carried unchanged
                continue
            row = log_probs[t, tokens[-1] if tokens else bos].tolist()
            candidates.extend((tokens + [b], score + lp) for b, lp in enumerate(row))
        candidates.sort(key=lambda c: c[1], reverse=True)
        beam = candidates[:beam_size]
    best_tokens, best_score = max(beam, key=lambda c: c[1])
    return best_tokens, float(best_score)


# Inputs of the public and hidden checks ---------------------------------------------------


def _table(g, num_positions, vocab_size, rows, jitter):
    """A table of log-probabilities: rows[(t, a)] = {b: probability} sets those entries; the rest
    of each row shares what is left in proportion to small random numbers. jitter > 0 multiplies
    every probability by exp(jitter * noise) before the rows are normalised again."""
    base = 0.2 + torch.rand(num_positions, vocab_size, vocab_size, generator=g, dtype=torch.float64)
    probs = torch.empty_like(base)
    for t in range(num_positions):
        for a in range(vocab_size):
            given = rows.get((t, a), {})
            rest = [b for b in range(vocab_size) if b not in given]
            left = 1.0 - sum(given.values())
            for b, p in given.items():
                probs[t, a, b] = p
            if rest:
                probs[t, a, rest] = left * base[t, a, rest] / base[t, a, rest].sum()
    if jitter:
        probs = probs * torch.exp(jitter * torch.randn(probs.shape, generator=g, dtype=torch.float64))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs.log()


def _relabelled(g, log_probs, bos, eos):
    """The same model with its tokens renamed by a random permutation (drawn from g)."""
    perm = torch.randperm(log_probs.shape[1], generator=g)          # old token a -> new perm[a]
    inverse = torch.argsort(perm)
    return log_probs[:, inverse][:, :, inverse].contiguous(), int(perm[bos]), int(perm[eos])


def _hand_made(seed, public_seed, num_positions, vocab_size, rows, bos, eos, runs):
    """The hand-made case at its public seed; at any other seed its tokens renamed at random and
    its probabilities shaken a little (what the case tests holds: tests/exercises/test_ch07.py)."""
    g = gen(seed)
    public = seed == public_seed
    log_probs = _table(g, num_positions, vocab_size, rows, jitter=0.0 if public else 0.04)
    if not public:
        log_probs, bos, eos = _relabelled(g, log_probs, bos, eos)
    return [Call(args=(log_probs, bos, eos, beam_size, max_len)) for beam_size, max_len in runs]


# Tokens of the hand-made tables: <bos> 0, <eos> 1, then ordinary tokens A = 2, B = 3, C = 4.
_A, _B, _C = 2, 3, 4


def _greedy_beaten(seed):
    # Greedy takes A (0.5) and then <eos> (0.4): 0.20. A beam of 2 also keeps B (0.4), whose <eos>
    # (0.9) gives 0.36. A third step changes nothing: both are finished.
    rows = {(0, 0): {_A: 0.5, _B: 0.4, 1: 0.06},
            (1, _A): {1: 0.4, _A: 0.28, _B: 0.26}, (1, _B): {1: 0.9, _A: 0.04, _B: 0.03}}
    return _hand_made(seed, 0, 3, 4, rows, 0, 1, runs=[(1, 3), (2, 3)])


def _finished_kept(seed):
    # After step 2 the beam of 2 holds [A, <eos>] (0.30, finished) and [A, B] (0.18). [A, B] goes on
    # to [A, B, C, <eos>] (0.154); [A, <eos>] stays in the beam and wins. After <eos>, A is likely
    # (0.97), so a search that extends finished hypotheses ends elsewhere.
    rows = {(0, 0): {_A: 0.6, _B: 0.3, 1: 0.04},
            (1, _A): {1: 0.5, _B: 0.3, _C: 0.1}, (1, _B): {_C: 0.5, 1: 0.1, _A: 0.2},
            (2, _B): {_C: 0.9, 1: 0.04}, (2, 1): {_A: 0.97}, (2, _C): {1: 0.5, _A: 0.3},
            (3, _C): {1: 0.95}, (3, _A): {1: 0.9}}
    return _hand_made(seed, 1, 4, 5, rows, 0, 1, runs=[(2, 4), (3, 4)])


def _cut_table(seed, public_seed, runs):
    # A beam of 2 keeps [A, A] (0.26) and [B, C] (0.242) and ends with [A, A, A] (0.078); [B, <eos>]
    # (0.1848) is fourth after the second step, cut from a beam of 2, kept by a beam of 4, and wins.
    # [A, B, A] (0.0936) is the best hypothesis of three tokens, and <eos> is mostly followed by A.
    rows = {(0, 0): {_A: 0.52, _B: 0.44},
            (1, _A): {_A: 0.5, _B: 0.4}, (1, _B): {_C: 0.55, 1: 0.42},
            (2, _A): {_A: 0.3, _B: 0.28, 1: 0.27}, (2, _C): {1: 0.26, _A: 0.25, _B: 0.24},
            (2, _B): {_A: 0.45, 1: 0.25, _C: 0.2}, (2, 1): {_A: 0.9}}
    return _hand_made(seed, public_seed, 3, 5, rows, 0, 1, runs)


def _eos_first(seed, public_seed, runs):
    # [<eos>] (0.22) is second after step 1 and third after step 2, behind [A, A] (0.375) and [A, B]
    # (0.3375), whose endings all score lower: the best is [A, B, B] (0.152) for a beam of 2 and
    # [A, A, <eos>] (0.131) for a beam of 1, yet [<eos>] (0.22) for a search that keeps it aside.
    rows = {(0, 0): {_A: 0.75, 1: 0.22}, (1, _A): {_A: 0.5, _B: 0.45},
            (2, _A): {1: 0.35, _A: 0.25, _B: 0.2}, (2, _B): {_B: 0.45, 1: 0.3}}
    return _hand_made(seed, public_seed, 3, 5, rows, 0, 1, runs)


def _eos_overtaken(seed, public_seed, runs):
    # [<eos>] (0.2) is second after step 1; [A, A] (0.36) and [A, B] (0.292) push it out, and
    # [A, B, <eos>] (0.278) wins a beam of 2. A beam that gives up a place for [<eos>] keeps only
    # [A, A], whose best ending scores 0.18.
    rows = {(0, 0): {_A: 0.68, 1: 0.2}, (1, _A): {_A: 0.53, _B: 0.43},
            (2, _A): {1: 0.5, _A: 0.3}, (2, _B): {1: 0.95}}
    return _hand_made(seed, public_seed, 3, 5, rows, 0, 1, runs)


def _cut_early(seed):
    # and two more runs, of the tables above where a finished hypothesis is cut from the beam
    return (_cut_table(seed, 4, runs=[(2, 3), (4, 3)])
            + _eos_first(seed, 4, runs=[(1, 3)]) + _eos_overtaken(seed, 4, runs=[(2, 3)]))


def _pushed_out(seed):
    # and one run of the first table above, where the best hypothesis is cut early
    return (_eos_first(seed, 5, runs=[(2, 3), (1, 3)]) + _eos_overtaken(seed, 5, runs=[(2, 3)])
            + _cut_table(seed, 5, runs=[(2, 3)]))


def _length_limit(seed):
    # <eos> is unlikely, so the best hypotheses run to max_len without it; the table is longer
    # than max_len (position 3 makes [A, A, A, <eos>] likely), and one run has max_len = 1.
    rows = {(0, 0): {_A: 0.6, 1: 0.2, _B: 0.15},
            (1, _A): {_A: 0.8, 1: 0.05}, (1, _B): {_B: 0.5, 1: 0.1},
            (2, _A): {_A: 0.7, 1: 0.2}, (2, _B): {_B: 0.9, 1: 0.05},
            (3, _A): {1: 0.99}}
    return _hand_made(seed, 2, 5, 4, rows, 0, 1, runs=[(2, 3), (3, 2), (2, 1)])


def _sharp_table(g, num_positions, vocab_size):
    """A random table whose rows are peaked (as a trained model's are), <eos> as likely as a token."""
    logits = 2.0 * torch.randn(num_positions, vocab_size, vocab_size, generator=g, dtype=torch.float64)
    return torch.log_softmax(logits, dim=-1)


def _random_case(g, vocab_size, max_len, beam_size, extra_positions=0):
    bos, eos = torch.randperm(vocab_size, generator=g)[:2].tolist()
    log_probs = _sharp_table(g, max_len + extra_positions, vocab_size)
    return Call(args=(log_probs, bos, eos, beam_size, max_len))


def _exhaustive(seed):
    # beam_size at least vocab_size ** max_len: nothing is ever cut, so the answer is the most
    # probable of all hypotheses (tests/exercises/test_ch07.py enumerates them to show it).
    g = gen(seed)
    calls = []
    for vocab_size, max_len in ((3, 3), (4, 2), (3, 4)):
        calls.append(_random_case(g, vocab_size, max_len, vocab_size ** max_len, randint(g, 0, 2)))
    return calls


def _random_beams(seed):
    g = gen(seed)
    calls = []
    for _ in range(4):
        vocab_size, max_len = randint(g, 3, 7), randint(g, 1, 6)
        calls.append(_random_case(g, vocab_size, max_len, randint(g, 1, 4), randint(g, 0, 2)))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _search(log_probs, bos, eos, beam_size, max_len, *, add=lambda s, lp: s + lp, steps=None,
            keep_finished=True, extend_finished=False, count_eos=True, per_hypothesis=None,
            finished_only=False, every_finished=False, with_bos=True, rank=lambda c: c[1]):
    """Beam search with one rule changed (each kept mistake below changes one)."""
    beam = [([], 0.0)]
    for t in range(max_len if steps is None else steps):
        candidates = []
        for tokens, score in beam:
            if tokens and tokens[-1] == eos and not extend_finished:
                if keep_finished:
                    candidates.append((tokens, score))
                continue
            row = log_probs[min(t, log_probs.shape[0] - 1), tokens[-1] if tokens else bos].tolist()
            ext = [(tokens + [b], score if (b == eos and not count_eos) else add(score, lp))
                   for b, lp in enumerate(row) if with_bos or b != bos]
            if not keep_finished:
                ext = [c for c in ext if c[0][-1] != eos]
            if per_hypothesis is not None:
                ext = sorted(ext, key=lambda c: c[1], reverse=True)[:per_hypothesis(beam_size)]
            candidates.extend(ext)
        candidates.sort(key=rank, reverse=True)
        beam = candidates if per_hypothesis is not None else candidates[:beam_size]
        if every_finished:
            beam += [c for c in candidates[beam_size:] if c[0][-1] == eos]
    if finished_only:
        done = [c for c in beam if c[0][-1] == eos]
        beam = done or beam
    best_tokens, best_score = max(beam, key=rank)
    return best_tokens, float(best_score)


def _pooled(log_probs, bos, eos, beam_size, max_len, shrink=False):
    """Finished candidates among the beam_size best leave the beam for a pool; the beam is refilled
    with the best unfinished ones (shrink: it is not, and loses a place for each); the best of pool
    and beam is returned."""
    pool, beam, width = [], [([], 0.0)], beam_size
    for t in range(max_len):
        if not beam or width == 0:
            break
        candidates = sorted(((tokens + [b], score + lp) for tokens, score in beam
                             for b, lp in enumerate(log_probs[t, tokens[-1] if tokens else bos].tolist())),
                            key=lambda c: c[1], reverse=True)
        done = [c for c in candidates[:width] if c[0][-1] == eos]
        pool += done
        beam = [c for c in (candidates[:width] if shrink else candidates) if c[0][-1] != eos]
        width -= len(done) if shrink else 0
        beam = beam[:width]
    best_tokens, best_score = max(pool + beam, key=lambda c: c[1])
    return best_tokens, float(best_score)


def _variant(**rule):
    def answer(log_probs, bos, eos, beam_size, max_len):
        return _search(log_probs, bos, eos, beam_size, max_len, **rule)
    return answer


mistakes.add("probabilities added",
             "the scores add probabilities, not log-probabilities; a sum of probabilities grows with "
             "every token instead of giving the probability of the whole hypothesis.",
             _variant(add=lambda s, lp: s + math.exp(lp)))
mistakes.add("log-probabilities multiplied",
             "the scores multiply the log-probabilities; the log of a product of probabilities is the "
             "sum of their logs.",
             _variant(add=lambda s, lp: lp if s == 0.0 else s * lp))
mistakes.add("top beam_size of each hypothesis, no cut over the whole beam",
             "each hypothesis kept its own best beam_size extensions and all of them went on, so the "
             "beam grew; the contract keeps beam_size candidates in all, the best over every "
             "hypothesis of the beam.",
             _variant(per_hypothesis=lambda k: k))
mistakes.add("one extension per hypothesis",
             "each hypothesis of the beam was extended by its single best token only (beam_size greedy "
             "searches side by side); the contract ranks every extension of every hypothesis together.",
             _variant(per_hypothesis=lambda k: 1))
mistakes.add("finished hypotheses moved to a pool",
             "a hypothesis that ends with eos left the beam for a separate pool and the beam was refilled "
             "with unfinished ones, so a finished hypothesis survived after beam_size better candidates "
             "had pushed it out; in the contract it stays in the beam and competes there at every step.",
             _pooled)
mistakes.add("finished hypotheses leave a shrinking beam",
             "a hypothesis that ends with eos left the beam for a separate pool and the beam lost its "
             "place; in the contract it stays in the beam, keeps its place only while it ranks among "
             "the beam_size best, and the beam holds beam_size candidates whenever there are that many.",
             lambda log_probs, bos, eos, beam_size, max_len: _pooled(log_probs, bos, eos, beam_size,
                                                                     max_len, shrink=True))
mistakes.add("every finished hypothesis kept whatever its rank",
             "every candidate that ends with eos was kept in the beam, beyond the beam_size best; a "
             "finished hypothesis is cut like any other once beam_size candidates score higher.",
             _variant(every_finished=True))
mistakes.add("length-normalised scores",
             "the candidates were ranked by their score divided by their length; the contract ranks "
             "and returns by the plain sum of log-probabilities, which favours short hypotheses.",
             _variant(rank=lambda c: c[1] / len(c[0]) if c[0] else c[1]))
mistakes.add("bos never a candidate token",
             "the bos token was left out of the extensions; the contract extends by every token of the "
             "vocabulary, bos included, however unlikely the table makes it.",
             _variant(with_bos=False))
mistakes.add("finished hypotheses dropped",
             "hypotheses that end with eos were thrown away, so the search only returns hypotheses "
             "that run to max_len; a finished hypothesis stays in the beam, unchanged, while it "
             "ranks among the beam_size best.",
             _variant(keep_finished=False))
mistakes.add("finished hypotheses extended past eos",
             "hypotheses that end with eos were extended like the others; a finished hypothesis is "
             "carried unchanged, with no token after its eos.",
             _variant(extend_finished=True))
mistakes.add("eos not counted",
             "the log-probability of the eos token was left out of the score; it counts like any "
             "other token's.",
             _variant(count_eos=False))
mistakes.add("one step too many",
             "the search ran max_len + 1 steps, so hypotheses got max_len + 1 tokens; max_len counts "
             "every token, eos included.",
             lambda log_probs, bos, eos, beam_size, max_len: _search(log_probs, bos, eos, beam_size,
                                                                     max_len, steps=max_len + 1))
mistakes.add("one step too few",
             "the search ran max_len - 1 steps, so no hypothesis reached max_len tokens; max_len "
             "counts every token, eos included.",
             lambda log_probs, bos, eos, beam_size, max_len: _search(log_probs, bos, eos, beam_size,
                                                                     max_len, steps=max_len - 1)
             if max_len > 1 else _search(log_probs, bos, eos, beam_size, max_len))
mistakes.add("only finished hypotheses returned",
             "the answer was the best finished hypothesis whenever the last beam had one; the "
             "contract returns the best of the last beam, finished or not.",
             _variant(finished_only=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("heap", "heapq.nlargest over (score, tokens) pairs, tuples for the hypotheses")
def _beam_alt_heap(log_probs, bos, eos, beam_size, max_len):
    beam = [(0.0, ())]
    for position in range(max_len):
        def candidates():
            for score, hyp in beam:
                if hyp[-1:] == (eos,):
                    yield score, hyp
                else:
                    previous = hyp[-1] if hyp else bos
                    for token in range(log_probs.shape[-1]):
                        yield score + log_probs[position, previous, token].item(), hyp + (token,)
        beam = heapq.nlargest(beam_size, candidates(), key=lambda pair: pair[0])
    score, hyp = max(beam, key=lambda pair: pair[0])
    return list(hyp), score


@alternatives.keep("tensor topk",
                   "the beam as tensors: scores (k,) plus a (k, vocab) table of extensions, topk over the "
                   "flattened table; a finished hypothesis's row is 0 at one column and -inf elsewhere")
def _beam_alt_topk(log_probs, bos, eos, beam_size, max_len):
    vocab_size = log_probs.shape[-1]
    scores = torch.zeros(1, dtype=torch.float64)
    hyps = [[]]
    for t in range(max_len):
        last = torch.tensor([h[-1] if h else bos for h in hyps])
        done = torch.tensor([bool(h) and h[-1] == eos for h in hyps])
        ext = scores[:, None] + log_probs[t, last]                          # (k, vocab)
        carried = torch.full((vocab_size,), float("-inf"), dtype=torch.float64)
        carried[0] = 0.0
        ext = torch.where(done[:, None], scores[:, None] + carried, ext)
        k = min(beam_size, int(torch.isfinite(ext).sum()))
        scores, flat = ext.flatten().topk(k)
        rows, cols = flat // vocab_size, flat % vocab_size
        hyps = [hyps[r] if done[r] else hyps[r] + [c] for r, c in zip(rows.tolist(), cols.tolist())]
    best = int(scores.argmax())
    return hyps[best], scores[best].item()


@alternatives.keep("dict of prefixes",
                   "a dict from token tuples to log-probabilities, sorted(...) with negated scores, "
                   "numpy for the table, early stop once every hypothesis is finished")
def _beam_alt_dict(log_probs, bos, eos, beam_size, max_len):
    table = log_probs.numpy()
    beam = {(): 0.0}
    for t in range(max_len):
        if all(prefix and prefix[-1] == eos for prefix in beam):
            break                                    # nothing left to extend: the beam stays
        grown = {}
        for prefix, logp in beam.items():
            if prefix and prefix[-1] == eos:
                grown[prefix] = logp
                continue
            for token, step_logp in enumerate(table[t, prefix[-1] if prefix else bos]):
                grown[prefix + (token,)] = logp + float(step_logp)
        beam = dict(sorted(grown.items(), key=lambda item: -item[1])[:beam_size])
    prefix = min(beam, key=lambda p: -beam[p])
    return [int(x) for x in prefix], float(beam[prefix])


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex3", title="Beam search over a table of next-token log-probabilities",
    name="beam_search", reference=beam_search, points=2,
    checks=[
        Check("a table where a beam of 2 beats greedy decoding (beam_size 1 and 2)", _greedy_beaten,
              seed=0,
              hint="this check runs beam_size=1 (greedy decoding) and beam_size=2 on a hand-made table; "
                   "the reason above names the run and what differs."),
        Check("a finished hypothesis stays in the beam while the others go on", _finished_kept, seed=1,
              hint="in this check a hypothesis ends with eos at the second step and others go on to "
                   "max_len; the reason above names the run and what differs."),
        Check("a hypothesis cut from a beam of 2 wins in a beam of 4", _cut_early, seed=4,
              hint="in this check the best hypothesis is fourth after the second step: a beam of 2 "
                   "loses it and a beam of 4 keeps it (two more runs cut a finished hypothesis); "
                   "compare which candidates each beam keeps."),
        Check("a finished hypothesis pushed out of the beam is lost", _pushed_out, seed=5,
              hint="in this check a hypothesis ends with eos at the first step and better candidates "
                   "pass it at the second; compare which candidates each step keeps, how many, and what "
                   "the last beam holds."),
        Check("max_len stops hypotheses that have no eos (max_len 3, 2 and 1)", _length_limit, seed=2,
              hint="in this check eos is unlikely, the table has more positions than max_len, and one "
                   "run has max_len=1; compare how many steps run and which hypotheses may be returned."),
        Check("a beam wide enough to keep every hypothesis finds the most probable one", _exhaustive,
              seed=3,
              hint="in this check beam_size is at least vocab_size ** max_len, so no candidate is ever "
                   "cut: the answer is the hypothesis with the highest total log-probability."),
        Check("random tables, vocabularies and beam sizes (hidden)", _random_beams, public=False,
              hint="check the search for any table, beam_size and max_len."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
