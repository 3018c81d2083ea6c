"""Judges of small emit / timing helpers that only pictures, summaries or a selected view read
(issue 25, second mutation pass): each against a closed form worked out by hand or a consumer's
reading of the written file - never against the code's own numbers."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.emit.pictures import plots, style, timeline
from tracegen.emit.tables import read as trace_read
from tracegen.emit.tables.trace_view import TraceView, top_link_utilisation
from tracegen.errors import ConfigError
from tracegen.tables import Dim, LinkKind, Ragged
from tracegen.timing import detail
from tracegen.timing.fluid_records import ItemRates, LinkLoad


# --- bundle.py: perfetto.json shows only the selected ranks' NICs ------------------------------

def test_perfetto_of_selected_ranks_shows_only_their_nics(tmp_path):
    """--ranks 0: the NIC tracks are those on rank 0's node (read off the rank track's own name)."""
    res = CliRunner().invoke(main, ["generate", "-q", "--no-pcap", "--no-ns3", "--ranks", "0",
                                    "--set", "output.pictures=false", "-o", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "t" / "perfetto.json").read_text())
    names = [e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"]
    node0 = int(re.fullmatch(r"rank 0 \(node (\d+), GPU \d+\)", names[0]).group(1))
    nics = [n for n in names if n.startswith("NIC ")]
    assert nics and all(int(re.match(r"NIC node(\d+)-", n).group(1)) == node0 for n in nics), nics
    shown, total = map(int, doc["otherData"]["nics_shown"].split(" of "))
    assert shown == len(nics) < total


# --- pictures: style, plots, timeline -----------------------------------------------------------

def test_every_dimension_has_its_own_colour():
    colours = list(style.DIM_COLOURS.values())
    assert len(set(c.lower() for c in colours)) == len(colours)


@pytest.mark.parametrize("t_end_ns, unit, value", [(20_000_000, "ms", 20.0), (5_000_000, "µs", 5000.0)])
def test_time_axis_unit_divides_to_that_unit(t_end_ns, unit, value):
    got_unit, div = style.time_unit(t_end_ns)
    assert got_unit == unit and t_end_ns / div == pytest.approx(value)


def test_merge_keeps_a_long_span_over_nested_short_ones():
    s, e = plots._merge(np.array([0, 2, 12, 20]), np.array([10, 3, 15, 30]))
    assert s.tolist() == [0, 12, 20] and e.tolist() == [10, 15, 30]


@pytest.mark.parametrize("n, text", [(1024, "1 KiB"), (1536, "1.5 KiB"), (3 << 20, "3 MiB"), (1000, "1000 B")])
def test_human_bytes_are_binary_units(n, text):
    assert plots._human_bytes(n) == text


def test_occupancy_counts_a_partly_busy_last_column():
    """25 ns at 10 ns per column: columns 0, 1 and (half of) 2 are busy, 3 is not."""
    occ = timeline._occupancy(np.array([0]), np.array([0]), np.array([25]), 1, 10.0)
    assert occ[0, :3].all() and not occ[0, 3:].any()


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[k:k + 2], 16) for k in (1, 3, 5)]) / 255


def test_timeline_network_upper_half_nvlink_lower_half_dark(tmp_path, monkeypatch):
    """Rank 0 sends DP over the network, rank 1 TP over NVLink: rank r's rows are 2r (network,
    full colour) and 2r + 1 (NVLink, the colour x NVLINK_SHADE), as the module docstring says."""
    import matplotlib.axes
    shown = {}
    real = matplotlib.axes.Axes.imshow
    monkeypatch.setattr(matplotlib.axes.Axes, "imshow",
                        lambda self, img, *a, **k: (shown.setdefault("img", np.array(img)), real(self, img, *a, **k))[1])
    z = np.zeros(0, np.int64)
    view = TraceView(title="t", world=2, nic_names=[], nic_node=z, nic_rail=z,
                     src_rank=np.array([0, 1]), dst_rank=np.array([1, 0]), src_nic=np.array([0, -1]),
                     dst_nic=np.array([1, -1]), link=np.array([LinkKind.NET, LinkKind.NVLINK], np.uint8),
                     dim=np.array([Dim.DP, Dim.TP], np.uint8), nbytes=np.array([1, 1]),
                     start_ns=np.array([0, 0]), end_ns=np.array([1000, 1000]), op_kind=z, op_dim=z,
                     op_iteration=z, op_gap_ns=z, op_start_ns=z, op_end_ns=z, op_group=Ragged.empty(0))
    timeline.draw_timeline(view, tmp_path / "t.png")
    img = shown["img"]
    dp, tp = _rgb(style.DIM_COLOURS[Dim.DP]), _rgb(style.DIM_COLOURS[Dim.TP])
    assert np.allclose(img[0, 0], dp) and np.allclose(img[1, 0], 1.0)
    assert np.allclose(img[2, 0], 1.0) and np.allclose(img[3, 0], tp * timeline.NVLINK_SHADE)


# --- trace_view.top_link_utilisation: bits over rate x time ---------------------------------------

def test_link_utilisation_is_bits_over_rate_and_busiest_first():
    """Two 100 Gb/s link directions over 2 ms: direction 2 at 12.5 B/ns (= 100 Gb/s, util 1),
    direction 0 at 6.25 B/ns (util 0.5). The busier is listed first."""
    end = 2_000_000
    load = LinkLoad(t=np.array([0, end, 0, end]), link=np.array([0, 0, 2, 2]),
                    bytes_per_ns=np.array([6.25, 0.0, 12.5, 0.0]), truncated=False)
    flows = SimpleNamespace(link_load=load, op_end_ns=np.array([end]))
    fabric = SimpleNamespace(links=np.array([(100,), (100,)], dtype=[("gbps", np.int64)]),
                             link_dir_name=lambda d: f"dir{d}")
    lu = top_link_utilisation(flows, fabric)
    assert lu["name"] == ["dir2", "dir0"] and lu["gbps"] == [100, 100]
    util = np.array(lu["util"])
    assert np.allclose(util[0], 1.0) and np.allclose(util[1], 0.5)


# --- fluid_records: binning and windows of rate records -----------------------------------------

def test_binned_splits_a_record_across_bins_by_time():
    """1 B/ns from t = 5 to 25 in 10 ns bins: 5, 10 and 5 bytes."""
    load = LinkLoad(t=np.array([5, 25]), link=np.array([0, 0]), bytes_per_ns=np.array([1.0, 0.0]), truncated=False)
    assert load.binned(1, 10, 4)[0].tolist() == [5.0, 10.0, 5.0, 0.0]


def test_within_excludes_a_rate_change_at_the_window_end():
    """Rates 1 from t = 0, 2 from t = 10: the window [0, 10) holds only the first."""
    r = ItemRates(t=np.array([0, 10]), item=np.array([0, 0]), bytes_per_ns=np.array([1.0, 2.0]),
                  complete_until=1 << 60)
    w = r.within([0], [0], [10])
    assert w.t.tolist() == [0] and w.bytes_per_ns.tolist() == [1.0]


# --- detail: `auto` up to and including the limit -------------------------------------------------

def test_auto_detail_is_full_up_to_the_limit_and_when_emitting():
    lim = detail.FULL_DETAIL_MAX_TRANSFERS
    assert detail.pick_detail("auto", False, lim) == "full"
    assert detail.pick_detail("auto", False, lim + 1) == "conn"
    assert detail.pick_detail("auto", True, 100 * lim) == "full"


# --- read.py: a trace folder's ranges and line numbers ---------------------------------------------

def _write_csv(path, header, rows):
    path.write_text("\n".join([",".join(header)] + [",".join(map(str, r)) for r in rows]) + "\n")


def test_a_rank_equal_to_world_is_out_of_range(tmp_path):
    flows = {c: np.zeros(1, np.int64) for c in ("src_rank", "dst_rank", "src_nic", "dst_nic", "bytes",
                                                 "start_ns", "end_ns")}
    flows["dst_rank"] = np.array([4])
    flows["link"] = ["NVLINK"]
    ops = {c: np.zeros(0, np.int64) for c in ("iteration", "gap_ns", "start_ns", "end_ns")}
    ops["group"] = Ragged.empty(0)
    _write_csv(tmp_path / "flows.csv", ["x"], [])
    with pytest.raises(ConfigError, match=r"line 2 column dst_rank: 4 is outside 0\.\.3"):
        trace_read.check_ranges(tmp_path, flows, ops, world=4, n_nics=4)


def test_a_short_csv_row_is_named_by_its_line(tmp_path):
    """Header on line 1, data rows on lines 2, 3: the short one is line 3."""
    cols = ["a", "b"]
    _write_csv(tmp_path / "ops.csv", cols, [(1, 2), (3,)])
    with pytest.raises(ConfigError, match=r"ops\.csv: line 3: 1 fields, the header has 2"):
        trace_read.read_table(tmp_path, "ops", cols)


# --- views/distributed.py: the scheduler's port, the progress in bytes -----------------------------

def test_scheduler_port_zero_is_refused():
    from tracegen.emit.views.distributed import check_scheduler
    with pytest.raises(ConfigError, match="port in 1..65535"):
        check_scheduler("tcp://127.0.0.1:0")


def test_dask_progress_counts_bytes_written(monkeypatch, tmp_path):
    """Two files of 10 and 20 B: progress reports (10, 30) then (30, 30) - bytes, not files."""
    distributed = pytest.importorskip("distributed")
    from tracegen.emit.views import distributed as dist

    class Done:
        def __init__(self, value):
            self.value = value

        def result(self):
            return self.value

    class Client:                                    # runs each task at once, in submission order
        def scatter(self, p, broadcast):
            return p

        def submit(self, fn, *args, pure):
            return Done(fn(*args))

        def close(self):
            pass

    monkeypatch.setattr(dist, "_client", lambda workers, scheduler: (Client(), None))
    monkeypatch.setattr(distributed, "as_completed", lambda futures: list(futures))
    sizes = {"a": 10, "b": 20}
    seen = []
    paths = dist.write_files(lambda plan, fset, spec, d: (d / spec, sizes[spec]), None, None, ["a", "b"],
                             tmp_path, 30, lambda done, total: seen.append((done, total)), 2, "")
    assert paths == [tmp_path / "a", tmp_path / "b"] and seen == [(10, 30), (30, 30)]


# --- packets/select.py: --max-bytes units ---------------------------------------------------------

@pytest.mark.parametrize("text, n", [("2KiB", 2048), ("1MiB", 1 << 20), ("3GiB", 3 << 30), ("2kb", 2000),
                                     ("1.5GB", 1_500_000_000)])
def test_max_bytes_binary_and_decimal_units(text, n):
    from tracegen.emit.packets.select import parse_bytes
    assert parse_bytes(text) == n


# --- sims/ns3_compare.match: repeated keys pair up in start order ----------------------------------

def test_repeated_fct_keys_join_manifest_lines_in_start_order():
    """Two flows of one (sip, dip, sport): the fct row that started first is manifest line 0."""
    from tracegen.emit.sims.ns3_compare import match
    rec = {"sip": "0b000001", "dip": "0b000002", "hpcc_sport": "100", "host_sport": "7"}
    sc = SimpleNamespace(records=[rec, dict(rec)])
    rows = np.array([[0x0b000001, 0x0b000002, 100, 4791, 10, 500, 9, 9],     # started later
                     [0x0b000001, 0x0b000002, 100, 4791, 10, 100, 9, 9],
                     [0x0b000001, 0x0b000003, 100, 4791, 10, 0, 9, 9]])     # no such line
    assert match(sc, rows, "pair").tolist() == [1, 0, -1]


# --- packets/port_queue.py: a lab tester port's FIFO --------------------------------------------

def test_fifo_waits_for_the_port_state_carried_in():
    """t_out[i] = max(t_in[i], t_out[i-1] + wire[i-1]), the port busy until free_at = 200."""
    from tracegen.emit.packets.port_queue import fifo
    t_out, free = fifo(np.array([100, 105, 400]), np.array([10, 10, 10]), 200)
    assert t_out.tolist() == [200, 210, 400] and free == 410


def test_queued_wire_time_at_the_port_rounds_up(monkeypatch):
    """Two frames arriving together, 7 ns each at a 100 Gb/s plane, through a 300 Gb/s port: the
    second leaves ceil(7 x 100 / 300) = 3 ns after the first (never less than the exact 2.33)."""
    from tracegen.emit.packets import port_queue
    monkeypatch.setattr(port_queue, "line_wire_ns", lambda p, it, g, j: np.full(len(g), 7, np.int64))
    it = SimpleNamespace(queue=np.array([0, 0]))
    windows = [(np.array([0, 1]), np.array([0, 1]), np.array([0, 0]), np.array([0, 0]))]
    out = list(port_queue.queued(None, it, windows, 100, 300))
    times = [int(t) for _, _, _, ts in out for t in ts]
    assert times == [0, 3]


# --- packets/items.py: at equal times a NIC's capture has its sent frame first ------------------------

def test_sent_frame_before_received_frame_at_equal_times(tmp_path):
    """Items' order: by time, and at equal times the sent copy first (a NIC's own frame leaves
    as another arrives). The default job's ring has such ties; the capture's own address (the
    most common source) tells sent from received."""
    from collections import Counter
    from tg_helpers import read_pcap, roce_fields
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "output.pictures=false",
                                    "--set", "output.perfetto=false", "-o", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    ties = 0
    for f in sorted((tmp_path / "t" / "pcap").glob("*.pcap")):
        recs = read_pcap(f)
        ip = [(roce_fields(b) or (None,))[0] for _, _, b in recs]
        me = Counter(x for x in ip if x is not None).most_common(1)[0][0]
        for (t1, _, _), (t2, _, _), a, b in zip(recs, recs[1:], ip, ip[1:]):
            if t1 == t2 and a is not None and b is not None and (a == me) != (b == me):
                ties += 1
                assert a == me, (f.name, t1)
    assert ties > 0


# --- sims/ns3_compare.joined_kpis: the ECN share counts whole packets ------------------------------

def test_ecn_share_is_ce_packets_over_packets_rounded_up(tmp_path):
    """Two flows of 70,000 B at PMTU 4096 (18 packets each, the last one short), one CE-marked
    packet each (flows.csv beside the fct file, as `tracegen ns3 run` writes it): 2 / 36."""
    from test_ns3_export import make_flows
    from tracegen.config import Job
    from tracegen.emit.sims.ns3 import write_ns3
    from tracegen.emit.sims.ns3_compare import join, joined_kpis
    from ns3_scenarios.inputs import load_scenario
    from tracegen.fabric.topology import build_fabric
    job = Job()
    fabric = build_fabric(job)
    specs = [(0, LinkKind.NET, 0, dst, 70_000, 100 * k, []) for k, dst in enumerate((2, 4))]
    write_ns3(make_flows(fabric, specs), fabric, job, tmp_path / "ns3")
    sc = load_scenario(tmp_path)
    assert sc.config.pmtu == 4096 and all(b % 4096 for b in sc.bytes)
    packets = sum(-(-int(b) // 4096) for b in sc.bytes)
    fct = tmp_path / "fct.txt"
    fct.write_text("".join(f"{r['sip']} {r['dip']} {r['hpcc_sport']} 100 {r['wire_bytes']} "
                           f"{sc.t0_ns + r['start_ns']} 5000 4000\n" for r in sc.records))
    (tmp_path / "flows.csv").write_text("line,ce_pkts\n" + "".join(f"{k},1\n" for k in range(len(sc))))
    share = joined_kpis(join(tmp_path, fct))["all"]["ecn_marked_share"]
    assert share == pytest.approx(2 / packets, abs=1e-4) and packets == 2 * 18
