"""How a flow's messages follow the rate the schedule gave it: one constant pace (stretch), or,
for a flow whose rate changed while it sent, its cumulative sent-bytes curve (RateCurve,
follow_rates: from the fluid engine's ItemRates)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def stretch(burst_ns, m_row, n_rows: int, send_ns) -> np.ndarray:
    """Per flow: the pace of its packets, send_ns (the time the schedule gives the flow to send)
    over its line-rate time, when that is more than 1 % beyond it; else 1 (line rate)."""
    total = np.bincount(m_row, burst_ns, minlength=n_rows).astype(np.int64)
    slack = np.asarray(send_ns, np.int64) - total
    slow = (slack > 0) & (slack > total // 100)
    return np.where(slow, send_ns / np.maximum(total, 1), 1.0)


@dataclass
class RateCurve:
    """The cumulative sent-bytes curves of the flows whose rate changed while they sent (from
    fluid.ItemRates), piecewise linear, concatenated: piece k of row k_row[k] starts at k_t[k]
    (ns) with g0[k] bytes sent by all earlier pieces (earlier rows' included) and sends k_v[k]
    bytes/ns. A message position x (ns of line-rate wire time into its flow) is scaled to the
    flow's bytes: byte (m_x0[m] + x) * row_scale of its row."""
    m_row: np.ndarray        # per message: its flow row, -1 if its flow keeps one pace
    m_x0: np.ndarray         # per message: line-rate ns of its flow before it
    row_scale: np.ndarray    # per row: curve bytes per line-rate ns
    row_off: np.ndarray      # per row: g0 of its first piece
    row_lo: np.ndarray       # per row: its pieces [row_lo, row_hi]
    row_hi: np.ndarray
    g0: np.ndarray
    k_t: np.ndarray
    k_v: np.ndarray

    def at(self, m, x) -> np.ndarray:
        """When (float ns) the flow of messages m (on the curve) reaches line-rate offset x of m."""
        r = self.m_row[m]
        g = self.row_off[r] + (self.m_x0[m] + x) * self.row_scale[r]
        k = np.clip(np.searchsorted(self.g0, g, "right") - 1, self.row_lo[r], self.row_hi[r])
        v = self.k_v[k]
        return self.k_t[k] + np.where(v > 0, (g - self.g0[k]) / np.where(v > 0, v, 1), 0.0)


def follow_rates(rates, net_idx, start_ns, finish_ns, burst, excl, m_row, row_base):
    """Messages of the flows whose rate changed while they sent (fluid.ItemRates, item = flow
    row; net_idx: the plan's rows in the flow table, start_ns/finish_ns per plan row): each at
    the time the flow's cumulative sent-bytes curve (piecewise linear from its rate records)
    reaches its first byte - its share of the flow's line-rate time, scaled to the flow's bytes -
    and paced at its own part of the curve (its time on the curve over its line-rate time, 1
    within 1 %); the curve itself (RateCurve) places its packet trains (Plan.paced_offset).
    Returns (messages, nominal ns, pace, RateCurve), or None when no flow's rate changed.
    Flows with one rate keep the constant pace (stretch); so do flows whose records the engine's
    memory bound cut short (finish after ItemRates.complete_until)."""
    if rates is None or not len(rates.t):
        return None
    n_rows = len(net_idx)
    r = rates.take(net_idx)
    o = np.argsort(r.item, kind="stable")                 # per row, in time order
    k_row, k_t, k_v = r.item[o], r.t[o].astype(np.int64), r.bytes_per_ns[o]
    start_ns, finish_ns = np.asarray(start_ns, np.int64), np.asarray(finish_ns, np.int64)
    count = np.bincount(k_row, minlength=n_rows)
    traj = (count >= 2) & (finish_ns <= rates.complete_until)
    if not traj.any():
        return None
    keep = traj[k_row]
    k_row, k_t, k_v = k_row[keep], k_t[keep], k_v[keep]
    last = np.r_[k_row[1:] != k_row[:-1], True]
    k_end = np.where(last, finish_ns[k_row], np.r_[k_t[1:], 0])
    seg = k_v * np.maximum(k_end - k_t, 0)                  # bytes sent on each piece
    g0 = np.cumsum(seg) - seg                               # global cumulative bytes (rows concatenated)
    lo = np.flatnonzero(np.r_[True, k_row[1:] != k_row[:-1]])
    hi = np.r_[lo[1:], len(k_row)] - 1
    row_lo, row_hi = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64)
    row_lo[k_row[lo]], row_hi[k_row[lo]] = lo, hi
    row_off = np.zeros(n_rows)
    row_off[k_row[lo]] = g0[lo]
    row_bytes = np.zeros(n_rows)
    np.add.at(row_bytes, k_row, seg)
    row_burst = np.bincount(m_row, burst, minlength=n_rows).astype(np.float64)
    curve = RateCurve(m_row=np.where(traj[m_row], m_row, -1), m_x0=(excl - excl[row_base]).astype(np.float64),
                      row_scale=row_bytes / np.maximum(row_burst, 1), row_off=row_off, row_lo=row_lo,
                      row_hi=row_hi, g0=g0, k_t=k_t, k_v=k_v)
    msgs = np.flatnonzero(traj[m_row])
    t0, t1 = curve.at(msgs, 0.0), curve.at(msgs, burst[msgs].astype(np.float64))
    b = burst[msgs].astype(np.int64)
    d = t1 - t0
    slow = (d - b > 0) & (d - b > b // 100)
    pace = np.where(slow, d / np.maximum(b, 1), 1.0)
    return msgs, np.maximum(np.floor(t0).astype(np.int64), start_ns[m_row[msgs]]), pace, curve
