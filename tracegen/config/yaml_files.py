"""The one reader of YAML input (job files, presets, topology files, lab plans): strict (duplicate
keys refused, timestamps kept as text) and capped (bytes, depth, values after aliases) before
anything is built; every failure a one-line ConfigError naming the file.
May import: config.values, errors.
"""
from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml

from .values import show, show_path
from ..errors import ConfigError


# --- YAML --------------------------------------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys: YAML silently keeps the last one, hiding typos."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":   # `<<:` keys may repeat by design
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, typing.Hashable):   # unhashable keys: construct_mapping reports them
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {show(key)}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _timestamp_text(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    """An unquoted `2026-12-04T09:00:00.123456789Z` stays text: YAML's datetime keeps only µs
    (parse_start_time reads the ns). An impossible date (2001-02-30) is still refused."""
    loader.construct_yaml_timestamp(node)
    return loader.construct_scalar(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_text)


YAML_MAX_BYTES = 256 << 10      # a job file or lab plan is a few hundred bytes
YAML_MAX_DEPTH = 32             # nested mappings / sequences
YAML_MAX_VALUES = 100_000       # values after expanding aliases (an alias bomb has 10^9)


def _check_shape(text: str, where: str, what: str = "job file") -> None:
    """Depth and alias-expanded size from the event stream, before anything is constructed."""
    stack: list[list] = [[None, 0]]          # [anchor, values] per open collection
    sizes: dict[str, int] = {}                # anchor -> values it expands to
    parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for ev in yaml.parse(text, Loader=parser):
        if isinstance(ev, yaml.CollectionStartEvent):
            stack.append([ev.anchor, 1])
            if len(stack) - 1 > YAML_MAX_DEPTH:
                line = ev.start_mark.line + 1 if ev.start_mark else 0
                need = "; a job needs 2" if what == "job file" else ""
                raise ConfigError(f"{where}:{line}: nested more than {YAML_MAX_DEPTH} levels deep{need}")
            continue
        if isinstance(ev, yaml.CollectionEndEvent):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
        elif isinstance(ev, yaml.AliasEvent):
            anchor, n = None, sizes.get(ev.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        if stack[-1][1] > YAML_MAX_VALUES:
            need = "; a job needs a few dozen" if what == "job file" else ""
            raise ConfigError(f"{where}: expands to more than {YAML_MAX_VALUES:,} values "
                              f"(YAML aliases referring to aliases?){need}")


def parse_yaml(text: str, where: str, what: str = "job file") -> dict:
    doc = load_yaml(text, where, what)
    if not isinstance(doc, dict):
        keys = " (model:, parallelism:, ...)" if what == "job file" else ""
        raise ConfigError(f"{where}: expected a mapping of keys{keys}, got {a_kind(doc)}")
    return doc


def a_kind(value: Any) -> str:
    """What a YAML value is, with its article, for 'expected X, got ...' ('an integer', 'a list')."""
    if value is None:
        return "an empty file"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    for typ, word in ((int, "an integer"), (float, "a number"), (str, "a string"), (list, "a list"),
                      (dict, "a mapping")):
        if isinstance(value, typ):
            return word
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def load_yaml(text: str, where: str, what: str = "job file") -> Any:
    """Any YAML document, checked for size, depth and alias expansion before it is built."""
    if len(text) > YAML_MAX_BYTES:
        raise ConfigError(f"{where}: {len(text):,} characters; YAML input is capped at "
                          f"{YAML_MAX_BYTES:,} (a {what} needs a few hundred)")
    try:
        _check_shape(text, where, what)
        doc = yaml.load(text, Loader=_StrictLoader)
    except ConfigError:                          # _check_shape's own (a ValueError too): as it is
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}{line}: not valid YAML ({_clip(problem, 120)})") from None
    except (ValueError, OverflowError) as e:      # a 5,000-digit integer, 2001-02-30, ...
        raise ConfigError(f"{where}: a value YAML cannot read ({_clip(e, 100)})") from None
    except RecursionError:                       # _check_shape makes this unreachable; kept as a net
        raise ConfigError(f"{where}: nested too deeply") from None
    return doc


def read_yaml_file(path: str | Path, what: str = "job file") -> dict:
    """The one reader of every YAML input tracegen takes (job files, presets' callers, topology
    files, lab plans): a mapping, or a one-line ConfigError naming the file.

    Hardened: at most YAML_MAX_BYTES read (a /dev/zero or a 50 GB file costs 256 KiB), UTF-8,
    one document, nesting <= YAML_MAX_DEPTH, <= YAML_MAX_VALUES values after expanding aliases
    (checked on the event stream before anything is built), duplicate keys refused, no tags
    beyond plain YAML. Values keep YAML's types: check each with `check_field` (a bool is never
    a number). `what` names the file in messages ("topology file", "lab plan"). A relative
    `path` is opened from the current folder: resolve paths a job names with `job_relative`
    first (load_job does that for fabric.file and output.lab)."""
    path = Path(path)
    shown = show_path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(YAML_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: no such {what}") from None
    except IsADirectoryError:
        raise ConfigError(f"{shown}: is a folder; give the path of a YAML {what}") from None
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read {what} ({e.strerror or e.__class__.__name__})") from None
    if len(data) > YAML_MAX_BYTES:
        raise ConfigError(f"{shown}: larger than {YAML_MAX_BYTES >> 10} KiB; a {what} needs a few "
                          "hundred bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{shown}: not UTF-8 at byte offset {e.start} (byte 0x{data[e.start]:02x}); "
                          f"save the {what} as UTF-8") from None
    return parse_yaml(text, shown, what)
