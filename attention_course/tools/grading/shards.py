"""Grading that scales out: ``grade --shard I/N`` grades a slice of the class, ``merge`` joins the slices.

A shard is chosen by the submission's place in the class as :func:`.grader.discover` sorts it
(by name, never by the file system's order): shard ``I`` of ``N`` grades the submissions at
positions ``I, I+N, I+2N, ...``. Every shard discovers the whole folder, so every shard agrees
on the class, on each student's name (``alice~2`` included) and, from the grading seed and that
name, on each student's hidden inputs: a student gets the same grade in any shard as in a
single run.

Each shard writes one record, ``shard-I-of-N.jsonl``, atomically (a temporary file renamed
into place): a header line (chapter, seed, the plan's fingerprint, the whole class in order),
then one line per student it graded with everything the class reports need (points, checks,
matched kept mistakes, reasons, notes, timings). :func:`merge_shards` checks that the records
belong together and cover the class exactly once, and returns the results in the class's order,
which the same report writers as a single run then turn into the same files.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...checks.checking import CheckResult
from .grader import ExerciseResult, SubmissionResult

FORMAT = "attention-course-shard"
FORMAT_VERSION = 1
SHARD_FILE = re.compile(r"^shard-(\d+)-of-(\d+)\.jsonl$")
MAX_SHARD_BYTES = 512 * 1024 * 1024  # 2,000 students' records of a chapter take a few MB


class ShardError(ValueError):
    """A shard option, or a shard record, that cannot be used; the message names which and why."""


def parse_shard(text: str) -> tuple:
    """``"I/N"`` -> (I, N), with 0 <= I < N (a Slurm array index or a Kubernetes completion index)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise ShardError(f"--shard {text!r}: expected I/N, e.g. 0/4 (shard I of N, counted from 0)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ShardError(f"--shard {text!r}: I must be at least 0 and less than N, which must be at least 1 "
                         f"(shards of 4 are 0/4, 1/4, 2/4, 3/4)")
    return index, count


def shard_positions(class_size: int, index: int, count: int) -> list:
    """The positions in the sorted class that shard ``index`` of ``count`` grades."""
    return list(range(index, class_size, count))


def shard_file_name(index: int, count: int) -> str:
    return f"shard-{index}-of-{count}.jsonl"


def plan_fingerprint(plan) -> str:
    """What decides how a class is scored, as a digest: exercises, points, checks (name, public,
    points), kept mistakes, extra checks' files. Shards of different course versions or options
    differ here, and merge refuses them."""
    from ...checks.checking import check_points
    shape = [[ep.label, ep.exercise.name, float(ep.exercise.points),
              [[cp.check.name, bool(cp.check.public), round(check_points(ep.exercise, cp.check), 6)]
               for cp in ep.checks],
              [m.name for m in ep.exercise.mistakes]] for ep in plan.exercises]
    text = json.dumps([plan.chapter, shape, list(plan.extra_files)], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path: Optional[Path]) -> Optional[str]:
    if path is None:
        return None
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


# ------------------------------------------------------------------ records


def result_record(result: SubmissionResult, position: int) -> dict:
    return {"position": position, "student": result.student,
            "path": None if result.path is None else str(result.path), "sha256": file_digest(result.path),
            "problem": result.problem, "notes": list(result.notes), "seed": result.seed,
            "exercises": [{"label": e.label, "name": e.name, "title": e.title, "max_points": e.max_points,
                           "points": e.points, "reason": e.reason, "notes": list(e.notes), "elapsed": e.elapsed,
                           "attempted": e.attempted, "outputs": [list(item) for item in e.outputs],
                           "checks": [{"label": c.label, "check": c.check, "passed": c.passed, "reason": c.reason,
                                       "hint": c.hint, "mistake": c.mistake, "points": c.points,
                                       "max_points": c.max_points} for c in e.checks]}
                          for e in result.exercises]}


