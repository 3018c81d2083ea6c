"""ARP and IPv6 neighbor discovery frames, as a lab tester port sends them before its traffic:
a gratuitous ARP / unsolicited neighbor advertisement announcing its address, and a request /
solicitation for its gateway (the DUT's address in its subnet), so a routed DUT learns the host
and resolves nothing by hand. Bytes as a NIC sends them (padded to 60 B, no FCS; RFC 826,
RFC 5227 ARP announcement, RFC 4861 NS/NA with link-layer address options)."""
from __future__ import annotations

import struct

import numpy as np

from . import roce

BROADCAST = b"\xff" * 6
ETHERTYPE_ARP = 0x0806
MIN_FRAME = 60                     # without FCS


def _l2(dst: bytes, src: bytes, ethertype: int, vlan_id: int | None) -> bytes:
    if vlan_id is None:
        return dst + src + struct.pack(">H", ethertype)
    return dst + src + struct.pack(">HHH", roce.ETHERTYPE_DOT1Q, vlan_id & 0xFFF, ethertype)


def _pad(frame: bytes) -> bytes:
    return frame + bytes(max(0, MIN_FRAME - len(frame)))


def arp_request(mac: bytes, ip: int, target_ip: int, vlan_id: int | None) -> bytes:
    """Who has target_ip? tell ip (target_ip == ip: a gratuitous ARP announcement)."""
    body = struct.pack(">HHBBH6sI6sI", 1, 0x0800, 6, 4, 1, mac, ip, bytes(6), target_ip)
    return _pad(_l2(BROADCAST, mac, ETHERTYPE_ARP, vlan_id) + body)


def _icmpv6(src: bytes, dst: bytes, body: bytes) -> bytes:
    """IPv6 header (hop limit 255, as ND requires) + ICMPv6 with its checksum."""
    pseudo = src + dst + struct.pack(">I3xB", len(body), 58)
    data = pseudo + body + bytes(len(body) & 1)
    s = int(np.frombuffer(data, ">u2").astype(np.int64).sum())
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    body = body[:2] + struct.pack(">H", ~s & 0xFFFF) + body[4:]
    return struct.pack(">IHBB", 6 << 28, len(body), 58, 255) + src + dst + body


def _v6(ipv4: int) -> bytes:
    return bytes(roce.ipv6_from_ipv4(np.array([ipv4], np.uint32))[0])


def neighbor_advertisement(mac: bytes, ipv4: int, vlan_id: int | None) -> bytes:
    """Unsolicited NA to all nodes (override flag, target link-layer address): fd00::<ipv4> is at mac."""
    me = _v6(ipv4)
    body = struct.pack(">BBHI", 136, 0, 0, 0x20000000) + me + struct.pack(">BB", 2, 1) + mac
    all_nodes = bytes.fromhex("ff020000000000000000000000000001")
    return _pad(_l2(bytes.fromhex("333300000001"), mac, roce.ETHERTYPE_IPV6, vlan_id) + _icmpv6(me, all_nodes, body))


def neighbor_solicitation(mac: bytes, ipv4: int, target_ipv4: int, vlan_id: int | None) -> bytes:
    """NS for fd00::<target_ipv4> to its solicited-node group, with our link-layer address."""
    me, target = _v6(ipv4), _v6(target_ipv4)
    group = bytes.fromhex("ff0200000000000000000001ff") + target[13:]
    body = struct.pack(">BBHI", 135, 0, 0, 0) + target + struct.pack(">BB", 1, 1) + mac
    return _pad(_l2(b"\x33\x33" + group[12:], mac, roce.ETHERTYPE_IPV6, vlan_id) + _icmpv6(me, group, body))
