"""Parent side of the sandbox: zygote processes, safe reading and validation of outcomes.

The grader never imports or unpickles anything a child produced. It reads the child's
``outcomes.bin`` with ``O_NOFOLLOW``/``O_NONBLOCK`` (no symlink, no FIFO, regular file,
size cap): a JSON structure (capped) and raw tensor bytes, each tensor declared by dtype and
shape, checked against the caps and the file's length before anything is allocated
(``zygote_main.dump_outcome`` writes it). It accepts only the plain-data grammar of
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
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from .grader_io import GRADER_ERRNOS, GraderIOError, rmtree as _rmtree, why as _why
from .runtime import RUNTIME_DATA_DIRS, RUNTIME_MODULES, build_runtime

MAX_OUTCOME_BYTES = 64 * 1024 * 1024
MAX_STRUCTURE_BYTES = 4 * 1024 * 1024  # the JSON part: results are small apart from their tensors
OUTCOME_MAGIC = b"ACOUT1\n"
OUTCOME_DTYPES = {name: getattr(torch, name) for name in (
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128")}
MAX_DIMS = 8
MAX_TENSOR_ELEMENTS = 4_000_000
MAX_TOTAL_ELEMENTS = 16_000_000
MAX_STRING = 20_000
MAX_ITEMS = 100_000
MAX_DEPTH = 12

SYSTEM_READ_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo")
SYSTEM_READ_FILES = ("/etc/ld.so.cache", "/etc/localtime")
DEV_FILES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


class InvalidOutcome(ValueError):
    """A child's outcome file that is not plain data of the expected shape."""


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
        except (BrokenPipeError, OSError, ValueError):
            line = b""
        if not line:
            self.kill()
            self.restart()
            return ChildReport(zygote_died=True)
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"zygote could not serve the request: {reply['error']}")
        fields = {k: reply[k] for k in ("timed_out", "elapsed", "exit_code", "signal", "max_rss_kb")}
        return ChildReport(**fields)

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

    def __init__(self, jobs: int = 2, landlock: bool = True, workdir: Optional[Path] = None):
        import tempfile
        self.jobs = max(1, int(jobs))
        self.landlock = landlock
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
            "site_dirs": site_dirs(),
            "read_paths": read_paths(tuple(str(runtime / "attention_course" / d) for d in RUNTIME_DATA_DIRS
                                           if (runtime / "attention_course" / d).is_dir())),
            "dev_paths": [p for p in DEV_FILES if os.path.exists(p)],
            "mpl_dir": _matplotlib_cache(self.workdir),
            "landlock": self.landlock,
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

        When the grader's own I/O fails (its scratch folder cannot be made, the outcome cannot be read
        back), the child runs once more; then :class:`GraderIOError`: no outcome of the student's code."""
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
            scratch.mkdir(mode=0o700)
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
        try:
            outcome, problem = None, ""
            raw = read_capped(scratch / "outcomes.bin", MAX_OUTCOME_BYTES)
            if raw is None:
                problem = "no outcome file"
            else:
                try:
                    outcome = load_outcome(raw)
                except InvalidOutcome as error:
                    problem = f"invalid outcome file ({error})"
            stderr = (read_capped(scratch / "stderr.txt", 20_000, tail=True) or b"").decode("utf-8", "replace")
        except OSError as error:  # read_capped answers None for what a child can cause
            raise GraderIOError(error.errno, f"the grader could not read back the outcome: "
                                             f"{_why(error)}") from error
        finally:
            self._remove(scratch)
        return report, outcome, problem, stderr


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


