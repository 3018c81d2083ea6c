"""Lab mode: replay a subset of the trace from traffic-generator ports into a lab switch (the DUT).

`output.lab` names a YAML lab plan:

    hosts: leaf0                # the NICs behind one leaf; or a list of NIC indices / names
    ports: [eth1, eth2]         # tester port per host, in host order (default: the NIC names)
    mac: "02:aa:00:00:00:01"    # lab MAC of the first host; host k gets mac + k
    ipv4: 192.168.100.1         # lab address of the first host (IPv6 traces: fd00::<lab IPv4>)
    prefix: 24                  # subnet prefix length (IPv6: 96 + prefix)
    l2: false                   # false (routed DUT): every tester port its own subnet - host k at
                                #   ipv4 + k x 2^(32 - prefix) - and frames go to the DUT's MAC;
                                # true (bridged DUT): one subnet, host k at ipv4 + k, frames go
                                #   to the peer host's MAC
    gateway: 192.168.100.254    # routed: the DUT's address in port 0's subnet (port k: + k x subnet
                                #   size), or a list, one per port; default: the subnet's last usable
                                #   address (the first if that is the host's)
    dut_mac: "02:aa:00:00:01:00"  # routed: the DUT's router MAC (one, or a list per port);
                                #   default: the fabric's leaf router MAC
    arp: true                   # each port file starts with a gratuitous ARP and an ARP request for
                                #   its gateway (IPv6: unsolicited NA + NS; l2: the announcement only)
    lead_us: 100                # t0 .. the first RoCE frame: time for the DUT to learn/answer
    merged: false               # also all-ports.pcap: every port's frames in one timeline (for
                                #   tcpreplay -i/-I with a tcpprep cache, see README)

Only traffic between two chosen hosts is kept. Each port's file holds exactly what that host
transmits (data, CTS, ACKs, CNPs), with the lab addresses (ICRC and IPv4 checksum recomputed),
whole frames. Time reference: every port file counts from one common t0, lead_us before the
first RoCE frame of any port (or before the time window's start); its ARP/ND frames sit at t0, so
every port file's first record is at t0 and tools that replay from the first record keep the
ports' relative timing.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace

import numpy as np

from ...config import Job, Output, read_yaml_file, show, small_int
from ...errors import ConfigError
from ...fabric.topology import Fabric
from ..packets import neighbors
from ..packets.addresses import Addressing
from ..packets.capture_file import Interface
from ..packets.copies import CTL_SENT, DATA_SENT, FileSpec, Part, first_time, item_endpoints, kept
from ..packets.plan import Plan, wire_ns

_KEYS = {"hosts", "ports", "mac", "ipv4", "prefix", "gateway", "dut_mac", "l2", "arp", "lead_us", "merged"}
MERGED_NAME = "all-ports"


@dataclass(frozen=True)
class LabPlan:
    nics: tuple[int, ...]       # fabric NICs, in host order
    ports: tuple[str, ...]      # tester port per NIC
    mac: np.ndarray             # (n, 6) lab MACs
    ipv4: np.ndarray            # (n,) lab IPv4 as integers
    prefix: int
    gateway: np.ndarray | None  # (n,) the DUT's address in each port's subnet (routed)
    dut_mac: np.ndarray | None  # (n, 6) where each port's frames go (routed; None: the leaf's MAC)
    l2: bool
    arp: bool = True
    lead_ns: int = 100_000
    merged: bool = False

    def remap(self, fabric: Fabric) -> Fabric:
        """The fabric with lab addresses on the chosen NICs."""
        nic_mac, nic_ip = fabric.nic_mac.copy(), fabric.nic_ip.copy()
        nic_mac[list(self.nics)] = self.mac
        nic_ip[list(self.nics)] = self.ipv4
        return replace(fabric, nic_mac=nic_mac, nic_ip=nic_ip)

    def addressing(self, lab_fabric: Fabric) -> Addressing:
        """Routed: a chosen host's frames go to its port's DUT MAC; bridged: to the peer host."""
        if self.l2:
            return Addressing(lab_fabric, peer_direct=True)
        first_hop = lab_fabric.leaf_mac[lab_fabric.nic_leaf].copy()
        if self.dut_mac is not None:
            first_hop[list(self.nics)] = self.dut_mac
        return Addressing(lab_fabric, first_hop=first_hop)

    def address_text(self, k: int, ip_version: int) -> str:
        fmt = (lambda a: str(ipaddress.IPv6Address((0xFD << 120) | int(a)))) if ip_version == 6 else \
            (lambda a: str(ipaddress.IPv4Address(int(a))))
        plen = self.prefix + (96 if ip_version == 6 else 0)
        via = f" gateway {fmt(self.gateway[k])}" if self.gateway is not None else ""
        return f"{fmt(self.ipv4[k])}/{plen}{via}"


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
    for x in (dut if isinstance(dut, list) else [dut] if dut is not None else []):
        _mac(x, "dut_mac", where)                  # one MAC, or one per port (load() checks the count)
    return ports, mac0, ip0, None


def check_plan(out: Output) -> None:
    """What can be checked before the pipeline runs (no fabric): read, keys, types, addresses."""
    doc, where = _read(out)
    hosts = _host_list(doc["hosts"], where)
    _check(doc, where, len(hosts) if hosts is not None else None)


def _ip(text, key: str, where: str) -> int:
    try:
        return int(ipaddress.IPv4Address(str(text)))
    except ValueError:
        raise ConfigError(f"{where} {key}: {text!r} is not an IPv4 address like 192.168.100.1") from None


def _flag(doc: dict, key: str, default: bool, where: str) -> bool:
    v = doc.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"{where} {key}: true or false, got {show(v)}")
    return v


def _addresses(doc: dict, n: int, l2: bool, where: str):
    """(host addresses, prefix, gateways or None) - checked: usable addresses, a port's gateway
    in its subnet and not the host."""
    prefix = doc.get("prefix", 24)
    if not isinstance(prefix, int) or isinstance(prefix, bool) or not 8 <= prefix <= 31:
        raise ConfigError(f"{where} prefix: {show(prefix)}; use a prefix length 8..31 (e.g. 24, or 30 per link)")
    size = 1 << (32 - prefix)
    ip0 = _ip(doc.get("ipv4", "192.168.100.1"), "ipv4", where)
    hosts = ip0 + np.arange(n, dtype=np.int64) * (1 if l2 else size)
    net = hosts & ~(size - 1)
    if hosts[-1] > 0xFFFFFFFF or (l2 and (net != net[0]).any()):
        raise ConfigError(f"{where} ipv4: {n} hosts from {ipaddress.IPv4Address(ip0)} do not fit "
                          + ("one /%d subnet" % prefix if l2 else "the address space"))
    if prefix <= 30 and (((hosts - net) == 0) | ((hosts - net) == size - 1)).any():
        raise ConfigError(f"{where} ipv4: {ipaddress.IPv4Address(ip0)}/{prefix} puts a host on a network or "
                          "broadcast address; pick a host address inside the subnet")
    if l2:
        if "gateway" in doc or "dut_mac" in doc:
            raise ConfigError(f"{where}: gateway and dut_mac are for a routed DUT (l2: false)")
        return hosts.astype(np.uint32), prefix, None
    gw = doc.get("gateway")
    if gw is None:
        last = net + size - 2                       # the last usable address, or the first if that is the host's
        gws = hosts ^ 1 if prefix == 31 else np.where(last == hosts, net + 1, last)
    elif isinstance(gw, list):
        if len(gw) != n:
            raise ConfigError(f"{where} gateway: give one address, or {n} (one per port)")
        gws = np.array([_ip(x, "gateway", where) for x in gw], np.int64)
    else:
        gws = _ip(gw, "gateway", where) + np.arange(n, dtype=np.int64) * size
    bad = np.flatnonzero(((gws & ~(size - 1)) != net) | (gws == hosts))
    if len(bad):
        k = int(bad[0])
        raise ConfigError(f"{where} gateway: {ipaddress.IPv4Address(int(gws[k]) & 0xFFFFFFFF)} is not another "
                          f"address of port {k}'s subnet {ipaddress.IPv4Address(int(net[k]))}/{prefix}")
    return hosts.astype(np.uint32), prefix, gws.astype(np.uint32)


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
    l2 = _flag(doc, "l2", False, where)
    hosts, prefix, gateways = _addresses(doc, n, l2, where)
    dut = doc.get("dut_mac")
    if isinstance(dut, list):
        if len(dut) != n:
            raise ConfigError(f"{where} dut_mac: give one MAC, or {n} (one per port)")
        dut_mac = np.array([list(_mac(x, "dut_mac", where).to_bytes(6, "big")) for x in dut], np.uint8)
    else:
        dut_mac = None if dut is None else np.tile(
            np.frombuffer(_mac(dut, "dut_mac", where).to_bytes(6, "big"), np.uint8), (n, 1))
    lead = doc.get("lead_us", 100)
    if isinstance(lead, bool) or not isinstance(lead, (int, float)) or not 0 <= lead <= 10**7:
        raise ConfigError(f"{where} lead_us: {show(lead)}; microseconds from t0 to the first RoCE frame (e.g. 100)")
    return LabPlan(tuple(nics), tuple(str(p) for p in ports), mac, hosts, prefix, gateways, dut_mac, l2,
                   arp=_flag(doc, "arp", True, where), lead_ns=int(round(lead * 1000)), merged=_flag(doc, "merged", False, where))


def lab_specs(p: Plan, fabric: Fabric, plan: LabPlan) -> list[FileSpec]:
    """One file per tester port: what its host transmits to the other chosen hosts, on link 0,
    after its ARP/ND frames, timed from the lab's t0 (see the module docstring); with
    plan.merged also all ports in one file. fabric: the lab's (plan.remap)."""
    chosen = np.zeros(fabric.n_nics, bool)
    chosen[list(plan.nics)] = True
    v, vlan = p.out.ip_version, (p.out.vlan_id if p.out.vlan else None)
    specs = []
    for k, (nic, port) in enumerate(zip(plan.nics, plan.ports)):
        parts = []
        for src in (DATA_SENT, CTL_SENT):
            idx = np.flatnonzero(kept(p, src))
            tx, rx, _ = item_endpoints(p, src, idx)
            mine = idx[(tx == nic) & chosen[rx]]
            parts.append(Part(src, mine, np.zeros(len(mine), np.int64), 0, 0))
        mac = bytes(fabric.nic_mac[nic])
        iface = Interface(port, f"tester port {port} as {fabric.nic_name(nic)} {plan.address_text(k, v)}",
                          mac, fabric.nic_gbps * 10**9)
        frames = _neighbor_frames(plan, k, v, vlan) if plan.arp else []
        t, lead = 0, []
        for fr in frames:            # back to back from t0 at the port's rate
            lead.append((t, fr, 0))
            t += int(wire_ns(len(fr), fabric.nic_gbps))
        # a NIC on several planes: its ports' frames leave one tester port, a FIFO at the NIC's rate
        specs.append(FileSpec(port, [iface], parts, lead=lead, port_gbps=fabric.nic_gbps if fabric.planes > 1 else 0))
    if not any(len(part.idx) for s in specs for part in s.parts):
        for s in specs:              # hosts that exchange nothing: no replay to announce
            s.lead = []
    starts = [first_time(p, s.parts) for s in specs]
    starts = [x for x in starts if x is not None]
    first = min(starts) if starts else 0
    if p.sel.window_ns is not None:
        first = max(first, p.sel.window_ns[0])
    t0 = first - plan.lead_ns
    for s in specs:
        s.t0_ns = t0
    if plan.merged:
        parts = [replace(part, iface=k, queue=k) for k, s in enumerate(specs) for part in s.parts]
        lead = sorted(((t, fr, k) for k, s in enumerate(specs) for t, fr, _ in s.lead), key=lambda x: (x[0], x[2]))
        specs.append(FileSpec(MERGED_NAME, [s.interfaces[0] for s in specs], parts, lead=lead, t0_ns=t0,
                              port_gbps=specs[0].port_gbps))
    return specs


