"""One value of a job or of any YAML input: its display in messages (show, show_path, show_tail),
its type and range (check_value for job keys, check_field for other files' values), and the text
forms read by hand (output.time_window, output.start_time, small integers).
May import: config.keys, config.schema, errors.
"""
from __future__ import annotations

import datetime
import math
import re
from typing import Any

from .keys.declare import JOB_NAME, NAME_MAX, STR_MAX
from .schema import CHOICES, POSITIVE, RANGES, TIME_KEYS, TIME_MAX_NS, ZERO_OR, bounds
from ..errors import ConfigError


# Every key's type, range, choices: schema.KEYS (docs/limits.md is rendered from them:
# `python -m tracegen.config --limits`; tests/test_bad_input.py checks every number has a range).
_JOB_NAME = re.compile(JOB_NAME)   # becomes a directory name under traces/
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def show_or_null(value: Any) -> str:
    """show(value), with what a null means for a key."""
    if value is None:
        return "null (leave the key out to keep the default)"
    return show(value)


def show_path(path: Any) -> str:
    """A path as the user wrote it, or its repr when it holds newlines or other control
    characters (a message stays one line)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def show_tail(text: str, limit: int = 120) -> str:
    """A long string (a path) quoted with its end kept: '...c/topo.yaml'."""
    text = repr(text[-limit - 1:])
    return text if len(text) <= limit + 2 else text[0] + "..." + text[-limit + 1:]


def show(value: Any, limit: int = 60) -> str:
    """A repr of at most ~`limit` characters that never walks more of `value` than it prints:
    safe on alias bombs (10^9 shared leaves), deep nesting and 10^5-digit integers."""
    out: list[str] = []
    budget = [limit]

    def put(text: str) -> bool:
        out.append(text[:max(budget[0], 0)])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(v: Any, depth: int) -> bool:
        if isinstance(v, bool) or v is None or isinstance(v, float):
            return put(repr(v))
        if isinstance(v, int):
            if abs(v) < 10**18:
                return put(repr(v))
            return put(f"<a {int(v.bit_length() * 0.30103) + 1}-digit integer>")
        if isinstance(v, (str, bytes)):
            return put(repr(v[:limit + 1]))
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            if depth > 3:
                return put("...")
            opener, closer = {dict: "{}", list: "[]", tuple: "()"}.get(type(v), "{}")
            if not put(opener):
                return False
            items = v.items() if isinstance(v, dict) else v
            for k, item in enumerate(items):
                if k and not put(", "):
                    return False
                if isinstance(v, dict):
                    if not (walk(item[0], depth + 1) and put(": ") and walk(item[1], depth + 1)):
                        return False
                elif not walk(item, depth + 1):
                    return False
            return put(closer)
        return put(repr(v)[:limit + 1])

    if walk(value, 0):
        return "".join(out)
    return "".join(out)[:max(limit - 3, 1)] + "..."


def _check_type(path: str, value: Any, typ: type) -> Any:
    # bool is an int subclass and YAML turns `yes` into True: never let one pass for the other.
    is_bool = isinstance(value, bool)
    ok = (typ is bool and is_bool) or (typ is str and isinstance(value, str)) \
        or (typ is int and isinstance(value, int) and not is_bool) \
        or (typ is float and isinstance(value, (int, float)) and not is_bool)
    if not ok:
        raise ConfigError(f"{path}: expected {_TYPE_WORDS[typ]}, got {show_or_null(value)}")
    if typ is float:
        try:
            value = float(value)
        except OverflowError:        # an integer beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {show_or_null(value)}")
    if typ is str and len(value) > STR_MAX:
        raise ConfigError(f"{path}: a string of {len(value):,} characters; at most {STR_MAX:,}")
    return value


def check_value(path: str, value: Any, typ: type, rule: str | None = None) -> Any:
    """Type and range of one key; `path` is what the user wrote, `rule` its canonical name."""
    rule = rule or path
    if rule in TIME_KEYS:
        parse_start_time(value, path)
        return value
    value = _check_type(path, value, typ)
    if rule in CHOICES:
        if value not in CHOICES[rule]:
            accepted = ", ".join(repr(c) for c in CHOICES[rule])
            raise ConfigError(f"{path}: {show(value)} is not accepted — use one of {accepted}")
    elif typ in (int, float):
        lo, hi = bounds(rule, typ)
        if not lo <= value <= hi:
            why = RANGES[rule][2] if len(RANGES.get(rule, ())) > 2 else ""
            why = f" ({why})" if why else ""
            if typ is int and value < min(lo, 1) and ((rule in POSITIVE) or (lo == 0 and hi > 1024)):
                raise ConfigError(f"{path}: must be {'a positive integer' if lo else '>= 0'}, got {show(value)}")
            if value > hi and lo in (0, 1):
                raise ConfigError(f"{path}: must be at most {_num(hi)}{why}, got {show(value)}")
            raise ConfigError(f"{path}: must be in {_num(lo)}..{_num(hi)}{why}, got {show(value)}")
        if rule in ZERO_OR and 0 < value < ZERO_OR[rule][0]:
            floor, why = ZERO_OR[rule]
            raise ConfigError(f"{path}: must be 0 or in {_num(floor)}..{_num(hi)} ({RANGES[rule][2]}; {why}), "
                              f"got {show(value)}")
    if rule == "name" and not _JOB_NAME.fullmatch(value):
        raise ConfigError(f"name: {show(value)} is not usable as a directory name — "
                          "use letters, digits, '.', '_' and '-'")
    if rule == "name" and len(value) > NAME_MAX:
        raise ConfigError(f"name: {len(value)} characters; a job name names folders and files, "
                          f"use at most {NAME_MAX}")
    if rule in ("output.dir", "output.lab", "fabric.file") and "\0" in value:
        raise ConfigError(f"{path}: a path cannot contain a NUL character")
    if rule == "output.time_window" and value:
        parse_time_window(value, path)
    return value


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def parse_time_window(text: str, name: str = "output.time_window") -> tuple[int, int]:
    """'START_NS:END_NS' (either side may be empty) -> [start, end), 0 <= start < end < 2^63;
    `name` is what the user typed it as (the key, or the option --time-window)."""
    a, sep, b = text.partition(":")
    window = None
    if sep:
        a, b = a.strip(), b.strip()
        start = small_int(a, 19) if a else 0
        end = small_int(b, 19) if b else 2**63 - 1
        if start is not None and end is not None:
            window = (start, end)
    if window is None or not 0 <= window[0] < window[1] <= 2**63 - 1:
        given = f"{name} {show(text)}" if name.startswith("--") else f"{name}={show(text)}"
        raise ConfigError(f"{given}: use START_NS:END_NS with "
                          "0 <= START < END < 2^63 (integer ns, either side may be left empty)")
    return window


_ISO_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                       r"(?:([Zz])|([+-])(\d\d):?(\d\d))")


def parse_start_time(value: Any, name: str = "output.start_time") -> int:
    """output.start_time -> integer ns since the Unix epoch, in [0, 2100). Accepted: an integer
    (epoch ns), a string of digits (the same, as --set gives it), or ISO 8601 with a timezone.
    The fraction is read as digits (up to 9: ns), not through datetime, which keeps only µs."""
    ns = None
    if isinstance(value, int) and not isinstance(value, bool):
        ns = value
    elif isinstance(value, str) and value.isascii():
        text = value.strip()
        ns = small_int(text, 19)
        m = _ISO_TIME.fullmatch(text) if ns is None and len(text) <= 64 else None
        if m:
            y, mo, d, h, mi, sec = (int(x) for x in m.groups()[:6])
            offset_s = 0 if m[8] else (1 if m[9] == "+" else -1) * (int(m[10]) * 3600 + int(m[11]) * 60)
            try:
                day = datetime.date(y, mo, d).toordinal() - datetime.date(1970, 1, 1).toordinal()
            except ValueError:
                day = None
            if day is not None and h < 24 and mi < 60 and sec < 60 and int(m[10] or 0) < 24 \
                    and int(m[11] or 0) < 60:
                ns = ((day * 86400 + h * 3600 + mi * 60 + sec - offset_s) * 10**9
                      + int((m[7] or "").ljust(9, "0")))
    if ns is None or not 0 <= ns < TIME_MAX_NS:
        raise ConfigError(f"{name}={show(value)}: use an ISO 8601 time with a timezone "
                          "(2026-12-04T09:00:00Z, 2026-12-04T09:00:00.123456789+01:00) or integer epoch ns, "
                          "from 1970 up to 2100")
    return ns


def small_int(text: str, digits: int = 9) -> int | None:
    """The integer in `text` if it is 1..`digits` ASCII digits (no sign, no spaces), else None.
    (str.isdigit() also accepts '²', which int() refuses; long strings cost quadratic time.)"""
    if 0 < len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def check_field(where: str, value: Any, typ: type, lo: float | None = None,
                hi: float | None = None) -> Any:
    """One value of any YAML input held to the job keys' rules: strict type (a bool is no
    number, an integer stands in for a float), strings <= 65,536 characters, numbers in
    [lo, hi]. Returns the value (a float for float); else a ConfigError '<where>: ...'."""
    value = _check_type(where, value, typ)
    if typ in (int, float) and not ((lo is None or value >= lo) and (hi is None or value <= hi)):
        span = f"{_num(lo)}..{_num(hi)}" if lo is not None and hi is not None else \
            (f">= {_num(lo)}" if lo is not None else f"<= {_num(hi)}")
        raise ConfigError(f"{where}: must be {'in ' if '..' in span else ''}{span}, got {show(value)}")
    return value
