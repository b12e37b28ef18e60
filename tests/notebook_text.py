"""Reading a solution notebook's prose and stored outputs, for the tests of the numbers a chapter
quotes (tests/test_chapter_numbers_chNN.py): the markdown with whitespace made single spaces, and the
stored text output of the one code cell that contains a marker."""
import json
from pathlib import Path


def normal(text: str) -> str:
    return " ".join(text.split())


def cells(notebook: Path) -> list:
    return json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]


def prose(notebook: Path) -> str:
    """Every markdown cell of ``notebook``, whitespace ignored."""
    return " ".join(normal("".join(c["source"])) for c in cells(notebook) if c["cell_type"] == "markdown")


def output_of(notebook: Path, marker: str) -> str:
    """The stored stream output of the one code cell of ``notebook`` whose source contains ``marker``."""
    found = [c for c in cells(notebook) if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(found) == 1, f"{len(found)} code cells of {Path(notebook).name} contain {marker!r}"
    return "".join("".join(o.get("text", "")) for o in found[0].get("outputs", [])
                   if o.get("output_type") == "stream")
