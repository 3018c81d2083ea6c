"""RoCEv2 (RC) on the wire, as data: one numpy structured dtype per header.

Fields are big-endian and 24-bit fields are byte triples, so the layout of WIRE.md can be read
straight off the dtypes and a batch of packets is one structured array (writing = viewing it as
bytes). Also here: the opcodes, the mlx5 UDP source port and a vectorized ICRC.
"""
from __future__ import annotations

import enum
import zlib
from functools import lru_cache

import numpy as np

# --- headers ------------------------------------------------------------------------------------
ETH = np.dtype([("dst", "u1", (6,)), ("src", "u1", (6,)), ("ethertype", ">u2")])
DOT1Q = np.dtype([("tci", ">u2"), ("ethertype", ">u2")])       # follows ETH (ethertype 0x8100)
IPV4 = np.dtype([("ver_ihl", "u1"), ("tos", "u1"), ("total_len", ">u2"), ("id", ">u2"),
                 ("flags_frag", ">u2"), ("ttl", "u1"), ("proto", "u1"), ("csum", ">u2"),
                 ("src", ">u4"), ("dst", ">u4")])
# RoCEv2 over IPv6: version 6 | traffic class (DSCP<<2 | ECN) | flow label 0 (NCCL leaves it 0).
IPV6 = np.dtype([("ver_tc_fl", ">u4"), ("payload_len", ">u2"), ("next_header", "u1"),
                 ("hop_limit", "u1"), ("src", "u1", (16,)), ("dst", "u1", (16,))])
UDP = np.dtype([("sport", ">u2"), ("dport", ">u2"), ("len", ">u2"), ("csum", ">u2")])
BTH = np.dtype([("opcode", "u1"),
                ("flags", "u1"),          # SE(1) M(1) PadCnt(2) TVer(4)
                ("pkey", ">u2"),
                ("fecn_becn", "u1"),      # FECN(1) BECN(1) reserved(6)
                ("dest_qp", "u1", (3,)),
                ("ack_req", "u1"),        # A(1) reserved(7)
                ("psn", "u1", (3,))])
RETH = np.dtype([("va", ">u8"), ("rkey", ">u4"), ("dma_len", ">u4")])
IMMDT = np.dtype([("imm", ">u4")])
AETH = np.dtype([("syndrome", "u1"), ("msn", "u1", (3,))])
CNP_PAD = np.dtype([("reserved", "u1", (16,))])

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_DOT1Q = 0x8100
IPPROTO_UDP = 17
IPV4_DF = 0x4000
ROCEV2_UDP_PORT = 4791
PKEY_DEFAULT = 0xFFFF
BTH_SE = 0x80
BTH_MIGREQ = 0x40      # mlx5 creates QPs in path-migration state MIGRATED, so RC packets carry M=1
BTH_BECN = 0x40
BTH_ACKREQ = 0x80
AETH_ACK = 0x1F        # ACK, credits invalid (what RoCE NICs send)
ICRC_BYTES = 4
WIRE_OVERHEAD_BYTES = 4 + 8 + 12   # FCS + preamble/SFD + inter-frame gap: on the wire, not in a pcap
PSN_MASK = 0xFFFFFF
BTH_PSN_OFFSET = 9                # PSN: the last 3 bytes of the 12-byte BTH
IPV4_ID_OFFSET = 4                # identification: bytes 4-5 of the IPv4 header
IPV4_CSUM_OFFSET = 10


class Opcode(enum.IntEnum):
    RC_WRITE_FIRST = 0x06
    RC_WRITE_MIDDLE = 0x07
    RC_WRITE_LAST = 0x08
    RC_WRITE_LAST_IMM = 0x09
    RC_WRITE_ONLY = 0x0A
    RC_WRITE_ONLY_IMM = 0x0B
    RC_ACK = 0x11
    CNP = 0x81


# Extension headers after the BTH, per opcode (IBA 9.3.x).
EXT_HEADERS: dict[Opcode, tuple[tuple[str, np.dtype], ...]] = {
    Opcode.RC_WRITE_FIRST: (("reth", RETH),),
    Opcode.RC_WRITE_MIDDLE: (),
    Opcode.RC_WRITE_LAST: (),
    Opcode.RC_WRITE_LAST_IMM: (("immdt", IMMDT),),
    Opcode.RC_WRITE_ONLY: (("reth", RETH),),
    Opcode.RC_WRITE_ONLY_IMM: (("reth", RETH), ("immdt", IMMDT)),
    Opcode.RC_ACK: (("aeth", AETH),),
    Opcode.CNP: (("cnp", CNP_PAD),),
}


