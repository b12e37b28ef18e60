"""How the grader's files write points and text: one place for every report that writes them.

:mod:`.reports` (grades.csv, feedback, summary.md), :mod:`.items` (items.csv,
misconceptions.csv), :mod:`.lms` (canvas.csv) and :mod:`.similarity` (similarity.csv) all
import these; this module imports none of them.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..notebook import printable

# A file name's stem derived from a submission: room for "~N" and an extension within the 255 bytes
# a file name may take on Linux (ext4, tmpfs) and macOS.
MAX_STEM_BYTES = 180

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def fmt_points(points: float) -> str:
    """Points as text: whole points without decimals, others with at most two (``1.5``, ``0.33``)."""
    return f"{points:.2f}".rstrip("0").rstrip(".") if round(points, 2) % 1 else f"{int(round(points))}"


def number_cell(points: float):
    """Points as a number cell (an int when whole, else rounded to four decimals)."""
    return int(points) if points % 1 == 0 else round(float(points), 4)


def csv_safe(text: str) -> str:
    """A text cell that a spreadsheet shows as text, never runs as a formula.

    A student's file name such as ``=HYPERLINK(...).ipynb`` becomes a student id that
    starts with ``=``; as OWASP recommends against CSV injection, a cell that starts
    with ``= + - @``, a tab or a carriage return gets a leading single quote.
    :func:`.reports.write_csv` also puts every text cell in double quotes (a quote inside is
    doubled), so a separator or a line break in it cannot start another cell. Every other
    control character is escaped (:func:`printable`), so that a message from a submission
    cannot send a terminal escape to whoever prints the file; line breaks and tabs stay, since
    the quotes already make them harmless and multi-line feedback keeps its lines.
    """
    text = printable(text, newlines=True, keep="\r")
    return "'" + text if text.startswith(_FORMULA_START) else text


def cap_bytes(name: str, whole: str = "", limit: int = MAX_STEM_BYTES) -> str:
    """``name`` in at most ``limit`` bytes of UTF-8, never splitting a character (a file name's limit is
    in bytes: 85 CJK letters are 255). A name cut short ends with ``-`` and 8 hex digits of ``whole``'s
    digest (the name it came from), so that two long names sharing their beginning stay apart."""
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return name
    digest = hashlib.sha256((whole or name).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return raw[:max(0, limit - 9)].decode("utf-8", "ignore") + "-" + digest


def read_lms_text(path, limit: int, what: str, error) -> str:
    """The text of a CSV an LMS exported (``what``: "the Canvas roster"), read with a size limit and
    decoded as UTF-8 with or without Excel's byte-order mark; ``error(message)`` is raised otherwise."""
    try:
        data = open(path, "rb").read(limit + 1)
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}") from None
    if len(data) > limit:
        size = Path(path).stat().st_size
        raise error(f"{what} {path} is {size / 1e6:.1f} MB, over the {limit // 1_000_000} MB limit")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as failure:
        raise error(f"{what} {path} is not UTF-8 text (byte {failure.start})") from None
