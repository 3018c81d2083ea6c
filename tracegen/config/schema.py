"""The job format as data: every key of a job declared once, in the section it belongs to - name,
type, default, accepted range or choices, and a doc; its unit is in its name (_bytes, _ns, _us,
_gbps, _mbps). The declarations live in config/keys/ (a module per section); this module
assembles them and everything else reads them from here: the tables config/values.py checks keys with
(and words its messages from), docs/limits.md's rows, and the JSON Schema for job files that
ships as tracegen/schema/job.schema.json (`python -m tracegen.config --schema` rewrites it; a
test fails when it is stale). Rules between keys stay code (config/rules.py).

Imports only config/keys/: the other config modules build on it.
"""
from __future__ import annotations

import json
import typing
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from .keys.cluster import ClusterKeys
from .keys.declare import FLOAT_MAX, INT_MAX, JOB_NAME, NAME_MAX, STR_MAX
from .keys.fabric import FabricKeys
from .keys.job import JobKeys
from .keys.model import ModelKeys
from .keys.nccl import NcclKeys
from .keys.network import NetworkKeys
from .keys.output import OutputKeys
from .keys.parallelism import ParallelismKeys


# --- sections, names, and the tables read off the declarations ---------------------------------

SECTION_KEYS = {"model": ModelKeys, "parallelism": ParallelismKeys, "cluster": ClusterKeys,
                "fabric": FabricKeys, "nccl": NcclKeys, "network": NetworkKeys, "output": OutputKeys}
PRESET_DIRS = {"model": "models", "cluster": "clusters", "fabric": "fabrics"}   # sections that may name a preset
TOP_EXTRA = {"preset": "a job preset this job starts from (tracegen presets)",
             "description": "free text, one line in `tracegen presets`"}   # job keys that are not Job fields

# Megatron-LM argument names (dashes as underscores), accepted as synonyms of ours.
ALIASES = {
    "parallelism": {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
                    "data_parallel_size": "dp", "micro_batch_size": "micro_batch",
                    "global_batch_size": "global_batch", "sequence_parallel": "sp",
                    "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
                    "virtual_pipeline_model_parallel_size": "vpp",
                    "recompute_granularity": "recompute", "zero_stage": "zero",
                    "expert_tensor_parallel_size": "expert_tp"},
    "model": {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
              "num_query_groups": "kv_heads", "ffn_hidden_size": "ffn_hidden",
              "seq_length": "seq_len", "padded_vocab_size": "vocab", "vocab_size": "vocab",
              "num_experts": "experts", "moe_router_topk": "top_k",
              "moe_ffn_hidden_size": "moe_ffn_hidden", "kv_channels": "head_dim",
              "use_flash_attn": "flash_attention"},
}

# Keys that moved to another section and stay accepted where they were (old job files, cluster
# presets): cluster.nodes_per_leaf -> fabric.nodes_per_leaf, and so on.
MOVED = {"cluster": {k: "fabric" for k in ("nodes_per_leaf", "spines", "leaf_spine_gbps",
                                           "link_latency_ns")}}


@dataclass(frozen=True)
class Decl:
    """A declared key, as the tables below and the schema read it."""
    typ: type
    default: Any
    doc: str
    lo: float | None
    hi: float | None
    choices: tuple
    zero_or: tuple[float, str] | None
    count: bool


def _decls(cls: type, prefix: str = "") -> dict[str, Decl]:
    hints = typing.get_type_hints(cls)     # annotations are strings under `from __future__`
    out = {}
    for f in fields(cls):
        m, typ = f.metadata, hints[f.name]
        count = m["count"] if m["count"] is not None else (typ is int and (m["lo"] or 0) >= 1)
        out[prefix + f.name] = Decl(typ, f.default, m["doc"], m["lo"], m["hi"], m["choices"], m["zero_or"], count)
    return out


KEYS: dict[str, Decl] = {**_decls(JobKeys), **{k: d for sec, cls in SECTION_KEYS.items()
                                                for k, d in _decls(cls, sec + ".").items()}}
SCALARS = {k: d.typ for k, d in KEYS.items() if "." not in k}
TYPES = {sec: {k.partition(".")[2]: d.typ for k, d in KEYS.items() if k.startswith(sec + ".")}
         for sec in SECTION_KEYS}
RANGES = {k: (d.lo, d.hi, d.doc) for k, d in KEYS.items() if d.lo is not None}
POSITIVE = {k for k, d in KEYS.items() if d.count}
CHOICES = {k: d.choices for k, d in KEYS.items() if d.choices}
ZERO_OR = {k: d.zero_or for k, d in KEYS.items() if d.zero_or}


# Keys that take an ISO 8601 time or integer epoch ns (config.parse_start_time); up to 2100: a
# classic pcap's seconds field is 32 bits unsigned (it wraps in 2106).
TIME_KEYS = {"output.start_time"}
TIME_MAX_NS = 4_102_444_800 * 10**9      # 2100-01-01T00:00:00Z
TIME_PATTERN = (r"^([0-9]{1,19}|[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
                r"([Zz]|[+-][0-9]{2}:?[0-9]{2}))$")


