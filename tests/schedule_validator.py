"""An independent judge of a schedule (the Flow table), written from ../shared/WIRE.md, FORMULAS.md
and the documented timing rules; it never imports `tracegen.timing.schedule` and restates none of its code.

    from schedule_validator import validate, assert_valid   # in tests/ (or tests.schedule_validator)
    bad = validate(flows, fabric, job.output)                     # today's paths: NIC tx/rx, NVLink
    bad = validate(flows, fabric, job.output, links_of=my_routes, exact=False)   # a fluid model

`validate` returns a list of `Violation(rule, where, detail)`; `assert_valid` raises with the first
ones. Rules:

  deps        a transfer starts at or after every transfer it depends on has ended (end_ns is when
              the last bit reached the receiver, so the hop latency is already in it)
  release     a transfer starts at or after its op's release time (Flows.op_start_ns)
  op_release  an op is released at or after its dependency ops' ends + its compute gap (gap_ns)
              (exact: at exactly that time; an op without deps at exactly gap_ns)
  op_end      an op ends when its last transfer ends (an op that moves nothing: at its release)
  duration    end - start >= wire time at the slowest link of its path + the documented latency
              (exact: ==, a transfer holds its ports alone at line rate)
  capacity    per link direction, for every window [a, b]: the bytes of the flows whose occupancy
              window on that link lies inside [a, b] fit in (b - a) x rate. Necessary under any
              rate that varies in time (a fluid max-min model), checked per busy period.
  exclusive   (exact mode, today's non-preemptive list scheduler) a port flagged exclusive (NIC tx,
              NIC rx, NVLink out/in) carries one transfer at a time: occupancy windows never overlap

Wire bytes (WIRE.md), per NET transfer of W bytes (the table's wire_bytes: payload + LL flags),
cut into messages of at most max_msg_bytes (a zero-byte transfer is one empty message), each
message ceil(size / PMTU) packets (at least one):
  per packet   Ethernet 14 + 802.1Q 4 (output.vlan) + IPv4 20 | IPv6 40 + UDP 8 + BTH 12 + ICRC 4
               + FCS 4 + preamble/SFD 8 + inter-frame gap 12
  per message  RETH 16 (First / Only) + ImmDt 4 (Last-Imm / Only-Imm) + pad of its last packet's
               payload to 4 B
NVLink transfers carry wire_bytes at the NVLink rate, no headers.

Latency (Cluster.link_latency_ns "per hop propagation + switching", store-and-forward switches):
a NET flow crossing `hops` links (2 under one leaf, 4 through a spine) ends
    hops x L + (hops - 1) x P
after its last bit left the NIC, P = the time of one packet at the NIC rate: a full one (PMTU +
per-packet bytes), or the whole transfer if it is smaller (each switch receives the packet whole
before sending it on). NVLink: no latency. The pcap writer places frames cut-through (hops x L,
no P): a receiver's capture of a flow ends (hops - 1) x P before the flow's end_ns
(tests/test_schedule_validator.py::test_pcap_cut_through_vs_schedule_store_and_forward).

Occupancy window of a flow on link i (0-based) of its n-link path: the time its bits are put on
that link, at the earliest start + i x (L + P) and at the latest end - (n - i) x L - (n - 1 - i) x P.

Plugging in routes (the fabric model): `links_of(flows, fabric, out) -> Paths`. The simplest way
to build one is `paths_from_routes(flows, fabric, out, ptr, ids, gbps)` with a CSR of link-direction
ids per flow in path order (NIC tx first, NIC rx last; NVLink rows: [out port, in port]) and the
rate of every link id; the hop count is the path length unless given. `nic_links` (today:
NIC tx = src_nic, NIC rx = dst_nic, NVLink ports per GPU) and `fabric_links` (NIC, leaf -> spine,
spine -> leaf, with the spine of each flow from a callable) are two such hooks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from tracegen.tables import Flows, LinkKind

# --- WIRE.md ----------------------------------------------------------------------------------
ETH, VLAN, IPV4, IPV6, UDP, BTH, ICRC = 14, 4, 20, 40, 8, 12, 4
FCS, PREAMBLE, IFG = 4, 8, 12
RETH, IMMDT = 16, 4


def packet_overhead(vlan: bool = True, ip_version: int = 4) -> int:
    """Bytes one RoCEv2 data packet costs on the wire beyond its payload and RETH/ImmDt."""
    ip = IPV4 if ip_version == 4 else IPV6
    return ETH + (VLAN if vlan else 0) + ip + UDP + BTH + ICRC + FCS + PREAMBLE + IFG


def _message_wire(size: np.ndarray, pmtu: int, per_pkt: int) -> np.ndarray:
    npk = np.maximum(1, -(-size // pmtu))
    last = size - (npk - 1) * pmtu
    return size + (-last) % 4 + npk * per_pkt + RETH + IMMDT


def net_wire_bytes(wire_bytes, max_msg_bytes, pmtu: int, vlan: bool = True, ip_version: int = 4):
    """Bytes a NET transfer puts on the wire: its messages' packets with all headers, FCS,
    preamble, inter-frame gap and padding (WIRE.md)."""
    w = np.asarray(wire_bytes, dtype=np.int64)
    cap = np.asarray(max_msg_bytes, dtype=np.int64)
    cap = np.where(cap > 0, cap, np.maximum(w, 1))
    per_pkt = packet_overhead(vlan, ip_version)
    full, rem = w // cap, w % cap
    tail = np.where((rem > 0) | (w == 0), _message_wire(rem, pmtu, per_pkt), 0)
    return full * _message_wire(cap, pmtu, per_pkt) + tail


def ns_for_bits(nbytes, gbps) -> np.ndarray:
    """Whole ns to serialize nbytes at gbps (rounded up): bits / (Gb/s) = ns."""
    return -(-(np.asarray(nbytes, dtype=np.int64) * 8) // np.asarray(gbps, dtype=np.int64))


# --- paths --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Paths:
    """Per flow, the link directions it crosses (CSR), and what the rules need about them."""
    ptr: np.ndarray          # int64 [n_flows + 1]
    link: np.ndarray         # int64 [entries]: link-direction id
    lead_ns: np.ndarray      # int64 [entries]: least time from flow start to its first bit on the link
    lag_ns: np.ndarray       # int64 [entries]: least time from its last bit on the link to flow end
    latency_ns: np.ndarray   # int64 [n_flows]: documented latency beyond serialization
    wire: np.ndarray         # int64 [n_flows]: bytes the flow puts on each link of its path
    gbps: np.ndarray         # int64 [n_links]: rate of each link direction
    exclusive: np.ndarray    # bool [n_links]: served one flow at a time by today's scheduler
    name: Callable[[int], str]

    def flow_of(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.ptr) - 1), np.diff(self.ptr))


def flow_wire_bytes(flows: Flows, out) -> np.ndarray:
    r = flows.rows
    net = r["link"] == LinkKind.NET
    w = np.asarray(r["wire_bytes"], dtype=np.int64)
    on_net = net_wire_bytes(w, r["max_msg_bytes"], out.pmtu, out.vlan, getattr(out, "ip_version", 4))
    return np.where(net, on_net, w)


def paths_from_routes(flows: Flows, fabric, out, ptr, ids, gbps, *, hops=None, pos=None,
                      exclusive=None, name=None) -> Paths:
    """Paths from a CSR of link-direction ids per flow (path order) and the rate of each link.

    hops: per flow, links crossed on the wire (default: the path length; NVLink rows: no latency).
    pos:  per entry, its index on the full path (default: its index in the given list).
    """
    r = flows.rows
    ptr, ids = np.asarray(ptr, np.int64), np.asarray(ids, np.int64)
    gbps = np.asarray(gbps, np.int64)
    n = len(r)
    net = r["link"] == LinkKind.NET
    lens = np.diff(ptr)
    hops = lens.copy() if hops is None else np.asarray(hops, np.int64)
    flow = np.repeat(np.arange(n), lens)
    pos = (np.arange(len(ids)) - ptr[:-1][flow]) if pos is None else np.asarray(pos, np.int64)
    wire = flow_wire_bytes(flows, out)
    L = np.where(net, int(fabric.link_latency_ns), 0)
    full_pkt = out.pmtu + packet_overhead(out.vlan, getattr(out, "ip_version", 4))
    last_pkt = np.minimum(wire, full_pkt)
    P = np.where(net, ns_for_bits(last_pkt, fabric.nic_gbps), 0)
    # Store-and-forward: each switch sends the last packet again at its EGRESS link's rate (the
    # path entry after it). Where the path lists every link it crossed (fabric routes) that rate is
    # known; paths of NIC ports only fall back to the NIC's rate at every switch.
    egress = np.where(pos >= 1, ns_for_bits(last_pkt[flow], np.maximum(gbps[ids], 1)), 0)
    sf_known = np.zeros(n, np.int64)
    np.add.at(sf_known, flow, egress)
    complete = net & (lens == hops)
    sf = np.where(complete, sf_known, np.maximum(hops - 1, 0) * P)
    latency = np.where(net, hops * L + sf, 0)
    f_hops = hops[flow]
    lead = pos * (L + P)[flow]
    lag = np.where(net[flow], (f_hops - pos) * L[flow] + np.maximum(f_hops - 1 - pos, 0) * P[flow], 0)
    excl = np.zeros(len(gbps), bool) if exclusive is None else np.asarray(exclusive, bool)
    return Paths(ptr, ids, lead.astype(np.int64), lag.astype(np.int64), latency.astype(np.int64),
                 wire, gbps, excl, name or (lambda i: f"link{i}"))


def _endpoint_ids(flows: Flows, fabric):
    """Port ids: NIC n tx 2n, rx 2n+1; NVLink of rank g out 2N+2g, in 2N+2g+1 (N = n_nics)."""
    r = flows.rows
    net = r["link"] == LinkKind.NET
    N = fabric.n_nics
    tx = np.where(net, 2 * r["src_nic"].astype(np.int64), 2 * N + 2 * r["src_rank"].astype(np.int64))
    rx = np.where(net, 2 * r["dst_nic"].astype(np.int64) + 1, 2 * N + 2 * r["dst_rank"].astype(np.int64) + 1)
    return net, tx, rx


def _endpoint_name(fabric, extra=None):
    N = fabric.n_nics

    def name(i: int) -> str:
        if i < 2 * N:
            return f"NIC {fabric.nic_name(i // 2)} {'tx' if i % 2 == 0 else 'rx'}"
        if i < 2 * N + 2 * fabric.world:
            g = (i - 2 * N) // 2
            return f"NVLink rank {g} {'out' if i % 2 == 0 else 'in'}"
        return extra(i) if extra else f"link{i}"
    return name


def _hops(flows: Flows, fabric) -> np.ndarray:
    """Links a NET flow crosses: 2 under one leaf (NIC -> leaf -> NIC), 4 through a spine."""
    r = flows.rows
    net = r["link"] == LinkKind.NET
    s, d = np.maximum(r["src_nic"], 0), np.maximum(r["dst_nic"], 0)
    return np.where(net, np.where(fabric.nic_leaf[s] == fabric.nic_leaf[d], 2, 4), 0).astype(np.int64)


def nic_links(flows: Flows, fabric, out) -> Paths:
    """Today's ports: a NET flow holds src_nic's tx and dst_nic's rx (first and last link of its
    route); an NVLink flow its GPUs' NVLink out and in ports. All exclusive."""
    net, tx, rx = _endpoint_ids(flows, fabric)
    n = len(flows.rows)
    hops = _hops(flows, fabric)
    ids = np.column_stack([tx, rx]).ravel()
    pos = np.column_stack([np.zeros(n, np.int64), np.where(net, hops - 1, 1)]).ravel()
    n_links = 2 * fabric.n_nics + 2 * fabric.world
    gbps = np.r_[np.full(2 * fabric.n_nics, fabric.nic_gbps), np.full(2 * fabric.world, fabric.nvlink_gbps)]
    return paths_from_routes(flows, fabric, out, np.arange(0, 2 * n + 1, 2), ids, gbps, hops=hops, pos=pos,
                             exclusive=np.ones(n_links, bool), name=_endpoint_name(fabric))


