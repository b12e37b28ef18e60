"""Chapter 1 exercises: queries, keys and values.

* ``ch01_ex1`` ``attention_pool(weights, values)`` -- weighted sum of value rows, optionally batched.
* ``ch01_ex2`` ``normalize_weights(scores)`` -- non-negative scores to weights summing to one
  along the keys axis; an all-zero row becomes uniform weights.
* ``ch01_ex3`` ``hard_lookup(queries, keys, values)`` -- the value of the nearest key (ties: first key).
* ``ch01_ex4`` ``cued_weights(queries, keys, salience, temperature, warned=None)`` -- a volitional cue
  (minus the squared distance over the temperature) and a nonvolitional one (a salience per key)
  combined into one weight matrix: weights proportional to ``salience * exp(score)``,
  numerically stable. The chapter shows the two cues only separately. With ``warned=j`` it answers
  the chapter's question: which query's row a warning of key ``j`` moves most (checked).
* ``ch01_ex5`` ``zero_temperature_weights(queries, keys)`` -- the limit of the soft lookup as the
  temperature goes to 0, ties included (equal weights on every nearest key): TRANSFER, the chapter
  states the limit only in words and ``hard_lookup`` breaks ties by index.
* ``ch01_ex6`` ``temperature_for_peak(queries, keys, target, coldest=False)`` -- the inverse problem: per
  query, the temperature at which its largest weight equals ``target`` (nan when no temperature reaches
  it, i.e. when the target is at least 1 / the number of nearest keys), checked by putting the
  temperature back into the softmax: TRANSFER. With ``coldest=True`` it answers the chapter's
  question: which query needs the smallest temperature (checked).

``ch01_ex1``-``ch01_ex3`` are one-point warm-ups close to code the chapter prints; the points go
mostly to the TRANSFER exercises ``ch01_ex4``-``ch01_ex6`` (2, 2 and 3 points).

Every check draws its inputs from a local generator seeded by the check's seed. Error
checks start with one valid call, so that an implementation that raises for every input
cannot pass them; they carry a small weight (error messages are at most a fifth of the
chapter's points). Each exercise keeps wrong implementations (``mistakes``) that must fail
with their own hint, and correct ones in other styles (``alternatives``) that must pass
every check; ``tests/test_exercises.py`` proves both. Check hints stay neutral: they say
what the check exercises, never which mistake was made (that is the mistakes' job).

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_attention_pool,
    ex2_normalize_weights,
    ex3_hard_lookup,
    ex4_cued_weights,
    ex5_zero_temperature_weights,
    ex6_temperature_for_peak,
)