@lru_cache(maxsize=None)
def frame_dtype(opcode: int, vlan: bool, ip_version: int = 4) -> np.dtype:
    """Every header of one frame, Ethernet to the last extension header (payload and ICRC follow)."""
    parts = [("eth", ETH)] + ([("vlan", DOT1Q)] if vlan else [])
    parts += [("ip", IPV6 if ip_version == 6 else IPV4), ("udp", UDP), ("bth", BTH),
              *EXT_HEADERS[Opcode(opcode)]]
    return np.dtype(parts)


@lru_cache(maxsize=None)
def base_dtype(vlan: bool, ip_version: int = 4) -> np.dtype:
    """The headers every RoCEv2 frame has: Ethernet (+802.1Q), IP, UDP, BTH."""
    parts = [("eth", ETH)] + ([("vlan", DOT1Q)] if vlan else [])
    return np.dtype(parts + [("ip", IPV6 if ip_version == 6 else IPV4), ("udp", UDP), ("bth", BTH)])


def _ext_places():
    """(name, dtype, offset after the BTH, opcode mask) of every extension header placement."""
    places = {}
    for op, headers in EXT_HEADERS.items():
        offset = 0
        for name, dt in headers:
            places.setdefault((name, offset), (dt, []))[1].append(int(op))
            offset += dt.itemsize
    # ops as a 256-entry mask: opcode -> has this header here
    return tuple((name, dt, offset, np.isin(np.arange(256), ops)) for (name, offset), (dt, ops) in places.items())


EXT_PLACES = _ext_places()


def l2_bytes(vlan: bool) -> int:
    return ETH.itemsize + (DOT1Q.itemsize if vlan else 0)


def ip_bytes(ip_version: int) -> int:
    return (IPV6 if ip_version == 6 else IPV4).itemsize


def ipv6_from_ipv4(ipv4) -> np.ndarray:
    """The IPv6 address plan: fd00::/96 with the node's IPv4 address in the low 32 bits
    (10.r.x.y -> fd00::a0r:xy as hex), so both plans name a NIC alike. (n, 16) bytes."""
    v4 = np.asarray(ipv4, dtype=np.uint32).reshape(-1)
    a = np.zeros((len(v4), 16), dtype=np.uint8)
    a[:, 0] = 0xFD
    a[:, 12:] = v4.astype(">u4").view(np.uint8).reshape(-1, 4)
    return a


def put_u24(field: np.ndarray, values) -> None:
    """Store integers into a (n, 3) byte-triple field, big-endian."""
    v = np.asarray(values, dtype=np.uint32)
    field[..., 0] = v >> 16
    field[..., 1] = v >> 8
    field[..., 2] = v


def get_u24(field: np.ndarray) -> np.ndarray:
    f = field.astype(np.uint32)
    return (f[..., 0] << 16) | (f[..., 1] << 8) | f[..., 2]


def ipv4_checksum(ip: np.ndarray) -> np.ndarray:
    """Header checksums of a batch of IPV4 records (their csum field is ignored)."""
    w = (ip["ver_ihl"].astype(np.uint32) << 8) | ip["tos"]
    w = w + ip["total_len"] + ip["id"] + ip["flags_frag"]
    w = w + ((ip["ttl"].astype(np.uint32) << 8) | ip["proto"])
    for addr in (ip["src"].astype(np.uint32), ip["dst"].astype(np.uint32)):
        w = w + (addr >> 16) + (addr & 0xFFFF)
    w = (w & 0xFFFF) + (w >> 16)
    w = (w & 0xFFFF) + (w >> 16)
    return (~w & 0xFFFF).astype(np.uint16)


