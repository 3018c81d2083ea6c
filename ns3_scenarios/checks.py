"""Strict reading of the files `tracegen ns3 run` / `ns3 compare` take from a user's folder.

A damaged file (cut short, binary, hand-edited, of another tool) becomes one ConfigError naming
the file and what is wrong, before anything is simulated or written: regular files only (no
devices or pipes), UTF-8, JSON objects without duplicate keys, and every manifest field the
replay and the reports use present with its type and range.
"""
from __future__ import annotations

import json
from pathlib import Path

from tracegen.errors import ConfigError

_BIG = 1 << 62


def read_text(path: Path, what: str = "file") -> str:
    """A regular file's UTF-8 text."""
    if not path.is_file():
        raise ConfigError(f"{path}: missing, or not a regular file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text {what} (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None


def load_json(path: Path, what: str) -> dict:
    """A JSON object; duplicate keys refused, runaway nesting one line (RecursionError)."""
    text = read_text(path, what)

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise ValueError(f"the key {dup!r} appears twice in one object")
        return dict(pairs)

    try:
        obj = json.loads(text, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: not a readable {what} ({' '.join(str(e).split())})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: not a {what} (a JSON {type(obj).__name__}, not an object)")
    return obj


# --- manifest.json ------------------------------------------------------------------------------

INT, BOOL, STR, INTS, HEX = "an integer >= 0", "true or false", "a string", "a list of integers >= 0", \
    "a hex string"
FLOW = {"src_nic": INT, "dst_nic": INT, "bytes": INT, "hpcc_sport": INT, "transfer_id": INT,
        "start_ns": INT, "end_ns": INT, "op_id": INT, "deps": INTS, "sip": HEX, "dip": HEX,
        "dim": STR, "kind": STR}
FLOW_OPTIONAL = {"wire_bytes": INT, "qp": INT, "host_sport": INT}
OP = {"op_id": INT, "deps": INTS, "gap_ns": INT, "op_start_ns": INT, "op_end_ns": INT,
      "net": BOOL, "kind": STR, "dim": STR}
OP_OPTIONAL = {"iteration": INT, "bytes": INT, "ranks": INT}
LOCAL = {"transfer_id": INT, "op_id": INT, "start_ns": INT, "end_ns": INT, "deps": INTS}
QP = {"qp": INT, "src": INT, "dst": INT, "sqpn": INT, "dqpn": INT, "sport": INT}
QP_OPTIONAL = {"path": INTS, "rpath": INTS}
SIM_OPTIONAL = {"nic_sharing": STR, "cnp_interval_ns": INT}
PFC_OPTIONAL = {"enabled": BOOL, "buffer_bytes": INT, "xoff_bytes": INT,
                "resume_offset_bytes": INT, "headroom_bytes": INT, "pause_quanta": INT}
DCQCN_OPTIONAL = {"byte_reset_bytes": INT, "per_message_reset": BOOL}
RANGES = {"hpcc_sport": 65535, "host_sport": 65535, "sport": 65535, "sqpn": 0xFFFFFF,
          "dqpn": 0xFFFFFF, "pause_quanta": 65535, "byte_reset_bytes": 1 << 40}


def _ok(value, kind: str) -> bool:
    if kind == INT:
        return type(value) is int and 0 <= value < _BIG
    if kind == BOOL:
        return type(value) is bool
    if kind == STR:
        return type(value) is str
    if kind == HEX:
        return type(value) is str and 0 < len(value) <= 8 and all(c in "0123456789abcdefABCDEF"
                                                                  for c in value)
    return type(value) is list and all(type(x) is int and 0 <= x < _BIG for x in value)


def _check_record(path: Path, where: str, rec, need: dict, optional: dict) -> None:
    if type(rec) is not dict:
        raise ConfigError(f"{path}: {where} is not an object; regenerate the scenario")
    for keys, required in ((need, True), (optional, False)):
        for key, kind in keys.items():
            if key not in rec:
                if required:
                    raise ConfigError(f"{path}: {where} has no {key!r}; regenerate the scenario")
                continue
            v = rec[key]
            if not _ok(v, kind) or (key in RANGES and v > RANGES[key]):
                top = f" <= {RANGES[key]}" if key in RANGES else ""
                raise ConfigError(f"{path}: {where}.{key} is {json.dumps(v)[:40]}, expected "
                                  f"{kind}{top}; regenerate the scenario")


def check_manifest(path: Path, man: dict) -> None:
    """Every field the replay, the run's outputs and ns3 compare read, typed and in range."""
    if not _ok(man.get("t0_ns", 0), INT):
        raise ConfigError(f"{path}: t0_ns is not an integer >= 0; regenerate the scenario")
    for name in ("flows", "ops", "local_transfers", "qps"):
        if name in man and type(man[name]) is not list:
            raise ConfigError(f"{path}: {name} is not a list; regenerate the scenario")
    tables = (("flows", FLOW, FLOW_OPTIONAL), ("ops", OP, OP_OPTIONAL),
              ("local_transfers", LOCAL, {}), ("qps", QP, QP_OPTIONAL))
    for name, need, optional in tables:
        for i, rec in enumerate(man.get(name) or []):
            _check_record(path, f"{name}[{i}]", rec, need, optional)
    sim = man.get("sim")
    if sim is not None:
        _check_record(path, "sim", sim, {}, SIM_OPTIONAL)
        for key, optional in (("pfc", PFC_OPTIONAL), ("dcqcn", DCQCN_OPTIONAL)):
            if key in sim:
                _check_record(path, f"sim.{key}", sim[key], {}, optional)
        if (sim.get("pfc") or {}).get("pause_quanta", 1) < 1:
            raise ConfigError(f"{path}: sim.pfc.pause_quanta is 0, expected 1..65535")
