"""A small Sphinx extension for the two editions of the course site.

Chapter pages are built from ``solutions/NN_slug.ipynb`` (full edition) or
``chapters/NN_slug.ipynb`` (student edition). In both editions a reader who
downloads or launches a chapter must get the **student** notebook:

* the launch buttons (Binder, Colab, JupyterHub) of a chapter page point to
  ``chapters/NN_slug.ipynb`` in the repository;
* the downloadable ``_sources/.../NN_slug.ipynb`` files are replaced by the
  (portable) student notebooks when the build finishes: those of ``chapters/`` in
  the source folder, or of the folder named by ``attention_course_notebooks``.
  The tensor toolkit's page likewise offers (and launches) the portable
  ``toolkit.ipynb`` of that folder, not its MyST source.

The solution markers (``# BEGIN SOLUTION``/``# END SOLUTION``) are dropped from the
code shown on the pages.

Config value ``attention_course_edition`` is ``"full"`` (default) or ``"student"``;
``attention_course_language`` the site's language (``"en"``, ``"zh"``) and
``attention_course_languages`` those built, each page linking to its twin in the others.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path


# Folders whose chapter pages stand for the student notebooks of chapters/: the solutions (full
# edition) and the MyST pages of an instructor's release (attention_course.tools.student_release).
_PAGE_FOLDERS = ("solutions", "pages")
# The tensor toolkit's page (``solutions/toolkit``, ``chapters/toolkit`` or ``pages/toolkit``) stands
# for the portable ``chapters/toolkit.ipynb`` that ``attention-course release`` writes.
_TOOLKIT_PAGE = "toolkit"


def _retarget_launch_buttons(app, pagename, templatename, context, doctree):
    folder = pagename.split("/", 1)[0]
    lang = app.config.attention_course_language
    # A translated site launches the student notebooks in its language (chapters/zh/).
    chapters = "/chapters/" if lang == "en" else f"/chapters/{lang}/"
    if (folder in _PAGE_FOLDERS or (folder == "chapters" and lang != "en")) and "/" in pagename:
        old, new = f"/{folder}/", chapters
    else:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if "url" in button:
                button["url"] = button["url"].replace(old, new)
    # What the download buttons offer is overwritten with the student notebook.
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            for button in group.get("buttons", []):
                if button.get("label") == "download-notebook-button":
                    button["tooltip"] = "Download the student notebook"


# Each language's name in its own words, for the link to the same page in that language.
_LANGUAGE_NAMES = {"en": "English", "zh": "中文"}


def _language_links(app, pagename, templatename, context, doctree):
    """Every page links to the same page in the course's other languages. The translated sites lie
    inside the English one (``zh/`` beside ``index.html``), so the links are relative and hold in
    any copy of the site."""
    lang = app.config.attention_course_language
    others = [other for other in app.config.attention_course_languages if other != lang]
    if not others or "body" not in context:
        return
    up = "../" * pagename.count("/")
    links = []
    for other in others:
        base = up + ("../" if lang != "en" else "") + ("" if other == "en" else f"{other}/")
        name = _LANGUAGE_NAMES.get(other, other)
        links.append(f'<a class="reference external" href="{base}{pagename}.html" hreflang="{other}" '
                     f'lang="{other}">{name}</a>')
        context["metatags"] = context.get("metatags", "") + \
            f'\n<link rel="alternate" hreflang="{other}" href="{base}{pagename}.html" />'
    label = "Other languages" if lang == "en" else "其他语言"
    context["body"] = (f'<nav class="language-links" aria-label="{label}"><p>' + " · ".join(links) +
                       "</p></nav>\n" + context["body"])


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    # sphinx-thebe registers its inline configuration script once per read phase;
    # a page that declares `const THEBE_JS_URL` twice throws a SyntaxError in the browser.
    seen, unique = set(), []
    for script in context.get("script_files", []):
        body = str(getattr(script, "attributes", {}).get("body", "") or "")
        # Inline scripts are registered with filename None or "": compare their bodies.
        key = ("inline", body) if body else ("file", str(getattr(script, "filename", script)))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    if "script_files" in context:
        context["script_files"][:] = unique


def _hide_solution_markers(app, doctree, docname):
    # The `# BEGIN SOLUTION` / `# END SOLUTION` lines are for the release generator,
    # not for readers: the folded solutions on the site show the code without them.
    from docutils import nodes

    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if "# BEGIN SOLUTION" not in text and "# END SOLUTION" not in text:
            continue
        kept = "\n".join(line for line in text.split("\n")
                         if not line.strip().startswith(("# BEGIN SOLUTION", "# END SOLUTION")))
        block.children = [nodes.Text(kept)]
        block.rawsource = kept  # equal to the text, so Sphinx still highlights it


def _ship_student_notebooks(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    notebooks = Path(app.config.attention_course_notebooks or Path(app.srcdir) / "chapters")
    sources = Path(app.outdir) / "_sources"
    for folder in (*_PAGE_FOLDERS, "chapters"):
        # The chapters' pages and the toolkit's (whose MyST source would show raw targets in a
        # notebook client) offer their portable student notebooks.
        pages = sorted((sources / folder).glob("[0-9][0-9]_*.ipynb")) + \
            sorted((sources / folder).glob(f"{_TOOLKIT_PAGE}.ipynb"))
        for target in pages:
            student = notebooks / target.name
            if not student.exists():
                raise FileNotFoundError(
                    f"attention_course.sphinxext: no student notebook {student} for the page {target.name}; "
                    "run `attention-course release`")
            shutil.copyfile(student, target)


# What the theme and docutils write that fails WCAG 2.1 A/AA under axe-core (tests/test_site.py):
# a search button whose aria-label ("Search") leaves out its visible text ("Search Ctrl+K"), so
# the button is named by its text instead; bibliography entries with the deprecated ARIA role
# doc-biblioentry inside role="list", which needs listitem children; and the colour-mode button.
_A11Y_FIXES = [
    (re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="(?:Search|搜索)"'), r"\1"),
    (re.compile(r'role="doc-biblioentry"'), 'role="listitem"'),
    # The colour-mode button is named "Color mode", but its icons' titles (Light, Dark, System
    # Settings) count as its visible text: the icons are decoration.
    (re.compile(r'(<i class="theme-switch [^"]*"\s+data-mode="\w+")\s+title="[^"]*"'), r'\1 aria-hidden="true"'),
]


def _fix_accessibility(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = text
        for pattern, replacement in _A11Y_FIXES:
            fixed = pattern.sub(replacement, fixed)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


_BARE_REDIRECT = re.compile(r'^\s*<meta http-equiv="Refresh" content="0; url=([^"]+)" />\s*$')


def _complete_redirect_page(app, exception):
    """sphinx-external-toc writes the site's ``index.html`` as a lone ``<meta>`` redirect to the
    first page: no language and no title for a screen reader to announce while it loads (axe-core:
    html-has-lang, document-title). Written out as a whole page, it redirects the same way."""
    if exception is not None or app.builder.format != "html":
        return
    index = Path(app.outdir) / "index.html"
    if not index.exists():
        return
    bare = _BARE_REDIRECT.match(index.read_text(encoding="utf-8"))
    if not bare:
        return
    import html
    target = html.escape(bare.group(1))
    title = html.escape(app.config.html_title or app.config.project or "Course")
    # A BCP 47 tag, as the theme writes it on every other page (zh_CN -> zh-CN).
    lang = html.escape((app.config.language or "en").replace("_", "-"))
    starts = "课程从这里开始：" if lang.startswith("zh") else "The course starts at "
    index.write_text(
        "<!DOCTYPE html>\n"
        f'<html lang="{lang}">\n<head>\n<meta charset="utf-8" />\n<title>{title}</title>\n'
        f'<meta http-equiv="Refresh" content="0; url={target}" />\n'
        f'<link rel="icon" href="favicon.ico" />\n</head>\n'
        f'<body>\n<p>{starts}<a href="{target}">{title}</a>.</p>\n</body>\n</html>\n',
        encoding="utf-8")


def _unreleased_reference(app, env, node, contnode):
    """In an instructor's release, a reference to a chapter not released reads as plain text
    (``chapter 5, not released yet``) instead of failing the build."""
    from docutils import nodes
    targets = app.config.attention_course_unreleased or {}
    target = node.get("reftarget", "")
    if node.get("refdomain") == "std" and node.get("reftype") == "doc":
        target = target.lstrip("/")
        target = target[:-len(".ipynb")] if target.endswith(".ipynb") else target
        target = next((key for key in targets if key.endswith(target.split("/")[-1])), target)
    words = targets.get(target)
    if words is None:
        return None
    shown = contnode.astext() if contnode is not None else ""
    text = f"{shown} ({words})" if shown and shown != target else words
    return nodes.inline(text, text, classes=["unreleased"])


def setup(app):
    app.add_config_value("attention_course_unreleased", {}, "env")
    app.connect("missing-reference", _unreleased_reference)
    app.add_config_value("attention_course_edition", "full", "html")
    app.add_config_value("attention_course_notebooks", "", "html")
    app.add_config_value("attention_course_language", "en", "html")
    app.add_config_value("attention_course_languages", [], "html")
    app.connect("html-page-context", _language_links, priority=600)
    # After sphinx-book-theme has added its buttons (priority 501).
    app.connect("html-page-context", _retarget_launch_buttons, priority=600)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=600)
    app.connect("doctree-resolved", _hide_solution_markers)
    app.connect("build-finished", _ship_student_notebooks)
    app.connect("build-finished", _fix_accessibility)
    # After sphinx-external-toc has written the redirect page (priority 500).
    app.connect("build-finished", _complete_redirect_page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
