"""The per-file packet plan: a file's items (segments of messages, control frames) in time order,
expanded into packets (item, packet index, timestamp) window by window, and its exact size.

Packet times: packet k of a message starts offset(k) after its burst starts (PerPacket wire times:
first, then middle-sized slots). This is the one place where a packet's time is derived from its
item's start; per-message pacing (a rate per message, or per-packet nominal times) plugs in here
and in Plan.offset / Plan.packets_before.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .copies import FileSpec, Part, sources
from .plan import DATA, Plan, Segs


def packets_in_window(p: Plan, segs: Segs, idx, a_ns: int, b_ns: int):
    """Per segment: the packets [lo, hi) that start in [a_ns, b_ns)."""
    m, ka, kb = segs.msg[idx], segs.ka[idx], segs.kb[idx]
    base = p.offset(m, ka, segs.w) - segs.t[idx]
    return p.packets_before(m, ka, kb, a_ns + base, segs.w), p.packets_before(m, ka, kb, b_ns + base, segs.w)


def count(p: Plan, spec: FileSpec) -> tuple[int, int]:
    """(records, bytes with the file header) of one file."""
    srcs, window = sources(p), p.sel.window_ns
    n, nbytes = 0, 0
    for part in spec.parts:
        what, idx = srcs[part.src][2], part.idx
        if isinstance(what, Segs):
            m = what.msg[idx]
            if window is None:
                lo, hi = what.ka[idx], what.kb[idx]
            else:
                lo, hi = packets_in_window(p, what, idx, window[0] - part.dt_ns, window[1] - part.dt_ns)
            n += int((hi - lo).sum())
            nbytes += int(p.rec.span(p.m_npk[m], m, lo, hi).sum())
        else:
            inside = np.ones(len(idx), bool)
            if window is not None:
                t = what[idx] + part.dt_ns
                inside = (t >= window[0]) & (t < window[1])
            n += int(inside.sum())
            nbytes += int(p.k_rec_bytes[idx][inside].sum())
    n += len(spec.lead)
    nbytes += sum(int(p.fmt.rec_bytes(len(frame))) for _, frame, _ in spec.lead)
    return n, nbytes + len(p.fmt.file_header(spec.interfaces))


@dataclass
class Items:
    """A file's scheduled segments and control frames, sorted by start time (at the file's port)."""
    kind: np.ndarray
    msg: np.ndarray
    ka: np.ndarray       # first packet of a segment (0 for control frames)
    pkt: np.ndarray      # ACK_DATA / CNP: the packet it answers
    npk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    rec_bytes: np.ndarray
    rx: np.ndarray       # a received copy: at equal times, sent copies come first
    link: np.ndarray
    iface: np.ndarray
    queue: np.ndarray    # a fabric port's direction (Part.queue)
    ip_id: np.ndarray    # IPv4 identification of packet ka (control frames: theirs)
    first_ns: np.ndarray | None = None   # per item: its packets' spacing, first and middle slots (a
    mid_ns: np.ndarray | None = None     # switch link's, hops.py); None: the plan's everywhere

    @staticmethod
    def gather(p: Plan, parts: list[Part]) -> "Items":
        cols = {k: [] for k in Items.__dataclass_fields__}
        srcs = sources(p)
        own = any(isinstance(srcs[part.src][2], Segs) and srcs[part.src][2].w is not None for part in parts)
        for part in parts:
            _, rx, what = srcs[part.src]
            idx = part.idx
            if isinstance(what, Segs):
                m, ka, kb = what.msg[idx], what.ka[idx], what.kb[idx]
                npk = p.m_npk[m]
                w = what.w or p.wire
                vals = dict(kind=np.full(len(idx), DATA, np.int8), msg=m, ka=ka, pkt=ka, npk=kb - ka,
                            start=what.t[idx] + part.dt_ns,
                            end=what.t[idx] + part.dt_ns + w.span(npk, m, ka, kb),
                            rec_bytes=p.rec.span(npk, m, ka, kb), ip_id=what.ip_id[idx])
                if own:
                    vals.update(first_ns=np.broadcast_to(w.first_of(m), len(idx)),
                                mid_ns=np.broadcast_to(w.mid_of(m), len(idx)))
            else:
                vals = dict(kind=p.k_kind[idx], msg=p.k_msg[idx], ka=np.zeros(len(idx), np.int64),
                            pkt=p.k_pkt[idx], npk=np.ones(len(idx), np.int64), start=what[idx] + part.dt_ns,
                            end=what[idx] + part.dt_ns + p.k_wire_ns[idx], rec_bytes=p.k_rec_bytes[idx],
                            ip_id=p.k_ip_id[idx])
                if own:
                    vals.update(first_ns=np.zeros(len(idx), np.int64), mid_ns=np.zeros(len(idx), np.int64))
            vals.update(rx=np.full(len(idx), rx), link=np.broadcast_to(part.link, len(idx)),
                        iface=np.full(len(idx), part.iface), queue=np.full(len(idx), part.queue))
            for k, v in vals.items():
                cols[k].append(v)
        whole = {k: np.concatenate(v) if v else None if k in ("first_ns", "mid_ns") else np.zeros(0, np.int64)
                 for k, v in cols.items()}
        del cols
        order = np.lexsort((whole["rx"], whole["start"]))      # stable: ties keep gather order
        for k in whole:              # one column at a time: the file's items are held about once
            if whole[k] is not None:
                whole[k] = whole[k][order]
        return Items(**whole)


def windows(p: Plan, it: Items, window_packets: int, window_bytes: int, t0_ns: int = 0):
    """Yield the file's packets in time order, in windows of about window_packets packets and
    window_bytes record bytes: (pos: the window's items, li: each packet's index in pos, j: its
    index in its message, t: its timestamp - t0_ns), sorted by time.

    A window [t_a, t_b) holds the items starting in it plus earlier ones still running at t_a;
    no item lasts longer than the longest one, so those start within that span before t_a."""
    if len(it.start) == 0:
        return
    cum_pk, cum_b = np.cumsum(it.npk), np.cumsum(it.rec_bytes)
    marks = np.r_[np.searchsorted(cum_pk, np.arange(window_packets, cum_pk[-1], window_packets), "right"),
                  np.searchsorted(cum_b, np.arange(window_bytes, cum_b[-1], window_bytes), "right")]
    cuts = np.unique(np.r_[it.start[0], it.start[marks[marks < len(it.start)]]])
    cuts = np.r_[cuts, np.iinfo(np.int64).max]
    longest = int((it.end - it.start).max())
    # Packet k of a burst starts first + (k - 1) * mid after the burst (only the last packet of a
    # message has its own length, and nothing starts after it); paced messages have their own.
    offset = lambda m, k: np.where(k > 0, p.wire.first_of(m) + (k - 1) * p.wire.mid_of(m), 0)
    paced = isinstance(p.wire.first, np.ndarray)
    own = it.first_ns is not None             # a switch link's spacing per item (hops.py)
    for t_a, t_b in zip(cuts[:-1], cuts[1:]):
        a0, a, b = np.searchsorted(it.start, [t_a - longest, t_a, t_b])
        before = np.arange(a0, a)
        pos = np.r_[before[it.end[before] > t_a], np.arange(a, b)].astype(np.int64)
        # Expand items into packets (li: the item's index in pos); keep those starting inside.
        n = it.npk[pos]
        li = np.repeat(np.arange(len(pos)), n)
        j = np.arange(len(li)) - np.repeat(np.cumsum(n) - n, n) + it.ka[pos][li]
        w_msg = it.msg[pos]
        if own:
            f, md = it.first_ns[pos], it.mid_ns[pos]
            ka = it.ka[pos]
            t = (it.start[pos] - np.where(ka > 0, f + (ka - 1) * md, 0))[li] + np.where(j > 0, f[li] + (j - 1) * md[li], 0)
        else:
            t = (it.start[pos] - offset(w_msg, it.ka[pos]))[li] + offset(w_msg[li] if paced else None, j)
        keep = (t >= t_a) & (t < t_b)
        if p.sel.window_ns is not None:
            keep &= (t >= p.sel.window_ns[0]) & (t < p.sel.window_ns[1])
        if not keep.any():
            continue
        li, j, t = li[keep], j[keep], t[keep]
        # File order: time, then item, then packet - the expansion order, so a stable sort on time.
        sel = np.argsort(t, kind="stable")
        yield pos, li[sel], j[sel], t[sel] - t0_ns