def bounds(rule: str, typ: type = int) -> tuple:
    """(lo, hi) accepted for a numeric key (canonical 'section.key')."""
    if rule in RANGES:
        return RANGES[rule][:2]
    if typ is float:
        return 0.0, FLOAT_MAX
    return (1 if rule in POSITIVE else 0), INT_MAX


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def limits_rows() -> list[tuple[str, str, str]]:
    """(key, accepted values, note) for every numeric or enumerated key, in section order."""
    rows = []
    for k, d in KEYS.items():
        if d.choices:
            rows.append((k, ", ".join(str(c) for c in d.choices if c != ""), d.doc))
        elif k in TIME_KEYS:
            rows.append((k, f"ISO 8601 with a timezone, or epoch ns 0 .. {_num(TIME_MAX_NS - 1)} (1970 .. 2100)", d.doc))
        elif d.typ in (int, float):
            lo, hi = bounds(k, d.typ)
            accepted, note = f"{_num(lo)} .. {_num(hi)}", d.doc
            if d.zero_or:
                accepted, note = f"0, or {_num(d.zero_or[0])} .. {_num(hi)}", f"{d.doc}; {d.zero_or[1]}"
            rows.append((k, accepted, note))
    return rows


def limits_markdown() -> str:
    lines = ["| key | accepted | note |", "|---|---|---|"]
    lines += [f"| `{k}` | {v} | {w} |" for k, v, w in limits_rows()]
    return "\n".join(lines) + "\n"


# --- the JSON Schema for job files ---------------------------------------------------------------
# Draft-07 (what editors' YAML support reads best). Types are strict as the loader is: `true` is no
# number. One difference JSON cannot express: YAML's `2.0` is a float the loader refuses for an
# integer key, while JSON Schema (draft 6 on) counts 2.0 as an integer. It checks each key alone;
# the rules between keys (config.validate) stay the loader's.

# Found from the package root (as the presets are), not from this module: it stays put when
# modules move (tools/layout.map).
SCHEMA_PATH = Path(str(resources.files("tracegen"))) / "schema" / "job.schema.json"
_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _unit(name: str) -> str:
    for suffix, unit in (("_bytes", "bytes"), ("_ns", "ns"), ("_us", "µs"), ("_gbps", "Gb/s"), ("_mbps", "Mb/s")):
        if name.endswith(suffix):
            return unit
    return ""


def _key_schema(name: str, d: Decl) -> dict:
    unit = _unit(name)
    out: dict[str, Any] = {"description": d.doc + (f" [{unit}]" if unit else ""), "default": d.default}
    if d.choices:
        out["enum"] = list(d.choices)
        return out
    if name in TIME_KEYS:    # the loader checks the ISO form itself
        out["type"] = ["string", "integer"]
        out.update(minimum=0, maximum=TIME_MAX_NS - 1, maxLength=64, pattern=TIME_PATTERN)
        return out
    out["type"] = _JSON_TYPES[d.typ]
    if d.typ in (int, float):
        lo, hi = bounds(name, d.typ)
        if d.zero_or:
            out["anyOf"] = [{"const": 0}, {"minimum": d.zero_or[0]}]
        out.update(minimum=lo, maximum=hi)
    if d.typ is str:
        out["maxLength"] = STR_MAX
    return out


def _section_schema(sec: str, presets: dict[str, list[str]]) -> dict:
    props = {k.partition(".")[2]: _key_schema(k, d) for k, d in KEYS.items() if k.startswith(sec + ".")}
    for alias, canon in ALIASES.get(sec, {}).items():
        props[alias] = {**props[canon], "description": f"Megatron-LM's name for {canon}"}
    for moved, home in MOVED.get(sec, {}).items():
        props[moved] = {**_key_schema(f"{home}.{moved}", KEYS[f"{home}.{moved}"]),
                        "description": f"{home}.{moved}, still accepted here"}
    if sec in PRESET_DIRS:
        props["preset"] = {"description": f"a {sec} preset this section starts from", "enum": presets[sec]}
    return {"type": "object", "additionalProperties": False, "properties": props}


def job_schema(presets: dict[str, list[str]]) -> dict:
    """The JSON Schema of a job file; `presets`: preset names by section ('model', ...) and 'jobs'."""
    props: dict[str, Any] = {k: _key_schema(k, d) for k, d in KEYS.items() if "." not in k}
    props["name"].update(pattern=f"^{JOB_NAME}$", maxLength=NAME_MAX)
    props["preset"] = {"description": TOP_EXTRA["preset"], "enum": presets["jobs"]}
    props["description"] = {"description": TOP_EXTRA["description"], "type": "string", "maxLength": STR_MAX}
    for sec in SECTION_KEYS:
        ref = {"$ref": f"#/definitions/{sec}"}
        props[sec] = ({"if": {"type": "string"}, "then": {"enum": presets[sec]}, "else": ref}
                      if sec in PRESET_DIRS else ref)
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "tracegen job",
            "description": "An LLM training job for tracegen (tracegen generate JOB.yaml); every key "
                           "optional. Ranges: docs/limits.md.",
            "type": "object", "additionalProperties": False, "properties": props,
            "definitions": {sec: _section_schema(sec, presets) for sec in SECTION_KEYS}}


def schema_text(presets: dict[str, list[str]]) -> str:
    return json.dumps(job_schema(presets), indent=1, ensure_ascii=False) + "\n"
