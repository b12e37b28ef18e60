"""Issue 38, "default deny": a grading child may make only the system calls of an allow-list
(libseccomp; everything else refused with EPERM, never a kill) and runs in private user, IPC and
network namespaces where the kernel allows them.

A ch01 exercise cell tries io_uring, SysV IPC, memfd, a Unix socket and unshare through raw
system calls and reports each errno in its error message: every one is refused, the class goes
on, an honest classmate keeps full marks, a busy but honest one (threads, torch on two threads,
numpy, matplotlib, temporary files, signals, limits read) too, and nothing it asked for outlives
the run.
"""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools.grading import syscalls
from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.grading.walls import seccomp_supported
from attention_course.tools.notebook import _src, exercise_cell_index, with_exercise_code

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
CHAPTER1_POINTS = sum(ex.points for ex in all_exercises(1))
FIRST = all_exercises(1)[0]
IPC_KEY = 0x38AC0038  # the SysV key the hostile cell asks for: must exist nowhere after the run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")

# Raw system calls (x86_64, aarch64): what the allow-list refuses whatever library wraps them.
HOSTILE = '''import ctypes, errno, os, platform
_numbers = {{"x86_64": dict(io_uring_setup=425, shmget=29, msgget=68, memfd_create=319, socket=41, connect=42,
                           unshare=272),
            "aarch64": dict(io_uring_setup=425, shmget=194, msgget=186, memfd_create=279, socket=198,
                            connect=203, unshare=97)}}[platform.machine()]
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_params = (ctypes.c_char * 120)()
_name = ctypes.create_string_buffer(b"x")
_address = ctypes.create_string_buffer(b"\\x01\\x00" + b"/tmp/ac-walls.sock", 110)   # AF_UNIX
_calls = [("io_uring_setup", (8, ctypes.addressof(_params))),
          ("shmget", ({key}, 4096, 0o1600)),          # IPC_CREAT | 0600
          ("msgget", ({key}, 0o1600)),
          ("memfd_create", (ctypes.addressof(_name), 0)),
          ("socket", (1, 1, 0)),                        # AF_UNIX, SOCK_STREAM
          ("connect", (3, ctypes.addressof(_address), 110)),
          ("unshare", (0x08000000,))]                   # CLONE_NEWIPC
_seen = []
for _call, _args in _calls:
    _result = _libc.syscall(ctypes.c_long(_numbers[_call]), *[ctypes.c_long(a) for a in _args])
    _seen.append(_call + ": " + ("ok" if _result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")))
_seen.append("ns " + " ".join(k + "=" + os.readlink("/proc/self/ns/" + k) for k in ("user", "ipc", "net")))
raise RuntimeError("walls: " + "; ".join(_seen) + " :end")
'''

# Ordinary work a student's cell may do, before the right answer.
BUSY = '''import os, resource, signal, tempfile, threading, time
import numpy as np
import torch
import matplotlib.pyplot as plt
_box = []
_worker = threading.Thread(target=lambda: _box.append(sum(range(1000))))
_worker.start(); _worker.join()
torch.set_num_threads(2)
_box.append(float((torch.randn(200, 200) @ torch.randn(200, 200)).sum()))
torch.set_num_threads(1)
_box.append(float(np.linalg.svd(np.random.rand(20, 20))[1][0]))
with tempfile.TemporaryDirectory() as _folder:
    _figure = plt.figure(); plt.plot([1, 2, 3]); _figure.savefig(os.path.join(_folder, "x.png")); plt.close(_figure)
    np.save(os.path.join(_folder, "a.npy"), np.arange(3))
_box.append(resource.getrlimit(resource.RLIMIT_NOFILE))
signal.signal(signal.SIGALRM, lambda *a: None); signal.alarm(0)
time.sleep(0.01); os.cpu_count(); os.urandom(8)
assert len(_box) == 4, _box
'''