def fabric_links(spine_of: Callable[[Flows, object], np.ndarray]):
    """A hook for the leaf-spine fabric: NIC tx, leaf -> spine, spine -> leaf, NIC rx (spine chosen
    per flow by `spine_of(flows, fabric)`); NIC and NVLink ports exclusive, fabric links shared."""
    def links_of(flows: Flows, fabric, out) -> Paths:
        net, tx, rx = _endpoint_ids(flows, fabric)
        r = flows.rows
        hops = _hops(flows, fabric)
        base = 2 * fabric.n_nics + 2 * fabric.world
        S = max(fabric.n_spines, 1)
        s_leaf = fabric.nic_leaf[np.maximum(r["src_nic"], 0)].astype(np.int64)
        d_leaf = fabric.nic_leaf[np.maximum(r["dst_nic"], 0)].astype(np.int64)
        sp = np.asarray(spine_of(flows, fabric), np.int64) % S
        up, down = base + 2 * (s_leaf * S + sp), base + 2 * (d_leaf * S + sp) + 1
        via = hops == 4
        lens = np.where(via, 4, 2)
        ptr = np.r_[0, np.cumsum(lens)]
        ids = np.empty(int(ptr[-1]), np.int64)
        ids[ptr[:-1]] = tx
        ids[ptr[1:] - 1] = rx
        ids[ptr[:-1][via] + 1] = up[via]
        ids[ptr[:-1][via] + 2] = down[via]
        n_links = base + 2 * fabric.n_leaves * S
        gbps = np.r_[np.full(2 * fabric.n_nics, fabric.nic_gbps), np.full(2 * fabric.world, fabric.nvlink_gbps),
                     np.full(2 * fabric.n_leaves * S, fabric.leaf_spine_gbps)]
        excl = np.arange(n_links) < base

        def extra(i: int) -> str:
            k, down_ = divmod(i - base, 2)
            leaf, spine = divmod(k, S)
            return f"spine{spine} -> leaf{leaf}" if down_ else f"leaf{leaf} -> spine{spine}"
        return paths_from_routes(flows, fabric, out, ptr, ids, gbps, hops=np.where(net, lens, 0),
                                 exclusive=excl, name=_endpoint_name(fabric, extra))
    return links_of


