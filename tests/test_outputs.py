"""Issue 16: the formats people analyse with (Parquet, Perfetto), the pictures, `tracegen report`,
the plan at 100 columns and the options summary.md records."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import load_job
from tracegen.emit.tables import flows as flowmod
from tracegen.errors import ConfigError
from tracegen.pipeline import run_pipeline
from tracegen.tables import Algo, CollKind, Dim, LinkKind, Phase, Proto

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def run():
    return run_pipeline(load_job())


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "default"
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "output.tables=csv,parquet",
                                    "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out


# --- Parquet -----------------------------------------------------------------------------------

def _codes(enum, names):
    return np.array([enum[n].value for n in names], np.uint8)


def test_flows_parquet_round_trips_to_the_numpy_table(run, trace):
    t = pq.read_table(trace / "flows.parquet")
    assert t.column_names == flowmod.COLUMNS + ["route", "net_wire_bytes"]     # + the fabric's
    f, r, ops = run.flows, run.flows.rows, run.flows.ops.rows
    net = r["link"] == 1
    assert np.array_equal(np.array(t.column("net_wire_bytes").to_pylist())[net], f.row_net_wire[net])
    routes = t.column("route").to_pylist()
    assert all(len(routes[i]) >= 2 for i in np.flatnonzero(net)) and all(not routes[i] for i in np.flatnonzero(~net))
    for c in flowmod.flow_table_columns(f):
        if c.kind == "int":
            assert t.schema.field(c.name).type == pa.from_numpy_dtype(np.dtype(c.dtype)), c.name
    # every FLOW_DTYPE field comes back with its value and dtype
    for name in r.dtype.names:
        col = {"algo": "algorithm", "proto": "protocol"}.get(name, name)
        got = t.column(col).to_pylist()
        if name == "algo":
            got = _codes(Algo, got)
        elif name == "proto":
            got = _codes(Proto, got)
        elif name == "link":
            got = _codes(LinkKind, got)
        got = np.asarray(got).astype(r.dtype[name])
        np.testing.assert_array_equal(got, r[name], err_msg=name)
        if name not in ("algo", "proto", "link"):
            assert t.column(col).type == pa.from_numpy_dtype(r.dtype[name]), name
    # the op attributes joined on, and the deps as lists
    op = ops[r["op_id"]]
    np.testing.assert_array_equal(_codes(Dim, t.column("dim").to_pylist()), op["dim"])
    np.testing.assert_array_equal(_codes(Phase, t.column("phase").to_pylist()), op["phase"])
    kinds = {k.label: int(k) for k in CollKind}
    np.testing.assert_array_equal([kinds[x] for x in t.column("collective").to_pylist()], op["kind"])
    for name in ("iteration", "stage", "layer", "microbatch", "bucket"):
        np.testing.assert_array_equal(t.column(name).to_numpy(), op[name])
    assert t.column("deps").to_pylist() == [f.deps[i].tolist() for i in range(len(f))]
    assert t.schema.metadata[b"tracegen.table"] == b"flows"


def test_ops_parquet_round_trips(run, trace):
    t = pq.read_table(trace / "ops.parquet")
    ops, f = run.flows.ops, run.flows
    for name in ("op_id", "iteration", "stage", "layer", "microbatch", "bucket", "bytes", "elem_bytes", "gap_ns"):
        np.testing.assert_array_equal(t.column(name).to_numpy(), ops.rows[name])
        assert t.column(name).type == pa.from_numpy_dtype(ops.rows.dtype[name])
    np.testing.assert_array_equal(t.column("start_ns").to_numpy(), f.op_start_ns)
    np.testing.assert_array_equal(t.column("end_ns").to_numpy(), f.op_end_ns)
    assert t.column("group").to_pylist() == [ops.groups[i].tolist() for i in range(len(ops))]
    assert t.column("deps").to_pylist() == [ops.deps[i].tolist() for i in range(len(ops))]


def test_parquet_and_csv_hold_the_same_rows(trace):
    import csv
    t = pq.read_table(trace / "flows.parquet")
    with open(trace / "flows.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == t.column_names and len(rows) - 1 == t.num_rows
    first = [str(v) if not isinstance(v, list) else ";".join(map(str, v)) for v in
             [t.column(c)[5].as_py() for c in t.column_names]]
    assert rows[6] == first
    with open(trace / "ops.csv") as fh:
        assert next(csv.reader(fh))[-2:] == ["group", "deps"]


def test_parquet_streams_in_row_groups(run, tmp_path, monkeypatch):
    from tracegen.emit.tables import parquet as tables_out
    monkeypatch.setattr(tables_out, "BATCH_ROWS", 100)
    monkeypatch.setattr(flowmod, "BATCH_ROWS", 100)
    path = tables_out.write_flows_parquet(run.flows, tmp_path / "f.parquet")
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == -(-len(run.flows) // 100) and meta.num_rows == len(run.flows)
    assert pq.read_table(path).column("transfer_id").to_pylist() == run.flows.rows["transfer_id"].tolist()


def test_extra_columns_go_after_the_built_in_ones(run, tmp_path):
    """The place the fabric work's `route` column plugs in, for both formats."""
    from tracegen.emit.tables.parquet import write_flows_parquet
    from tracegen.tables import Ragged
    routes = Ragged.from_lists([[7, int(i) % 3] for i in range(len(run.flows))])
    route = flowmod.Column("route", "list", lambda lo, hi: flowmod._ragged_rows(routes, lo, hi), "i4",
                           doc="simulator node ids crossed")
    write_flows_parquet(run.flows, tmp_path / "f.parquet", extra=[route])
    flowmod.write_flows_csv(run.flows, tmp_path / "f.csv", extra=[route])
    t = pq.read_table(tmp_path / "f.parquet")
    assert t.column_names == flowmod.COLUMNS + ["route"]
    assert t.column("route").to_pylist()[:4] == [[7, 0], [7, 1], [7, 2], [7, 0]]
    lines = (tmp_path / "f.csv").read_text().splitlines()
    assert lines[0].endswith(",deps,route") and lines[2].endswith(",7;1")


