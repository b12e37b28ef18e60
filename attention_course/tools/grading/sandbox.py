"""Parent side of the sandbox: zygote processes, safe reading and validation of outcomes.

The grader never imports or unpickles anything a child produced, and never reads it from a disk:
a child's last outcome comes over pipes (child to zygote, :mod:`.child_io`; zygote to grader, after
its reply line), capped in size: a JSON structure (capped) and raw tensor bytes, each tensor
declared by dtype and shape, checked against the caps and the outcome's length before anything is
allocated (``zygote_main.dump_outcome`` writes it). It accepts only the plain-data grammar of
:mod:`attention_course.checks.calls` (dict, list, str, int, float, bool, None and dense CPU
``torch.Tensor``), with caps on sizes and depth. (It once used ``torch.load(weights_only=True)``,
whose allowed types let a 908-byte file make the grader allocate 2.66 GB.)
"""
from __future__ import annotations

import json
import logging
import os
import select
import site
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .grader_io import GraderIOError, rmtree as _rmtree, why as _why
from .outcome_data import MAX_OUTCOME_BYTES, InvalidOutcome, load_outcome
from .runtime import ON_DEMAND_MODULES, RUNTIME_DATA_DIRS, RUNTIME_MODULES, build_runtime

SYSTEM_READ_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo")
SYSTEM_READ_FILES = ("/etc/ld.so.cache", "/etc/localtime")
DEV_FILES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


log = logging.getLogger(__name__)


# ------------------------------------------------------------------ paths the child may read


def _is_course_entry(name: str) -> bool:
    low = name.lower()
    return "attention_course" in low or "attention-course" in low or low.startswith("__editable__")


def site_dirs() -> list:
    dirs = []
    for path in list(site.getsitepackages()) + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else []):
        if os.path.isdir(path) and path not in dirs:
            dirs.append(path)
    for path in sys.path:  # a non-standard layout (e.g. Gradescope's system python)
        if path.endswith(("site-packages", "dist-packages")) and os.path.isdir(path) and path not in dirs:
            dirs.append(path)
    return dirs


def read_paths(extra: tuple = ()) -> list:
    """Every path a child may read: stdlib and site-packages entries (never the course), system libs."""
    roots = []
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path) and path not in roots:
            roots.append(path)
    for path in sys.path:
        if path.endswith(".zip") and os.path.isfile(path):
            roots.append(path)
    paths = []
    site = site_dirs()
    for root in roots:
        if os.path.isfile(root):
            paths.append(root)
            continue
        for entry in sorted(os.listdir(root)):
            full = os.path.join(root, entry)
            if entry in ("site-packages", "dist-packages") or _is_course_entry(entry) or full in site:
                continue
            paths.append(full)
    for directory in site:
        for entry in sorted(os.listdir(directory)):
            if _is_course_entry(entry) or entry.endswith(".pth"):
                continue
            paths.append(os.path.join(directory, entry))
    paths += [p for p in SYSTEM_READ_DIRS + SYSTEM_READ_FILES if os.path.exists(p)]
    paths += list(extra)
    return paths


# ------------------------------------------------------------------ zygotes


class ZygoteDied(RuntimeError):
    """The zygote process ended (killed by a child, or crashed)."""


@dataclass
class ChildReport:
    timed_out: bool = False
    elapsed: float = 0.0
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    max_rss_kb: int = 0
    zygote_died: bool = False
    stderr: str = ""                  # the tail of the child's standard error
    outcome: Optional[bytes] = None   # its last whole outcome, as sent (None: none came)
    outcome_too_large: bool = False   # it sent one over MAX_OUTCOME_BYTES (dropped unread)


