"""Loading a job: a YAML file, a preset or a mapping, then --set overrides, merged into a doc of
checked canonical keys and built into a validated Job; command-line options over a built job.
May import: every config module below it (schema, sections, values, yaml_files, paths, presets,
rules, inert), errors.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .inert import settle_inert
from .paths import FILE_KEYS, job_relative, rebase
from .presets import read_preset
from .rules import validate
from .schema import ALIASES, MOVED, PRESET_DIRS, SCALARS, TOP_EXTRA, TYPES
from .sections import SECTIONS, Job
from .values import check_value, show, show_or_null, show_path
from .yaml_files import load_yaml, read_yaml_file
from ..errors import ConfigError


# --- loading: YAML / preset / dict -> normalised dict -> Job ------------------------------------
# A "doc" is a partial job: {"name": .., "model": {field: value}, ...} holding canonical keys with
# checked values only; the dataclass defaults fill in the rest when the Job is built.


def _keys(sec: str) -> list[str]:
    """Keys accepted in a section ('' = the job's top level), canonical names first."""
    if not sec:
        return [*SCALARS, *SECTIONS, *TOP_EXTRA]
    extra = ["preset"] if sec in PRESET_DIRS else []
    return [*TYPES[sec], *ALIASES.get(sec, {}), *extra]


def _unknown(sec: str, key: Any) -> ConfigError:
    """An unknown key `key` in section `sec` ('' = top level); `key` may be any YAML key."""
    text = key if isinstance(key, str) and key.isprintable() else show(key, 40)
    path = f"{sec}.{text}" if sec else text
    if isinstance(key, str) and key.isprintable() and len(key) > 60:
        path = f"{sec}.{key[:57]}..." if sec else key[:57] + "..."
    # A key valid in another section is the likeliest slip (seq_len under parallelism).
    homes = [s for s in SECTIONS if s != sec and text in _keys(s) and text not in ("name", "preset")]
    if homes:
        hint = f"did you mean '{homes[0]}.{text}'?"
    elif sec and text in SCALARS:
        hint = f"'{text}' belongs at the top level of the job"
    else:
        close = difflib.get_close_matches(text[:100], _keys(sec), n=1)
        if close:
            hint = f"did you mean '{sec + '.' if sec else ''}{close[0]}'?"
        else:
            valid = _keys(sec) if not sec else list(TYPES[sec])
            hint = "valid keys: " + ", ".join(valid)
    return ConfigError(f"unknown key '{path}' — {hint}")


def _section_fields(sec: str, mapping: dict) -> dict:
    """A section's keys -> canonical names with checked values."""
    aliases, out, given = ALIASES.get(sec, {}), {}, {}
    for key, value in mapping.items():
        home = MOVED.get(sec, {}).get(key)
        if home:   # carried to its section by _merge_job, checked by that section's rules
            out[f"@{home}.{key}"] = check_value(f"{sec}.{key}", value, TYPES[home][key], f"{home}.{key}")
            continue
        name = aliases.get(key, key)
        if name not in TYPES[sec]:
            raise _unknown(sec, key)
        if name in given:
            raise ConfigError(f"{sec}: both '{given[name]}' and '{key}' set "
                              f"{sec}.{name} — keep one")
        given[name] = key
        out[name] = check_value(f"{sec}.{key}", value, TYPES[sec][name], f"{sec}.{name}")
    return out


def _merge_section(sec: str, base: dict, value: Any, stack: tuple = ()) -> dict:
    """A preset name replaces the section; a mapping overlays it (after its own `preset:`)."""
    if isinstance(value, str) and sec in PRESET_DIRS:
        return _preset_section(sec, value, stack)
    if not isinstance(value, dict):
        want = "a mapping or a preset name" if sec in PRESET_DIRS else "a mapping"
        raise ConfigError(f"{sec}: expected {want}, got {show_or_null(value)}")
    value = dict(value)
    out = dict(base)
    if sec in PRESET_DIRS and "preset" in value:
        out = _preset_section(sec, value.pop("preset"), stack)
    out.update(_section_fields(sec, value))
    return out


def _merge_job(base: dict, doc: Any, stack: tuple = ()) -> dict:
    """Overlay a job mapping on a doc: a top-level `preset:` first, then section by section."""
    if not isinstance(doc, dict):
        raise ConfigError(f"a job must be a mapping of keys, got {show_or_null(doc)}")
    out = _preset_job(doc["preset"], stack) if "preset" in doc else dict(base)
    for key, value in doc.items():
        if key in SECTIONS:
            out[key] = _merge_section(key, out.get(key, {}), value, stack)
            _carry_moved(out, key)
        elif key in SCALARS:
            out[key] = check_value(key, value, SCALARS[key])
        elif key == "description":      # free text, held to the string limit like every key
            check_value(key, value, str)
        elif key not in TOP_EXTRA:
            raise _unknown("", key)
    return out


def _carry_moved(doc: dict, sec: str) -> None:
    """Move a section's `@home.key` entries (moved keys, see MOVED) into section `home`."""
    moved = [k for k in doc[sec] if k.startswith("@")]
    if not moved:
        return
    doc[sec] = dict(doc[sec])
    for k in moved:
        home, _, key = k[1:].partition(".")
        doc[home] = {**doc.get(home, {}), key: doc[sec].pop(k)}


def _preset_section(sec: str, name: Any, stack: tuple) -> dict:
    kind = PRESET_DIRS[sec]
    doc = read_preset(kind, name, stack)
    doc.setdefault("name", name)
    return _merge_section(sec, {}, doc, stack + ((kind, name),))


def _preset_job(name: Any, stack: tuple = ()) -> dict:
    doc = read_preset("jobs", name, stack)
    out = _merge_job({}, doc, stack + (("jobs", name),))
    out.setdefault("name", name)
    return out


def _read_yaml(path: str | Path) -> dict:
    return read_yaml_file(path, "job file")


# --- --set overrides ---------------------------------------------------------------------------

def _set_fragment(item: str) -> dict:
    """'parallelism.dp=4' -> {"parallelism": {"dp": 4}}; the value is a YAML scalar."""
    key, eq, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    if not eq or not key:
        raise ConfigError(f"--set {show(item)}: expected KEY=VALUE, e.g. parallelism.dp=4")
    sec, dot, name = key.partition(".")
    if dot and sec not in SECTIONS:
        raise _unknown("", sec)
    if dot and (not name or "." in name):
        raise ConfigError(f"unknown key '{key}' — use SECTION.KEY, e.g. model.seq_len")
    typ = TYPES[sec].get(ALIASES.get(sec, {}).get(name, name)) if dot else SCALARS.get(key)
    value = raw if typ is str or not raw else _yaml_scalar(item, raw)
    if not dot and key in SECTIONS and not isinstance(value, dict):
        value = raw   # `model=llama3-8b`: a preset name, never a number
    return {sec: {name: value}} if dot else {key: value}


def _yaml_scalar(item: str, raw: str) -> Any:
    try:
        return load_yaml(raw, "--set")
    except ConfigError:
        raise ConfigError(f"--set {show(item)}: value is not valid YAML") from None


def _apply_sets(doc: dict, sets: Sequence[str]) -> dict:
    for item in sets:
        try:
            doc = _merge_job(doc, rebase(_set_fragment(item), "."))
        except ConfigError as e:
            msg = str(e)
            msg = msg if msg.startswith("--set") else f"--set {show(item)}: {msg}"
            raise ConfigError(msg) from None
    return doc


# --- public API --------------------------------------------------------------------------------

def load_job(path: str | Path | None = None, preset: str | None = None,
             sets: Sequence[str] = ()) -> Job:
    """A job from a YAML file, a job preset, or the built-in default; `sets` are applied last."""
    if path is not None and preset is not None:
        raise ConfigError("give a job file or a preset, not both")
    if isinstance(sets, str):   # a lone "a=b" would otherwise be iterated letter by letter
        sets = [sets]
    written: dict[str, str] = {}
    if path is not None:
        raw = rebase(_read_yaml(path), Path(path).parent)
        try:
            doc = _unset_degrees_are_one(_merge_job({}, raw), raw)
        except ConfigError as e:
            raise ConfigError(f"{show_path(path)}: {e}") from None
        if "name" not in raw:   # the file's stem, made safe as a directory name
            doc["name"] = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).stem).strip("-.") or "job"
        written = _written(raw)
    elif preset is not None:
        doc = _preset_job(preset)
    else:
        doc = {}
    doc = _apply_sets(doc, sets)
    for item in sets:
        written.update(_written(_set_fragment(item)))
    return _build(doc, "default", written)