def _solution() -> dict:
    return json.loads(SOLUTION_1.read_text(encoding="utf-8"))


def _sysv(kind: str) -> set:
    """The SysV objects of ``kind`` (shm, msg, sem) this machine shows, as their keys."""
    try:
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {int(line.split()[0]) for line in lines if line.split()}


@pytest.fixture(scope="module", params=[True, False], ids=["namespaces", "namespaces-refused"])
def sandbox(request, tmp_path_factory):
    """With private namespaces where the kernel allows them, and without (what a container whose seccomp
    profile refuses ``unshare``, such as Docker's default, leaves): the allow-list holds either way."""
    if not seccomp_supported():
        pytest.skip(f"seccomp is not set up on {platform.machine()}")
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("sandbox_walls"), namespaces=request.param) as box:
        if "seccomp off" in box.info.get("protections", "seccomp off"):
            pytest.skip("this kernel refuses seccomp filters")
        if not request.param:
            assert "namespaces user no, mnt no, ipc no, net no; scratch a folder on the grader's disk" in \
                box.info["protections"], box.info["protections"]
            assert any("namespaces turned off" in w for w in box.warnings), box.warnings
        yield box


def test_the_allow_list_holds_none_of_the_refused_calls():
    allowed = set(syscalls.ALLOWED) | set(syscalls.THREADS_ONLY) | set(syscalls.READ_ONLY)
    assert not allowed & set(syscalls.REFUSED), sorted(allowed & set(syscalls.REFUSED))
    assert not allowed & set(syscalls.ENOSYS)
    named_in_issue_38 = {"io_uring_setup", "io_uring_enter", "io_uring_register", "shmget", "shmat", "shmctl",
                         "msgget", "msgsnd", "msgrcv", "semget", "semop", "mq_open", "memfd_create", "socket",
                         "socketpair", "connect", "bind", "listen", "accept", "sendto", "sendmsg", "recvfrom",
                         "unshare", "setns", "mount", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
                         "perf_event_open", "userfaultfd", "keyctl", "add_key", "fork", "vfork", "execve",
                         "execveat", "clone3"}
    assert named_in_issue_38 <= set(syscalls.REFUSED) | set(syscalls.ENOSYS)
    assert syscalls.THREADS_ONLY == ("clone",) and syscalls.ENOSYS == ("clone3",)
    assert all(isinstance(n, str) and n for n in syscalls.ALLOWED) and len(set(syscalls.ALLOWED)) == len(syscalls.ALLOWED)


def test_refused_calls_cost_only_their_exercise_and_leave_nothing_behind(sandbox, tmp_path):
    shm_before, msg_before = _sysv("shm"), _sysv("msg")
    assert IPC_KEY not in shm_before and IPC_KEY not in msg_before, "a key left by an earlier run"
    solution = _solution()
    busy_code = BUSY + _src(solution["cells"][exercise_cell_index(solution["cells"])[FIRST.label]])
    notebooks = {"hostile": with_exercise_code(solution, FIRST.label, HOSTILE.format(key=IPC_KEY)),
                 "honest": solution, "busy": with_exercise_code(solution, FIRST.label, busy_code)}
    subs = []
    for name, nb in notebooks.items():
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
        subs.append(Submission(name, tmp_path / f"{name}.ipynb"))
    run = run_grading(subs, 1, seed=3, sandbox=sandbox, time_limit=20)
    results = {r.student: r for r in run.results}
    protections = sandbox.info["protections"]
    assert f"protections: {protections}" in run.log_header

    hostile = {e.label: e for e in results["hostile"].exercises}
    reason = hostile[FIRST.label].reason
    assert hostile[FIRST.label].points == 0 and "walls: " in reason and ":end" in reason, reason
    if "allow-list" in protections:
        for call in ("io_uring_setup", "shmget", "msgget", "memfd_create", "socket", "connect", "unshare"):
            assert f"{call}: EPERM" in reason, (call, reason)
    else:  # the fallback deny-list: sockets only
        assert "socket: EPERM" in reason, reason
    if "namespaces user yes, mnt yes, ipc yes, net yes" in protections:
        inside = dict(item.split("=", 1) for item in reason.split("ns ", 1)[1].split(" :end")[0].split())
        for kind in ("user", "ipc", "net"):
            assert inside[kind] != os.readlink(f"/proc/self/ns/{kind}"), (kind, reason)
    assert sum(e.points for e in results["hostile"].exercises) == CHAPTER1_POINTS - FIRST.points
    assert results["honest"].total == CHAPTER1_POINTS
    assert results["busy"].total == CHAPTER1_POINTS, [(e.label, e.reason) for e in results["busy"].exercises]
    assert run.restarts == 0
    assert IPC_KEY not in _sysv("shm") and IPC_KEY not in _sysv("msg")
    assert not os.path.exists("/tmp/ac-walls.sock")


