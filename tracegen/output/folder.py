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
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .. import __version__
from ..config import show, show_path
from ..errors import ConfigError, Interrupted, OutputError
from .guard import Lock, exchange, signals_as_interrupts, signals_deferred, write_error
from .ownership import (MANIFEST, MARKER, PNG_SOFTWARE, clean_stale, foreign, is_reg, manifest_doc,
                        owned, png_is_ours, read_manifest, remove_ours, sub_outputs, write_manifest)

__all__ = ["MANIFEST", "MARKER", "PNG_SOFTWARE", "Target", "Writer", "choose", "check_file", "check_put", "inspect", "put_files",
           "signals_as_interrupts", "write_error", "write_file", "write_folder"]

FORCE_PREFIX = ".tracegen.tmp-"     # temp folders inside the target (--force, put_files)
# Top-level names a trace uses (checked against the user's files before a --force run; the
# files actually written are checked again before anything is moved).
TRACE_NAMES = ("flows.csv", "flows.parquet", "ops.csv", "ops.parquet", "pcap", "ns3", "summary.md",
               "summary.json", "job.resolved.yaml", "timeline.png", "gantt.png", "traffic_matrix.png", "link_utilisation.png",
               "perfetto.json", MANIFEST)
NAME_MAX = 255
PATH_MAX = 4000


# --- where ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    path: Path              # absolute, symlinks resolved
    shown: str              # as the user would write it
    state: str              # "new" (absent or empty), "ours" (our manifest, nothing else), "force"
    note: str               # one phrase for `plan`: what generate would do there
    protect: tuple[Path, ...] = ()

    @property
    def stem(self) -> str:
        return _stem(self.path.name)


def _stem(name: str) -> str:
    """The target's name as used in temp and lock names (short enough for NAME_MAX)."""
    if len(os.fsencode(name)) <= 200:
        return name
    return name[:150] + "~" + hashlib.sha1(os.fsencode(name)).hexdigest()[:10]


def choose(out_opt: str | None, output_dir: str, job_name: str) -> tuple[Path, str]:
    """(path as given, shown): -o, else output.dir (a relative path below the current folder),
    else traces/<job name>."""
    if out_opt:
        path, shown = Path(out_opt), show_path(out_opt)
    elif output_dir:
        p = Path(output_dir)
        if p.is_absolute() or ".." in p.parts or not p.parts or str(p) == ".":
            raise ConfigError(f"output.dir={show(output_dir)}: a job file may only name a folder below "
                              f"the current one (e.g. traces/{job_name}); to write there, say so with "
                              f"-o {show(output_dir)[1:-1]}")
        path, shown = p, show_path(output_dir)
    else:
        path = Path("traces") / job_name
        shown = str(path)
    if "\0" in str(path):
        raise OutputError("the output path contains a NUL character")
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise OutputError(f"output path {show(shown, 60)}: a name of {len(os.fsencode(part))} bytes; "
                              f"file systems allow {NAME_MAX}")
    if len(os.fsencode(os.path.abspath(path))) > PATH_MAX:
        raise OutputError(f"output path {show(shown, 60)} is longer than {PATH_MAX} bytes")
    return path, shown


def _resolve(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, RuntimeError, ValueError) as e:
        raise OutputError(f"output path {show(str(path), 60)}: cannot resolve it ({e})") from None


