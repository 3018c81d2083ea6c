"""The wire plan -> capture files: pcap / pcapng per NIC (host view), merged, per switch port or
per lab tester port, written window by window from one reused buffer (bounded memory).

Packets are built per file from the plan (packets.py), a window at a time. The packets of one
item (a run of one message's packets, or one control frame) and class (First/Only, Middle,
Last; CE-marked or not) share every header byte but the PSN: one template row each (record
header + frame headers, ICRC by table lookups: CRC is affine in the headers and the payload is
constant per size), copied to its packets with one gather; per packet only the timestamp, the
PSN and the ICRC change (the PSN's share of the CRC by lookup). Records land in the buffer by
one fancy-index copy per record width through a byte-offset view.
  * Ethernet and TTL are those of the link the copy is on: a NIC's own capture has its sent
    frames as they leave (to its leaf's router MAC, TTL 64) and its received frames as they
    arrive (from its leaf's router MAC, TTL 64 - routers crossed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import Output
from ..tables import Flows
from ..topology import Fabric
from . import congestion, roce, select
from .capture_file import Interface, comment_option_bytes, comment_options
from .packets import (ACK_CTS, ACK_DATA, CNP, COMMENT_PREFIX, CTS, CTS_BYTES, DATA, IP_TTL, _PATTERN,
                      _data_packet, _incl_cap, _pad4, _Plan, _prepare, _Segs)
from .roce import Opcode

# Slice budget per write: bounds memory whatever the trace size.
WINDOW_PACKETS = 1 << 16
WINDOW_BYTES = 64 << 20


# --- public -------------------------------------------------------------------------------------

def estimate_pcap(flows: Flows, fabric: Fabric, out: Output, qps: int = 1) -> tuple[int, int]:
    """(packet records, bytes on disk) over all files write_pcaps would write; exact.
    Host view unfiltered: every packet is recorded twice, in its sender's file and its receiver's.
    Only a time window (or CNPs) needs the schedule; the other filters count from the plan."""
    fabric, lab_plan = _lab(out, fabric)
    p = _prepare(flows, fabric, out, qps, times=bool(out.time_window) or _view(out) != "nic")
    if p is None:
        return 0, 0
    p.lab = lab_plan
    if p.tx is None:
        return _host_counts_unscheduled(p, fabric)
    counts = [_count(p, spec) for spec in _file_specs(p, fabric)]
    return sum(c[0] for c in counts), sum(c[1] for c in counts if c[0] > 0)


def _host_counts_unscheduled(p: _Plan, fabric: Fabric) -> tuple[int, int]:
    """Host view without a time window: every selected packet is in its sender's and its
    receiver's file, whatever the schedule; counted per NIC from the plan alone."""
    n = fabric.n_nics
    pk, nbytes = np.zeros(n), np.zeros(n)     # float sums: exact below 2^53
    m_bytes = p.rec.span(p.m_npk, np.arange(p.n_msgs), 0, p.m_npk)
    k_keep = p.m_keep[p.k_msg]
    for nic, keep, count, b in [(p.m_src, p.m_keep, p.m_npk, m_bytes), (p.m_dst, p.m_keep, p.m_npk, m_bytes),
                                (p.k_tx_nic, k_keep, 1, p.k_rec_bytes), (p.k_rx_nic, k_keep, 1, p.k_rec_bytes)]:
        w = keep & p.sel.nic_mask[nic]
        pk += np.bincount(nic, weights=np.broadcast_to(count, w.shape) * w, minlength=n)
        nbytes += np.bincount(nic, weights=b * w, minlength=n)
    files = np.flatnonzero(pk > 0)
    headers = sum(len(p.fmt.file_header([nic_interface(fabric, int(k))])) for k in files)
    return int(pk.sum()), int(nbytes.sum()) + headers


