"""Capture file formats: nanosecond pcap and pcapng, as numpy record layouts.

pcap (magic 0xa1b23c4d: nanosecond timestamps): 24 B file header, per packet a 16 B record
header + the captured bytes.

pcapng: a Section Header Block, one Interface Description Block per interface (a NIC or a switch
port: if_name, if_description, if_MACaddr, if_speed, if_tsresol = 9, i.e. 1 ns units), then one
Enhanced Packet Block per packet: 28 B header (interface id, 64-bit ns timestamp, captured and
original length), the captured bytes padded to 4, optional options (opt_comment naming the
collective, op, step, chunk), and the block length again.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numba
import numpy as np

from ... import __version__

PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
PCAP_MAX_SNAPLEN = 262144
PCAP_FILE_HDR = np.dtype([("magic", "<u4"), ("version_major", "<u2"), ("version_minor", "<u2"),
                          ("thiszone", "<i4"), ("sigfigs", "<u4"), ("snaplen", "<u4"),
                          ("linktype", "<u4")])
PCAP_REC_HDR = np.dtype([("ts_sec", "<u4"), ("ts_nsec", "<u4"), ("incl_len", "<u4"),
                         ("orig_len", "<u4")])
# pcapng Enhanced Packet Block: header up to the packet data; the block length follows the data.
EPB_HDR = np.dtype([("block_type", "<u4"), ("total_len", "<u4"), ("if_id", "<u4"), ("ts_high", "<u4"),
                    ("ts_low", "<u4"), ("cap_len", "<u4"), ("orig_len", "<u4")])
EPB_TYPE, IDB_TYPE, SHB_TYPE = 6, 1, 0x0A0D0D0A
BYTE_ORDER_MAGIC = 0x1A2B3C4D
OPT_ENDOFOPT, OPT_COMMENT = 0, 1
IF_NAME, IF_DESCRIPTION, IF_MACADDR, IF_SPEED, IF_TSRESOL = 2, 3, 6, 8, 9
SHB_USERAPPL = 4


@dataclass(frozen=True)
class Interface:
    name: str           # e.g. node0003-rail1, or leaf3:port5
    description: str
    mac: bytes          # 6 bytes
    speed_bps: int


def pad4(n):
    return (n + 3) & ~3


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) & 3)


def _block(block_type: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", block_type, total) + body + struct.pack("<I", total)


def comment_option_bytes(text_len):
    """Bytes an EPB's options take for a comment of text_len bytes (0: no options at all)."""
    n = np.asarray(text_len, dtype=np.int64)
    return np.where(n > 0, 4 + pad4(n) + 4, 0)


def comment_options(text: bytes) -> bytes:
    return _option(OPT_COMMENT, text) + _option(OPT_ENDOFOPT, b"") if text else b""


@dataclass(frozen=True)
class Format:
    """How records are laid out: rec bytes = header + captured (padded in pcapng) + trailer."""
    pcapng: bool
    snaplen: int        # 0: whole frames
    # output.start_time: every timestamp written is start_ns + the schedule's ns (the one place
    # capture times are encoded: every view, merged or per NIC, switch port or lab port, goes here)
    start_ns: int = 0

    @property
    def rec_hdr_bytes(self) -> int:
        return EPB_HDR.itemsize if self.pcapng else PCAP_REC_HDR.itemsize

    @property
    def suffix(self) -> str:
        return ".pcapng" if self.pcapng else ".pcap"

    def rec_bytes(self, incl, options=0):
        """Record size for captured length incl (+ option bytes, pcapng only)."""
        incl = np.asarray(incl, dtype=np.int64)
        if self.pcapng:
            return EPB_HDR.itemsize + pad4(incl) + options + 4
        return PCAP_REC_HDR.itemsize + incl

    def file_header(self, interfaces: list[Interface]) -> bytes:
        snap = self.snaplen if self.snaplen > 0 else PCAP_MAX_SNAPLEN
        if not self.pcapng:
            h = np.zeros(1, PCAP_FILE_HDR)
            h["magic"], h["version_major"], h["version_minor"] = PCAP_MAGIC_NS, 2, 4
            h["snaplen"], h["linktype"] = snap, LINKTYPE_ETHERNET
            return h.tobytes()
        shb = _block(SHB_TYPE, struct.pack("<IHHq", BYTE_ORDER_MAGIC, 1, 0, -1)
                     + _option(SHB_USERAPPL, f"tracegen {__version__}".encode()) + _option(OPT_ENDOFOPT, b""))
        idbs = b"".join(_block(IDB_TYPE, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, snap)
                               + _option(IF_NAME, i.name.encode()) + _option(IF_DESCRIPTION, i.description.encode())
                               + _option(IF_MACADDR, i.mac) + _option(IF_SPEED, struct.pack("<Q", i.speed_bps))
                               + _option(IF_TSRESOL, bytes([9])) + _option(OPT_ENDOFOPT, b""))
                        for i in interfaces)
        return shb + idbs

    def headers(self, t_ns, incl, orig, if_id, options) -> np.ndarray:
        """(n, rec_hdr_bytes) uint8 record headers."""
        n = len(t_ns)
        t_ns = np.asarray(t_ns, np.int64) + self.start_ns
        if self.pcapng:
            h = np.zeros(n, EPB_HDR)
            h["block_type"] = EPB_TYPE
            h["total_len"] = self.rec_bytes(incl, options)
            h["if_id"] = if_id
            h["ts_high"], h["ts_low"] = t_ns >> 32, t_ns & 0xFFFFFFFF
            h["cap_len"], h["orig_len"] = incl, orig
        else:
            h = np.zeros(n, PCAP_REC_HDR)
            h["ts_sec"], h["ts_nsec"] = np.divmod(t_ns, 1_000_000_000)
            h["incl_len"], h["orig_len"] = incl, orig
        return h.view(np.uint8).reshape(n, -1)

    def record(self, t_ns: int, frame: bytes, if_id: int = 0) -> bytes:
        """One whole record of one frame (no options)."""
        n = len(frame)
        head = self.headers(np.array([t_ns], np.int64), np.array([n]), np.array([n]), if_id, 0)
        if not self.pcapng:
            return head.tobytes() + frame
        return head.tobytes() + frame + bytes(pad4(n) - n) + self.trailers(np.array([n]), 0).tobytes()

    @property
    def time_at(self) -> int:
        """Where a record header's timestamp (two little-endian 32-bit words) starts."""
        return EPB_HDR.fields["ts_high"][1] if self.pcapng else 0

    def time_words(self, t_ns) -> tuple[np.ndarray, np.ndarray]:
        """A record header's two timestamp words (pcap: seconds, nanoseconds; pcapng: the high
        and low halves of the ns count), before their truncation to 32 bits."""
        t_ns = np.asarray(t_ns, np.int64) + self.start_ns
        if self.pcapng:
            return t_ns >> 32, t_ns & 0xFFFFFFFF
        return np.divmod(t_ns, 1_000_000_000)

    def put_times(self, rows: np.ndarray, t_ns) -> None:
        """Write timestamps into (n, >= rec_hdr_bytes) uint8 rows that start with record headers."""
        at = self.time_at
        words = rows[:, at:at + 8].view("<u4")
        words[:, 0], words[:, 1] = self.time_words(t_ns)

    def trailers(self, incl, options) -> np.ndarray:
        """pcapng: the block length repeated after data + options: (n, 4) uint8."""
        return self.rec_bytes(incl, options).astype("<u4").view(np.uint8).reshape(-1, 4)