def test_parquet_without_pyarrow_is_one_clear_line(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        load_job(sets=["output.tables=csv,parquet"])
    assert str(e.value) == ("output.tables=parquet needs pyarrow, which is not installed: "
                            "pip install 'tracegen[parquet]', or set output.tables=csv")
    res = CliRunner().invoke(main, ["generate", "--set", "output.tables=parquet"])
    assert res.exit_code == 2 and "tracegen[parquet]" in res.output and "Traceback" not in res.output


def test_tables_option_is_checked():
    with pytest.raises(ConfigError, match="output.tables='xlsx': use csv, parquet or csv,parquet"):
        load_job(sets=["output.tables=xlsx"])


# --- Perfetto ----------------------------------------------------------------------------------

REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "args"},
            "s": {"name", "cat", "ph", "ts", "pid", "tid", "id"}, "f": {"name", "cat", "ph", "ts", "pid", "tid", "id", "bp"}}


def check_trace_events(doc: dict) -> dict:
    """The trace-event format as Perfetto / chrome://tracing read it; returns the slices by thread."""
    assert isinstance(doc["traceEvents"], list)
    slices: dict = {}
    flows: dict = {}
    for ev in doc["traceEvents"]:
        ph = ev["ph"]
        assert ph in REQUIRED, ev
        assert REQUIRED[ph] <= set(ev), ev
        assert isinstance(ev["pid"], int) and isinstance(ev.get("tid", 0), int)
        if ph == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if ev["name"].startswith("thread"):
                assert "tid" in ev
            continue
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
        # microseconds with at most 3 decimals: the schedule's integer ns, exactly
        assert abs(ev["ts"] * 1000 - round(ev["ts"] * 1000)) < 1e-6
        if ph == "X":
            assert ev["dur"] >= 0 and abs(ev["dur"] * 1000 - round(ev["dur"] * 1000)) < 1e-6
            slices.setdefault((ev["pid"], ev["tid"]), []).append((round(ev["ts"] * 1000),
                                                                 round((ev["ts"] + ev["dur"]) * 1000), ev))
        else:
            assert ph != "f" or ev["bp"] == "e"
            flows.setdefault(ev["id"], {})[ph] = ev
    for evs in slices.values():        # one thread: slices never overlap
        evs.sort(key=lambda x: x[:2])
        for (a0, a1, _), (b0, b1, _) in zip(evs, evs[1:]):
            assert b0 >= a1
    for fid, pair in flows.items():    # each arrow: one start, one end, both strictly inside a slice
        assert set(pair) == {"s", "f"}, fid
        assert pair["s"]["cat"] == pair["f"]["cat"] and pair["s"]["name"] == pair["f"]["name"]
        bound = []
        for ev in (pair["s"], pair["f"]):
            t = round(ev["ts"] * 1000)
            inside = [x for x in slices[(ev["pid"], ev["tid"])] if x[0] < t < x[1]]
            assert len(inside) == 1, ev
            bound.append(inside[0])
        assert bound[0][1] <= bound[1][0] + 0 or bound[0][2]["cat"] == "data"   # dependency ends first
    return slices


