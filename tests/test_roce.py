"""Header layouts, UDP source port and the vectorized ICRC against WIRE.md, zlib and scapy."""
import struct
import zlib

import numpy as np
import pytest

from tracegen.emit.packets import roce
from tracegen.emit.packets.roce import Opcode

# WIRE.md: a CNP captured on a ConnectX-4 Lx (scapy's RoCE regression test).
CNP_HEX = ("e41d2dab2bc2 7cfe90643b32 0800"
           "45c2 003c 718c 4000 4011 9161 0a001101 0a001201"
           "0000 12b7 0028 0000"
           "81 00 ffff 40 000118 00 000000"
           "00000000000000000000000000000000"
           "82fd002a").replace(" ", "")


def test_cnp_vector_icrc():
    frame = bytes.fromhex(CNP_HEX)
    ip_to_icrc = np.frombuffer(frame[14:-4], dtype=np.uint8)
    crc = roce.icrc(ip_to_icrc)[0]
    assert crc == 0x2A00FD82
    assert struct.pack("<I", crc).hex() == "82fd002a"
    # Same value when the 16 reserved bytes are treated as payload (the table-extension path).
    hdr = ip_to_icrc[:20 + 8 + 12]
    assert struct.pack("<I", roce.icrc(hdr, frame[14 + 40:-4])[0]).hex() == "82fd002a"


def test_cnp_vector_parses_with_our_dtypes():
    frame = bytes.fromhex(CNP_HEX)
    h = np.frombuffer(frame[:-4], dtype=roce.frame_dtype(Opcode.CNP, vlan=False))[0]
    assert h["eth"]["ethertype"] == roce.ETHERTYPE_IPV4
    assert h["ip"]["tos"] == 0xC2 and h["ip"]["ttl"] == 64 and h["ip"]["flags_frag"] == roce.IPV4_DF
    assert h["udp"]["dport"] == roce.ROCEV2_UDP_PORT and h["udp"]["len"] == 40
    assert h["bth"]["opcode"] == Opcode.CNP and h["bth"]["fecn_becn"] == roce.BTH_BECN
    assert roce.get_u24(h["bth"]["dest_qp"]) == 0x118 and roce.get_u24(h["bth"]["psn"]) == 0
    assert roce.ipv4_checksum(h["ip"][None])[0] == 0x9161


@pytest.mark.parametrize("hdr_bytes,payload_bytes", [(40, 0), (56, 4096), (44, 1023), (72, 64)])
def test_icrc_matches_zlib_on_random_packets(hdr_bytes, payload_bytes):
    rng = np.random.default_rng(hdr_bytes + payload_bytes)
    h = rng.integers(0, 256, size=(200, hdr_bytes), dtype=np.uint8)
    h[:, :12] = h[0, :12]           # some constant columns (the folded path) and some varying
    payload = rng.integers(0, 256, size=payload_bytes, dtype=np.uint8).tobytes()
    masked = h.copy()
    masked[:, [1, 8, 10, 11, 26, 27, 32]] = 0xFF   # ToS, TTL, IP csum, UDP csum, BTH byte 4
    want = [zlib.crc32(b"\xff" * 8 + row.tobytes() + payload) for row in masked]
    np.testing.assert_array_equal(roce.icrc(h, payload), np.array(want, dtype=np.uint32))


def test_icrc_sized_matches_zlib_with_a_payload_per_packet():
    """Packets sharing a header length but not a payload size (one call, tables per size)."""
    rng = np.random.default_rng(7)
    h = rng.integers(0, 256, size=(300, 44), dtype=np.uint8)
    sizes = rng.choice([0, 4, 64, 1024, 4096, 1500], size=300)
    payload_of = lambda n: bytes((np.arange(n) * 7 & 0xFF).astype(np.uint8))
    masked = h.copy()
    masked[:, [1, 8, 10, 11, 26, 27, 32]] = 0xFF
    want = [zlib.crc32(b"\xff" * 8 + row.tobytes() + payload_of(n)) for row, n in zip(masked, sizes)]
    np.testing.assert_array_equal(roce.icrc_sized(h, sizes, payload_of), np.array(want, dtype=np.uint32))


@pytest.mark.parametrize("tail", [0, 3, 16, 1024 + 4])
def test_icrc_psn_delta_is_the_crc_of_the_changed_packet(tail):
    """ICRC of a packet with another PSN = old ICRC ^ delta (CRC linearity), for random PSNs."""
    rng = np.random.default_rng(tail)
    n_hdr = roce.IPV4.itemsize + roce.UDP.itemsize + roce.BTH_PSN_OFFSET + 3 + min(tail, 16)
    payload = rng.integers(0, 256, size=tail - min(tail, 16), dtype=np.uint8).tobytes()
    h = rng.integers(0, 256, size=(50, n_hdr), dtype=np.uint8)
    psn_at = roce.IPV4.itemsize + roce.UDP.itemsize + roce.BTH_PSN_OFFSET
    old = roce.icrc(h, payload)
    new_psn = rng.integers(0, 1 << 24, size=50)
    old_psn = (h[:, psn_at].astype(np.int64) << 16) | (h[:, psn_at + 1].astype(np.int64) << 8) | h[:, psn_at + 2]
    h2 = h.copy()
    roce.put_u24(h2[:, psn_at:psn_at + 3], new_psn)
    got = old ^ roce.icrc_psn_delta(old_psn ^ new_psn, np.full(50, tail))
    np.testing.assert_array_equal(got, roce.icrc(h2, payload))


