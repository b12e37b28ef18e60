"""``course.yml``: an instructor's configuration of one term, in one file.

It sets, without any edit to the package:

* ``chapters``: the chapters released to students (``all``, a list, or a range ``1-3``);
* ``answers_released``: chapters whose deadlines have passed, whose answers may ship in the
  student build (so later chapters can use their library pieces);
* ``practice``: exercises that are not graded and whose answers may ship;
* ``student_repository``: where the students' repository lives (its launch buttons and install
  cells point there);
* ``jupyterhub_url``: the class's JupyterHub, for the release's JupyterHub launch buttons;
* ``exercises``: per exercise, its ``points`` and its checks' ``weights`` (check name -> weight).

Everything reads it through the registry: ``release`` (the exercise index), the sites, ``grade``,
the Gradescope zip (which carries the file) and ``release-students`` (which bakes the points into
the student build). The file sits in the course folder, beside ``_config.yml``; which one a command
reads is :func:`default_path`'s rule: ``$ATTENTION_COURSE_CONFIG``, else ``./course.yml`` in a course
folder, else the one of the repository the package is installed from (a command's ``--root`` does not
change it). A wrong key, label, check name or number,
or broken YAML, is a :class:`CourseConfigError` of one line, ``FILE:LINE: key: what is wrong``, which
every command of :mod:`attention_course.tools.cli` prints as it is (exit status 2), never a traceback.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..checks.registry import when_loaded

CONFIG_NAME = "course.yml"
CONFIG_ENV = "ATTENTION_COURSE_CONFIG"
_KEYS = {"chapters", "answers_released", "practice", "student_repository", "jupyterhub_url", "exercises"}
_EXERCISE_KEYS = {"points", "weights"}


class CourseConfigError(ValueError):
    """A ``course.yml`` that cannot be used; the message names the file and the entry."""


@dataclass
class CourseConfig:
    path: Optional[Path] = None
    chapters: Optional[list] = None          # None: every chapter
    answers_released: list = field(default_factory=list)
    practice: list = field(default_factory=list)
    student_repository: Optional[str] = None
    jupyterhub_url: Optional[str] = None       # the class's JupyterHub (launch buttons via nbgitpuller)
    exercises: dict = field(default_factory=dict)  # label -> {"points": float, "weights": {check: float}}

    def released(self, chapter: int) -> bool:
        return self.chapters is None or chapter in self.chapters


def default_path() -> Path:
    """The ``course.yml`` every command reads, the first of: the file the environment variable
    ``ATTENTION_COURSE_CONFIG`` names; ``./course.yml`` when the current folder is a course folder (it
    holds ``_config.yml``) and has one; the ``course.yml`` of the course folder the package is
    installed from (an editable install's repository; a Gradescope zip's own). An absent file is no
    error: everything released, the package's points and weights."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    try:
        here = Path.cwd()
    except OSError:  # the current folder was removed
        here = None
    if here is not None and (here / "_config.yml").is_file() and (here / CONFIG_NAME).is_file():
        return (here / CONFIG_NAME).resolve()
    return Path(__file__).resolve().parents[2] / CONFIG_NAME


def parse_chapters(value, where: str) -> Optional[list]:
    """``all``, ``3``, ``1-3``, ``"1,2,5"`` or a list of numbers -> sorted chapters (None: all)."""
    if value is None or value == "all":
        return None
    items = value if isinstance(value, list) else [value]
    out = set()
    for item in items:
        text = str(item).strip()
        for part in text.split(","):
            part = part.strip()
            try:
                if "-" in part:
                    low, high = (int(x) for x in part.split("-", 1))
                    if low > high:
                        raise ValueError
                    out |= set(range(low, high + 1))
                elif part:
                    out.add(int(part))
            except ValueError:
                raise CourseConfigError(f"{where}: {item!r} is not a chapter number, a range such as 1-3, or all") \
                    from None
    return sorted(out)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise CourseConfigError(f"{where}: expected a number of at least 0, got {value!r}")
    return float(value)


