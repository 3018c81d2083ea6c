"""The capture writer: the wire plan -> pcap / pcapng files, written window by window from one
reused buffer (bounded memory).

One direction through emit/: packets/plan.py + packets/pacing.py (the wire plan and its
schedule) -> views/files.py (which files, which copies: host, merged, switch port, lab) ->
packets/items.py (per file: its packets and their times, window by window) -> packets/frames.py
(record bytes) -> this module (files).
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from ... import progress as _progress
from ...config import Nccl, Network, Output
from ...tables import Flows
from ...fabric.topology import Fabric
from ...timing.work import PCAP_BLOCK_MESSAGES
from ..packets import cnps, frames, port_queue, pacing as timing
from ..packets import items, select
from . import files as views
from ..packets.copies import nic_interface
from ..packets.addresses import spine_mac  # noqa: F401  (the spine MAC plan, for users of this module)
from ..packets.plan import FIX_ROUNDS, Plan

# Slice budget per write: bounds memory whatever the trace size.
WINDOW_PACKETS = 1 << 16
WINDOW_BYTES = 64 << 20


def estimate_pcap(flows: Flows, fabric: Fabric, out: Output, qps: int = 1, nccl: Nccl | None = None,
                  network: Network | None = None) -> tuple[int, int]:
    """(packet records, bytes on disk) over all files write_pcaps would write; exact, but for the
    CNPs of CE marks in the host view (cnps.cnp_estimate: chosen without a schedule).
    Host view unfiltered: every packet is recorded twice, in its sender's file and its receiver's.
    Only a time window or a view of ports needs the schedule; the other filters count from the plan.
    A schedule per connection (detail conn) has no chunks: an estimate from its counts instead."""
    if flows.detail == "conn":
        return _conn_estimate(flows, out)
    times = views.needs_schedule(out)
    if not times and not out.ecn_mark_fraction and _net_messages(flows) > BLOCK_MESSAGES:
        return _host_counts_blocked(flows, fabric, out, qps, nccl, network)
    _progress.stage("pcap estimate: every packet of the selected chunks scheduled" if times else
                   "pcap estimate: packets of the selected chunks", "fix rounds" if times else "")
    p = _prepared(flows, fabric, out, qps, times, nccl, network)
    if times:
        _progress.report(FIX_ROUNDS, FIX_ROUNDS)          # converged (schedule.schedule counts the rounds)
    if p is None:
        return 0, 0
    if p.tx is None:
        return _host_counts_unscheduled(p, fabric)
    counts = [_count(p, spec) for spec in views.files(p, fabric).specs]
    return sum(c[0] for c in counts), sum(c[1] for c in counts if c[0] > 0)


# The unscheduled count's plan holds ~700 B per network message: beyond BLOCK_MESSAGES it is built
# for a few sender NICs at a time (timing/work.py holds the number: the work estimate counts it).
BLOCK_MESSAGES = PCAP_BLOCK_MESSAGES


def _row_messages(rows: np.ndarray) -> np.ndarray:
    """NCCL network messages per flow row (plan.build's cut: at most max_msg_bytes each, >= 1)."""
    size = rows["wire_bytes" if "wire_bytes" in rows.dtype.names else "bytes"].astype(np.int64)
    cap = np.where(rows["max_msg_bytes"] > 0, rows["max_msg_bytes"], np.maximum(size, 1))
    return np.maximum(1, -(-size // cap))


def _net_messages(flows: Flows) -> int:
    return int(_row_messages(flows.rows[flows.net]).sum()) if len(flows) else 0


def _host_counts_blocked(flows: Flows, fabric: Fabric, out: Output, qps: int, nccl, network) -> tuple[int, int]:
    """_host_counts_unscheduled over blocks of sender NICs, each holding at most about
    BLOCK_MESSAGES messages (one NIC alone may hold more): a connection has one sender NIC, so a
    block keeps its connections whole (their messages, CTSs and ACKs) and every count is per
    message - the sums are the whole plan's. Not with CE marks: they are drawn over the
    numbering of every packet of the job (congestion.ce_marks)."""
    net_idx = np.flatnonzero(flows.net)
    src = flows.rows["src_nic"][net_idx].astype(np.int64)
    per_nic = np.bincount(src, weights=_row_messages(flows.rows[net_idx]), minlength=fabric.n_nics)
    ends, acc = [], 0.0
    for k, v in enumerate(per_nic.tolist()):
        if acc and acc + v > BLOCK_MESSAGES:
            ends.append(k)
            acc = 0.0
        acc += v
    bounds = [0, *ends, fabric.n_nics]
    n = fabric.n_nics
    pk, nbytes, fmt = np.zeros(n), np.zeros(n), None
    per_row = ("finish_ns", "row_conn", "row_transfers", "row_messages", "row_packets", "row_net_wire",
               "row_item", "row_copies")
    _progress.stage(f"pcap estimate: packets of the selected chunks, {len(bounds) - 1} blocks of sender NICs", "NICs")
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rows = net_idx[(src >= lo) & (src < hi)]
        if not len(rows):
            continue
        part = replace(flows, rows=flows.rows[rows], item_rates=None,
                       **{k: getattr(flows, k)[rows] for k in per_row if getattr(flows, k) is not None})
        p = timing.prepare(part, fabric, out, qps, times=False, nccl=nccl, network=network)
        if p is not None:
            a, b = _host_nic_counts(p, fabric)
            pk += a
            nbytes += b
            fmt = p.fmt
        del p, part
        _progress.report(hi, n)
    return _with_headers(pk, nbytes, fmt, out, fabric)


def _with_headers(pk: np.ndarray, nbytes: np.ndarray, fmt, out: Output, fabric: Fabric) -> tuple[int, int]:
    """Totals over the files of NICs with a packet, each with its file header."""
    files = np.flatnonzero(pk > 0)
    headers = sum(len(fmt.file_header([nic_interface(fabric, int(k), out.ip_version)])) for k in files)
    return int(pk.sum()), int(nbytes.sum()) + headers


def _count(p: Plan, spec) -> tuple[int, int]:
    """items.count, with the file's PFC PAUSE records (pfc.py)."""
    n, nbytes = items.count(p, spec)
    if spec.pauses:
        n += len(spec.pauses)
        nbytes += sum(len(p.fmt.record(t, fr, i)) for t, fr, i in spec.pauses)
    return n, nbytes


def _host_counts_unscheduled(p: Plan, fabric: Fabric) -> tuple[int, int]:
    """Host view without a time window: every selected packet is in its sender's and its
    receiver's file, whatever the schedule; counted per NIC from the plan alone. CNPs (CE marks):
    cnps.cnp_estimate's, chosen on the idle-fabric timing (the one count that is not exact)."""
    return _with_headers(*_host_nic_counts(p, fabric), p.fmt, p.out, fabric)


def _host_nic_counts(p: Plan, fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """Per NIC: packet records and their bytes in its host-view file (float sums: exact below 2^53)."""
    n = fabric.n_nics
    pk, nbytes = np.zeros(n), np.zeros(n)     # float sums: exact below 2^53
    m_bytes = p.rec.span(p.m_npk, np.arange(p.n_msgs), 0, p.m_npk)
    k_keep = p.m_keep[p.k_msg]
    cnp = cnps.cnp_estimate(p)
    cnp_bytes, cnp_keep = cnps.cnp_record_bytes(p, cnp), p.m_keep[cnp]
    for nic, keep, count, b in [(p.m_src, p.m_keep, p.m_npk, m_bytes), (p.m_dst, p.m_keep, p.m_npk, m_bytes),
                                (p.k_tx_nic, k_keep, 1, p.k_rec_bytes), (p.k_rx_nic, k_keep, 1, p.k_rec_bytes),
                                (p.m_dst[cnp], cnp_keep, 1, cnp_bytes), (p.m_src[cnp], cnp_keep, 1, cnp_bytes)]:
        w = keep & p.sel.nic_mask[nic]
        pk += np.bincount(nic, weights=np.broadcast_to(count, w.shape) * w, minlength=n)
        nbytes += np.bincount(nic, weights=b * w, minlength=n)
    return pk, nbytes


_LAST_PLAN: list = []


def _prepared(flows: Flows, fabric: Fabric, out: Output, qps: int, times: bool, nccl, network):
    """timing.prepare, kept for the next call on the same flows and settings: generate estimates
    the pcaps (scheduling every packet when a time window needs it) and then writes them."""
    key = (id(flows), id(fabric), out, qps, nccl, network)
    if _LAST_PLAN and _LAST_PLAN[0][0] == key and _LAST_PLAN[0][1] is flows and (_LAST_PLAN[0][2] or not times):
        return _LAST_PLAN[0][3]
    p = timing.prepare(flows, fabric, out, qps, times=times, nccl=nccl, network=network)
    _LAST_PLAN[:] = [(key, flows, times or (p is not None and p.tx is not None), p)]
    return p


def _conn_estimate(flows: Flows, out: Output) -> tuple[int, int]:
    """Unfiltered host view from a connection-level flow table: every data packet and, per
    message, its CTS, the ACK of the CTS and the ACK of the data, each in two files; bytes from the
    wire bytes less each frame's FCS, preamble and gap, plus a 16 B record header (24 B with
    pcapng's EPB). Filters are not applied: an upper estimate."""
    net = flows.rows["link"] == 1
    pkts = int(flows.row_packets[net].sum())
    msgs = int(flows.row_messages[net].sum())
    ctl = 3 * msgs
    frame_bytes = int(flows.row_net_wire[net].sum()) - pkts * 24 + ctl * 90
    if out.snaplen:
        frame_bytes = min(frame_bytes, (pkts + ctl) * out.snaplen)
    rec = 28 if out.format == "pcapng" else 16
    return 2 * (pkts + ctl), 2 * (frame_bytes + (pkts + ctl) * rec)


def write_pcaps(flows: Flows, fabric: Fabric, out: Output, dest_dir: Path,
                progress: Callable[[int, int], None] | None = None, qps: int = 1,
                nccl: Nccl | None = None, network: Network | None = None, workers: int = 0,
                scheduler: str = "") -> list[Path]:
    """Write the capture files of out's view into dest_dir; returns their paths. Host view
    (default): <nic name>.pcap[ng] per NIC with a selected packet. Refuses (OutputError, nothing
    written) when they would exceed output.max_bytes. nccl: the job's NCCL settings (default:
    NCCL's, with qps QPs per connection); network: the job's (output.dcqcn's parameters).
    workers > 0: the files are written by a local Dask cluster of that many worker processes;
    scheduler 'tcp://host:port': by an existing Dask cluster (dest_dir must be a path every worker
    sees). The plan is built once here and sent to the workers; each file is written whole by one
    of them, so the bytes are the same whatever the worker count."""
    p = _prepared(flows, fabric, out, qps, True, nccl, network)
    if p is None:
        return []
    fset = views.files(p, fabric)
    counts = [_count(p, spec) for spec in fset.specs]
    specs = [spec for spec, c in zip(fset.specs, counts) if c[0] > 0]
    select.check_budget(sum(c[0] for c in counts), sum(c[1] for c in counts if c[0] > 0), out)
    total_bytes = sum(c[1] for c in counts if c[0] > 0)
    if workers or scheduler:
        from .distributed import write_files
        return write_files(write_file, p, fset, specs, Path(dest_dir), total_bytes, progress, workers, scheduler)
    paths, done_bytes = [], 0
    scratch = _Scratch()
    for spec in specs:
        step = (lambda n, base=done_bytes: progress(base + n, total_bytes)) if progress is not None else None
        path, nbytes = write_file(p, fset, spec, Path(dest_dir), scratch, step)
        done_bytes += nbytes
        paths.append(path)
    return paths


def port_counters(flows: Flows, fabric: Fabric, out: Output, qps: int = 1, nccl: Nccl | None = None,
                  network: Network | None = None) -> list[tuple]:
    """The switch view's expected counters (views/counters.py: counters.COLUMNS rows), from the
    plan write_pcaps wrote (kept: not scheduled again)."""
    from .counters import switch_counters
    p = _prepared(flows, fabric, out, qps, True, nccl, network)
    return [] if p is None else switch_counters(p, fabric, views.files(p, fabric))


def queue_settling(flows: Flows, fabric: Fabric, out: Output, qps: int = 1, nccl: Nccl | None = None,
                   network: Network | None = None) -> dict | None:
    """output.ecn_marking=queue: how the marks/pauses iteration of the plan write_pcaps wrote
    ended (queue_rounds.queue_marks_and_cnps) - rounds used of at most max_rounds, settled (the marks
    of the last round were those it was scheduled with), CE-marked packets; with PFC the frames of
    the pass (pfc_pass.py): PAUSEs (refreshes included), XONs, those towards switch ports, and
    pauses_shown (every PAUSE the pass sent is in the captures of the view that holds its link).
    None in the seeded mode."""
    if out.ecn_marking != "queue":
        return None
    p = _prepared(flows, fabric, out, qps, True, nccl, network)
    if p is None or p.queue_rounds == 0:
        return None
    d = {"rounds": int(p.queue_rounds), "max_rounds": int(p.queue_max_rounds), "settled": bool(p.queue_stable),
         "ce_packets": int(len(p.ce_g))}
    if p.pfc is not None:
        pause = p.pfc.quanta > 0
        d["pauses"] = d["pauses_shown"] = int(pause.sum())
        d["xons"] = int((~pause).sum())
        d["pauses_to_switches"] = int((pause & (p.pfc.to_port < 0)).sum())
    return d


def frame_causality(flows: Flows, fabric: Fabric, out: Output, qps: int = 1, nccl: Nccl | None = None,
                    network: Network | None = None) -> dict | None:
    """How causal the written frames are (schedule.schedule's last round; with PFC, pfc_pass keeps
    what the schedule made wait waiting): frames stamped before what they wait for - an ACK before
    its data arrived, a message before its CTS, a CTS before NCCL freed its slot. 0 on every job the suite judges; the fixed-point rounds are bounded, so a
    big placed view could end with some: the user is told, not left to find them."""
    p = _prepared(flows, fabric, out, qps, True, nccl, network)
    if p is None or p.tx is None:
        return None
    d = {"late_frames": int(p.late), "late_acks": int(p.late_acks), "late_messages": int(p.late_data),
         "late_cts": int(p.late - p.late_acks - p.late_data)}
    if p.paths is not None:       # a scenario's epochs: frames the re-routing rounds left on a link down
        d["frames_on_down_links"] = int(p.paths.on_down)
    return d


def causality_note(causal: dict | None) -> list[str]:
    """The warning lines a run prints for frame_causality's counts (none when all are 0)."""
    if causal is None:
        return []
    notes = []
    if causal["late_frames"]:
        notes.append(f"pcaps: {causal['late_frames']:,} frames stamped before what they wait for "
                     f"({causal['late_acks']:,} ACKs before their data arrived, {causal['late_messages']:,} messages "
                     f"before their CTS arrived, {causal['late_cts']:,} CTSs posted before NCCL freed their receive "
                     "slot): the packet schedule's rounds did not settle")
    if causal.get("frames_on_down_links"):
        notes.append(f"pcaps: {causal['frames_on_down_links']:,} frames drawn on a link while it is down: the "
                     "re-routing rounds (emit/packets/epoch_paths.py MOVE_ROUNDS) did not settle")
    return notes


def write_file(p: Plan, fset: views.FileSet, spec, dest_dir: Path, scratch: "_Scratch | None" = None,
               progress: Callable[[int], None] | None = None) -> tuple[Path, int]:
    """One capture file of the view, written whole (to .part, then renamed): (path, bytes)."""
    scratch = scratch or _Scratch()
    path = Path(dest_dir) / (spec.name + p.fmt.suffix)
    tmp = path.with_name(path.name + ".part")
    # Plain sequential writes: a writer thread overlapping build and write measured slower here
    # (2 shared cores; bench/bench_pcap.py), and unbuffered I/O avoids a copy of each slice.
    with open(tmp, "wb", buffering=0) as f:
        header = p.fmt.file_header(spec.interfaces)
        f.write(header)
        lead = b"".join(p.fmt.record(t, frame, iface) for t, frame, iface in spec.lead)
        f.write(lead)
        file_bytes = len(header) + len(lead)
        scratch.align_to(file_bytes)
        for buf in _slices(p, fset, spec, scratch):
            _write_all(f, buf)
            file_bytes += len(buf)
            scratch.align_to(file_bytes)          # where the next slice goes
            if progress is not None:
                progress(file_bytes)
    os.replace(tmp, path)
    return path, file_bytes


def build_without_writing(flows: Flows, fabric: Fabric, out: Output, qps: int = 1,
                          nccl: Nccl | None = None, network: Network | None = None) -> int:
    """Bytes write_pcaps would write, built in full but not written (the writer's own cost;
    bench/bench_pcap.py)."""
    p = timing.prepare(flows, fabric, out, qps, times=True, nccl=nccl, network=network)
    if p is None:
        return 0
    fset, scratch, total = views.files(p, fabric), _Scratch(), 0
    for spec in fset.specs:
        total += len(p.fmt.file_header(spec.interfaces))
        total += sum(len(p.fmt.record(t, frame, iface)) for t, frame, iface in spec.lead)
        total += sum(len(buf) for buf in _slices(p, fset, spec, scratch))
    return total


def _slices(p: Plan, fset: views.FileSet, spec, scratch: "_Scratch"):
    """The file's records in time order, one buffer per window."""
    it = items.Items.gather(p, spec.parts)
    packets = items.windows(p, it, WINDOW_PACKETS, WINDOW_BYTES, spec.t0_ns)
    if spec.port_gbps:
        packets = port_queue.queued(p, it, packets, p.line_gbps, spec.port_gbps)
    if not spec.pauses:
        for pos, li, j, t in packets:
            yield frames.records(p, fset.addressing, it, pos, li, j, t, scratch)
        return
    # PFC PAUSE frames (pfc.py) go in between, in time order (after frames of the same ns)
    pause_t = np.array([t for t, _, _ in spec.pauses], np.int64) - spec.t0_ns
    k = 0
    for pos, li, j, t in packets:
        a = 0
        while k < len(pause_t) and pause_t[k] < t[-1]:
            b = int(np.searchsorted(t, pause_t[k], "right"))
            if b > a:
                yield frames.records(p, fset.addressing, it, pos, li[a:b], j[a:b], t[a:b], scratch)
            yield p.fmt.record(int(pause_t[k]), *spec.pauses[k][1:])
            a, k = b, k + 1
        if a < len(t):
            yield frames.records(p, fset.addressing, it, pos, li[a:], j[a:], t[a:], scratch)
    for i in range(k, len(pause_t)):
        yield p.fmt.record(int(pause_t[i]), *spec.pauses[i][1:])


def _write_all(f, buf: np.ndarray) -> None:
    view = memoryview(buf).cast("B")
    while len(view):
        view = view[f.write(view):]


class _Scratch:
    """One byte buffer reused by every slice: rewriting it is far cheaper than faulting in fresh
    pages for each slice (frames.records writes every byte of its slice, zeros included). A slice starts at the same offset within a page as its place
    in the file: the kernel then copies whole pages into the page cache (a slice misaligned
    to the file wrote at half the speed in bench/bench_pcap.py)."""

    PAGE = 4096

    def __init__(self):
        self.buf = np.zeros(0, dtype=np.uint8)
        self.lead = 0

    def align_to(self, file_offset: int) -> None:
        self.lead = file_offset % self.PAGE

    def space(self, n: int) -> np.ndarray:
        """n bytes at the current lead, as they were left (the caller writes all it uses)."""
        need = self.lead + n
        if need > len(self.buf):
            size = max(need, 2 * len(self.buf))
            raw = np.zeros(size + self.PAGE, dtype=np.uint8)
            base = -raw.ctypes.data % self.PAGE          # the buffer starts on a page boundary
            self.buf = raw[base:base + size]
        return self.buf[self.lead:need]

    def zeros(self, n: int) -> np.ndarray:
        view = self.space(n)
        view.fill(0)
        return view

