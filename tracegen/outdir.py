"""Output folders: where `generate` writes, what it may replace, and how it replaces it.

Rules (issue 13: never lose a user's file):
  * A trace goes into a new folder, or replaces a folder tracegen wrote before - recognised by
    the manifest it leaves there (`.tracegen-manifest.json`: every file it wrote, with its size),
    and only if the folder holds nothing else. The replacement is atomic: the new trace is written
    into a temp folder beside the target and exchanged with the old one in one rename
    (renameat2 RENAME_EXCHANGE), so a reader sees the old trace or the new one, never a mix; the
    old one is then deleted file by file from its manifest.
  * Anything else is refused with one line before any work: a non-empty folder that is not ours,
    the current folder or one containing it, the home folder, a folder holding the job file or
    lab plan, a mount point, a file. `--force` writes tracegen's files *beside* what is there
    (refusing if one of the user's files sits where a trace file goes) and deletes only files
    its manifest lists; it is not atomic as a whole (each top-level entry is renamed into place).
  * `output.dir` from a job file is a relative path below the current folder; `-o` goes anywhere.
  * One run at a time per target: a lock file (`.NAME.lock` beside the target, flock) held from
    before the pipeline to the swap; a second run gets a one-line error at once.
  * Temp folders are `.NAME.tmp-XXXXXXXX` beside the target, marked by a `.tracegen-tmp` file while
    being written. A run killed by SIGKILL leaves one; the next run into the same place (holding
    the lock, so no other run can own it) deletes it. SIGINT, SIGTERM and SIGHUP raise
    `Interrupted` (signals_as_interrupts), so the temp folder is removed on the way out.
  * An OSError while writing (ENOSPC, EROFS, EACCES, EBUSY, ENAMETOOLONG, ...) becomes a one-line
    WriteError (exit 1) naming the errno; the temp folder is removed, the earlier trace untouched.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import __version__
from .config import show, show_path
from .errors import ConfigError, Interrupted, OutputError, WriteError

MANIFEST = ".tracegen-manifest.json"
MARKER = ".tracegen-tmp"            # inside a temp folder while it is being written
FORCE_PREFIX = ".tracegen.tmp-"     # temp folders inside the target (--force)
# Top-level names a trace uses (checked against the user's files before a --force run; the
# files actually written are checked again before anything is moved).
TRACE_NAMES = ("flows.csv", "flows.parquet", "ops.csv", "ops.parquet", "pcap", "ns3", "summary.md",
               "summary.json", "job.resolved.yaml", "timeline.png", "gantt.png", "traffic_matrix.png", "link_utilisation.png",
               "perfetto.json", MANIFEST)
NAME_MAX = 255
PATH_MAX = 4000
MANIFEST_MAX_BYTES = 64 << 20


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


def inspect(path: Path, shown: str, force: bool = False, protect=()) -> Target:
    """Decide what generate may do at `path` (nothing is touched); OutputError if refused,
    WriteError if the file system will not even let it look (EACCES, EIO, ...)."""
    try:
        return _inspect(path, shown, force, protect)
    except OSError as e:
        raise write_error(e, shown, kept=False) from None


def _inspect(path: Path, shown: str, force: bool, protect) -> Target:
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
        why = "it is a mount point (a trace folder is replaced as a whole)"
    if why is None and (p.exists() or p.is_symlink()) and not p.is_dir():
        raise OutputError(f"{shown} exists and is not a folder; choose another -o")
    state, note = "new", "a new folder"
    if why is None and p.is_dir():
        foreign = _foreign(p)
        if foreign is None:
            state, note = "new", "an empty folder, replaced"
        elif not foreign:
            state, note = "ours", "replacing the trace tracegen wrote there before"
        else:
            more = f", ... {len(foreign)} in all" if len(foreign) > 3 else ""
            why = (f"it holds files tracegen did not write "
                   f"({', '.join(show_path(f) for f in foreign[:3])}{more})")
    if why is not None:
        if not force:
            raise OutputError(f"refusing to write into {shown}: {why}; choose another -o (e.g. "
                              f"-o traces/NAME), or add --force to write beside what is there "
                              "(tracegen deletes only files it wrote)")
        blocked = [n for n in TRACE_NAMES if os.path.lexists(p / n) and not _owned(p, n)]
        if blocked:
            raise OutputError(f"--force into {shown}: {show_path(blocked[0])} there is not tracegen's and a trace "
                              "file goes there; move it or choose another -o")
        state, note = "force", f"--force: beside what is there ({why})"
    return Target(p, shown, state, note, protect)


# --- manifests -----------------------------------------------------------------------------------

def _read_manifest(d: Path) -> dict | None:
    """{"files": {rel: size}, "dirs": [rel]} if `d` has a well-formed manifest, else None."""
    m = d / MANIFEST
    try:
        if m.is_symlink() or not m.is_file() or m.stat().st_size > MANIFEST_MAX_BYTES:
            return None
        doc = json.loads(m.read_text("utf-8"))
        files, dirs = doc["files"], doc.get("dirs", [])
        if not isinstance(files, dict) or not isinstance(dirs, list):
            return None
        for rel in [*files, *dirs]:
            if not isinstance(rel, str) or not _safe_rel(rel):
                return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in files.values()):
            return None
        return {"files": files, "dirs": dirs}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _safe_rel(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and "\0" not in rel \
        and rel not in (MANIFEST, MARKER) and p.parts[0] != "."


def _tree(d: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """(regular files -> size, folders, other entries such as symlinks) below `d`, relative."""
    files, dirs, other = {}, [], []
    for root, dnames, fnames in os.walk(d, followlinks=False):
        r = Path(root)
        for n in list(dnames):
            full = r / n
            if full.is_symlink():
                other.append(str(full.relative_to(d)))
                dnames.remove(n)
            else:
                dirs.append(str(full.relative_to(d)))
        for n in fnames:
            full = r / n
            rel = str(full.relative_to(d))
            st = full.lstat()
            if full.is_symlink() or not _is_reg(st.st_mode):
                other.append(rel)
            else:
                files[rel] = st.st_size
    return files, dirs, other


def _is_reg(mode: int) -> bool:
    import stat
    return stat.S_ISREG(mode)


def _foreign(d: Path) -> list[str] | None:
    """None: `d` is empty. []: everything in it is listed in its manifest. Else the entries that
    are not tracegen's (top-level names first, then deeper ones)."""
    names = os.listdir(d)
    if not names:
        return None
    man = _read_manifest(d)
    if man is None:
        return sorted(names)
    files, dirs, other = _tree(d)
    listed, listed_dirs = man["files"], set(man["dirs"])
    bad = [rel for rel, size in files.items() if rel != MANIFEST and listed.get(rel) != size]
    bad += other
    bad += [rel for rel in dirs if rel not in listed_dirs and not any(
        f.startswith(rel + os.sep) for f in listed)]
    return sorted(bad, key=lambda r: (r.count(os.sep), r))


