"""Output folders: where a command writes, what it may replace, and how it replaces it.

Every command that writes goes through here (issues 13 and 22: never lose a user's file):
`generate`, `collective -o`, `export`, `report`, `ns3 run` (its ns3/sim/), `tokens --png`.
  * A folder of output goes into a new folder, or replaces a folder tracegen wrote before -
    recognised by the manifest it leaves there (`.tracegen-manifest.json`: every file it wrote,
    with its size; ownership.py), and only if the folder holds nothing else. The replacement is
    atomic: the new folder is written into a temp folder beside the target and exchanged with the
    old one in one rename (renameat2 RENAME_EXCHANGE), so a reader sees the old output or the new
    one, never a mix; the old one is then deleted file by file from its manifest.
  * A later command may write a sub-output into a trace folder (ns3/sim/, chakra/, simai/): a
    folder of its own with its own manifest, written the same way. The trace stays tracegen's; when
    `generate` replaces the trace, its sub-outputs go with it (a warning names them).
  * Pictures redrawn into a folder of ours (`report`) replace the files one by one (each renamed
    into place) and the manifest is updated; a standalone picture (`tokens --png`) is written by a
    rename and only over a PNG tracegen wrote (its text chunk `Software: tracegen`).
  * Anything else is refused with one line before any work: a non-empty folder that is not ours,
    the current folder or one containing it, the home folder, a folder holding the job file or
    lab plan, a mount point, a file. `--force` writes tracegen's files *beside* what is there
    (refusing if one of the user's files sits where a file of ours goes) and deletes only files
    its manifest lists; it is not atomic as a whole (each top-level entry is renamed into place).
  * `output.dir` from a job file is a relative path below the current folder; `-o` goes anywhere.
  * One run at a time per target: a lock file (`.NAME.lock` beside the target, flock; guard.py)
    held from before the work to the swap; a second run gets a one-line error at once.
  * Temp folders are `.NAME.tmp-XXXXXXXX` beside the target, marked by a `.tracegen-tmp` file while
    being written. A run killed by SIGKILL leaves one (and its lock file); the next run into the
    same place deletes it, and they never make a folder look foreign. SIGINT, SIGTERM and SIGHUP
    raise `Interrupted` (signals_as_interrupts), so the temp folder is removed on the way out.
  * An OSError while writing (ENOSPC, EROFS, EACCES, EBUSY, ENAMETOOLONG, ...) becomes a one-line
    WriteError (exit 1) naming the errno; the temp folder is removed, the earlier output untouched.

This module writes a folder whole (Writer, write_folder); place.py decides where and whether,
put.py writes files one by one into a folder of ours and standalone pictures.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .. import __version__
from ..config import show_path
from ..errors import Interrupted, OutputError
from .guard import Lock, exchange, signals_deferred, write_error
from .ownership import MANIFEST, MARKER, clean_stale, owned, read_manifest, remove_ours, sub_outputs, write_manifest
from .place import FORCE_PREFIX, TRACE_NAMES, Target, inspect


class Writer:
    """Holds the target's lock from before the pipeline until the output is in place.

        with Writer(target) as w:      # lock, stale temp folders cleaned, target re-checked
            ...run the pipeline...
            w.write(lambda tmp: write_bundle(run, tmp))

    `what` names the output in messages (trace, export, pictures); `flag` the option that moves it.
    """

    def __init__(self, target: Target, force: bool = False, what: str = "trace", flag: str = "-o",
                 names=TRACE_NAMES):
        self.t, self.force, self.lock = target, force, None
        self.what, self.flag, self.names = what, flag, names
        self.warnings: list[str] = []
        self.created: list[Path] = []
        self.done = False

    def __enter__(self):
        t = self.t
        try:
            if t.state == "force":
                self.lock = Lock(t.path / ".tracegen.lock", t.shown)
                self.lock.__enter__()
                clean_stale(t.path, FORCE_PREFIX)
            else:
                with signals_deferred():
                    missing = [a for a in [t.path.parent, *t.path.parent.parents] if not a.exists()]
                    self.created = missing        # removed again if nothing gets written
                    t.path.parent.mkdir(parents=True, exist_ok=True)
                self.lock = Lock(t.path.parent / f".{t.stem}.lock", t.shown)
                self.lock.__enter__()
                clean_stale(t.path.parent, f".{t.stem}.tmp-")
            # what is there may have changed since inspect(): decide again under the lock
            again = inspect(t.path, t.shown, self.force or t.state == "force", t.protect, self.names, self.flag)
            if t.state != "force":
                self.t = again
        except OSError as e:
            self.__exit__(None, None, None)
            raise self._error(e, kept=t.state != "new") from None
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _error(self, e: OSError, kept: bool):
        return write_error(e, self.t.shown, kept, self.what, self.flag)

    def __exit__(self, *exc):
        if self.lock is not None:
            self.lock.__exit__(*exc)
            self.lock = None
        if not self.done:
            for d in self.created:                # deepest first; only if still empty
                with contextlib.suppress(OSError):
                    d.rmdir()
        return False

    def write(self, fill: Callable[[Path], object]) -> None:
        t = self.t
        here = t.path if t.state == "force" else t.path.parent
        prefix = FORCE_PREFIX if t.state == "force" else f".{t.stem}.tmp-"
        tmp = None
        try:
            with signals_deferred():        # never a temp folder without its marker
                tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=here))
                (tmp / MARKER).write_text(f"{os.getpid()}\n")
            fill(tmp)
            (tmp / MARKER).unlink()
            write_manifest(tmp, __version__)
            os.chmod(tmp, 0o755)
            try:
                with signals_deferred():
                    if t.state == "force":
                        self._merge(tmp)
                    else:
                        self._swap(tmp)
                    tmp = None
                    self.done = True
            except Interrupted as e:              # it arrived during the commit, which completed
                if self.done:
                    e.written = t.shown
                raise
        except OSError as e:
            raise self._error(e, kept=t.state != "new") from None
        finally:
            if tmp is not None and tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _swap(self, tmp: Path) -> None:
        t = self.t
        if not os.path.lexists(t.path):
            os.rename(tmp, t.path)
            return
        if not exchange(tmp, t.path):         # no renameat2: two renames (a short gap)
            old = Path(tempfile.mkdtemp(prefix=f".{t.stem}.tmp-", dir=t.path.parent))
            os.rmdir(old)
            os.rename(t.path, old)
            os.rename(tmp, t.path)
            tmp = old
        subs = sub_outputs(tmp)
        left = remove_ours(tmp)               # the old output, now at tmp
        if subs:
            self.warnings.append(f"{', '.join(show_path(s + '/') for s in subs[:3])} (written into the "
                                 f"earlier {t.shown} by later commands) went with it; run them again")
        if left:
            self.warnings.append(f"files that appeared in {t.shown} during the run were kept in "
                                 f"{show_path(tmp)} ({', '.join(show_path(x) for x in left[:3])})")

    def _merge(self, tmp: Path) -> None:
        """--force: move our new entries into the target beside the user's files."""
        t, d = self.t, self.t.path
        new = sorted(n for n in os.listdir(tmp) if n != MANIFEST)
        blocked = [n for n in new if os.path.lexists(d / n) and not owned(d, n)]
        if blocked:
            raise OutputError(f"--force into {t.shown}: {show_path(blocked[0])} there is not tracegen's and a "
                              f"file of ours goes there; move it or choose another {self.flag}")
        old_man = read_manifest(d)
        trash = Path(tempfile.mkdtemp(prefix=FORCE_PREFIX, dir=d))
        if old_man is not None:
            tops = sorted({Path(r).parts[0] for r in [*old_man["files"], *old_man["dirs"]]})
            for n in tops:
                if os.path.lexists(d / n) and owned(d, n):
                    os.rename(d / n, trash / n)
            shutil.copyfile(d / MANIFEST, trash / MANIFEST)
        for n in new:
            os.rename(tmp / n, d / n)
        os.replace(tmp / MANIFEST, d / MANIFEST)
        os.rmdir(tmp)
        remove_ours(trash)
        with contextlib.suppress(OSError):
            trash.rmdir()


def write_folder(path: Path, shown: str, fill: Callable[[Path], object], *, force: bool = False,
                 protect=(), names=(), what: str = "output", flag: str = "-o",
                 work: Callable[[], object] | None = None) -> Writer:
    """A whole folder of output (an export, `ns3 run`'s sim/, ...) written as generate writes a
    trace: refused before any work unless new or ours (or --force), `work()` then run under the
    lock, then `fill(tmp)` into a temp folder that replaces the target in one rename. The caller
    wraps it in signals_as_interrupts(). Returns the Writer (its .warnings, .t.shown)."""
    target = inspect(Path(path), shown, force, protect, names or (), flag)
    with Writer(target, force, what, flag, names or ()) as w:
        if work is not None:
            work()
        w.write(fill)
    return w
