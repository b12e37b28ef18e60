"""The reader's language for feedback: check lines, hints, ``progress`` and grading feedback.

English is the source. ``set_language("zh")`` (a Chinese student notebook's setup cell calls it) or
the environment variable ``ATTENTION_COURSE_LANG=zh`` selects Chinese; ``progress`` and ``grade``
take ``--lang``. :func:`tr` translates one English message with the package's catalog
(``attention_course/locales/<lang>/LC_MESSAGES/attention_course.po``, written by translators and
refreshed by ``attention-course translations update``): an exact entry first (titles, check names,
hints), then a template whose numbered fields (``{0}``) stand for values filled in at run time, the
values themselves translated in turn when they are English messages. Anything without an entry
stays English, so a missing translation never hides feedback.

Standard library only (a student's package and a grading child may lack Babel): the catalog is
read by the small parser below, fuzzy and obsolete entries skipped.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Optional

ENV = "ATTENTION_COURSE_LANG"
LANGUAGES = ("en", "zh")
_LOCALES = Path(__file__).resolve().parents[1] / "locales"
_FIELD = re.compile(r"\{(\d+)\}")
MAX_MATCHED = 1000  # characters: see tr()
_chosen: list = []  # [lang] once set_language() was called
_catalogs: dict = {}


def normalise(lang: Optional[str]) -> str:
    """``zh``, ``zh_CN``, ``zh-Hans`` … -> ``zh``; anything else English."""
    text = (lang or "").strip().lower().replace("-", "_")
    return "zh" if text.startswith("zh") else "en"


def N_(text: str) -> str:
    """Marks a short message for the catalog (gettext's ``N_``): returned as it is, translated
    where :func:`tr` is applied to it."""
    return text


def set_language(lang: str) -> None:
    """Feedback in ``lang`` from now on in this process ("en" or "zh")."""
    _chosen[:] = [normalise(lang)]


def current() -> str:
    """The language in force: :func:`set_language`'s, else ``ATTENTION_COURSE_LANG``'s, else English."""
    if _chosen:
        return _chosen[0]
    return normalise(os.environ.get(ENV))


def _unquote(text: str) -> str:
    return ast.literal_eval(text) if text.startswith('"') else ""


def parse_po(text: str) -> dict:
    """msgid -> msgstr of the translated, non-fuzzy entries of a gettext catalog."""
    out = {}
    for entry in re.split(r"\n\s*\n", text):
        lines = [line for line in entry.strip().split("\n") if line]
        if not lines or any(line.startswith("#~") for line in lines):
            continue
        if any(line.startswith("#,") and "fuzzy" in line for line in lines):
            continue
        fields, key = {"msgid": [], "msgstr": []}, None
        for line in lines:
            if line.startswith("#"):
                continue
            match = re.match(r"^(msgid|msgstr|msgctxt)\s+(\".*\")\s*$", line)
            if match:
                key = match.group(1)
                fields.setdefault(key, []).append(_unquote(match.group(2)))
            elif line.startswith('"') and key:
                fields[key].append(_unquote(line))
        msgid, msgstr = "".join(fields["msgid"]), "".join(fields["msgstr"])
        if msgid and msgstr:
            out[msgid] = msgstr
    return out


class Catalog:
    def __init__(self, table: dict):
        self.exact = table
        templates = []
        for english, translated in table.items():
            if not _FIELD.search(english):
                continue
            literal = _FIELD.sub("", english).replace("{{", "{").replace("}}", "}")
            if not re.search(r"[A-Za-z]{2,}", literal):
                continue
            pattern, pos = [], 0
            for match in _FIELD.finditer(english):
                pattern.append(re.escape(english[pos:match.start()].replace("{{", "{").replace("}}", "}")))
                # A leading field may be empty (a prefix such as "call 1 of 2: "), and so may an English
                # plural ending ("notebook{5}"); any other field holds a value.
                empty = match.start() == 0 or english[match.start() - 1].isalpha()
                pattern.append(f"(?P<f{match.group(1)}_{len(pattern)}>{'.*?' if empty else '.+?'})")
                pos = match.end()
            pattern.append(re.escape(english[pos:].replace("{{", "{").replace("}}", "}")))
            templates.append((len(literal), re.compile("".join(pattern), re.S), translated))
        # The most specific template (the most fixed text) wins.
        self.templates = sorted(templates, key=lambda item: -item[0])


def catalog(lang: str) -> Optional[Catalog]:
    if lang == "en":
        return None
    if lang not in _catalogs:
        path = _LOCALES / lang / "LC_MESSAGES" / "attention_course.po"
        table = parse_po(path.read_text(encoding="utf-8")) if path.exists() else {}
        _catalogs[lang] = Catalog(table)
    return _catalogs[lang]


def _fill(translated: str, values: dict) -> str:
    def one(match):
        return values.get(match.group(1), match.group(0))
    out = _FIELD.sub(one, translated.replace("{{", "\0L").replace("}}", "\0R"))
    return out.replace("\0L", "{").replace("\0R", "}")


def tr(text: str, lang: Optional[str] = None, missing: Optional[list] = None, _depth: int = 0) -> str:
    """``text`` (an English message) in ``lang`` (default: :func:`current`); English where the
    catalog has no entry (then appended to ``missing`` when it is a message, not a value)."""
    lang = current() if lang is None else normalise(lang)
    if lang == "en" or not text or not isinstance(text, str):
        return text
    found = catalog(lang)
    if text in found.exact:
        return found.exact[text]
    stripped = text.strip()
    if stripped != text and stripped in found.exact:
        return text[:len(text) - len(text.lstrip())] + found.exact[stripped] + text[len(text.rstrip()):]
    # Matching templates costs about the square of the length: a message longer than any the course
    # builds (a submission's own long output, say) stays as it is, so grading time stays bounded.
    if _depth < 4 and len(text) <= MAX_MATCHED:
        best = None
        for _, pattern, translated in found.templates:
            match = pattern.fullmatch(text)
            if match is None:
                continue
            values, left = {}, 0
            for name, value in match.groupdict().items():
                # A value is data (a shape, a name, an error the answer raised): translated when the
                # catalog knows it, and never counted as missing.
                number = name[1:].split("_")[0]
                values[number] = tr(value, lang, None, _depth + 1)
                if values[number] == value:
                    left += len(re.findall(r"[A-Za-z]{2,}", value))
            # Several templates can fit one message ("{0}the result" and "item {0} of {1}"): the one
            # that leaves the fewest English words untranslated in its values wins, the most specific
            # first on a tie.
            if best is None or left < best[0]:
                best = (left, _fill(translated, values))
            if left == 0:
                break
        if best is not None:
            return best[1]
        for separator in ("\n", "; "):
            if separator in text:
                return separator.join(tr(part, lang, missing, _depth + 1) for part in text.split(separator))
    if missing is not None and re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{2,}\s+[A-Za-z]{2,}", text):
        missing.append(text)
    return text


PASS, FAIL = "\u2713", "\u2717"  # ✓ ✗


def check_line(passed: bool, check: str, reason: str, hint: str, lang: Optional[str] = None) -> str:
    """One check's line: ``✓ name``, or ``✗ name: reason`` and an indented hint, in ``lang``."""
    lang = current() if lang is None else normalise(lang)
    if passed:
        return f"{PASS} {tr(check, lang)}"
    text = f"{FAIL} {tr(check, lang)}{frame('colon', lang)}{tr(reason, lang)}"
    if hint:
        text += f"\n    {frame('hint', lang)}{tr(hint, lang)}"
    return text


# The words of a check's line around the translated parts.
_FRAME = {
    "en": {"hint": "Hint: ", "colon": ": "},
    "zh": {"hint": "提示：", "colon": "："},
}


def frame(word: str, lang: Optional[str] = None) -> str:
    lang = current() if lang is None else normalise(lang)
    return _FRAME.get(lang, _FRAME["en"])[word]
