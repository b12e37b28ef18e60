"""What a grading child sends back, over two pipes and never through a file.

A child writes nothing the grader reads from a disk: its outcome after every check goes down the
outcome pipe as a frame (8 bytes of length, little endian, then that many bytes), its standard
error down a second pipe. The zygote (:mod:`attention_course.tools.grading.zygote_main`) reads both
while it waits for the child, keeps the last whole frame no larger than the cap and the last
``STDERR_TAIL`` bytes of standard error, and hands them to the grader over its own reply pipe. So a
child that fills its scratch folder, or the disk under it, cannot make the grader lose or mistake
an outcome, its own or a classmate's; and a frame over the cap is dropped, not read into memory.

This file is copied into the grading runtime as ``_ac_child_io.py`` beside ``_ac_zygote.py``; it
imports the standard library only.
"""
import os
import select

STDERR_TAIL = 20_000
_CHUNK = 1 << 20


def write_frame(fd: int, data: bytes) -> None:
    """Send one frame (the child side); raises OSError when the pipe is gone."""
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class OutcomeFrames:
    """The zygote side of the outcome pipe: the last whole frame of at most ``cap`` bytes."""

    def __init__(self, cap: int):
        self.cap = cap
        self.last = None          # bytes of the last whole frame
        self.too_large = False    # a frame over the cap was sent (and dropped)
        self._buffer = bytearray()
        self._skip = 0            # bytes of an over-large frame still to drop

    def feed(self, data: bytes) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
            if self._skip:
                return
        self._buffer += data
        while len(self._buffer) >= 8:
            size = int.from_bytes(self._buffer[:8], "little")
            if size > self.cap:
                self.too_large = True
                dropped = min(size, len(self._buffer) - 8)
                del self._buffer[:8 + dropped]
                self._skip = size - dropped
                if self._skip:
                    return
                continue
            if len(self._buffer) < 8 + size:
                return
            self.last = bytes(self._buffer[8:8 + size])
            del self._buffer[:8 + size]


class ChildPipes:
    """The read ends of one child's outcome and standard-error pipes, drained without blocking."""

    def __init__(self, outcome_fd: int, stderr_fd: int, cap: int):
        self.frames = OutcomeFrames(cap)
        self.stderr = b""
        self._open = {outcome_fd: self.frames.feed, stderr_fd: self._tail}
        for fd in self._open:
            os.set_blocking(fd, False)

    def _tail(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-STDERR_TAIL:]

    @property
    def fds(self) -> list:
        return list(self._open)

    def read_ready(self, ready) -> None:
        """Read what is waiting on the ready pipes; close a pipe at its end."""
        for fd in list(ready):
            feed = self._open.get(fd)
            if feed is None:
                continue
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                feed(data)
            else:
                os.close(fd)
                del self._open[fd]

    def drain(self, timeout: float = 2.0) -> None:
        """After the child (and anything it left) is gone: read to the end of both pipes."""
        import time
        deadline = time.monotonic() + timeout
        while self._open:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select(self.fds, [], [], remaining)
            self.read_ready(ready)
        self.close()

    def close(self) -> None:
        for fd in list(self._open):
            try:
                os.close(fd)
            except OSError:
                pass
        self._open.clear()
