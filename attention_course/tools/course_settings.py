"""What the release reads from the course folder (not ``course.yml``: that is
:mod:`.course_config`): the repository a portable student notebook installs the course package
from (``repository.url`` in ``_config.yml``) and the bibliography, and the install cell made of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DEFAULT_BRANCH = "main"
SOURCE_ENV = "ATTENTION_COURSE_SOURCE"
INSTALL_TAG = "install"
# Chapter 11's extra (the Triton kernels, about 1 GB): ``requirements-kernels.txt`` pins it, and a
# notebook that imports ``attention_course.kernels`` or ``triton`` installs it on first use.
KERNELS_REQUIREMENT = "triton==3.9.0"
KERNELS_IMPORT = re.compile(r"^\s*(?:from\s+attention_course\s+import\s+[^#\n]*\bkernels\b"
                            r"|(?:import|from)\s+(?:attention_course\.kernels|triton)\b)", re.M)


@dataclass
class CourseSettings:
    """What the generator reads from the course folder: the repository (one setting,
    ``repository.url`` in ``_config.yml``) and the bibliography."""
    repository_url: Optional[str] = None
    branch: str = DEFAULT_BRANCH
    bibfile: Optional[Path] = None
    kernels_requirement: str = KERNELS_REQUIREMENT  # the kernels extra's pin (requirements-kernels.txt)

    @property
    def archive_url(self) -> Optional[str]:
        """Where pip can fetch the course without git (GitHub's archive of the branch)."""
        if not self.repository_url:
            return None
        return f"{self.repository_url.rstrip('/')}/archive/refs/heads/{self.branch}.zip"


def course_settings(root: Optional[Path]) -> CourseSettings:
    if root is None:
        return CourseSettings()
    root = Path(root)
    settings = CourseSettings(bibfile=root / "references.bib" if (root / "references.bib").exists() else None)
    kernels = root / "requirements-kernels.txt"
    if kernels.is_file():
        pins = [line.split("#")[0].strip() for line in kernels.read_text(encoding="utf-8").splitlines()]
        pins = [pin for pin in pins if pin.startswith("triton")]
        if pins:
            settings.kernels_requirement = pins[0]
    config = root / "_config.yml"
    if config.exists():
        import yaml
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        repo = data.get("repository") or {}
        settings.repository_url = repo.get("url") or None
        settings.branch = repo.get("branch") or DEFAULT_BRANCH
        bibs = data.get("bibtex_bibfiles") or []
        if bibs and (root / bibs[0]).exists():
            settings.bibfile = root / bibs[0]
    return settings


def needs_kernels(cells: list) -> bool:
    """Whether a notebook's code imports chapter 11's kernels (``attention_course.kernels`` or triton)."""
    return any(cell.get("cell_type") == "code" and KERNELS_IMPORT.search(
        cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])) for cell in cells)


def install_cell_source(settings: CourseSettings, kernels: bool = False) -> str:
    """The first code cell of a portable student notebook; with ``kernels`` (chapter 11) it also
    installs the kernels extra (triton, pinned) where triton is missing. It never imports triton:
    ``attention_course.kernels`` must choose Triton's interpreter (no GPU) before triton is imported."""
    url = settings.archive_url
    lines = [
        "# Run this cell first. Outside the course's own environment (Colab, Binder, a fresh",
        "# virtual environment) it installs the course package; where the package is already",
        f"# installed it does nothing. Set {SOURCE_ENV} to a folder (a copy of the course) or",
        "# any pip requirement to install from there instead of the course's repository.",
        "try:",
        "    import attention_course",
        "except ImportError:",
        "    import importlib, os, subprocess, sys",
    ]
    if url:
        lines.append(f'    source = os.environ.get("{SOURCE_ENV}") or "{url}"')
    else:
        lines += [f'    source = os.environ.get("{SOURCE_ENV}")',
                  "    if not source:",
                  f'        raise ImportError("the course package is missing: set {SOURCE_ENV} to a copy of the course")']
    lines += [
        '    print(f"installing the course package from {source} ...", flush=True)',
        '    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", source])',
        "    importlib.invalidate_caches()",
        "    import attention_course",
        '    print(f"installed attention_course {attention_course.__version__}")',
    ]
    if kernels:
        requirement = settings.kernels_requirement
        lines += [
            "# This chapter's kernels need the course's kernels extra (Triton, about 1 GB; chapters 1-10",
            "# never install it). Where triton is missing it is installed here, once.",
            "import importlib.util",
            'if importlib.util.find_spec("triton") is None:',
            "    import importlib, subprocess, sys",
            f'    print("installing the kernels extra: {requirement} ...", flush=True)',
            f'    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "{requirement}"])',
            "    importlib.invalidate_caches()",
        ]
    return "\n".join(lines)
