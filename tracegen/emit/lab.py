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

from ..config import Output, read_yaml_file, show, small_int
from ..errors import ConfigError
from ..topology import Fabric
from .capture_file import Interface

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
        sw_mac = fabric.sw_mac.copy()
        if self.dut_mac is not None:
            sw_mac[:] = np.frombuffer(self.dut_mac, np.uint8)
        return replace(fabric, nic_mac=nic_mac, nic_ip=nic_ip, sw_mac=sw_mac)


_PORT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
PORT_MAX = 64                  # characters in a tester port name (it names a file)
HOSTS_MAX = 65_536


def _where(out: Output) -> str:
    return f"lab plan {show(out.lab, 80)}"


def _mac(text, key: str, where: str) -> int:
    """A unicast MAC address as an integer (source and router MACs are never group addresses)."""
    if not isinstance(text, str):
        hint = "; quote it: \"02:aa:00:00:00:01\"" if isinstance(text, int) and not isinstance(text, bool) else ""
        raise ConfigError(f"{where} {key}: {show(text)} is not a MAC address like 02:aa:00:00:00:01{hint}")
    b = b""
    if re.fullmatch(r"[0-9A-Fa-f]{2}([:-]?[0-9A-Fa-f]{2}){5}", text.strip()):
        b = bytes.fromhex(text.strip().replace(":", "").replace("-", ""))
    if len(b) != 6:
        raise ConfigError(f"{where} {key}: {show(text)} is not a MAC address like 02:aa:00:00:00:01")
    if b[0] & 1:
        what = "the broadcast address" if b == b"\xff" * 6 else "a multicast (group) address"
        raise ConfigError(f"{where} {key}: {text} is {what}; use a unicast MAC (first octet even, "
                          "e.g. 02:aa:00:00:00:01)")
    if b == bytes(6):
        raise ConfigError(f"{where} {key}: 00:00:00:00:00:00 is no station's address")
    return int.from_bytes(b, "big")


def _ipv4(text, where: str, n: int | None) -> int:
    try:
        ip0 = int(ipaddress.IPv4Address(text if isinstance(text, str) else ""))
    except ValueError:
        raise ConfigError(f"{where} ipv4: {show(text)} is not an IPv4 address like 192.168.100.1") from None
    last = ip0 + max((n or 1) - 1, 0)
    for ip in (ip0, min(last, 0xFFFFFFFF)):
        a = ipaddress.IPv4Address(ip)
        bad = ("the broadcast address" if ip == 0xFFFFFFFF else "a multicast address" if a.is_multicast
               else "a reserved address" if a.is_reserved else "a loopback address" if a.is_loopback
               else "in 0.0.0.0/8" if ip >> 24 == 0 else None)
        if bad and ip == ip0:
            raise ConfigError(f"{where} ipv4: {text} is {bad}; hosts need unicast addresses "
                              "(e.g. 192.168.100.1)")
        if last > 0xFFFFFFFF:
            raise ConfigError(f"{where} ipv4: {text} + {n - 1} hosts runs past 255.255.255.255; "
                              "start lower")
        if bad:
            raise ConfigError(f"{where} ipv4: {text} + {n - 1} hosts = {a} is {bad}; hosts need "
                              "unicast addresses (start lower)")
    return ip0


def _host_list(hosts, where: str) -> list | None:
    """The plan's hosts as written: a list, or None for `leafN` (resolved on the fabric)."""
    if isinstance(hosts, str) and hosts.startswith("leaf") and small_int(hosts[4:]) is not None:
        return None
    if not isinstance(hosts, list) or not hosts:
        raise ConfigError(f"{where} hosts: use leafN or a list of NICs (indices or names), "
                          f"got {show(hosts)}")
    if len(hosts) > HOSTS_MAX:
        raise ConfigError(f"{where} hosts: {len(hosts):,} hosts; at most {HOSTS_MAX:,}")
    for h in hosts:
        if isinstance(h, bool) or not isinstance(h, (int, str)):
            raise ConfigError(f"{where} hosts: {show(h)} is no NIC; give an index or a name like "
                              "node0001-rail0")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{where} hosts: a NIC is listed twice")
    return hosts


def _ports(ports, n: int | None, where: str) -> list[str] | None:
    if ports is None:
        return None
    if not isinstance(ports, list) or (n is not None and len(ports) != n):
        want = f"{n} tester port names" if n is not None else "a list of tester port names"
        raise ConfigError(f"{where} ports: give {want}, one per host, in host order")
    names = []
    for x in ports:
        if isinstance(x, bool) or not isinstance(x, (str, int)):
            raise ConfigError(f"{where} ports: {show(x)} is no port name; use names like eth1")
        x = str(x)
        if len(x) > PORT_MAX:
            raise ConfigError(f"{where} ports: a name of {len(x)} characters; at most {PORT_MAX} "
                              "(it names the port's pcap file)")
        if not _PORT.fullmatch(x):
            raise ConfigError(f"{where} ports: {show(x)} cannot name a file; use letters, digits, "
                              ". _ : @ -")
        names.append(x)
    if len(set(names)) != len(names):
        raise ConfigError(f"{where} ports: {len(names)} names but not distinct; one port per host")
    return names


