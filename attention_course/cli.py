"""The ``attention-course`` command."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _release(args) -> int:
    from .release import ReleaseError, release
    try:
        stale = release(Path(args.root), chapter=args.chapter, check_only=args.check)
    except ReleaseError as error:
        print(f"attention-course release: {error}", file=sys.stderr)
        return 2
    if args.check:
        if stale:
            for path in stale:
                print(f"stale: {path} differs from what `attention-course release` generates", file=sys.stderr)
            print("run `attention-course release` and commit the result", file=sys.stderr)
            return 1
        print("student notebooks are up to date")
        return 0
    for path in stale:
        print(f"wrote {path}")
    if not stale:
        print("student notebooks are up to date (nothing written)")
    return 0


def _list(args) -> int:
    from .registry import all_exercises
    for ex in all_exercises(args.chapter):
        print(f"{ex.label}\t{ex.name}\t{ex.points:g} pt\t{len(ex.public_checks)} public / "
              f"{len(ex.checks)} graded checks\t{ex.title}")
    return 0


def _coalesce_streams(outputs: list) -> list:
    # A cell that prints while computing can be saved as several stream outputs, split
    # differently on each run; merging them keeps the saved notebook byte-stable.
    merged: list = []
    for output in outputs:
        if (output.get("output_type") == "stream" and merged
                and merged[-1].get("output_type") == "stream" and merged[-1]["name"] == output["name"]):
            merged[-1]["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def _execute(args) -> int:
    """Execute solution notebooks in place (for authors), stopping at the first error."""
    import os
    import time

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.pop("MPLBACKEND", None)  # figures need the kernel's inline backend
    status = 0
    for name in args.notebooks:
        path = Path(name)
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        try:
            NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except CellExecutionError as error:
            print(f"{path}: a cell raised\n{error}", file=sys.stderr)
            status = 1
            continue
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            if cell.cell_type == "code":
                cell.outputs = _coalesce_streams(cell.outputs)
        nbformat.write(nb, path)
        print(f"{path}: executed in {time.perf_counter() - start:.1f} s")
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="attention-course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    rel = sub.add_parser("release", help="generate student notebooks (chapters/) from solutions/")
    rel.add_argument("--chapter", type=int, help="only this chapter (e.g. 2)")
    rel.add_argument("--check", action="store_true",
                     help="write nothing; exit 1 when a committed student notebook is stale")
    rel.add_argument("--root", default=".", help="the course folder (default: current folder)")
    rel.set_defaults(func=_release)

    lst = sub.add_parser("list", help="list the registered exercises")
    lst.add_argument("--chapter", type=int)
    lst.set_defaults(func=_list)

    exe = sub.add_parser("execute", help="execute notebooks in place (authors: refresh a solution notebook's outputs)")
    exe.add_argument("notebooks", nargs="+")
    exe.add_argument("--timeout", type=int, default=300)
    exe.set_defaults(func=_execute)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