def udp_sport(lqpn, rqpn) -> np.ndarray:
    """mlx5's RoCEv2 source port from the two QPNs (flow label 0); symmetric, so both directions of
    a QP pair hash alike. WIRE.md: QPs 0x123, 0x456 -> 60881."""
    fl = np.asarray(lqpn, dtype=np.uint64) * np.asarray(rqpn, dtype=np.uint64)
    fl ^= fl >> np.uint64(20)
    fl ^= fl >> np.uint64(40)
    fl &= np.uint64(0xFFFFF)
    low, high = fl & np.uint64(0x3FFF), (fl & np.uint64(0xFC000)) >> np.uint64(14)
    return (np.uint64(0xC000) | (low ^ high)).astype(np.uint16)


# --- ICRC ---------------------------------------------------------------------------------------
# Bytes forced to ones before the CRC, as offsets from the start of the IPv4 header:
# ToS, TTL, header checksum, UDP checksum, BTH byte 4 (FECN/BECN/reserved).
ICRC_MASKED_OFFSETS = np.array([1, 8, 10, 11, 26, 27, 32])
# IPv6: traffic class (low nibble of byte 0, high nibble of byte 1), flow label, hop limit; then
# UDP checksum and BTH byte 4. (offset, bits forced to one) - byte 0 keeps its version nibble.
ICRC_MASKS_V6 = ((0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF), (46, 0xFF), (47, 0xFF),
                 (52, 0xFF))
_LRH_STANDIN = b"\xff" * 8
_BYTE_BITS = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)     # [byte, bit]


def _xor_of_bits(basis: np.ndarray) -> np.ndarray:
    """basis[..., 8] (value of each single bit) -> table[..., 256] by linearity over GF(2)."""
    return np.bitwise_xor.reduce(np.where(_BYTE_BITS, basis[..., None, :], np.uint32(0)), axis=-1)


def _byte_tables(length: int, positions) -> np.ndarray:
    """(len(positions), 256): what each value of the byte at each position adds to the CRC of a
    `length`-byte string. CRC-32 is affine, so for strings of one length crc(a ^ d) = crc(a) ^
    crc(d) ^ crc(0); what comes before the string does not change a byte's share."""
    zero = bytearray(length)
    base = zlib.crc32(zero)
    basis = np.empty((len(positions), 8), dtype=np.uint32)
    for k, i in enumerate(positions):
        for bit in range(8):
            zero[i] = 1 << bit
            basis[k, bit] = zlib.crc32(zero) ^ base
        zero[i] = 0
    return _xor_of_bits(basis)


@lru_cache(maxsize=None)
def _header_tables(n_bytes: int) -> tuple[int, np.ndarray]:
    """crc(LRH'|H) = crc(LRH'|0) ^ XOR_i D[i, H_i]. Returns (crc(LRH'|0), D)."""
    return zlib.crc32(_LRH_STANDIN + bytes(n_bytes)), _byte_tables(n_bytes, range(n_bytes))


@lru_cache(maxsize=64)
def _payload_tables(payload: bytes) -> tuple[int, np.ndarray]:
    """Continuing a CRC over a fixed payload is an affine map of the 32-bit state s:
    crc32(payload, s) = f0 ^ T[0][s & 255] ^ T[1][s >> 8 & 255] ^ T[2][..] ^ T[3][s >> 24]."""
    f0 = zlib.crc32(payload, 0)
    basis = np.array([zlib.crc32(payload, 1 << b) ^ f0 for b in range(32)], dtype=np.uint32)
    return f0, _xor_of_bits(basis.reshape(4, 8))


def _header_crc(headers: np.ndarray, ip_version: int) -> np.ndarray:
    """CRC state after LRH' and the (masked) headers, per row of uint8 (n, L)."""
    h = np.array(headers, dtype=np.uint8, copy=True, ndmin=2)
    if ip_version == 6:
        for off, bits in ICRC_MASKS_V6:
            h[:, off] |= bits
    else:
        h[:, ICRC_MASKED_OFFSETS] = 0xFF
    base, table = _header_tables(h.shape[1])
    # Columns equal in every row fold into one constant; only the varying ones are looked up.
    varies = (h != h[:1]).any(axis=0)
    const_cols = np.flatnonzero(~varies)
    var_cols = np.flatnonzero(varies)
    crc = np.full(len(h), base ^ np.bitwise_xor.reduce(table[const_cols, h[0, const_cols]]),
                  dtype=np.uint32)
    if len(var_cols):
        crc ^= np.bitwise_xor.reduce(table[var_cols, h[:, var_cols]], axis=1)
    return crc