def job_from_dict(d: dict, name: str = "job") -> Job:
    """A job from a mapping shaped like a job file; `name` unless the mapping has one."""
    doc = _unset_degrees_are_one(_merge_job({}, d), d)
    if "name" not in d:
        doc["name"] = name
    return _build(doc, name, _written(d))


def with_options(job: Job, section: str, values: dict[str, Any],
                 flags: dict[str, str] | None = None) -> Job:
    """Command-line options over one section of a job: each value checked as its key is but
    named as the user typed it (`flags`: key -> '--time-window'), a path taken from the current
    folder (made absolute like --set's), then the whole job validated."""
    flags = flags or {}
    types = TYPES[section]
    changes = {}
    for key, value in values.items():
        name = flags.get(key, f"{section}.{key}")
        value = check_value(name, value, types[key], f"{section}.{key}")
        changes[key] = job_relative(value, ".") if FILE_KEYS.get(section) == key else value
    part = dataclasses.replace(getattr(job, section), **changes)
    return validate(dataclasses.replace(job, **{section: part}))


DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp")
_ONE_WHEN_UNSET = ("pp", "cp", "ep", "vpp")


def _unset_degrees_are_one(doc: dict, raw: dict) -> dict:
    """A job that names some parallel degrees gets 1 for the pp, cp, ep, vpp it leaves out, unless
    a preset it names sets them: `{tp: 8, dp: 2}` means pp=1, not the built-in default job's pp=2.
    dp and tp keep the built-in 2 when left out; a job that names no degree keeps every built-in
    default (the default job: dp=tp=pp=2)."""
    par = raw.get("parallelism") if isinstance(raw, dict) else None
    if not isinstance(par, dict):
        return doc
    aliases = ALIASES["parallelism"]
    if not any(aliases.get(k, k) in DEGREES for k in par):
        return doc
    doc = dict(doc)
    doc["parallelism"] = {**{d: 1 for d in _ONE_WHEN_UNSET}, **doc.get("parallelism", {})}
    return doc