def write_pcaps(flows: Flows, fabric: Fabric, out: Output, dest_dir: Path,
                progress: Callable[[int, int], None] | None = None, qps: int = 1) -> list[Path]:
    """Write the capture files of out's view into dest_dir; returns their paths. Host view
    (default): <nic name>.pcap[ng] per NIC with a selected packet. Refuses (OutputError, nothing
    written) when they would exceed output.max_bytes. qps: nccl.qps_per_connection."""
    fabric, lab_plan = _lab(out, fabric)
    p = _prepare(flows, fabric, out, qps, times=True)
    if p is None:
        return []
    p.lab = lab_plan
    specs = _file_specs(p, fabric)
    counts = [_count(p, spec) for spec in specs]
    specs = [spec for spec, c in zip(specs, counts) if c[0] > 0]
    select.check_budget(sum(c[0] for c in counts), sum(c[1] for c in counts if c[0] > 0), out)
    paths = []
    scratch = _Scratch()
    total_bytes, done_bytes = sum(c[1] for c in counts if c[0] > 0), 0
    # Plain sequential writes: a writer thread overlapping build and write measured slower here
    # (2 shared cores; bench/bench_pcap.py), and unbuffered I/O avoids a copy of each slice.
    for spec in specs:
        path = Path(dest_dir) / (spec.name + p.fmt.suffix)
        tmp = path.with_name(path.name + ".part")
        with open(tmp, "wb", buffering=0) as f:
            header = p.fmt.file_header(spec.interfaces)
            f.write(header)
            file_bytes = len(header)
            scratch.align_to(file_bytes)
            for buf in _slices(p, fabric, _Items.gather(p, spec.parts), scratch):
                _write_all(f, buf)
                file_bytes += len(buf)
                scratch.align_to(file_bytes)          # where the next slice goes
                if progress is not None:
                    progress(done_bytes + file_bytes, total_bytes)
            done_bytes += file_bytes
        os.replace(tmp, path)
        paths.append(path)
    return paths


def _write_all(f, buf: np.ndarray) -> None:
    view = memoryview(buf).cast("B")
    while len(view):
        view = view[f.write(view):]


def _view(out: Output) -> str:
    return "lab" if out.lab else "switch" if out.switch else "merge" if out.merge else "nic"


def _lab(out: Output, fabric: Fabric):
    """Lab mode: the fabric with the lab's addresses, and the plan (None otherwise)."""
    if not out.lab:
        return fabric, None
    from . import lab
    plan = lab.load(out, fabric)
    return plan.remap(fabric), plan


def _sources(p: _Plan):
    """Every scheduled copy: (nic per item, received?, what) for data segments sent, received,
    and control frames sent, received."""
    return [(p.m_src[p.tx.msg], False, p.tx), (p.m_dst[p.rx.msg], True, p.rx),
            (p.k_tx_nic, False, p.k_tx_ns), (p.k_rx_nic, True, p.k_rx_ns)]


@dataclass
class _Part:
    """Items of one source that a file records, on which link of their path, shifted by dt_ns."""
    src: int                     # index into _sources()
    idx: np.ndarray
    link: np.ndarray             # per item: 0 = leaving the sender NIC .. hops-1 = into the receiver
    dt_ns: int                   # source time -> time at the file's port
    iface: int                   # pcapng interface id


@dataclass
class _FileSpec:
    name: str
    interfaces: list
    parts: list


def _window_packets(p: _Plan, segs: _Segs, idx, a_ns: int, b_ns: int):
    """Per segment: the packets [lo, hi) that start in [a_ns, b_ns)."""
    m, ka, kb = segs.msg[idx], segs.ka[idx], segs.kb[idx]
    base = p.offset(m, ka) - segs.t[idx]
    return p.packets_before(m, ka, kb, a_ns + base), p.packets_before(m, ka, kb, b_ns + base)


def _count(p: _Plan, spec: _FileSpec) -> tuple[int, int]:
    """(records, bytes with the file header) of one file."""
    sources, window = _sources(p), p.sel.window_ns
    n, nbytes = 0, 0
    for part in spec.parts:
        what, idx = sources[part.src][2], part.idx
        if isinstance(what, _Segs):
            m = what.msg[idx]
            if window is None:
                lo, hi = what.ka[idx], what.kb[idx]
            else:
                lo, hi = _window_packets(p, what, idx, window[0] - part.dt_ns, window[1] - part.dt_ns)
            n += int((hi - lo).sum())
            nbytes += int(p.rec.span(p.m_npk[m], m, lo, hi).sum())
        else:
            inside = np.ones(len(idx), bool)
            if window is not None:
                t = what[idx] + part.dt_ns
                inside = (t >= window[0]) & (t < window[1])
            n += int(inside.sum())
            nbytes += int(p.k_rec_bytes[idx][inside].sum())
    return n, nbytes + len(p.fmt.file_header(spec.interfaces))