def icrc(headers: np.ndarray, payload: bytes = b"", ip_version: int = 4) -> np.ndarray:
    """ICRC (the zlib.crc32 value; stored little-endian on the wire) of n packets that share one
    header length and one payload (incl. pad bytes). headers: uint8 (n, L) from the IP header
    to the end of the transport headers; masked fields are forced to ones here."""
    n = len(np.atleast_2d(headers))
    return icrc_sized(headers, np.full(n, len(payload)), lambda _: bytes(payload), ip_version)


def icrc_sized(headers: np.ndarray, payload_bytes, payload_of, ip_version: int = 4) -> np.ndarray:
    """icrc() of n packets that share a header length but not a payload size: packet i carries
    payload_of(payload_bytes[i]) (pad included)."""
    crc = _header_crc(headers, ip_version)
    sizes, which = np.unique(np.asarray(payload_bytes, np.int64), return_inverse=True)
    if len(sizes) == 1 and sizes[0] == 0 and not payload_of(0):
        return crc
    f0 = np.zeros(len(sizes), np.uint32)
    t = np.zeros((len(sizes), 4, 256), np.uint32)
    for k, size in enumerate(sizes.tolist()):
        data = payload_of(size)
        if data:
            f0[k], t[k] = _payload_tables(bytes(data))
        else:                       # nothing follows: the identity map
            t[k] = np.arange(256, dtype=np.uint32) << (8 * np.arange(4, dtype=np.uint32))[:, None]
    return (f0[which] ^ t[which, 0, crc & 0xFF] ^ t[which, 1, (crc >> 8) & 0xFF]
            ^ t[which, 2, (crc >> 16) & 0xFF] ^ t[which, 3, crc >> 24]).astype(np.uint32)


@lru_cache(maxsize=512)
def _delta_table(tail_bytes: int, id_lead: int = 0) -> np.ndarray:
    """(3 or 5, 256): what each byte value of the PSN (and, with id_lead > 0, first of the IPv4
    identification, id_lead bytes before the PSN) adds to the ICRC when `tail_bytes` covered bytes
    follow the PSN (the rest of the headers, payload, pad)."""
    if not id_lead:
        return _byte_tables(3 + tail_bytes, range(3))
    return _byte_tables(id_lead + 3 + tail_bytes, (0, 1, id_lead, id_lead + 1, id_lead + 2))


def icrc_delta_tables(tail_bytes, id_lead: int = 0) -> np.ndarray:
    """_delta_table per entry of tail_bytes, stacked: (n, 3 or 5, 256)."""
    return np.stack([_delta_table(int(x), id_lead) for x in np.asarray(tail_bytes).tolist()])


def icrc_delta_lookup(tables: np.ndarray, which, psn_xor, id_xor=None) -> np.ndarray:
    """Per packet: what to XOR into an ICRC when its PSN (and IPv4 identification) change by
    psn_xor (id_xor), old ^ new; tables[which] is the packet's icrc_delta_tables entry."""
    psn_xor = np.asarray(psn_xor, np.int64)
    k = 0 if id_xor is None else 2
    d = (tables[which, k, psn_xor >> 16] ^ tables[which, k + 1, (psn_xor >> 8) & 0xFF]
         ^ tables[which, k + 2, psn_xor & 0xFF])
    if id_xor is not None:
        id_xor = np.asarray(id_xor, np.int64)
        d ^= tables[which, 0, id_xor >> 8] ^ tables[which, 1, id_xor & 0xFF]
    return d


def icrc_psn_delta(psn_xor, tail_bytes, id_xor=None, id_lead: int = 0) -> np.ndarray:
    """Per packet: what to XOR into an ICRC when its PSN changes by psn_xor (old ^ new), with
    tail_bytes covered bytes after the PSN; and its IPv4 identification by id_xor, id_lead bytes
    before the PSN."""
    tails, which = np.unique(np.asarray(tail_bytes, np.int64), return_inverse=True)
    return icrc_delta_lookup(icrc_delta_tables(tails, id_lead if id_xor is not None else 0), which,
                             psn_xor, id_xor)
