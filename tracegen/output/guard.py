"""The mechanics under every command that writes: one run per target (a lock), signals that
become an exception at a safe point, and the one-line error of a write the system refuses.

  * Lock: an exclusive flock on `.NAME.lock` beside the target, held from before the work to the
    commit; a second run gets a one-line OutputError at once. The file is unlinked on release.
    Its content (the holder's pid) is a courtesy: on a completely full disk it stays empty and the
    lock still works (and is still removed).
  * signals_as_interrupts: SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread, so the
    temp folder is removed on the way out; inside signals_deferred() a signal waits for the end of
    the section (a commit, taking a lock).
  * write_error: an OSError (ENOSPC, EROFS, EACCES, ...) as a one-line WriteError (exit 1).
  * exchange: two paths swapped in one rename (renameat2 RENAME_EXCHANGE).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import signal
from pathlib import Path
from typing import Iterator

from ..errors import Interrupted, OutputError, WriteError


class Lock:
    """An exclusive flock on `path`; a second holder gets OutputError at once. The file is
    unlinked on release (holders re-check they locked the file that is still there)."""

    def __init__(self, path: Path, shown: str):
        self.path, self.shown, self.fd = path, shown, None

    def __enter__(self):
        with signals_deferred():            # a signal lands before or after, never half-way
            return self._acquire()

    def _acquire(self):
        for _ in range(100):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.read(fd, 32).decode("ascii", "replace").strip()
                os.close(fd)
                who = f" (pid {pid})" if pid.isdigit() else ""
                raise OutputError(f"another tracegen run{who} is writing {self.shown} (lock "
                                  f"{self.path.name}); wait for it, or choose another -o") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                with contextlib.suppress(OSError):   # a full disk: the lock holds without the pid
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                return self
            os.close(fd)                     # the holder unlinked it as we opened it: again
        raise OutputError(f"cannot lock {self.path}")

    def __exit__(self, *exc):
        with signals_deferred():
            if self.fd is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                os.close(self.fd)
                self.fd = None
        return False


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Python runs signal handlers in the main thread whichever thread the kernel picked, so a
# critical section is a counter the handler reads (a signal mask would only cover one thread).
_SIG = {"critical": 0, "pending": 0, "fired": False}


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread - the first one; later
    ones are ignored while cleanup runs. Inside signals_deferred() the signal waits for the end
    of the section. Previous handlers come back on exit."""
    def handler(signum, frame):
        if _SIG["fired"]:
            return
        if _SIG["critical"]:
            _SIG["pending"] = _SIG["pending"] or signum
            return
        _SIG["fired"] = True
        raise Interrupted(signum)

    _SIG.update(critical=0, pending=0, fired=False)
    old, old_mask = {}, None
    try:
        for s in HANDLED_SIGNALS:
            old[s] = signal.signal(s, handler)
        # A parent may hand them down blocked (the mask survives fork and exec: a test runner, a
        # supervisor); blocked, they would wait unseen until the run ends
        old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
    except ValueError:                       # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A section no signal interrupts half-way (a commit, taking a lock): a signal arriving
    inside raises Interrupted as the outermost section ends."""
    _SIG["critical"] += 1
    try:
        yield
    finally:
        _SIG["critical"] -= 1
        if not _SIG["critical"] and _SIG["pending"] and not _SIG["fired"]:
            signum, _SIG["pending"], _SIG["fired"] = _SIG["pending"], 0, True
            raise Interrupted(signum)


_HINTS = {
    errno.ENOSPC: "the disk is full; free space or choose another -o",
    errno.EDQUOT: "the disk quota is used up; free space or choose another -o",
    errno.EROFS: "the file system is read-only; choose another -o",
    errno.EACCES: "no permission there; choose another -o",
    errno.EPERM: "not permitted there; choose another -o",
    errno.EBUSY: "it is busy (a mount point?); write into a folder inside it",
    errno.ENAMETOOLONG: "a name is too long for the file system; use a shorter -o or job name",
    errno.EIO: "the device reported an I/O error",
    errno.EMFILE: "too many open files",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "something was created there meanwhile; run again",
}


def write_error(e: OSError, shown: str, kept: bool, what: str = "trace", flag: str = "-o") -> WriteError:
    """`kept`: an earlier `what` (trace, pictures, export) is there and stays as it was."""
    name = errno.errorcode.get(e.errno or 0, "error")
    hint = re.sub(r"(?<![\w-])-o\b", flag, _HINTS.get(e.errno or 0, ""))
    tail = (f"the earlier {what} there {'are' if what.endswith('s') else 'is'} unchanged" if kept
            else "nothing was written")
    return WriteError(f"cannot write {shown}: {e.strerror or e} ({name}); "
                      + (f"{hint}; " if hint else "") + tail)


_libc = None


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fn = _libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    rc = fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))
