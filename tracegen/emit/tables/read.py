"""Reading a written trace folder back (`tracegen report`): summary.json and the flow and op tables
(flows.parquet or flows.csv, ops.*), checked as they are read.

A trace folder is input like a job file: a cut, binary or hand-edited file is one line naming the
file, the line or key, and what is wrong (ConfigError, exit 2) - never a traceback from deep in a
picture. Checked: JSON syntax and the types of the keys the pictures use; every CSV row has the
header's fields; integers are integers, labels are known (Dim, LinkKind, CollKind), ranks and
NICs are in range (NVLink rows have NIC -1), a group lists ranks.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...config import show
from ...errors import ConfigError, OutputError
from ...tables import CollKind, Dim, LinkKind, Ragged

SUMMARY_MAX_BYTES = 1 << 30
FLOW_COLUMNS = ["src_rank", "dst_rank", "src_nic", "dst_nic", "link", "dim", "bytes", "start_ns", "end_ns"]
OP_COLUMNS = ["collective", "dim", "iteration", "gap_ns", "start_ns", "end_ns", "group"]
LISTS = {"group", "deps", "route"}
LABELS = {"link": {k.name for k in LinkKind}, "dim": {k.name for k in Dim},
          "collective": {k.label for k in CollKind}}
_FIX = "the file is damaged: write the trace again (tracegen generate)"


def _bad(path: Path, where: str, what: str) -> ConfigError:
    return ConfigError(f"{path}{': ' + where if where else ''}: {what}; {_FIX}")


# --- summary.json --------------------------------------------------------------------------------

def read_summary(trace_dir: Path) -> dict:
    """summary.json with the keys a picture reads, type-checked."""
    path = Path(trace_dir) / "summary.json"
    if not path.is_file():
        raise OutputError(f"{trace_dir}: no summary.json — give a folder written by `tracegen generate`")
    if path.stat().st_size > SUMMARY_MAX_BYTES:
        raise _bad(path, "", f"larger than {SUMMARY_MAX_BYTES >> 20} MiB")
    try:
        text = path.read_bytes().decode("utf-8")
        meta = json.loads(text)
    except UnicodeDecodeError as e:
        raise _bad(path, f"byte {e.start}", "not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise _bad(path, f"line {e.lineno} column {e.colno}", f"not JSON ({e.msg})") from None
    except RecursionError:
        raise _bad(path, "", "nested too deeply") from None
    if not isinstance(meta, dict):
        raise _bad(path, "", f"a JSON object is expected, not {type(meta).__name__}")
    job = _key(path, meta, "job", dict)
    _key(path, job, "name", str, "job.")
    world = _key(path, meta, "world", int)
    if world < 1:
        raise _bad(path, "world", f"{world} ranks")
    names = _key(path, meta, "nic_names", list)
    if not all(isinstance(n, str) for n in names):
        raise _bad(path, "nic_names", "a list of names is expected")
    for key in ("nic_node", "nic_rail"):
        vals = _key(path, meta, key, list)
        if len(vals) != len(names) or not all(_is_int(v) and v >= 0 for v in vals):
            raise _bad(path, key, f"one integer >= 0 per NIC of nic_names ({len(names)}) is expected, "
                                  f"not {show(vals)}")
    lu = meta.get("link_utilisation", {})
    if lu:
        _check_utilisation(path, lu)
    return meta


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _key(path: Path, doc: dict, key: str, kind: type, prefix: str = ""):
    if key not in doc:
        raise _bad(path, "", f"no key {prefix}{key}")
    v = doc[key]
    if (kind is int and not _is_int(v)) or (kind is not int and not isinstance(v, kind)):
        what = {int: "an integer", str: "a string", list: "a list", dict: "an object"}[kind]
        raise _bad(path, f"{prefix}{key}", f"{show(v)} is not {what}")
    return v


def _check_utilisation(path: Path, lu) -> None:
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
    ok = (isinstance(lu, dict) and num(lu.get("bin_ns")) and lu["bin_ns"] > 0
          and isinstance(lu.get("name"), list) and isinstance(lu.get("gbps"), list)
          and isinstance(lu.get("util"), list)
          and len(lu["name"]) == len(lu["gbps"]) == len(lu["util"])
          and all(isinstance(n, str) for n in lu["name"]) and all(num(g) for g in lu["gbps"])
          and all(isinstance(u, list) and all(num(x) for x in u) for u in lu["util"])
          and len({len(u) for u in lu["util"]}) <= 1)
    if not ok:
        raise _bad(path, "link_utilisation", "bin_ns > 0 and equally long lists name, gbps, util are expected")


# --- flow and op tables --------------------------------------------------------------------------

def read_table(trace_dir: Path, name: str, columns: list[str]) -> dict:
    """Columns of <name>.parquet (preferred) or <name>.csv: ints as int64 arrays, labels as lists
    of str, list columns (`group`, `deps`) as Ragged."""
    trace_dir = Path(trace_dir)
    pq_path, csv_path = trace_dir / f"{name}.parquet", trace_dir / f"{name}.csv"
    if pq_path.is_file():
        return _read_parquet(pq_path, columns)
    if not csv_path.is_file():
        raise OutputError(f"{trace_dir}: neither {name}.parquet nor {name}.csv — give a folder written by "
                          "`tracegen generate`")
    return _read_csv(csv_path, columns)


def _read_parquet(path: Path, columns: list[str]) -> dict:
    from .parquet import pyarrow_modules
    pa, pq = pyarrow_modules()
    try:
        schema = pq.read_schema(str(path))
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise _bad(path, "", f"no column {missing[0]!r}")
        t = pq.read_table(str(path), columns=columns)
        out = {}
        for c in columns:
            col = t.column(c).combine_chunks()
            if pa.types.is_dictionary(col.type):
                out[c] = np.asarray(col.dictionary.to_pylist(), dtype=object)[
                    col.indices.to_numpy(zero_copy_only=False)].tolist() if len(col) else []
            elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
                if col.null_count or col.values.null_count or not pa.types.is_integer(col.values.type):
                    raise _bad(path, f"column {c}", "lists of integers are expected")
                ptr = col.offsets.to_numpy().astype(np.int64)
                out[c] = Ragged(ptr - ptr[0], col.values.to_numpy(zero_copy_only=False).astype(np.int64)
                                [ptr[0]:ptr[-1]] if len(col.values) else np.zeros(0, np.int64))
            elif pa.types.is_integer(col.type) and not col.null_count:
                out[c] = col.to_numpy(zero_copy_only=False).astype(np.int64)
            elif pa.types.is_string(col.type) and not col.null_count:
                out[c] = col.to_pylist()
            else:
                raise _bad(path, f"column {c}", f"unexpected type {col.type}")
    except (OSError, pa.ArrowException) as e:
        if isinstance(e, OSError) and not isinstance(e, pa.ArrowException) and e.errno is not None:
            raise OutputError(f"{path}: cannot read it ({e.strerror})") from None
        raise _bad(path, "", f"not a readable Parquet file ({' '.join(str(e).split())[:120]})") from None
    _check_columns(path, out, columns, lambda i: f"row {i + 1}")
    return out


def _read_csv(path: Path, columns: list[str]) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise OutputError(f"{path}: cannot read it ({e.strerror})") from None
    line_of = lambda at: data.count(b"\n", 0, at) + 1
    nul = data.find(b"\0")
    if nul >= 0:
        raise _bad(path, f"line {line_of(nul)}", "binary data, not CSV text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, f"line {line_of(e.start)}", "not UTF-8 text") from None
    if not text:
        raise _bad(path, "", "empty (no header line)")
    if not text.endswith("\n"):
        raise _bad(path, f"line {line_of(len(data))}", "the last line has no end: the file is cut")
    lines = text.split("\n")[:-1]
    header = lines[0].rstrip("\r").split(",")
    missing = [c for c in columns if c not in header]
    if missing:
        raise _bad(path, "line 1", f"no column {missing[0]!r}")
    idx = [header.index(c) for c in columns]
    raw = [line.rstrip("\r").split(",") for line in lines[1:]]
    for k, row in enumerate(raw):
        if len(row) != len(header):
            raise _bad(path, f"line {k + 2}", f"{len(row)} fields, the header has {len(header)}")
    out = {}
    for c, i in zip(columns, idx):
        vals = [row[i] for row in raw]
        if c in LISTS:
            out[c] = _ragged(path, c, vals)
        elif c in LABELS:
            out[c] = vals
        else:
            out[c] = _ints(path, c, vals)
    _check_columns(path, out, columns, lambda r: f"line {r + 2}")
    return out


def _int(text: str) -> int | None:
    """An int64 written as decimal digits, else None."""
    if len(text) > 20 or not text.lstrip("-").isascii():
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if -(1 << 63) <= v < 1 << 63 else None


def _ints(path: Path, c: str, vals: list[str]) -> np.ndarray:
    try:
        return np.array(vals, dtype=np.int64) if vals else np.zeros(0, np.int64)
    except (ValueError, OverflowError):
        bad = next(k for k, v in enumerate(vals) if _int(v) is None)
        raise _bad(path, f"line {bad + 2} column {c}", f"{show(vals[bad])} is not an integer") from None


def _ragged(path: Path, c: str, vals: list[str]) -> Ragged:
    lists = []
    for k, v in enumerate(vals):
        row = [_int(p) for p in v.split(";")] if v else []
        if None in row:
            raise _bad(path, f"line {k + 2} column {c}", f"{show(v)} is not a ';' list of integers")
        lists.append(row)
    return Ragged.from_lists(lists)


def _check_columns(path: Path, out: dict, columns: list[str], where) -> None:
    for c in columns:
        if c in LABELS:
            known = LABELS[c]
            bad = next((k for k, v in enumerate(out[c]) if v not in known), None)
            if bad is not None:
                raise _bad(path, f"{where(bad)} column {c}", f"{show(out[c][bad])} is none of "
                                                             f"{', '.join(sorted(known))}")
        elif c not in LISTS and not isinstance(out[c], np.ndarray):
            raise _bad(path, f"column {c}", "integers are expected")
    lengths = {len(out[c]) for c in columns}
    if len(lengths) > 1:
        raise _bad(path, "", "columns of different lengths")


def check_ranges(trace_dir: Path, flows: dict, ops: dict, world: int, n_nics: int) -> None:
    """Ranks, NICs and times the pictures index with, against summary.json's world and NICs."""
    def at(name: str, k: int) -> str:                 # a data row as its line (CSV) or row (Parquet)
        return f"line {k + 2}" if _file(trace_dir, name).suffix == ".csv" else f"row {k + 1}"

    def first_bad(arr: np.ndarray, lo: int, hi: int):
        bad = np.flatnonzero((arr < lo) | (arr >= hi))
        return int(bad[0]) if len(bad) else None
    for name, table, checks in (
            ("flows", flows, [("src_rank", 0, world), ("dst_rank", 0, world), ("src_nic", -1, n_nics),
                              ("dst_nic", -1, n_nics), ("bytes", 0, 1 << 62), ("start_ns", 0, 1 << 62),
                              ("end_ns", 0, 1 << 62)]),
            ("ops", ops, [("iteration", 0, 1 << 31), ("gap_ns", 0, 1 << 62), ("start_ns", -1, 1 << 62),
                          ("end_ns", -1, 1 << 62)])):
        for c, lo, hi in checks:
            k = first_bad(table[c], lo, hi)
            if k is not None:
                raise _bad(_file(trace_dir, name), f"{at(name, k)} column {c}",
                           f"{int(table[c][k])} is outside {lo}..{hi - 1}"
                           + (" (summary.json)" if hi in (world, n_nics) else ""))
    k = first_bad(ops["group"].values, 0, world)
    if k is not None:
        raise _bad(_file(trace_dir, "ops"), "column group", f"rank {int(ops['group'].values[k])} is outside "
                                                            f"0..{world - 1} (summary.json world)")
    k = np.flatnonzero(flows["end_ns"] < flows["start_ns"])
    if len(k):
        raise _bad(_file(trace_dir, "flows"), at("flows", int(k[0])), "end_ns before start_ns")
    net = np.array([x == "NET" for x in flows["link"]], bool)
    k = np.flatnonzero(net & ((flows["src_nic"] < 0) | (flows["dst_nic"] < 0)))
    if len(k):
        raise _bad(_file(trace_dir, "flows"), at("flows", int(k[0])), "a NET transfer without its NICs")


def _file(trace_dir: Path, name: str) -> Path:
    pq = Path(trace_dir) / f"{name}.parquet"
    return pq if os.path.isfile(pq) else Path(trace_dir) / f"{name}.csv"