class Zygote:
    """One pre-warmed zygote process; serves one request at a time."""

    def __init__(self, workdir: Path, config_path: Path, name: str):
        self.workdir, self.config_path, self.name = Path(workdir), Path(config_path), name
        self.proc: Optional[subprocess.Popen] = None
        self.info: dict = {}
        self.restarts = 0
        self._counter = 0
        self._buffer = b""

    def start(self, timeout: float = 180.0) -> dict:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        self._buffer = b""
        log = open(self.workdir / f"{self.name}.log", "ab")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.workdir)}
        runtime = json.loads(self.config_path.read_text())["runtime"]
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", os.path.join(runtime, "_ac_zygote.py"), str(self.config_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, cwd=str(self.workdir),
            start_new_session=True, close_fds=True)
        log.close()

    def wait_ready(self, timeout: float = 180.0) -> dict:
        line = self._readline(timeout)
        if not line:
            raise ZygoteDied(f"the grading zygote did not start (see {self.workdir / (self.name + '.log')})")
        self.info = json.loads(line)
        return self.info

    def _read_exactly(self, size: int, timeout: float) -> bytes:
        """The ``size`` bytes that follow a reply line (an outcome), or b'' on EOF or timeout."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        chunks, have = [self._buffer[:size]], len(self._buffer[:size])
        self._buffer = self._buffer[size:]
        while have < size:
            remaining = deadline - time.monotonic()
            ready = select.select([fd], [], [], remaining)[0] if remaining > 0 else []
            chunk = os.read(fd, min(size - have, 1 << 20)) if ready else b""
            if not chunk:
                return b""
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks)

    def _readline(self, timeout: float) -> bytes:
        """One reply line, or b'' on EOF or timeout (unbuffered: select sees all data)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b""
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b""
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, request: dict) -> ChildReport:
        if not self.alive():
            self.restart()
        self._counter += 1
        request = dict(request, id=self._counter)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            line = self._readline(float(request["timeout"]) + 30.0)
            reply = json.loads(line) if line else {}
            size = int(reply.get("outcome_bytes", -1))
            outcome = self._read_exactly(size, 30.0) if size >= 0 else None
        except (BrokenPipeError, OSError, ValueError):
            reply, outcome = {}, b""
        if not reply or outcome == b"" and reply.get("outcome_bytes"):
            self.kill()
            self.restart()
            return ChildReport(zygote_died=True)
        if "error" in reply:
            raise RuntimeError(f"zygote could not serve the request: {reply['error']}")
        fields = {k: reply[k] for k in ("timed_out", "elapsed", "exit_code", "signal", "max_rss_kb",
                                        "stderr", "outcome_too_large")}
        return ChildReport(**fields, outcome=outcome)

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self.start()

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc = None


