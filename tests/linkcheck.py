"""A small link-capacity check for the fluid schedule (tests only; independent of tracegen.schedule).

Under max-min sharing a flow's rate varies, so a port's load is checked with a rule that holds for
any rates: the wire bytes of the flows lying entirely inside a window [a, b] must fit in
(b - a) x capacity (+1 ns of rounding per window)."""
from __future__ import annotations

import numpy as np

# Eth 14 + 802.1Q 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4 + preamble 8 + IFG 12 (WIRE.md)
PKT_OVERHEAD = 86
MSG_OVERHEAD = 20      # RETH 16 + ImmDt 4


def wire_bytes(payload, max_msg, pmtu):
    """Bytes a NET transfer occupies on the wire, written from WIRE.md's frame layout."""
    payload, max_msg = np.asarray(payload, np.int64), np.asarray(max_msg, np.int64)
    out = np.zeros(len(payload), np.int64)
    for i, (p, m) in enumerate(zip(payload.tolist(), max_msg.tolist())):
        total, left = 0, p
        while left > 0:
            msg = min(left, m)
            pkts = -(-msg // pmtu)
            last = msg - (pkts - 1) * pmtu
            total += msg + pkts * PKT_OVERHEAD + MSG_OVERHEAD + (-last) % 4
            left -= msg
        out[i] = total
    return out


def over_capacity(start, finish, nbytes, bytes_per_ns) -> list:
    """Windows [a, b] of one port where the flows inside carry more than the port can."""
    start, finish, nbytes = (np.asarray(x) for x in (start, finish, nbytes))
    bad = []
    for a in np.unique(start):
        inside = start >= a
        f, b = finish[inside], nbytes[inside]
        order = np.argsort(f, kind="stable")
        cum = np.cumsum(b[order])
        room = (f[order] - a + 1) * bytes_per_ns
        over = np.flatnonzero(cum > room + 1e-6)
        if len(over):
            bad.append((int(a), int(f[order][over[0]]), float(cum[over[0]]), float(room[over[0]])))
    return bad


def nic_ports_ok(flows, fabric, pmtu) -> None:
    """No NIC transmit or receive port carries more than its rate, in any window."""
    r = flows.rows
    net = np.flatnonzero(r["link"] == 1)
    wb = wire_bytes(r["wire_bytes"][net], r["max_msg_bytes"][net], pmtu)
    fin = flows.finish_ns[net]
    cap = fabric.port_gbps / 8
    for col in ("src_nic", "dst_nic"):
        for nic in np.unique(r[col][net]):
            m = r[col][net] == nic
            bad = over_capacity(r["start_ns"][net][m], fin[m], wb[m], cap)
            assert not bad, (col, int(nic), bad[:3])