def _within(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def inspect(path: Path, shown: str, force: bool = False, protect=(), names=TRACE_NAMES,
            flag: str = "-o") -> Target:
    """Decide what a command may do at `path` (nothing is touched); OutputError if refused,
    WriteError if the file system will not even let it look (EACCES, EIO, ...). `names`: the
    top-level names the output uses (a --force run refuses a user's file there)."""
    try:
        return _inspect(path, shown, force, protect, names, flag)
    except OSError as e:
        raise write_error(e, shown, kept=False, flag=flag) from None


def _inspect(path: Path, shown: str, force: bool, protect, names, flag: str) -> Target:
    p = _resolve(path)
    protect = tuple(_resolve(Path(x)) for x in protect if x)
    cwd = _resolve(Path.cwd())
    home = _resolve(Path.home())
    why = None
    if _within(cwd, p):
        why = "it is the current folder" if p == cwd else "it contains the current folder"
    elif _within(home, p):
        why = "it is your home folder" if p == home else "it contains your home folder"
    else:
        held = [f for f in protect if p in f.parents]
        if held:
            why = f"it holds {held[0].name}, which this run reads"
    if why is None and p.exists() and os.path.ismount(p):
        why = "it is a mount point (a folder of output is replaced as a whole)"
    if why is None and (p.exists() or p.is_symlink()) and not p.is_dir():
        raise OutputError(f"{shown} exists and is not a folder; choose another {flag}")
    state, note = "new", "a new folder"
    if why is None and p.is_dir():
        bad = foreign(p)
        if bad is None:
            state, note = "new", "an empty folder, replaced"
        elif not bad:
            state, note = "ours", "replacing the trace tracegen wrote there before"
            subs = sub_outputs(p)
            if subs:
                note += f", with {', '.join(s + '/' for s in subs[:3])} written into it since"
        else:
            more = f", ... {len(bad)} in all" if len(bad) > 3 else ""
            why = (f"it holds files tracegen did not write "
                   f"({', '.join(show_path(f) for f in bad[:3])}{more})")
    if why is not None:
        if not force:
            raise OutputError(f"refusing to write into {shown}: {why}; choose another {flag} (e.g. "
                              f"{flag} traces/NAME), or add --force to write beside what is there "
                              "(tracegen deletes only files it wrote)")
        blocked = [n for n in names if os.path.lexists(p / n) and not owned(p, n)]
        if blocked:
            raise OutputError(f"--force into {shown}: {show_path(blocked[0])} there is not tracegen's and a "
                              f"file of ours goes there; move it or choose another {flag}")
        state, note = "force", f"--force: beside what is there ({why})"
    return Target(p, shown, state, note, protect)


# --- writing a folder ----------------------------------------------------------------------------

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


# --- writing files into a folder of ours ---------------------------------------------------------

def check_put(folder: Path, shown: str, names, *, force: bool = False, protect=(), flag: str = "-o") -> None:
    """put_files' refusals, before any work: OutputError unless `folder` is new, empty or ours
    (a manifest) with `names` absent or ours there, or --force with `names` absent or ours."""
    p = _resolve(Path(folder))
    if (p.exists() or p.is_symlink()) and not p.is_dir():
        raise OutputError(f"{shown} exists and is not a folder; choose another {flag}")
    try:
        if p.is_dir() and os.listdir(p) and read_manifest(p) is not None:
            blocked = [n for n in names if os.path.lexists(p / n) and not owned(p, n)]
            if blocked:
                raise OutputError(f"refusing to write {show_path(os.path.join(shown, blocked[0]))}: a file "
                                  f"tracegen did not write is there; move it or choose another {flag}")
            return
    except OSError as e:
        raise write_error(e, shown, kept=False, flag=flag) from None
    inspect(Path(folder), shown, force, protect, tuple(names), flag)


def put_files(folder: Path, shown: str, files: dict[str, Callable[[Path], object]], *,
              force: bool = False, protect=(), what: str = "pictures", flag: str = "-o") -> list[Path]:
    """Write `files` (top-level name -> fill(path)) into `folder`: a new or empty folder is
    written whole (write_folder); a folder with our manifest gets each file replaced by a rename
    and its manifest updated (a file there must be absent or ours); anything else is refused
    unless --force (then beside the user's files, never over one). Returns the paths written."""
    folder = Path(folder)
    check_put(folder, shown, tuple(files), force=force, protect=protect, flag=flag)
    p = _resolve(folder)
    if not p.is_dir() or not os.listdir(p):
        write_folder(folder, shown, lambda tmp: [fill(tmp / n) for n, fill in files.items()],
                     force=force, protect=protect, names=tuple(files), what=what, flag=flag)
        return [folder / n for n in files]
    ours = read_manifest(p) is not None
    lock_at = p.parent / f".{_stem(p.name)}.lock" if ours else p / ".tracegen.lock"
    try:
        with Lock(lock_at, shown):
            check_put(folder, shown, tuple(files), force=force, protect=protect, flag=flag)   # again, locked
            return _put(p, shown, files, flag)
    except OSError as e:
        raise write_error(e, shown, kept=True, what=what, flag=flag) from None


def _put(p: Path, shown: str, files: dict, flag: str) -> list[Path]:
    man = read_manifest(p) or {"files": {}, "dirs": []}
    tmp = None
    try:
        with signals_deferred():
            tmp = Path(tempfile.mkdtemp(prefix=FORCE_PREFIX, dir=p))
            (tmp / MARKER).write_text(f"{os.getpid()}\n")
        for name, fill in files.items():
            fill(tmp / name)
            os.chmod(tmp / name, 0o644)
        sizes = {n: (tmp / n).stat().st_size for n in files}
        with signals_deferred():             # the files and the manifest that lists them
            for name in files:
                os.replace(tmp / name, p / name)
            man["files"].update(sizes)
            (tmp / MANIFEST).write_text(manifest_doc(man["files"], man["dirs"], __version__))
            os.replace(tmp / MANIFEST, p / MANIFEST)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return [p / n for n in files]


def check_file(path: Path, shown: str, flag: str = "--png") -> None:
    """write_file's refusals, before any work."""
    path = Path(path)
    if "\0" in str(path) or not path.name or path.name in (".", ".."):
        raise OutputError(f"{flag} {show(str(path))}: not a file name")
    parent = _resolve(path.parent)
    if parent.is_dir() and read_manifest(parent) is not None:
        check_put(parent, show_path(str(path.parent)), [path.name], flag=flag)
        return
    if path.is_dir():
        raise OutputError(f"{flag} {shown}: it is a folder; give a file name")
    if os.path.lexists(path) and not png_is_ours(path):
        raise OutputError(f"refusing to overwrite {shown}: tracegen did not write it; move it or "
                          f"choose another {flag}")


def write_file(path: Path, shown: str, fill: Callable[[Path], object], *, flag: str = "--png") -> Path:
    """One standalone picture at `path` (`tokens --png`): into a folder of ours it is put_files;
    elsewhere written by a rename, and only over nothing or a PNG tracegen wrote (fill must mark
    it: PNG text chunk Software = PNG_SOFTWARE)."""
    path = Path(path)
    check_file(path, shown, flag)
    parent = path.parent
    if parent.is_dir() and read_manifest(_resolve(parent)) is not None:
        return put_files(parent, show_path(str(parent)), {path.name: fill}, flag=flag, what="picture")[0]
    tmp = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with signals_deferred():
            fd, name = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=path.suffix[:20], dir=parent)
            os.close(fd)
            tmp = Path(name)
        fill(tmp)
        os.chmod(tmp, 0o644)
        with signals_deferred():
            os.replace(tmp, path)
            tmp = None
    except OSError as e:
        raise write_error(e, shown, kept=os.path.lexists(path), what="picture", flag=flag) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return path
