"""Issue 11, packets follow the rates: a flow whose rate the fluid schedule changes while it sends
(another flow joins a link it crosses) has its packets follow that rate over time, not one average
pace. Flow A (NIC 0 -> NIC 2) is alone for its first 40 us; then B (NIC 1 -> NIC 2) shares NIC 2's
link with it and A gets half the rate. A's packets leave at line rate while alone and at half
rate after, every link direction of a switch view carries per window no more than the schedule's
load allows (plus one message), and flows whose rate never changes keep their exact bytes."""
from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict

from types import SimpleNamespace

import numpy as np
import pytest

from tg_helpers import DATA_OPCODES, P2P, op_table, read_pcap, roce_fields
from tracegen.timing import fluid
from tracegen.collectives import expand
from tracegen.config import load_job
from tracegen.emit.views.pcap import write_pcaps
from tracegen.emit.views.placed import placed_flows
from tracegen.timing.schedule import schedule
from tracegen.timing.schedule_conn import schedule_connections
from tracegen.tables import Ragged
from tracegen.fabric.topology import build_fabric

# 400G NICs, two per leaf, 400G leaf-spine links: A and B meet on leaf1's port to NIC 2 only
SETS = ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2", "fabric.spines=2", "fabric.oversubscription=1",
        "parallelism.dp=4", "parallelism.global_batch=4", "cluster.gpus_per_node=1", "nccl.channels=1",
        "output.payload=none"]
B_AT = 40_000


@functools.lru_cache(maxsize=None)
def _case(b_bytes: int = 8 << 20):
    job = load_job(sets=SETS)
    fabric = build_fabric(job)
    ops = op_table([(P2P, [0, 2], 4 << 20, 0, [])] + ([(P2P, [1, 2], b_bytes, B_AT, [])] if b_bytes else []))
    return job, fabric, schedule(ops, expand(ops, fabric, job.nccl), fabric, job)


def _write(flows, fabric, out, d):
    d.mkdir(parents=True)
    return write_pcaps(flows, fabric, out, d)


def _sent(path, src_ip=None):
    """Times and wire bytes (frame + FCS, preamble, IFG) of the data frames of the file's busiest sender."""
    data = [(t, orig, f[0]) for t, orig, fr in read_pcap(path) if (f := roce_fields(fr)) and f[2] in DATA_OPCODES]
    src = src_ip if src_ip is not None else max({d[2] for d in data}, key=[d[2] for d in data].count)
    t = np.array([d[0] for d in data if d[2] == src], np.int64)
    return t, np.array([d[1] + 24 for d in data if d[2] == src], np.int64)


def test_engine_records_rate_changes_only_on_request():
    """A alone at 50 B/ns, 25 B/ns once B shares the link, B back to 50 B/ns when A is done."""
    args = (np.array([0, 40_000]), Ragged.from_lists([[], []]), np.arange(2), Ragged.from_lists([[], []]),
            np.array([4e6, 8e6]), np.zeros(2, np.int64), np.array([0, 1, 2]), np.array([0, 0]), np.ones(2),
            np.array([50.0]))
    plain = fluid.run(*args, jit=False)
    assert len(plain) == 5
    out = fluid.run(*args, jit=False, record_items=np.array([True, True]))
    rates = out[6]
    assert out[5] is None and not rates.truncated
    assert list(zip(rates.t.tolist(), rates.item.tolist(), rates.bytes_per_ns.tolist())) == [
        (0, 0, 50.0), (40_000, 0, 25.0), (40_000, 1, 25.0), (120_000, 1, 50.0)]
    # the memory bound: what was dropped is said, and from when
    cut = fluid.run(*args, jit=False, record_items=np.array([True, True]), record_items_max=2)[6]
    assert len(cut.t) == 2 and cut.complete_until == 40_000
    # only marked items
    one = fluid.run(*args, jit=False, record_items=np.array([False, True]))[6]
    assert one.item.tolist() == [1, 1]
    assert out[1].tolist() == plain[1].tolist() == [120_000, 240_000]


@functools.lru_cache(maxsize=None)
def _placed_case():
    """The same two flows timed per connection (detail conn), A's chunks placed for its pcaps."""
    job = load_job(sets=SETS)
    fabric = build_fabric(job)
    ops = op_table([(P2P, [0, 2], 4 << 20, 0, []), (P2P, [1, 2], 8 << 20, B_AT, [])])
    conn = schedule_connections(ops, fabric, job)
    return job, fabric, placed_flows(SimpleNamespace(flows=conn, ops=ops, fabric=fabric, job=job))