def _item_endpoints(p: _Plan, src: int, idx):
    """Per item of a source: (sending NIC, receiving NIC, UDP source port, hops) of its packets."""
    what = _sources(p)[src][2]
    if isinstance(what, _Segs):
        m = what.msg[idx]
        c = p.m_conn[m]
        return p.m_src[m], p.m_dst[m], p.c_sport[c], p.c_hops[c]
    m, kind = p.k_msg[idx], p.k_kind[idx]
    c = np.where((kind == CTS) | (kind == ACK_CTS), p.m_conn[m] - p.m_q[m], p.m_conn[m])
    return p.k_tx_nic[idx], p.k_rx_nic[idx], np.where(kind == CNP, 0, p.c_sport[c]), p.c_hops[c]


def _kept(p: _Plan, src: int) -> np.ndarray:
    """Items of a source that pass the collective/iteration filters (windows are per packet)."""
    what = _sources(p)[src][2]
    return p.m_keep[what.msg] if isinstance(what, _Segs) else p.m_keep[p.k_msg]


def _host_parts(p: _Plan, by_nic, nic: int, iface: int) -> list[_Part]:
    """What a NIC's own capture holds: its sent copies (link 0) and received ones (last link)."""
    parts = []
    for src, (order, sorted_nic) in enumerate(by_nic):
        idx = order[np.searchsorted(sorted_nic, nic):np.searchsorted(sorted_nic, nic, "right")]
        hops = _item_endpoints(p, src, idx)[3]
        parts.append(_Part(src, idx, np.zeros(len(idx), np.int64) if src in (0, 2) else hops - 1, 0, iface))
    return parts


def _by_nic(p: _Plan):
    out = []
    for src, (nic, _, _) in enumerate(_sources(p)):
        idx = np.flatnonzero(_kept(p, src))
        order = idx[np.argsort(nic[idx], kind="stable")]
        out.append((order, nic[order]))
    return out


def nic_interface(fabric: Fabric, nic: int) -> Interface:
    mac = bytes(fabric.nic_mac[nic])
    return Interface(fabric.nic_name(nic),
                     f"RoCEv2 NIC {fabric.nic_name(nic)} MAC {mac.hex(':')} IPv4 {fabric.nic_ip_str(nic)}",
                     mac, fabric.nic_gbps * 10**9)


def _file_specs(p: _Plan, fabric: Fabric) -> list[_FileSpec]:
    view, nics = _view(p.out), np.flatnonzero(p.sel.nic_mask[:fabric.n_nics])
    nics = nics[np.isin(nics, p.nics)]
    if view == "switch":
        from .views import switch_port_specs
        return switch_port_specs(p, fabric, p.out.switch)
    if view == "lab":
        from .lab import lab_specs
        p.l2_direct = p.lab.l2
        return lab_specs(p, fabric, p.lab)
    by_nic = _by_nic(p)
    if view == "merge":
        parts = [part for k, nic in enumerate(nics.tolist()) for part in _host_parts(p, by_nic, nic, k)]
        return [_FileSpec("merged", [nic_interface(fabric, n) for n in nics.tolist()], parts)]
    return [_FileSpec(fabric.nic_name(nic), [nic_interface(fabric, nic)], _host_parts(p, by_nic, nic, 0))
            for nic in nics.tolist()]


# --- one file, window by window -----------------------------------------------------------------

@dataclass
class _Items:
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

    @staticmethod
    def gather(p: _Plan, parts: list[_Part]) -> "_Items":
        cols = {k: [] for k in _Items.__dataclass_fields__}
        sources = _sources(p)
        for part in parts:
            _, rx, what = sources[part.src]
            idx = part.idx
            if isinstance(what, _Segs):
                m, ka, kb = what.msg[idx], what.ka[idx], what.kb[idx]
                npk = p.m_npk[m]
                vals = dict(kind=np.full(len(idx), DATA, np.int8), msg=m, ka=ka, pkt=ka, npk=kb - ka,
                            start=what.t[idx] + part.dt_ns,
                            end=what.t[idx] + part.dt_ns + p.wire.span(npk, m, ka, kb),
                            rec_bytes=p.rec.span(npk, m, ka, kb))
            else:
                vals = dict(kind=p.k_kind[idx], msg=p.k_msg[idx], ka=np.zeros(len(idx), np.int64),
                            pkt=p.k_pkt[idx], npk=np.ones(len(idx), np.int64), start=what[idx] + part.dt_ns,
                            end=what[idx] + part.dt_ns + p.k_wire_ns[idx], rec_bytes=p.k_rec_bytes[idx])
            vals.update(rx=np.full(len(idx), rx), link=np.broadcast_to(part.link, len(idx)),
                        iface=np.full(len(idx), part.iface))
            for k, v in vals.items():
                cols[k].append(v)
        items = _Items(**{k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()})
        order = np.lexsort((items.rx, items.start))      # stable: ties keep gather order
        return _Items(**{k: v[order] for k, v in vars(items).items()})


