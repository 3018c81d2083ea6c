"""Judges of the numbers people read off a run (issue 25, mutation pass): the KPIs, the nccl-tests
table, the report's link table and summary.json, each against its definition worked out by hand
or against another output read as its consumer reads it - never against the code's own tables."""
from __future__ import annotations

import csv
import json
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from tracegen.report import kpi
from tracegen.config import load_job
from tracegen.emit.tables.summary import write_summaries
from tracegen.cli.collective import Row, format_table, run_collective
from tracegen.pipeline import run_pipeline
from tracegen.report.render import link_table

# nccl-tests' bus factors (src/*.cu GetBw: AllReduceGetBw 2(n-1)/n; ReduceScatter, AllGather,
# AlltoAll (n-1)/n; Broadcast, Reduce, SendRecv 1), for n = 8
FACTOR_8 = {"AllReduce": 14 / 8, "ReduceScatter": 7 / 8, "AllGather": 7 / 8, "AllToAll": 7 / 8,
            "Broadcast": 1.0, "Reduce": 1.0, "SendRecv": 1.0}


# --- kpi.py: the BMWG AI-fabric KPIs -------------------------------------------------------------

def test_busbw_kpi_is_algbw_times_the_nccl_tests_factor():
    """One op per collective kind, 1e9 B between t = 0 and t = 10 ms on 8 ranks: algbw is 8e9 bit /
    1e7 ns = 800 Gb/s, i.e. 200 % of a 400 Gb/s line, and busbw is that times nccl-tests' factor."""
    kinds = list(FACTOR_8)
    op = np.repeat(np.arange(len(kinds)), 2)
    start = np.tile([0, 2_000_000], len(kinds))
    end = np.tile([10_000_000, 8_000_000], len(kinds))
    payload = np.tile([10_000_000, 18_000_000], len(kinds))       # throughputs 1 and 3 B/ns
    out = kpi.op_kpis(op, payload, kpi.FlowSide(start, end), np.full(len(kinds), 10**9),
                      np.full(len(kinds), 8), kinds, 400.0)
    for o, kind in enumerate(kinds):
        assert out[o]["time_ns"] == 10_000_000
        assert out[o]["busbw_pct"] == pytest.approx(200 * FACTOR_8[kind], rel=1e-12), kind
        assert out[o]["jain"] == pytest.approx(16 / 20)        # (1 + 3)^2 / (2 (1 + 9))


def test_jain_index_extremes():
    """Jain's index: 1 for equal shares, 1/n when one of n flows gets everything."""
    assert kpi.jain(np.full(5, 7.0)) == pytest.approx(1.0)
    assert kpi.jain(np.array([4.0, 0, 0, 0])) == pytest.approx(0.25)


def test_p99_fct_and_jct_of_a_group():
    """101 flows with FCT 0, 1, .., 100 µs: the 99th percentile is 99 µs exactly (rank 0.99 x 100
    of the sorted list); JCT = last end - first start."""
    n = 101
    start = np.full(n, 5_000, np.int64)
    end = start + np.arange(n) * 1000
    side = kpi.FlowSide(start, end)
    op = np.zeros(n, np.int64)
    out = kpi.group_kpis(np.ones(n, bool), op, side, side, {}, {}, None, np.ones(n, np.int64))
    assert out["analytic"]["p99_fct_ns"] == 99_000
    assert out["analytic"]["jct_ns"] == 100_000 and out["jct_ratio"] == 1.0


def test_ecmp_imbalance_is_max_over_mean_minus_one_on_switch_links():
    """A leaf's two uplinks carry 100 and 300 B (mean 200): 300/200 - 1 = 0.5; its NIC-facing link
    (to a non-switch) does not count, nor do links leaving other switches."""
    leaf, s1, s2, nic = 10, 11, 12, 0
    loads = {(leaf, s1): 100, (leaf, s2): 300, (leaf, nic): 5000, (s1, leaf): 7, (s2, leaf): 1}
    assert kpi.ecmp_imbalance(loads, {leaf}, {leaf, s1, s2}) == pytest.approx(0.5)


# --- nccl_tests.py: the table nccl-tests prints --------------------------------------------------

@pytest.mark.parametrize("name,kind", [("all_reduce", "AllReduce"), ("reduce_scatter", "ReduceScatter"),
                                       ("all_gather", "AllGather"), ("alltoall", "AllToAll"),
                                       ("broadcast", "Broadcast"), ("reduce", "Reduce"),
                                       ("sendrecv", "SendRecv")])
