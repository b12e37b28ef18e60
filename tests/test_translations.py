"""The Chinese edition kept in step with the English source (issue 45).

* every translatable block of every page and every string the package shows a reader has a
  current translation (none missing, none stale, none with lost markup), and the glossary holds;
* a paragraph changed in English turns its entry stale, named by file and cell, and the page shows
  the new English until the translation is brought up to date;
* feedback speaks the reader's language: check lines, hints, progress, grading feedback, with English
  for anything the catalog lacks;
* the Chinese student notebooks are the release generator's (portable, no solution, Chinese setup).
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attention_course.checks import language
from attention_course.checks.registry import get_exercise
from attention_course.tools import translations as T
from attention_course.tools.package_strings import package_problems

ROOT = Path(__file__).resolve().parents[1]


def _cjk(text: str) -> int:
    return len(re.findall(r"[\u4e00-\u9fff]", text))


# ------------------------------------------------------------------ complete and current

def test_every_page_block_has_a_current_translation():
    problems = T.problems(ROOT, "zh")
    assert not problems, f"{len(problems)} problem(s); run `attention-course translations check`:\n" + \
        "\n".join(problems[:40])


def test_the_translations_follow_the_glossary():
    problems = T.glossary_problems(ROOT, "zh")
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])


def test_every_package_string_has_a_current_translation():
    problems = package_problems("zh")
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])


def test_the_catalogs_are_what_update_writes(tmp_path):
    """Nothing is edited by hand past the tool: update on a copy changes no catalog."""
    copy = tmp_path / "course"
    copy.mkdir()
    for name in ("solutions", "locales"):
        shutil.copytree(ROOT / name, copy / name)
    for name in T.PAGES:
        shutil.copy2(ROOT / name, copy / name)
    T.update(copy, "zh")
    for path in sorted((ROOT / "locales" / "zh" / "LC_MESSAGES").glob("*.po")):
        assert (copy / path.relative_to(ROOT)).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), \
            f"{path.name} is not what `attention-course translations update` writes"


# ------------------------------------------------------------------ kept in step

def _tiny_course(root: Path, text: str) -> Path:
    (root / "solutions").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text, id="cell-one"), nbformat.v4.new_code_cell("x = 1", id="code")]
    (root / "solutions" / "01_tiny.ipynb").write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return root


def test_a_changed_paragraph_turns_stale_and_shows_its_new_english(tmp_path):
    english = "# A title\n\nThe first paragraph, with `code` and $x$.\n\nThe second paragraph."
    root = _tiny_course(tmp_path, english)
    T.update(root, "zh")
    po = T.catalog_path(root, "zh", "01_tiny")
    missing = T.problems(root, "zh")
    assert len([p for p in missing if "not translated" in p]) == 3
    assert all("solutions/01_tiny.ipynb#cell-one" in p for p in missing)
    text = T.export(po)
    keys = re.findall(r"^=== (\w+)", text, re.M)
    answer = (f"=== {keys[0]}\n# 一个标题\n\n=== {keys[1]}\n第一段，含 `code` 与 $x$。\n\n"
              f"=== {keys[2]}\n第二段。\n")
    filled, issues = T.import_translations(po, answer)
    assert (filled, issues) == (3, [])
    assert T.problems(root, "zh") == []
    table = T.table(root, "zh", "01_tiny")
    assert T.translate_markdown(english, table) == "# 一个标题\n\n第一段，含 `code` 与 $x$。\n\n第二段。"

    # The author changes the second paragraph: its entry is stale (fuzzy, the old English kept
    # beside it), the test names the file and cell, and the page shows the new English.
    changed = english.replace("The second paragraph.", "The second paragraph, now longer.")
    _tiny_course(tmp_path / "v2", changed)
    shutil.copytree(root / "locales", tmp_path / "v2" / "locales")
    T.update(tmp_path / "v2", "zh")
    problems = T.problems(tmp_path / "v2", "zh")
    assert len(problems) == 1 and "stale" in problems[0] and "solutions/01_tiny.ipynb#cell-one" in problems[0], \
        problems
    po2 = T.catalog_path(tmp_path / "v2", "zh", "01_tiny")
    assert '#| msgid "The second paragraph."' in po2.read_text(encoding="utf-8")
    page = T.translate_markdown(changed, T.table(tmp_path / "v2", "zh", "01_tiny"))
    assert page.endswith("The second paragraph, now longer.") and page.startswith("# 一个标题")


def test_a_translation_that_loses_markup_is_refused():
    english = ("See {ref}`the scores <sec-scores>` and `masked_softmax(scores, valid_lens)` with $d$.\n"
               ":label: ch03_ex1")
    good = "见{ref}`分数一节 <sec-scores>`，以及带 $d$ 的 `masked_softmax(scores, valid_lens)`。\n:label: ch03_ex1"
    assert T.markup_problems(english, good) == []
    for bad in [good.replace("`masked_softmax(scores, valid_lens)`", "masked_softmax"),
                good.replace("<sec-scores>", "<sec-score>"),
                good.replace("$d$", "d"),
                good.replace(":label: ch03_ex1", ":label: ch03_ex2")]:
        assert T.markup_problems(english, bad), bad


def test_code_and_equations_are_not_units():
    text = "Prose here.\n\n```python\nx = 1\n\ny = 2\n```\n\n$$\na = b\n\nc\n$$\n\n(sec-x)=\n## Heading"
    assert T.units(text) == ["Prose here.", "(sec-x)=\n## Heading"]
    assert T.join(T.blocks(text)) == text


def test_the_glossary_check_finds_a_forbidden_or_missing_term():
    rows = T.glossary(ROOT, "zh")
    assert T.glossary_problems_of("Attention pooling is a weighted average.", "注意力汇聚是加权平均。", rows) == []
    assert T.glossary_problems_of("Attention pooling is a weighted average.", "注意力池化是加权平均。", rows)
    assert T.glossary_problems_of("A masked softmax.", "一个softmax。", rows)


# ------------------------------------------------------------------ feedback in the reader's language

def test_tr_fills_templates_translates_their_values_and_falls_back_to_english(monkeypatch):
    catalog = language.Catalog({"the gradient": "梯度",
                                "{0} differs at {1}": "{0}在{1}处不同",
                                "Hint: ": "提示："})
    monkeypatch.setitem(language._catalogs, "zh", catalog)
    missing = []
    assert language.tr("the gradient differs at (0, 1)", "zh", missing) == "梯度在(0, 1)处不同"
    assert language.tr("something we never wrote down", "zh", missing) == "something we never wrote down"
    assert missing == ["something we never wrote down"]
    assert language.tr("the gradient", "en") == "the gradient"


def test_the_language_comes_from_set_language_or_the_environment(monkeypatch):
    monkeypatch.setattr(language, "_chosen", [])
    monkeypatch.setenv(language.ENV, "zh_CN")
    assert language.current() == "zh"
    monkeypatch.delenv(language.ENV)
    assert language.current() == "en"
    language.set_language("zh")
    assert language.current() == "zh"
    language.set_language("en")


def test_the_runtime_parser_reads_what_babel_writes():
    from attention_course.tools.package_strings import package_catalog_path
    path = package_catalog_path("zh")
    babel = {m.id: m.string for m in T.read_catalog(path) if m.id and m.string and not m.fuzzy}
    assert language.parse_po(path.read_text(encoding="utf-8")) == babel


SAMPLE = ["ch01_ex1", "ch03_ex1", "ch05_ex2", "ch06_ex1", "ch09_ex1", "ch11_ex1"]


@pytest.mark.parametrize("label", SAMPLE)
def test_check_lines_of_the_stub_and_every_kept_mistake_are_chinese(label):
    """What check() prints for the untouched stub and for each kept mistake, in Chinese: every
    part of every line (name, reason, hint) has a translation; none falls back to English."""
    from attention_course.checks.checking import run_checks
    exercise = get_exercise(label)
    answers = [("stub", None)] + [(m.name, m.impl) for m in exercise.mistakes]
    untranslated = []
    for name, impl in answers:
        if impl is None:
            def impl(*args, **kwargs):
                raise NotImplementedError(f"{label}: fill in")
        for result in run_checks(label, impl, time_limit=60):
            for part in (result.check, result.reason, result.hint):
                language.tr(part, "zh", untranslated)
            line = result.line("zh")
            assert _cjk(line) > 0, line
    assert not untranslated, f"{label}: no translation for {sorted(set(untranslated))[:10]}"


def test_check_prints_chinese_in_a_chinese_notebook(capsys, monkeypatch):
    monkeypatch.setenv(language.ENV, "zh")
    monkeypatch.setattr(language, "_chosen", [])
    from attention_course import check
    exercise = get_exercise("ch03_ex1")
    mistake = next(m for m in exercise.mistakes if m.name == "mask applied after the softmax")
    def masked_softmax(scores, valid_lens):  # a reader's answer, written in the notebook
        return mistake.impl(scores, valid_lens)

    check("ch03_ex1", masked_softmax)
    out = capsys.readouterr().out
    assert "\u2717" in out and _cjk(out) > 20, out
    assert mistake.hint not in out and language.tr(mistake.hint, "zh") in out
    assert "提示：" in out


def test_progress_speaks_chinese(tmp_path):
    shutil.copy2(ROOT / "chapters" / "zh" / "03_scoring_functions.ipynb", tmp_path / "03_scoring_functions.ipynb")
    result = subprocess.run([sys.executable, "-m", "attention_course.tools.cli", "progress", str(tmp_path),
                             "--lang", "zh"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "ch03_ex1" in result.stdout and _cjk(result.stdout) > 30, result.stdout
    assert "not started" not in result.stdout and "exercises done" not in result.stdout, result.stdout


# ------------------------------------------------------------------ the Chinese student notebooks

def test_the_chinese_student_notebooks_are_the_generators_and_chinese():
    from attention_course.tools.translated_edition import release_language
    assert release_language(ROOT, "zh", check_only=True) == [], "run `attention-course release` and commit chapters/zh"
    english = sorted(p.name for p in (ROOT / "chapters").glob("*.ipynb"))
    assert sorted(p.name for p in (ROOT / "chapters" / "zh").glob("*.ipynb")) == english
    for path in sorted((ROOT / "chapters" / "zh").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        twin = nbformat.read(ROOT / "chapters" / path.name, as_version=4)
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert _cjk(prose) > 0.3 * len(prose) / 3, f"{path.name}: little Chinese"
        assert re.search(r"^#+ 练习 1 \(ch\d\d_ex1\)", prose, re.M), path.name
        setup = [c for c in nb.cells if c.cell_type == "code" and "setup" in c.metadata.get("tags", [])]
        assert setup and 'os.environ["ATTENTION_COURSE_LANG"] = "zh"' in setup[0].source
        # Code is the English student notebook's, cell for cell (the setup cell's first line aside).
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert code[1:] != [] and [s.split("\n", 1)[-1] if 'ATTENTION_COURSE_LANG' in s else s for s in code] == \
            [c.source for c in twin.cells if c.cell_type == "code"]


# ------------------------------------------------------------------ lab, grade and the Chinese pages

def test_tasks_lab_lang_zh_opens_the_chinese_notebooks_in_jupyterlabs_chinese_interface():
    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    cmd = [str(c) for c in tasks.lab_command(["--lang", "zh", "--no-browser"])]
    assert cmd[1] == "lab" and Path(cmd[2]) == ROOT / "chapters" / "zh"
    assert "--lang" not in cmd and "--no-browser" in cmd
    settings = next(c for c in cmd if c.startswith("--LabApp.user_settings_dir="))
    plugin = Path(settings.split("=", 1)[1]) / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
    assert json.loads(plugin.read_text()) == {"locale": "zh_CN"}
    # JupyterLab's own strings in Chinese come from the pinned language pack.
    import importlib.metadata
    assert importlib.metadata.version("jupyterlab-language-pack-zh-CN")
    with pytest.raises(SystemExit):
        tasks.lab_command(["--lang", "fr"])


def test_grade_lang_zh_writes_chinese_feedback(tmp_path):
    notebook = tmp_path / "ada.ipynb"
    shutil.copy2(ROOT / "chapters" / "zh" / "01_queries_keys_values.ipynb", notebook)
    result = subprocess.run([sys.executable, "-m", "attention_course.tools.cli", "grade", str(notebook),
                             "--chapter", "1", "--lang", "zh", "--seed", "7", "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    feedback = (tmp_path / "out" / "feedback" / "ada.md").read_text(encoding="utf-8")
    assert re.search(r"第 0?1 章", feedback) and "提示：" in feedback and _cjk(feedback) > 100, feedback[:1500]
    assert feedback.startswith("# 反馈：ada"), feedback[:200]
    assert "points were lost" not in feedback and "Hint:" not in feedback


def test_an_exercise_has_one_chinese_title_everywhere():
    """The title check() prints (the package's catalog) is the one of the exercise index and of the
    exercise's box on its chapter page (the prose catalogs)."""
    from attention_course.checks.registry import all_exercises
    index = "\n".join(T.table(ROOT, "zh", "exercises").values())
    rows = dict(re.findall(r"^\| \{ref\}`(ch\d\d_ex\d+) <[^>]+>` \| ([^|]+?) \|", index, re.M))
    pages = "\n".join(v for path in (ROOT / "locales" / "zh" / "LC_MESSAGES").glob("[0-9][0-9]_*.po")
                      for v in T.table(ROOT, "zh", path.stem).values())
    boxes = dict((label, title.strip()) for title, label in
                 re.findall(r"^```\{exercise\} (.+)\n:label: (ch\d\d_ex\d+)$", pages, re.M))
    wrong = [(e.label, language.tr(e.title, "zh"), rows.get(e.label), boxes.get(e.label))
             for e in all_exercises()
             if not language.tr(e.title, "zh") == rows.get(e.label) == boxes.get(e.label)]
    assert not wrong, wrong[:10]


def test_a_message_longer_than_the_course_builds_is_left_as_it_is(monkeypatch):
    """A submission's own output can be long and hostile: tr() matches no template on it (matching
    costs about the square of the length), and returns it unchanged instead of splitting it."""
    catalog = language.Catalog({"the gradient": "梯度", "{0} differs at {1}": "{0}在{1}处不同"})
    monkeypatch.setitem(language._catalogs, "zh", catalog)
    assert language.tr("the gradient; the gradient", "zh") == "梯度; 梯度"
    long = "the gradient; " * (language.MAX_MATCHED // 14 + 1)
    assert len(long) > language.MAX_MATCHED and language.tr(long, "zh") == long
    assert language.tr("the gradient differs at " + "x" * 2000, "zh").startswith("the gradient differs")


def test_the_thorough_header_reads_as_chinese():
    """check(..., thorough=True) and progress --thorough put "checks" where "public checks" stood:
    the word is the same noun in Chinese, not a measure word doubled (项项检查)."""
    header = language.tr("ch01_ex1 · f: 0/3 checks passed", "zh")
    total = language.tr("Total: 1/6 exercises done, 4/25 public checks passed, in 1 notebook", "zh")
    thorough = total.replace(language.tr("public checks", "zh"), language.tr("checks", "zh"))
    for text in (header, thorough):
        assert "项项" not in text and "项检查" in text, text


def test_a_tuple_items_reason_names_the_result_it_is_part_of():
    """A blind solver met "第 0 项（共  项）": "item {0} of {1}" had been read as a count, but {1}
    is the result the item belongs to."""
    line = language.tr("item 0 of the result has NaN where it should not (or lacks NaN where expected)", "zh")
    assert line.startswith("结果的第 0 项") and "共" not in line, line
