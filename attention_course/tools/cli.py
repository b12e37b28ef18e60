"""The ``attention-course`` command."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _release(args) -> int:
    from .release import ReleaseError, release
    from .translated_edition import release_languages
    try:
        stale = release(Path(args.root), chapter=args.chapter, check_only=args.check)
        stale += release_languages(Path(args.root), check_only=args.check)
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
    """One line per exercise; under it, unless --brief, one indented line per check: public or
    hidden, its weight and points, and its name (as course.yml's ``weights`` spells it)."""
    import json
    from ..checks.checking import check_points
    from ..checks.registry import all_exercises
    for ex in all_exercises(args.chapter):
        print(f"{ex.label}\t{ex.name}\t{ex.points:g} pt\t{len(ex.public_checks)} public / "
              f"{len(ex.checks)} graded checks\t{ex.title}")
        if args.brief:
            continue
        for check in ex.checks:
            print(f"    {'public' if check.public else 'hidden'}  weight {check.weight:<4g} "
                  f"{check_points(ex, check):5.2f} pt  {json.dumps(check.name, ensure_ascii=False)}")
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


def _build(args) -> int:
    from .editions import build, build_language
    if args.lang != "en":
        status, html = build_language(Path(args.root), args.lang, edition=args.edition, out=args.out)
    else:
        status, html = build(Path(args.root), edition=args.edition, out=args.out,
                             execute=not args.stored_outputs)
    if status == 0:
        print(f"\nThe {args.edition} edition is built: open {html / 'index.html'}")
    return status


def _not_released(command: str, chapter: int) -> bool:
    """Say so, and return True, when course.yml does not release ``chapter``."""
    from .course_config import CourseConfigError, active
    try:
        config = active()
    except CourseConfigError as error:
        print(f"attention-course {command}: {error}", file=sys.stderr)
        return True
    if not config.released(chapter):
        print(f"attention-course {command}: chapter {chapter} is not released in {config.path} "
              f"(chapters: {', '.join(map(str, config.chapters))}); add it there to grade it", file=sys.stderr)
        return True
    return False


def _grade(args) -> int:
    """Grade a folder of submissions (class) or one notebook (self-study)."""
    if args.lang:
        from ..checks.language import set_language
        set_language(args.lang)
    if _not_released("grade", args.chapter):
        return 2
    refused = _lms_matches_nobody(Path(args.target), args.canvas_roster, args.moodle_worksheet)
    if refused:
        print(f"attention-course grade: {refused}", file=sys.stderr)
        return 2
    from .grading.classrun import GradeOptions, NotebookGraded, Refused, ShardGraded, grade
    options = GradeOptions(seed=args.seed, jobs=args.jobs, time_limit=args.time_limit, memory_mb=args.memory_limit,
                           extra_checks=Path(args.extra_checks) if args.extra_checks else None,
                           per_student=not args.one_seed)
    try:
        done = grade(Path(args.target), args.chapter, options, out=args.out, shard=args.shard,
                     regrade=args.regrade, only=args.only.split(",") if args.only else None,
                     canvas_roster=args.canvas_roster, canvas_assignment=args.canvas_assignment,
                     moodle_worksheet=args.moodle_worksheet)
    except Refused as error:
        print(f"attention-course grade: {error}", file=sys.stderr)
        return 2
    if isinstance(done, NotebookGraded):
        print(done.feedback, end="")
        print(f"(seed {done.seed}; graded in {done.seconds:.1f} s)")
        return 0
    if isinstance(done, ShardGraded):
        print(f"graded shard {done.index}/{done.count} of chapter {done.chapter:02d}: {done.graded} of "
              f"{done.class_size} submissions in {done.seconds:.1f} s (seed {done.seed})")
        print(f"wrote {done.path}; when every shard is done: attention-course merge OUT {done.out}")
        return 0
    return _print_class(args.command, done)


def _lms_matches_nobody(target: Path, canvas_roster, moodle_worksheet) -> str:
    """Before a class is graded: why the Canvas roster or the Moodle worksheet matches none of the
    submissions in ``target`` (another class's or another LMS's file), else "" (also when the file cannot
    be read: ``grade`` says so itself)."""
    if not (canvas_roster or moodle_worksheet) or not target.is_dir():
        return ""
    from .grading.lms import RosterError, refuse_unmatched_roster
    from .grading.moodle import WorksheetError, refuse_unmatched_worksheet
    from .grading.submissions import discover
    from .notebook import printable
    try:
        students = [s.student for s in discover(target)[0]]
    except (OSError, ValueError):
        return ""
    try:
        if canvas_roster:
            refuse_unmatched_roster(students, Path(canvas_roster))
        if moodle_worksheet:
            refuse_unmatched_worksheet(students, Path(moodle_worksheet))
    except (RosterError, WorksheetError) as error:
        if str(error).startswith("no submission matches"):
            return printable(str(error))
    return ""


def _print_class(command: str, done) -> int:
    """What a graded class (a single run, a regrade or merged shards) prints: the same for all."""
    files = done.files
    out, plan, results, summary = files.out, files.plan, files.results, files.summary
    if done.how == "regraded":
        print(f"regraded {done.graded} of {len(results)} submissions of chapter {plan.chapter:02d} in "
              f"{done.seconds:.1f} s (seed {plan.seed}; {done.kept} unchanged kept)", end="")
    elif done.how == "merged":
        print(f"merged {done.shards} shard(s) of chapter {plan.chapter:02d}: {len(results)} submissions "
              f"(seed {plan.seed})", end="")
    else:
        print(f"graded {len(results)} submissions of chapter {plan.chapter:02d} in {done.seconds:.1f} s "
              f"(seed {plan.seed})", end="")
    print(f"; mean {summary['mean_total']:.2f} / {plan.max_total:g}")
    print(f"wrote {out}/grades.csv, {out}/feedback/ ({len(results)} files), {out}/summary.md, "
          f"{out}/histogram.png, {out}/items.csv, {out}/misconceptions.csv, {out}/items.png, {out}/grading.log, "
          f"{out}/record.jsonl")
    _print_lms(files)
    if files.problems:
        print(f"attention-course {command}: {'; '.join(files.problems)}", file=sys.stderr)
        return 2
    if files.flagged:
        print(f"{files.flagged} check(s) flagged: almost nobody passes them while passing the rest of their exercise "
              f"(see {out}/summary.md, 'Checks to look at')")
    return 0


def _print_lms(files) -> None:
    """What the Canvas and Moodle files hold, and who they leave out (each one named)."""
    from .notebook import printable
    out = files.out

    def left_out(what: str, names: list, why: str) -> None:
        if names:
            # "; " between names: a roster's names hold commas ("Turing, Alan; Knuth, Donald")
            print(printable(f"{what}: {len(names)} {why}: {'; '.join(names)}"), file=sys.stderr)

    if files.canvas is not None:
        canvas, name = files.canvas, files.canvas_name
        print(f"wrote {out}/{name}: {canvas['matched']} students, assignment column '{files.canvas_assignment}'")
        if canvas.get("feedback"):
            print(f"wrote {out}/canvas-feedback.zip: {canvas['feedback']} students' feedback for Canvas's "
                  f"'Re-Upload Submissions'")
        left_out("warning", canvas["unmatched"],
                 f"submission(s) match no student of the roster, so they are not in {name}")
        left_out("note", canvas["absent"], "student(s) of the roster have no submission (no row, so Canvas keeps "
                                           "their grade as it is)")
        left_out("note", canvas.get("no_feedback", []), "matched submission(s) do not carry Canvas's download name "
                                                        "(user and attachment ids), so canvas-feedback.zip has no "
                                                        "file for them")
        if canvas["unmatched"] or canvas["absent"]:
            print(f"the students left out are listed in {out}/{canvas['unmatched_file']}", file=sys.stderr)
    if files.moodle is not None:
        moodle = files.moodle
        print(f"wrote {out}/{moodle['worksheet']} ({moodle['matched']} graded) and {out}/{moodle['feedback']}: "
              f"upload them with Moodle's 'Upload grading worksheet' and 'Upload multiple feedback files in a zip'")
        if moodle["scaled"]:
            print(f"note: grades are scaled to the worksheet's Maximum Grade {moodle['scaled']}")
        left_out("warning", moodle["unmatched"], "submission(s) match no participant of the worksheet, so they "
                                                 "are not graded in it")
        left_out("warning", moodle["clashes"], "submission(s) share a participant with another, so none of them "
                                               "is graded in the worksheet")
        left_out("note", moodle["absent"], "participant(s) of the worksheet have no submission (their row is left "
                                           "as downloaded)")
        left_out("note", moodle["aside"], "folder(s) without a notebook set aside for the same participant's "
                                          "notebook")
        left_out("warning", moodle["locked"], "participant(s) have 'Grade can be changed: No' in the worksheet: "
                                              "Moodle will not take their grade")
        if moodle["unmatched"] or moodle["clashes"] or moodle["absent"]:
            print(f"the students left out are listed in {out}/{moodle['unmatched_file']}", file=sys.stderr)


def _similarity(args) -> int:
    """Write the similarity report of a class: pairs of exercise cells worth a look (never a verdict)."""
    from .grading.grader import discover
    from .grading.similarity import DEFAULT_THRESHOLD, compare_class, write_similarity
    from .notebook import printable

    target = Path(args.target)
    if not target.is_dir():
        print(f"attention-course similarity: {target} is not a folder of submissions", file=sys.stderr)
        return 2
    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    try:
        submissions, _ = discover(target)
        report = compare_class(submissions, args.chapter, threshold=threshold, known=not args.no_known_sources,
                               graded=None if args.graded is None else Path(args.graded))
    except ValueError as error:
        print(printable(f"attention-course similarity: {error}"), file=sys.stderr)
        return 2
    out = Path(args.out or f"similarity-ch{args.chapter:02d}")
    paths = write_similarity(report, out)
    flagged = report.flagged()
    print(f"{len(submissions)} submissions, {len(flagged)} pair(s) at or above {threshold:.0%} similarity "
          f"(worth a look, not proof of copying); {len(report.skipped)} cell(s) or notebook(s) not compared")
    if report.known:
        print(f"{len(report.flagged_known())} cell(s) match one of the course's published answers (its solution "
              f"or a kept alternative) at or above {threshold:.0%}")
    kinds = [f.kind for f in report.findings]
    own = (f"{kinds.count('no code of its own')} cell(s) hold no code of their own for an exercise that earned "
           f"points" if args.graded is not None else "no --graded record, so passed cells without code of their "
           "own are not looked for")
    print(f"{kinds.count('reaches outside the exercise')} cell(s) reach outside the exercise; {own}")
    if report.not_graded:
        print(printable(f"note: {len(report.not_graded)} submission(s) not matched to the graded record: "
                        + ", ".join(f"{s} ({why})" for s, why in report.not_graded[:10])
                        + (" ..." if len(report.not_graded) > 10 else "")), file=sys.stderr)
    print(f"wrote {paths['html']}, {paths['csv']}, {paths['known_csv']} and {paths['own_code_csv']}")
    return 0


def _merge(args) -> int:
    """Join the records of ``grade --shard`` into the class files of one single run."""
    from .grading.classrun import Refused, merge
    try:
        done = merge(Path(args.out), args.shards,
                     extra_checks=Path(args.extra_checks) if args.extra_checks else None,
                     canvas_roster=args.canvas_roster, canvas_assignment=args.canvas_assignment,
                     moodle_worksheet=args.moodle_worksheet)
    except Refused as error:
        print(f"attention-course merge: {error}", file=sys.stderr)
        return 2
    return _print_class(args.command, done)


def _pdf(args) -> int:
    from .pdf import PdfError, make_pdf
    root = Path(args.root).resolve()
    html_dir = Path(args.site) if args.site else (
        root / "_build" / "html" if args.edition == "full" else root / "_build" / "student" / "_build" / "html")
    try:
        info = make_pdf(root, html_dir, Path(args.out), edition=args.edition)
    except PdfError as error:
        print(f"attention-course pdf: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({args.edition} edition): {info['pages']} pages ({info['contents_pages']} of contents), "
          f"{len(info['bookmarks'])} bookmarks with {info['sections']} sections under them, "
          f"{info['links']['internal']} links inside the book, {info['wrapped']} code lines continued, "
          f"{info['equations_scaled']} wide equations drawn smaller")
    for text in info["equations_too_wide"]:
        print(f"attention-course pdf: an equation is still wider than the page: {text}", file=sys.stderr)
    return 0


def _gradescope(args) -> int:
    if _not_released("gradescope", args.chapter):
        return 2
    from .grading.extra import ExtraChecksError
    from .grading.grader import default_seed
    from .grading.gradescope import build_zip
    seed = default_seed() if args.seed is None else args.seed
    try:
        names = build_zip(args.chapter, Path(args.out), seed=seed, time_limit=args.time_limit,
                          memory_mb=args.memory_limit, jobs=args.jobs,
                          extra_checks=Path(args.extra_checks) if args.extra_checks else None,
                          hidden_visibility=args.hidden_visibility, lang=args.lang)
    except (ExtraChecksError, ValueError) as error:
        print(f"attention-course gradescope: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: Gradescope autograder for chapter {args.chapter:02d} "
          f"({len(names)} files, seed {seed}); upload it as the assignment's autograder zip")
    return 0


def _release_students(args) -> int:
    from .course_config import CourseConfigError, parse_chapters
    from .student_build import StudentBuildError
    from .student_release import REPORT_NAME, release_students
    try:
        chapters = parse_chapters(args.chapters, "--chapters") if args.chapters else None
        practice = args.practice if args.practice in (None, "auto") else \
            [p.strip() for p in args.practice.split(",") if p.strip()]
        opened = parse_chapters(args.answers_released, "--answers-released") if args.answers_released else None
        result = release_students(Path(args.root), Path(args.out), chapters=chapters,
                                  repository_url=args.repository_url, practice=practice,
                                  answers_released=opened, build=args.build, jupyterhub_url=args.jupyterhub_url)
    except (CourseConfigError, StudentBuildError, ValueError) as error:
        print(f"attention-course release-students: {error}", file=sys.stderr)
        return 2
    exposed = [row for row in result.report if row["status"] == "graded" and row["found"]]
    print(f"wrote {result.out}: chapters {', '.join(map(str, result.plan.chapters))}, "
          f"{len(result.plan.graded)} graded exercises, {len(result.plan.practice)} practice")
    for row in result.report:
        if row["status"] == "not released":
            continue
        where = ", ".join(path for path, _ in row["found"]) or "nowhere"
        print(f"  {row['label']:9} {row['status']:40} answer appears: {where}")
    if result.auto_practice:
        print("practice in this release (it cannot grade them):")
        for label, why in result.auto_practice.items():
            print(f"  {label}: {why}")
        print(f"grade with the same choice: practice: [{', '.join(result.auto_practice)}] in course.yml")
    print(f"the whole answer-exposure report: {result.out / REPORT_NAME}")
    if result.build_status not in (None, 0):
        print(f"attention-course release-students: the site's build failed ({result.build_status})", file=sys.stderr)
        return 1
    if exposed:
        print("attention-course release-students: the answers of graded exercises appear in the release: "
              + ", ".join(row["label"] for row in exposed), file=sys.stderr)
        return 1
    return 0


def _progress(args) -> int:
    from .progress import main as progress_main
    return progress_main(args)


def _new_exercise(args) -> int:
    """Authors: the skeleton of a new exercise (module, import, notebook cells)."""
    from .scaffold import ScaffoldError, check_package_root, next_steps, plan_new_exercise
    root = Path(args.root)
    try:
        check_package_root(root)
        plan = plan_new_exercise(root, args.chapter, args.title, args.name, kind=args.kind, points=args.points)
        plan.write()
    except (ScaffoldError, OSError) as error:
        print(f"attention-course new-exercise: {error}", file=sys.stderr)
        return 2
    print("\n".join(next_steps(plan, root)))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="attention-course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    rel = sub.add_parser("release", help="generate student notebooks (chapters/) from solutions/")
    rel.add_argument("--chapter", type=int, help="only this chapter (e.g. 2)")
    rel.add_argument("--check", action="store_true",
                     help="write nothing; exit 1 when a committed student notebook is stale")
    rel.add_argument("--root", default=".", help="the course folder (default: current folder)")
    rel.set_defaults(func=_release)

    lst = sub.add_parser("list", help="list the registered exercises and their checks (names as course.yml's "
                                      "weights spell them)")
    lst.add_argument("--chapter", type=int)
    lst.add_argument("--brief", action="store_true", help="one line per exercise, without its checks")
    lst.set_defaults(func=_list)

    bld = sub.add_parser("build", help="build the course site: the full edition or the student edition (no solutions)")
    bld.add_argument("--edition", choices=["full", "student"], default="full")
    bld.add_argument("--out", help="output folder (default: the course folder for full, _build/student for student)")
    bld.add_argument("--root", default=".", help="the course folder (default: current folder)")
    bld.add_argument("--lang", default="en", choices=["en", "zh"],
                     help="zh: the edition in Chinese, under the English one (_build/html/zh)")
    bld.add_argument("--stored-outputs", action="store_true",
                     help="full edition: use the solution notebooks' stored outputs instead of executing them")
    bld.set_defaults(func=_build)

    pdf = sub.add_parser("pdf", help="print a built site into one PDF (offline copy of the course)")
    pdf.add_argument("--edition", choices=["full", "student"], default="full")
    pdf.add_argument("--site", help="the built site's html folder (default: the edition's usual place)")
    pdf.add_argument("--root", default=".", help="the course folder (default: current folder)")
    pdf.add_argument("--out", default="_build/course.pdf")
    pdf.set_defaults(func=_pdf)

    exe = sub.add_parser("execute", help="execute notebooks in place (authors: refresh a solution notebook's outputs)")
    exe.add_argument("notebooks", nargs="+")
    exe.add_argument("--timeout", type=int, default=300)
    exe.set_defaults(func=_execute)

    grd = sub.add_parser("grade", help="grade a folder of submitted notebooks (or one notebook) for a chapter")
    grd.add_argument("target", help="a folder of submissions (alice.ipynb, or bob/<one>.ipynb), or one notebook")
    grd.add_argument("--chapter", type=int, required=True)
    grd.add_argument("--lang", choices=["en", "zh"], help="the feedback's language (default: ATTENTION_COURSE_LANG, "
                     "else English)")
    grd.add_argument("--out", help="output folder (default: grades-chNN); for one notebook, optional")
    grd.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                     help="parallel sandboxed workers (default: cores, at most 4)")
    grd.add_argument("--seed", type=int, help="grading seed of the hidden inputs (default: random, logged)")
    grd.add_argument("--time-limit", type=float, default=10.0, help="seconds per exercise (default 10)")
    grd.add_argument("--memory-limit", type=int, default=1024, help="MB per exercise above the baseline (default 1024)")
    grd.add_argument("--extra-checks", help="folder of .py files adding private checks (trusted; run in the grader)")
    grd.add_argument("--canvas-roster", metavar="FILE",
                     help="also write canvas.csv, Canvas's gradebook import: FILE maps submissions to Canvas "
                          "students (columns Student, ID, SIS User ID, SIS Login ID, Section, and optionally "
                          "Submission; a gradebook exported from Canvas will do)")
    grd.add_argument("--canvas-assignment", metavar="NAME",
                     help="canvas.csv's assignment column (default 'Chapter NN'; 'NAME (ID)' with the "
                          "assignment's Canvas id updates that assignment)")
    grd.add_argument("--moodle-worksheet", metavar="FILE",
                     help="also write moodle-worksheet.csv and moodle-feedback.zip for Moodle: FILE is the "
                          "assignment's grading worksheet downloaded from Moodle; submissions are Moodle's "
                          "download folders (<Full name>_<participant id>_assignsubmission_file)")
    grd.add_argument("--one-seed", action="store_true",
                     help="every student gets the same hidden inputs (the seed's): about twice as fast, but "
                          "students who share outputs share the hidden inputs (default: per student)")
    grd.add_argument("--shard", metavar="I/N",
                     help="grade only shard I of N (I from 0) of the class, chosen by the submissions' sorted names, "
                          "and write OUT/shard-I-of-N.jsonl; needs --seed; join the N shards with "
                          "`attention-course merge` (a Slurm array index or JOB_COMPLETION_INDEX makes I)")
    grd.add_argument("--regrade", metavar="DIR",
                     help="grade again only the submissions that are new or changed since the run whose files are in "
                          "DIR (its record.jsonl), with that run's seed; keep the others' results; rewrite the class "
                          "files in DIR (or --out)")
    grd.add_argument("--only", metavar="NAMES", help="with --regrade: also grade again these submissions "
                                                      "(comma-separated names), changed or not")
    grd.set_defaults(func=_grade)

    mrg = sub.add_parser("merge", help="join the shards of `grade --shard I/N` into the class files of a single run")
    mrg.add_argument("out", help="output folder of the class files (grades.csv, feedback/, summary.md, ...)")
    mrg.add_argument("shards", nargs="+", help="shard records (shard-I-of-N.jsonl) or folders holding them")
    mrg.add_argument("--extra-checks", help="the same folder of extra checks the shards were graded with")
    mrg.add_argument("--canvas-roster", metavar="FILE", help="also write canvas.csv (as `grade --canvas-roster`)")
    mrg.add_argument("--canvas-assignment", metavar="NAME", help="canvas.csv's assignment column (as `grade`)")
    mrg.add_argument("--moodle-worksheet", metavar="FILE", help="also write the Moodle files (as `grade`)")
    mrg.set_defaults(func=_merge)

    sim = sub.add_parser("similarity", help="instructors: pairs of submissions whose exercise cells are unusually "
                                           "similar (a reason to look, not a verdict)")
    sim.add_argument("target", help="a folder of submissions (alice.ipynb, or bob/<one>.ipynb)")
    sim.add_argument("--chapter", type=int, required=True)
    sim.add_argument("--out", help="output folder of similarity.html and its CSV files (default: similarity-chNN)")
    sim.add_argument("--threshold", type=float, default=None,
                     help="list a pair when each cell shares at least this share of its code with the other "
                          "(default 0.6)")
    sim.add_argument("--graded", metavar="DIR",
                     help="the folder of `grade CLASS --out DIR` (its record.jsonl): also list cells that hold no "
                          "code of their own for an exercise that earned points")
    sim.add_argument("--no-known-sources", action="store_true",
                     help="do not compare the cells with the course's published solution and kept alternatives")
    sim.set_defaults(func=_similarity)

    gsc = sub.add_parser("gradescope", help="build a Gradescope autograder zip for a chapter")
    gsc.add_argument("--chapter", type=int, required=True)
    gsc.add_argument("--out", default="autograder.zip")
    gsc.add_argument("--seed", type=int, help="grading seed baked into the zip (default: random)")
    gsc.add_argument("--jobs", type=int, default=1,
                     help="sandboxed workers per submission (default 1: Gradescope's default container, 768 MB "
                          "and half a CPU, needs it; 2 want 1.5 GB)")
    gsc.add_argument("--time-limit", type=float, default=10.0)
    gsc.add_argument("--memory-limit", type=int, default=1024)
    gsc.add_argument("--extra-checks", help="folder of .py files adding private checks, shipped in the zip")
    gsc.add_argument("--lang", choices=["en", "zh"], default="en", help="the language of the students' feedback")
    gsc.add_argument("--hidden-visibility", default="after_published",
                     choices=["after_published", "after_due_date", "hidden", "visible"],
                     help="when students see the results of hidden checks (default: after_published)")
    gsc.set_defaults(func=_gradescope)

    rst = sub.add_parser("release-students", help="instructors: write the student repository of a release "
                                                  "(notebooks, site, a package without answers)")
    rst.add_argument("out", help="the folder of the student repository (new, or an earlier release)")
    rst.add_argument("--chapters", help="chapters to release, e.g. 1-3 or 1,2,5 (default: course.yml, else all)")
    rst.add_argument("--repository-url", help="the student repository's address (default: course.yml)")
    rst.add_argument("--practice", help="exercises whose answers may ship, e.g. ch01_ex1,ch01_ex2, or auto: "
                          "those this release cannot grade (default: course.yml)")
    rst.add_argument("--answers-released", help="chapters whose deadlines have passed (default: course.yml)")
    rst.add_argument("--jupyterhub-url", help="the class's JupyterHub, for JupyterHub launch buttons "
                                             "(default: course.yml)")
    rst.add_argument("--build", action="store_true", help="also build the release's site into OUT/_build/html")
    rst.add_argument("--root", default=".", help="the course folder (default: current folder)")
    rst.set_defaults(func=_release_students)

    prg = sub.add_parser("progress", help="self-study: run the public checks of your notebooks and show what is done")
    prg.add_argument("path", nargs="?", help="a notebook, or a folder of them (default: chapters/ if present, else .)")
    prg.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                     help="sandboxed workers (default: 2)")
    prg.add_argument("--time-limit", type=float, default=10.0, help="seconds per exercise (default 10)")
    prg.add_argument("--thorough", action="store_true",
                     help="run every check, the hidden ones too, on fresh inputs (no points)")
    prg.add_argument("--lang", choices=["en", "zh"], help="the language of the report (default: ATTENTION_COURSE_LANG, "
                     "else English)")
    prg.set_defaults(func=_progress)

    from .translations_cli import add_command as _translations_command
    _translations_command(sub)

    new = sub.add_parser("new-exercise", help="authors: the skeleton of a new exercise (its module, its import, "
                                              "its five cells in the solution notebook)")
    new.add_argument("chapter", help="the chapter, e.g. 3 or 03")
    new.add_argument("title", help='the exercise\'s title, e.g. "Luong\'s dot score"')
    new.add_argument("name", help="the function or class the student writes, e.g. luong_dot")
    new.add_argument("--kind", choices=["function", "class"], default="function")
    new.add_argument("--points", type=float, default=2, help="the exercise's points (default 2)")
    new.add_argument("--root", default=".", help="the course folder (default: current folder)")
    new.set_defaults(func=_new_exercise)

    args = parser.parse_args(argv)
    from .course_config import CourseConfigError
    try:
        status = args.func(args)
        sys.stdout.flush()  # a reader that stopped early (`| head`) is found here, not at exit
        return status
    except CourseConfigError as error:  # course.yml, read by any command: one line, never a traceback
        print(f"attention-course {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of our output has gone (`attention-course list | head -2`): end quietly, as a
    command killed by SIGPIPE does (status 141), with no traceback and no second error when Python
    flushes stdout at exit (Python's documented recipe: point stdout at /dev/null)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