def test_perfetto_trace_validates_and_has_the_tracks(run, trace):
    doc = json.loads((trace / "perfetto.json").read_text())
    slices = check_trace_events(doc)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    fab = run.fabric
    ranks = [n for n in procs.values() if n.startswith("rank ")]
    nics = sorted(n for n in procs.values() if n.startswith("NIC "))
    assert len(ranks) == fab.world and nics == sorted(f"NIC {fab.nic_name(i)}" for i in range(fab.n_nics))
    for pid, name in procs.items():
        names = {t for (p, _), t in threads.items() if p == pid}
        assert ({"compute", "collectives"} <= names) if name.startswith("rank ") else ({"tx", "rx"} <= names)
    # every fabric transfer is a tx slice and an rx slice, at its scheduled ns
    xs = [x for evs in slices.values() for x in evs]
    tx = {x[2]["args"]["transfer_id"]: x for x in xs if threads[(x[2]["pid"], x[2]["tid"])].startswith("tx")}
    rx = {x[2]["args"]["transfer_id"]: x for x in xs if threads[(x[2]["pid"], x[2]["tid"])].startswith("rx")}
    r = run.flows.rows
    net = np.flatnonzero(r["link"] == LinkKind.NET)
    assert sorted(tx) == sorted(rx) == net.tolist()
    for t in net[:20]:
        assert tx[t][:2] == (r["start_ns"][t], r["end_ns"][t])
        assert procs[tx[t][2]["pid"]] == f"NIC {fab.nic_name(r['src_nic'][t])}"
        assert procs[rx[t][2]["pid"]] == f"NIC {fab.nic_name(r['dst_nic'][t])}"
    # collective slices: one per (op, member rank); dependency arrows exist
    n_pairs = sum(len(run.flows.ops.groups[i]) for i in range(len(run.flows.ops))
                  if run.flows.ops.rows["kind"][i] != CollKind.MARKER)
    assert sum(1 for x in xs if x[2].get("cat") in {d.name for d in Dim}
               and "op_id" in x[2]["args"] and "transfer_id" not in x[2]["args"]) == n_pairs
    cats = {e["cat"] for e in doc["traceEvents"] if e["ph"] == "s"}
    assert cats == {"dep", "data"}


def test_perfetto_caps_nic_tracks(run, tmp_path):
    from tracegen.emit.tables.perfetto import write_perfetto
    counts = write_perfetto(run.flows, run.fabric, tmp_path / "p.json", max_nic_slices=70, max_arrows=10)
    assert counts["nics_shown"] < run.fabric.n_nics and counts["arrows"] == 10 and counts["arrows_dropped"] > 0
    doc = json.loads((tmp_path / "p.json").read_text())
    check_trace_events(doc)
    assert doc["otherData"]["nics_shown"] == f"{counts['nics_shown']} of {run.fabric.n_nics}"