class _Scratch:
    """One byte buffer reused by every slice: re-zeroing it is far cheaper than faulting in
    fresh pages for each slice. A slice starts at the same offset within a page as its place
    in the file: the kernel then copies whole pages into the page cache (a slice misaligned
    to the file wrote at half the speed in bench/bench_pcap.py)."""

    PAGE = 4096

    def __init__(self):
        self.buf = np.zeros(0, dtype=np.uint8)
        self.lead = 0

    def align_to(self, file_offset: int) -> None:
        self.lead = file_offset % self.PAGE

    def zeros(self, n: int) -> np.ndarray:
        need = self.lead + n
        if need > len(self.buf):
            size = max(need, 2 * len(self.buf))
            raw = np.zeros(size + self.PAGE, dtype=np.uint8)
            base = -raw.ctypes.data % self.PAGE          # the buffer starts on a page boundary
            self.buf = raw[base:base + size]
            return self.buf[self.lead:need]
        view = self.buf[self.lead:need]
        view.fill(0)
        return view


def _slices(p: _Plan, fabric: Fabric, it: _Items, scratch: _Scratch):
    """Yield the file's records in time order, in slices of bounded size.

    A window [t_a, t_b) holds the items starting in it plus earlier ones still running at t_a;
    no item lasts longer than the longest one, so those start within that span before t_a."""
    if len(it.start) == 0:
        return
    cum_pk, cum_b = np.cumsum(it.npk), np.cumsum(it.rec_bytes)
    marks = np.r_[np.searchsorted(cum_pk, np.arange(WINDOW_PACKETS, cum_pk[-1], WINDOW_PACKETS), "right"),
                  np.searchsorted(cum_b, np.arange(WINDOW_BYTES, cum_b[-1], WINDOW_BYTES), "right")]
    cuts = np.unique(np.r_[it.start[0], it.start[marks[marks < len(it.start)]]])
    cuts = np.r_[cuts, np.iinfo(np.int64).max]
    longest = int((it.end - it.start).max())
    first_ns, mid_ns = p.wire.first, p.wire.mid
    # Packet k of a burst starts first + (k - 1) * mid after the burst (only the last packet of a
    # message has its own length, and nothing starts after it).
    offset = lambda k: np.where(k > 0, first_ns + (k - 1) * mid_ns, 0)
    for t_a, t_b in zip(cuts[:-1], cuts[1:]):
        a0, a, b = np.searchsorted(it.start, [t_a - longest, t_a, t_b])
        before = np.arange(a0, a)
        pos = np.r_[before[it.end[before] > t_a], np.arange(a, b)].astype(np.int64)
        # Expand items into packets (li: the item's index in pos); keep those starting inside.
        n = it.npk[pos]
        li = np.repeat(np.arange(len(pos)), n)
        j = np.arange(len(li)) - np.repeat(np.cumsum(n) - n, n) + it.ka[pos][li]
        t = (it.start[pos] - offset(it.ka[pos]))[li] + offset(j)
        keep = (t >= t_a) & (t < t_b)
        if p.sel.window_ns is not None:
            keep &= (t >= p.sel.window_ns[0]) & (t < p.sel.window_ns[1])
        if not keep.any():
            continue
        li, j, t = li[keep], j[keep], t[keep]
        # File order: time, then item, then packet - the expansion order, so a stable sort on time.
        sel = np.argsort(t, kind="stable")
        yield _records(p, fabric, it, pos, li[sel], j[sel], t[sel], scratch)


def spine_mac(spine) -> np.ndarray:
    """Spine router MACs: 02:53:00:00:<spine hi>:<spine lo> (as topology.py's router MACs)."""
    s = np.asarray(spine, dtype=np.int64)
    mac = np.zeros(s.shape + (6,), np.uint8)
    mac[..., 0], mac[..., 1], mac[..., 4], mac[..., 5] = 0x02, 0x53, s >> 8, s & 0xFF
    return mac


def _mac_table(fabric: Fabric) -> np.ndarray:
    """Every MAC a frame can carry, one row each: NICs, then leaves, then spines."""
    return np.concatenate([fabric.nic_mac, fabric.leaf_mac, spine_mac(np.arange(fabric.n_spines))])


