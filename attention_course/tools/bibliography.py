"""The bibliography of a portable student notebook: the entries of ``references.bib``, formatted as
plain Markdown, for citations ("(Bahdanau et al., 2014)", "Bahdanau et al. (2014)") and the list of
the works cited (:mod:`.portable`)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from .course_files import ReleaseError


def _latex_text(value: str) -> str:
    import codecs

    import latexcodec  # noqa: F401 - registers the "ulatex" codec (a dependency of pybtex)
    text = codecs.decode(str(value), "ulatex")
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "").replace("\xa0", " ")).strip()


class Bibliography:
    """The entries of ``references.bib``, formatted as plain Markdown."""

    def __init__(self, path: Optional[Path]):
        self.path = path
        self.entries = {}
        if path is not None:
            from pybtex.database import parse_file
            self.entries = dict(parse_file(str(path)).entries)

    def _entry(self, key: str, where: str):
        if key not in self.entries:
            raise ReleaseError(f"{where}: citation key {key!r} is not in "
                               f"{self.path.name if self.path else 'references.bib'}")
        return self.entries[key]

    @staticmethod
    def _last(person) -> str:
        return _latex_text(" ".join(person.prelast_names + person.last_names))

    def _people(self, entry) -> list:
        return entry.persons.get("author") or entry.persons.get("editor") or []

    def short_authors(self, key: str, where: str) -> str:
        entry = self._entry(key, where)
        people = self._people(entry)
        if not people:
            return _latex_text(entry.fields.get("institution") or entry.fields.get("title", key))
        if len(people) == 1:
            return self._last(people[0])
        if len(people) == 2:
            return f"{self._last(people[0])} and {self._last(people[1])}"
        return f"{self._last(people[0])} et al."

    def year(self, key: str, where: str) -> str:
        return _latex_text(self._entry(key, where).fields.get("year", "n.d."))

    def cite(self, keys: list, textual: bool, where: str) -> str:
        if textual:
            parts = [f"{self.short_authors(k, where)} ({self.year(k, where)})" for k in keys]
            return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return "(" + "; ".join(f"{self.short_authors(k, where)}, {self.year(k, where)}" for k in keys) + ")"

    def sort_key(self, key: str) -> tuple:
        entry = self._entry(key, "references")
        people = self._people(entry)
        return (self._last(people[0]).lower() if people else "", entry.fields.get("year", ""), key)

    def reference(self, key: str, where: str) -> str:
        """One entry of a reference list: authors (year). Title. *Venue*, details."""
        entry = self._entry(key, where)
        fields = {name: _latex_text(value) for name, value in entry.fields.items()}

        def name(person) -> str:
            initials = " ".join("-".join(f"{part[0]}." for part in _latex_text(n).split("-") if part)
                                for n in person.first_names + person.middle_names if _latex_text(n))
            return f"{self._last(person)}, {initials}" if initials else self._last(person)

        names = [name(p) for p in self._people(entry)]
        if len(names) > 2:
            authors = ", ".join(names[:-1]) + ", and " + names[-1]
        else:
            authors = " and ".join(names) or fields.get("institution", "")
        title = fields.get("title", key).rstrip(".")
        venue = fields.get("journal") or fields.get("booktitle")
        details = []
        if venue:
            details.append(("In " if "booktitle" in fields and "journal" not in fields else "") + f"*{venue}*")
        if fields.get("volume"):
            details.append(fields["volume"] + (f"({fields['number']})" if fields.get("number") else ""))
        if fields.get("pages"):
            details.append(fields["pages"])
        if not venue:
            details += [fields[f] for f in ("publisher", "institution", "address") if fields.get(f)]
        text = f"{authors} ({fields.get('year', 'n.d.')}). {title}."
        if details:
            text += " " + ", ".join(details) + "."
        url = fields.get("url") or (f"https://doi.org/{fields['doi']}" if fields.get("doi") else None)
        if url:
            text += f" <{url}>"
        return text

