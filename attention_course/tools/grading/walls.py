"""The kernel walls of a grading child: Landlock, seccomp, capabilities and prctl.

Constants, ctypes structures and the calls that raise each wall; the zygote
(:mod:`attention_course.tools.grading.zygote_main`) uses them in every forked child, before any
student code runs:

* :func:`landlock_restrict` – read/execute only on the given folders and files, read/write only
  on the scratch folder, no TCP bind/connect (ABI >= 4), no signals to and no abstract unix
  sockets of processes outside the sandbox (ABI >= 6);
* :func:`seccomp_restrict` – an allow-list of system calls (:mod:`.syscalls`), everything else refused
  with EPERM, built with libseccomp; where libseccomp is missing, a hand-written deny-list (no
  sockets, no new processes); threads stay allowed either way;
* :func:`private_namespaces` – new user, mount, IPC and network namespaces where the kernel allows them;
* :func:`private_scratch` – in the private mount namespace, a tmpfs of fixed size and number of files
  over the child's scratch folder (nothing it writes reaches the grader's disk);
* :func:`drop_capabilities` – root keeps uid 0 but loses every capability;
* :func:`_prctl` – PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER.

This file is copied into the grading runtime as ``_ac_walls.py`` beside ``_ac_zygote.py`` and
loaded from there by the zygote, so it imports the standard library only (no ``attention_course``)
and its list of system calls from ``_ac_syscalls.py`` beside it (:mod:`.syscalls` in the package).
"""
import ctypes
import ctypes.util
import errno
import os

if __package__:
    from .syscalls import ALLOWED as SYSCALLS_ALLOWED, ENOSYS as SYSCALLS_ENOSYS, \
        READ_ONLY as SYSCALLS_READ_ONLY, THREADS_ONLY as SYSCALLS_THREADS_ONLY
else:
    from _ac_syscalls import ALLOWED as SYSCALLS_ALLOWED, ENOSYS as SYSCALLS_ENOSYS, \
        READ_ONLY as SYSCALLS_READ_ONLY, THREADS_ONLY as SYSCALLS_THREADS_ONLY

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


# ------------------------------------------------------------------ seccomp: the entry point, and the deny-list fallback

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


def seccomp_restrict(allow_list: bool = True) -> str:
    """Restrict this process's system calls (needs PR_SET_NO_NEW_PRIVS first); threads stay
    allowed. With libseccomp (and ``allow_list``): only :mod:`.syscalls`' calls, the rest refused
    with EPERM; without: today's deny-list. Return which was loaded ("allow-list" or "deny-list");
    raise OSError when the kernel refuses."""
    if allow_list and _SCMP is not None:
        _seccomp_allow_list()
        return "allow-list"
    _seccomp_deny_list()
    return "deny-list"


def _seccomp_deny_list() -> None:
    """The fallback where libseccomp is missing: refuse sockets and new processes (a hand-written
    seccomp BPF filter)."""
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


# ------------------------------------------------------------------ seccomp: an allow-list (libseccomp)

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _ScmpVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def _load_libseccomp():
    """libseccomp through ctypes (loaded once, by the zygote, before any wall), or None."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        name = ctypes.util.find_library("seccomp")
        if name is None:
            return None
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            return None
    try:
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        for rule_add in (lib.seccomp_rule_add_array, lib.seccomp_rule_add_exact_array):
            rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                 ctypes.POINTER(_ScmpArgCmp)]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.restype = None
        lib.seccomp_version.restype = ctypes.POINTER(_ScmpVersion)
        version = lib.seccomp_version().contents
        lib.version_text = f"{version.major}.{version.minor}.{version.micro}"
    except AttributeError:  # too old a libseccomp (< 2.3): the fallback holds
        return None
    if hasattr(lib, "seccomp_api_get"):
        lib.seccomp_api_get()  # probes the kernel once here, not in every forked child
    return lib


_SCMP = _load_libseccomp()


def seccomp_description() -> str:
    """Which seccomp filter a child gets here, in words (for grading.log)."""
    if _SCMP is None:
        return "deny-list (fallback: libseccomp missing; sockets and new processes refused)"
    return (f"allow-list via libseccomp {_SCMP.version_text} ({len(SYSCALLS_ALLOWED)} calls, clone for threads only, "
            f"limits read-only; the rest refused with EPERM)")


_ALLOW_LIST = []  # the filter built once by seccomp_prepare() (the zygote): forked children only load it


def seccomp_prepare() -> None:
    """Build the allow-list's filter once, before forking, so that each child only loads it."""
    if _SCMP is not None and not _ALLOW_LIST:
        try:
            _ALLOW_LIST.append(_build_allow_list())
        except OSError:  # each child tries again, and the zygote's probe reports it
            pass


