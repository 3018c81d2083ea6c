"""Job description: YAML / preset / dict -> frozen dataclasses, validated with one-line errors.

Sections: model, parallelism, cluster, fabric, nccl, network, output. Every key is declared once
in config/schema.py (type, default, range, doc), so a YAML file names only what differs; here the
sections gain their derived sizes, and jobs are loaded (YAML, presets, --set), checked key by key
and between keys, and described (docs/limits.md, the JSON Schema). Megatron argument names are
accepted as aliases.

The job format. Holds the sections' dataclasses, loading (YAML, presets, --set), validation
and the limits. May import: tracegen's shared modules (errors, shipped). Must not import any
other stage.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
import math
import os
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .schema import (ALIASES, CHOICES as _CHOICES, DTYPE_BYTES, GPU_MEMORY_BYTES,  # noqa: F401
                     GPU_PEAK_TFLOPS, MOVED, NAME_MAX as _NAME_MAX, POSITIVE as _POSITIVE,
                     PRESET_DIRS as _PRESET_DIRS, RANGES as _RANGES, SCALARS as _SCALARS,
                     STR_MAX as _STR_MAX, TOP_EXTRA as _TOP_EXTRA, TYPES as _TYPES,
                     WORLD_MAX as _WORLD_MAX, ZERO_OR as _ZERO_OR, ClusterKeys, FabricKeys,
                     JobKeys, KEYS, ModelKeys, NcclKeys, NetworkKeys, OutputKeys,
                     ParallelismKeys, bounds, limits_markdown, limits_rows)
from .schema import JOB_NAME as _JOB_NAME_RE
from .schema import TIME_KEYS as _TIME_KEYS, TIME_MAX_NS as _TIME_MAX_NS
from ..errors import ConfigError


# The sections: their keys are declared in config_schema.py (type, default, range, doc); here
# they gain what is derived from them.

class Model(ModelKeys):
    """A transformer: its keys (config_schema.ModelKeys) and the sizes derived from them."""

    @property
    def bytes_per_elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def positions(self) -> int:
        """Rows of the learned position table (0 without one)."""
        return (self.max_position_embeddings or self.seq_len) if self.position_embeddings else 0

    def padded_vocab(self, tp: int = 1) -> int:
        """Megatron's `_vocab_size_with_padding`: V rounded up to a multiple of 128·tp."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab // multiple) * multiple

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def moe_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn

    @property
    def dhead(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.experts > 0 and layer >= self.first_k_dense

    @property
    def moe_layers(self) -> int:
        return max(0, self.layers - self.first_k_dense) if self.experts else 0

    @property
    def kv_elems_per_token(self) -> int:
        """K and V elements per token that context parallelism passes around the ring.

        MLA: K and V are up-projected per head before attention (heads x (qk + rope) and heads x v).
        """
        if self.mla:
            return self.heads * (self.dhead + self.rope_head_dim + (self.v_head_dim or self.dhead))
        return 2 * (self.kv_heads or self.heads) * self.dhead


class Parallelism(ParallelismKeys):
    """How the job is split: degrees, batches, sharding (config_schema.ParallelismKeys)."""

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def microbatches(self) -> int:
        """m: micro-batches per iteration per pipeline."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (Megatron-core's default: the attention TP size)."""
        return self.expert_tp or self.tp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: ranks of a stage / (etp·ep) (`initialize_model_parallel`)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)


def grad_elem_bytes(model: "Model", par: Parallelism) -> int:
    """Bytes per gradient element DP reduces. Megatron (arguments.py, bf16): gradients are
    accumulated and all-reduced in fp32 unless --grad-reduce-in-bf16; fp16/fp32 keep their dtype."""
    if par.grad_dtype:
        return DTYPE_BYTES[par.grad_dtype]
    return 4 if model.dtype == "bf16" else DTYPE_BYTES[model.dtype]