def _owned(d: Path, name: str) -> bool:
    """Is top-level entry `name` of `d` wholly tracegen's (listed in d's manifest, same sizes)?"""
    if name == MANIFEST:
        return _read_manifest(d) is not None
    man = _read_manifest(d)
    if man is None:
        return False
    p = d / name
    if p.is_symlink():
        return False
    if p.is_file():
        return man["files"].get(name) == p.stat().st_size
    if p.is_dir():
        files, dirs, other = _tree(p)
        if other:
            return False
        return all(man["files"].get(f"{name}{os.sep}{rel}") == size for rel, size in files.items()) \
            and (name in man["dirs"] or bool(files))
    return False


def _write_manifest(d: Path) -> None:
    files, dirs, _ = _tree(d)
    files.pop(MARKER, None)
    doc = {"tracegen": __version__,
           "note": "files tracegen wrote here; it replaces or deletes only these",
           "files": dict(sorted(files.items())), "dirs": sorted(dirs)}
    (d / MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")


def _remove_ours(d: Path) -> list[str]:
    """Delete what d's manifest lists (same size, regular files), then empty folders; returns
    what was left (files tracegen did not write). Never follows symlinks."""
    man = _read_manifest(d)
    if man is not None:
        real_dirs: dict[Path, bool] = {}

        def plain(folder: Path) -> bool:          # no symlink between d and folder
            if folder == d:
                return True
            if folder not in real_dirs:
                real_dirs[folder] = not folder.is_symlink() and folder.is_dir() and plain(folder.parent)
            return real_dirs[folder]
        for rel, size in man["files"].items():
            p = d / rel
            try:
                st = p.lstat()
                if _is_reg(st.st_mode) and st.st_size == size and plain(p.parent):
                    p.unlink()
            except OSError:
                pass
        for rel in sorted(man["dirs"], key=lambda r: -r.count(os.sep)):
            with contextlib.suppress(OSError):
                (d / rel).rmdir()
        with contextlib.suppress(OSError):
            (d / MANIFEST).unlink()
    with contextlib.suppress(OSError):
        d.rmdir()
    if not d.exists():
        return []
    return sorted(os.listdir(d))


def _alive(pid_text: str) -> bool:
    try:
        pid = int(pid_text.strip())
        if pid == os.getpid():
            return False
        os.kill(pid, 0)
        return True
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True


def _clean_stale(where: Path, prefix: str) -> None:
    """Temp folders of killed runs into the same target (the caller holds its lock): named
    exactly PREFIX + mkdtemp's 8 characters, and either still marked (being written when the run
    died; the marker's pid is gone) or holding a manifest (an old trace whose deletion was cut)."""
    pattern = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}")
    try:
        names = [n for n in os.listdir(where) if pattern.fullmatch(n)]
    except OSError:
        return
    for n in names:
        p = where / n
        if p.is_symlink() or not p.is_dir():
            continue
        marker = p / MARKER
        if marker.is_file():
            try:
                if _alive(marker.read_text()[:32]):
                    continue
            except OSError:
                continue
            shutil.rmtree(p, ignore_errors=True)
        elif (p / MANIFEST).is_file():
            _remove_ours(p)


# --- locking, signals, errors ----------------------------------------------------------------

