"""The checks every section of a scenario file shares (spec.py, spec_events.py): an unknown key with
the closest valid one, a mapping, a choice among names; every error one line naming the key."""
from __future__ import annotations

import difflib
from typing import Any

from ..config import check_field, show
from ..errors import ConfigError

MAX_START_NS = 10**15              # 11.6 days


def unknown_key(where: str, key: Any, allowed) -> ConfigError:
    text = key if isinstance(key, str) and key.isprintable() else show(key, 40)
    close = difflib.get_close_matches(str(text)[:100], list(allowed), n=1)
    hint = f"did you mean '{close[0]}'?" if close else "valid keys: " + ", ".join(allowed)
    return ConfigError(f"unknown key '{where}{text}' — {hint}")


def mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {show(value)}")
    return value


def choice(value: Any, where: str, choices) -> str:
    check_field(where, value, str)
    if value not in choices:
        raise ConfigError(f"{where}: {show(value)} is not accepted — use one of "
                          + ", ".join(repr(c) for c in choices))
    return value