class Cluster(ClusterKeys):
    """Nodes, GPUs and NICs (config_schema.ClusterKeys)."""

    def node_count(self, world: int) -> int:
        return self.nodes or world // self.gpus_per_node

    @property
    def nics(self) -> int:
        return self.nics_per_node or self.gpus_per_node

    def nic_of_gpu(self) -> list[int]:
        if self.gpu_nic_map:
            return [int(x) for x in self.gpu_nic_map.split(",")]
        share = self.gpus_per_node // self.nics
        return [g // share for g in range(self.gpus_per_node)]


class FabricConfig(FabricKeys):
    """The switch fabric the NICs plug into (topology.py builds it; routing.py routes over it);
    kinds and keys: config_schema.FabricKeys."""


class Nccl(NcclKeys):
    """NCCL's algorithm, protocol and chunking (config_schema.NcclKeys)."""


class Network(NetworkKeys):
    """Settings for the simulators (ns-3 export, `tracegen ns3 run`) and switch labs
    (config_schema.NetworkKeys)."""


class Output(OutputKeys):
    """What generate writes and how (config_schema.OutputKeys)."""


@dataclass(frozen=True)
class Job(JobKeys):
    """A whole job: the top-level keys (config_schema.JobKeys) and one value per section."""
    model: Model = field(default_factory=Model)
    parallelism: Parallelism = field(default_factory=Parallelism)
    cluster: Cluster = field(default_factory=Cluster)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    nccl: Nccl = field(default_factory=Nccl)
    network: Network = field(default_factory=Network)
    output: Output = field(default_factory=Output)

    @property
    def world(self) -> int:
        return self.parallelism.world

    @property
    def nodes(self) -> int:
        return self.cluster.node_count(self.world)


# --- loading: YAML / preset / dict -> normalised dict -> Job ------------------------------------
# A "doc" is a partial job: {"name": .., "model": {field: value}, ...} holding canonical keys with
# checked values only; the dataclass defaults fill in the rest when the Job is built.

SECTIONS = {"model": Model, "parallelism": Parallelism, "cluster": Cluster, "fabric": FabricConfig,
            "nccl": Nccl, "network": Network, "output": Output}
# Every key's type, range, choices: config_schema.KEYS (docs/limits.md is rendered from them:
# `python -m tracegen.config --limits`; tests/test_bad_input.py checks every number has a range).
_JOB_NAME = re.compile(_JOB_NAME_RE)   # becomes a directory name under traces/
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _show(value: Any) -> str:
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
        raise ConfigError(f"{path}: expected {_TYPE_WORDS[typ]}, got {_show(value)}")
    if typ is float:
        try:
            value = float(value)
        except OverflowError:        # an integer beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {_show(value)}")
    if typ is str and len(value) > _STR_MAX:
        raise ConfigError(f"{path}: a string of {len(value):,} characters; at most {_STR_MAX:,}")
    return value


def _check_value(path: str, value: Any, typ: type, rule: str | None = None) -> Any:
    """Type and range of one key; `path` is what the user wrote, `rule` its canonical name."""
    rule = rule or path
    if rule in _TIME_KEYS:
        parse_start_time(value, path)
        return value
    value = _check_type(path, value, typ)
    if rule in _CHOICES:
        if value not in _CHOICES[rule]:
            accepted = ", ".join(repr(c) for c in _CHOICES[rule])
            raise ConfigError(f"{path}: {show(value)} is not accepted — use one of {accepted}")
    elif typ in (int, float):
        lo, hi = bounds(rule, typ)
        if not lo <= value <= hi:
            why = _RANGES[rule][2] if len(_RANGES.get(rule, ())) > 2 else ""
            why = f" ({why})" if why else ""
            if typ is int and value < min(lo, 1) and ((rule in _POSITIVE) or (lo == 0 and hi > 1024)):
                raise ConfigError(f"{path}: must be {'a positive integer' if lo else '>= 0'}, got {show(value)}")
            if value > hi and lo in (0, 1):
                raise ConfigError(f"{path}: must be at most {_num(hi)}{why}, got {show(value)}")
            raise ConfigError(f"{path}: must be in {_num(lo)}..{_num(hi)}{why}, got {show(value)}")
        if rule in _ZERO_OR and 0 < value < _ZERO_OR[rule][0]:
            floor, why = _ZERO_OR[rule]
            raise ConfigError(f"{path}: must be 0 or in {_num(floor)}..{_num(hi)} ({_RANGES[rule][2]}; {why}), "
                              f"got {show(value)}")
    if rule == "name" and not _JOB_NAME.fullmatch(value):
        raise ConfigError(f"name: {show(value)} is not usable as a directory name — "
                          "use letters, digits, '.', '_' and '-'")
    if rule == "name" and len(value) > _NAME_MAX:
        raise ConfigError(f"name: {len(value)} characters; a job name names folders and files, "
                          f"use at most {_NAME_MAX}")
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
    if ns is None or not 0 <= ns < _TIME_MAX_NS:
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


def _keys(sec: str) -> list[str]:
    """Keys accepted in a section ('' = the job's top level), canonical names first."""
    if not sec:
        return [*_SCALARS, *SECTIONS, *_TOP_EXTRA]
    extra = ["preset"] if sec in _PRESET_DIRS else []
    return [*_TYPES[sec], *ALIASES.get(sec, {}), *extra]


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
    elif sec and text in _SCALARS:
        hint = f"'{text}' belongs at the top level of the job"
    else:
        close = difflib.get_close_matches(text[:100], _keys(sec), n=1)
        if close:
            hint = f"did you mean '{sec + '.' if sec else ''}{close[0]}'?"
        else:
            valid = _keys(sec) if not sec else list(_TYPES[sec])
            hint = "valid keys: " + ", ".join(valid)
    return ConfigError(f"unknown key '{path}' — {hint}")


def _section_fields(sec: str, mapping: dict) -> dict:
    """A section's keys -> canonical names with checked values."""
    aliases, out, given = ALIASES.get(sec, {}), {}, {}
    for key, value in mapping.items():
        home = MOVED.get(sec, {}).get(key)
        if home:   # carried to its section by _merge_job, checked by that section's rules
            out[f"@{home}.{key}"] = _check_value(f"{sec}.{key}", value, _TYPES[home][key], f"{home}.{key}")
            continue
        name = aliases.get(key, key)
        if name not in _TYPES[sec]:
            raise _unknown(sec, key)
        if name in given:
            raise ConfigError(f"{sec}: both '{given[name]}' and '{key}' set "
                              f"{sec}.{name} — keep one")
        given[name] = key
        out[name] = _check_value(f"{sec}.{key}", value, _TYPES[sec][name], f"{sec}.{name}")
    return out


def _merge_section(sec: str, base: dict, value: Any, stack: tuple = ()) -> dict:
    """A preset name replaces the section; a mapping overlays it (after its own `preset:`)."""
    if isinstance(value, str) and sec in _PRESET_DIRS:
        return _preset_section(sec, value, stack)
    if not isinstance(value, dict):
        want = "a mapping or a preset name" if sec in _PRESET_DIRS else "a mapping"
        raise ConfigError(f"{sec}: expected {want}, got {_show(value)}")
    value = dict(value)
    out = dict(base)
    if sec in _PRESET_DIRS and "preset" in value:
        out = _preset_section(sec, value.pop("preset"), stack)
    out.update(_section_fields(sec, value))
    return out


def _merge_job(base: dict, doc: Any, stack: tuple = ()) -> dict:
    """Overlay a job mapping on a doc: a top-level `preset:` first, then section by section."""
    if not isinstance(doc, dict):
        raise ConfigError(f"a job must be a mapping of keys, got {_show(doc)}")
    out = _preset_job(doc["preset"], stack) if "preset" in doc else dict(base)
    for key, value in doc.items():
        if key in SECTIONS:
            out[key] = _merge_section(key, out.get(key, {}), value, stack)
            _carry_moved(out, key)
        elif key in _SCALARS:
            out[key] = _check_value(key, value, _SCALARS[key])
        elif key == "description":      # free text, held to the string limit like every key
            _check_value(key, value, str)
        elif key not in _TOP_EXTRA:
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


def _rebase(doc: Any, base: str | Path, sec: str = "") -> Any:
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
        new = _rebase(part, base, name)
        if new is not part:
            out = {**out, name: new}
    return out


# --- presets (package data, read through importlib.resources so an installed wheel works) ----

def _preset_dir(kind: str):
    return resources.files("tracegen") / "presets" / kind


def _preset_names(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".yaml"))


