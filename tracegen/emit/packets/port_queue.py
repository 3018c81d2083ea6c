"""A switch port's egress FIFO: what a capture of one fabric link can hold.

The schedule shares every link max-min in the fluid sense, but the NICs put a message's packets
on the wire back to back at their own line rate; two NICs bursting into one uplink at once would
show 2 x its rate in a capture taken at time of arrival. A real port serialises them: a frame
leaves when it has arrived and the frame before it (same direction) is off the wire. Per
direction of the file's link, in arrival order:

    t_out[i] = max(t_in[i], t_out[i-1] + wire[i-1])

which is S[i] + max_{k<=i}(t_in[k] - S[k]) with S the exclusive prefix sum of the wire times:
one cumulative maximum per window, the port's state (when it is next free) carried across
windows. Queued frames can pass into the next window's time span: they are held back until no
later arrival can precede them, so the file stays in time order.

Wire time at the port's rate from the frame's at the NIC's: ceil(w_nic x nic / port), never
less than the frame's exact time (w_nic is rounded up), at most a few ns more.
"""
from __future__ import annotations

import numpy as np

from .items import Items
from .plan import DATA, Plan


def line_wire_ns(p: Plan, it: Items, g: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per packet (item g, packet j of its message): ns its frame holds a link at the NIC's rate,
    unpaced (DCQCN's pacing widens the plan's slots, not the frames)."""
    m = it.msg[g]
    data = it.kind[g] == DATA
    w = p.line_wire.span(p.m_npk[m], m, j, j + 1)
    return np.where(data, w, it.end[g] - it.start[g])


def fifo(t_in: np.ndarray, wire: np.ndarray, free_at: int) -> tuple[np.ndarray, int]:
    """Departure times of frames arriving at t_in (in order) on a port free from free_at."""
    if not len(t_in):
        return t_in, free_at
    s = np.cumsum(wire) - wire
    head = t_in - s
    head[0] = max(int(head[0]), free_at)
    t_out = s + np.maximum.accumulate(head)
    return t_out, int(t_out[-1] + wire[-1])


def queued(p: Plan, it: Items, packets, nic_gbps: int, port_gbps: int):
    """Wrap items.windows(...): the same packets, each direction (it.queue) of the port a FIFO at
    port_gbps; yields (pos, li, j, t) in time order."""
    free_at: dict[int, int] = {}
    held = (np.zeros(0, np.int64),) * 3             # (item, packet, departure) not yet written
    for pos, li, j, t in packets:
        g = pos[li]
        w = -(-line_wire_ns(p, it, g, j) * nic_gbps // port_gbps)
        t_out = t.copy()
        queue = it.queue[g]
        for d in np.unique(queue).tolist():
            sel = np.flatnonzero(queue == d)
            t_out[sel], free_at[d] = fifo(t[sel], w[sel], free_at.get(d, np.iinfo(np.int64).min))
        g, j, t_out = (np.r_[held[0], g], np.r_[held[1], j], np.r_[held[2], t_out])
        order = np.argsort(t_out, kind="stable")
        g, j, t_out = g[order], j[order], t_out[order]
        # Later windows' packets arrive at or after this window's last arrival: anything leaving
        # before it is final.
        n = int(np.searchsorted(t_out, int(t[-1]), "right"))
        held = (g[n:], j[n:], t_out[n:])
        if n:
            yield _as_window(g[:n], j[:n], t_out[:n])
    if len(held[0]):
        yield _as_window(*held)


def _as_window(g, j, t):
    pos, li = np.unique(g, return_inverse=True)
    return pos, li.astype(np.int64), j, t
