"""The kernel walls of a grading child: Landlock, seccomp, capabilities and prctl.

Constants, ctypes structures and the calls that raise each wall; the zygote
(:mod:`attention_course.tools.grading.zygote_main`) uses them in every forked child, before any
student code runs:

* :func:`landlock_restrict` – read/execute only on the given folders and files, read/write only
  on the scratch folder, no TCP bind/connect (ABI >= 4), no signals to and no abstract unix
  sockets of processes outside the sandbox (ABI >= 6);
* :func:`seccomp_restrict` – no sockets and no new processes (threads stay allowed);
* :func:`drop_capabilities` – root keeps uid 0 but loses every capability;
* :func:`_prctl` – PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER.

This file is copied into the grading runtime as ``_ac_walls.py`` beside ``_ac_zygote.py`` and
loaded from there by the zygote, so it imports the standard library only (no ``attention_course``).
"""
import ctypes
import errno
import os

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13        # ABI 2
FS_TRUNCATE = 1 << 14     # ABI 3
FS_IOCTL_DEV = 1 << 15    # ABI 5
NET_BIND_TCP = 1 << 0     # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1                # ABI 6

FILE_ONLY_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def landlock_abi() -> int:
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return int(abi) if abi > 0 else 0


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


# ------------------------------------------------------------------ seccomp: no sockets, no processes

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
CLONE_THREAD = 0x00010000
# (audit arch, {syscall: errno}, clone's number): the calls a child is refused. socket and
# socketpair: Landlock mediates only TCP, so UDP and Unix sockets need this; fork, vfork and clone
# without CLONE_THREAD: grading needs no process of its own, so none can outlive the child;
# clone3 reports ENOSYS, and glibc then creates its threads with clone, which is allowed.
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, {41: 1, 53: 1, 57: 1, 58: 1, 435: 38}, 56),
    "aarch64": (0xC00000B7, {198: 1, 199: 1, 435: 38}, 220),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_supported() -> bool:
    return os.uname().machine in _SECCOMP_ARCHES


def seccomp_restrict() -> None:
    """Refuse sockets and new processes to this process and everything it starts (a seccomp BPF
    filter; needs PR_SET_NO_NEW_PRIVS first). Threads stay allowed. Raise OSError when refused."""
    arch, refused, clone_nr = _SECCOMP_ARCHES[os.uname().machine]
    LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [(LD_W_ABS, 0, 0, 4)]                                    # seccomp_data.arch
    prog.append((JEQ_K, 1, 0, arch))
    prog.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | 1))                # another ABI (x32, i386): refused
    prog.append((LD_W_ABS, 0, 0, 0))                                 # seccomp_data.nr
    prog.append((JGE_K, 0, 1, 0x40000000))                           # x32's numbers on x86_64: refused
    prog.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | 1))
    for number, errno_value in refused.items():
        prog.append((JEQ_K, 0, 1, number))
        prog.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | errno_value))
    prog.append((JEQ_K, 0, 3, clone_nr))
    prog.append((LD_W_ABS, 0, 0, 16))                                # clone's flags (args[0], low half)
    prog.append((JSET_K, 1, 0, CLONE_THREAD))
    prog.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | 1))                # a process, not a thread
    prog.append((RET_K, 0, 0, SECCOMP_RET_ALLOW))
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    if _libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                   ctypes.c_void_p(ctypes.addressof(fprog)), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def _prctl(option, arg2=0, arg3=0, arg4=0, arg5=0) -> int:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                       ctypes.c_ulong(arg4), ctypes.c_ulong(arg5))


def landlock_restrict(abi: int, read_fds: list, scratch_fd: int, dev_fds: list) -> None:
    """Restrict the calling process; raise OSError when the kernel refuses."""
    handled_fs = _fs_rights(abi)
    attr = _RulesetAttr(handled_fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    scratch = handled_fs & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)
    rules = [(fd, is_dir, read) for fd, is_dir in read_fds]
    rules.append((scratch_fd, True, scratch))
    rules += [(fd, False, FS_READ_FILE | FS_WRITE_FILE) for fd in dev_fds]
    for fd, is_dir, access in rules:
        if not is_dir:
            access &= FILE_ONLY_RIGHTS
        rule = _PathBeneathAttr(access & handled_fs, fd)
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            os.close(ruleset)
            raise OSError(err, "landlock_add_rule failed")
    if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        err = ctypes.get_errno()
        os.close(ruleset)
        raise OSError(err, "landlock_restrict_self failed")
    os.close(ruleset)


def drop_capabilities() -> None:
    """Root in the child keeps uid 0 but loses every capability (it cannot raise its limits back)."""
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")



# What the zygote takes (``from .walls import *``): every name of this module, the private ones
# included, so that each stays importable from zygote_main as before.
__all__ = [name for name in list(globals()) if not name.startswith("__") and name not in ("ctypes", "errno", "os")]
