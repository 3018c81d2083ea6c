"""flows.csv and ops.csv from the compiled formatter (long tables, emit/tables/csv_text.py) are byte for
byte what the Python formatter writes: integers (negative too), labels, ';'-joined lists (empty too)."""
from __future__ import annotations

import numpy as np

from tracegen.config import load_job
from tracegen.emit.tables import flows as flows_out
from tracegen.emit.tables.flows import Column, write_csv
from tracegen.pipeline import run_pipeline
from tracegen.tables import Ragged


def _both(columns, n, tmp_path, monkeypatch):
    monkeypatch.setattr(flows_out, "COMPILED_ROWS", 10**12)
    py = write_csv(columns, n, tmp_path / "py.csv").read_bytes()
    monkeypatch.setattr(flows_out, "COMPILED_ROWS", 0)
    monkeypatch.setattr(flows_out, "BATCH_ROWS", 7)         # blocks and batches cut rows anywhere
    compiled = write_csv(columns, n, tmp_path / "nb.csv").read_bytes()
    return py, compiled


def test_compiled_csv_is_the_python_csv_on_a_real_flow_table(tmp_path, monkeypatch):
    run = run_pipeline(load_job(preset="default", sets=["fabric=leaf-spine-2to1", "parallelism.dp=8",
                                                        "parallelism.global_batch=32"]))
    f = run.flows
    for cols, n in ((flows_out.flow_table_columns(f) + flows_out.fabric_columns(f), len(f)),
                    (flows_out.op_table_columns(f), len(f.ops))):
        py, compiled = _both(cols, n, tmp_path, monkeypatch)
        assert py.count(b"\n") == n + 1 and py == compiled


def test_compiled_csv_edge_values(tmp_path, monkeypatch):
    ints = np.array([0, -1, 9, 10, -10, 2**63 - 1, -(2**63) + 1, 123456789, -5, 99], np.int64)
    ptr = np.array([0, 0, 3, 3, 4, 4, 4, 6, 6, 6, 8])                 # empty lists among them
    rag = Ragged(ptr, np.array([1, -22, 333, 0, 5, 6, 7, 8]))
    cols = [Column("i", "int", lambda lo, hi: ints[lo:hi], "i8"),
            Column("l", "label", lambda lo, hi: (np.arange(10) % 3)[lo:hi].astype(np.uint8), "u1",
                   ("ring", "", "tree")),
            Column("d", "list", lambda lo, hi: Ragged(ptr[lo:hi + 1] - ptr[lo], rag.values[ptr[lo]:ptr[hi]]), "i8")]
    py, compiled = _both(cols, 10, tmp_path, monkeypatch)
    assert py == compiled
    assert py.splitlines()[1:3] == [b"0,ring,", b"-1,,1;-22;333"] and b"9223372036854775807," in py
