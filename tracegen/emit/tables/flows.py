"""Flow table and op table -> rows of named, typed columns: the schedule as data.

One column list per table (`FLOW_COLUMNS`, `OP_COLUMNS`) is what every table writer reads:
flows.csv / ops.csv here, flows.parquet / ops.parquet in `parquet.py`. A column is read in
batches of rows (`batch(lo, hi)`), so a table of millions of rows streams in bounded memory.

Three kinds of column:
  * "int": a numpy integer column, written with its numpy dtype (Parquet) or in decimal (CSV);
  * "label": an enum code (uint8) shown by its name, e.g. dim=TP, link=NVLINK;
  * "list": a list of ints per row (deps, an op's group of ranks); ';'-joined in CSV.

Extra columns (the fabric's per-flow `route`, say) are `Column`s passed as `extra=` to the writers:
they go after the built-in ones, in both formats, without touching this list.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ... import progress
from ...tables import Algo, CollKind, Dim, Flows, LinkKind, Phase, Proto, Ragged

BATCH_ROWS = 1 << 18   # rows per CSV write / per Parquet row group (256 Ki rows)


@dataclass(frozen=True)
class Column:
    """A table column read in row batches: `get(lo, hi)` returns
    int -> ndarray of `dtype`; label -> uint8 codes into `labels`; list -> Ragged of rows lo..hi."""
    name: str
    kind: str                                  # "int" | "label" | "list"
    get: Callable[[int, int], object]
    dtype: str = "i8"                          # int columns: numpy dtype; list: element dtype
    labels: tuple[str, ...] = ()               # label columns: names, indexed by code
    doc: str = ""


def _names(enum) -> tuple[str, ...]:
    """Names indexed by code (codes of every enum here are 0..n-1)."""
    names = [""] * (max(int(e) for e in enum) + 1)
    for e in enum:
        names[int(e)] = e.name
    return tuple(names)


COLL_LABELS = tuple(k.label for k in sorted(CollKind, key=int))


def _ragged_rows(rag: Ragged, lo: int, hi: int, index: np.ndarray | None = None) -> Ragged:
    """Rows lo..hi of a CSR list (or rows `index`), as a CSR list of their own."""
    if index is None:
        ptr = rag.ptr[lo:hi + 1]
        return Ragged(ptr - ptr[0], rag.values[ptr[0]:ptr[-1]])
    starts, ends = rag.ptr[index], rag.ptr[index + 1]
    lens = ends - starts
    ptr = np.zeros(len(index) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    pos = np.repeat(starts - ptr[:-1], lens) + np.arange(ptr[-1])
    return Ragged(ptr, rag.values[pos])


def flow_table_columns(flows: Flows) -> list[Column]:
    """The flow table: one row per transfer, its CommOp's attributes joined on (as flows.csv)."""
    rows, ops = flows.rows, flows.ops.rows

    def row(field, dtype):
        return Column(field, "int", lambda lo, hi: rows[field][lo:hi].astype(dtype, copy=False), dtype)

    def op(field, dtype, name=None):
        return Column(name or field, "int",
                      lambda lo, hi: ops[field][rows["op_id"][lo:hi]].astype(dtype, copy=False), dtype)

    def op_label(field, name, labels):
        return Column(name, "label", lambda lo, hi: ops[field][rows["op_id"][lo:hi]], "u1", labels)

    def row_label(field, name, labels):
        return Column(name, "label", lambda lo, hi: rows[field][lo:hi], "u1", labels)

    return [
        row("transfer_id", "i8"), row("op_id", "i8"), op("iteration", "i4"),
        op_label("dim", "dim", _names(Dim)), op_label("kind", "collective", COLL_LABELS),
        op_label("phase", "phase", _names(Phase)),
        op("stage", "i4"), op("layer", "i4"), op("microbatch", "i4"), op("bucket", "i4"),
        row_label("algo", "algorithm", _names(Algo)),
        row("step", "i4"), row("channel", "i2"), row("chunk", "i4"),
        row("src_rank", "i4"), row("dst_rank", "i4"), row("src_nic", "i4"), row("dst_nic", "i4"),
        row_label("link", "link", _names(LinkKind)), row_label("proto", "protocol", _names(Proto)),
        row("bytes", "i8"), row("wire_bytes", "i8"), row("max_msg_bytes", "i8"),
        row("start_ns", "i8"), row("end_ns", "i8"),
        Column("deps", "list", lambda lo, hi: _ragged_rows(flows.deps, lo, hi), "i8",
               doc="transfer ids whose data this transfer needs"),
    ]