def test_table_busbw_is_algbw_times_the_factor(name, kind):
    """nccl-tests (src/common.cu BenchTime -> GetBw): algbw = bytes / 1e9 / seconds, i.e. B/ns;
    busbw = algbw x factor. 1 GiB in 1 ms on 8 ranks: algbw 1073.74 GB/s."""
    rows = [Row(1 << 30, (1 << 30) // 4, "float", "sum", -1, 1_000_000)]
    line = [ln for ln in format_table(name, rows, 8, "h").splitlines() if not ln.startswith("#")][0]
    algbw, busbw = (float(x) for x in line.split()[-2:])
    assert algbw == pytest.approx((1 << 30) / 1e6, abs=0.006)
    assert busbw == pytest.approx((1 << 30) / 1e6 * FACTOR_8[kind], abs=0.006)


@pytest.mark.parametrize("name,per_rank", [("reduce_scatter", True), ("all_gather", True),
                                           ("all_reduce", False), ("alltoall", True)])
def test_count_column_is_nccl_tests_paramcount(name, per_rank):
    """nccl-tests prints count = paramcount (src/common.cu TimeTest: args->nbytes / wordSize):
    ReduceScatter recvcount and AllGather sendcount are the elements per rank, AlltoAll's is
    count/nranks (AlltoAllGetCollByteCount: one peer's block), AllReduce's the whole buffer."""
    size = 1 << 20
    rows, run = run_collective(name, "dgx-h100", 1, size, size)
    n = run.fabric.world
    assert rows[0].size_bytes == size
    assert rows[0].count == size // 4 // (n if per_rank else 1)


# --- report.py: the link table -------------------------------------------------------------------

def test_link_table_utilisation_is_bits_over_rate_times_time():
    """25 MB in 1 ms on a 400 Gb/s link: 2e8 bit / (400 bit/ns x 1e6 ns) = 50 %."""
    rep = SimpleNamespace(link_bytes=np.array([25_000_000, 0]), link_gbps=np.array([400, 400]),
                          iteration_ns=1_000_000, link_tier=np.array([0, 1]), link_peak=None,
                          link_names=["node0000-rail0->leaf0", "leaf0->node0000-rail0"])
    title, header, rows = link_table(rep)
    assert rows == [["NIC -> leaf", "1 of 1", "50.0%", "50.0%", "node0000-rail0->leaf0 50%"]]


# --- a run of the default job with tp = 4 and 2 QPs per connection -----------------------------------------

@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    """The default job with tp = 4 over 2-GPU nodes (TP rings and the batch broadcast chain cross
    the fabric: a NIC sends what it does not receive) and 2 QPs per connection; its flows.csv
    and summary.json written."""
    from tracegen.emit.tables.flows import fabric_columns, write_flows_csv
    job = load_job(sets=["nccl.qps_per_connection=2", "parallelism.tp=4", "parallelism.dp=1"])
    run = run_pipeline(job, emit=False)
    out = tmp_path_factory.mktemp("judge-report")
    write_flows_csv(run.flows, out / "flows.csv", extra=fabric_columns(run.flows))
    write_summaries(run, out)
    with open(out / "flows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return run, rows, json.loads((out / "summary.json").read_text())


def _wire_bytes(payload: int, max_msg: int, pmtu: int, vlan: bool, ip_version: int) -> int:
    """WIRE.md, message by message: each message of at most max_msg bytes is packets of PMTU
    payload; every packet costs Ethernet 14 (+ 802.1Q 4) + IP 20 | 40 + UDP 8 + BTH 12 + ICRC 4
    + FCS 4 + preamble 8 + IFG 12; RETH 16 on the first packet, ImmDt 4 on the last, whose payload
    is padded to 4 bytes. An empty transfer is one empty WRITE-with-imm."""
    per_pkt = 14 + (4 if vlan else 0) + (20 if ip_version == 4 else 40) + 8 + 12 + 4 + 4 + 8 + 12
    sizes = [max_msg] * (payload // max_msg) + ([payload % max_msg] if payload % max_msg or not payload else [])
    total = 0
    for s in sizes:
        pkts = max(1, -(-s // pmtu))
        last = s - (pkts - 1) * pmtu
        total += s + pkts * per_pkt + 16 + 4 + (-last) % 4
    return total


def test_nic_uplinks_carry_the_wire_bytes_of_their_transfers(run2):
    """Every byte a NIC sends crosses its own NIC -> leaf link once, whatever QP carries it: the
    report's load on that link direction = the WIRE.md bytes of the NET rows of flows.csv from
    that NIC (2 QPs per connection: each QP takes its share, the port carries all of them)."""
    run, rows, summary = run2
    o = run.job.output
    want = defaultdict(int)
    for r in rows:
        if r["link"] == "NET":
            want[summary["nic_names"][int(r["src_nic"])]] += _wire_bytes(
                int(r["wire_bytes"]), int(r["max_msg_bytes"]), o.pmtu, o.vlan, o.ip_version)
    got = {}
    for d, name in enumerate(summary["links"]["name"]):
        a, b = name.split("->")
        if a.startswith("node"):
            got[a] = int(run.report.link_bytes[d])
    assert want and all(got[nic] == want[nic] for nic in want), (got, dict(want))


def test_summary_link_tiers_name_the_direction_of_each_link(run2):
    """summary.json `links` and the report's tier of each link direction: a direction named
    'node..->leafK' is NIC -> leaf, 'leafK->node..' leaf -> NIC, 'leafK->spineJ' leaf -> spine, ..."""
    run, _, summary = run2
    from tracegen.report.build import LINK_TIERS
    kind = lambda s: "NIC" if s.startswith("node") else s.rstrip("0123456789")
    names = summary["links"]["name"]
    for d, (name, tier) in enumerate(zip(names, summary["links"]["tier"])):
        a, b = (kind(x) for x in name.split("->"))
        assert tier == f"{a} -> {b}", (d, name, tier)
        assert LINK_TIERS[int(run.report.link_tier[d])] == tier, (d, name)


def test_summary_nic_bytes_and_rank_nics_match_flows_csv(run2):
    """summary.json's per-NIC tx / rx payload bytes are flows.csv's NET rows summed by src_nic /
    dst_nic, and rank_nic is the NIC every NET row of a rank leaves from."""
    _, rows, summary = run2
    tx, rx = defaultdict(int), defaultdict(int)
    for r in rows:
        if r["link"] == "NET":
            tx[int(r["src_nic"])] += int(r["bytes"])
            rx[int(r["dst_nic"])] += int(r["bytes"])
            assert summary["rank_nic"][int(r["src_rank"])] == int(r["src_nic"])
            assert summary["rank_nic"][int(r["dst_rank"])] == int(r["dst_nic"])
    n = len(summary["nic_names"])
    assert summary["nic_tx_bytes"] == [tx[i] for i in range(n)]
    assert summary["nic_rx_bytes"] == [rx[i] for i in range(n)]
    assert sum(tx.values()) > 0 and tx != rx
