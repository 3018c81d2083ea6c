"""Where a command writes and whether it may: the path (-o, output.dir, traces/<job>), and what is
there decided before any work (a new folder, one tracegen wrote, or --force beside a user's files)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..config import show, show_path
from ..errors import ConfigError, OutputError
from .guard import write_error
from .ownership import MANIFEST, foreign, owned, sub_outputs

FORCE_PREFIX = ".tracegen.tmp-"     # temp folders inside the target (--force, put_files)
# Top-level names a trace uses (checked against the user's files before a --force run; the
# files actually written are checked again before anything is moved).
TRACE_NAMES = ("flows.csv", "flows.parquet", "ops.csv", "ops.parquet", "pcap", "ns3", "summary.md",
               "summary.json", "job.resolved.yaml", "timeline.png", "gantt.png", "traffic_matrix.png", "link_utilisation.png",
               "perfetto.json", MANIFEST)
NAME_MAX = 255
PATH_MAX = 4000


@dataclass(frozen=True)
class Target:
    path: Path              # absolute, symlinks resolved
    shown: str              # as the user would write it
    state: str              # "new" (absent or empty), "ours" (our manifest, nothing else), "force"
    note: str               # one phrase for `plan`: what generate would do there
    protect: tuple[Path, ...] = ()

    @property
    def stem(self) -> str:
        return stem_of(self.path.name)


def stem_of(name: str) -> str:
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


def resolve(path: Path) -> Path:
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
    p = resolve(path)
    protect = tuple(resolve(Path(x)) for x in protect if x)
    cwd = resolve(Path.cwd())
    home = resolve(Path.home())
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
