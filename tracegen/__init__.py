"""tracegen: LLM training jobs -> timed collective flows -> RoCEv2 pcaps and ns-3 scenarios.

Nothing is ever written inside the installed package (issue 22): numba's compiled functions
(`cache=True`) would otherwise land in site-packages/tracegen/__pycache__/, which is not in the
wheel's RECORD, so `pip install -e .` over a used `pip install .` leaves that folder behind and
Python imports it as an empty namespace package. They go to a per-user cache folder instead
(`$XDG_CACHE_HOME/tracegen/numba`, default `~/.cache/tracegen/numba`), unless NUMBA_CACHE_DIR says
otherwise. Set here, before any module of the package imports numba.
"""
from __future__ import annotations

import os
import sys
import tempfile

__version__ = "0.1.0"


def _writable(folder: str) -> bool:
    """Could this process create `folder` (its nearest existing ancestor is writable)?"""
    p = os.path.abspath(folder)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent
    return os.path.isdir(p) and os.access(p, os.W_OK | os.X_OK)


def numba_cache_dir() -> str:
    """Where numba keeps tracegen's compiled functions: the user's cache folder, else (no home, a
    read-only one) a folder of this user's in the temp folder. Nothing is created here."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(base, "tracegen", "numba"),
                   os.path.join(tempfile.gettempdir(), f"tracegen-{os.getuid()}", "numba")):
        if os.path.isabs(folder) and _writable(folder):
            return folder
    return os.path.join(tempfile.gettempdir(), f"tracegen-{os.getuid()}", "numba")


def _set_numba_cache_dir() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):          # the user's choice wins
        return
    folder = numba_cache_dir()
    os.environ["NUMBA_CACHE_DIR"] = folder          # numba reads it at import (numba.core.config)
    config = sys.modules.get("numba.core.config")
    if config is not None and not getattr(config, "CACHE_DIR", ""):
        config.CACHE_DIR = folder                   # numba imported before us: its locator reads this


_set_numba_cache_dir()