@pytest.mark.parametrize("tail", [0, 16, 4096 + 4])
def test_icrc_delta_of_ipv4_id_and_psn_together(tail):
    """Changing the IPv4 identification and the PSN of a packet: old ICRC ^ one delta."""
    rng = np.random.default_rng(tail + 1)
    psn_at = roce.IPV4.itemsize + roce.UDP.itemsize + roce.BTH_PSN_OFFSET
    n_hdr = psn_at + 3 + min(tail, 16)
    payload = rng.integers(0, 256, size=tail - min(tail, 16), dtype=np.uint8).tobytes()
    h = rng.integers(0, 256, size=(50, n_hdr), dtype=np.uint8)
    old = roce.icrc(h, payload)
    new_psn, new_id = rng.integers(0, 1 << 24, size=50), rng.integers(0, 1 << 16, size=50)
    old_psn = roce.get_u24(h[:, psn_at:psn_at + 3]).astype(np.int64)
    id_at = roce.IPV4_ID_OFFSET
    old_id = (h[:, id_at].astype(np.int64) << 8) | h[:, id_at + 1]
    h2 = h.copy()
    roce.put_u24(h2[:, psn_at:psn_at + 3], new_psn)
    h2[:, id_at], h2[:, id_at + 1] = new_id >> 8, new_id & 0xFF
    delta = roce.icrc_psn_delta(old_psn ^ new_psn, np.full(50, tail), id_xor=old_id ^ new_id,
                                id_lead=psn_at - id_at)
    np.testing.assert_array_equal(old ^ delta, roce.icrc(h2, payload))


def test_icrc_ignores_masked_fields():
    frame = bytearray(bytes.fromhex(CNP_HEX))
    ip = 14
    for off in (1, 8, 10, 11, 26, 27, 32):   # must not change the ICRC
        frame[ip + off] ^= 0x5A
    assert roce.icrc(np.frombuffer(bytes(frame[ip:-4]), np.uint8))[0] == 0x2A00FD82
    frame[ip + 33] ^= 1                      # DestQP is covered
    assert roce.icrc(np.frombuffer(bytes(frame[ip:-4]), np.uint8))[0] != 0x2A00FD82


def test_ipv4_checksum_rfc1071():
    rng = np.random.default_rng(7)
    ip = np.frombuffer(rng.integers(0, 256, size=20 * 50_000, dtype=np.uint8).tobytes(), roce.IPV4)

    def rfc1071(hdr: bytes) -> int:
        s = sum(struct.unpack(">10H", hdr[:10] + b"\0\0" + hdr[12:]))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        return ~s & 0xFFFF

    want = np.array([rfc1071(ip[k:k + 1].tobytes()) for k in range(len(ip))], dtype=np.uint16)
    np.testing.assert_array_equal(roce.ipv4_checksum(ip), want)


def test_udp_sport_formula():
    assert roce.udp_sport(0x123, 0x456) == 60881          # WIRE.md example
    q = np.arange(0x100, 0x180)
    np.testing.assert_array_equal(roce.udp_sport(q, q[::-1]), roce.udp_sport(q[::-1], q))
    sport = roce.udp_sport(q, q + 7)
    assert (sport >= 0xC000).all()
    # Spelled out once more as plain Python.
    for lq, rq in [(0x100, 0x101), (0xABCDE, 0x12345), (0xFFFFFF, 0xFFFFFF)]:
        fl = lq * rq
        fl ^= fl >> 20
        fl ^= fl >> 40
        fl &= 0xFFFFF
        assert roce.udp_sport(lq, rq) == 0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))


def test_header_sizes_are_the_spec():
    assert (roce.ETH.itemsize, roce.DOT1Q.itemsize, roce.IPV4.itemsize, roce.UDP.itemsize) == (14, 4, 20, 8)
    assert (roce.BTH.itemsize, roce.RETH.itemsize, roce.IMMDT.itemsize, roce.AETH.itemsize) == (12, 16, 4, 4)
    # WIRE.md frame sizes at PMTU 4096 with VLAN, no FCS.
    size = lambda op, payload: roce.frame_dtype(op, True).itemsize + payload + roce.ICRC_BYTES
    assert size(Opcode.RC_WRITE_FIRST, 4096) == 4174
    assert size(Opcode.RC_WRITE_MIDDLE, 4096) == 4158
    assert size(Opcode.RC_WRITE_LAST_IMM, 4096) == 4162
    assert size(Opcode.CNP, 0) - 4 == 74                     # untagged CNP is 74 B