@pytest.mark.parametrize("detail", ["full", "placed"])
def test_packets_follow_the_rate_over_time(tmp_path, detail):
    job, fabric, flows = _case() if detail == "full" else _placed_case()
    assert flows.detail == detail
    a = int(np.flatnonzero(flows.rows["src_rank"] == 0)[0])
    r = flows.item_rates
    assert np.round(r.bytes_per_ns[r.item == a], 2).tolist() == [50.0, 25.0]   # alone, then shared
    s, f = int(flows.rows["start_ns"][a]), int(flows.finish_ns[a])
    paths = {p.name: p for p in _write(flows, fabric, job.output, tmp_path / "new")}
    t, w = _sent(paths["node0000-rail0.pcap"])
    line = np.median(w) * 8 / fabric.nic_gbps                          # ns of a full frame at 400G

    def mean_gap(t, lo, hi):
        x = t[(t >= lo) & (t < hi)]
        return np.diff(x).mean() / line
    alone, shared = mean_gap(t, s + 3_000, B_AT - 1_000), mean_gap(t, B_AT + 3_000, f - 3_000)
    assert 0.97 < alone < 1.05, alone
    assert 1.85 < shared < 2.15, shared
    assert t[-1] < f + 5_000                                           # done when the schedule says
    # one constant pace (the flow's average) would send at ~1.4x line spacing throughout
    old = {p.name: p for p in _write(dataclasses.replace(flows, item_rates=None), fabric, job.output,
                                     tmp_path / "old")}
    t0, _ = _sent(old["node0000-rail0.pcap"])
    assert mean_gap(t0, s + 3_000, B_AT - 1_000) > 1.2


BIN_NS, WINDOW_BINS, LAG_BINS = 1_000, 40, 8


def _window_excess(flows, fabric, files):
    """Per link direction of leaf1's port files: the most bytes any 40 us window carries beyond
    what the schedule's load of that direction allows in it - the most it gives any 40 us window
    up to 8 us earlier (a capture lags the schedule by hop latencies and the first CTS)."""
    bins = (int(flows.rows["end_ns"].max()) + 50_000) // BIN_NS + 1
    load = flows.link_load.binned(fabric.n_link_dirs, BIN_NS, bins)
    names = {fabric.link_dir_name(k): k for k in range(fabric.n_link_dirs)}
    leaf_mac = bytes(fabric.leaf_mac[1])
    win = lambda x: np.convolve(x, np.ones(WINDOW_BINS))[:len(x)]        # window ending at each bin
    worst = {}
    for f in files:
        peer = f.stem.split("-", 1)[1]
        got = defaultdict(lambda: np.zeros(bins + 64))
        for t, orig, fr in read_pcap(f):
            name = f"leaf1->{peer}" if fr[6:12] == leaf_mac else f"{peer}->leaf1"
            got[name][t // BIN_NS] += orig + 24
        for name, g in got.items():
            allowed = win(np.r_[load[names[name]], np.zeros(64)])
            allowed = np.max([np.r_[np.zeros(s), allowed[:len(allowed) - s]] for s in range(LAG_BINS + 1)], axis=0)
            worst[name] = float((win(g) - allowed).max())
    return worst


def test_no_link_carries_more_than_the_schedule_per_window(tmp_path):
    job, fabric, flows = _case()
    out = dataclasses.replace(job.output, switch="leaf1")
    msg = int(flows.rows["max_msg_bytes"].max()) * 1.1          # one message, headers included
    files = _write(flows, fabric, out, tmp_path / "new")
    worst = _window_excess(flows, fabric, files)
    assert "leaf1->node0002-rail0" in worst, worst
    assert max(worst.values()) < msg, worst
    # one constant pace does not follow the schedule: A too slow while alone, too fast while
    # sharing, and the traffic behind it lags the schedule's by more than the 8 us allowed
    old = _window_excess(flows, fabric, _write(dataclasses.replace(flows, item_rates=None), fabric, out,
                                               tmp_path / "old"))
    assert max(old.values()) > 2 * msg, old


def test_a_flow_with_one_rate_keeps_its_bytes(tmp_path):
    """A alone all along: the rate records change nothing (byte-identical files)."""
    job, fabric, flows = _case(0)
    assert flows.item_rates is not None and len(flows.item_rates.t) == 1
    new = _write(flows, fabric, job.output, tmp_path / "new")
    old = _write(dataclasses.replace(flows, item_rates=None), fabric, job.output, tmp_path / "old")
    assert [p.name for p in new] == [p.name for p in old]
    for p, q in zip(new, old):
        assert p.read_bytes() == q.read_bytes()
