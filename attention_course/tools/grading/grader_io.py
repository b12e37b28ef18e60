"""The grader's own I/O, which no student can make cost anyone (issue 38).

* :func:`rmtree` removes what a child left in its scratch folder, however deep, and never raises:
  2,500 nested folders once made ``shutil.rmtree`` raise RecursionError after the whole class was
  graded, and no grades.csv was written;
* :class:`GraderIOError` is the grader's own failure to write a child's calls or read back its outcome
  (a full disk, an I/O error): the exercise runs again, then reads "grader error: ..."
  (:func:`grader_error_reason`), never a reason that blames the student's code, and ``grade`` exits
  non-zero so that the instructor regrades (:func:`is_grader_error`).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional

GRADER_ERROR = "grader error:"
INTERNAL_ERROR = "internal grader error:"

# The grader's own file system's errors: a child causes none by what it leaves in its scratch folder.
GRADER_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EIO", "EDQUOT", "EMFILE", "ENFILE", "ENOMEM", "EROFS", "ESTALE", "EUCLEAN")
    if hasattr(errno, name))


class GraderIOError(OSError):
    """The grader's own I/O failed (full disk, I/O error) writing a child's calls or reading back its
    outcome: never the student's doing."""


def why(error: OSError) -> str:
    """An OSError in words: "No space left on device"."""
    return error.strerror or (os.strerror(error.errno) if error.errno else str(error))


def grader_error_reason(error: BaseException) -> str:
    """The reason of an exercise the grader could not grade: an OSError is its own I/O (the sandbox
    tries twice before it raises one); anything else is a bug of the grader. Neither is the student's."""
    if isinstance(error, OSError):
        return (f"{GRADER_ERROR} {why(error)} (the grader's own trouble, not the submission's: this "
                f"exercise must be graded again)")
    return f"{INTERNAL_ERROR} {type(error).__name__}: {error}"


def is_grader_error(reason: str) -> bool:
    """Whether an exercise's reason says the grader, not the student, failed (see above)."""
    return reason.startswith((GRADER_ERROR, INTERNAL_ERROR))


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def rmtree(path) -> list:
    """Remove ``path`` and everything under it; return what could not be removed (never raises).

    Iterative, however deep the tree (a child once made 2,500 nested folders and ``shutil.rmtree``
    raised RecursionError): one folder open at a time, entered relative to its parent's descriptor
    (no path grows with the depth), never following a symbolic link (a link is removed, not its
    target), and left through ``..`` checked against the parent's device and inode."""
    problems: list = []
    path = os.fspath(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return problems
    except OSError as error:
        return [f"{path}: {error.strerror or error}"]
    if not stat.S_ISDIR(info.st_mode):
        try:
            os.unlink(path)
        except OSError as error:
            problems.append(f"{path}: {error.strerror or error}")
        return problems
    try:
        fd = _open_dir(path, None)
    except OSError as error:
        return [f"{path}: {error.strerror or error}"]
    stack: list = []  # per level above: (st_dev, st_ino, names of its folders still to remove, name below)
    where = [path]    # for the messages: the names from path down
    pending = _clear_files(fd, where, problems)
    try:
        while True:
            if pending:
                name = pending.pop()
                try:
                    child = _open_dir(name, fd)
                except OSError as error:
                    problems.append(f"{os.path.join(*where, name)}: {error.strerror or error}")
                    continue
                here = os.fstat(fd)
                stack.append((here.st_dev, here.st_ino, pending, name))
                os.close(fd)
                fd = child
                where.append(name)
                pending = _clear_files(fd, where, problems)
                continue
            if not stack:
                break
            dev, ino, pending, name = stack.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            where.pop()
            above = os.fstat(fd)
            if (above.st_dev, above.st_ino) != (dev, ino):
                problems.append(f"{os.path.join(*where)}: the folder moved while it was being removed")
                return problems
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as error:
                problems.append(f"{os.path.join(*where, name)}: {error.strerror or error}")
    except OSError as error:
        problems.append(f"{os.path.join(*where)}: {error.strerror or error}")
        return problems
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        problems.append(f"{path}: {error.strerror or error}")
    return problems


def _open_dir(name: str, dir_fd: Optional[int]) -> int:
    """A folder's descriptor (never through a symbolic link), made writable first if need be."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # a folder a moment ago; its child has ended
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o700)  # a child may have made its folder read-only
    except OSError:
        pass
    return fd


def _clear_files(fd: int, where: list, problems: list) -> list:
    """Remove every entry of the folder ``fd`` that is not a folder; return the folders' names."""
    folders = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    folders.append(entry.name)
                    continue
                try:
                    os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError as error:
                    problems.append(f"{os.path.join(*where, entry.name)}: {error.strerror or error}")
    except OSError as error:
        problems.append(f"{os.path.join(*where)}: {error.strerror or error}")
    return folders


__all__ = ["GRADER_ERRNOS", "GraderIOError", "grader_error_reason", "is_grader_error", "rmtree",
           "why"]
