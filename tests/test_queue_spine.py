"""Switches pausing switches in one forward pass (issue 24: pfc_pass.forward), judged by an own
replay of the departures it returns (this file's code only: the queues from arrivals and
departures, the pause windows, a plain FIFO without PFC).

The lab incast's shape: 15 senders -> 1 NIC port; 4 senders on the receiver's leaf (their frames
go NIC -> leaf0 -> receiver), 11 on three other leaves (NIC -> leaf uplink -> spine -> leaf0 ->
receiver, a spine per sender in turn); 1 MiB each in 4 KiB frames. NIC ports 400 Gb/s, uplinks and
spine ports 100 Gb/s, 1 us links: the receiver's port (800 Gb/s in, 400 out) pauses the local
NICs and the spine ports feeding it, each spine port (300 in, 100 out) pauses the leaf uplinks
(the cascade), each uplink the NICs behind it.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest

from tracegen.emit.packets.pfc_pass import forward

NIC_G, SW_G, LAT = 400, 100, 1000
FRAME = 4096 + 58 + 4                # payload + headers + FCS (bytes a switch buffers)
WIRE = lambda g: -(-(FRAME + 20) * 8 // g)   # noqa: E731  preamble + IFG
PFC_WIRE_BYTES = 64 + 20             # a PFC frame (FCS included) + preamble + IFG
PRIO = 3
XOFF, XON, QMAX = 150_000, 150_000 - 3072, 65535
PER_SENDER = (1 << 20) // 4096

# ports: 0..14 the senders' NIC ports, 15 leaf0 -> receiver, 16..19 spine s -> leaf0,
# 20..31 uplink (leaf 1..3, spine s) = 20 + 4 (leaf - 1) + s; the other directions, where PAUSEs
# go: 32..46 the leaves' ports to the senders, 47..50 leaf0 -> spine s, 51..62 spine s -> leaf 1..3
RX, SPINE0, UP0 = 15, 16, 20
GBPS = np.array([NIC_G] * 15 + [NIC_G] + [SW_G] * 4 + [SW_G] * 12 + [NIC_G] * 15 + [SW_G] * 16)
IS_SWITCH = np.arange(len(GBPS)) >= 15
LAYER = np.array([0] * 15 + [3] + [2] * 4 + [1] * 12 + [9] * 31)
REVERSE = np.r_[np.arange(32, 47), -1, np.arange(47, 51), np.arange(51, 63), np.full(31, -1)]


def incast():
    """Per frame: path, wire, latency, ready time, sender."""
    rows = []
    for s in range(15):
        if s < 4:
            path = [s, RX, -1, -1]
        else:
            leaf, spine = 1 + (s - 4) // 4, (s - 4) % 4
            path = [s, UP0 + 4 * (leaf - 1) + spine, SPINE0 + spine, RX]
        for j in range(PER_SENDER):
            rows.append((path, j * WIRE(NIC_G), s, j))
    path = np.array([r[0] for r in rows])
    wire = np.where(path >= 0, -(-(FRAME + 20) * 8 // GBPS[np.maximum(path, 0)]), 0)
    lat = np.where(path >= 0, LAT, 0)
    ready = np.array([r[1] for r in rows])
    return path, wire, lat, ready, np.array([r[2] for r in rows]), np.array([r[3] for r in rows])


def run(xoff=XOFF, xon=XON):
    path, wire, lat, ready, sender, j = incast()
    n = len(ready)
    r = forward(path, wire, lat, ready, np.full(n, PRIO), np.full(n, FRAME), GBPS, IS_SWITCH,
                np.arange(8) == PRIO, xoff, xon, QMAX, PFC_WIRE_BYTES, REVERSE)
    return r, path, wire, ready, sender, j


def arrivals(path, dep, ready):
    a = np.full(path.shape, -1)
    a[:, 0] = ready
    a[:, 1:] = np.where(path[:, 1:] >= 0, dep[:, :-1] + LAT, -1)
    return a


def replay_queues(path, arr, dep):
    """Per (frame, hop): bytes of that port's frames arrived before it and not yet leaving (an own
    heap of departures per port, as tests/queue_replay.py)."""
    by_port = defaultdict(list)
    for f, h in zip(*np.nonzero(path >= 0)):
        by_port[int(path[f, h])].append((int(arr[f, h]), int(dep[f, h]), int(f), int(h)))
    q = {}
    for evs in by_port.values():
        heap, held = [], 0
        for a, d, f, h in sorted(evs):
            while heap and heap[0] <= a:
                heapq.heappop(heap)
                held -= FRAME
            q[f, h] = held
            heapq.heappush(heap, d)
            held += FRAME
    return q


@pytest.fixture(scope="module")
def paused():
    return run()


def test_ports_never_overlap_and_keep_each_senders_order(paused):
    r, path, wire, ready, sender, j = paused
    dep = r.depart_ns
    for port in range(len(GBPS)):
        f, h = np.nonzero(path == port)
        o = np.argsort(dep[f, h], kind="stable")
        d, w = dep[f, h][o], wire[f, h][o]
        assert (d[1:] >= d[:-1] + w[:-1]).all(), f"port {port}: two frames on the wire at once"
        for s in np.unique(sender[f]):       # one QP per sender: PSN order on every port
            mine = sender[f][o] == s
            assert (np.diff(j[f][o][mine]) > 0).all(), (port, s)
    arr = arrivals(path, dep, ready)
    assert ((dep >= arr) | (path < 0)).all(), "a frame left a port before it arrived"


def queue_at(path, arr, dep, port, t, arrived_by_t=True):
    """Bytes queued at port at instant t: arrived (at or before t; strictly before: False) and
    not started to leave by t."""
    on = path == port
    a, d = arr[on], dep[on]
    got = (a <= t) if arrived_by_t else (a < t)
    return int((got & (d > t)).sum()) * FRAME


BY_ARRIVAL, BY_REFRESH, BY_XON = 2, 3, 4        # why a PFC frame was sent (pfc_pass)


def test_every_pause_follows_a_frame_above_xoff(paused):
    """Each PFC frame, judged by the replayed queue of the port that sent it: a PAUSE after a frame
    from the paused port made it exceed Xoff (to that frame's previous port, the quanta its drain to
    Xon needs), a refresh while it is still above Xon as the last PAUSE runs out, an XON when it
    went down to Xon."""
    r, path, wire, ready, sender, j = paused
    arr = arrivals(path, r.depart_ns, ready)
    q = replay_queues(path, arr, r.depart_ns)
    assert len(r.pause_to) > 10
    last_end = {}
    for i, (frm, to, t_sent, t_at, quanta, block, f, why) in enumerate(zip(
            r.pause_from, r.pause_to, r.pause_sent_ns, r.pause_at_ns, r.pause_quanta, r.pause_block_ns,
            r.pause_frame, r.pause_why)):
        rp = REVERSE[to]
        assert r.pause_slot_port[i] == rp and r.pause_slot_ns[i] >= t_sent
        assert t_at == r.pause_slot_ns[i] + -(-PFC_WIRE_BYTES * 8 // GBPS[rp]) + LAT
        if why == BY_ARRIVAL:
            h = int(np.flatnonzero(path[f] == frm)[0])
            assert arr[f, h] == t_sent and path[f, h - 1] == to, "a PAUSE goes to the port its trigger came from"
            assert q[f, h] + FRAME > XOFF, (frm, to, q[f, h])
            assert last_end.get(to, -1) <= t_at, "paused again while a PAUSE still held it"
            qb = q[f, h] + FRAME
        elif why == BY_REFRESH:
            qb = queue_at(path, arr, r.depart_ns, frm, t_sent)
            assert qb > XON and last_end[to] <= t_at, (frm, to, qb)
        else:
            assert why == BY_XON and quanta == 0 and last_end[to] > t_at
            assert queue_at(path, arr, r.depart_ns, frm, t_sent, False) <= XON
            last_end[to] = t_at
            continue
        drain_ns = -(-(qb - XON) * 8 // GBPS[frm])
        assert quanta == min(QMAX, max(1, -(-drain_ns * GBPS[to] // 512)))
        assert block == -(-quanta * 512 // GBPS[to])
        last_end[to] = t_at + block
    why = r.pause_why
    to_spine = int(((r.pause_from == RX) & (r.pause_to >= SPINE0) & (r.pause_to < UP0) & (why == BY_ARRIVAL)).sum())
    cascade = int(((r.pause_from >= SPINE0) & (r.pause_from < UP0) & (why == BY_ARRIVAL)).sum())
    assert to_spine > 0 and cascade > 0, (to_spine, cascade)
    # PFC frames on one port one after the other (those ports carry nothing else here)
    for rp in np.unique(r.pause_slot_port):
        st = np.sort(r.pause_slot_ns[r.pause_slot_port == rp])
        assert (np.diff(st) >= -(-PFC_WIRE_BYTES * 8 // GBPS[rp])).all(), rp
    print(f"\n{int((why == BY_ARRIVAL).sum())} PAUSEs after a frame above Xoff ({to_spine} leaf0 -> spine ports, "
          f"{cascade} spine -> leaf uplinks, {int(((r.pause_to < 15) & (why == BY_ARRIVAL)).sum())} to NICs), "
          f"{int((why == BY_REFRESH).sum())} refreshes, {int((why == BY_XON).sum())} XONs")


def test_no_frame_leaves_a_paused_port(paused):
    """A PAUSE holds its port from its arrival for its quanta, or until the next PFC frame for that
    port arrives (a refresh carries it on, an XON ends it)."""
    r, path, wire, ready, sender, j = paused
    dep = r.depart_ns
    o = np.lexsort((r.pause_at_ns, r.pause_to))
    to, at, block = r.pause_to[o], r.pause_at_ns[o], r.pause_block_ns[o]
    nxt_at = np.where(np.r_[to[1:] == to[:-1], False], np.r_[at[1:], 0], 1 << 62)
    held = 0
    for port, t0, t1 in zip(to, at, np.minimum(at + block, nxt_at)):
        d = dep[path == port]
        inside = d[(d >= t0) & (d < t1)]
        assert not len(inside), f"port {port} sent at {inside[:3]} while paused [{t0}, {t1})"
        held += t1 > t0
    assert held > 10


def headroom(port: int, ingress_gbps) -> int:
    """Xoff + per ingress that can be paused: what it sends until its PAUSE arrives (the trigger
    crossing one link, the PAUSE's slot and the way back: 2 latencies; the frame the PAUSE waits
    for on the way back) and the frame it is in the middle of, and the trigger frame itself."""
    return XOFF + sum(-(-g * (2 * LAT + -(-PFC_WIRE_BYTES * 8 // g)) // 8) + 3 * FRAME + PFC_WIRE_BYTES
                      for g in ingress_gbps)


def test_receiver_queue_stays_within_xoff_and_headroom(paused):
    r, path, wire, ready, sender, j = paused
    q = replay_queues(path, arrivals(path, r.depart_ns, ready), r.depart_ns)
    rx = max(v for (f, h), v in q.items() if path[f, h] == RX) + FRAME
    bound = headroom(RX, [NIC_G] * 4 + [SW_G] * 4)
    assert rx <= bound, (rx, bound)
    for s in range(4):
        sq = max(v for (f, h), v in q.items() if path[f, h] == SPINE0 + s) + FRAME
        assert sq <= headroom(SPINE0 + s, [SW_G] * 3), (s, sq)
    # without PFC the same incast overfills it: the bound is not vacuous
    free, p2, _, r2, _, _ = run(xoff=1 << 40, xon=1 << 40)
    assert not len(free.pause_to)
    q2 = replay_queues(p2, arrivals(p2, free.depart_ns, r2), free.depart_ns)
    rx_free = max(v for (f, h), v in q2.items() if p2[f, h] == RX) + FRAME
    assert rx_free > bound, (rx_free, bound)
    print(f"\nreceiver port queue {rx} B with PFC (bound {bound}), {rx_free} B without")


def test_same_input_same_pass(paused):
    r2 = run()[0]
    for k, v in vars(paused[0]).items():
        assert np.array_equal(v, getattr(r2, k)), k


def test_without_pressure_it_is_a_plain_fifo():
    """Xoff out of reach: every port a FIFO in arrival order (ties: frame order), layer by layer."""
    r, path, wire, ready, sender, j = run(xoff=1 << 40, xon=1 << 40)
    dep = np.full(path.shape, -1)
    arr = np.full(path.shape, -1)
    arr[:, 0] = ready
    for layer in range(4):
        for port in np.flatnonzero(LAYER == layer):
            f, h = np.nonzero(path == port)
            a = np.where(h == 0, ready[f], dep[f, np.maximum(h - 1, 0)] + LAT)
            free = -1
            for i in np.lexsort((f, a)):
                dep[f[i], h[i]] = max(a[i], free)
                free = dep[f[i], h[i]] + wire[f[i], h[i]]
    assert np.array_equal(dep, r.depart_ns)


def test_the_lab_incast_through_one_pass(tmp_path, monkeypatch):
    """The lab incast of tests/test_queue_incast.py (16 ranks on the 4:1 leaf-spine, rank 0 the
    receiver): its scheduled frames, ready at their NIC ports when the schedule sends them, through
    one pass (pfc_plan.from_plan). Judged as above from the departures alone: every PAUSE after a
    frame above Xoff at the port that sent it, the leaf's port to the receiving NIC pauses spine
    ports, no frame leaves a paused port, each QP's data in PSN order on every port, the receiver's
    port queue within Xoff + its ingresses' headroom."""
    import copy
    from test_queue_incast import _run
    from tracegen.emit.packets import pfc_plan
    plans = []
    real = pfc_plan.from_plan

    def keep(p, network):
        plans.append((copy.copy(p), network))     # the schedule the pass starts from (queue_rounds)
        return real(p, network)
    monkeypatch.setattr(pfc_plan, "from_plan", keep)
    _run(tmp_path / "incast", 20_000)
    p, network = [(p, n) for p, n in plans if len(p.m_conn) >= 15][-1]     # the written trace's round
    pp = real(p, network)
    r, path = pp.res, pp.path
    dep = r.depart_ns
    lat = np.where(path >= 0, p.link_lat[np.maximum(path - pp.nic_ports, 0) >> 1], 0)
    arr = np.full(path.shape, -1)
    arr[:, 0] = r.ready_ns                  # when it was ready at its NIC port (it may have waited)
    arr[:, 1:] = np.where(path[:, 1:] >= 0, dep[:, :-1] + lat[:, :-1], -1)
    assert (r.ready_ns >= pp.ready_ns).all()
    # what answers a frame leaves its NIC after that frame fully arrived: ACKs of data and CNPs
    # after their packet, ACKs of CTS after the CTS, a message's first packet after its CTS
    last = (path >= 0).sum(axis=1) - 1
    rows = np.arange(len(path))
    full = dep[rows, last] + lat[rows, last] + pp.wire_ns[rows, last]
    row_of = {(int(g), -1): i for i, g in enumerate(pp.g) if g >= 0}
    kind, kmsg, kpkt = p.k_kind, p.k_msg, p.k_pkt
    cts_row = {int(kmsg[k]): i for i, k in enumerate(pp.k) if k >= 0 and kind[k] == 2}   # plan.CTS
    waited = 0
    for i, k in enumerate(pp.k):
        if k < 0:
            continue
        if kind[k] in (1, 4):                   # plan.ACK_DATA, plan.CNP
            j = row_of[int(p.m_pkt0[kmsg[k]] + kpkt[k]), -1]
        elif kind[k] == 0 and int(kmsg[k]) in cts_row:   # plan.ACK_CTS
            j = cts_row[int(kmsg[k])]
        else:
            continue
        assert dep[i, 0] >= full[j], (int(k), int(kind[k]), int(dep[i, 0]), int(full[j]))
        waited += r.ready_ns[i] > pp.ready_ns[i]
    first_pkt = [(i, int(np.searchsorted(p.m_pkt0, g, "right") - 1)) for i, g in enumerate(pp.g)
                 if g >= 0 and g in set(p.m_pkt0.tolist())]
    for i, m in first_pkt:
        if m in cts_row:
            assert dep[i, 0] >= full[cts_row[m]], m
    assert waited > 0, "PFC must delay some packets' arrival: their ACKs wait"
    fb = pp.frame_bytes
    # own replay: per port, bytes arrived and not started to leave, at each arrival
    q = {}
    by_port = defaultdict(list)
    for f, h in zip(*np.nonzero(path >= 0)):
        by_port[int(path[f, h])].append((int(arr[f, h]), int(dep[f, h]), int(f), int(h)))
    for evs in by_port.values():
        heap, held = [], 0
        for a, d, f, h in sorted(evs):
            while heap and heap[0][0] <= a:
                held -= heapq.heappop(heap)[1]
            q[f, h] = held
            heapq.heappush(heap, (d, int(fb[f])))
            held += int(fb[f])
    xoff = network.pfc_xoff_bytes
    arrive = r.pause_why == BY_ARRIVAL
    assert arrive.sum() > 10
    for frm, to, t_sent, f in zip(r.pause_from[arrive], r.pause_to[arrive], r.pause_sent_ns[arrive],
                                  r.pause_frame[arrive]):
        h = int(np.flatnonzero(path[f] == frm)[0])
        assert arr[f, h] == t_sent and path[f, h - 1] == to and q[f, h] + fb[f] > xoff
    # the receiver's port: the last port of the data's paths (all to one NIC)
    data = pp.g >= 0
    rx_ports = np.unique(path[data, last[data]])
    assert len(rx_ports) == 1, rx_ports
    rx = int(rx_ports[0])
    to_spine = arrive & (r.pause_from == rx) & (r.pause_to >= pp.nic_ports)
    assert to_spine.sum() > 0, "the leaf's port to the receiver pauses the spine ports feeding it"
    # no frame leaves a paused port
    o = np.lexsort((r.pause_at_ns, r.pause_to))
    to, at, block = r.pause_to[o], r.pause_at_ns[o], r.pause_block_ns[o]
    nxt_at = np.where(np.r_[to[1:] == to[:-1], False], np.r_[at[1:], 0], 1 << 62)
    for port, t0, t1 in zip(to, at, np.minimum(at + block, nxt_at)):
        d = dep[path == port]
        assert not ((d >= t0) & (d < t1)).any(), port
    # each PFC frame in its own slot: no frame of that port on the wire at the same time
    for rp in np.unique(r.pause_slot_port):
        st = np.sort(r.pause_slot_ns[r.pause_slot_port == rp])
        pw = -(-84 * 8 // int(pp.port_gbps[rp]))
        f, h = np.nonzero(path == rp)
        d, w = dep[f, h], pp.wire_ns[f, h]
        o = np.argsort(d)
        d, w = d[o], w[o]
        i = np.searchsorted(d, st, "right") - 1
        assert ((i < 0) | (d[np.maximum(i, 0)] + w[np.maximum(i, 0)] <= st)).all(), rp
        j = np.searchsorted(d, st, "left")
        assert ((j >= len(d)) | (d[np.minimum(j, len(d) - 1)] >= st + pw)).all(), rp
        assert (np.diff(st) >= pw).all(), rp
    # PSN order per QP on every port
    for port in np.unique(path[data][path[data] >= 0]):
        f, h = np.nonzero((path == port) & data[:, None])
        o = np.lexsort((dep[f, h], pp.qp[f]))
        same = pp.qp[f][o][1:] == pp.qp[f][o][:-1]
        assert (np.diff(pp.g[f][o])[same] > 0).all(), port
    # the receiver's queue: Xoff + per ingress port feeding it 2 latencies at its rate + 3 frames
    ins = np.unique([int(path[f, h - 1]) for f, h in zip(*np.nonzero(path == rx)) if h > 0])
    mtu = int(fb.max())
    bound = xoff + sum(-(-int(pp.port_gbps[u]) * (2 * int(lat.max()) + -(-84 * 8 // int(pp.port_gbps[u]))) // 8)
                       + 3 * mtu + 84 for u in ins)
    peak = max(q[f, h] + int(fb[f]) for f, h in zip(*np.nonzero(path == rx)))
    assert peak <= bound, (peak, bound)
    # without PFC the same frames queue deeper there (own FIFO replay of the unpaused pass)
    free = real(p, replace(network, pfc_xoff_bytes=1 << 40, pfc_resume_offset_bytes=0))
    assert not len(free.res.pause_to)
    fd = free.res.depart_ns
    fa = np.where(path[:, 1:] >= 0, fd[:, :-1] + lat[:, :-1], -1)
    f, h = np.nonzero(path == rx)
    evs = sorted(zip(fa[f, h - 1].tolist(), fd[f, h].tolist(), fb[f].tolist()))
    heap, held, free_peak = [], 0, 0
    for a, d, b in evs:
        while heap and heap[0][0] <= a:
            held -= heapq.heappop(heap)[1]
        free_peak = max(free_peak, held + b)
        heapq.heappush(heap, (d, b))
        held += b
    assert free_peak > peak, (free_peak, peak)
    from_spines = arrive & (r.pause_from >= pp.nic_ports) & (r.pause_to >= pp.nic_ports) & (r.pause_from != rx)
    print(f"\nlab incast, one pass: {int(arrive.sum())} PAUSEs ({int(to_spine.sum())} leaf0 -> spine ports, "
          f"{int(from_spines.sum())} switch -> switch elsewhere, {int((arrive & (r.pause_to < pp.nic_ports)).sum())} "
          f"to NICs), {int((r.pause_why == BY_REFRESH).sum())} refreshes, {int((r.pause_why == BY_XON).sum())} XONs; "
          f"receiver port queue peak {peak} B (bound {bound}, {len(ins)} ingresses), {free_peak} B without PFC; "
          f"{waited} ACKs/CNPs waited for their packet")


def test_waits_keep_the_schedules_slack_and_spacing():
    """Frame 2 (an ACK) waits for frame 0 to arrive fully (+ 5 ns slack); frame 3 follows frame 2
    at its ready distance (10 ns); frame 1 waits for nothing. Two hops, 100 ns latency."""
    path = np.array([[0, 1], [0, 1], [2, 3], [2, 3]])
    wire = np.full(path.shape, 50)
    lat = np.full(path.shape, 100)
    ready = np.array([0, 60, 20, 30])
    r = forward(path, wire, lat, ready, np.zeros(4), np.full(4, 100), np.full(4, 100), np.array([0, 1, 0, 1], bool),
                np.zeros(8, bool), XOFF, XON, QMAX, PFC_WIRE_BYTES, None, after=[-1, -1, 0, -1],
                slack_ns=[0, 0, 5, 0], prev=[-1, -1, -1, 2])
    done0 = 0 + 100 + 100 + 50             # leaves port 0 at 0, port 1 at 100, fully there at 250
    assert r.ready_ns.tolist() == [0, 60, done0 + 5, done0 + 5 + 10]
    assert r.depart_ns[:, 0].tolist() == [0, 60, 255, 305]     # port 2 busy 255..305: frame 3 queues


def test_lab_incast_departures_as_segs(tmp_path, monkeypatch):
    """pfc_plan.segs_at: the pass's per-packet departures at each path position as the plan's
    runs (plan.Segs). Judged by expanding the runs with this file's own sums of the pass's wire
    times: every data packet on that position exactly once, at its departure; pauses break runs
    (more runs than messages), and runs still compress (fewer runs than packets)."""
    from test_queue_incast import _run
    from tracegen.emit.packets import hops, pacing, pfc_plan
    plans = []
    real = pacing.prepare

    def keep(*a, **kw):
        q = real(*a, **kw)
        plans.append((q, kw.get("network")))
        return q
    monkeypatch.setattr(pacing, "prepare", keep)
    _run(tmp_path / "incast", 20_000)
    p, network = next((q, n) for q, n in plans if q is not None and q.tx is not None and len(q.m_conn) >= 15)
    pp = pfc_plan.from_plan(p, network)
    dep, path = pp.res.depart_ns, pp.path
    row = {int(g): i for i, g in enumerate(pp.g) if g >= 0}
    broke = False
    for h in range(path.shape[1]):
        on = [i for i in row.values() if path[i, h] >= 0]
        if not on:
            continue
        if h == 0:
            w = p.line_wire or p.wire
        else:
            d = p.c_route[p.m_conn, h]          # path position h >= 1 leaves by route link h (0: the NIC's)
            gb = np.where(d >= 0, p.link_gbps[np.maximum(d, 0) >> 1], 1)
            w = hops.spacing(p, gb)
        s = pfc_plan.segs_at(p, pp, h, w)
        seen = {}
        for m, ka, kb, t in zip(s.msg.tolist(), s.ka.tolist(), s.kb.tolist(), s.t.tolist()):
            for kk in range(ka, kb):
                i = row[int(p.m_pkt0[m]) + kk]
                assert i not in seen, (h, m, kk)
                seen[i] = t
                t += int(pp.wire_ns[i, h])
        assert sorted(seen) == sorted(on), h
        assert all(seen[i] == dep[i, h] for i in on), h
        msgs = len({int(np.searchsorted(p.m_pkt0, pp.g[i], "right") - 1) for i in on})
        assert len(s.msg) < len(on), h
        broke |= len(s.msg) > msgs
    assert broke, "PFC pauses must break some message's back-to-back run"
    # at the receiving NIC: the last port's departure plus its link's latency (first bit)
    last = (path >= 0).sum(axis=1) - 1
    s = pfc_plan.rx_segs(p, pp, p.line_wire or p.wire)
    got = {}
    for m, ka, kb, t in zip(s.msg.tolist(), s.ka.tolist(), s.kb.tolist(), s.t.tolist()):
        for kk in range(ka, kb):
            i = row[int(p.m_pkt0[m]) + kk]
            got[i] = t
            t += int(pp.wire_ns[i, last[i]])
    assert sorted(got) == sorted(row.values())
    for i, t in got.items():
        port = int(path[i, last[i]])
        assert t == dep[i, last[i]] + p.link_lat[(port - pp.nic_ports) >> 1], i
    assert len(s.msg) < len(got)
    # the switch-to-switch links (route positions 1 .. links - 2) as hops.Hop per layer
    links = (path >= 0).sum(axis=1)
    want = {(int(i), int(h)): int(dep[i, h]) for i in range(len(path)) for h in range(1, int(links[i]) - 1)}
    seen = {}
    for hop in pfc_plan.hops_from_pass(p, pp):
        for m, ka, kb, t, d, pos in zip(hop.segs.msg.tolist(), hop.segs.ka.tolist(), hop.segs.kb.tolist(),
                                        hop.segs.t.tolist(), hop.seg_port.tolist(), hop.seg_pos.tolist()):
            for kk in range(ka, kb):
                i = row[int(p.m_pkt0[m]) + kk]
                assert path[i, pos] == pp.nic_ports + d and (i, pos) not in seen, (m, kk)
                seen[i, pos] = t
                t += int(pp.wire_ns[i, pos])
        krow = {int(k): i for i, k in enumerate(pp.k) if k >= 0}
        for k in np.flatnonzero(hop.k_t >= 0).tolist():
            i, pos = krow[k], int(hop.k_pos[k])
            assert path[i, pos] == pp.nic_ports + hop.k_port[k] and (i, pos) not in seen, k
            seen[i, pos] = int(hop.k_t[k])
    assert seen == want
    # control frames at the NICs: NIC port departure, first bit at the other NIC
    k_tx, k_rx = pfc_plan.control_times(p, pp)
    for k, i in krow.items():
        port = int(path[i, last[i]])
        assert k_tx[k] == dep[i, 0] and k_rx[k] == dep[i, last[i]] + p.link_lat[(port - pp.nic_ports) >> 1], k
    assert len(k_tx) == len(krow) == len(p.k_kind)
    assert any(k[0] in krow.values() for k in want), "control frames cross the spine too"