def _read_preset(kind: str, name: Any, stack: tuple) -> dict:
    names = _preset_names(kind)
    what = kind[:-1]    # "models" -> "model"
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(name[:100], names, n=1) if isinstance(name, str) else []
        hint = f"did you mean '{close[0]}'?" if close else "available: " + ", ".join(names)
        raise ConfigError(f"unknown {what} preset {show(name)} — {hint}")
    if (kind, name) in stack:
        raise ConfigError(f"{what} preset '{name}' includes itself")
    where = f"preset {kind}/{name}.yaml"
    doc = _parse_yaml((_preset_dir(kind) / f"{name}.yaml").read_text("utf-8"), where)
    doc.pop("description", None)
    sec = {"jobs": "", "fabrics": "fabric"}.get(kind)
    return doc if sec is None else _rebase(doc, str(_preset_dir(kind)), sec)


def _preset_section(sec: str, name: Any, stack: tuple) -> dict:
    kind = _PRESET_DIRS[sec]
    doc = _read_preset(kind, name, stack)
    doc.setdefault("name", name)
    return _merge_section(sec, {}, doc, stack + ((kind, name),))


def _preset_job(name: Any, stack: tuple = ()) -> dict:
    doc = _read_preset("jobs", name, stack)
    out = _merge_job({}, doc, stack + (("jobs", name),))
    out.setdefault("name", name)
    return out


def list_presets() -> dict[str, list[tuple[str, str]]]:
    """{"jobs"|"models"|"clusters"|"fabrics": [(name, one-line description)]}, sorted by name."""
    def describe(kind: str, name: str) -> str:
        text = (_preset_dir(kind) / f"{name}.yaml").read_text("utf-8")
        desc = _parse_yaml(text, f"preset {kind}/{name}.yaml").get("description", "")
        return " ".join(str(desc).split())
    return {kind: [(n, describe(kind, n)) for n in _preset_names(kind)]
            for kind in ("jobs", "models", "clusters", "fabrics")}


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


def _parse_yaml(text: str, where: str, what: str = "job file") -> dict:
    doc = _load_yaml(text, where, what)
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


def _load_yaml(text: str, where: str, what: str = "job file") -> Any:
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
    return _parse_yaml(text, shown, what)


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
    typ = _TYPES[sec].get(ALIASES.get(sec, {}).get(name, name)) if dot else _SCALARS.get(key)
    value = raw if typ is str or not raw else _yaml_scalar(item, raw)
    if not dot and key in SECTIONS and not isinstance(value, dict):
        value = raw   # `model=llama3-8b`: a preset name, never a number
    return {sec: {name: value}} if dot else {key: value}