def _line(tree, keys: tuple) -> int:
    """The line (from 1) of the deepest of ``keys`` (mapping keys, or list indexes) found in the
    YAML node ``tree``: where an error about that entry points."""
    import yaml
    node, line = tree, (tree.start_mark.line + 1 if tree is not None else 1)
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if str(k.value) == str(key)), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _yaml_error(path: Path, error) -> CourseConfigError:
    """A YAML syntax error as one line: the file, the line and column, and what is wrong."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
    what = " ".join(str(part) for part in (getattr(error, "context", None), getattr(error, "problem", None)) if part)
    return CourseConfigError(f"{where}: not valid YAML: {what or ' '.join(str(error).split())}")


def load(path: Optional[Path] = None) -> CourseConfig:
    """Read and check ``course.yml`` (an absent file is the default: everything released, the
    package's points and weights). Every error is one line, ``FILE:LINE: key: what is wrong``."""
    import yaml
    path = Path(path) if path else default_path()
    if not path.is_file():
        return CourseConfig()
    try:
        text = path.read_text(encoding="utf-8")
        tree = yaml.compose(text)
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise _yaml_error(path, error) from None
    except (OSError, UnicodeDecodeError) as error:
        raise CourseConfigError(f"{path}: cannot be read ({error})") from None

    def at(*keys) -> str:  # "FILE:LINE: key: subkey" of an entry, for its error message
        return f"{path}:{_line(tree, keys)}: " + ": ".join(str(k) for k in keys if not isinstance(k, int))

    if not isinstance(data, dict):
        raise CourseConfigError(f"{path}:{_line(tree, ())}: expected a mapping of settings (key: value lines), "
                                f"got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise CourseConfigError(f"{at(unknown[0])}: unknown setting (known: {', '.join(sorted(_KEYS))})")
    from ..checks.registry import REGISTRY, _load_exercises
    _load_exercises()
    config = CourseConfig(path=path)
    config.chapters = parse_chapters(data.get("chapters"), at("chapters"))
    config.answers_released = parse_chapters(data.get("answers_released") or [], at("answers_released")) or []
    chapters = {ex.chapter for ex in REGISTRY.values()}
    for name, values in (("chapters", config.chapters or []), ("answers_released", config.answers_released)):
        missing = [c for c in values if c not in chapters]
        if missing:
            raise CourseConfigError(f"{at(name)}: chapter {missing[0]} is not in the course "
                                    f"(chapters {min(chapters)}-{max(chapters)})")
    practice = data.get("practice") or []
    if not isinstance(practice, list):
        raise CourseConfigError(f"{at('practice')}: expected a list of labels such as [ch01_ex1]")
    for index, label in enumerate(practice):
        if label not in REGISTRY:
            raise CourseConfigError(f"{at('practice', index)}: unknown exercise {label!r}")
    config.practice = list(practice)
    repo = data.get("student_repository")
    if repo is not None and not (isinstance(repo, str) and repo.startswith(("https://", "http://"))):
        raise CourseConfigError(f"{at('student_repository')}: expected an https:// address, got {repo!r}")
    config.student_repository = repo
    hub = data.get("jupyterhub_url")
    if hub is not None and not (isinstance(hub, str) and hub.startswith(("https://", "http://"))):
        raise CourseConfigError(f"{at('jupyterhub_url')}: expected an https:// address, got {hub!r}")
    config.jupyterhub_url = hub
    exercises = data.get("exercises") or {}
    if not isinstance(exercises, dict):
        raise CourseConfigError(f"{at('exercises')}: expected a mapping label -> settings")
    for label, settings in exercises.items():
        if label not in REGISTRY:
            raise CourseConfigError(f"{at('exercises', label)}: unknown exercise")
        if not isinstance(settings, dict):
            raise CourseConfigError(f"{at('exercises', label)}: expected points and/or weights")
        extra = sorted(set(map(str, settings)) - _EXERCISE_KEYS)
        if extra:
            raise CourseConfigError(f"{at('exercises', label, extra[0])}: unknown setting (an exercise takes "
                                    "points and/or weights)")
        entry = {}
        if "points" in settings:
            entry["points"] = _number(settings["points"], at("exercises", label, "points"))
        weights = settings.get("weights") or {}
        if not isinstance(weights, dict):
            raise CourseConfigError(f"{at('exercises', label, 'weights')}: expected a mapping check name -> weight")
        names = [c.name for c in REGISTRY[label].checks]
        for check_name, weight in weights.items():
            if check_name not in names:
                raise CourseConfigError(f"{at('exercises', label, 'weights', check_name)}: no check named "
                                        f"{check_name!r}; its checks are: " + "; ".join(names)
                                        + f" (attention-course list --chapter {REGISTRY[label].chapter})")
            entry.setdefault("weights", {})[check_name] = _number(
                weight, at("exercises", label, "weights", check_name))
        config.exercises[label] = entry
    return config


def chapter_settings(path: Path, chapter: int) -> str:
    """The part of ``course.yml`` that grades ``chapter`` (for a grading kit that holds that
    chapter's exercises only): its exercises' points and weights, and its practice exercises."""
    import yaml
    load(path)  # the whole file is checked first
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    prefix = f"ch{chapter:02d}_"
    kept = {"chapters": [chapter],
            "practice": [label for label in data.get("practice") or [] if label.startswith(prefix)],
            "exercises": {label: value for label, value in (data.get("exercises") or {}).items()
                          if label.startswith(prefix)}}
    header = f"# course.yml of the course, as it grades chapter {chapter} (written by attention-course gradescope)\n"
    return header + yaml.safe_dump(kept, sort_keys=False, allow_unicode=True)


_ORIGINAL: dict = {}  # label -> (points, {check: weight}) as the package registers them
_APPLIED: dict = {"config": None}


def apply(config: CourseConfig) -> None:
    """Set the registry's points and weights from ``config`` (from the package's own values, so
    applying twice, or another config, never compounds)."""
    from ..checks.registry import REGISTRY
    for label, exercise in REGISTRY.items():
        if label not in _ORIGINAL:
            _ORIGINAL[label] = (exercise.points, {c.name: c.weight for c in exercise.checks})
        points, weights = _ORIGINAL[label]
        entry = config.exercises.get(label, {})
        # A practice exercise is not graded: it keeps its checks and carries no points.
        exercise.points = 0.0 if label in config.practice else entry.get("points", points)
        for check in exercise.checks:
            check.weight = entry.get("weights", {}).get(check.name, weights.get(check.name, check.weight))
    _APPLIED["config"] = config


def active() -> CourseConfig:
    """The configuration in force (reading the default file the first time)."""
    from ..checks.registry import _load_all
    _load_all()  # runs _apply_on_load the first time
    return _APPLIED["config"] or CourseConfig()


def _apply_on_load(full: bool) -> None:
    if full:  # a student build stores its points with its checks
        apply(load())


# The first lookup of an exercise in a process that uses the instructor's tools sets the points and
# weights of course.yml (attention_course.tools imports this module).
when_loaded(_apply_on_load)