# --- the rules ----------------------------------------------------------------------------------
class Violation(NamedTuple):
    rule: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.where}: {self.detail}"


def _first(mask: np.ndarray, limit: int) -> np.ndarray:
    return np.flatnonzero(mask)[:limit]


def validate(flows: Flows, fabric, out, links_of=nic_links, *, exact: bool = True,
             tolerance_ns: int = 0, limit: int = 20) -> list[Violation]:
    """Every rule over the flow table; at most `limit` violations reported per rule.

    exact: today's list scheduler (durations and releases exactly as documented, exclusive ports).
    tolerance_ns: slack for a model that rounds times to whole ns (capacity and duration)."""
    r = flows.rows
    n = len(r)
    start, end = r["start_ns"].astype(np.int64), r["end_ns"].astype(np.int64)
    bad: list[Violation] = []
    add = lambda rule, where, detail: bad.append(Violation(rule, where, detail))

    for i in _first((start < 0) | (end < start), limit):
        add("duration", f"flow {i}", f"start {start[i]} end {end[i]}")

    # deps
    deps = flows.deps
    if len(deps.values):
        who = np.repeat(np.arange(n), deps.lengths())
        late = start[who] < end[deps.values]
        for k in _first(late, limit):
            i, d = int(who[k]), int(deps.values[k])
            add("deps", f"flow {i}", f"starts at {start[i]} before flow {d} it depends on ends at {end[d]}")

    # ops: release, op_release, op_end
    ops = flows.ops
    op_start, op_end = flows.op_start_ns, flows.op_end_ns
    if op_start is not None and len(ops):
        op = r["op_id"].astype(np.int64)
        early = start < op_start[op]
        for i in _first(early, limit):
            add("release", f"flow {i}", f"starts at {start[i]} before op {op[i]} is released at {op_start[op[i]]}")
        gap = ops.rows["gap_ns"].astype(np.int64)
        dep_end = np.zeros(len(ops), np.int64)
        if len(ops.deps.values):
            np.maximum.at(dep_end, np.repeat(np.arange(len(ops)), ops.deps.lengths()), op_end[ops.deps.values])
        due = dep_end + gap
        wrong = (op_start != due) if exact else (op_start < due)
        for o in _first(wrong, limit):
            add("op_release", f"op {o}", f"released at {op_start[o]}, its deps end at {dep_end[o]} + gap "
                f"{gap[o]} = {due[o]}")
        last = op_start.astype(np.int64).copy()
        has = np.zeros(len(ops), bool)
        has[op] = True
        last[has] = 0
        np.maximum.at(last, op, end)
        for o in _first(op_end != last, limit):
            add("op_end", f"op {o}", f"ends at {op_end[o]}, its last transfer (or release) at {last[o]}")

    # duration, capacity, exclusive
    p = links_of(flows, fabric, out)
    flow = p.flow_of()
    slowest = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(slowest, flow, p.gbps[p.link])
    has_path = np.diff(p.ptr) > 0
    need = np.where(has_path, ns_for_bits(p.wire, np.where(has_path, slowest, 1)), 0) + p.latency_ns
    took = end - start
    wrong = (took != need) if exact else (took + tolerance_ns < need)
    for i in _first(wrong, limit):
        add("duration", f"flow {i}", f"lasts {took[i]} ns, its {p.wire[i]} wire bytes at "
            f"{slowest[i] if has_path[i] else '-'} Gb/s + latency {p.latency_ns[i]} take {need[i]} ns")

    a = start[flow] + p.lead_ns
    b = end[flow] - p.lag_ns
    w = p.wire[flow]
    order = np.lexsort((a, p.link))
    links = p.link[order]
    cuts = np.flatnonzero(np.r_[True, links[1:] != links[:-1], True]) if len(links) else np.zeros(1, np.int64)
    n_cap = n_excl = 0
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        idx = order[lo:hi]
        lk = int(links[lo])
        rate = int(p.gbps[lk])
        msg = _capacity(a[idx], b[idx], w[idx], rate, tolerance_ns)
        if msg and n_cap < limit:
            n_cap += 1
            add("capacity", p.name(lk), msg)
        if exact and p.exclusive[lk] and len(idx) > 1:
            ai, bi = a[idx], b[idx]
            prev_end = np.maximum.accumulate(bi)[:-1]
            clash = np.flatnonzero(ai[1:] < prev_end)
            if len(clash) and n_excl < limit:
                n_excl += 1
                k = int(clash[0]) + 1
                j = int(idx[:k][np.argmax(bi[:k])])
                add("exclusive", p.name(lk), f"flow {int(flow[idx[k]])} occupies "
                    f"[{ai[k]}, {bi[k]}] while flow {int(flow[j])} holds it until {b[j]} "
                    f"({len(clash)} overlaps on this port)")
    return bad