def _yaml_scalar(item: str, raw: str) -> Any:
    try:
        return _load_yaml(raw, "--set")
    except ConfigError:
        raise ConfigError(f"--set {show(item)}: value is not valid YAML") from None


def _apply_sets(doc: dict, sets: Sequence[str]) -> dict:
    for item in sets:
        try:
            doc = _merge_job(doc, _rebase(_set_fragment(item), "."))
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
        raw = _rebase(_read_yaml(path), Path(path).parent)
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
    types = _TYPES[section]
    changes = {}
    for key, value in values.items():
        name = flags.get(key, f"{section}.{key}")
        value = _check_value(name, value, types[key], f"{section}.{key}")
        changes[key] = job_relative(value, ".") if FILE_KEYS.get(section) == key else value
    part = dataclasses.replace(getattr(job, section), **changes)
    return validate(dataclasses.replace(job, **{section: part}))


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
    out: dict[str, Any] = {k: getattr(job, k) for k in _SCALARS}
    out.update({sec: dataclasses.asdict(getattr(job, sec)) for sec in SECTIONS})
    return out


def _build(doc: dict, name: str, written: dict[str, str]) -> Job:
    scalars = {k: doc[k] for k in _SCALARS if k in doc}
    scalars.setdefault("name", name)
    sections = {sec: cls(**doc.get(sec, {})) for sec, cls in SECTIONS.items()}
    return _settle_inert(validate(Job(**scalars, **sections)), written)


def validate(job: Job) -> Job:
    """Check every key and the rules between keys; returns the job, raises ConfigError."""
    for key, typ in _SCALARS.items():
        _check_value(key, getattr(job, key), typ)
    for sec in SECTIONS:
        part = getattr(job, sec)
        for key, typ in _TYPES[sec].items():
            _check_value(f"{sec}.{key}", getattr(part, key), typ)
    _check_model(job.model)
    _check_sharding(job.model, job.parallelism)
    _check_moe(job.model)
    _check_parallel_features(job.model, job.parallelism)
    _check_world(job.parallelism, job.cluster)
    _check_network(job.network)
    _check_fabric(job.fabric)
    _check_marks(job.output, job.network)
    _check_nics(job.cluster)
    _check_tables(job.output)
    _check_output(job)
    return job


def _check_output(job: Job) -> None:
    it = job.output.iteration
    if it >= job.iterations:
        have = "iteration 0" if job.iterations == 1 else f"iterations 0..{job.iterations - 1}"
        raise ConfigError(f"output.iteration={it}: this job has {have} (iterations={job.iterations}); "
                          "pick one of those, -1 for all, or raise iterations")


TABLE_FORMATS = ("csv", "parquet")


def table_formats(out: Output) -> list[str]:
    """output.tables as a list, in TABLE_FORMATS order."""
    given = {x.strip().lower() for x in out.tables.split(",") if x.strip()}
    return [f for f in TABLE_FORMATS if f in given]


def _check_tables(out: Output) -> None:
    given = [x.strip().lower() for x in out.tables.split(",") if x.strip()]
    bad = [x for x in given if x not in TABLE_FORMATS]
    if bad or not given:
        raise ConfigError(f"output.tables={out.tables!r}: use csv, parquet or csv,parquet")
    if "parquet" in given:
        import importlib.util
        if importlib.util.find_spec("pyarrow") is None:
            raise ConfigError("output.tables=parquet needs pyarrow, which is not installed: "
                              "pip install 'tracegen[parquet]', or set output.tables=csv")


def _check_model(m: Model) -> None:
    if m.hidden % m.heads:
        raise ConfigError(f"model.heads={m.heads} does not divide model.hidden={m.hidden}")
    if m.kv_heads and (m.kv_heads > m.heads or m.heads % m.kv_heads):
        raise ConfigError(f"model.kv_heads={m.kv_heads} does not divide model.heads={m.heads}")
    if m.position_embeddings and m.max_position_embeddings and m.max_position_embeddings < m.seq_len:
        raise ConfigError(f"model.max_position_embeddings={m.max_position_embeddings} is below "
                          f"model.seq_len={m.seq_len}; raise it (or 0 for seq_len)")


def _check_moe(m: Model) -> None:
    if not m.experts:
        return
    if m.top_k > m.experts:
        raise ConfigError(f"model.top_k={m.top_k} exceeds model.experts={m.experts}")
    if m.first_k_dense >= m.layers:
        raise ConfigError(f"model.first_k_dense={m.first_k_dense} leaves no MoE layer of "
                          f"model.layers={m.layers}; lower it or set model.experts=0")