def _neighbor_frames(plan: LabPlan, k: int, ip_version: int, vlan_id: int | None) -> list[bytes]:
    mac, ip = bytes(plan.mac[k]), int(plan.ipv4[k])
    if ip_version == 6:
        frames = [neighbors.neighbor_advertisement(mac, ip, vlan_id)]
        if plan.gateway is not None:
            frames.append(neighbors.neighbor_solicitation(mac, ip, int(plan.gateway[k]), vlan_id))
        return frames
    frames = [neighbors.arp_request(mac, ip, ip, vlan_id)]           # gratuitous: announce
    if plan.gateway is not None:
        frames.append(neighbors.arp_request(mac, ip, int(plan.gateway[k]), vlan_id))
    return frames


def parse_rate(text: str) -> int:
    """'100G', '100', '25g', '400Gb/s' -> Gb/s (the --lab-rate argument)."""
    m = re.fullmatch(r"\s*(\d+)\s*(g|gb|gbps|gb/s|gbit/s)?\s*", str(text).lower())
    if not m or int(m.group(1)) <= 0:
        raise ConfigError(f"--lab-rate {text!r}: give the tester ports' rate in Gb/s, e.g. 100G")
    return int(m.group(1))


def retime(job: Job) -> Job:
    """output.lab_gbps > 0: the job on tester ports of that rate - NICs (and leaf-spine links,
    scaled alike) run at it, so the whole trace is scheduled again at the slower rate."""
    rate = job.output.lab_gbps
    if not rate:
        return job
    c, f = job.cluster, job.fabric
    scale = lambda g: g and max(1, g * rate // c.nic_gbps)          # noqa: E731 (0 stays "derived")
    return replace(job, cluster=replace(c, nic_gbps=rate),
                   fabric=replace(f, leaf_spine_gbps=scale(f.leaf_spine_gbps),
                                  spine_core_gbps=scale(f.spine_core_gbps)))
