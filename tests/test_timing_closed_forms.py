"""Timing closed forms, computed here from FORMULAS.md and WIRE.md (never from tracegen.timing.schedule):

- ring AllReduce, alpha-beta (FORMULAS.md): T = 2(n−1)·α + 2·(n−1)/n·S/β, with β the NIC rate over
  WIRE.md's wire bytes and α the per-step latency: hops × link latency + (hops − 1) store-and-
  forward packet times. One chunk per rank (one ring loop): exactly that. Several loops pipeline,
  so the NIC stays busy: T = 2·(n−1)/n·S_wire/β + α, and always between the two.
- the two latency models side by side: the schedule's flow end (store-and-forward switches) and
  the pcap writer's frame times (cut-through: a frame reaches the receiver hops × link latency
  after it left). A receiver's capture of a flow ends (hops − 1) packet times before end_ns.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schedule_validator import net_wire_bytes, ns_for_bits, packet_overhead
from tg_helpers import DATA_OPCODES, P2P, cluster_job, read_pcap, roce_fields, run_ops
from tracegen.emit.views.pcap import write_pcaps
from tracegen.tables import CollKind, LinkKind

L = 1000                     # Cluster.link_latency_ns default
PMTU = 4096


def alpha_ns(hops: int, gbps: int = 400) -> int:
    return hops * L + (hops - 1) * int(ns_for_bits(PMTU + packet_overhead(), gbps))


def step_ns(payload: int, gbps: int = 400) -> int:
    """One ring step's chunk through the NIC: its WIRE.md bytes (1 MiB messages) at line rate."""
    return int(ns_for_bits(net_wire_bytes(payload, 1 << 20, PMTU), gbps))


def allreduce_time(n: int, nbytes: int, nodes_per_leaf: int, channels: int = 1) -> int:
    job = cluster_job(n, nccl={"channels": channels}, cluster={"nodes_per_leaf": nodes_per_leaf})
    flows, _ = run_ops(job, [(CollKind.ALLREDUCE, list(range(n)), nbytes, 1_000, [])])
    assert (flows.rows["link"] == LinkKind.NET).all()
    return int(flows.op_end_ns[0] - flows.op_start_ns[0])


@pytest.mark.parametrize("hops,nodes_per_leaf", [(2, 16), (4, 1)])
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("per_rank", [64 << 10, 1536 << 10])
def test_ring_allreduce_one_loop_is_alpha_beta(n, per_rank, hops, nodes_per_leaf):
    """S = n x per_rank bytes (at most one 2 MiB chunk per rank): 2(n−1) steps of α + chunk/β."""
    t = allreduce_time(n, n * per_rank, nodes_per_leaf)
    assert t == 2 * (n - 1) * (alpha_ns(hops) + step_ns(per_rank))


@pytest.mark.parametrize("hops,nodes_per_leaf", [(2, 16), (4, 1)])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_many_loops_is_bandwidth_bound(n, hops, nodes_per_leaf):
    """4 loops of 2 MiB chunks: the NIC never idles, the latency shows once."""
    loops, chunk = 4, 2 << 20
    t = allreduce_time(n, n * loops * chunk, nodes_per_leaf)
    bandwidth = 2 * (n - 1) * loops * step_ns(chunk)          # 2(n−1)/n · S_wire / β
    assert t == bandwidth + alpha_ns(hops)
    assert t <= 2 * (n - 1) * alpha_ns(hops) + bandwidth      # never above FORMULAS.md's T


@pytest.mark.parametrize("channels", [2, 4])
@pytest.mark.parametrize("n", [4, 8])
def test_ring_allreduce_channels_stay_within_alpha_beta(n, channels):
    """Channels split every step; on one NIC they cannot beat its rate nor lose to the unpipelined
    alpha-beta time at chunk granularity."""
    nbytes = n * (4 << 20)
    t = allreduce_time(n, nbytes, 16, channels)
    per_step = nbytes // n // channels
    busy = 2 * (n - 1) * channels * step_ns(per_step)
    assert busy < t <= 2 * (n - 1) * (alpha_ns(2) + channels * step_ns(per_step))