def _check_parallel_features(m: Model, p: Parallelism) -> None:
    """SP, CP, EP, interleaving: the combinations Megatron accepts."""
    if p.sp and p.tp == 1:
        raise ConfigError("parallelism.sp=true needs parallelism.tp > 1 (sequence parallelism splits "
                          "the TP group's activations); set sp: false or raise tp")
    if p.cp > 1 and m.seq_len % (2 * p.cp):
        raise ConfigError(f"model.seq_len={m.seq_len} is not a multiple of 2·parallelism.cp = {2 * p.cp} "
                          "(load-balanced context parallelism gives each rank two chunks)")
    if p.sp and p.tp > 1 and m.seq_len % (p.cp * p.tp):
        # Megatron-core scatters each micro-batch's [s/cp, b, h] activations over TP along s:
        # tensor_parallel/mappings.py _split_along_first_dim and _reduce_scatter_along_first_dim
        # assert "First dimension of the tensor should be divisible by tensor parallel size".
        what = (f"parallelism.cp·tp = {p.cp}·{p.tp} = {p.cp * p.tp}" if p.cp > 1
                else f"parallelism.tp={p.tp}")
        raise ConfigError(f"model.seq_len={m.seq_len} is not a multiple of {what} with parallelism.sp=true "
                          "(sequence parallelism splits every sequence over the TP ranks; Megatron asserts "
                          f"it); make seq_len a multiple of {p.cp * p.tp} or set sp: false")
    if p.ep > 1 and not m.experts:
        raise ConfigError(f"parallelism.ep={p.ep} needs a mixture-of-experts model (model.experts > 0)")
    if p.expert_tp and not m.experts:
        raise ConfigError(f"parallelism.expert_tp={p.expert_tp} needs a mixture-of-experts model "
                          "(model.experts > 0); leave it 0")
    if m.experts and m.experts % p.ep:
        raise ConfigError(f"parallelism.ep={p.ep} does not divide model.experts={m.experts}")
    stage = p.tp * p.cp * p.dp
    if m.experts and stage % (p.etp * p.ep):
        raise ConfigError(f"parallelism.expert_tp·ep = {p.etp}·{p.ep} does not divide the "
                          f"{stage} ranks of a pipeline stage (tp·cp·dp); change ep or expert_tp")
    if m.experts and m.moe_ffn % p.etp:
        raise ConfigError(f"parallelism.expert_tp={p.etp} does not divide the expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and m.shared_experts and m.moe_ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the shared-expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and p.tp > 1 and not p.sp:
        raise ConfigError("mixture-of-experts with tp > 1 needs parallelism.sp=true (Megatron-core's "
                          "token dispatcher takes sequence-parallel token shards); set sp: true")
    if p.vpp > 1:
        if p.pp == 1:
            raise ConfigError(f"parallelism.vpp={p.vpp} needs parallelism.pp > 1")
        if m.layers % (p.pp * p.vpp):
            raise ConfigError(f"parallelism.pp·vpp = {p.pp}·{p.vpp} does not divide model.layers={m.layers}")
        if p.microbatches % p.pp:
            raise ConfigError(f"interleaved 1F1B needs micro-batches ({p.microbatches}) to be a multiple "
                              f"of parallelism.pp={p.pp}; change global_batch")
    if p.pp_scatter_gather and p.pp == 1:
        raise ConfigError("parallelism.pp_scatter_gather=true needs parallelism.pp > 1")


def _check_sharding(m: Model, p: Parallelism) -> None:
    """Megatron's divisibility rules: TP splits heads, query groups, MLP; PP splits layers."""
    if m.heads % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.heads={m.heads}")
    if m.kv_heads and m.kv_heads % p.tp:   # each TP rank holds whole query groups
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.kv_heads={m.kv_heads}")
    if m.ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the MLP width {m.ffn} "
                          "(model.ffn_hidden)")
    if m.layers % p.pp:
        raise ConfigError(f"parallelism.pp={p.pp} does not divide model.layers={m.layers}")
    per_step = p.micro_batch * p.dp
    if p.global_batch % per_step:
        raise ConfigError(f"parallelism.global_batch={p.global_batch} is not a multiple of "
                          f"micro_batch·dp = {p.micro_batch}·{p.dp} = {per_step}")


def _check_world(p: Parallelism, c: Cluster) -> None:
    world, gpn = p.world, c.gpus_per_node
    sizes = (f"dp·tp·pp·cp = {p.dp}·{p.tp}·{p.pp}·{p.cp} = {world:,}" if p.cp > 1
             else f"dp·tp·pp = {p.dp}·{p.tp}·{p.pp} = {world:,}")
    if world > _WORLD_MAX:
        raise ConfigError(f"parallelism {sizes} GPUs; tracegen models at most {_WORLD_MAX:,}")
    if c.nodes and c.nodes * gpn != world:
        have = c.nodes * gpn
        grow, lower = ("grow", "lower") if have < world else ("shrink", "raise")
        cluster_fix = (f"{grow} the cluster (cluster.nodes={world // gpn})" if world % gpn == 0
                       else f"{grow} the cluster to {world} GPUs (cluster.nodes × cluster.gpus_per_node)")
        degrees = " or ".join(f"parallelism.{k}={v}" for k, v in _degree_fixes(p, have))
        degree_fix = f"{lower} a degree to fit {have} GPUs" + (f" ({degrees})" if degrees else "")
        raise ConfigError(f"cluster.nodes={c.nodes} × cluster.gpus_per_node={gpn} = "
                          f"{have} GPUs but parallelism {sizes} — {cluster_fix} or {degree_fix}")
    if not c.nodes and world % gpn:
        raise ConfigError(f"parallelism {sizes} GPUs not filling nodes of "
                          f"cluster.gpus_per_node={gpn} — make it a multiple of {gpn} "
                          f"or set cluster.gpus_per_node to a divisor of {world}")