def job_to_dict(job: Job) -> dict:
    """Every key, canonical names: job_from_dict(job_to_dict(j)) == j."""
    out: dict[str, Any] = {k: getattr(job, k) for k in SCALARS}
    out.update({sec: dataclasses.asdict(getattr(job, sec)) for sec in SECTIONS})
    return out


def _build(doc: dict, name: str, written: dict[str, str]) -> Job:
    scalars = {k: doc[k] for k in SCALARS if k in doc}
    scalars.setdefault("name", name)
    sections = {sec: cls(**doc.get(sec, {})) for sec, cls in SECTIONS.items()}
    return settle_inert(validate(Job(**scalars, **sections)), written)


def _written(raw: Any) -> dict[str, str]:
    """Canonical 'section.key' -> the key as written, for the section keys a job mapping names
    itself (a section given as a preset, or a section's `preset:`, names none)."""
    out: dict[str, str] = {}
    if not isinstance(raw, dict):
        return out
    for sec, part in raw.items():
        if sec not in SECTIONS or not isinstance(part, dict):
            continue
        for key in part:
            if not isinstance(key, str) or key in ("preset", "name"):
                continue
            home = MOVED.get(sec, {}).get(key)
            name = key if home else ALIASES.get(sec, {}).get(key, key)
            out[f"{home or sec}.{name}"] = f"{sec}.{key}"
    return out