class Sandbox:
    """A working folder (runtime, calls, scratch) and ``jobs`` zygotes.

    Use as a context manager; :meth:`run` is thread-safe (one zygote per thread).
    """

    def __init__(self, jobs: int = 2, landlock: bool = True, workdir: Optional[Path] = None, namespaces: bool = True):
        """``namespaces=False`` gives every child what a container that refuses unprivileged namespaces
        gives it (Docker's default seccomp profile refuses ``unshare``): the fallback walls only."""
        import tempfile
        self.jobs = max(1, int(jobs))
        self.landlock = landlock
        self.namespaces = namespaces
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="ac-grade-"))
        self.zygotes: list = []
        self._free: list = []
        self._cond = threading.Condition()
        self.warnings: list = []
        self.info: dict = {}
        self._job = 0
        self._job_lock = threading.Lock()
        self.cleanup_problems: list = []  # what could not be removed (logged; never raised)

    # ---------------------------------------------------------- lifecycle
    def __enter__(self) -> "Sandbox":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Build the runtime and start every zygote (they import torch while the caller plans)."""
        runtime = self.workdir / "runtime"
        shipped, warnings = build_runtime(runtime)
        self.warnings += warnings
        for sub in ("calls", "scratch"):
            (self.workdir / sub).mkdir(exist_ok=True, mode=0o700)
        config = {
            "runtime": str(runtime),
            "runtime_modules": shipped,
            "on_demand_modules": [m for m in ON_DEMAND_MODULES
                                  if (runtime / "attention_course" / (m.replace(".", "/") + ".py")).is_file()],
            "site_dirs": site_dirs(),
            "read_paths": read_paths(tuple(str(runtime / "attention_course" / d) for d in RUNTIME_DATA_DIRS
                                           if (runtime / "attention_course" / d).is_dir())),
            "dev_paths": [p for p in DEV_FILES if os.path.exists(p)],
            "mpl_dir": _matplotlib_cache(self.workdir),
            "landlock": self.landlock,
            "outcome_cap": MAX_OUTCOME_BYTES,
            "namespaces": self.namespaces,
        }
        config_path = self.workdir / "zygote.json"
        config_path.write_text(json.dumps(config))
        self.zygotes = [Zygote(self.workdir, config_path, f"zygote{i}") for i in range(self.jobs)]
        for z in self.zygotes:
            z.launch()

    def wait_ready(self) -> None:
        infos = [z.wait_ready() for z in self.zygotes]
        self.info = infos[0]
        self.warnings += self.info.get("warnings", [])
        self._free = list(self.zygotes)

    def close(self) -> None:
        """Stop the zygotes and remove the working folder; never raises (a child's leftovers, however
        deep, cannot turn a graded class into a failed command): what stays is logged."""
        for z in self.zygotes:
            try:
                z.kill()
            except Exception as error:  # noqa: BLE001
                self._cleanup_failed(f"{z.name}: could not be stopped ({type(error).__name__}: {error})")
        if self._own_workdir:
            self._remove(self.workdir)

    def _remove(self, path: Path) -> None:
        try:
            problems = _rmtree(path)
        except Exception as error:  # noqa: BLE001 - _rmtree catches its own; this is the last guard
            problems = [f"{path}: {type(error).__name__}: {error}"]
        for problem in problems:
            self._cleanup_failed(problem)

    def _cleanup_failed(self, problem: str) -> None:
        self.cleanup_problems.append(problem)
        log.warning("grading sandbox: could not clean up %s", problem)

    @property
    def landlock_abi(self) -> int:
        return int(self.info.get("landlock_abi", 0))

    @property
    def restarts(self) -> int:
        return sum(z.restarts for z in self.zygotes)

    # ---------------------------------------------------------- calls files
    def write_calls(self, name: str, calls_by_label: dict) -> str:
        """Write the calls of every exercise (plain data) for the zygotes; return its path. Tried twice;
        then :class:`GraderIOError` (the grader's disk, never a student's)."""
        path = self.workdir / "calls" / f"{name}.pt"
        for attempt in (1, 2):
            try:
                torch.save(calls_by_label, path)
                return str(path)
            except OSError as error:
                if attempt == 2:
                    raise GraderIOError(error.errno, f"the grader could not write the calls file "
                                                     f"{path.name}: {_why(error)}") from error

    # ---------------------------------------------------------- running one child
    def run(self, request: dict) -> tuple:
        """Run one child; return (ChildReport, validated outcome or None, problem, stderr tail).

        When the grader's own I/O fails (its scratch folder cannot be made), the child runs once more;
        then :class:`GraderIOError`: no outcome of the student's code."""
        try:
            return self._run_once(request)
        except GraderIOError:
            return self._run_once(request)

    def _run_once(self, request: dict) -> tuple:
        with self._job_lock:
            self._job += 1
            job = self._job
        scratch = self.workdir / "scratch" / f"job{job}"
        try:
            make_scratch(scratch)
        except OSError as error:
            raise GraderIOError(error.errno, f"the grader could not make a scratch folder: "
                                             f"{_why(error)}") from error
        with self._cond:
            while not self._free:
                self._cond.wait()
            zygote = self._free.pop()
        try:
            report = zygote.run(dict(request, scratch=str(scratch)))
        finally:
            with self._cond:
                self._free.append(zygote)
                self._cond.notify()
        self._remove(scratch)  # a private tmpfs (gone with the child), or the disk where namespaces are refused
        outcome, problem = None, ""
        if report.outcome is None:
            problem = f"an outcome over {MAX_OUTCOME_BYTES >> 20} MB" if report.outcome_too_large else "no outcome"
        else:
            try:
                outcome = load_outcome(report.outcome)
            except InvalidOutcome as error:
                problem = f"invalid outcome ({error})"
        return report, outcome, problem, report.stderr


def make_scratch(path: Path) -> None:
    """The folder a child works in (a tmpfs is mounted over it in the child's own mount namespace)."""
    path.mkdir(mode=0o700)


def _matplotlib_cache(workdir: Path) -> str:
    """A persistent, writable matplotlib cache (its font list is built once, not per run)."""
    try:
        import matplotlib
        path = matplotlib.get_cachedir()
        if path and os.access(path, os.W_OK):
            return path
    except Exception:  # noqa: BLE001
        pass
    path = workdir / "mpl"
    path.mkdir(exist_ok=True)
    return str(path)


__all__ = ["Sandbox", "ChildReport", "GraderIOError", "InvalidOutcome", "load_outcome", "read_paths",
           "RUNTIME_MODULES"]