def _degree_fixes(p: Parallelism, gpus: int) -> list[tuple[str, int]]:
    """Single-degree changes that make dp·tp·pp·cp equal `gpus` (pp first: the usual slip is the
    default pp=2 left in)."""
    out = []
    for k in ("pp", "dp", "tp", "cp"):
        v = getattr(p, k)
        rest = p.world // v
        if gpus % rest == 0 and gpus // rest != v:
            out.append((k, gpus // rest))
    return out[:2]


def _check_nics(c: Cluster) -> None:
    if c.nics_per_node and c.nics_per_node > c.gpus_per_node:
        raise ConfigError(f"cluster.nics_per_node={c.nics_per_node} exceeds cluster.gpus_per_node="
                          f"{c.gpus_per_node}; use at most one NIC per GPU")
    if not c.gpu_nic_map:
        if c.gpus_per_node % c.nics:
            raise ConfigError(f"cluster.nics_per_node={c.nics} does not divide cluster.gpus_per_node="
                              f"{c.gpus_per_node}; set cluster.gpu_nic_map to place GPUs on NICs")
        return
    parts = c.gpu_nic_map.split(",")
    if len(parts) != c.gpus_per_node or any(small_int(p.strip(), 4) is None for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)}: give {c.gpus_per_node} comma-separated "
                          "NIC indices, one per GPU (e.g. '0,0,1,1')")
    if any(int(p) >= c.nics for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)} names a NIC >= cluster.nics_per_node={c.nics}")


def _check_network(n: Network) -> None:
    if n.kmin_bytes > n.kmax_bytes:
        raise ConfigError(f"network.kmin_bytes={n.kmin_bytes} exceeds "
                          f"network.kmax_bytes={n.kmax_bytes}")
    for key in ("dcqcn_min_rate_mbps", "dcqcn_g", "dcqcn_alpha_resume_us",
                "dcqcn_rate_decrease_us", "dcqcn_rp_timer_us"):
        if not getattr(n, key) > 0:
            raise ConfigError(f"network.{key}: must be > 0, got {getattr(n, key)!r}")
    for key in ("dcqcn_rate_ai_mbps", "dcqcn_rate_hai_mbps", "cnp_interval_us"):
        if getattr(n, key) < 0:
            raise ConfigError(f"network.{key}: must be >= 0, got {getattr(n, key)!r}")
    # The switch buffer bounds every queue (ns3_scenarios/roce_switch.h Admit): thresholds above
    # it are never reached.
    if n.kmax_bytes > n.buffer_bytes:
        raise ConfigError(f"network.kmax_bytes={n.kmax_bytes} is above network.buffer_bytes={n.buffer_bytes}: "
                          "no queue grows that long, ECN marking would never reach pmax; lower kmax_bytes "
                          "or raise buffer_bytes")
    if n.pfc_xoff_bytes > n.buffer_bytes:
        raise ConfigError(f"network.pfc_xoff_bytes={n.pfc_xoff_bytes} is above network.buffer_bytes="
                          f"{n.buffer_bytes}: the buffer drops before a port reaches Xoff, PFC would never "
                          "pause; lower pfc_xoff_bytes (0: dynamic) or raise buffer_bytes")
    if n.pfc_headroom_bytes > n.buffer_bytes:
        raise ConfigError(f"network.pfc_headroom_bytes={n.pfc_headroom_bytes} is above network.buffer_bytes="
                          f"{n.buffer_bytes}: one port's headroom cannot exceed the whole buffer; lower "
                          "pfc_headroom_bytes (0: 3 x the link's bandwidth-delay) or raise buffer_bytes")
    if n.pfc_xoff_bytes and n.pfc_resume_offset_bytes >= n.pfc_xoff_bytes:
        raise ConfigError(f"network.pfc_resume_offset_bytes={n.pfc_resume_offset_bytes} must be "
                          f"below network.pfc_xoff_bytes={n.pfc_xoff_bytes} (Xon = Xoff - offset)")


def _check_fabric(f: FabricConfig) -> None:
    if f.kind == "file" and not f.file:
        raise ConfigError("fabric.kind=file needs fabric.file: the topology YAML's path (relative to "
                          "the job file that names it)")
    if f.file and f.kind != "file":
        raise ConfigError(f"fabric.file={show_tail(f.file)} is ignored with fabric.kind={f.kind}: that kind "
                          "builds its own switches; set fabric.kind: file to use the file, or remove fabric.file")
    if f.kind == "file" and f.planes != 1:
        raise ConfigError(f"fabric.planes={f.planes} with fabric.kind=file: list every plane's switches "
                          "in the topology file instead (planes: 1)")