def _capacity(a: np.ndarray, b: np.ndarray, w: np.ndarray, gbps: int, tol: int) -> str:
    """Flows on one link, sorted by window start: for every window [a_i, b_j] the bits of the
    flows inside must fit in (b_j - a_i + tol) x gbps. Busy periods (windows chained by overlap)
    are independent: a window spanning an idle gap is covered by its parts."""
    bits = w * 8
    reach = np.maximum.accumulate(b)
    period = np.r_[0, np.flatnonzero(a[1:] >= reach[:-1]) + 1, len(a)]
    for lo, hi in zip(period[:-1], period[1:]):
        A, B, W = a[lo:hi], b[lo:hi], bits[lo:hi]
        ob = np.argsort(B, kind="stable")
        Bs, Ws, As = B[ob], W[ob], A[ob]
        for i in range(hi - lo):
            if i and A[i] == A[i - 1]:
                continue
            inside = As >= A[i]
            cs = np.cumsum(np.where(inside, Ws, 0))
            over = inside & (cs > (Bs - A[i] + tol) * gbps)
            if over.any():
                j = int(np.argmax(over))
                return (f"{int(cs[j]) // 8} B of flows inside [{A[i]}, {Bs[j]}] ns exceed "
                        f"{(int(Bs[j]) - int(A[i])) * gbps // 8} B at {gbps} Gb/s")
    return ""