def fabric_columns(flows: Flows) -> list[Column]:
    """The fabric's per-flow columns, when the schedule routed its flows (Flows.conns):
    `route` - the link-direction ids (summary.json `links`) of its connection's first QP, NIC tx
    first (empty on NVLink); `net_wire_bytes` - what it puts on each of those links, RoCE
    headers, FCS, preamble and gap included (0 on NVLink)."""
    if flows.conns is None or flows.row_conn is None or flows.row_net_wire is None:
        return []
    conns, row_conn, net_wire = flows.conns, flows.row_conn, flows.row_net_wire

    def route(lo, hi):
        c = row_conn[lo:hi]
        r = np.full((len(c), conns.route.shape[1]), -1, np.int64)    # NVLink rows: no route
        net = c >= 0                                 # (a one-node job has no connection at all)
        r[net] = conns.route[c[net] * conns.qps]
        keep = r >= 0
        ptr = np.zeros(hi - lo + 1, np.int64)
        np.cumsum(keep.sum(axis=1), out=ptr[1:])
        return Ragged(ptr, r[keep].astype(np.int64))
    return [Column("route", "list", route, "i8", doc="link directions crossed (summary.json links)"),
            Column("net_wire_bytes", "int", lambda lo, hi: net_wire[lo:hi].astype(np.int64), "i8",
                   doc="bytes on each link of the route, headers included")]


def op_table_columns(flows: Flows) -> list[Column]:
    """The op table: one row per CommOp, with its scheduled release and end."""
    ops = flows.ops.rows
    n = len(ops)
    none = np.full(n, -1, np.int64)
    start = flows.op_start_ns if flows.op_start_ns is not None else none
    end = flows.op_end_ns if flows.op_end_ns is not None else none

    def col(field, dtype, name=None, src=None):
        src = ops[field] if src is None else src
        return Column(name or field, "int", lambda lo, hi: src[lo:hi].astype(dtype, copy=False), dtype)

    def label(field, name, labels):
        return Column(name, "label", lambda lo, hi: ops[field][lo:hi], "u1", labels)

    return [
        col("op_id", "i8"), col("iteration", "i4"),
        label("dim", "dim", _names(Dim)), label("kind", "collective", COLL_LABELS),
        label("phase", "phase", _names(Phase)),
        col("stage", "i4"), col("layer", "i4"), col("microbatch", "i4"), col("bucket", "i4"),
        col("bytes", "i8"), col("elem_bytes", "u1"), col("gap_ns", "i8"),
        col(None, "i8", "start_ns", start), col(None, "i8", "end_ns", end),
        Column("group", "list", lambda lo, hi: _ragged_rows(flows.ops.groups, lo, hi), "i4",
               doc="ranks taking part, in ring order (p2p: src, dst)"),
        Column("deps", "list", lambda lo, hi: _ragged_rows(flows.ops.deps, lo, hi), "i8",
               doc="op ids that complete before this op is released"),
    ]


COLUMNS = [   # flows.csv header (flow_table_columns names, checked by the tests)
    "transfer_id", "op_id", "iteration", "dim", "collective", "phase", "stage", "layer",
    "microbatch", "bucket", "algorithm", "step", "channel", "chunk", "src_rank", "dst_rank",
    "src_nic", "dst_nic", "link", "protocol", "bytes", "wire_bytes", "max_msg_bytes",
    "start_ns", "end_ns", "deps"]


def _csv_strings(col: Column, lo: int, hi: int) -> list[str]:
    v = col.get(lo, hi)
    if col.kind == "int":
        return v.tolist()
    if col.kind == "label":
        return np.array(col.labels, dtype=object)[v].tolist()
    ptr, vals = v.ptr.tolist(), v.values.astype(str).tolist()
    return [";".join(vals[ptr[i]:ptr[i + 1]]) for i in range(len(ptr) - 1)]


COMPILED_ROWS = 100_000     # tables this long go through csv_text's compiled formatter (same bytes)


def write_csv(columns: Sequence[Column], n_rows: int, path: Path) -> Path:
    """No field holds a comma or a quote (labels are words, lists are ';'-joined), so a plain
    format string writes valid CSV at twice csv.writer's speed; batch by batch. Long tables are
    formatted by compiled code (emit/tables/csv_text.py), 5x faster, to the same bytes."""
    line = ",".join(["%s"] * len(columns)) + "\n"
    with open(path, "wb") as f:
        f.write((",".join(c.name for c in columns) + "\n").encode())
        for lo in range(0, n_rows, BATCH_ROWS):
            hi = min(n_rows, lo + BATCH_ROWS)
            if n_rows >= COMPILED_ROWS:
                from .csv_text import csv_rows
                for at in range(lo, hi, progress.BLOCK_ROWS):
                    f.write(csv_rows(columns, at, min(hi, at + progress.BLOCK_ROWS)))
                    progress.report(min(hi, at + progress.BLOCK_ROWS), n_rows)
                continue
            rows = zip(*(_csv_strings(c, lo, hi) for c in columns))
            for at in range(lo, hi, progress.BLOCK_ROWS):       # the CLI's bar, per block of rows
                f.write("".join(line % row for row in islice(rows, progress.BLOCK_ROWS)).encode())
                progress.report(min(hi, at + progress.BLOCK_ROWS), n_rows)
    return path


def write_flows_csv(flows: Flows, path: Path, extra: Sequence[Column] = ()) -> Path:
    return write_csv(flow_table_columns(flows) + list(extra), len(flows), path)


def write_ops_csv(flows: Flows, path: Path, extra: Sequence[Column] = ()) -> Path:
    return write_csv(op_table_columns(flows) + list(extra), len(flows.ops), path)
