"""What the benchmark scripts share.

* :data:`ROOT` -- the repository root, put on ``sys.path`` when this module is imported,
  so that ``attention_course`` imports from the checkout (import this module before it);
* :func:`cpu_name` -- the processor's name, for the provenance of measured tables;
* :func:`measured_by` -- the "measured by bench/NAME.py on DATE: torch ..." line that
  the shipped tables start with (the chapters print it);
* :func:`write_csv` -- rows (dicts with the same keys) as a CSV file, optionally under
  ``# `` comment lines.

The scripts are run as files from the repository root (``.venv/bin/python
bench/NAME.py``), so ``bench/`` is ``sys.path[0]`` and they import this module as
``_common``.
"""
from __future__ import annotations

import csv
import datetime as _dt
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measured_by(script: str, threads: int, date: str | None = None) -> str:
    """``measured by bench/<script> on <date>: torch <version>, torch.set_num_threads(<threads>)
    on a <n>-core <cpu>`` (date: today unless given, ISO format)."""
    import torch

    date = date or _dt.date.today().isoformat()
    return (f"measured by bench/{script} on {date}: torch {torch.__version__}, "
            f"torch.set_num_threads({threads}) on a {os.cpu_count()}-core {cpu_name()}")


def write_csv(path: Path, rows: list, comments: tuple | list = ()) -> None:
    """Write ``rows`` (dicts; the first one's keys are the header) to ``path``, after one
    ``# `` line per comment."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        for comment in comments:
            f.write(f"# {comment}\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
