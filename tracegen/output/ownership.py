"""What in a folder tracegen wrote: manifests, sub-outputs and the leftovers of killed runs.

A folder tracegen writes holds `.tracegen-manifest.json`: every file it wrote (relative path ->
size) and its folders. A file is tracegen's only if the manifest lists it with that size.
Besides its listed files, a folder may hold
  * sub-outputs: a folder with its own manifest, written into it by a later command (`ns3 run`'s
    ns3/sim/, `export`'s chakra/ and simai/): tracegen's if wholly its own, recursively;
  * leftovers of a tracegen run killed by SIGKILL: a lock file `.NAME.lock` nobody holds, a temp
    folder `.NAME.tmp-XXXXXXXX` marked by a run that is gone (or holding an old trace whose
    deletion was cut).
All of these go with the folder when it is replaced. Nothing here follows a symlink.
A standalone picture (`tokens --png`) carries a PNG text chunk `Software: tracegen` instead.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
from pathlib import Path

MANIFEST = ".tracegen-manifest.json"
MARKER = ".tracegen-tmp"            # inside a temp folder while it is being written
MANIFEST_MAX_BYTES = 64 << 20
PNG_SOFTWARE = "tracegen"           # the tEXt Software value of a standalone PNG tracegen wrote
_TMP = re.compile(r"\..+\.tmp-[a-z0-9_]{8}")
_LOCK = re.compile(r"\..+\.lock")


def read_manifest(d: Path) -> dict | None:
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
            if not isinstance(rel, str) or not safe_rel(rel):
                return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in files.values()):
            return None
        return {"files": files, "dirs": dirs}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def safe_rel(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and "\0" not in rel \
        and rel not in (MANIFEST, MARKER) and p.parts[0] != "."


def is_reg(mode: int) -> bool:
    return stat.S_ISREG(mode)


def tree(d: Path) -> tuple[dict[str, int], list[str], list[str]]:
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
            if full.is_symlink() or not is_reg(st.st_mode):
                other.append(rel)
            else:
                files[rel] = st.st_size
    return files, dirs, other


# --- leftovers of killed runs --------------------------------------------------------------------

def alive(pid_text: str) -> bool:
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


def stale_temp(p: Path) -> bool:
    """A temp folder of a tracegen run that is gone: marked with a dead pid, or holding a
    manifest (an old trace being deleted when the run died)."""
    if not _TMP.fullmatch(p.name) or p.is_symlink() or not p.is_dir():
        return False
    marker = p / MARKER
    try:
        if marker.is_file():
            return not alive(marker.read_text()[:32])
    except OSError:
        return False
    return (p / MANIFEST).is_file()


def stale_lock(p: Path) -> bool:
    """A lock file of a tracegen run (a pid or nothing in it) that nobody holds."""
    if not _LOCK.fullmatch(p.name) or p.is_symlink():
        return False
    try:
        if not p.is_file() or p.stat().st_size > 32:
            return False
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        head = os.read(fd, 32).strip()
        if head and not head.isdigit():
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:                          # held: a run is writing
        return False
    finally:
        os.close(fd)


def clean_stale(where: Path, prefix: str) -> None:
    """Temp folders of killed runs into the same target (the caller holds its lock): named
    exactly PREFIX + mkdtemp's 8 characters, and stale."""
    pattern = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}")
    try:
        names = [n for n in os.listdir(where) if pattern.fullmatch(n)]
    except OSError:
        return
    for n in names:
        p = where / n
        if not stale_temp(p):
            continue
        if (p / MARKER).is_file():
            shutil.rmtree(p, ignore_errors=True)
        else:
            remove_ours(p)


# --- what is ours --------------------------------------------------------------------------------

def sub_output(p: Path) -> bool:
    """A folder with its own manifest holding nothing else (written into a trace by a later
    command: ns3/sim/, chakra/, ...)."""
    return not p.is_symlink() and p.is_dir() and read_manifest(p) is not None and foreign(p) == []


def _walk(d: Path, man: dict | None, top: Path | None = None) -> tuple[list[str], list[str]]:
    """(entries below `top` (default d) that are not tracegen's, relative to d; sub-outputs and
    stale leftovers found, relative to d). `man` is d's manifest (None: lists nothing)."""
    listed = man["files"] if man else {}
    listed_dirs = set(man["dirs"]) if man else set()
    bad, extra, dirs = [], [], []
    for root, dnames, fnames in os.walk(top or d, followlinks=False):
        r = Path(root)
        for n in list(dnames):
            full = r / n
            rel = str(full.relative_to(d))
            if full.is_symlink():
                bad.append(rel)
                dnames.remove(n)
            elif stale_temp(full):
                extra.append(rel)
                dnames.remove(n)
            elif read_manifest(full) is not None:      # a sub-output: ours if wholly its own
                inside = foreign(full)
                if inside:
                    bad += [os.path.join(rel, b) for b in inside]
                else:
                    extra.append(rel)
                dnames.remove(n)
            else:
                dirs.append(rel)
        for n in fnames:
            full = r / n
            rel = str(full.relative_to(d))
            if rel == MANIFEST:
                continue
            st = full.lstat()
            if is_reg(st.st_mode) and listed.get(rel) == st.st_size:
                continue
            if stale_lock(full):
                extra.append(rel)
            else:
                bad.append(rel)
    bad += [rel for rel in dirs if rel not in listed_dirs and not any(
        f.startswith(rel + os.sep) for f in [*listed, *extra])]
    return bad, extra


