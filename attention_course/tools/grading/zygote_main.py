"""The grading zygote: a pre-warmed process that forks one sandboxed child per exercise.

This file is copied into the generated runtime folder and started by the grader as

    python -I -S -B <runtime>/_ac_zygote.py <config.json>

so its ``sys.path`` holds only the standard library; it then adds the runtime folder
(the student-facing ``attention_course`` package, with no registry, no exercise, no
check) and the site-packages folders it was told about, imports torch, numpy and
matplotlib (Agg) once, and waits for requests on stdin (one JSON object per line).
It answers on the file descriptor named in the config (one JSON object per line).

For every request it forks a child that

1. starts its own session, dies with the zygote (PDEATHSIG), redirects stdin and stdout to
   /dev/null and stderr to a pipe the zygote reads (:mod:`.child_io`), enters private user,
   mount, IPC and network namespaces where the kernel allows them and mounts a tmpfs of fixed
   size and file count over its scratch folder (so nothing it writes reaches the grader's disk),
   closes every other file descriptor but its outcome pipe, clears ``os.environ`` to a small
   fixed environment and changes into the scratch folder;
2. sets resource limits (address space relative to its current size, file size,
   open files, CPU time, no core dumps), sets
   ``PR_SET_NO_NEW_PRIVS``, drops every capability when running as root (or in its own
   user namespace), restricts itself with Landlock: read/execute only on the standard
   library, the allowed site-packages entries and the system library folders, read/write
   only on its scratch folder, no TCP bind/connect (ABI >= 4), no signals to and no
   abstract unix sockets of processes outside the sandbox (ABI >= 6); and last with
   seccomp: an allow-list of system calls (libseccomp; the rest refused with EPERM), or
   where libseccomp is missing a deny-list of sockets and new processes;
3. disables the course's own answer to the exercise being graded as an object, not a
   name: a function's code is replaced by code that raises a clear "no credit" error, a
   class refuses construction and subclassing and its own methods raise, and reloading
   or re-importing the module that holds it raises the same kind of error (so the gc,
   an alias, a subclass, ``importlib.reload`` or ``sys.modules`` give nothing);
4. executes the notebook's setup cell and the exercise's cells, fetches the object by
   name, runs each check's calls with ``attention_course.checks.calls.run_call`` and writes
   the plain outcomes as data (:func:`dump_outcome`) down its outcome pipe after every check (so a
   timeout still keeps the checks that finished).

The zygote waits for the child under a wall-clock limit while it reads the child's two pipes,
kills its process group on timeout, sweeps any orphaned descendant (it is a child subreaper), and
reports how the child ended, with the tail of its stderr, followed on the reply pipe by the bytes
of its last outcome. It never judges anything: scores are decided by the parent.

This module must not import ``attention_course`` at module level (it runs before the
runtime is on the path) and must stay free of any reference solution or check.
"""
import ctypes
import json
import os
import select
import signal
import sys
import types
import time

# The kernel walls: Landlock, seccomp, namespaces, capabilities and prctl (landlock_abi, landlock_restrict,
# seccomp_supported, seccomp_restrict, private_namespaces, drop_capabilities, _prctl, the PR_*/FS_*/NET_*/SCOPE_*
# constants and their ctypes structures), every name of them importable from here too. Imported as
# attention_course.tools.grading.zygote_main (the grader, the tests) they are walls.py of this
# package; run as the runtime's standalone _ac_zygote.py (python -I -S -B: sys.path holds the
# standard library only), they are _ac_walls.py beside it, in the runtime folder that main() puts
# first on sys.path anyway.
if __package__:
    from .walls import *  # noqa: F401,F403
    from .child_io import ChildPipes, write_frame
    from . import ondemand  # chapter 11's triton, imported on demand; cells' source kept in linecache
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _ac_walls import *  # noqa: F401,F403
    from _ac_child_io import ChildPipes, write_frame
    import _ac_ondemand as ondemand

# The whole, fixed environment of a child: nothing tells it that it is being graded.
CHILD_ENV_KEYS = ("HOME", "LANG", "LC_ALL", "MPLBACKEND", "OMP_NUM_THREADS", "PATH", "TMPDIR")


# ------------------------------------------------------------------ the child


