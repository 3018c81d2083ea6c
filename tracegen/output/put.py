"""Files written one by one into a folder of ours (`report`'s pictures: each renamed into place and
the manifest updated), and a standalone picture (`tokens --png`, `ns3 run --png`) written by a
rename only over nothing or a PNG tracegen wrote."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .. import __version__
from ..config import show, show_path
from ..errors import OutputError
from .folder import write_folder
from .guard import Lock, signals_deferred, write_error
from .ownership import MANIFEST, MARKER, manifest_doc, owned, png_is_ours, read_manifest
from .place import FORCE_PREFIX, inspect, resolve, stem_of


def check_put(folder: Path, shown: str, names, *, force: bool = False, protect=(), flag: str = "-o") -> None:
    """put_files' refusals, before any work: OutputError unless `folder` is new, empty or ours
    (a manifest) with `names` absent or ours there, or --force with `names` absent or ours."""
    p = resolve(Path(folder))
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
    p = resolve(folder)
    if not p.is_dir() or not os.listdir(p):
        write_folder(folder, shown, lambda tmp: [fill(tmp / n) for n, fill in files.items()],
                     force=force, protect=protect, names=tuple(files), what=what, flag=flag)
        return [folder / n for n in files]
    ours = read_manifest(p) is not None
    lock_at = p.parent / f".{stem_of(p.name)}.lock" if ours else p / ".tracegen.lock"
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
    parent = resolve(path.parent)
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
    if parent.is_dir() and read_manifest(resolve(parent)) is not None:
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
