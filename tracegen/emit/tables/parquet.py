"""Flow and op tables -> Parquet (pyarrow, optional: `pip install 'tracegen[parquet]'`).

The same columns as flows.csv / ops.csv (emit/tables/flows.py), typed: integer columns keep the numpy
table's dtype (int64 ids and bytes, int32 ranks, int16 channel...), labels are dictionary-encoded
strings (pandas reads them as categoricals), lists (deps, group) are Arrow list<int> columns.
Streamed one row group per batch of rows, so a table of millions of rows never sits in memory
twice. The schema's metadata names the table, the job and the tracegen version.

Reading it back:  pandas.read_parquet("flows.parquet"), polars.read_parquet(...),
duckdb.sql("select dim, sum(bytes) from 'flows.parquet' group by dim").
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ... import progress
from ...errors import OutputError
from .flows import BATCH_ROWS, Column, flow_table_columns, op_table_columns

PARQUET_HINT = "pip install 'tracegen[parquet]' (pyarrow), or set output.tables: csv"


def have_pyarrow() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyarrow") is not None


def pyarrow_modules():
    """(pyarrow, pyarrow.parquet), or the one-line error that says how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise OutputError(f"Parquet output needs pyarrow, which is not installed: {PARQUET_HINT}") from None
    return pa, pq


def _arrow_type(pa, col: Column):
    if col.kind == "int":
        return pa.from_numpy_dtype(np.dtype(col.dtype))
    if col.kind == "label":
        return pa.dictionary(pa.int8(), pa.string())
    return pa.list_(pa.from_numpy_dtype(np.dtype(col.dtype)))


def _arrow_array(pa, col: Column, lo: int, hi: int):
    v = col.get(lo, hi)
    if col.kind == "int":
        return pa.array(np.asarray(v, dtype=col.dtype))
    if col.kind == "label":
        return pa.DictionaryArray.from_arrays(pa.array(np.asarray(v).astype(np.int8)),
                                              pa.array(list(col.labels), pa.string()))
    offsets = pa.array(np.asarray(v.ptr, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.asarray(v.values, dtype=col.dtype)))


def write_parquet(columns: Sequence[Column], n_rows: int, path: Path, metadata: dict[str, str] | None = None,
                  compression: str = "zstd") -> Path:
    pa, pq = pyarrow_modules()
    fields = [pa.field(c.name, _arrow_type(pa, c), nullable=False,
                       metadata={"doc": c.doc} if c.doc else None) for c in columns]
    schema = pa.schema(fields, metadata={k: str(v) for k, v in (metadata or {}).items()})
    with pq.ParquetWriter(str(path), schema, compression=compression) as w:
        for lo in range(0, max(n_rows, 1), BATCH_ROWS):
            hi = min(n_rows, lo + BATCH_ROWS)
            w.write_table(pa.Table.from_arrays([_arrow_array(pa, c, lo, hi) for c in columns], schema=schema),
                          row_group_size=BATCH_ROWS)
            progress.report(hi, n_rows)                         # per row group (the CLI's bar)
    return path


def _meta(table: str, job_name: str) -> dict[str, str]:
    from ... import __version__
    return {"tracegen.table": table, "tracegen.job": job_name, "tracegen.version": __version__,
            "tracegen.units": "time in integer ns (start_ns, end_ns, gap_ns); sizes in bytes"}


def write_flows_parquet(flows, path: Path, job_name: str = "", extra: Sequence[Column] = ()) -> Path:
    return write_parquet(flow_table_columns(flows) + list(extra), len(flows), path, _meta("flows", job_name))


def write_ops_parquet(flows, path: Path, job_name: str = "", extra: Sequence[Column] = ()) -> Path:
    return write_parquet(op_table_columns(flows) + list(extra), len(flows.ops), path, _meta("ops", job_name))