def _describe_error(error: BaseException, sources: dict) -> dict:
    """Type, message and the line of the student's cell where it happened (no paths)."""
    import traceback
    where = ""
    tb = error.__traceback__
    for frame, lineno in traceback.walk_tb(tb):
        name = frame.f_code.co_filename
        if name in sources:
            lines = sources[name].splitlines()
            text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
            where = f"{name}, line {lineno}: {text}"[:300]
    return {"type": type(error).__name__, "mro": [t.__name__ for t in type(error).__mro__][:20],
            "message": str(error)[:1500], "where": where}


def _child(req: dict, state: dict) -> None:
    """Runs in the forked child. Never returns: always ends with os._exit."""
    code = 70
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-long files fail with an error instead
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        scratch, outcome_fd = req["scratch"], req["outcome_fd"]
        devnull = os.open("/dev/null", os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # what a student prints is not graded, and costs nothing
        os.dup2(req["stderr_fd"], 2)
        namespaces = tuple(state.get("namespaces", ()))
        if namespaces and private_namespaces(namespaces) != namespaces:
            raise OSError(f"namespaces {', '.join(namespaces)} could not all be entered")
        if "mnt" in namespaces:
            private_scratch(scratch, int(req.get("scratch_mb", 64)), int(req.get("scratch_files", 4096)))
        scratch_fd = os.open(scratch, os.O_PATH | os.O_DIRECTORY)
        keep = {0, 1, 2, scratch_fd, outcome_fd} | {fd for fd, _ in state["read_fds"]} | set(state["dev_fds"])
        _close_all_but(keep)
        os.chdir(scratch)
        os.environ.clear()
        os.environ.update({"HOME": scratch, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "MPLBACKEND": "Agg",
                           "OMP_NUM_THREADS": "1", "PATH": "/usr/local/bin:/usr/bin:/bin", "TMPDIR": scratch})
        os.environ.update(ondemand.child_environment(state, scratch))  # TRITON_INTERPRET once triton is in
        import tempfile
        tempfile.tempdir = scratch
        import resource
        with open("/proc/self/statm") as f:
            vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = vm_bytes + int(req["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        fsize = int(req.get("file_size_mb", 64)) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        cpu = int(req["timeout"]) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if (os.geteuid() == 0 and state.get("drop_caps", True)) or "user" in namespaces:
            drop_capabilities()
        if state["abi"]:
            landlock_restrict(state["abi"], state["read_fds"], scratch_fd, state["dev_fds"])
        _close_all_but({0, 1, 2, outcome_fd})
        nofile = int(req.get("max_open_files", 64))
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if state.get("seccomp"):  # last: the allow-list lets limits be read, not set
            seccomp_restrict(allow_list=state["seccomp"] == "allow-list")
    except BaseException as error:  # the sandbox could not be set up: refuse to run student code
        try:
            os.write(2, f"sandbox setup failed: {type(error).__name__}: {error}\n".encode())
        finally:
            os._exit(71)
    try:
        code = _run_student(req, state)
    except BaseException:
        code = 72
    finally:
        os._exit(code)


def _close_all_but(keep: set) -> None:
    top = 1 << 16
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
        top = max(fds + [2]) + 1
    except OSError:
        pass
    start = 0
    for fd in sorted(keep) + [top]:
        if fd > start:
            os.closerange(start, fd)
        start = max(start, fd + 1)


OUTCOME_MAGIC = b"ACOUT1\n"


def dump_outcome(result) -> bytes:
    """The child's result as data only: a magic line, the JSON structure's length (8 bytes, little
    endian), the structure, then the tensors' raw bytes. A tensor is a record
    ``{"__tensor__": [offset, dtype, shape]}`` into those bytes. The parent
    (``sandbox.load_outcome``) checks every declared size against the file before allocating,
    and never unpickles anything."""
    import torch
    buffers, offset = [], [0]

    def encode(value):
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
            record = {"__tensor__": [offset[0], str(tensor.dtype).replace("torch.", ""), list(tensor.shape)]}
            buffers.append(raw)
            offset[0] += len(raw)
            return record
        if isinstance(value, dict):
            return {str(key): encode(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [encode(item) for item in value]
        return value

    head = json.dumps(encode(result)).encode("utf-8")
    return OUTCOME_MAGIC + len(head).to_bytes(8, "little") + head + b"".join(buffers)


def _run_student(req: dict, state: dict) -> int:
    import builtins
    import torch
    # Keep our own references: the student's code may monkeypatch torch or builtins.
    dump, frame, SimpleNamespace = dump_outcome, write_frame, __import__("types").SimpleNamespace
    outcome_fd = req["outcome_fd"]
    from attention_course.checks.calls import run_call
    from attention_course.checks.disable import block_answers  # imported by the zygote, before the sandbox
    block_answers(req["blocked"])
    calls = state["calls"][req["calls_path"]]
    own = req.get("student_calls_path")
    if own:  # one student's hidden checks, over the class's calls (None: the class's own)
        mine = state["student_calls"][1]
        calls = {label: [b if s is None else s for b, s in zip(checks, mine.get(label, []))] or checks
                 for label, checks in calls.items()}
    result = {"phase": "setup", "error": None, "defined": [], "outcomes": []}

    def write():
        frame(outcome_fd, dump(result))

    write()
    sources = {"<setup cell>": req["setup"], f"<exercise {req['label']}>": req["code"]}
    ondemand.remember_sources(sources)
    if ondemand.refusal(req, state):
        result["error"] = {"type": "ImportError", "mro": ["ImportError", "Exception", "BaseException", "object"],
                           "message": ondemand.refusal(req, state), "where": ""}
        write()
        return 0
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(req["setup"], "<setup cell>", "exec"), namespace)
    except BaseException as error:
        result["error"] = _describe_error(error, sources)
        write()
        return 0
    before = set(namespace)
    result["phase"] = "exercise"
    write()
    try:
        exec(compile(req["code"], f"<exercise {req['label']}>", "exec"), namespace)
    except BaseException as error:
        result["error"] = _describe_error(error, sources)
        write()
        return 0
    result["defined"] = sorted(k for k in namespace if k not in before and not k.startswith("_"))[:50]
    if req["name"] not in namespace:
        result["phase"] = "missing"
        write()
        return 0
    obj = namespace[req["name"]]
    result["phase"] = "calls"
    write()
    for check_calls in calls[req["label"]]:
        outcomes = []
        for fields in check_calls:
            try:
                outcome = run_call(obj, SimpleNamespace(**fields), req["kind"])
            except BaseException as error:  # run_call lets KeyboardInterrupt & co through
                outcome = {"status": "raised", "error_type": type(error).__name__,
                           "error_mro": [type(error).__name__], "message": str(error)[:2000], "note": ""}
            outcomes.append(outcome)
        result["outcomes"].append(outcomes)
        write()
    result["phase"] = "done"
    write()
    return 0


# ------------------------------------------------------------------ the zygote


def _open_read_rules(paths: list) -> list:
    fds = []
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        fds.append((fd, os.path.isdir(path)))
    return fds


def _children() -> list:
    """Our live children (we are a subreaper: orphaned descendants become our children)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _sweep_orphans() -> None:
    """Kill and reap any descendant that was re-parented to us."""
    for _ in range(50):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        alive = _children()
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def _serve_one(req: dict, state: dict) -> tuple:
    """Run one child; return the reply and the bytes of its last outcome (None: none came)."""
    import torch
    path = req["calls_path"]
    if path not in state["calls"]:
        state["calls"][path] = torch.load(path, weights_only=True)
    own = req.get("student_calls_path")
    if own and state["student_calls"][0] != own:  # one student's at a time: a class of any size fits
        state["student_calls"] = (own, torch.load(own, weights_only=True))
    req = dict(req, needs=ondemand.needed(req, state.get("on_demand_names", ())))
    for name in req["needs"]:  # before the fork and its clock: the child inherits what the zygote imported
        ondemand.load(name, state)
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    outcome_r, outcome_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(outcome_r)
        os.close(stderr_r)
        _child(dict(req, outcome_fd=outcome_w, stderr_fd=stderr_w), state)
    os.close(outcome_w)
    os.close(stderr_w)
    pipes = ChildPipes(outcome_r, stderr_r, int(state.get("outcome_cap", 64 << 20)))
    deadline = start + float(req["timeout"])
    timed_out = False
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    delay = 0.001
    status, rusage = None, None
    while True:
        wpid, status, rusage = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            for target in (-pid, pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
            _, status, rusage = os.wait4(pid, 0)
            break
        if pidfd is not None:  # wakes up the moment the child exits, or writes
            ready, _, _ = select.select([pidfd] + pipes.fds, [], [], remaining)
        elif pipes.fds:
            ready, _, _ = select.select(pipes.fds, [], [], min(delay, remaining))
        else:
            ready = []
            time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.02)
        pipes.read_ready(ready)
    if pidfd is not None:
        os.close(pidfd)
    elapsed = time.monotonic() - start
    try:
        os.killpg(pid, signal.SIGKILL)  # anything the child left in its session
    except OSError:
        pass
    _sweep_orphans()
    pipes.drain()
    outcome = pipes.frames.last
    return {"id": req["id"], "timed_out": timed_out, "elapsed": round(elapsed, 4),
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "max_rss_kb": getattr(rusage, "ru_maxrss", 0), "stderr": pipes.stderr.decode("utf-8", "replace"),
            "outcome_too_large": pipes.frames.too_large,
            "outcome_bytes": -1 if outcome is None else len(outcome)}, outcome


def _probe(step) -> bool:
    """Run ``step`` in a throw-away child; True when it succeeded."""
    pid = os.fork()
    if pid == 0:
        try:
            step()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _probe_sandbox(state: dict, config: dict, warnings: list) -> None:
    """Check once that this kernel/container lets a child sandbox itself; degrade with a warning."""
    if not _probe(lambda: _prctl(PR_SET_NO_NEW_PRIVS, 1) == 0 or 1 / 0):
        warnings.append("PR_SET_NO_NEW_PRIVS is refused here: the sandbox cannot be set up")
    if os.geteuid() == 0 and not _probe(drop_capabilities):
        state["drop_caps"] = False
        warnings.append("running as root and capabilities cannot be dropped: a child could raise its own limits")
    if state["abi"]:
        probe_dir = config.get("probe_dir") or config["runtime"]

        def landlock_step():
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
            fd = os.open(probe_dir, os.O_PATH | os.O_DIRECTORY)
            landlock_restrict(state["abi"], state["read_fds"], fd, state["dev_fds"])
            try:
                open("/proc/self/status").close()
            except PermissionError:
                return
            raise RuntimeError("Landlock did not confine the probe")

        if not _probe(landlock_step):
            warnings.append(f"Landlock ABI {state['abi']} is reported but restricting a child failed: children are "
                            f"NOT confined to their scratch folder")
            state["abi"] = 0


def _probe_seccomp(state: dict, warnings: list) -> None:
    """Check once that a child can refuse itself sockets and processes (with the allow-list, where
    libseccomp is, else the deny-list), and still run threads."""
    state["seccomp"] = ""
    if not seccomp_supported():
        warnings.append(f"seccomp is not set up on {os.uname().machine}: children may open sockets and "
                        f"start processes")
        return

    def step(allow_list=True):
        import socket
        import threading
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if seccomp_restrict(allow_list) == "allow-list":
            try:
                os.close(os.memfd_create("probe"))
            except PermissionError:
                pass
            else:
                raise RuntimeError("the allow-list let memfd_create through")
        for family, kind in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_UNIX, socket.SOCK_STREAM)):
            try:
                socket.socket(family, kind).close()
            except PermissionError:
                continue
            raise RuntimeError("a socket was allowed")
        try:
            os.fork()
        except PermissionError:
            pass
        else:
            os._exit(0)
        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()

    if _probe(step):
        state["seccomp"] = "allow-list" if _SCMP is not None else "deny-list"
    elif _SCMP is not None and _probe(lambda: step(False)):
        state["seccomp"] = "deny-list"
        warnings.append("the libseccomp allow-list is refused here: children get the deny-list (no sockets, "
                        "no processes) instead")
    else:
        warnings.append("seccomp filters are refused here: children may open UDP and Unix sockets and start "
                        "processes")


def _probe_namespaces(state: dict, config: dict, warnings: list) -> None:
    """Check once which private namespaces (user, mount with its tmpfs scratch, IPC, network) a child
    can enter here."""
    if not config.get("namespaces", True):
        state["namespaces"] = []
        warnings.append("private namespaces turned off: children rely on the seccomp filter for IPC and network, "
                        "and write their scratch files to the grader's disk (each file capped in size)")
        return
    pid = os.fork()
    if pid == 0:
        try:
            entered = private_namespaces()
            if "mnt" in entered:
                try:
                    private_scratch(config["runtime"], 1, 16)
                except OSError:
                    entered = tuple(kind for kind in entered if kind != "mnt")
            if "user" in entered:
                drop_capabilities()
            os._exit(sum(1 << i for i, (kind, _) in enumerate(NAMESPACES) if kind in entered))
        except BaseException:
            os._exit(64)
    _, status = os.waitpid(pid, 0)
    bits = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 64
    state["namespaces"] = [kind for i, (kind, _) in enumerate(NAMESPACES) if bits < 64 and bits & (1 << i)]
    refused = [kind for kind, _ in NAMESPACES if kind not in state["namespaces"]]
    if refused:
        warnings.append(f"private namespaces refused here ({', '.join(refused)}): children rely on the "
                        f"seccomp filter for IPC and network" + (", and write their scratch files to the "
                        f"grader's disk (each file capped in size)" if "mnt" in refused else ""))


def _protections(state: dict) -> str:
    """The walls every child gets, in one line (grading.log)."""
    landlock = f"Landlock ABI {state['abi']}" if state["abi"] else "Landlock off"
    seccomp = {"allow-list": f"seccomp {seccomp_description()}", "deny-list": "seccomp deny-list (fallback: "
               "sockets and new processes refused)", "": "seccomp off"}[state["seccomp"]]
    namespaces = ", ".join(f"{k} {'yes' if k in state['namespaces'] else 'no'}" for k, _ in NAMESPACES)
    scratch = "a private tmpfs" if "mnt" in state["namespaces"] else "a folder on the grader's disk"
    return f"{landlock}; {seccomp}; namespaces {namespaces}; scratch {scratch}; outcomes over a pipe"


def main() -> int:
    with open(sys.argv[1]) as f:
        config = json.load(f)
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed by an import goes to the zygote's log, not the protocol
    # No PDEATHSIG here: it would fire when the grader *thread* that started us ends.
    # The zygote ends instead when its stdin closes (the grader exited or closed it).
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    sys.path[:0] = [config["runtime"]]
    sys.path += config["site_dirs"]
    os.environ.update({"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                       "MPLCONFIGDIR": config["mpl_dir"]})
    import torch
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import numpy  # noqa: F401
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch.nn.functional  # noqa: F401
    import math, random, itertools, functools, collections, typing, dataclasses, traceback, types  # noqa: E401,F401
    import attention_course
    warnings = []
    for name in config["runtime_modules"]:
        try:
            __import__(f"attention_course.{name}")
        except Exception as error:  # a module that needs something the runtime lacks
            warnings.append(f"runtime module attention_course.{name} failed to import: {error}")
    # Warm up what the first call of each kind would initialise lazily.
    x = torch.randn(4, 3, requires_grad=True)
    layer = torch.nn.Linear(3, 2)
    torch.softmax(layer(x), dim=-1).sum().backward()
    torch.testing.assert_close(x, x)
    fig = plt.figure()
    plt.close(fig)
    abi = landlock_abi() if config.get("landlock", True) else 0
    if not abi:
        warnings.append("Landlock is unavailable on this kernel: children are NOT confined to their scratch "
                        "folder (file, network and signal isolation off; rlimits and clean environment still on)")
    state = {"abi": abi, "calls": {}, "student_calls": (None, {}), "read_fds": _open_read_rules(config["read_paths"]),
             "dev_fds": [fd for fd, _ in _open_read_rules(config["dev_paths"])]}
    _probe_sandbox(state, config, warnings)
    seccomp_prepare()
    _probe_seccomp(state, warnings)
    _probe_namespaces(state, config, warnings)
    state["outcome_cap"] = int(config.get("outcome_cap", 64 << 20))
    state["on_demand_names"] = list(config.get("on_demand_modules", ()))
    del attention_course
    os.write(reply_fd, (json.dumps({"ready": True, "pid": os.getpid(), "landlock_abi": state["abi"],
                                    "protections": _protections(state),
                                    "warnings": warnings, "torch": torch.__version__}) + "\n").encode())
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        outcome = None
        try:
            req = json.loads(line)
            reply, outcome = _serve_one(req, state)
        except Exception as error:  # a broken request must not kill the zygote
            reply = {"id": None, "error": f"{type(error).__name__}: {error}"}
        data = memoryview((json.dumps(reply) + "\n").encode() + (outcome or b""))
        while data:  # the outcome's bytes follow its reply line
            data = data[os.write(reply_fd, data):]


if __name__ == "__main__":
    sys.exit(main())
