#!/usr/bin/env python3
"""Time the course site's builds: a cold build (empty execution cache) and a rebuild
with nothing changed, for the full edition; the student edition's build too.

    .venv/bin/python bench/build.py

Prints wall times and each notebook's execution time in the cold build (slowest
first), read from the Jupyter Book execution cache. Targets (2 cores): cold build of
the whole course under 3 minutes; rebuild under 20 s.
"""
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT  # bench/_common.py; puts the repository root on sys.path
from attention_course.tools.editions import build

COLD_TARGET, REBUILD_TARGET = 180.0, 20.0


def _timed_build(edition: str, out: Path) -> float:
    start = time.perf_counter()
    status, _ = build(ROOT, edition=edition, out=out, extra=("--quiet",))
    if status != 0:
        sys.exit(f"the {edition} build failed (exit {status})")
    return time.perf_counter() - start


def main() -> int:
    os.environ.pop("MPLBACKEND", None)  # figures need the kernel's inline backend
    from jupyter_cache import get_cache
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "full"
        cold = _timed_build("full", out)
        records = get_cache(str(out / "_build" / ".jupyter_cache")).list_cache_records()
        rebuild = _timed_build("full", out)
        student = _timed_build("student", Path(tmp) / "student")
    print(f"machine: {os.cpu_count()} cores")
    print(f"{'full edition, cold build (empty cache)':45s} {cold:7.1f} s   target < {COLD_TARGET:.0f} s: "
          f"{'ok' if cold < COLD_TARGET else 'MISSED'}")
    print(f"{'full edition, rebuild with nothing changed':45s} {rebuild:7.1f} s   target < {REBUILD_TARGET:.0f} s: "
          f"{'ok' if rebuild < REBUILD_TARGET else 'MISSED'}")
    print(f"{'student edition (no execution)':45s} {student:7.1f} s")
    print(f"{'cold / rebuild':45s} {cold / rebuild:7.1f} x")
    print("\nnotebook execution in the cold build, slowest first:")
    timings = sorted(((r.data or {}).get("execution_seconds", float("nan")), Path(r.uri).name) for r in records)
    for seconds, name in reversed(timings):
        print(f"  {name:40s} {seconds:6.1f} s")
    print(f"  {'all notebooks':40s} {sum(t for t, _ in timings):6.1f} s")
    return 0 if cold < COLD_TARGET and rebuild < REBUILD_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