def _check_marks(out: Output, n: Network) -> None:
    """CE marks, CNPs and DCQCN's reaction against the ECN bits data packets are sent with."""
    if out.ecn_mark_fraction > 0 and out.ecn in (0, 3):
        sent = "Not-ECT (output.ecn=0): a switch marks only ECN-capable packets (RFC 3168 §5)" \
            if out.ecn == 0 else "CE already (output.ecn=3): a mark could not be told from the rest"
        raise ConfigError(f"output.ecn_mark_fraction={out.ecn_mark_fraction:g} marks CE on data packets "
                          f"sent {sent}; set output.ecn=2 (ECT(0)) or 1, or ecn_mark_fraction: 0")
    if out.comments and out.format != "pcapng":
        raise ConfigError("output.comments=true needs output.format=pcapng (pcap has no comments); "
                          "set format: pcapng or comments: false")
    if out.dcqcn and n.cc_mode != "dcqcn":
        raise ConfigError(f"output.dcqcn=true follows DCQCN's rate control; network.cc_mode is "
                          f"{n.cc_mode!r} - set network.cc_mode=dcqcn or output.dcqcn=false")


# --- keys with no effect ----------------------------------------------------------------------
# A key that changes nothing because of another key's value: written by the user (job file,
# --set, a mapping) with a value other than its default, it is refused naming both keys; carried
# in by a preset (a cluster preset's spines under a fat-tree), it is reset to its default, so
# job.resolved.yaml shows what acts and replays. Rows: (key, other key, acts(other's value),
# what the key does, the other key's setting that makes it act) - read off where the pipeline
# uses each key (fabric_kinds.py, workload/params.py, emit/packets.py, emit/sims/ns3.py).

_TWO_TIER = ("rail-optimised", "leaf-spine")
_BUILT, _TWO_TIER_S = "rail-optimised, leaf-spine or fat-tree", "rail-optimised or leaf-spine"


def _is(*values):
    return lambda v: v in values


_FAT, _TWO, _NOT_FILE = _is("fat-tree"), _is(*_TWO_TIER), (lambda v: v != "file")
_POS, _MANY, _ZERO, _TRUE = (lambda v: v > 0), (lambda v: v > 1), (lambda v: v == 0), (lambda v: v is True)
INERT = [
    ("fabric.nodes_per_leaf", "fabric.kind", _TWO, "it counts the nodes under a two-tier leaf", _TWO_TIER_S),
    ("fabric.spines", "fabric.kind", _TWO, "it counts a two-tier fabric's spines", _TWO_TIER_S),
    ("fabric.k", "fabric.kind", _FAT, "it is a fat-tree's radix", "fat-tree"),
    ("fabric.placement", "fabric.kind", _FAT, "it orders NICs on a fat-tree's leaves", "fat-tree"),
    ("fabric.spine_core_gbps", "fabric.kind", _FAT, "it rates a fat-tree's spine-core links", "fat-tree"),
    ("fabric.core_oversubscription", "fabric.kind", _FAT, "it rates a fat-tree's spine-core links", "fat-tree"),
    ("fabric.spine_core_latency_ns", "fabric.kind", _FAT, "it delays a fat-tree's spine-core links", "fat-tree"),
    ("fabric.leaf_spine_gbps", "fabric.kind", _NOT_FILE, "the topology file rates every link", _BUILT),
    ("fabric.oversubscription", "fabric.kind", _NOT_FILE, "the topology file rates every link", _BUILT),
    ("fabric.leaf_spine_latency_ns", "fabric.kind", _NOT_FILE, "the topology file delays every link", _BUILT),
    ("fabric.oversubscription", "fabric.leaf_spine_gbps", _ZERO, "an explicit uplink rate wins over a ratio", "0"),
    ("fabric.core_oversubscription", "fabric.spine_core_gbps", _ZERO, "an explicit uplink rate wins over a ratio",
     "0"),
    ("model.top_k", "model.experts", _POS, "it counts the experts a token goes to", "> 0"),
    ("model.moe_ffn_hidden", "model.experts", _POS, "it is an expert's width", "> 0"),
    ("model.shared_experts", "model.experts", _POS, "it counts the always-on experts of MoE layers", "> 0"),
    ("model.first_k_dense", "model.experts", _POS, "it counts the dense layers before the MoE layers", "> 0"),
    ("model.capacity_factor", "model.experts", _POS, "it sizes the MoE dispatch buffer", "> 0"),
    ("model.q_lora_rank", "model.kv_lora_rank", _POS, "it is latent attention's query rank", "> 0"),
    ("model.rope_head_dim", "model.kv_lora_rank", _POS, "it is latent attention's RoPE key width", "> 0"),
    ("model.v_head_dim", "model.kv_lora_rank", _POS, "it is latent attention's value width", "> 0"),
    ("model.kv_heads", "model.kv_lora_rank", _ZERO, "latent attention has no query groups", "0"),
    ("model.max_position_embeddings", "model.position_embeddings", _TRUE,
     "it counts the rows of a learned position table", "true"),
    ("output.vlan_id", "output.vlan", _TRUE, "it is the 802.1Q tag's VID", "true"),
    ("output.pcp", "output.vlan", _TRUE, "it is the 802.1Q tag's priority", "true"),
    ("output.qp_split", "nccl.qps_per_connection", _MANY, "it spreads messages over a connection's QPs", "> 1"),
    ("output.ecn_pattern", "output.ecn_mark_fraction", _POS, "it places CE marks", "> 0"),
    ("output.ecn_seed", "output.ecn_mark_fraction", _POS, "it seeds CE marks", "> 0"),
    ("output.ecn_seed", "output.ecn_pattern", _is("random"), "it seeds random CE marks", "random"),
    ("output.dcqcn", "output.ecn_mark_fraction", _POS, "senders react to CNPs, which only CE marks cause", "> 0"),
    ("network.pfc_xoff_bytes", "network.pfc", _TRUE, "it is a PFC threshold", "true"),
    ("network.pfc_resume_offset_bytes", "network.pfc", _TRUE, "it is a PFC threshold", "true"),
    ("network.pfc_headroom_bytes", "network.pfc", _TRUE, "it is PFC headroom", "true"),
    ("network.pfc_pause_quanta", "network.pfc", _TRUE, "it is the PFC PAUSE time", "true"),
    ("network.dcqcn_rate_ai_mbps", "network.cc_mode", _is("dcqcn"), "it is DCQCN's additive increase", "dcqcn"),
    ("network.dcqcn_rate_hai_mbps", "network.cc_mode", _is("dcqcn"), "it is DCQCN's hyper increase", "dcqcn"),
]