# --- pictures and `tracegen report` --------------------------------------------------------------

PNGS = ("timeline.png", "gantt.png", "traffic_matrix.png")


def _pixels(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg
    return mpimg.imread(path)


@pytest.mark.parametrize("name", PNGS)
def test_pictures_are_drawn_for_the_default_job(trace, name):
    img = _pixels(trace / name)
    h, w = img.shape[:2]
    assert w >= 600 and h >= 300
    assert img[..., :3].std() > 0.1                      # not blank
    colours = {tuple(c) for c in (img[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 8


@pytest.mark.parametrize("table", ["csv", "parquet"])
def test_report_redraws_the_same_pictures(trace, tmp_path, table):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("summary.json", f"flows.{table}", f"ops.{table}"):
        (src / f).write_bytes((trace / f).read_bytes())
    # tables copied by hand are a folder tracegen did not write: report draws into a new -o
    # folder and leaves the copies alone (in place it refuses without --force: test_output_guard)
    res = CliRunner().invoke(main, ["report", str(src), "-o", str(tmp_path / "pics")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    for name in PNGS:
        assert (tmp_path / "pics" / name).read_bytes() == (trace / name).read_bytes(), name
    assert sorted(p.name for p in src.iterdir()) == sorted(("summary.json", f"flows.{table}", f"ops.{table}"))


def test_report_errors_are_one_line(tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "summary.json" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["report", str(tmp_path), "--only", "pie"])
    assert res.exit_code == 2 and "'pie' is no picture" in res.output


def test_pictures_can_be_turned_off(tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", "--no-pcap", "--no-ns3", "--set", "output.pictures=false",
                                    "--set", "output.perfetto=false", "-o", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    names = {p.name for p in (tmp_path / "t").iterdir()}
    assert names == {"flows.csv", "ops.csv", "summary.md", "summary.json", "job.resolved.yaml",
                     ".tracegen-manifest.json"}


# --- summary.md / job.resolved.yaml -------------------------------------------------------------------------

def test_summary_records_every_option_that_shaped_the_trace(tmp_path):
    out = tmp_path / "t"
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--snaplen", "128", "--nics", "0,1",
                                    "--format", "pcapng", "--collective", "dp", "--set", "nccl.channels=1",
                                    "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    md = (out / "summary.md").read_text()
    for row in ("| output.snaplen | 128 |", "| output.nics | 0,1 |", "| output.format | pcapng |",
                "| output.collectives | dp |", "| nccl.channels | 1 |", "| output.ns3 | false |",
                "| output.payload | zero (default) |", "| output.time_window | — (default) |"):
        assert row in md, row
    again = load_job(out / "job.resolved.yaml")
    assert again == load_job(sets=["output.snaplen=128", "output.nics=0,1", "output.format=pcapng",
                                   "output.collectives=dp", "nccl.channels=1", "output.ns3=false"])
    meta = json.loads((out / "summary.json").read_text())
    assert meta["job"]["output"]["snaplen"] == 128 and "perfetto.json" in meta["files"]


# --- plan at 100 columns -----------------------------------------------------------------------------

def test_plan_fits_100_columns_and_summarises_nics():
    res = CliRunner().invoke(main, ["plan", "--set", "parallelism.dp=8"], env={"COLUMNS": "100"},
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(x) for x in lines) <= 100
    assert "…" not in res.output
    # 32 NICs: summarised, plus the 5 busiest by name, never one row each
    assert re.search(r"│ all \(sum\)\s+│", res.output) and "│ median" in res.output
    assert sum(1 for x in lines if re.match(r"│ node\d{4}-rail\d", x)) == 5
    assert "32 NICs" in res.output
    # labelled numbers: what each count is
    assert re.search(r"transfers\s+│ [\d,]+: [\d,]+ on the fabric, [\d,]+ on NVLink", res.output)
    assert "../shared" not in res.output