def _link_macs(fabric: Fabric, tx_nic, rx_nic, sport, hops, link):
    """Rows of _mac_table (eth_src, eth_dst) on link `link` of each packet's route:
    NIC -> leaf (-> spine -> leaf) -> NIC; the spine by ECMP on the 5-tuple (routing.py)."""
    n, n_leaves = fabric.n_nics, fabric.n_leaves
    leaf_a, leaf_b = n + fabric.nic_leaf[tx_nic], n + fabric.nic_leaf[rx_nic]
    spine = np.full(len(np.atleast_1d(tx_nic)), n + n_leaves, np.int64)
    far = np.atleast_1d(hops) > 2                                   # through a spine (routing.py)
    if far.any():
        r = fabric.router
        spine[far] = r.node_after(r.routes(np.atleast_1d(tx_nic)[far], np.atleast_1d(rx_nic)[far],
                                           np.atleast_1d(sport)[far], 0, fabric.ip_version), 1)
    first, last, up = link == 0, link == hops - 1, link == 1      # up: leaf -> spine (4-hop routes)
    src = np.where(first, tx_nic, np.where(last, leaf_b, np.where(up, leaf_a, spine)))
    dst = np.where(first, leaf_a, np.where(last, rx_nic, np.where(up, spine, leaf_b)))
    return src, dst


def _records(p: _Plan, fabric: Fabric, it: _Items, pos, li, j, t, scratch: _Scratch):
    """Capture records (header + frame [+ pcapng options, trailer]) of packets in file order,
    as one byte buffer. pos: the window's items; per packet li (its item in pos), j (its
    packet index in the item's message), t.

    All packets of one item (a segment of one message, or one control frame) of one class
    (First/Only, Middle, Last; CE-marked or not) have the same headers but for the PSN: one
    template row each is built, copied to its packets, and only the timestamp, the PSN and the
    ICRC (by CRC linearity from the template's) are written per packet."""
    out, fmt, R = p.out, p.fmt, p.fmt.rec_hdr_bytes
    n = len(li)
    w_kind, w_msg = it.kind[pos], it.msg[pos]
    w_npk = p.m_npk[w_msg]
    cls = np.where(j == 0, 0, np.where(j == w_npk[li] - 1, 2, 1))
    key = li * 6 + cls * 2
    if len(p.ce_g):
        key += (w_kind[li] == DATA) & (it.link[pos][li] >= 1) & _ce(p, w_msg[li], j)
    used = np.flatnonzero(np.bincount(key, minlength=6 * len(pos)))
    tid_of_key = np.zeros(6 * len(pos), np.int64)
    tid_of_key[used] = np.arange(len(used))
    tid = tid_of_key[key]
    rep = np.empty(len(used), np.int64)
    rep[tid] = np.arange(n)                  # any packet of a template stands for it
    tl = li[rep]
    tm = _templates(p, fabric, w_kind[tl], w_msg[tl], it.pkt[pos][tl], j[rep], it.link[pos][tl],
                    it.iface[pos][tl], (used & 1).astype(bool))
    width = tm.rows.shape[1]
    rec_len = tm.rec_len[tid]
    rec_off = np.cumsum(rec_len) - rec_len
    total = int(rec_off[-1] + rec_len[-1])
    buf = scratch.zeros(total + width)       # slack: the sliding views below end `width` early

    # PSNs: a data packet's is its template's + (j - the template's j); control frames are alone.
    psn = (tm.psn[tid] + j - tm.j[tid]) & roce.PSN_MASK
    col = R + tm.psn_col
    # Per record width (a truncated record can be shorter than a template row): template rows
    # gathered, timestamps and PSNs put in, rows copied to their records' offsets.
    for w, g in _groups(np.minimum(width, R + tm.incl), tid):
        tmpl = np.ascontiguousarray(tm.rows[:, :w]).view(_void(w)).ravel()
        rows = tmpl[tid[g]].view(np.uint8).reshape(-1, w)
        fmt.put_times(rows, t[g])
        for k, byte in enumerate((psn[g] >> 16, psn[g] >> 8, psn[g])):
            if col + k < w:
                rows[:, col + k] = byte & 0xFF
        _at(buf, w)[rec_off[g]] = rows.view(_void(w)).ravel()
    full = tm.full[tid]
    if full.any():
        f = np.flatnonzero(full)
        ft = tid[f]
        crc = tm.crc[ft] ^ roce.icrc_psn_delta(psn[f] ^ tm.psn[ft], tm.crc_tail[ft])
        _at(buf, 4)[rec_off[f] + R + tm.frame_len[ft] - roce.ICRC_BYTES] = crc.astype("<u4").view(_void(4))
    if out.payload == "pattern":
        hdr = p.hdr_bytes[tm.op]
        cnt = np.clip(np.minimum(tm.payload, tm.incl - hdr), 0, None)
        start = R + hdr
        for (cnt_b, start_b), g in _groups((cnt << 16) | start, tid, split=True):
            if cnt_b:
                _at(buf, cnt_b)[rec_off[g] + start_b] = _PATTERN[:cnt_b].view(_void(cnt_b))[0]
    if fmt.pcapng:
        _at(buf, 4)[rec_off + rec_len - 4] = tm.trailer.view(_void(4)).ravel()[tid]
    if tm.comments is not None:          # options after the padded frame; one text per template
        at = rec_off + R + _pad4(tm.incl[tid])
        order = np.argsort(tid, kind="stable")
        bounds = np.searchsorted(tid[order], np.arange(len(tm.comments) + 1))
        for k, o in enumerate(tm.comments):
            _at(buf, len(o))[at[order[bounds[k]:bounds[k + 1]]]] = np.frombuffer(o, _void(len(o)))[0]
    return buf[:total]