class _Reader:
    """Typed access to one parsed line; every complaint names the file, the line and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, message: str):
        raise ShardError(f"{self.where}: {message} (a corrupt or edited shard record: grade that shard again)")

    def get(self, data, key: str, kinds, optional: bool = False):
        if not isinstance(data, dict):
            self.fail(f"expected an object holding '{key}'")
        if key not in data:
            self.fail(f"the field '{key}' is missing")
        value = data[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
            self.fail(f"the field '{key}' is {value!r}, not a number")
        if not isinstance(value, kinds):
            self.fail(f"the field '{key}' has the wrong type ({type(value).__name__})")
        return value

    def strings(self, data, key: str) -> list:
        value = self.get(data, key, list)
        if not all(isinstance(v, str) for v in value):
            self.fail(f"the field '{key}' must be a list of texts")
        return value


def result_from_record(data: dict, reader: _Reader) -> SubmissionResult:
    number = (int, float)
    path = reader.get(data, "path", str, optional=True)
    result = SubmissionResult(reader.get(data, "student", str), None if path is None else Path(path),
                              problem=reader.get(data, "problem", str), notes=reader.strings(data, "notes"),
                              seed=reader.get(data, "seed", int, optional=True))
    for e in reader.get(data, "exercises", list):
        er = ExerciseResult(reader.get(e, "label", str), reader.get(e, "name", str), reader.get(e, "title", str),
                            reader.get(e, "max_points", number), points=reader.get(e, "points", number),
                            reason=reader.get(e, "reason", str), notes=reader.strings(e, "notes"),
                            elapsed=reader.get(e, "elapsed", number), attempted=reader.get(e, "attempted", bool))
        for item in e.get("outputs", []) if isinstance(e, dict) else []:  # absent in records before it existed
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
                reader.fail("the field 'outputs' must hold [check, digest, reference digest] texts")
            er.outputs.append(item)
        for c in reader.get(e, "checks", list):
            er.checks.append(CheckResult(reader.get(c, "label", str), reader.get(c, "check", str),
                                         reader.get(c, "passed", bool), reader.get(c, "reason", str),
                                         reader.get(c, "hint", str), reader.get(c, "mistake", str, optional=True),
                                         reader.get(c, "points", number), reader.get(c, "max_points", number)))
        result.exercises.append(er)
    return result


# ------------------------------------------------------------------ writing a shard


RECORD_NAME = "record.jsonl"  # a whole class's record, beside its class files (for --regrade)


def write_shard(out: Path, index: int, count: int, plan, class_names: list, results: list, positions: list, *,
                per_student: bool, log_header: list, ignored: list, seconds: float,
                name: Optional[str] = None) -> Path:
    """Write ``out/shard-I-of-N.jsonl`` (or ``out/name``) atomically; return its path."""
    from ... import __version__
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "version": FORMAT_VERSION, "course_version": __version__,
              "chapter": plan.chapter, "seed": plan.seed, "per_student": bool(per_student),
              "plan": plan_fingerprint(plan), "shard": index, "shards": count, "class": list(class_names),
              "records": len(results), "ignored": list(ignored), "log_header": list(log_header),
              "seconds": round(seconds, 3)}
    path = out / (name or shard_file_name(index, count))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for result, position in zip(results, positions):
                f.write(json.dumps(result_record(result, position), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # a reader sees the old file or the whole new one, never half of it
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_class_record(out: Path, plan, results: list, *, per_student: bool, log_header: list, ignored: list,
                       seconds: float) -> Path:
    """The class's record beside its class files, ``out/record.jsonl``: what ``grade --regrade OUT`` reuses
    (the record of one shard of one, the whole class in its order)."""
    return write_shard(out, 0, 1, plan, [r.student for r in results], results, list(range(len(results))),
                       per_student=per_student, log_header=log_header, ignored=ignored, seconds=seconds,
                       name=RECORD_NAME)


# ------------------------------------------------------------------ merging


@dataclass
class Shard:
    path: Path
    header: dict
    records: list  # (position, SubmissionResult)
    digests: dict = None  # student -> SHA-256 of their submission file when graded (None: unreadable)

    @property
    def name(self) -> str:
        return f"shard {self.header['shard']}/{self.header['shards']} ({self.path})"


def read_shard(path: Path) -> Shard:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SHARD_BYTES:
            raise ShardError(f"{path}: {size / 1e6:.0f} MB, over the {MAX_SHARD_BYTES // 1_000_000} MB limit "
                             f"of a shard record")
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise ShardError(f"{path}: not UTF-8 text, so not a shard record") from None
    except OSError as error:
        raise ShardError(f"{path}: cannot be read ({error.strerror or error})") from None
    parsed = []
    for number, line in enumerate(lines, 1):
        try:
            parsed.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError):
            raise ShardError(f"{path}, line {number}: not valid JSON (a corrupt or truncated shard record: "
                             f"grade that shard again)") from None
    if not parsed:
        raise ShardError(f"{path}: empty, not a shard record")
    reader = _Reader(f"{path}, line 1")
    header = parsed[0]
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        reader.fail(f"not a shard record of attention-course (no \"format\": \"{FORMAT}\")")
    if reader.get(header, "version", int) != FORMAT_VERSION:
        reader.fail(f"format version {header['version']}, this grader reads version {FORMAT_VERSION}")
    for key, kinds in (("course_version", str), ("chapter", int), ("seed", int), ("per_student", bool),
                       ("plan", str), ("shard", int), ("shards", int), ("records", int), ("seconds", (int, float))):
        reader.get(header, key, kinds)
    for key in ("class", "ignored", "log_header"):
        reader.strings(header, key)
    if not 0 <= header["shard"] < header["shards"]:
        reader.fail(f"shard {header['shard']} of {header['shards']} is not a valid shard number")
    if len(parsed) - 1 != header["records"]:
        raise ShardError(f"{path}: the header announces {header['records']} students, the file holds "
                         f"{len(parsed) - 1} (a truncated or edited shard record: grade that shard again)")
    records, digests = [], {}
    for number, data in enumerate(parsed[1:], 2):
        line_reader = _Reader(f"{path}, line {number}")
        position = line_reader.get(data, "position", int)
        result = result_from_record(data, line_reader)
        records.append((position, result))
        digests[result.student] = line_reader.get(data, "sha256", str, optional=True)
    return Shard(path, header, records, digests)


def find_shard_files(paths: list) -> list:
    """Shard records among ``paths``: a ``shard-I-of-N.jsonl`` file, or every one in a folder."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if SHARD_FILE.match(q.name) and q.is_file())
            if not found:
                raise ShardError(f"{p}: no shard record (shard-I-of-N.jsonl) in this folder")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise ShardError(f"{p}: no such file or folder")
    unique = list(dict.fromkeys(f.resolve() for f in files))
    return unique


