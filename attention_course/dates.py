"""Chapter 7's data: the translation tasks the course generates itself, and their
character vocabularies (:mod:`attention_course.translation` re-exports every name, so
``tr.make_list_split``, ``tr.Vocab`` & co. work as before).

The tasks
---------
*Dates written by people* -> *ISO 8601 dates*. A date is written in one of many
human formats ("3rd of March, 1998", "Mar 3 98", "03.03.1998", "Tuesday, March 3,
1998", ...), in its own case or in lower or upper case.

* :func:`make_dataset` (the original task, used by ``bench/bahdanau.py``): a single
  date -> ``1998-03-03``, or a **date range**, two dates inside a short phrase ("from
  3 Mar 1998 until the fifth of April, 2001") -> the ISO 8601 interval
  ``1998-03-03/2001-04-05``.
* :func:`make_list_example` / :func:`make_list_split` (the **list task**, chapter 7's
  experiment): ``num_dates`` dates joined by ", ", " and ", " then " or " or ", -> their
  ISO forms separated by ``;`` (:data:`LIST_TARGET_VOCAB`). The number of dates is the
  amount of information the model must carry; ``filler`` words (:data:`FILLER_WORDS`)
  make the source longer without adding any, so that length and information can be
  varied separately.

Conventions, so that every source has exactly one correct target:

* years lie in 1950-2029; a two-digit year ``yy`` means 19yy for 50-99 and 20yy for 00-29;
* all-numeric dates are day first (``03/04/1998`` is the 3rd of April) unless they
  start with a four-digit year (``1998/4/3``);
* a range's second date is never before its first.

Everything random comes from a local :class:`random.Random` seeded by the caller, so
the splits are the same on every machine and never touch Python's or torch's global
random state. The splits never share a source text.

Vocabularies
------------
Character vocabularies, :data:`SOURCE_VOCAB`, :data:`TARGET_VOCAB` and
:data:`LIST_TARGET_VOCAB`, each starting with the three special tokens ``<pad>`` (index 0), ``<bos>`` (1) and
``<eos>`` (2).

This module imports only torch and the standard library: it ships to the grading child and to
a student build with :mod:`attention_course.translation`, and holds no check and no answer.
"""
from __future__ import annotations

import datetime
import random
from typing import Optional

import torch

__all__ = ["Vocab", "SOURCE_VOCAB", "TARGET_VOCAB", "LIST_TARGET_VOCAB", "FILLER_WORDS", "format_date",
           "to_iso", "random_date", "make_example", "make_dataset", "make_list_example",
           "make_list_split", "list_date_accuracy"]

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


# ------------------------------------------------------------------ vocabularies