def _void(w: int) -> np.dtype:
    return np.dtype((np.void, w))


def _at(buf: np.ndarray, w: int) -> np.ndarray:
    """buf as w-byte items starting at every byte offset: v[off] is buf[off:off + w]. Assigning
    items at many offsets is then one fancy-index copy of w bytes each (they must not overlap)."""
    return np.ndarray((len(buf) - w + 1,), dtype=_void(w), buffer=buf, strides=(1,))


def _groups(per_template: np.ndarray, tid: np.ndarray, split: bool = False):
    """(value, packets) per distinct value of a template property; with split, values are
    (hi << 16 | lo) pairs."""
    u = np.unique(per_template)
    if len(u) == 1:
        return [((int(u[0]) >> 16, int(u[0]) & 0xFFFF) if split else int(u[0]), slice(None))]
    values = per_template[tid]
    if len(u) <= 4:                 # a few: one pass each beats a sort
        groups = [(int(v), np.flatnonzero(values == v)) for v in u.tolist()]
    else:
        order = np.argsort(values, kind="stable")
        bounds = np.searchsorted(values[order], u)
        groups = [(int(v), order[lo:hi]) for v, lo, hi in zip(u.tolist(), bounds, np.r_[bounds[1:], len(values)])]
    return [((v >> 16, v & 0xFFFF), g) for v, g in groups] if split else groups


@dataclass
class _Templates:
    """One header row per template (record header but its timestamp, frame headers), and what
    the packets of a template share."""
    rows: np.ndarray        # (T, width) uint8
    op: np.ndarray
    payload: np.ndarray
    frame_len: np.ndarray
    incl: np.ndarray
    rec_len: np.ndarray
    j: np.ndarray           # the packet index the row was built for
    psn: np.ndarray         # ... and its PSN
    psn_col: int            # where the PSN is in a frame
    full: np.ndarray        # frame captured whole: the record ends with the ICRC
    crc: np.ndarray         # the template's ICRC
    crc_tail: np.ndarray    # bytes the ICRC covers after the PSN (header tail, payload, pad)
    trailer: np.ndarray | None
    comments: list | None