def put_records(buf: np.ndarray, rows: np.ndarray, row_w, tid, rec_off, total: int, fmt: Format, t_ns,
                psn_at: int, psn, id_at: int = -1, ip_id=None, csum_at: int = -1, csum=None) -> None:
    """Records i laid out back to back in buf[:total] from rec_off[i] (increasing): the first
    row_w[tid[i]] bytes of template row tid[i] (a (T, width) uint8 array), zeros to the next
    record, and its own fields put over the row: the timestamp t_ns[i], the 24-bit PSN psn[i] at
    psn_at and, at id_at and csum_at (-1: none, IPv6), the 16-bit IPv4 identification and header
    checksum, big-endian. A field's bytes past the record's row width are left out (a truncated
    record). Every byte of buf[:total] is written (buf need not be zeroed first), in order: one
    pass over the records (numba) instead of a numpy pass per field and per row width."""
    i64 = lambda x: np.ascontiguousarray(x, np.int64)
    a, b = fmt.time_words(t_ns)
    psn = i64(psn)
    _put_records(buf, np.ascontiguousarray(rows, np.uint8), i64(row_w), i64(tid), i64(rec_off), total, fmt.time_at,
                 i64(a), i64(b), psn_at, psn, id_at, psn if ip_id is None else i64(ip_id),
                 csum_at, psn if csum is None else i64(csum))


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _put_records(buf, rows, row_w, tid, rec_off, total, time_at, ta, tb, psn_at, psn, id_at, ip_id, csum_at,
                 csum):  # pragma: no cover
    # Unsigned offsets: no negative-index wrap-around, so the byte loops compile tight. A column
    # of -1 becomes 2^64 - 1: never inside a row (its second byte is only looked at after the first).
    width = np.uint64(rows.shape[1])
    flat = rows.ravel()
    t_at, p_at = np.uint64(time_at), np.uint64(psn_at)
    i_at, c_at = np.uint64(id_at), np.uint64(csum_at)
    n = len(tid)
    for i in range(n):
        k, o = np.uint64(tid[i]), np.uint64(rec_off[i])
        w = np.uint64(row_w[tid[i]])
        end = np.uint64(rec_off[i + 1] if i + 1 < n else total)
        src = k * width
        for c in range(w):
            buf[o + np.uint64(c)] = flat[src + np.uint64(c)]
        for x in range(o + w, end):          # the rest of the record: zero payload, padding
            buf[x] = 0
        x, y = np.uint64(ta[i]), np.uint64(tb[i])
        at = o + t_at
        for c in range(4):
            buf[at + np.uint64(c)] = (x >> np.uint64(8 * c)) & np.uint64(0xFF)
            buf[at + np.uint64(4 + c)] = (y >> np.uint64(8 * c)) & np.uint64(0xFF)
        v = np.uint64(psn[i])
        for c in range(3):
            if p_at + np.uint64(c) < w:
                buf[o + p_at + np.uint64(c)] = (v >> np.uint64(16 - 8 * c)) & np.uint64(0xFF)
        v = np.uint64(ip_id[i])
        if i_at < w:
            buf[o + i_at] = (v >> np.uint64(8)) & np.uint64(0xFF)
            if i_at + np.uint64(1) < w:
                buf[o + i_at + np.uint64(1)] = v & np.uint64(0xFF)
        v = np.uint64(csum[i])
        if c_at < w:
            buf[o + c_at] = (v >> np.uint64(8)) & np.uint64(0xFF)
            if c_at + np.uint64(1) < w:
                buf[o + c_at + np.uint64(1)] = v & np.uint64(0xFF)