class Vocab:
    """A character vocabulary: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, then ``chars``."""

    pad, bos, eos = 0, 1, 2

    def __init__(self, chars: str):
        self.tokens = [PAD, BOS, EOS] + list(chars)
        self.index = {token: i for i, token in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise ValueError("chars must not repeat a character")

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list:
        """Indices of the characters of ``text`` (ValueError naming an unknown character)."""
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise ValueError(f"text {text!r} has characters outside the vocabulary: {unknown}")
        ids = [self.index[c] for c in text]
        return ([self.bos] if bos else []) + ids + ([self.eos] if eos else [])

    def decode(self, ids) -> str:
        """Text of the indices up to the first ``<eos>``; ``<pad>`` and ``<bos>`` are skipped."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == self.eos:
                break
            if i > self.eos:
                out.append(self.tokens[i])
        return "".join(out)


SOURCE_VOCAB = Vocab(" ',-./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
TARGET_VOCAB = Vocab("-/0123456789")


# ------------------------------------------------------------------ the date task

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_UNITS = ["", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
_TEENS = {10: "tenth", 11: "eleventh", 12: "twelfth", 13: "thirteenth", 14: "fourteenth",
          15: "fifteenth", 16: "sixteenth", 17: "seventeenth", 18: "eighteenth", 19: "nineteenth",
          20: "twentieth", 30: "thirtieth"}
FIRST_DAY, LAST_DAY = datetime.date(1950, 1, 1), datetime.date(2029, 12, 31)


def _ordinal_word(n: int) -> str:
    if n in _TEENS:
        return _TEENS[n]
    if n < 10:
        return _UNITS[n]
    return ("twenty-" if n < 30 else "thirty-") + _UNITS[n % 10]


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each format turns a date into text. Numeric formats are day first (see the module docstring).
_FORMATS = [
    lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
    lambda d: f"{_ordinal(d.day)} of {MONTHS[d.month - 1]}, {d.year}",
    lambda d: f"the {_ordinal_word(d.day)} of {MONTHS[d.month - 1]}, {d.year}",
    lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
    lambda d: f"{MONTHS[d.month - 1]} {_ordinal(d.day)}, {d.year}",
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day} {d.year % 100:02d}",
    lambda d: f"{d.day} {MONTHS[d.month - 1][:3]} {d.year}",
    lambda d: f"{d.day:02d}-{MONTHS[d.month - 1][:3]}-{d.year}",
    lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}",
    lambda d: f"{d.day}.{d.month}.{d.year}",
    lambda d: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}",
    lambda d: f"{d.year}/{d.month}/{d.day}",
    lambda d: f"{WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1]} {d.day}, {d.year}",
    lambda d: f"{WEEKDAYS[d.weekday()][:3]} {d.day} {MONTHS[d.month - 1][:3]} {d.year}",
]

_RANGES = ["from {a} to {b}", "{a} - {b}", "between {a} and {b}", "{a} until {b}",
           "{a} through {b}", "starting {a}, ending {b}", "from {a} up to and including {b}"]


def format_date(date: datetime.date, style: int, case: str = "as is") -> str:
    """``date`` written in format number ``style`` (0-13), then ``case`` ("as is", "lower", "upper")."""
    text = _FORMATS[style](date)
    return {"as is": text, "lower": text.lower(), "upper": text.upper()}[case]


def to_iso(date: datetime.date) -> str:
    return date.isoformat()


def random_date(rng: random.Random) -> datetime.date:
    """A day drawn uniformly from 1950-01-01 to 2029-12-31."""
    return FIRST_DAY + datetime.timedelta(days=rng.randrange((LAST_DAY - FIRST_DAY).days + 1))


def _random_text(rng: random.Random, date: datetime.date) -> str:
    case = rng.choices(["as is", "lower", "upper"], weights=[6, 2, 1])[0]
    return format_date(date, rng.randrange(len(_FORMATS)), case)


def make_example(rng: random.Random, p_range: float = 0.5) -> tuple:
    """One ``(source, target)`` pair: a single date, or with probability ``p_range`` a range."""
    first = random_date(rng)
    if rng.random() >= p_range:
        return _random_text(rng, first), to_iso(first)
    second = random_date(rng)
    first, second = min(first, second), max(first, second)
    phrase = rng.choice(_RANGES).format(a=_random_text(rng, first), b=_random_text(rng, second))
    return phrase, f"{to_iso(first)}/{to_iso(second)}"


def make_dataset(num_train: int = 40000, num_val: int = 1000, num_test: int = 2000,
                 p_range: float = 0.5, seed: int = 0) -> dict:
    """Seeded splits ``{"train", "val", "test"}``, each a list of ``(source, target)`` pairs.

    No source text appears twice, within a split or across splits, so the validation
    and test sets are truly held out.
    """
    for name, value in (("num_train", num_train), ("num_val", num_val), ("num_test", num_test)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if not 0.0 <= p_range <= 1.0:
        raise ValueError(f"p_range must lie in [0, 1], got {p_range!r}")
    rng = random.Random(seed)
    seen: set = set()
    splits = {}
    # Draw the held-out splits first, so that they do not change when num_train does.
    for name, size in (("test", num_test), ("val", num_val), ("train", num_train)):
        pairs = []
        while len(pairs) < size:
            source, target = make_example(rng, p_range)
            if source not in seen:
                seen.add(source)
                pairs.append((source, target))
        splits[name] = pairs
    return {name: splits[name] for name in ("train", "val", "test")}


# ------------------------------------------------------------------ the list task (chapter 7's experiment)

#: The target vocabulary of the list task: ISO dates separated by ``;``.
LIST_TARGET_VOCAB = Vocab("-0123456789;")

#: Words that carry no date: the filler that lengthens a source without adding information.
#: None of them contains a month, a weekday, an ordinal word or one of their abbreviations.
FILLER_WORDS = ("note", "please", "team", "call", "ahead", "okay", "thanks", "agenda", "desk",
                "room", "lunch", "draft", "report", "review", "budget", "plan", "client", "visit",
                "booked", "also", "check", "with", "everyone", "before", "later", "meeting", "trip",
                "flight", "hotel", "notes", "reminder", "snacks", "bring", "slides")
_CONNECTORS = (", ", " and ", " then ", " or ")


def _filler(rng: random.Random, num_chars: int) -> list:
    """Filler words whose text, joined by spaces, has at least ``num_chars`` characters."""
    words, size = [], -1
    while size < num_chars:
        word = rng.choice(FILLER_WORDS)
        words.append(word)
        size += len(word) + 1
    return words


def make_list_example(rng: random.Random, num_dates: int, filler: int = 0) -> tuple:
    """One ``(source, target)`` pair of the list task.

    The source writes ``num_dates`` dates, each in a format and case of its own (as in
    :func:`make_example`), joined by ``", "``, ``" and "``, ``" then "`` or ``" or "``.
    With ``filler > 0``, filler words (:data:`FILLER_WORDS`, at least ``filler``
    characters in all) are spread over the gaps before, between and after the dates:
    the source grows longer but carries the same information. The target lists the
    dates in ISO form, in the order of the source, separated by ``;``
    (vocabulary :data:`LIST_TARGET_VOCAB`).
    """
    if isinstance(num_dates, bool) or not isinstance(num_dates, int) or num_dates < 1:
        raise ValueError(f"num_dates must be a positive integer, got {num_dates!r}")
    if isinstance(filler, bool) or not isinstance(filler, int) or filler < 0:
        raise ValueError(f"filler must be a non-negative integer, got {filler!r}")
    dates = [random_date(rng) for _ in range(num_dates)]
    texts = [_random_text(rng, d) for d in dates]
    gaps = [[] for _ in range(num_dates + 1)]           # words before, between and after the dates
    if filler:
        for word in _filler(rng, filler):
            gaps[rng.randrange(num_dates + 1)].append(word)
    pieces = []
    for k in range(num_dates + 1):
        if k > 0:
            pieces.append(texts[k - 1])
        if gaps[k]:
            pieces.append(" ".join(gaps[k]))
        if 0 < k < num_dates:
            pieces.append(rng.choice(_CONNECTORS).strip(" ") or ",")
    source = " ".join(pieces).replace(" ,", ",")
    return source, ";".join(to_iso(d) for d in dates)


def make_list_split(size: int, num_dates, filler, seed: int, exclude: Optional[set] = None) -> list:
    """``size`` distinct pairs of the list task from a :class:`random.Random` seeded with ``seed``.

    ``num_dates`` and ``filler`` are each an int (fixed) or a ``(low, high)`` tuple
    (drawn uniformly, both ends included, for every example). Sources in ``exclude``
    are skipped, and the new ones are added to it (so splits drawn one after the other
    share no source text).
    """
    rng = random.Random(seed)
    seen = exclude if exclude is not None else set()
    draw = (lambda r, v: r.randint(*v) if isinstance(v, tuple) else v)
    pairs = []
    while len(pairs) < size:
        source, target = make_list_example(rng, draw(rng, num_dates), draw(rng, filler))
        if source not in seen:
            seen.add(source)
            pairs.append((source, target))
    return pairs


def list_date_accuracy(outputs: list, targets: list) -> torch.Tensor:
    """Float ``(n,)``: the fraction of each target's dates that the output has right, in place.

    Outputs and targets are ``;``-separated date lists; the k-th date of the output
    counts only if it equals the k-th date of the target (a missing date counts as wrong,
    an extra one is ignored -- it makes the exact match fail).
    """
    fractions = []
    for output, target in zip(outputs, targets):
        want, got = target.split(";"), output.split(";")
        fractions.append(sum(g == w for g, w in zip(got, want)) / len(want))
    return torch.tensor(fractions)