def foreign(d: Path) -> list[str] | None:
    """None: `d` is empty. []: everything in it is tracegen's. Else the entries that are not
    (top-level names first, then deeper ones). Without a manifest only the top level is looked at
    (a user's folder may be huge)."""
    names = os.listdir(d)
    if not names:
        return None
    man = read_manifest(d)
    if man is None:
        return sorted(n for n in names if not (stale_lock(d / n) or stale_temp(d / n) or sub_output(d / n)))
    bad, _ = _walk(d, man)
    return sorted(bad, key=lambda r: (r.count(os.sep), r))


def sub_outputs(d: Path) -> list[str]:
    """The sub-outputs below a folder of ours (relative), e.g. ["chakra", "ns3/sim"]."""
    man = read_manifest(d)
    if man is None:
        return sorted(n for n in os.listdir(d) if sub_output(d / n))
    return sorted(rel for rel in _walk(d, man)[1] if not _TMP.fullmatch(Path(rel).name)
                  and not _LOCK.fullmatch(Path(rel).name))


def owned(d: Path, name: str) -> bool:
    """Is top-level entry `name` of `d` wholly tracegen's?"""
    p = d / name
    if name == MANIFEST:
        return read_manifest(d) is not None
    if p.is_symlink():
        return False
    man = read_manifest(d)
    if man is None:
        return stale_lock(p) or stale_temp(p) or sub_output(p)
    if p.is_file():
        return man["files"].get(name) == p.stat().st_size or stale_lock(p)
    if p.is_dir():
        if stale_temp(p) or sub_output(p):
            return True
        bad, extra = _walk(d, man, top=p)
        return not bad and (name in man["dirs"] or any(f.startswith(name + os.sep) for f in man["files"])
                            or bool(extra))
    return False


def png_is_ours(p: Path) -> bool:
    """A PNG file whose text chunk `Software` says tracegen (before the image data)."""
    try:
        if p.is_symlink() or not p.is_file():
            return False
        with open(p, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return False
            for _ in range(64):
                head = f.read(8)
                if len(head) < 8:
                    return False
                n, kind = int.from_bytes(head[:4], "big"), head[4:]
                if kind in (b"IDAT", b"IEND") or n > 1 << 16:
                    return False
                body = f.read(n)
                f.read(4)
                if kind == b"tEXt" and body == b"Software\0" + PNG_SOFTWARE.encode():
                    return True
    except OSError:
        return False
    return False


# --- writing and removing ------------------------------------------------------------------------

def manifest_doc(files: dict[str, int], dirs: list[str], version: str) -> str:
    doc = {"tracegen": version,
           "note": "files tracegen wrote here; it replaces or deletes only these",
           "files": dict(sorted(files.items())), "dirs": sorted(dirs)}
    return json.dumps(doc, indent=1) + "\n"


def write_manifest(d: Path, version: str) -> None:
    """List everything below `d` (a fresh temp folder) as tracegen's; sub-outputs keep theirs."""
    files, dirs, _ = tree(d)
    files.pop(MARKER, None)
    subs = [rel for rel in dirs if (d / rel / MANIFEST).is_file()]
    within = lambda rel: any(rel == s or rel.startswith(s + os.sep) for s in subs)
    files = {rel: n for rel, n in files.items() if not within(rel)}
    dirs = [rel for rel in dirs if not within(rel)]
    (d / MANIFEST).write_text(manifest_doc(files, dirs, version))


def remove_ours(d: Path) -> list[str]:
    """Delete what d's manifest lists (same size, regular files), its sub-outputs and stale
    leftovers, then empty folders; returns what was left (files tracegen did not write)."""
    man = read_manifest(d)
    with contextlib.suppress(OSError):
        for rel in _walk(d, man)[1]:
            p = d / rel
            if _LOCK.fullmatch(p.name) and not p.is_dir():
                p.unlink()
            elif (p / MANIFEST).is_file() and not (p / MARKER).exists():
                remove_ours(p)
            else:
                shutil.rmtree(p, ignore_errors=True)
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
                if is_reg(st.st_mode) and st.st_size == size and plain(p.parent):
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
