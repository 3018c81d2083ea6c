"""The expected switch counters (emit/views/counters.py) as port_counters.csv / .parquet, beside
the switch view's pcap/ folder: one row per port and 802.1p priority, integer columns but for
the names (switch, port = the capture file's name, peer)."""
from __future__ import annotations

from pathlib import Path

from .parquet import pyarrow_modules

NAMES = ("switch", "port", "peer")


def write_counters(columns, rows, dest: Path, formats, job_name: str = "") -> list[Path]:
    """Write rows (tuples in `columns` order) as port_counters.csv and/or .parquet into dest."""
    paths = []
    if "csv" in formats:
        path = dest / "port_counters.csv"
        with open(path, "w", newline="\n") as f:
            f.write(",".join(columns) + "\n")
            for r in rows:
                f.write(",".join(str(v) for v in r) + "\n")
        paths.append(path)
    if "parquet" in formats:
        pa, pq = pyarrow_modules()
        arrays = [pa.array([r[i] for r in rows], pa.string() if c in NAMES else pa.int64())
                  for i, c in enumerate(columns)]
        table = pa.Table.from_arrays(arrays, names=list(columns))
        from ... import __version__
        table = table.replace_schema_metadata({"tracegen.table": "port_counters", "tracegen.job": job_name,
                                               "tracegen.version": __version__,
                                               "tracegen.units": "frames; bytes with FCS"})
        path = dest / "port_counters.parquet"
        pq.write_table(table, str(path), compression="zstd")
        paths.append(path)
    return paths
