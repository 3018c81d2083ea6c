"""Paths a job names (fabric.file, output.lab): relative to the file that names them.
May import: nothing of tracegen.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


# --- paths a job names -------------------------------------------------------------------------
# A relative path in a YAML file means "next to this file" (as in every build tool): fabric.file
# and output.lab are made absolute when their file is read, from the file's folder (a job file, a
# preset) or the current folder (--set). Absolute, so job.resolved.yaml replays from anywhere.

FILE_KEYS = {"fabric": "file", "output": "lab"}     # section -> its key that names a file


def job_relative(value: Any, base: str | Path) -> Any:
    """`value` (a path named in a file whose folder is `base`) as an absolute path; anything else
    (absolute, empty, not a string) as it is. The folder is resolved, the value only joined: a
    `..` in it means what the file system says after symlinks."""
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return value
    return os.path.join(str(Path(base).resolve()), value)


def rebase(doc: Any, base: str | Path, sec: str = "") -> Any:
    """A job mapping (or, with `sec`, that section's mapping) with its FILE_KEYS made absolute
    from `base`; the same object when nothing changes."""
    if not isinstance(doc, dict):
        return doc
    if sec:
        key = FILE_KEYS.get(sec)
        if key in doc and job_relative(doc[key], base) is not doc[key]:
            return {**doc, key: job_relative(doc[key], base)}
        return doc
    out = doc
    for name in FILE_KEYS:
        part = doc.get(name)
        new = rebase(part, base, name)
        if new is not part:
            out = {**out, name: new}
    return out