def _templates(p: _Plan, fabric: Fabric, kind, m, acked, j, link, iface, ce) -> _Templates:
    """Header rows of template packets: `kind`, message, packet j, on link `link` (CE-marked
    where ce)."""
    out, pmtu, l2, fmt = p.out, p.out.pmtu, roce.l2_bytes(p.out.vlan), p.fmt
    on_cts_qp = (kind == CTS) | (kind == ACK_CTS)
    c = np.where(on_cts_qp, p.m_conn[m] - p.m_q[m], p.m_conn[m])
    size, npk = p.m_size[m], p.m_npk[m]
    is_data, is_cts, is_cnp = kind == DATA, kind == CTS, kind == CNP
    data_op, data_payload = _data_packet(size, npk, j, pmtu)
    op = np.where(is_data, data_op, np.where(is_cts, Opcode.RC_WRITE_ONLY,
                                             np.where(is_cnp, Opcode.CNP, Opcode.RC_ACK)))
    payload = np.where(is_data, data_payload, np.where(is_cts, CTS_BYTES, 0))
    frame_len = p.hdr_bytes[op] + _pad4(payload) + roce.ICRC_BYTES
    incl = np.minimum(frame_len, _incl_cap(out, p.hdr_bytes)[op])
    comments = None
    opt_len = 0
    if p.row_comment is not None:
        rows_ = p.m_row[m].tolist()
        texts = [COMMENT_PREFIX[k] + p.row_comment[r] for k, r in zip(kind.tolist(), rows_)]
        comments = [comment_options(x) for x in texts]
        opt_len = comment_option_bytes(np.array([len(x) for x in texts], np.int64))
    rec_len = fmt.rec_bytes(incl, opt_len)
    R = fmt.rec_hdr_bytes

    # Who sends: data from the connection's sender, CTS, data ACKs and CNPs from its receiver.
    from_dst = (kind == CTS) | (kind == ACK_DATA) | is_cnp
    tx_nic, rx_nic = np.where(from_dst, p.c_dst[c], p.c_src[c]), np.where(from_dst, p.c_src[c], p.c_dst[c])
    acked = np.where(kind == ACK_DATA, acked, j)
    sport = np.where(is_cnp, 0, p.c_sport[c])
    psn = np.where(on_cts_qp, p.m_cts_psn[m], np.where(is_cnp, 0, (p.m_psn[m] + acked) & roce.PSN_MASK))
    fields = dict(
        src_ip=fabric.nic_ip[tx_nic], dst_ip=fabric.nic_ip[rx_nic], payload=payload, frame_len=frame_len,
        ttl=IP_TTL - link, sport=sport,        # TTL: one less per router crossed so far
        tos=np.where(is_cnp, (congestion.CNP_DSCP << 2) | out.ecn,
                     (out.dscp << 2) | np.where(is_data & ce, congestion.ECN_CE, out.ecn)),
        dest_qp=np.where(rx_nic == p.c_dst[c], p.c_qpn_dst[c], p.c_qpn_src[c]),
        psn=psn, ack_req=np.where(is_data, j == npk - 1, is_cts),
        va=np.where(is_cts, p.m_cts_va[m], p.m_va[m]).astype(np.uint64),
        rkey=np.where(is_cts, (p.c_qpn_src[c] << 8) | 0xF1, (p.c_qpn_dst[c] << 8) | 0x5D),
        dma_len=np.where(is_cts, CTS_BYTES, size), imm=p.m_imm[m],
        msn=np.where(kind == ACK_CTS, p.m_cts_psn[m] + 1, p.m_done[m] + (acked == npk - 1)) & roce.PSN_MASK,
    )
    eth_src, eth_dst = _link_macs(fabric, tx_nic, rx_nic, sport, p.c_hops[c], link)
    if p.l2_direct:
        eth_dst = rx_nic
    macs = _mac_table(fabric)
    T = len(op)
    hdr = p.hdr_bytes[op]
    width = R + int(hdr.max())
    rows = np.zeros((T, width), np.uint8)
    rows[:, :R] = fmt.headers(np.zeros(T, np.int64), incl, frame_len, iface, opt_len)
    rows[:, R:] = _headers(op, out, fields, macs[eth_dst], macs[eth_src], width - R)
    psn_col = l2 + roce.ip_bytes(out.ip_version) + roce.UDP.itemsize + roce.BTH_PSN_OFFSET
    tail = hdr - (psn_col + 3) + _pad4(payload)
    full = incl == frame_len           # the ICRC is only there if captured
    crc = np.zeros(T, np.uint32)
    for n_hdr in np.unique(hdr[full]).tolist():
        g = np.flatnonzero(full & (hdr == n_hdr))
        crc[g] = roce.icrc_sized(rows[g, R + l2:R + n_hdr], payload[g],
                                 lambda size: _payload_bytes(out.payload, size), out.ip_version)
    trailer = fmt.trailers(incl, opt_len) if fmt.pcapng else None
    return _Templates(rows, op, payload, frame_len, incl, rec_len, j, psn, psn_col, full, crc, tail,
                      trailer, comments)


def _ce(p: _Plan, m, j) -> np.ndarray:
    """Is data packet j of message m CE-marked (on its way to the receiver)?"""
    if not len(p.ce_g):
        return np.zeros(len(m), bool)
    g = p.m_pkt0[m] + j
    pos = np.minimum(np.searchsorted(p.ce_g, g), len(p.ce_g) - 1)
    return p.ce_g[pos] == g