def _read(out: Output) -> tuple[dict, str]:
    where = _where(out)
    doc = read_yaml_file(out.lab, "lab plan")
    if "hosts" not in doc:
        raise ConfigError(f"{where}: needs at least `hosts:` (e.g. hosts: leaf0)")
    unknown = [k for k in doc if k not in _KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key {show(unknown[0])}; accepted: {', '.join(sorted(_KEYS))}")
    if out.snaplen or out.payload == "none":
        raise ConfigError("lab mode replays whole frames: drop --snaplen / --payload none")
    if not isinstance(doc.get("l2", False), bool):
        raise ConfigError(f"{where} l2: true or false, got {show(doc.get('l2'))}")
    return doc, where


def _check(doc: dict, where: str, n: int | None) -> tuple[list[str] | None, int, int, int | None]:
    """Everything checkable with `n` hosts (None: not known before the fabric)."""
    ports = _ports(doc.get("ports"), n, where)
    if ports is not None:
        n = len(ports)
    mac0 = _mac(doc.get("mac", "02:aa:00:00:00:01"), "mac", where)
    if n and (mac0 + n - 1 > 0xFFFFFFFFFFFF or (mac0 >> 40) != ((mac0 + n - 1) >> 40)):
        raise ConfigError(f"{where} mac: {doc.get('mac')} + {n - 1} hosts carries into the first "
                          "octet (or past ff:ff:ff:ff:ff:ff); start lower")
    ip0 = _ipv4(doc.get("ipv4", "192.168.100.1"), where, n)
    dut = doc.get("dut_mac")
    return ports, mac0, ip0, (_mac(dut, "dut_mac", where) if dut is not None else None)


def check_plan(out: Output) -> None:
    """What can be checked before the pipeline runs (no fabric): read, keys, types, addresses."""
    doc, where = _read(out)
    hosts = _host_list(doc["hosts"], where)
    _check(doc, where, len(hosts) if hosts is not None else None)


def load(out: Output, fabric: Fabric) -> LabPlan:
    doc, where = _read(out)
    hosts = _host_list(doc["hosts"], where)
    names = {fabric.nic_name(n): n for n in range(fabric.n_nics)}
    if hosts is None:
        leaf = int(doc["hosts"][4:])
        if leaf >= fabric.n_leaves:
            raise ConfigError(f"{where} hosts: {doc['hosts']!r}; this fabric has leaf0..leaf{fabric.n_leaves - 1}")
        nics = np.flatnonzero(fabric.nic_leaf == leaf).tolist()
    else:
        nics = []
        for h in hosts:
            if isinstance(h, int) and 0 <= h < fabric.n_nics:
                nics.append(h)
            elif isinstance(h, str) and h in names:
                nics.append(names[h])
            else:
                raise ConfigError(f"{where} hosts: {show(h)} is no NIC (0..{fabric.n_nics - 1} or a name "
                                  f"like {fabric.nic_name(0)})")
        if len(set(nics)) != len(nics):
            raise ConfigError(f"{where} hosts: a NIC is listed twice")
    n = len(nics)
    ports, mac0, ip0, dut = _check(doc, where, n)
    if ports is None:
        ports = [fabric.nic_name(k) for k in nics]
    mac = np.array([list((mac0 + k).to_bytes(6, "big")) for k in range(n)], np.uint8).reshape(n, 6)
    return LabPlan(tuple(nics), tuple(ports), mac, np.arange(ip0, ip0 + n, dtype=np.uint32),
                   dut.to_bytes(6, "big") if dut is not None else None, doc.get("l2", False))


def lab_specs(p, fabric: Fabric, plan: LabPlan):
    """One file per tester port: what its host transmits to the other chosen hosts, on link 0."""
    from . import pcap
    chosen = np.zeros(fabric.n_nics, bool)
    chosen[list(plan.nics)] = True
    specs = []
    for nic, port in zip(plan.nics, plan.ports):
        parts = []
        for src in (0, 2):                       # sent data segments, sent control frames
            idx = np.flatnonzero(pcap._kept(p, src))
            tx, rx, _, _ = pcap._item_endpoints(p, src, idx)
            mine = idx[(tx == nic) & chosen[rx]]
            parts.append(pcap._Part(src, mine, np.zeros(len(mine), np.int64), 0, 0))
        mac = bytes(fabric.nic_mac[nic])
        specs.append(pcap._FileSpec(port, [Interface(port, f"tester port {port} as {fabric.nic_name(nic)}",
                                                     mac, fabric.nic_gbps * 10**9)], parts))
    return specs