def test_pcap_cut_through_vs_schedule_store_and_forward(tmp_path):
    """One 100 kB message across a spine (4 links) at 8 Gb/s, where every frame lasts a whole
    number of ns (one ns per byte), so the two models can be compared to the ns:
      schedule  end_ns = NIC's last bit + 4 x L + 3 x P   (store-and-forward: P = one full frame)
      pcap      a frame is stamped at the receiver 4 x L after it left (cut-through)
    so the receiver's last frame ends exactly 3 x P before end_ns, and its first frame starts
    4 x L after the sender's."""
    gbps, size = 8, 100_000
    job = cluster_job(4, cluster={"nodes_per_leaf": 1, "nic_gbps": gbps})
    flows, fabric = run_ops(job, [(P2P, [0, 3], size, 50_000, [])])
    (i,) = np.flatnonzero(flows.rows["link"] == LinkKind.NET)
    row = flows.rows[i]
    P = PMTU + packet_overhead()                                 # ns at 8 Gb/s = bytes
    wire = int(net_wire_bytes(size, row["max_msg_bytes"], PMTU))
    assert row["end_ns"] - row["start_ns"] == wire + 4 * L + 3 * P
    paths = write_pcaps(flows, fabric, job.output, tmp_path)
    src_ip, dst_ip = (int(fabric.nic_ip[k]) for k in (0, 3))
    sent, got = [], []
    for path in paths:
        for ts, orig, frame in read_pcap(path):
            f = roce_fields(frame)
            if f and f[2] in DATA_OPCODES and (f[0], f[1]) == (src_ip, dst_ip):
                (sent if path.stem == fabric.nic_name(0) else got).append((ts, orig + 4 + 8 + 12))
    assert len(sent) == len(got) == -(-size // PMTU)
    assert sent[0][0] == row["start_ns"]
    assert sum(w for _, w in sent) == wire                      # frames + FCS + preamble + IFG
    assert got[0][0] == sent[0][0] + 4 * L
    last_ts, last_w = got[-1]
    assert last_ts + last_w == row["end_ns"] - 3 * P


@pytest.mark.parametrize("nodes,local", [(4, 1), (8, 2), (16, 8)])
def test_nccl_tuning_rates_tree_at_0_78_of_ring_bus_bandwidth(nodes, local):
    """FORMULAS.md: NCCL's cost model rates Tree/Simple at 0.92 x 0.85 of Ring's bus bandwidth for
    large AllReduces on several nodes. From the model's times at two sizes (the slope is 1/algbw)
    and NCCL's algorithm-bandwidth factors (ring n/nsteps = n/(2(n−1)), tree 1/2)."""
    from tracegen.collectives.tuning import predict_us
    from tracegen.tables import Proto
    n = nodes * local
    slope = {}
    for algo in ("ring", "tree"):
        t = [predict_us(algo, Proto.SIMPLE, CollKind.ALLREDUCE, n, nodes, local, size, 2, 400, 3600)
             for size in (1 << 30, 2 << 30)]
        slope[algo] = (t[1] - t[0]) / (1 << 30)
    bus_ring = 1 / (slope["ring"] * n / (2 * (n - 1)))
    bus_tree = 1 / (slope["tree"] * 0.5)
    assert bus_tree / bus_ring == pytest.approx(0.92 * 0.85, rel=1e-9)


def test_store_and_forward_counts_each_switch_once_at_its_egress_rate():
    """Beside a 4-link flow, a flow inside one leaf (2 links, one switch) pays ONE full frame of
    store-and-forward, at the leaf's egress rate (its downlink to the receiver), and the 4-link
    one three at its switches' egress rates: NIC links 8 Gb/s, leaf-spine 16 Gb/s, so
      same leaf  end - start = wire + 2 L + P8
      via spine  end - start = wire + 4 L + P16 (leaf -> spine) + P16 (spine -> leaf) + P8 (leaf -> NIC)."""
    gbps, size = 8, 100_000
    job = cluster_job(4, cluster={"nodes_per_leaf": 2, "nic_gbps": gbps})
    job = dataclasses.replace(job, fabric=dataclasses.replace(job.fabric, leaf_spine_gbps=16))
    flows, fabric = run_ops(job, [(P2P, [0, 1], size, 50_000, []), (P2P, [1, 2], size, 50_000, [])])
    P8 = PMTU + packet_overhead()                  # ns at 8 Gb/s = bytes
    P16 = -(-P8 // 2)
    got = {}
    for i in np.flatnonzero(flows.rows["link"] == LinkKind.NET):
        row = flows.rows[i]
        wire = int(net_wire_bytes(size, row["max_msg_bytes"], PMTU))
        got[(int(row["src_rank"]), int(row["dst_rank"]))] = int(row["end_ns"] - row["start_ns"]) - wire
    assert got == {(0, 1): 2 * L + P8, (1, 2): 4 * L + 2 * P16 + P8}, got