def assert_valid(flows: Flows, fabric, out, links_of=nic_links, **kw) -> None:
    bad = validate(flows, fabric, out, links_of, **kw)
    assert not bad, f"{len(bad)} schedule violations, first ones:\n" + "\n".join(map(str, bad[:12]))


def fabric_routes(flows: Flows, fabric, out) -> Paths:
    """The schedule's own fabric routes (Flows.conns: each connection's QP-0 route, link-direction
    ids of fabric.links, NIC tx first) for NET flows; NVLink out/in ports per GPU after them.
    Link rates from fabric.links. No port is exclusive (a fluid model shares every link)."""
    r = flows.rows
    net = r["link"] == LinkKind.NET
    n_dirs = 2 * len(fabric.links)
    has_conns = flows.conns is not None and len(flows.conns.route) > 0    # one node: no NIC traffic
    route = flows.conns.route[np.maximum(flows.row_conn, 0) * flows.conns.qps] if has_conns \
        else np.full((len(r), 1), -1, np.int64)
    lens = np.where(net, (route >= 0).sum(axis=1), 2)
    ptr = np.r_[0, np.cumsum(lens)]
    ids = np.empty(int(ptr[-1]), np.int64)
    keep = route[net] >= 0
    ids[np.repeat(ptr[:-1][net], lens[net]) + (np.cumsum(keep, axis=1) - 1)[keep]] = route[net][keep]
    nv = ~net
    ids[ptr[:-1][nv]] = n_dirs + 2 * r["src_rank"][nv].astype(np.int64)
    ids[ptr[:-1][nv] + 1] = n_dirs + 2 * r["dst_rank"][nv].astype(np.int64) + 1
    gbps = np.r_[np.repeat(fabric.links["gbps"].astype(np.int64), 2), np.full(2 * fabric.world, fabric.nvlink_gbps)]

    def name(i: int) -> str:
        return fabric.link_dir_name(i) if i < n_dirs else f"NVLink rank {(i - n_dirs) // 2}"
    p = paths_from_routes(flows, fabric, out, ptr, ids, gbps, hops=np.where(net, lens, 0), name=name)
    # The fluid model's documented occupancy: a flow's bits cross every link of its path during
    # [start, end - latency] (propagation and store-and-forward are added once, at the end).
    flow = p.flow_of()
    return dataclasses.replace(p, lead_ns=np.zeros_like(p.lead_ns), lag_ns=p.latency_ns[flow])
