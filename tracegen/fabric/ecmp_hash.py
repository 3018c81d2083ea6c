"""The ECMP hash a switch picks a next hop by (routing.py's module doc gives the formulas): zlib's
CRC-32 of the 5-tuple or of (src IP, dst IP, BTH DestQP), MurmurHash3's fmix32 and the per-switch
seeds. All arithmetic on uint32, so a C++ replica gives the same choices."""
from __future__ import annotations

import numpy as np

ROCE_UDP_PORT = 4791
_POLY = 0xEDB88320


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> np.uint32(1)) ^ np.uint32(_POLY), t >> np.uint32(1)).astype(np.uint32)
    return t


CRC_TABLE = _crc_table()


def crc32_rows(data: np.ndarray) -> np.ndarray:
    """zlib.crc32 of every row of a [n, k] uint8 array (vectorized over rows)."""
    data = np.asarray(data, dtype=np.uint8)
    crc = np.full(len(data), 0xFFFFFFFF, dtype=np.uint32)
    for j in range(data.shape[1]):
        crc = CRC_TABLE[(crc ^ data[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def fmix32(h) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser."""
    h = np.asarray(h, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return h.astype(np.uint32)


def switch_seeds(n_switches: int, ecmp_seed: int) -> np.ndarray:
    s = np.arange(n_switches, dtype=np.uint64)
    return fmix32((np.uint64(ecmp_seed) * np.uint64(0x9E3779B1) + s * np.uint64(0x85EBCA77) + np.uint64(1))
                  & np.uint64(0xFFFFFFFF))


def ip_bytes(ipv4: np.ndarray, ip_version: int) -> np.ndarray:
    """[n, 4] or [n, 16] network-order address bytes; IPv6 is fd00::<IPv4> (the address plan)."""
    v4 = np.asarray(ipv4, dtype=np.uint32)
    b4 = np.stack([(v4 >> np.uint32(s)) & np.uint32(0xFF) for s in (24, 16, 8, 0)], axis=1).astype(np.uint8)
    if ip_version == 4:
        return b4
    out = np.zeros((len(v4), 16), np.uint8)
    out[:, 0] = 0xFD
    out[:, 12:] = b4
    return out


def tuple_crc(src_ip: np.ndarray, dst_ip: np.ndarray, sport: np.ndarray, ip_version: int,
              dport: int = ROCE_UDP_PORT) -> np.ndarray:
    """CRC-32 of each packet's 5-tuple (src IP, dst IP, protocol 17, sport, dport)."""
    n = len(sport)
    sport = np.asarray(sport, dtype=np.uint32)
    rows = np.concatenate([
        ip_bytes(src_ip, ip_version), ip_bytes(dst_ip, ip_version), np.full((n, 1), 17, np.uint8),
        np.stack([sport >> np.uint32(8), sport & np.uint32(0xFF)], axis=1).astype(np.uint8),
        np.tile(np.array([dport >> 8, dport & 0xFF], np.uint8), (n, 1))], axis=1)
    return crc32_rows(rows)


def qp_crc(src_ip: np.ndarray, dst_ip: np.ndarray, dest_qpn: np.ndarray, ip_version: int) -> np.ndarray:
    """CRC-32 of each packet's (src IP, dst IP, BTH DestQP) - the `qp` ECMP hash's fields."""
    q = np.asarray(dest_qpn, dtype=np.uint32)
    rows = np.concatenate([
        ip_bytes(src_ip, ip_version), ip_bytes(dst_ip, ip_version),
        np.stack([(q >> np.uint32(s)) & np.uint32(0xFF) for s in (16, 8, 0)], axis=1).astype(np.uint8)],
        axis=1)
    return crc32_rows(rows)


ECMP_HASHES = ("5-tuple", "qp")
