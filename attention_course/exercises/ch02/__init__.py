"""Chapter 2 exercises: Nadaraya–Watson kernel regression as attention pooling.

* ``ch02_ex1`` – ``gaussian_kernel(distances, width)``: the unnormalised Gaussian kernel.
* ``ch02_ex2`` – ``nadaraya_watson(queries, keys, values, width)``: batched
  Gaussian-kernel attention pooling, returning predictions and weights.
* ``ch02_ex3`` – ``fit_width(keys, values, init_width, lr, num_steps)``: plain gradient
  descent on ``log(width)`` of the leave-one-out squared error.
* ``ch02_ex4`` – ``width_choices(keys, values, test_queries, test_targets, candidates)``:
  the width leave-one-out picks against the width the test error picks (the chapter
  only shows leave-one-out), and ``excess``, the checked answer to its question: how much
  larger the test error is at the leave-one-out width.
* ``ch02_ex5`` – ``local_linear(queries, keys, values, width)``: local linear regression,
  the fix of Nadaraya–Watson's boundary bias; its weights still sum to one but may be
  negative (not shown in the chapter).
* ``ch02_ex6`` – ``knn_width_pooling(queries, keys, values, num_neighbors)``: TRANSFER.
  Gaussian pooling with a width per query, the distance to its ``num_neighbors``-th
  nearest key (repeated keys counted), and the mean of the values on the query where
  that width is 0; the chapter only uses one global width.
* ``ch02_ex7`` – ``loo_from_full_fit(values, fitted, self_weights)``: TRANSFER. The
  leave-one-out predictions and error read off the full fit and the self weights (any
  normalised kernel, several fits at once): the derivation of why the plain training error
  collapses at width 0, turned into code (the chapter recomputes leave-one-out from scratch).

The references below must behave like the solution notebook's exercise cells
(``tests/test_exercises.py`` runs both through the same checks). Where float32
rounding depends on the formula (large scores, many gradient steps, a 2 x 2 solve),
the reference computes in float64 and the tolerance is stated next to the check.
Each exercise keeps kept mistakes (must fail with their own hint) and kept
alternatives in other styles (must pass every check); check hints stay neutral.

One module per exercise, its parts in one order: the contract, the reference, the
inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,
the registration. Helpers shared by the chapter's exercises are in ``_common.py``.
"""
from . import (  # noqa: F401  (importing an exercise module registers it)
    ex1_gaussian_kernel,
    ex2_nadaraya_watson,
    ex3_fit_width,
    ex4_width_choices,
    ex5_local_linear,
    ex6_knn_width_pooling,
    ex7_loo_from_full_fit,
)