def test_header_batch_round_trips_through_scapy():
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Dot1Q, Ether

    n = 3
    h = np.zeros(n, roce.frame_dtype(Opcode.RC_WRITE_ONLY_IMM, vlan=True))
    h["eth"]["ethertype"], h["vlan"]["tci"], h["vlan"]["ethertype"] = 0x8100, (3 << 13) | 100, 0x0800
    ip = h["ip"]
    ip["ver_ihl"], ip["tos"], ip["total_len"], ip["flags_frag"] = 0x45, 0x6A, 20 + 8 + 32 + 8 + 4, 0x4000
    ip["ttl"], ip["proto"], ip["src"], ip["dst"] = 64, 17, 0x0A000001, [0x0A000002, 0x0A010003, 0x0AFF0004]
    ip["csum"] = roce.ipv4_checksum(ip)
    h["udp"]["sport"], h["udp"]["dport"], h["udp"]["len"] = 50000, 4791, 8 + 32 + 8 + 4
    h["bth"]["opcode"], h["bth"]["flags"], h["bth"]["pkey"] = Opcode.RC_WRITE_ONLY_IMM, 0x40, 0xFFFF
    roce.put_u24(h["bth"]["dest_qp"], [0x100, 0xABCDEF, 0xFFFFFF])
    roce.put_u24(h["bth"]["psn"], [0, 1, 0xFFFFFF])
    h["bth"]["ack_req"] = 0x80
    h["reth"]["va"], h["reth"]["rkey"], h["reth"]["dma_len"] = 0x7F0012345678, 0x1234, 8
    h["immdt"]["imm"] = 8
    hb = h.view(np.uint8).reshape(n, -1)
    crc = roce.icrc(hb[:, 18:], bytes(8))
    for k in range(n):
        frame = hb[k].tobytes() + bytes(8) + struct.pack("<I", crc[k])
        p = Ether(frame)
        assert p[Dot1Q].prio == 3 and p[Dot1Q].vlan == 100
        assert p[BTH].dqpn == [0x100, 0xABCDEF, 0xFFFFFF][k] and p[BTH].psn == [0, 1, 0xFFFFFF][k]
        assert p[BTH].migreq == 1 and p[BTH].ackreq == 1 and p[BTH].pkey == 0xFFFF
        ip_chk = p[IP].chksum
        del p[IP].chksum
        assert Ether(bytes(p))[IP].chksum == ip_chk
        p[BTH].icrc = None
        assert bytes(p)[-4:] == frame[-4:]


@pytest.mark.parametrize("hdr_bytes,payload_bytes", [(60, 0), (76, 4096), (64, 1023)])
def test_icrc_ipv6_matches_zlib(hdr_bytes, payload_bytes):
    """RoCEv2 over IPv6: traffic class, flow label and hop limit masked (the version nibble kept),
    UDP checksum and BTH byte 4 too (offsets from the IPv6 header: 40 + 6, 40 + 8 + 4)."""
    rng = np.random.default_rng(hdr_bytes)
    h = rng.integers(0, 256, size=(100, hdr_bytes), dtype=np.uint8)
    h[:, 0] = 0x60 | (h[:, 0] & 0x0F)
    payload = rng.integers(0, 256, size=payload_bytes, dtype=np.uint8).tobytes()
    masked = h.copy()
    masked[:, 0] |= 0x0F
    masked[:, [1, 2, 3, 7, 46, 47, 52]] = 0xFF
    want = [zlib.crc32(b"\xff" * 8 + row.tobytes() + payload) for row in masked]
    np.testing.assert_array_equal(roce.icrc(h, payload, ip_version=6), np.array(want, dtype=np.uint32))


def test_icrc_ipv6_agrees_with_scapy():
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    p = (Ether() / IPv6(src="fd00::a00:1", dst="fd00::a01:2", tc=0x6A, fl=0x12345, hlim=63)
         / UDP(sport=0xC123, dport=4791, chksum=0) / BTH(opcode=0x0A, dqpn=0x101, psn=7) / (b"\x11" * 64))
    frame = bytes(p)
    crc = roce.icrc(np.frombuffer(frame[14:14 + 40 + 8 + 12], np.uint8), frame[14 + 60:-4], ip_version=6)[0]
    assert struct.pack("<I", crc) == frame[-4:]


def test_ipv6_address_plan_embeds_ipv4():
    import ipaddress
    a = roce.ipv6_from_ipv4([0x0A010203])
    assert ipaddress.IPv6Address(a[0].tobytes()) == ipaddress.IPv6Address("fd00::a01:203")
    assert roce.frame_dtype(Opcode.RC_WRITE_MIDDLE, True, 6).itemsize == 18 + 40 + 8 + 12