def _in_a_child(step) -> dict:
    """Run ``step`` (returning a JSON-able dict) in a forked child under PR_SET_NO_NEW_PRIVS."""
    from attention_course.tools.grading import walls
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            walls._prctl(walls.PR_SET_NO_NEW_PRIVS, 1)
            os.write(write_end, json.dumps(step()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def _errno_of(call) -> str:
    import errno
    try:
        call()
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    except ValueError as error:  # resource.setrlimit reports EPERM as ValueError
        return f"ValueError: {error}"
    return "ok"


@pytest.mark.skipif(not seccomp_supported(), reason="seccomp is not set up on this architecture")
def test_the_allow_list_keeps_threads_and_refuses_processes_other_abis_and_clone3():
    import ctypes
    import resource
    import socket
    import threading
    from attention_course.tools.grading import walls
    if walls._SCMP is None:
        pytest.skip("libseccomp is missing here: the deny-list fallback is tested below")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def raw(number):
        def call():
            if libc.syscall(ctypes.c_long(number), ctypes.c_long(0), ctypes.c_long(0)) < 0:
                raise OSError(ctypes.get_errno(), "refused")
        return call

    def step():
        loaded = walls.seccomp_restrict()
        box = []
        worker = threading.Thread(target=lambda: box.append(1))
        worker.start()
        worker.join()
        out = {"loaded": loaded, "thread": box == [1], "fork": _errno_of(os.fork),
               "socket": _errno_of(lambda: socket.socket(socket.AF_UNIX)),
               "memfd": _errno_of(lambda: os.memfd_create("x")),
               "getrlimit": _errno_of(lambda: resource.getrlimit(resource.RLIMIT_NOFILE)),
               "setrlimit": _errno_of(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16)))}
        if platform.machine() == "x86_64":
            out["clone3"] = _errno_of(raw(435))
            out["x32 getpid"] = _errno_of(raw(0x40000000 | 39))
        return out

    out = _in_a_child(step)
    assert out["loaded"] == "allow-list" and out["thread"], out
    assert out["fork"] == out["socket"] == out["memfd"] == "EPERM", out
    assert out["getrlimit"] == "ok" and "ValueError" in out["setrlimit"], out
    if platform.machine() == "x86_64":
        assert out["clone3"] == "ENOSYS" and out["x32 getpid"] == "EPERM", out


@pytest.mark.skipif(not seccomp_supported(), reason="seccomp is not set up on this architecture")
def test_without_libseccomp_the_deny_list_holds(monkeypatch):
    import socket
    from attention_course.tools.grading import walls
    monkeypatch.setattr(walls, "_SCMP", None)
    assert walls.seccomp_description().startswith("deny-list")

    def step():
        return {"loaded": walls.seccomp_restrict(), "fork": _errno_of(os.fork),
                "socket": _errno_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))}

    out = _in_a_child(step)
    assert out == {"loaded": "deny-list", "fork": "EPERM", "socket": "EPERM"}, out
