"""The system calls a grading child may make: frozen data for the seccomp allow-list of
:func:`attention_course.tools.grading.walls.seccomp_restrict` (issue 38, "default deny").

Every call not named in :data:`ALLOWED` is refused with EPERM (a Python ``PermissionError`` the
grader reports as the student's; never a kill). :data:`THREADS_ONLY` are allowed only to create
threads (clone with CLONE_THREAD); :data:`ENOSYS` are refused as "not implemented", so that glibc
falls back (clone3 -> clone). Names unknown on the machine's architecture are skipped.

How it was found (Linux 6.18 x86_64, torch CPU, Python 3.11): the grader ran on every solution
notebook (``attention-course grade solutions/NN_*.ipynb --chapter N --seed 2024`` for N = 1..9)
under ``strace -f -ff``, and the calls of each child after its seccomp filter was loaded (and of
its threads) were collected: brk, close, close_range, exit_group, futex, ioctl, lseek, mmap,
munmap, newfstatat, openat, prlimit64, read, rename, sched_getaffinity and write (16 calls: the
zygote has already imported torch, numpy and matplotlib, so a child does little else); with the
allow-list loaded, the same runs refused none of a child's calls. That union was made generous for plain
Python/torch/numpy/matplotlib work in a scratch folder: the rest of file I/O and directories,
memory management, threads and their synchronisation, signals, timers and clocks, identity and
scheduling queries, getrandom; and checked again by the grader's tests (hostile notebooks,
plotting, threads, tempfile). Left out on purpose (:data:`REFUSED`, tested to stay out): sockets,
new processes and program execution, SysV/POSIX IPC, io_uring, memfd, namespaces and mounts,
ptrace and cross-process memory, bpf, perf, userfaultfd, keyrings, ownership and device nodes,
and everything an administrator does (modules, clocks, swap, reboot).

Chapter 11 (issue 43) added nothing: a child grading a student's Triton kernel in triton 3.9.0's
interpreter (triton and ``attention_course.kernels`` imported by the zygote before the fork, see
:mod:`.ondemand`) was run under ``strace -f -Z`` (failed calls only) with this list loaded, and none of
its calls was refused (the only EPERMs were the zygote's own probes: two sockets, memfd_create and a
fork); the interpreter wrote no file (``TRITON_CACHE_DIR``, in the scratch folder, stayed absent).
Compiling a kernel would need what stays refused (``ptxas`` runs as a new process, and a GPU's device
files are outside Landlock's rules): a child always interprets.

This file is copied into the grading runtime as ``_ac_syscalls.py`` beside ``_ac_walls.py``: plain
data, no imports.
"""

ALLOWED = (
    # files and folders (Landlock decides which)
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "_llseek",
    "stat", "fstat", "lstat", "newfstatat", "fstatat64", "statx", "statfs", "fstatfs",
    "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
    "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
    "truncate", "ftruncate", "fallocate", "fadvise64", "fsync", "fdatasync", "sync_file_range",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "umask", "utime", "utimes", "utimensat", "futimesat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    "dup", "dup2", "dup3", "fcntl", "ioctl", "flock", "pipe", "pipe2",
    "sendfile", "copy_file_range", "splice", "tee",
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "membarrier",
    "get_mempolicy",
    # threads, synchronisation, scheduling
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq",
    "gettid", "getpid", "getppid", "getpgrp", "getpgid", "getsid", "exit", "exit_group", "wait4", "waitid",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_getattr", "sched_rr_get_interval",
    "getpriority", "setpriority", "getcpu", "arch_prctl", "prctl", "nanosleep", "clock_nanosleep",
    # signals (to whom: Landlock's scope, ABI >= 6) and timers
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "kill", "tgkill", "tkill", "pause",
    "alarm", "getitimer", "setitimer", "signalfd", "signalfd4",
    "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
    "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # clocks, identity, limits (read), randomness
    "clock_gettime", "clock_getres", "gettimeofday", "time", "times",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "capget",
    "uname", "sysinfo", "getrusage", "getrlimit", "getrandom",
)

# Allowed only when they create a thread (CLONE_THREAD set in the flags): no new process.
THREADS_ONLY = ("clone",)

# Allowed only to read limits: prlimit64(0, resource, NULL, old) (lowering them is the grader's job).
READ_ONLY = ("prlimit64",)

# Refused with ENOSYS rather than EPERM: glibc then falls back to clone, which THREADS_ONLY allows.
ENOSYS = ("clone3",)

# Never allowed (also by default; listed so that a test keeps them out of the lists above).
REFUSED = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr", "memfd_create", "memfd_secret",
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "sendmsg",
    "sendmmsg", "recvfrom", "recvmsg", "recvmmsg", "getsockopt", "setsockopt", "getsockname",
    "getpeername", "shutdown", "socketcall",
    "fork", "vfork", "execve", "execveat", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "setrlimit", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capset", "chown", "fchown", "lchown", "fchownat", "mknod", "mknodat",
    "name_to_handle_at", "open_by_handle_at", "fanotify_init", "inotify_init", "inotify_init1",
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup", "iopl", "ioperm", "modify_ldt",
    "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "sethostname", "setdomainname",
    "migrate_pages", "move_pages", "mbind", "set_mempolicy", "personality", "lookup_dcookie",
)
