"""Grading that scales out (issue 23): ``grade --shard I/N`` on each slice, then ``merge``, must
write the same class files as one ``grade`` of the whole class, byte for byte (grading.log
aside: it holds timings and start times).

The class is part of the synthetic chapter-1 class of tests/test_grader_items.py (a reference,
kept mistakes, an odd answer, the stub: five of its students, since every submission is graded
twice here), plus a duplicate name (``dup.ipynb`` and ``dup/``, which
discover() names dup and dup~2) and an unreadable notebook, so that every kind of record is
carried through a shard file. Then ``grade --regrade`` of the whole run's folder grades again
only what changed (or what ``--only`` names), with the same seeds.
"""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from attention_course.tools.cli import main
from attention_course.tools.grading.shards import ShardError, merge_shards, parse_shard, shard_positions
from test_grader_items import SOLUTION_1, STUDENT_1, write_class

SEED, SHARDS = 2323, 2
STUDENTS = ["ref1", "m1", "m5", "m6", "odd"]   # a reference, three kinds of mistake, an odd answer
LIMITS = ["--time-limit", "10", "--memory-limit", "400", "--jobs", "2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if sys.platform != "linux":
        pytest.skip("the grader's sandbox needs Linux")
    base = tmp_path_factory.mktemp("shards")
    folder = base / "class"
    write_class(folder, STUDENTS)
    solution = json.loads(SOLUTION_1.read_text(encoding="utf-8"))
    (folder / "dup.ipynb").write_text(json.dumps(solution), encoding="utf-8")
    (folder / "dup").mkdir()
    (folder / "dup" / "mine.ipynb").write_text(STUDENT_1.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "broken.ipynb").write_text("{ not json", encoding="utf-8")
    grade = ["grade", str(folder), "--chapter", "1", "--seed", str(SEED)] + LIMITS
    assert main(grade + ["--out", str(base / "whole")]) == 0
    for index in range(SHARDS):
        assert main(grade + ["--out", str(base / "shards"), "--shard", f"{index}/{SHARDS}"]) == 0
    assert main(["merge", str(base / "merged"), str(base / "shards")]) == 0
    return base


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sharded_and_merged_class_files_equal_a_single_run_byte_for_byte(runs):
    whole, merged = _files(runs / "whole"), _files(runs / "merged")
    assert sorted(whole) == sorted(merged)
    assert len([n for n in whole if n.startswith("feedback/")]) == len(STUDENTS) + 4  # stub, dup, dup~2, broken
    differ = [name for name in whole if whole[name] != merged[name]]
    # grading.log: start time, seconds; record.jsonl: timings. Everything else is equal, PNGs included.
    assert differ == ["grading.log", "record.jsonl"]
    whole_log = whole["grading.log"].decode().splitlines()
    merged_log = merged["grading.log"].decode().splitlines()
    students = [line for line in whole_log if " (hidden inputs: seed " in line]
    assert len(students) == len(STUDENTS) + 3  # the unreadable notebook has no seed
    assert [line for line in merged_log if " (hidden inputs: seed " in line] == students  # same seeds, same order
    assert any(line.startswith(f"merged from {SHARDS} shard(s): 0/{SHARDS} (5 submissions") for line in merged_log)


def test_each_shard_grades_its_slice_of_the_sorted_class(runs):
    header, shards, results = merge_shards([runs / "shards"])
    names = header["class"]
    assert names == sorted(names, key=lambda s: (s.lower(), s)) and {"dup", "dup~2", "broken"} <= set(names)
    for shard in shards:
        assert [names.index(r.student) for _, r in shard.records] == list(range(shard.header["shard"], len(names),
                                                                                 SHARDS))
    assert [r.student for r in results] == names


def test_parse_shard_and_positions():
    assert parse_shard("2/10") == (2, 10) and parse_shard("0/1") == (0, 1)
    for bad in ("10/10", "1/0", "-1/4", "a/4", "3"):
        with pytest.raises(ShardError, match="--shard"):
            parse_shard(bad)
    assert shard_positions(7, 1, 3) == [1, 4] and shard_positions(2, 3, 4) == []


def _copy_shards(runs: Path, tmp_path: Path) -> Path:
    target = tmp_path / "shards"
    shutil.copytree(runs / "shards", target, ignore=shutil.ignore_patterns("*.log"))
    return target


def _edit(path: Path, change) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines = change(lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _header(change):
    def edit(lines):
        header = json.loads(lines[0])
        change(header)
        return [json.dumps(header)] + lines[1:]
    return edit


def test_merge_refuses_a_missing_or_doubled_shard(runs, tmp_path):
    shards = _copy_shards(runs, tmp_path)
    with pytest.raises(ShardError, match=f"missing shard\\(s\\) 1/{SHARDS}"):
        merge_shards([shards / f"shard-0-of-{SHARDS}.jsonl"])
    twin = tmp_path / "twin"
    twin.mkdir()
    shutil.copy(shards / f"shard-1-of-{SHARDS}.jsonl", twin / f"shard-1-of-{SHARDS}.jsonl")
    with pytest.raises(ShardError, match=f"shard 1/{SHARDS} is given twice"):
        merge_shards([shards, twin])


@pytest.mark.parametrize("key, value, words", [
    ("seed", SEED + 1, "grading seed"),
    ("chapter", 2, "chapter"),
    ("per_student", False, "choice of per-student seeds"),
    ("plan", "0" * 64, "grading plan"),
])
def test_merge_refuses_shards_of_different_runs(runs, tmp_path, key, value, words):
    shards = _copy_shards(runs, tmp_path)
    _edit(shards / f"shard-1-of-{SHARDS}.jsonl", _header(lambda h: h.__setitem__(key, value)))
    with pytest.raises(ShardError, match=f"shard 1/{SHARDS} .* differ in their {words}"):
        merge_shards([shards])


def test_merge_names_a_missing_and_a_doubled_student(runs, tmp_path):
    shards = _copy_shards(runs, tmp_path)
    one = shards / f"shard-1-of-{SHARDS}.jsonl"
    lost = json.loads(one.read_text(encoding="utf-8").splitlines()[1])["student"]

    def drop_first(lines):
        header = json.loads(lines[0])
        header["records"] -= 1
        return [json.dumps(header)] + lines[2:]
    _edit(one, drop_first)
    with pytest.raises(ShardError, match=f"in no shard: '{lost}' \\(shard 1/{SHARDS}\\)"):
        merge_shards([shards])
    shards = _copy_shards(runs, tmp_path / "again")
    zero = shards / f"shard-0-of-{SHARDS}.jsonl"
    stray = (shards / f"shard-1-of-{SHARDS}.jsonl").read_text(encoding="utf-8").splitlines()[1]

    def add_stray(lines):
        header = json.loads(lines[0])
        header["records"] += 1
        return [json.dumps(header)] + lines[1:] + [stray]
    _edit(zero, add_stray)
    with pytest.raises(ShardError, match=f"holds student '{lost}', who belongs to shard 1/{SHARDS}"):
        merge_shards([shards])


def test_merge_names_the_file_and_line_of_a_corrupt_record(runs, tmp_path):
    shards = _copy_shards(runs, tmp_path)
    path = shards / f"shard-0-of-{SHARDS}.jsonl"
    _edit(path, lambda lines: lines[:2] + [lines[2][: len(lines[2]) // 2]] + lines[3:])
    with pytest.raises(ShardError, match="line 3: not valid JSON"):
        merge_shards([shards])
    shards = _copy_shards(runs, tmp_path / "typed")

    def bad_points(lines):
        record = json.loads(lines[1])
        record["exercises"][0]["points"] = "10"
        return [lines[0], json.dumps(record)] + lines[2:]
    _edit(shards / f"shard-0-of-{SHARDS}.jsonl", bad_points)
    with pytest.raises(ShardError, match="line 2: the field 'points' has the wrong type"):
        merge_shards([shards])
    _edit(shards / f"shard-0-of-{SHARDS}.jsonl", lambda lines: lines[:-1])
    with pytest.raises(ShardError, match="announces 5 students, the file holds 4"):
        merge_shards([shards])


def test_cli_refuses_a_shard_without_a_seed_and_a_merge_of_another_plan(runs, tmp_path, capsys):
    assert main(["grade", str(runs / "class"), "--chapter", "1", "--shard", "0/2"]) == 2
    assert "--shard needs --seed" in capsys.readouterr().err
    assert main(["grade", str(runs / "class"), "--chapter", "1", "--seed", "1", "--shard", "2/2"]) == 2
    assert "I must be at least 0 and less than N" in capsys.readouterr().err
    shards = _copy_shards(runs, tmp_path)
    for index in range(SHARDS):
        _edit(shards / f"shard-{index}-of-{SHARDS}.jsonl", _header(lambda h: h.__setitem__("plan", "f" * 64)))
    assert main(["merge", str(tmp_path / "out"), str(shards)]) == 2
    assert "another grading plan" in capsys.readouterr().err and not (tmp_path / "out").exists()


def _grades(folder: Path) -> dict:
    return {row["student"]: row for row in csv.DictReader((folder / "grades.csv").open(encoding="utf-8"))}


def _seeds(folder: Path) -> dict:
    lines = (folder / "grading.log").read_text(encoding="utf-8").splitlines()
    return {line.split(":")[0]: line.split("seed ")[-1].split(")")[0] for line in lines if "(hidden inputs: seed" in line}


def test_regrade_grades_only_the_changed_and_named_submissions_with_the_same_seeds(runs, tmp_path, capsys):
    folder, earlier = tmp_path / "class", tmp_path / "earlier"
    shutil.copytree(runs / "class", folder)
    shutil.copytree(runs / "whole", earlier)
    before = _grades(earlier)
    assert before["m6"]["total"] != before["m6"]["max_total"]  # m6 kept a mistake: fix it
    shutil.copy(SOLUTION_1, folder / "m6.ipynb")
    (folder / "late.ipynb").write_text(STUDENT_1.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "odd.ipynb").unlink()
    capsys.readouterr()
    assert main(["grade", str(folder), "--chapter", "1", "--regrade", str(earlier), "--only", "ref1"] + LIMITS) == 0
    printed = capsys.readouterr().out
    # m6 changed, late is new, ref1 is named: 3 graded again, the other 6 kept (broken too: unchanged)
    assert f"regraded 3 of {len(STUDENTS) + 4} submissions" in printed and "6 unchanged kept" in printed, printed
    after = _grades(earlier)
    assert after["m6"]["total"] == after["m6"]["max_total"] and after["late"]["total"] == "0"
    assert "odd" not in after and set(after) == set(before) - {"odd"} | {"late"}
    assert all(after[s] == before[s] for s in after if s not in ("m6", "late"))
    seeds = _seeds(earlier)
    assert all(seeds[s] == v for s, v in _seeds(runs / "whole").items() if s != "odd")  # the earlier run's seed
    assert main(["grade", str(folder), "--chapter", "1", "--regrade", str(earlier), "--seed", "7"]) == 2
    assert f"differs from the seed of the run in {earlier} ({SEED})" in capsys.readouterr().err
    assert main(["grade", str(folder), "--chapter", "1", "--regrade", str(earlier), "--only", "nobody"]) == 2
    assert "--only names no submission of the folder: 'nobody'" in capsys.readouterr().err
    assert main(["grade", str(folder), "--chapter", "1", "--regrade", str(tmp_path)]) == 2
    assert "no record.jsonl there" in capsys.readouterr().err
