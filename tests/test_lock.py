"""requirements.lock pins the whole environment: what requirements.txt asks for, at the same
versions, and exactly what the set-up installed (so a fresh install next month is this one)."""
import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_LOCKED = {"pip", "setuptools", "wheel", "attention-course"}  # pip's own tools; the course itself


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_name(name)] = version.strip()
    return pins


def test_the_lock_agrees_with_requirements_txt():
    lock, wanted = _pins(ROOT / "requirements.lock"), _pins(ROOT / "requirements.txt")
    assert wanted and len(lock) > len(wanted)
    differ = {name: (version, lock.get(name)) for name, version in wanted.items() if lock.get(name) != version}
    assert not differ, f"requirements.txt and requirements.lock disagree (wanted, locked): {differ}"
    assert lock["torch"] == "2.13.0"  # exactly, never a local build label such as +cpu


def test_the_environment_is_exactly_the_lock():
    lock = _pins(ROOT / "requirements.lock")
    installed = {_name(d.metadata["Name"]): d.version.split("+", 1)[0] for d in metadata.distributions()}
    installed = {name: version for name, version in installed.items() if name not in NOT_LOCKED}
    missing = sorted(set(lock) - set(installed))
    extra = sorted(set(installed) - set(lock))
    differ = {name: (lock[name], installed[name]) for name in set(lock) & set(installed)
              if lock[name] != installed[name]}
    assert not (missing or extra or differ), (
        f"the environment is not the lock: missing {missing}, not locked {extra}, other versions {differ}; "
        "run `python3 tasks.py setup` (or, after changing requirements.txt, `python3 tasks.py lock`)")