def _get(job: Job, key: str) -> Any:
    sec, _, name = key.partition(".")
    return getattr(getattr(job, sec), name)


def _default(key: str) -> Any:
    return KEYS[key].default


def _yaml_word(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return v if isinstance(v, str) and v.isprintable() and 0 < len(v) <= 60 else show(v)


def inert_keys(job: Job) -> list[tuple[str, str]]:
    """(key, other key) of every key with a non-default value that has no effect (INERT)."""
    out = []
    for key, other, acts, _, _ in INERT:
        if _get(job, key) != _default(key) and not acts(_get(job, other)):
            out.append((key, other))
    return out


def _settle_inert(job: Job, written: dict[str, str]) -> Job:
    """Refuse the keys the user wrote that have no effect; reset those presets carried in."""
    rows = {(k, o): (what, want) for k, o, _, what, want in INERT}
    for key, other in inert_keys(job):
        if _get(job, key) == _default(key):      # reset by an earlier row
            continue
        if key in written:
            what, want = rows[key, other]
            fix = f"set {other} {want}" if want.startswith(">") else f"set {other}: {want}"
            raise ConfigError(f"{written[key]}={_yaml_word(_get(job, key))} has no effect with "
                              f"{written.get(other, other)}={_yaml_word(_get(job, other))} ({what}); "
                              f"remove it or {fix}")
        sec, _, name = key.partition(".")
        job = dataclasses.replace(job, **{sec: dataclasses.replace(getattr(job, sec), **{name: _default(key)})})
    return job


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


# --- docs/limits.md and the JSON Schema for job files (tracegen/schema/job.schema.json) -------

def limits_doc(doc: str) -> str:
    """`doc` (docs/limits.md's text) with its key table - from the '| key |' header to the first
    blank line - replaced by the one the declarations give; the prose around it stays."""
    start = doc.index("| key | accepted | note |")
    end = doc.find("\n\n", start)
    return doc[:start] + limits_markdown() + (doc[end + 1:] if end >= 0 else "")


def job_schema_text() -> str:
    """The JSON Schema of job files, from the key declarations and the shipped presets' names."""
    from .schema import schema_text
    kinds = {"jobs": "jobs", **_PRESET_DIRS}
    return schema_text({sec: _preset_names(kind) for sec, kind in kinds.items()})


def job_schema_path() -> Path:
    """Where the shipped schema is (point an editor at it: README, 'Editing job files')."""
    from .schema import SCHEMA_PATH
    return SCHEMA_PATH


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tracegen.config --limits [docs/limits.md] | --schema`: print the limits table (or
    rewrite it in place in the doc named), or rewrite the shipped schema (tests check both are current)."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--limits"]:
        sys.stdout.write(limits_markdown())
    elif args[:1] == ["--limits"] and len(args) == 2:
        doc_path = Path(args[1])
        doc_path.write_text(limits_doc(doc_path.read_text("utf-8")), "utf-8")
    elif args == ["--schema"]:
        job_schema_path().parent.mkdir(exist_ok=True)
        job_schema_path().write_text(job_schema_text(), "utf-8")
        print(job_schema_path())
    else:
        sys.exit("usage: python -m tracegen.config --limits [docs/limits.md] | --schema")


if __name__ == "__main__":     # tools/layout.map: `main tracegen.config` once config is a package
    main()