_SAME = (("chapter", "chapter"), ("seed", "grading seed"), ("per_student", "choice of per-student seeds (--one-seed)"),
         ("plan", "grading plan (exercises, checks, points and weights of course.yml, extra checks)"),
         ("course_version", "course version"),
         ("shards", "number of shards"), ("class", "class (the submissions folder differed)"))


def merge_shards(paths: list) -> tuple:
    """(header of the first shard, shards, results in the class's order), after checking that the
    shards are of one grading run's options and cover the class exactly once."""
    shards = [read_shard(p) for p in find_shard_files(paths)]
    if not shards:
        raise ShardError("no shard record given")
    first = shards[0]
    for shard in shards[1:]:
        for key, what in _SAME:
            if shard.header[key] != first.header[key]:
                mine, theirs = shard.header[key], first.header[key]
                detail = "" if key == "class" else f": {mine!r} against {theirs!r}"
                raise ShardError(f"{shard.name} and {first.name} differ in their {what}{detail}; "
                                 f"merge only the shards of one grading run")
    count, names = first.header["shards"], first.header["class"]
    by_index: dict = {}
    for shard in shards:
        other = by_index.setdefault(shard.header["shard"], shard)
        if other is not shard:
            raise ShardError(f"shard {shard.header['shard']}/{count} is given twice: {other.path} and {shard.path}")
    missing_shards = [i for i in range(count) if i not in by_index]
    if missing_shards:
        raise ShardError(f"missing shard(s) {', '.join(f'{i}/{count}' for i in missing_shards)} "
                         f"(only {len(by_index)} of {count} given): grade them, then merge all {count}")
    holder: dict = {}
    results: dict = {}
    for shard in shards:
        for position, result in shard.records:
            if not 0 <= position < len(names) or names[position] != result.student:
                raise ShardError(f"{shard.name}: student {result.student!r} at class position {position} is "
                                 f"not the class's student there (a corrupt or edited shard record)")
            if position % count != shard.header["shard"]:
                raise ShardError(f"{shard.name}: holds student {result.student!r}, who belongs to shard "
                                 f"{position % count}/{count}")
            if position in holder:
                raise ShardError(f"student {result.student!r} is in {holder[position].name} and in {shard.name}")
            holder[position], results[position] = shard, result
    missing = [names[i] for i in range(len(names)) if i not in results]
    if missing:
        raise ShardError(f"{len(missing)} student(s) of the class are in no shard: "
                         + ", ".join(f"{n!r} (shard {names.index(n) % count}/{count})" for n in missing[:10])
                         + (" ..." if len(missing) > 10 else ""))
    return first.header, sorted(shards, key=lambda s: s.header["shard"]), [results[i] for i in range(len(names))]


# ------------------------------------------------------------------ regrading


def regrade_split(record: Path, submissions: list, only: Optional[list] = None) -> tuple:
    """(header of the earlier run's record, {student: earlier result to keep}, submissions to grade again).

    A submission is graded again when it is new, when its file changed since the earlier run
    (SHA-256), when it could not be read, or when it is named in ``only``; every other one
    keeps its earlier result. Students of the earlier run who are no longer in the folder are
    dropped."""
    shard = read_shard(record)
    if shard.header["shards"] != 1:
        raise ShardError(f"{record}: a shard of {shard.header['shards']}, not a whole class's record "
                         f"(merge the shards first, then regrade the merged folder)")
    only = set(only or [])
    unknown = sorted(only - {sub.student for sub in submissions})
    if unknown:
        raise ShardError(f"--only names no submission of the folder: {', '.join(map(repr, unknown))}")
    earlier = {result.student: result for _, result in shard.records}
    keep, again = {}, []
    for sub in submissions:
        digest = file_digest(sub.path)
        if sub.student in earlier and digest is not None and shard.digests.get(sub.student) == digest \
                and sub.student not in only:
            keep[sub.student] = earlier[sub.student]
        else:
            again.append(sub)
    return shard.header, keep, again
