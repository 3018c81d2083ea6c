"""PFC through the switches in one forward pass in time order (issue 24): per-packet egress
FIFOs with pause states, so that a switch can pause a switch (a leaf the spine ports feeding it,
a spine the leaf uplinks feeding it) without rounds.

Why one pass: a PAUSE sent at t only holds frames that start after its arrival on the paused
port, and a held frame only arrives later downstream. Processing every port's events in global
time order (frame arrivals, ports going free, PAUSEs arriving, pauses running out) therefore
decides each departure once, from what already happened - consistent by construction. The
earlier attempt (silences of switch ports recomputed from the last schedule's queues, round
after round) never settled on the 15:1 incast.

Model (at every switch egress port): each frame has a path of egress ports
(its NIC port first, then the switch ports it leaves by); it reaches port h + 1 one link latency
after it started on port h (cut-through). Each port keeps one FIFO per 802.1p priority; when the
port is free it sends, of the priorities not paused, the head that arrived first (one FIFO across
priorities while nothing is paused), for its wire time at the port's rate. A switch port's queue
(bytes with FCS of the frames of that port and priority that arrived and have not started to
leave, queue_marks.queue_at_arrival) that exceeds Xoff once a frame of a pausable priority is
enqueued pauses the port that frame came from (its path's previous port, a NIC's or a switch's)
- the ingress an 802.1Qbb switch MMU counts (HPCC's ns-3 SwitchMmu::CheckShouldPause(port,
qIndex)) when that ingress feeds the congested egress. The PAUSE takes its own slot on the port
that sends towards the paused one (reverse_port: a switch port, the link's other direction, or the
leaf's port to that NIC) at its first frame boundary at or after the trigger (64 B + preamble +
IFG; the frames queued there wait), a capture at the paused port shows it one link latency after
its slot starts, and it acts once it has fully arrived; its quanta (512 bit times at the paused port's
rate, at most qmax) cover the drain of the queue to Xon at the congested port's rate. While a
PAUSE holds a port no arrival from it pauses it again; instead, when a new PAUSE would just reach
it as the old runs out and the queue is still above Xon (its own port may be paused: it did not
drain as the quanta assumed), the switch refreshes it; when the queue goes down to Xon the switch
sends every port it still holds an XON (a PFC frame with quanta 0: 802.1Qbb; the resume of
HPCC's ns-3 SwitchNode::CheckAndSendResume). Without refreshes a paused spine port's queue grew by
a round trip of every ingress at each expiry. A frame the upstream port started before the PAUSE
arrived finishes; the others of that priority wait.
A spine port that fills while paused pauses the leaf uplinks feeding it the same way (cascade).
A frame may wait for another (forward's after / prev): an ACK is released when its packet has
fully arrived, plus the slack the schedule gave it - so held frames delay what answers them, in
the same pass.

Wired (issue 24): with output.ecn_marking=queue and network.pfc, every mark round of
queue_rounds.queue_marks_and_cnps runs the schedule's frames through pfc_plan.from_plan and the
trace takes its times from here (queue_rounds.apply_pass, through pfc_plan's converters: a NIC
view its NIC port's departures and arrivals, a switch view its own ports'),
CE marks from queue_bytes (queue_rounds.pass_frames), the PFC frames (pfc.PfcFrames) on the NICs'
and the switch links' files and in port_counters. Rates: one per port, the links' at t = 0
(Plan.link_gbps_at): a scenario whose link rates change mid-run is not modelled here.

Per frame and hop arrays: memory is proportional to the packets times the path length.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numba
import numpy as np

QUANTUM_BITS = 512
# event kinds, in their order at one instant: a PAUSE/XON applies first, then ports send (a frame
# leaving at t is not queued at t), then frames arrive, then refreshes look at the queues
_PAUSE, _TRY, _ARRIVE, _REFRESH, _DONE = 0, 1, 2, 3, 5
_XON = 4                                 # PassResult.pause_why: ARRIVE (a frame above Xoff), REFRESH, XON


@dataclass
class PassResult:
    depart_ns: np.ndarray     # [n, H]: start on the wire at each port of the path, -1 past its end
    ready_ns: np.ndarray      # [n]: when it was ready at its first port (later than asked: it waited for a frame)
    queue_bytes: np.ndarray   # [n, H]: the port's queue of its priority at its arrival (before it)
    # PAUSE frames, in the order they were sent
    pause_from: np.ndarray    # the congested port that sent it
    pause_to: np.ndarray      # the port paused
    pause_prio: np.ndarray
    pause_sent_ns: np.ndarray  # the arrival that crossed Xoff
    pause_at_ns: np.ndarray    # its arrival at the paused port
    pause_quanta: np.ndarray   # 0: XON
    pause_block_ns: np.ndarray
    pause_frame: np.ndarray    # the frame whose arrival crossed Xoff (-1: a refresh or an XON)
    pause_why: np.ndarray      # _ARRIVE: a frame above Xoff, _REFRESH: still above Xon as it runs out, _XON
    pause_slot_ns: np.ndarray  # its start on the wire (reverse_port's first frame boundary at or after pause_sent_ns)
    pause_slot_port: np.ndarray  # the port it goes out by (-1: none given)


def forward(path, wire_ns, lat_ns, ready_ns, prio, frame_bytes, port_gbps, is_switch, pausable,
            xoff: int, xon: int, qmax: int, pause_wire_bytes: int, reverse_port=None, after=None, slack_ns=None,
            prev=None) -> PassResult:
    """One pass over every frame's path (see the module doc). path [n, H]: egress port ids, -1
    padded; wire_ns [n, H]: the frame's wire time at each port; lat_ns [n, H]: latency of the
    link each port sends on; ready_ns [n]: when the frame is ready at its first port; prio,
    frame_bytes [n]; per port: port_gbps, is_switch (its queue may pause); pausable [8]: the
    priorities PFC pauses (802.1Qbb class-enable); pause_wire_bytes: a PFC frame on the wire
    (preamble, IFG and FCS included); reverse_port: per port, the port that sends towards it (its
    PAUSEs' own slot), -1 or None: none (a PAUSE then takes no port's time).
    What a frame waits for (-1: nothing): after [n], a frame that must have fully arrived at the
    end of its path slack_ns before it (an ACK its packet, a message its CTS: the schedule's
    slack kept); prev [n], a frame it follows at its ready_ns distance (a QP's packets keep their
    order and spacing when one of them waits)."""
    n, H = path.shape
    P = len(port_gbps)
    rev = np.full(P, -1, np.int64) if reverse_port is None else np.asarray(reverse_port, np.int64)
    none = np.full(n, -1, np.int64)
    after = none if after is None else np.asarray(after, np.int64)
    prev = none if prev is None else np.asarray(prev, np.int64)
    slack = np.zeros(n, np.int64) if slack_ns is None else np.asarray(slack_ns, np.int64)
    # who waits for each frame (CSR): its arrival (after), its release (prev)
    a_ptr, a_who = _csr(after, n)
    p_ptr, p_who = _csr(prev, n)
    out = _forward(np.ascontiguousarray(path, np.int64), np.ascontiguousarray(wire_ns, np.int64),
                   np.ascontiguousarray(lat_ns, np.int64), np.asarray(ready_ns, np.int64), np.asarray(prio, np.int64),
                   np.asarray(frame_bytes, np.int64), np.asarray(port_gbps, np.int64), np.asarray(is_switch, np.bool_),
                   np.asarray(pausable, np.bool_), int(xoff), int(xon), int(qmax), int(pause_wire_bytes), rev,
                   after, slack, prev, a_ptr, a_who, p_ptr, p_who, n, H, P)
    dep, q, pz, rel = out
    assert (rel >= 0).all(), "pfc_pass: frames wait for frames that never arrive (a cycle in after/prev)"
    return PassResult(dep, rel, q, *(pz[:, c].copy() for c in range(11)))


def _csr(dep_on: np.ndarray, n: int):
    who = np.flatnonzero(dep_on >= 0)
    who = who[np.argsort(dep_on[who], kind="stable")]
    ptr = np.r_[0, np.cumsum(np.bincount(dep_on[who], minlength=n))]
    return ptr.astype(np.int64), who.astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _quanta(q, xon, port_gbps, up_gbps, qmax):
    """The quanta that cover queue q's drain to Xon at port_gbps, in 512-bit times at up_gbps."""
    drain_ns = -(-(q - xon) * 8 // port_gbps)
    return min(qmax, max(1, -(-drain_ns * up_gbps // QUANTUM_BITS)))


@numba.njit(cache=True, nogil=True)
def _slot(t, rp, up_gbps, busy, gbps, pause_bytes, ev):
    """A PFC frame towards a port: (its start, its wire time) on rp, the port that sends towards
    it - at the first frame boundary at or after t (a MAC control frame goes ahead of the queued
    data, never cutting a frame in flight: 802.3 Annex 31B), the port busy meanwhile."""
    if rp < 0:
        return t, -(-pause_bytes * 8 // up_gbps)
    start = max(t, busy[rp])
    w = -(-pause_bytes * 8 // gbps[rp])
    busy[rp] = start + w
    heapq.heappush(ev, (busy[rp], np.int64(_TRY), rp, np.int64(0)))
    return start, w


@numba.njit(cache=True, nogil=True)
def _forward(path, wire, lat, ready, prio, fbytes, gbps, is_switch, pausable, xoff, xon, qmax, pause_bytes, rev,
             after, slack, prev, a_ptr, a_who, p_ptr, p_who, n, H, P):
    NP = 8
    dep = np.full((n, H), -1, np.int64)
    arr = np.full((n, H), -1, np.int64)
    qat = np.zeros((n, H), np.int64)
    nxt = np.full(n * H, -1, np.int64)           # FIFO links of entries e = frame * H + hop
    head = np.full(P * NP, -1, np.int64)
    tail = np.full(P * NP, -1, np.int64)
    qbytes = np.zeros(P * NP, np.int64)
    busy = np.full(P, -(1 << 62), np.int64)     # port free from
    paused = np.full(P * NP, -(1 << 62), np.int64)  # (port, prio) paused until
    # per paused (port, prio) u, as its pauser sees it: until when its last PAUSE holds it, which
    # queue sent that, the latency back to it
    until = np.full(P * NP, -(1 << 62), np.int64)
    owner = np.full(P * NP, -1, np.int64)
    lead = np.zeros(P * NP, np.int64)           # a PFC frame's wire time + the latency back to it
    lat_back = np.zeros(P * NP, np.int64)
    rtime = np.full(P * NP, -1, np.int64)       # when its pauser looks again (REFRESH)
    # per queue s the ports it paused since its last XON (a linked list: each PAUSE adds one node,
    # each XON walks them once)
    held_by = np.full(P * NP, -1, np.int64)
    node_u = [np.int64(0)]
    node_u.pop()
    node_next = [np.int64(0)]
    node_next.pop()
    pz = []
    # events (time, kind, a, b): PAUSE a = u, b = its end (b = time: XON); TRY a = port;
    # ARRIVE a = entry; REFRESH a = u, b = the queue that paused it
    ev = [(np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    ev.pop()
    rel = np.full(n, -1, np.int64)
    done_after = np.zeros(n, np.int64)
    pending = (after >= 0).astype(np.int64) + (prev >= 0)
    for i in range(n):
        if pending[i] == 0:
            rel[i] = ready[i]
            ev.append((ready[i], np.int64(_ARRIVE), np.int64(i * H), np.int64(0)))
    heapq.heapify(ev)
    while len(ev):
        t, kind, a, b = heapq.heappop(ev)
        if kind == _DONE or (kind == _ARRIVE and a % H == 0):
            # frame j fully arrived (DONE: those waiting for its arrival) or is released (ARRIVE at
            # its first port: those following it) - release those with nothing else to wait for
            j = a // H
            ptr, who = (a_ptr, a_who) if kind == _DONE else (p_ptr, p_who)
            for x in range(ptr[j], ptr[j + 1]):
                d = who[x]
                if kind == _DONE:
                    done_after[d] = t
                pending[d] -= 1
                if pending[d] == 0:
                    r = max(ready[d], t)
                    if after[d] >= 0:
                        r = max(r, done_after[d] + slack[d])
                    if prev[d] >= 0:
                        r = max(r, rel[prev[d]] + ready[d] - ready[prev[d]])
                    rel[d] = r
                    heapq.heappush(ev, (r, np.int64(_ARRIVE), d * H, np.int64(0)))
            if kind == _DONE:
                continue
        if kind == _PAUSE:
            paused[a] = b
            heapq.heappush(ev, (b, np.int64(_TRY), a // NP, np.int64(0)))
            continue
        if kind == _REFRESH:
            # the PAUSE it sent runs out as a new one would arrive: still above Xon, pause again
            if owner[a] == b and rtime[a] == t and qbytes[b] > xon:
                up, port = a // NP, b // NP
                quanta = _quanta(qbytes[b], xon, gbps[port], gbps[up], qmax)
                block = -(-quanta * QUANTUM_BITS // gbps[up])
                start, w = _slot(t, rev[up], gbps[up], busy, gbps, pause_bytes, ev)
                t_up = start + w + lat_back[a]      # = until[a], or later: a short pause, a busy port
                lead[a] = w + lat_back[a]
                until[a] = t_up + block
                rtime[a] = max(t + 1, until[a] - lead[a])
                pz.append((port, up, a % NP, t, t_up, quanta, block, np.int64(-1), np.int64(_REFRESH), start, rev[up]))
                heapq.heappush(ev, (t_up, np.int64(_PAUSE), a, t_up + block))
                heapq.heappush(ev, (rtime[a], np.int64(_REFRESH), a, b))
            continue
        if kind == _ARRIVE:
            f, h = a // H, a % H
            port, pr = path[f, h], prio[f]
            s = port * NP + pr
            arr[f, h] = t
            qat[f, h] = qbytes[s]
            if tail[s] >= 0:
                nxt[tail[s]] = a
            else:
                head[s] = a
            tail[s] = a
            qbytes[s] += fbytes[f]
            if is_switch[port] and pausable[pr] and h > 0 and qbytes[s] > xoff:
                up = path[f, h - 1]
                u = up * NP + pr
                if until[u] <= t + lat[f, h - 1]:  # not while a PAUSE still holds it (REFRESH does)
                    start, w = _slot(t, rev[up], gbps[up], busy, gbps, pause_bytes, ev)
                    t_up = start + w + lat[f, h - 1]
                    quanta = _quanta(qbytes[s], xon, gbps[port], gbps[up], qmax)
                    block = -(-quanta * QUANTUM_BITS // gbps[up])
                    until[u], owner[u], lat_back[u], lead[u] = t_up + block, s, lat[f, h - 1], w + lat[f, h - 1]
                    node_u.append(u)
                    node_next.append(held_by[s])
                    held_by[s] = len(node_u) - 1
                    rtime[u] = max(t + 1, until[u] - lead[u])
                    pz.append((port, up, pr, t, t_up, quanta, block, f, np.int64(_ARRIVE), start, rev[up]))
                    heapq.heappush(ev, (t_up, np.int64(_PAUSE), u, t_up + block))
                    heapq.heappush(ev, (rtime[u], np.int64(_REFRESH), u, s))
            port_try = port
        else:
            port_try = a
        # the port sends if it is free and some priority not paused has a frame
        if busy[port_try] > t:
            continue
        best, best_t = -1, np.int64(1 << 62)
        for pr in range(NP):
            s = port_try * NP + pr
            e = head[s]
            if e < 0:
                continue
            if paused[s] > t:               # its TRY comes when the pause runs out
                continue
            ta = arr[e // H, e % H]
            if ta < best_t or (ta == best_t and e < best):
                best, best_t = e, ta
        if best < 0:
            continue
        f, h = best // H, best % H
        s = port_try * NP + prio[f]
        head[s] = nxt[best]
        if head[s] < 0:
            tail[s] = -1
        qbytes[s] -= fbytes[f]
        dep[f, h] = t
        busy[port_try] = t + wire[f, h]
        heapq.heappush(ev, (busy[port_try], np.int64(_TRY), port_try, np.int64(0)))
        if h + 1 < H and path[f, h + 1] >= 0:
            heapq.heappush(ev, (t + lat[f, h], np.int64(_ARRIVE), best + 1, np.int64(0)))
        elif p_ptr[f + 1] > p_ptr[f] or a_ptr[f + 1] > a_ptr[f]:
            heapq.heappush(ev, (t + lat[f, h] + wire[f, h], np.int64(_DONE), f * H, np.int64(0)))
        if qbytes[s] <= xon < qbytes[s] + fbytes[f]:
            # down to Xon: XON (a PFC frame with quanta 0) to every port this queue still holds
            # (after the frame that just started, if it goes out by the same port)
            i = held_by[s]
            while i >= 0:
                u = node_u[i]
                if owner[u] == s and until[u] > t + lead[u]:
                    up = u // NP
                    start, w = _slot(t, rev[up], gbps[up], busy, gbps, pause_bytes, ev)
                    t_up = start + w + lat_back[u]
                    until[u], owner[u] = t_up, -1
                    pz.append((port_try, up, u % NP, t, t_up, np.int64(0), np.int64(0), np.int64(-1),
                               np.int64(_XON), start, rev[up]))
                    heapq.heappush(ev, (t_up, np.int64(_PAUSE), u, t_up))
                i = node_next[i]
            held_by[s] = -1
    res = np.zeros((len(pz), 11), np.int64)
    for i in range(len(pz)):
        for c in range(11):
            res[i, c] = pz[i][c]
    return dep, qat, res, rel