def _build_allow_list():
    lib = _SCMP
    ctx = lib.seccomp_init(SECCOMP_RET_ERRNO | errno.EPERM)          # default: refused, EPERM
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    # another ABI (i386, and x32's numbers on x86_64): refused too, never a kill
    rc = lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SECCOMP_RET_ERRNO | errno.EPERM)
    rules = [(name, SCMP_ACT_ALLOW, []) for name in SYSCALLS_ALLOWED]
    rules += [(name, SCMP_ACT_ALLOW, [(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)])
              for name in SYSCALLS_THREADS_ONLY]                    # clone: threads only
    rules += [(name, SCMP_ACT_ALLOW, [(0, SCMP_CMP_EQ, 0, 0), (2, SCMP_CMP_EQ, 0, 0)])
              for name in SYSCALLS_READ_ONLY]                       # prlimit64(0, r, NULL, old)
    rules += [(name, SECCOMP_RET_ERRNO | errno.ENOSYS, []) for name in SYSCALLS_ENOSYS]
    for name, action, conditions in rules:
        if rc < 0:
            break
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a call of this architecture
            continue
        args = (_ScmpArgCmp * max(1, len(conditions)))(*[_ScmpArgCmp(*c) for c in conditions])
        rc = lib.seccomp_rule_add_array(ctx, action, number, len(conditions), args)
    if rc < 0:
        lib.seccomp_release(ctx)
        raise OSError(-rc, f"libseccomp refused a rule of the allow-list: {os.strerror(-rc)}")
    return ctx


def _seccomp_allow_list() -> None:
    ctx = _ALLOW_LIST[0] if _ALLOW_LIST else _build_allow_list()
    rc = _SCMP.seccomp_load(ctx)
    if rc < 0:
        raise OSError(-rc, f"the kernel refused the allow-list: {os.strerror(-rc)}")


# ------------------------------------------------------------------ namespaces: user, IPC, network

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NAMESPACES = (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("ipc", CLONE_NEWIPC), ("net", CLONE_NEWNET))
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def private_namespaces(kinds=("user", "mnt", "ipc", "net")) -> tuple:
    """Enter new namespaces of ``kinds``, the user namespace first (so that an unprivileged grader
    may create the others; its own uid and gid are mapped onto themselves, so files look as
    before); return the kinds entered. A private IPC namespace has no SysV IPC of anyone else, a
    private network namespace only a loopback that is down, a private mount namespace lets
    :func:`private_scratch` mount what no other process sees. Raise OSError when the user namespace
    is entered but cannot be set up."""
    entered = []
    uid, gid = os.geteuid(), os.getegid()
    for kind, flag in NAMESPACES:
        if kind not in kinds or _libc.unshare(ctypes.c_int(flag)) != 0:
            continue
        entered.append(kind)
        if kind == "user":
            for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, text.encode())
                finally:
                    os.close(fd)
    return tuple(entered)


def private_scratch(path: str, size_mb: int, inodes: int) -> None:
    """In a private mount namespace: make every mount private (nothing propagates back), then mount a
    tmpfs of ``size_mb`` MB and at most ``inodes`` files and folders over ``path``. Raise OSError
    when the kernel refuses."""
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making the mounts private failed")
    options = f"size={int(size_mb)}m,nr_inodes={int(inodes)},mode=0700".encode()
    if _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting a tmpfs over {path} failed")


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
