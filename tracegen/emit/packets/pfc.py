"""PFC frames in the captures (output.ecn_marking=queue with network.pfc): the 802.1Qbb PAUSE and
XON frames that pfc_pass.py's one pass over every switch egress port sends - the one PFC model.

What they are (pfc_pass.py has the rules): a switch egress queue of a pausable priority above
Xoff pauses the port the frame that crossed it came from - a NIC's port, or another switch's
egress port (a leaf the spine ports feeding its congested port, a spine the leaf uplinks) - with
a PAUSE whose quanta cover the drain to Xon; a refresh while the queue is still above Xon as it
runs out; an XON (quanta 0) once the queue is down to Xon (HPCC's ns-3 SwitchNode::
CheckAndSendResume). Each goes out by the port that sends towards the paused one, in its own slot
(64 B + preamble + IFG at the first frame boundary); it acts once its last bit has arrived
(802.1Qbb: the receiver acts on a received frame).

Where they show: a NIC's capture (host views, a leaf's port file to that NIC) holds the PFC
frames its NIC port receives, at the NIC's timestamp (first bit); a switch-to-switch link file
holds those travelling that link in either direction, at the time they start on it; the classic
merged pcap at the time the leaf sends them. Frame: MAC control (ethertype 0x8808, opcode
0x0101) to 01:80:C2:00:00:01 from the sending switch's router MAC, untagged, the class-enable
vector with the paused priority and its time (0: XON). Xoff: network.pfc_xoff_bytes, 0: 1/8 of
network.buffer_bytes; Xon = Xoff - network.pfc_resume_offset_bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import Plan

PAUSE_DST = bytes.fromhex("0180c2000001")   # IEEE 802.1Qbb / 802.3x MAC control address
ETHERTYPE_MAC_CONTROL = 0x8808
OPCODE_PFC = 0x0101
PAUSE_FRAME_BYTES = 60                       # the minimum frame, FCS not captured
QUANTUM_BITS = 512


@dataclass
class PfcFrames:
    """The PFC frames of a pass (pfc_pass.PassResult), in the order they were sent."""
    to_port: np.ndarray      # the port paused: a NIC port (nic x planes + plane: schedule.ports) or -1
    wire_dir: np.ndarray     # the link direction it travels (the sender's towards the paused port)
    slot_ns: np.ndarray      # its start on that link
    at_nic_ns: np.ndarray    # a NIC port's: its first bit at the NIC (slot + link latency); else -1
    prio: np.ndarray
    quanta: np.ndarray       # 0: XON

    @staticmethod
    def from_pass(p: Plan, pp) -> "PfcFrames":
        """pp: a pfc_plan.PlanPass (ports 0 .. nic_ports - 1 NIC ports, nic_ports + d the egress
        port of link direction d)."""
        r, NP = pp.res, pp.nic_ports
        d = np.asarray(r.pause_slot_port, np.int64) - NP
        assert (r.pause_slot_port >= NP).all(), "a PFC frame with no link to go by"
        to_nic = r.pause_to < NP
        at = np.where(to_nic, r.pause_slot_ns + p.link_lat[d >> 1], -1)
        return PfcFrames(np.where(to_nic, r.pause_to, -1), d, r.pause_slot_ns.astype(np.int64), at.astype(np.int64),
                         r.pause_prio.astype(np.int64), r.pause_quanta.astype(np.int64))

    def __len__(self) -> int:
        return len(self.quanta)


def xoff_xon(network) -> tuple[int, int]:
    xoff = network.pfc_xoff_bytes or network.buffer_bytes // 8
    return xoff, max(xoff - network.pfc_resume_offset_bytes, 0)


def _sender_mac(fabric, d: int) -> bytes:
    """The router MAC of the switch that sends on link direction d (2 l: a -> b, 2 l + 1: b -> a)."""
    ln = fabric.links[d >> 1]
    node = int(ln["b"] if d & 1 else ln["a"])
    return bytes(fabric.sw_mac[node - fabric.n_nics])


def frame(src_mac: bytes, prio: int, quanta: int) -> bytes:
    """An 802.1Qbb PFC frame pausing priority prio for quanta (0: XON - the class enabled with time
    0 resumes it; untagged: MAC control frames are not VLAN tagged), padded to the 60-byte minimum."""
    times = [0] * 8
    times[prio] = quanta
    body = (PAUSE_DST + src_mac + ETHERTYPE_MAC_CONTROL.to_bytes(2, "big") + OPCODE_PFC.to_bytes(2, "big")
            + (1 << prio).to_bytes(2, "big") + b"".join(t.to_bytes(2, "big") for t in times))
    return body + bytes(PAUSE_FRAME_BYTES - len(body))


def records_for(p: Plan, fabric, nic: int, plane: int = -1, iface: int = 0, as_sent: bool = False
                ) -> list[tuple[int, bytes, int]]:
    """(time at the NIC, frame, pcapng interface iface) of the PFC frames NIC `nic` receives (on
    NIC port plane `plane`; -1: every plane), in time order; each from the router MAC of the
    switch that sent it (the NIC port's leaf). as_sent: at the time the leaf puts it on the link
    (one link latency earlier: the classic merged capture's sender timestamps)."""
    pz = p.pfc
    if pz is None or not len(pz):
        return []
    P = fabric.planes
    keep = (pz.to_port >= 0) & (pz.to_port // P == nic) & ((plane < 0) | (pz.to_port % P == plane))
    t = pz.slot_ns if as_sent else pz.at_nic_ns
    return _records(p, fabric, np.flatnonzero(keep), t, iface)


def link_records(p: Plan, fabric, link: int, iface: int = 0) -> list[tuple[int, bytes, int]]:
    """(time it starts on the link, frame, iface) of the PFC frames travelling fabric link `link`
    (either direction; switch-to-switch: a switch pausing the other's egress port), in time order."""
    pz = p.pfc
    if pz is None or not len(pz):
        return []
    return _records(p, fabric, np.flatnonzero(pz.wire_dir >> 1 == link), pz.slot_ns, iface)


def _records(p: Plan, fabric, sel: np.ndarray, t: np.ndarray, iface: int) -> list[tuple[int, bytes, int]]:
    pz = p.pfc
    if p.sel.window_ns is not None:
        sel = sel[(t[sel] >= p.sel.window_ns[0]) & (t[sel] < p.sel.window_ns[1])]
    sel = sel[np.argsort(t[sel], kind="stable")]
    return [(int(t[i]), frame(_sender_mac(fabric, int(pz.wire_dir[i])), int(pz.prio[i]), int(pz.quanta[i])), iface)
            for i in sel.tolist()]
