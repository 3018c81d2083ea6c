"""Lab mode: replay a subset of the trace from traffic-generator ports onto a lab switch.

`output.lab` names a YAML lab plan:

    hosts: leaf0                # the NICs behind one leaf; or a list of NIC indices / names
    ports: [eth1, eth2]         # tester port per host, in host order (default: the NIC names)
    mac: "02:aa:00:00:00:01"    # lab MAC of the first host; host k gets mac + k
    ipv4: "192.168.100.1"       # lab IPv4 of the first host; host k gets ipv4 + k
                                # (IPv6 traces: fd00::<lab IPv4>, as the fabric's own plan)
    dut_mac: "02:aa:00:00:01:00"  # the DUT's router MAC, destination of every frame (L3 lab)
    l2: false                   # true: frames go to the peer host's lab MAC (the DUT bridges)

Only traffic between two chosen hosts is kept. Each port's pcap holds exactly what that host
transmits (data, CTS, ACKs, CNPs), with the lab addresses (ICRC and IPv4 checksum recomputed),
whole frames, and the trace's nanosecond timestamps, so `tcpreplay -i PORT` preserves timing.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from ..config import Output
from ..errors import ConfigError
from ..topology import Fabric
from .capture_file import Interface
from .copies import CTL_SENT, DATA_SENT, FileSpec, Part, item_endpoints, kept
from .packets import Plan

_KEYS = {"hosts", "ports", "mac", "ipv4", "dut_mac", "l2"}


@dataclass(frozen=True)
class LabPlan:
    nics: tuple[int, ...]       # fabric NICs, in host order
    ports: tuple[str, ...]      # tester port per NIC
    mac: np.ndarray             # (n, 6) lab MACs
    ipv4: np.ndarray            # (n,) lab IPv4 as integers
    dut_mac: bytes | None
    l2: bool

    def remap(self, fabric: Fabric) -> Fabric:
        """The fabric with lab addresses on the chosen NICs and the DUT as every leaf router."""
        nic_mac, nic_ip = fabric.nic_mac.copy(), fabric.nic_ip.copy()
        nic_mac[list(self.nics)] = self.mac
        nic_ip[list(self.nics)] = self.ipv4
        leaf_mac = fabric.leaf_mac.copy()
        if self.dut_mac is not None:
            leaf_mac[:] = np.frombuffer(self.dut_mac, np.uint8)
        return replace(fabric, nic_mac=nic_mac, nic_ip=nic_ip, leaf_mac=leaf_mac)


def _mac(text, key: str) -> bytes:
    try:
        b = bytes.fromhex(str(text).replace(":", "").replace("-", ""))
    except ValueError:
        b = b""
    if len(b) != 6:
        raise ConfigError(f"lab plan {key}: {text!r} is not a MAC address like 02:aa:00:00:00:01")
    return b


def load(out: Output, fabric: Fabric) -> LabPlan:
    path = Path(out.lab)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"output.lab: cannot read lab plan {out.lab!r}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"output.lab: {out.lab} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or "hosts" not in doc:
        raise ConfigError(f"output.lab: {out.lab} needs a mapping with at least `hosts:` (e.g. hosts: leaf0)")
    unknown = set(doc) - _KEYS
    if unknown:
        raise ConfigError(f"lab plan: unknown key {sorted(unknown)[0]!r}; accepted: {', '.join(sorted(_KEYS))}")
    if out.snaplen or out.payload == "none":
        raise ConfigError("lab mode replays whole frames: drop --snaplen / --payload none")
    hosts = doc["hosts"]
    names = {fabric.nic_name(n): n for n in range(fabric.n_nics)}
    if isinstance(hosts, str) and hosts.startswith("leaf") and hosts[4:].isdigit():
        leaf = int(hosts[4:])
        if leaf >= fabric.n_leaves:
            raise ConfigError(f"lab plan hosts: {hosts!r}; this fabric has leaf0..leaf{fabric.n_leaves - 1}")
        nics = np.flatnonzero(fabric.nic_leaf == leaf).tolist()
    elif isinstance(hosts, list) and hosts:
        nics = []
        for h in hosts:
            if isinstance(h, int) and not isinstance(h, bool) and 0 <= h < fabric.n_nics:
                nics.append(h)
            elif isinstance(h, str) and h in names:
                nics.append(names[h])
            else:
                raise ConfigError(f"lab plan hosts: {h!r} is no NIC (0..{fabric.n_nics - 1} or a name "
                                  f"like {fabric.nic_name(0)})")
    else:
        raise ConfigError("lab plan hosts: use leafN or a list of NICs")
    if len(set(nics)) != len(nics):
        raise ConfigError("lab plan hosts: a NIC is listed twice")
    n = len(nics)
    ports = doc.get("ports", [fabric.nic_name(k) for k in nics])
    if not isinstance(ports, list) or len(ports) != n or len(set(map(str, ports))) != n:
        raise ConfigError(f"lab plan ports: give {n} distinct tester port names, one per host")
    bad = [x for x in ports if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:@-]*", str(x))]
    if bad:
        raise ConfigError(f"lab plan ports: {bad[0]!r} cannot name a file; use letters, digits, . _ : @ -")
    mac0 = int.from_bytes(_mac(doc.get("mac", "02:aa:00:00:00:01"), "mac"), "big")
    mac = np.array([list((mac0 + k).to_bytes(6, "big")) for k in range(n)], np.uint8).reshape(n, 6)
    try:
        ip0 = int(ipaddress.IPv4Address(str(doc.get("ipv4", "192.168.100.1"))))
    except ValueError:
        raise ConfigError(f"lab plan ipv4: {doc.get('ipv4')!r} is not an IPv4 address") from None
    dut = doc.get("dut_mac")
    l2 = doc.get("l2", False)
    if not isinstance(l2, bool):
        raise ConfigError("lab plan l2: true or false")
    return LabPlan(tuple(nics), tuple(str(p) for p in ports), mac, np.arange(ip0, ip0 + n, dtype=np.uint32),
                   _mac(dut, "dut_mac") if dut is not None else None, l2)


def lab_specs(p: Plan, fabric: Fabric, plan: LabPlan) -> list[FileSpec]:
    """One file per tester port: what its host transmits to the other chosen hosts, on link 0.
    fabric: the lab's (plan.remap)."""
    chosen = np.zeros(fabric.n_nics, bool)
    chosen[list(plan.nics)] = True
    specs = []
    for nic, port in zip(plan.nics, plan.ports):
        parts = []
        for src in (DATA_SENT, CTL_SENT):
            idx = np.flatnonzero(kept(p, src))
            tx, rx, _, _ = item_endpoints(p, src, idx)
            mine = idx[(tx == nic) & chosen[rx]]
            parts.append(Part(src, mine, np.zeros(len(mine), np.int64), 0, 0))
        mac = bytes(fabric.nic_mac[nic])
        specs.append(FileSpec(port, [Interface(port, f"tester port {port} as {fabric.nic_name(nic)}",
                                                     mac, fabric.nic_gbps * 10**9)], parts))
    return specs