def read_capped(path: Path, cap: int, tail: bool = False) -> Optional[bytes]:
    """Read a regular file a child wrote, never following a symlink nor blocking on a FIFO.

    None for what a child can cause (no file, a link, not a regular file, too large); an
    :class:`OSError` of the grader's own (:data:`GRADER_ERRNOS`, a failed read) is raised."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in GRADER_ERRNOS:  # the grader's own trouble: the caller says so
            raise
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > cap and not tail:
            return None
        if tail and info.st_size > cap:
            os.lseek(fd, info.st_size - cap, os.SEEK_SET)
        chunks, total = [], 0
        while total < cap:
            chunk = os.read(fd, min(1 << 20, cap - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ validation


def _decode(raw: bytes) -> Any:
    """The structure and tensors of an ``outcomes.bin``; every size is checked before allocating."""
    start = len(OUTCOME_MAGIC) + 8
    if not raw.startswith(OUTCOME_MAGIC) or len(raw) < start:
        raise InvalidOutcome("not an outcome file")
    size = int.from_bytes(raw[len(OUTCOME_MAGIC):start], "little")
    if size > MAX_STRUCTURE_BYTES or start + size > len(raw):
        raise InvalidOutcome("the structure's declared size does not fit")
    try:
        tree = json.loads(raw[start:start + size].decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise InvalidOutcome(f"not plain data: {type(error).__name__}") from None
    data = memoryview(raw)[start + size:]
    budget = [MAX_TOTAL_ELEMENTS]

    def tensor(record) -> torch.Tensor:
        if type(record) is not list or len(record) != 3:
            raise InvalidOutcome("malformed tensor record")
        offset, dtype_name, shape = record
        if type(offset) is not int or offset < 0 or type(dtype_name) is not str or type(shape) is not list:
            raise InvalidOutcome("malformed tensor record")
        dtype = OUTCOME_DTYPES.get(dtype_name)
        if dtype is None:
            raise InvalidOutcome(f"tensor dtype {dtype_name[:40]!r} is not allowed")
        if len(shape) > MAX_DIMS or any(type(n) is not int or n < 0 or n > MAX_TENSOR_ELEMENTS for n in shape):
            raise InvalidOutcome("malformed tensor shape")
        numel = 1
        for n in shape:
            numel *= n
        if numel > MAX_TENSOR_ELEMENTS:
            raise InvalidOutcome("tensor too large")
        budget[0] -= numel
        if budget[0] < 0:
            raise InvalidOutcome("tensors too large in total")
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if offset + nbytes > len(data):
            raise InvalidOutcome("a tensor's bytes lie outside the file")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data[offset:offset + nbytes]), dtype=dtype).reshape(shape)

    def walk(value, depth):
        if depth > MAX_DEPTH:
            raise InvalidOutcome("nested too deeply")
        if type(value) is dict:
            if len(value) == 1 and "__tensor__" in value and type(value["__tensor__"]) is list:
                return tensor(value["__tensor__"])
            return {key: walk(item, depth + 1) for key, item in value.items()}
        if type(value) is list:
            return [walk(item, depth + 1) for item in value]
        return value

    return walk(tree, 0)


def load_outcome(raw: bytes) -> dict:
    """Decode a child's ``outcomes.bin`` (data only) and validate the result's structure."""
    data = _decode(raw)
    budget = [MAX_TOTAL_ELEMENTS, MAX_ITEMS]
    _plain(data, 0, budget)
    if type(data) is not dict or data.get("phase") not in ("setup", "exercise", "missing", "calls", "done"):
        raise InvalidOutcome("unexpected top-level structure")
    if data.get("error") is not None:
        err = data["error"]
        if type(err) is not dict or not all(type(err.get(k)) is str for k in ("type", "message", "where")):
            raise InvalidOutcome("malformed error record")
    if type(data.get("defined", [])) is not list or not all(type(x) is str for x in data.get("defined", [])):
        raise InvalidOutcome("malformed list of defined names")
    outcomes = data.get("outcomes")
    if type(outcomes) is not list:
        raise InvalidOutcome("outcomes is not a list")
    for check_outcomes in outcomes:
        if type(check_outcomes) is not list:
            raise InvalidOutcome("a check's outcomes is not a list")
        for outcome in check_outcomes:
            _validate_call_outcome(outcome)
    return data


def _plain(value: Any, depth: int, budget: list) -> None:
    if depth > MAX_DEPTH:
        raise InvalidOutcome("nested too deeply")
    budget[1] -= 1
    if budget[1] < 0:
        raise InvalidOutcome("too many items")
    kind = type(value)
    if value is None or kind in (bool, int, float):
        return
    if kind is str:
        if len(value) > MAX_STRING:
            raise InvalidOutcome("string too long")
        return
    if kind is list:
        for item in value:
            _plain(item, depth + 1, budget)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or len(key) > 500:
                raise InvalidOutcome("dict key is not a short string")
            _plain(item, depth + 1, budget)
        return
    if kind is torch.Tensor:
        if value.layout != torch.strided or value.device.type != "cpu" or value.is_quantized:
            raise InvalidOutcome("tensor is not a dense CPU tensor")
        if value.numel() > MAX_TENSOR_ELEMENTS:
            raise InvalidOutcome("tensor too large")
        budget[0] -= value.numel()
        if budget[0] < 0:
            raise InvalidOutcome("tensors too large in total")
        return
    raise InvalidOutcome(f"type {kind.__name__} is not allowed")


def _value(value: Any) -> None:
    """The grammar of :func:`attention_course.checks.calls.to_plain`."""
    if value is None or type(value) in (bool, int, float, str, torch.Tensor):
        return
    if type(value) is dict and len(value) == 1:
        (key, inner), = value.items()
        if key in ("__seq__", "__list__") and type(inner) is list:
            for item in inner:
                _value(item)
            return
        if key == "__dict__" and type(inner) is dict:
            for item in inner.values():
                _value(item)
            return
        if key == "__unsupported__" and type(inner) is str:
            return
    raise InvalidOutcome("a returned value is not in the plain-data format")


def _validate_call_outcome(outcome: Any) -> None:
    if type(outcome) is not dict:
        raise InvalidOutcome("a call outcome is not a dict")
    status = outcome.get("status")
    if status == "raised":
        if not all(type(outcome.get(k)) is str for k in ("error_type", "message")):
            raise InvalidOutcome("a raised outcome lacks its error type or message")
        mro = outcome.get("error_mro", [])
        if type(mro) is not list or not all(type(x) is str for x in mro):
            raise InvalidOutcome("malformed error_mro")
        if type(outcome.get("note", "")) is not str:
            raise InvalidOutcome("malformed note")
        return
    if status != "ok" or "value" not in outcome:
        raise InvalidOutcome("a call outcome has no status")
    _value(outcome["value"])
    if "grads" in outcome:
        _value(outcome["grads"])
    extras = outcome.get("extras", {})
    if type(extras) is not dict:
        raise InvalidOutcome("extras is not a dict")
    for key in outcome:
        if key not in ("status", "value", "grads", "extras"):
            raise InvalidOutcome(f"unexpected key {key!r} in a call outcome")


__all__ = ["Sandbox", "ChildReport", "GraderIOError", "InvalidOutcome", "load_outcome", "read_capped", "read_paths",
           "RUNTIME_MODULES"]