def _headers(op: np.ndarray, out: Output, f: dict, eth_dst, eth_src, width: int) -> np.ndarray:
    """(n, width) uint8: every header of each frame, Ethernet to the last extension header,
    zero-padded. The headers up to the BTH are common to all opcodes and filled for all frames
    at once; the extension headers (RETH, ImmDt, AETH; a CNP's reserved 16 bytes stay zero)
    are placed after the BTH per opcode."""
    n = len(op)
    base = roce.base_dtype(out.vlan, out.ip_version)
    h = np.zeros(n, base)
    h["eth"]["dst"], h["eth"]["src"] = eth_dst, eth_src
    is_cnp = op == Opcode.CNP
    ethertype = roce.ETHERTYPE_IPV6 if out.ip_version == 6 else roce.ETHERTYPE_IPV4
    if out.vlan:
        h["eth"]["ethertype"] = roce.ETHERTYPE_DOT1Q
        pcp = np.where(is_cnp, congestion.CNP_PCP, out.pcp)
        h["vlan"]["tci"] = (pcp << 13) | out.vlan_id
        h["vlan"]["ethertype"] = ethertype
    else:
        h["eth"]["ethertype"] = ethertype
    ip = h["ip"]
    tos = f["tos"]
    l4_len = f["frame_len"] - roce.l2_bytes(out.vlan) - roce.ip_bytes(out.ip_version)
    if out.ip_version == 6:
        ip["ver_tc_fl"] = (6 << 28) | (tos << 20)          # flow label 0, as NCCL leaves it
        ip["payload_len"], ip["next_header"], ip["hop_limit"] = l4_len, roce.IPPROTO_UDP, f["ttl"]
        ip["src"], ip["dst"] = roce.ipv6_from_ipv4(f["src_ip"]), roce.ipv6_from_ipv4(f["dst_ip"])
    else:
        ip["ver_ihl"], ip["tos"] = 0x45, tos
        ip["total_len"] = l4_len + roce.IPV4.itemsize
        ip["flags_frag"], ip["ttl"], ip["proto"] = roce.IPV4_DF, f["ttl"], roce.IPPROTO_UDP
        src, dst = f["src_ip"], f["dst_ip"]
        ip["src"], ip["dst"] = src, dst
        # Same one's-complement sum as roce.ipv4_checksum, from the source columns (id is 0).
        w = ((0x45 << 8) + roce.IPV4_DF + roce.IPPROTO_UDP + roce.IPV4.itemsize
             + tos + l4_len + (f["ttl"] << 8) + (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF))
        w = (w & 0xFFFF) + (w >> 16)
        w = (w & 0xFFFF) + (w >> 16)
        ip["csum"] = ~w & 0xFFFF
    udp = h["udp"]
    udp["sport"], udp["dport"] = f["sport"], roce.ROCEV2_UDP_PORT
    udp["len"] = l4_len
    bth = h["bth"]
    bth["opcode"] = op
    # A CNP as a ConnectX sends it: M = 0, BECN set.
    bth["flags"] = np.where(is_cnp, 0, roce.BTH_MIGREQ | ((-f["payload"] & 3) << 4))
    bth["fecn_becn"] = np.where(is_cnp, roce.BTH_BECN, 0)
    bth["pkey"] = out.pkey
    roce.put_u24(bth["dest_qp"], f["dest_qp"])
    bth["ack_req"] = np.where(f["ack_req"], roce.BTH_ACKREQ, 0)
    roce.put_u24(bth["psn"], f["psn"])
    rows = np.zeros((n, width), np.uint8)
    rows[:, :base.itemsize] = h.view(np.uint8).reshape(n, -1)
    # Extension headers, each where the opcode's layout puts it.
    for name, ext, offset, has in roce.EXT_PLACES:
        g = np.flatnonzero(has[op])
        if not len(g) or name == "cnp":          # a CNP's 16 reserved bytes stay zero
            continue
        e = np.zeros(len(g), ext)
        if name == "reth":
            e["va"], e["rkey"], e["dma_len"] = f["va"][g], f["rkey"][g], f["dma_len"][g]
        elif name == "immdt":
            e["imm"] = f["imm"][g]            # NCCL puts the message size in the immediate
        else:
            e["syndrome"] = roce.AETH_ACK
            roce.put_u24(e["msn"], f["msn"][g])
        at = base.itemsize + offset
        rows[g, at:at + ext.itemsize] = e.view(np.uint8).reshape(len(g), -1)
    return rows


def _payload_bytes(kind: str, n: int) -> bytes:
    data = _PATTERN[:n].tobytes() if kind == "pattern" else bytes(n)
    return data + bytes(-n & 3)