class _Lock:
    """An exclusive flock on `path`; a second holder gets OutputError at once. The file is
    unlinked on release (holders re-check they locked the file that is still there)."""

    def __init__(self, path: Path, shown: str):
        self.path, self.shown, self.fd = path, shown, None

    def __enter__(self):
        with _signals_deferred():            # a signal lands before or after, never half-way
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
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self.fd = fd
                return self
            os.close(fd)                     # the holder unlinked it as we opened it: again
        raise OutputError(f"cannot lock {self.path}")

    def __exit__(self, *exc):
        with _signals_deferred():
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
    ones are ignored while cleanup runs. Inside _signals_deferred() the signal waits for the end
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
    old = {}
    try:
        for s in HANDLED_SIGNALS:
            old[s] = signal.signal(s, handler)
    except ValueError:                       # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
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


def write_error(e: OSError, shown: str, kept: bool) -> WriteError:
    name = errno.errorcode.get(e.errno or 0, "error")
    hint = _HINTS.get(e.errno or 0, "")
    tail = "the earlier trace there is unchanged" if kept else "nothing was written"
    return WriteError(f"cannot write {shown}: {e.strerror or e} ({name}); "
                      + (f"{hint}; " if hint else "") + tail)


# --- writing -------------------------------------------------------------------------------------

_libc = None


def _exchange(a: Path, b: Path) -> bool:
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


class Writer:
    """Holds the target's lock from before the pipeline until the trace is in place.

        with Writer(target) as w:      # lock, stale temp folders cleaned, target re-checked
            ...run the pipeline...
            w.write(lambda tmp: write_bundle(run, tmp))
    """

    def __init__(self, target: Target, force: bool = False):
        self.t, self.force, self.lock = target, force, None
        self.warnings: list[str] = []
        self.created: list[Path] = []
        self.done = False

    def __enter__(self):
        t = self.t
        try:
            if t.state == "force":
                self.lock = _Lock(t.path / ".tracegen.lock", t.shown)
                self.lock.__enter__()
                _clean_stale(t.path, FORCE_PREFIX)
            else:
                with _signals_deferred():
                    missing = [a for a in [t.path.parent, *t.path.parent.parents] if not a.exists()]
                    self.created = missing        # removed again if nothing gets written
                    t.path.parent.mkdir(parents=True, exist_ok=True)
                self.lock = _Lock(t.path.parent / f".{t.stem}.lock", t.shown)
                self.lock.__enter__()
                _clean_stale(t.path.parent, f".{t.stem}.tmp-")
            # what is there may have changed since inspect(): decide again under the lock
            again = inspect(t.path, t.shown, self.force or t.state == "force", t.protect)
            if t.state != "force":
                self.t = again
        except OSError as e:
            self.__exit__(None, None, None)
            raise write_error(e, t.shown, kept=t.state != "new") from None
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

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
            with _signals_deferred():        # never a temp folder without its marker
                tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=here))
                (tmp / MARKER).write_text(f"{os.getpid()}\n")
            fill(tmp)
            (tmp / MARKER).unlink()
            _write_manifest(tmp)
            os.chmod(tmp, 0o755)
            try:
                with _signals_deferred():
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
            raise write_error(e, t.shown, kept=t.state != "new") from None
        finally:
            if tmp is not None and tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _swap(self, tmp: Path) -> None:
        t = self.t
        if not os.path.lexists(t.path):
            os.rename(tmp, t.path)
            return
        if not _exchange(tmp, t.path):        # no renameat2: two renames (a short gap)
            old = Path(tempfile.mkdtemp(prefix=f".{t.stem}.tmp-", dir=t.path.parent))
            os.rmdir(old)
            os.rename(t.path, old)
            os.rename(tmp, t.path)
            tmp = old
        left = _remove_ours(tmp)               # the old trace, now at tmp
        if left:
            self.warnings.append(f"files that appeared in {t.shown} during the run were kept in "
                                 f"{show_path(tmp)} ({', '.join(show_path(x) for x in left[:3])})")

    def _merge(self, tmp: Path) -> None:
        """--force: move our new entries into the target beside the user's files."""
        t, d = self.t, self.t.path
        new = sorted(n for n in os.listdir(tmp) if n != MANIFEST)
        blocked = [n for n in new if os.path.lexists(d / n) and not _owned(d, n)]
        if blocked:
            raise OutputError(f"--force into {t.shown}: {show_path(blocked[0])} there is not tracegen's and a "
                              "trace file goes there; move it or choose another -o")
        old_man = _read_manifest(d)
        trash = Path(tempfile.mkdtemp(prefix=FORCE_PREFIX, dir=d))
        if old_man is not None:
            tops = sorted({Path(r).parts[0] for r in [*old_man["files"], *old_man["dirs"]]})
            for n in tops:
                if os.path.lexists(d / n) and _owned(d, n):
                    os.rename(d / n, trash / n)
            shutil.copyfile(d / MANIFEST, trash / MANIFEST)
        for n in new:
            os.rename(tmp / n, d / n)
        os.replace(tmp / MANIFEST, d / MANIFEST)
        os.rmdir(tmp)
        _remove_ours(trash)
        with contextlib.suppress(OSError):
            trash.rmdir()
