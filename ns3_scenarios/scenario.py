"""The mainline-ns-3 RoCE scenario: a tracegen scenario dir -> a packet-level simulation.

Reads like an ns-3 example: create nodes -> install the Internet stack -> point-to-point links
with switch queues -> routes -> switch buffers (PFC) -> one RoCE NIC application per host ->
run. Helpers below do the repeated wiring. Model, and why:

- Links: topology.txt's rates and delays; device Mtu 9000 (a 4 KiB RoCE payload must not be
  fragmented). ns-3's point-to-point frame is PPP(2) + IP + UDP + RoCE; the Ethernet bytes a real
  wire also carries (MAC 14, 802.1Q 4, FCS 4, preamble 8, inter-frame gap 12 = 42, minus the 2
  PPP bytes) become the device's InterframeGap, so a packet occupies a link exactly as long as
  tracegen.timing.schedule counts it. Time resolution is 1 ps so that those gaps are exact.
- Switches (roce_switch.h): per egress port a strict-priority CNP lane and a RoCE data lane with
  DCQCN's ECN marking (config.txt's KMIN_MAP/KMAX_MAP/PMAX_MAP per port rate); a shared buffer
  (network.buffer_bytes) with PFC on the data priority (manifest `sim.pfc`: Xoff static or
  dynamic, headroom, pause quanta). With PFC off the buffer still bounds the queues and a packet
  that does not fit is dropped: the NICs do not retransmit, so such a run reports the flows it
  lost. Device transmit queues hold one packet, so the queue the switch sees is the real backlog.
- Routing (ecmp_routing.h), data-driven: a QP whose manifest record carries `path` is pinned to
  it hop by hop, its receiver's ACKs to `rpath` where given; other QPs take shortest paths (hop
  count) from topology.txt and, where several next hops tie, ECMP by a hash of (src IP, dst IP,
  UDP sport, dport) with the QP's own UDP port, so a QP keeps its path and two QPs may share a
  spine link, as in a real fabric.
- Link events (manifest `link_events`, a scenario's events during the run): at their time a link
  changes rate or goes down/up, and the QPs the scenario's routes move then are pinned anew
  (_schedule_link_events).
- NICs and replay: see roce_nic.h (QPs, send arbitration, DCQCN) and inputs.py (replay plan).
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from tracegen.errors import ConfigError
from .inputs import ReplayPlan, Scenario, replay_plan

MTU = 9000
ETH_EXTRA_BYTES = 14 + 4 + 4 + 8 + 12 - 2   # MAC + VLAN + FCS + preamble + IFG, minus PPP
HOST_QUEUE_LIMIT = "1000000000B"            # the NIC paces at line rate: never reached
ROCE_PORT = 4791
PFC_FRAME_WIRE_BYTES = 64 + 8 + 12          # a PAUSE frame + preamble + IFG
ARBITRATION = {"fifo": 0, "rr": 1}
WATCH_PS = 1_000_000                        # stop.h looks for a signal every simulated µs
SHARING_ARBITRATION = {"serial": "fifo", "fair": "rr"}
# cling's JIT prints these for static initialisers it cannot run; harmless (issue 15)
_NOISE = ("Failed to materialize symbols", "runStaticInitializersOnce")

_ns = None


@contextmanager
def quiet_cling():
    """Hold back fd 2 while ns-3/cling run and pass on every line but cling's JIT noise. Yields
    a function that writes a line to the real stderr at once (progress)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):   # no real stderr (a test runner's capture)
        yield lambda line: print(line, file=sys.stderr, flush=True)
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield lambda line: os.write(saved, (line + "\n").encode())
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not any(n in line for n in _NOISE):
                    sys.stderr.write(line)
            sys.stderr.flush()


def load_ns3():
    """Import ns-3 (~15 s) and JIT the C++ NIC, switch and routing classes once per process.
    Raises ImportError when the pip `ns3` package is missing; anything else (a C++ error in our
    headers) propagates as is."""
    global _ns
    if _ns is None:
        with quiet_cling():
            from ns import ns
            import cppyy
            ns.Time.SetResolution(ns.Time.PS)
            here = resources.files("ns3_scenarios")
            for name in ("roce_switch.h", "capture.h", "ecmp_routing.h", "dcqcn.h", "roce_nic.h",
                         "stop.h"):
                if not cppyy.cppdef((here / name).read_text(encoding="utf-8")):
                    raise RuntimeError(f"ns3_scenarios/{name} does not compile (see above)")
        _ns = ns
    return _ns


@dataclass
class SimResult:
    start_ps: np.ndarray        # posted to its QP (HPCC's flow start)
    tx_start_ps: np.ndarray     # first packet on the wire
    end_ps: np.ndarray
    standalone_ps: np.ndarray
    rx_bytes: np.ndarray
    rx_pkts: np.ndarray
    ce_pkts: np.ndarray
    cnps: np.ndarray
    cnps_heeded: np.ndarray
    psn_errors: np.ndarray
    completed: int
    op_release_ps: np.ndarray   # -1: never released
    op_end_ps: np.ndarray       # -1: never completed
    ops_completed: int
    sim_end_ps: int
    setup_s: float
    run_s: float
    plan: ReplayPlan
    arbitration: str = "fifo"
    dcqcn: bool = False
    pfc: bool = True
    cnps_ignored: int = 0
    rate_cuts: int = 0
    min_rate_bps: float = 0.0
    ports: list[dict] = field(default_factory=list)   # one per device: see run.PORT_COLUMNS
    switch_max_buffer_bytes: list[int] = field(default_factory=list)
    pcap_bytes: int = 0
    pcap_records_dropped: int = 0
    qp_hops: list = field(default_factory=list)       # per QP: node ids of its path


def simulate(sc: Scenario, *, gap: str = "zero", dcqcn: bool = False, nic: str = "auto",
             pfc: bool | None = None, pcap_dir: Path | None = None, pcap_budget: int = 0,
             plan: ReplayPlan | None = None, per_message: bool | None = None,
             progress: bool = False) -> SimResult:
    """nic: fifo | rr | auto (as the manifest says the schedule shares a NIC); pfc: None = as the
    manifest says (network.pfc); pcap_budget: bytes the captures may hold (0: no limit);
    per_message: DCQCN state per message instead of per QP (None: as the manifest says);
    progress: say on stderr when the event loop starts."""
    with quiet_cling() as say:
        return _simulate(sc, gap=gap, dcqcn=dcqcn, nic=nic, pfc=pfc, pcap_dir=pcap_dir,
                         pcap_budget=pcap_budget, plan=plan, per_message=per_message,
                         say=say if progress else (lambda line: None))


def dcqcn_extras(sc: Scenario, per_message: bool | None = None) -> tuple[int, bool]:
    """What config.txt cannot carry (HPCC's third.cc reads no other key): the byte counter
    (0: none, HPCC's timer-only RP) and whether every message starts at line rate; manifest
    `sim.dcqcn`, absent from manifests before it: HPCC's model, state per QP."""
    d = (sc.sim or {}).get("dcqcn") or {}
    reset = bool(d.get("per_message_reset", False)) if per_message is None else bool(per_message)
    return int(d.get("byte_reset_bytes", 0)), reset


def arbitration_of(sc: Scenario, nic: str = "auto") -> str:
    if nic == "auto":
        sharing = (sc.sim or {}).get("nic_sharing", "serial")
        if sharing not in SHARING_ARBITRATION:
            raise ConfigError(f"{sc.dir}/manifest.json: sim.nic_sharing {sharing!r} is not one "
                              f"of {', '.join(SHARING_ARBITRATION)}")
        return SHARING_ARBITRATION[sharing]
    if nic not in ARBITRATION:
        raise ConfigError(f"--nic {nic!r}: use auto, fifo or rr")
    return nic


def _simulate(sc: Scenario, *, gap, dcqcn, nic, pfc, pcap_dir, pcap_budget, plan,
              per_message, say) -> SimResult:
    ns = load_ns3()
    cpp = _cpp()
    t_setup = time.perf_counter()
    topo, cfg = sc.topology, sc.config
    arb = arbitration_of(sc, nic)
    pfc_cfg = dict((sc.sim or {}).get("pfc") or {})
    pfc_on = bool(pfc_cfg.get("enabled", True)) if pfc is None else bool(pfc)
    ns.Simulator.Destroy()   # a fresh simulator if this process ran one before
    ns.Config.SetDefault("ns3::UdpSocket::RcvBufSize", ns.UintegerValue(1 << 30))

    _check_topology(topo)

    # 1. nodes: hosts 0..n_hosts-1, then switches, as numbered in topology.txt
    nodes = ns.NodeContainer()
    nodes.Create(topo.n_nodes)

    # 2. Internet stack (our routing replaces the default one below)
    ns.InternetStackHelper().Install(nodes)

    # 3. links, egress queues (before addresses: Assign would install its own), addresses
    is_host = np.arange(topo.n_nodes) < topo.n_hosts
    fab = _Fabric(topo.n_nodes, topo.n_hosts)
    host_dev, queue, devs_of = {}, {}, {}
    for k in range(len(topo.a)):
        a, b = int(topo.a[k]), int(topo.b[k])
        if is_host[b] and not is_host[a]:
            a, b = b, a                         # host end first: it gets the .1 address
        bps, delay = int(topo.bps[k]), int(topo.delay_ps[k])
        devs = _p2p_link(ns, nodes.Get(a), nodes.Get(b), bps, delay)
        ia, ib = fab.add(a, b, bps, delay)
        for end, node, iface in ((0, a, ia), (1, b, ib)):
            dev = devs.Get(end)
            devs_of[(node, iface)] = dev
            if is_host[node]:
                _host_queue(ns, dev)
                host_dev[node] = dev
            else:
                queue[(node, iface)] = cpp.tracegen.InstallRoceQueue(dev)
        _assign(ns, devs, k, host_link=bool(is_host[a]), host=a)

    # 4. routes: ECMP over shortest paths, QPs with a manifest path pinned to it
    routing = []
    for node in range(topo.n_nodes):
        routing.append(_install_routes(ns, nodes.Get(node), fab.next_hops(node),
                                       switch=not is_host[node]))
    qp_hops = _pin_paths(sc, fab, routing)
    _schedule_link_events(sc, fab, routing, devs_of)

    # 5. switch buffers: ECN per port rate, PFC per ingress port
    mmus = {}
    quanta = int(pfc_cfg.get("pause_quanta", 65535))
    for sw in range(topo.n_hosts, topo.n_nodes):
        mmu = ns.CreateObject[cpp.tracegen.SwitchMmu]()
        mmu.Configure(pfc_on, int(pfc_cfg.get("buffer_bytes", 32 << 20)),
                      int(pfc_cfg.get("xoff_bytes", 0)),
                      int(pfc_cfg.get("resume_offset_bytes", 3072)))
        mmu.SetPorts(len(fab.adj[sw]))
        nodes.Get(sw).AggregateObject(mmu)
        mmus[sw] = mmu
        for v, iface, bps, _ in fab.adj[sw]:
            queue[(sw, iface)].Configure(mmu, float(cfg.kmin_bytes[bps]),
                                         float(cfg.kmax_bytes[bps]), float(cfg.pmax[bps]),
                                         sw * 1000 + iface)

    # 6. one RoCE NIC per host, and the replay that starts flows as dependencies complete
    plan = plan or replay_plan(sc, gap)
    R = cpp.tracegen.Replay()
    _fill_replay(R, sc, plan, cfg, dcqcn, arb, per_message)
    nics = []
    budget = cpp.tracegen.CaptureBudget()
    budget.limitBytes = int(pcap_budget)
    captures = []
    if pcap_dir is not None:
        pcap_dir.mkdir(parents=True, exist_ok=True)
    for h in range(topo.n_hosts):
        nicobj = ns.CreateObject[cpp.tracegen.RoceNic]()
        bps = fab.host_bps(h)
        nicobj.Setup(R, bps, _ifg_ps(bps))
        if pcap_dir is not None:
            cap = cpp.tracegen.HostCapture(str(pcap_dir / f"host{h:04d}.pcap"), h,
                                           fab.adj[h][0][0], budget)
            if not cap.Ok():
                raise ConfigError(f"cannot write {pcap_dir}/host{h:04d}.pcap")
            cap.SetIp(_sim_ip(h))
            cpp.tracegen.AttachCapture(host_dev[h], cap)
            nicobj.SetCapture(cap)
            captures.append(cap)
        nodes.Get(h).AddApplication(nicobj)
        nicobj.SetStartTime(ns.Seconds(0))
        R.nics.push_back(nicobj)                # the replay holds the NICs alive
        nics.append(nicobj)

    # 7. PFC: a switch's PAUSE on an ingress port stops the device at the other end
    headroom_cfg = int(pfc_cfg.get("headroom_bytes", 0))
    for sw, mmu in mmus.items():
        for v, iface, bps, delay in fab.adj[sw]:
            frame_ps = _wire_ps(PFC_FRAME_WIRE_BYTES, bps)
            quanta_ps = round(quanta * 512 * 10**12 / bps)
            headroom = headroom_cfg or 3 * bps * delay // (8 * 10**12)
            timing = (delay + frame_ps, quanta_ps, headroom)
            if is_host[v]:
                cpp.tracegen.SetUpstreamNic(mmu, iface, nics[v], *timing)
            else:
                cpp.tracegen.SetUpstreamQueue(mmu, iface, queue[(v, fab.iface_to(v, sw))],
                                              *timing)

    standalone = _standalone_ps(R, sc, fab, qp_hops)
    R.Begin()   # schedules fixed-time flows and root ops; node start-up events come first
    setup_s = time.perf_counter() - t_setup

    # 8. run until no event is left: every flow done (or stuck: reported by the caller)
    t_run = time.perf_counter()
    say(f"event loop (after {setup_s:.1f} s of setup)")
    try:
        # Python's own handler may have noted a signal while cppyy JIT-compiled Arm's first call
        # (no bytecode runs then): the call after Arm raises it, before Run, and Disarm still runs
        cpp.tracegen.StopOnSignal.Arm(sc.t0_ns * 1000, WATCH_PS)
        ns.Simulator.Run()
    finally:
        caught = cpp.tracegen.StopOnSignal.Disarm()
    if caught:          # the run stopped half-way: hand the signal to Python's handler
        for cap in captures:
            cap.Close()
        signal.raise_signal(caught)
        raise KeyboardInterrupt   # a handler that returned: stop all the same
    run_s = time.perf_counter() - t_run
    sim_end = ns.Simulator.Now().GetPicoSeconds()
    for cap in captures:
        cap.Close()
    ports = _port_stats(topo, fab, queue, mmus, nics)
    res = SimResult(
        start_ps=_np(R.startPs), tx_start_ps=_np(R.txStartPs), end_ps=_np(R.endPs),
        standalone_ps=standalone, rx_bytes=_np(R.rxBytes), rx_pkts=_np(R.rxPkts),
        ce_pkts=_np(R.cePkts), cnps=_np(R.cnps), cnps_heeded=_np(R.cnpsHeeded),
        psn_errors=_np(R.psnErrors), completed=int(R.completed),
        op_release_ps=_np(R.opReleasePs), op_end_ps=_np(R.opEndPs),
        ops_completed=int(R.opsCompleted), sim_end_ps=int(sim_end), setup_s=setup_s,
        run_s=run_s, plan=plan, arbitration=arb, dcqcn=bool(dcqcn), pfc=pfc_on,
        cnps_ignored=int(R.cnpsIgnored), rate_cuts=int(R.rateCuts),
        min_rate_bps=float(R.minRateSeenBps), ports=ports,
        switch_max_buffer_bytes=[int(m.maxUsed) for m in mmus.values()],
        pcap_bytes=int(budget.written), pcap_records_dropped=int(budget.recordsDropped),
        qp_hops=qp_hops)
    ns.Simulator.Destroy()
    return res


# ---------------------------------------------------------------- wiring helpers

def _check_topology(topo) -> None:
    """What the address plan and the single-NIC hosts below need."""
    if np.any((topo.a < topo.n_hosts) & (topo.b < topo.n_hosts)):
        raise ConfigError("topology.txt: a link joins two hosts; hosts must hang off switches")
    ends = np.concatenate([topo.a, topo.b])
    links_per_host = np.bincount(ends, minlength=topo.n_nodes)[:topo.n_hosts]
    if np.any(links_per_host != 1):
        h = int(np.flatnonzero(links_per_host != 1)[0])
        raise ConfigError(f"topology.txt: host {h} has {int(links_per_host[h])} links; "
                          "this scenario models one NIC link per host")
    if len(topo.a) > 65536 or topo.n_hosts > 65536:
        raise ConfigError("topology.txt: more than 65536 links or hosts do not fit the "
                          "11.x.y.0/24 and 12.x.y.0/24 address plan")


def _cpp():
    import cppyy
    return cppyy.gbl


def _ifg_ps(bps: int) -> int:
    return round(ETH_EXTRA_BYTES * 8 * 10**12 / bps)


def _wire_ps(nbytes: int, bps: int) -> int:
    return round(nbytes * 8 * 10**12 / bps)


def _p2p_link(ns, a, b, bps: int, delay_ps: int):
    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(bps)))
    p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(MTU))
    p2p.SetDeviceAttribute("InterframeGap", ns.TimeValue(ns.PicoSeconds(_ifg_ps(bps))))
    p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.PicoSeconds(delay_ps)))
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1p")))
    return p2p.Install(a, b)


def _host_queue(ns, dev) -> None:
    """The NIC paces data at line rate: this FIFO only ever holds an ACK or CNP briefly."""
    tch = ns.TrafficControlHelper()
    tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                         ns.QueueSizeValue(ns.QueueSize(HOST_QUEUE_LIMIT)))
    tch.Install(dev)


def _assign(ns, devs, k: int, *, host_link: bool, host: int) -> None:
    """Host links 11.(h/256).(h%256).0/24 with the host at .1 (the simulators' plan);
    switch links 12.x.y.0/24."""
    addr = ns.Ipv4AddressHelper()
    base = f"11.{host // 256}.{host % 256}.0" if host_link else f"12.{k // 256 % 256}.{k % 256}.0"
    addr.SetBase(ns.Ipv4Address(base), ns.Ipv4Mask("255.255.255.0"))
    addr.Assign(devs)


def _install_routes(ns, node, hops: dict[int, list[int]], *, switch: bool):
    cpp = _cpp()
    r = ns.CreateObject[cpp.tracegen.EcmpRouting]()
    r.SetSwitch(switch)
    for host, ifaces in hops.items():
        for i in ifaces:
            r.AddNextHop(host, i)
    node.GetObject[ns.Ipv4]().SetRoutingProtocol(r)
    return r


def _pin_paths(sc: Scenario, fab: "_Fabric", routing) -> list[list[int]]:
    """Every QP's node path: the manifest's where it gives one (installed as explicit routes at
    each switch on it), else what the ECMP hash picks; the ACKs of a QP with `rpath` pinned to
    it too. The routing seam: a scenario whose QPs carry `path` is routed exactly so."""
    hops = []
    for q in range(len(sc.qp_src)):
        src, dst, sport = int(sc.qp_src[q]), int(sc.qp_dst[q]), int(sc.qp_sport[q])
        rpath = sc.qp_rpath[q] if sc.qp_rpath else None
        if rpath is not None:       # the receiver's ACKs: same UDP source port, addresses swapped
            for u, v in zip(rpath[1:-1], rpath[2:]):
                routing[u].AddFlowRoute(_sim_ip(dst), _sim_ip(src), sport, fab.iface_to(u, v))
        path = sc.qp_path[q] if sc.qp_path else None
        if path is None:
            hops.append(fab.hash_path(src, dst, sport))
            continue
        for u, v in zip(path[1:-1], path[2:]):
            routing[u].AddFlowRoute(_sim_ip(src), _sim_ip(dst), sport, fab.iface_to(u, v))
        hops.append(list(path))
    return hops


def _schedule_link_events(sc: Scenario, fab: "_Fabric", routing, devs_of: dict) -> None:
    """A scenario's timed link events (manifest link_events), each at t0 + at_ns: a link down
    leaves its ends' ECMP choice and its QPs are pinned to their new paths (repin: the scenario's
    routes after the event); up, the same back; a rate change (degrade, restore) sets both
    devices' DataRate. Packets already queued on a link that goes down still cross it: the NICs
    model no retransmission, so a lost packet would stall its QP for good (what a drained link -
    traffic moved away, then taken down - does)."""
    if not sc.link_events:
        return
    cpp = _cpp()
    for at_ns, changes, repin in sc.link_events:
        at_ps = (sc.t0_ns + at_ns) * 1000
        for a, b, gbps in changes:
            for u, v in ((a, b), (b, a)):
                iface = fab.iface_to(u, v)
                cpp.tracegen.ScheduleIfaceDown(routing[u], at_ps, iface, gbps == 0)
                if gbps:
                    bps = gbps * 10**9
                    cpp.tracegen.ScheduleLinkRate(devs_of[(u, iface)], at_ps, bps, _ifg_ps(bps))
        for q, path, rpath in repin:
            src, dst, sport = int(sc.qp_src[q]), int(sc.qp_dst[q]), int(sc.qp_sport[q])
            for u, v in zip(path[1:-1], path[2:]):
                cpp.tracegen.ScheduleFlowRoute(routing[u], at_ps, _sim_ip(src), _sim_ip(dst), sport,
                                               fab.iface_to(u, v))
            for u, v in zip(rpath[1:-1], rpath[2:]):
                cpp.tracegen.ScheduleFlowRoute(routing[u], at_ps, _sim_ip(dst), _sim_ip(src), sport,
                                               fab.iface_to(u, v))


def _port_stats(topo, fab: "_Fabric", queue: dict, mmus: dict, nics: list) -> list[dict]:
    """One record per device: what it sent, marked, queued, and the PFC it sent and obeyed.
    pause_sent / resume_sent: frames this node sent out of the port (its ingress there was over
    Xoff); max_ingress_bytes: the most data bytes that arrived on this port were buffered at once
    (what PFC bounds); paused_ns, pauses_rx: how long this port's data priority was stopped by its
    peer."""
    out = []
    for node in range(topo.n_nodes):
        for v, iface, bps, _ in fab.adj[node]:
            rec = {"node": node, "iface": iface, "peer": v, "gbps": bps / 1e9}
            if node < topo.n_hosts:
                n = nics[node]
                rec.update(tx_bytes=int(n.txBytes), tx_pkts=int(n.txPkts), ce_marked=0,
                           max_queue_bytes=0, max_ingress_bytes=0, drops=0, pause_sent=0,
                           resume_sent=0,
                           pauses_rx=int(n.pausesRx), paused_ns=int(n.pausedPs) // 1000)
            else:
                q, m = queue[(node, iface)], mmus[node]
                rec.update(tx_bytes=int(q.txBytes), tx_pkts=int(q.txPkts),
                           ce_marked=int(q.ceMarks), max_queue_bytes=int(q.maxDataBytes),
                           max_ingress_bytes=int(m.maxIngress[iface]), drops=int(q.drops), pause_sent=int(m.pauseSent[iface]),
                           resume_sent=int(m.resumeSent[iface]), pauses_rx=int(q.pausesRx),
                           paused_ns=int(q.PausedPsNow()) // 1000)
            out.append(rec)
    return out


class _Fabric:
    """The link graph as ns-3 numbers interfaces (loopback 0, then one per link in order)."""

    def __init__(self, n_nodes: int, n_hosts: int):
        self.adj: list[list[tuple[int, int, int, int]]] = [[] for _ in range(n_nodes)]
        self.n_hosts = n_hosts
        self._dist: dict[int, np.ndarray] = {}
        self._iface: dict[tuple[int, int], int] = {}

    def add(self, a: int, b: int, bps: int, delay_ps: int) -> tuple[int, int]:
        ia, ib = len(self.adj[a]) + 1, len(self.adj[b]) + 1
        self.adj[a].append((b, ia, bps, delay_ps))
        self.adj[b].append((a, ib, bps, delay_ps))
        self._iface.setdefault((a, b), ia)
        self._iface.setdefault((b, a), ib)
        return ia, ib

    def iface_to(self, u: int, v: int) -> int:
        return self._iface[(u, v)]

    def link(self, u: int, v: int) -> tuple[int, int]:
        """(bps, delay_ps) of the link u -> v."""
        for w, _, bps, dl in self.adj[u]:
            if w == v:
                return bps, dl
        raise KeyError((u, v))

    def host_bps(self, h: int) -> int:
        return self.adj[h][0][2]

    def dist_to(self, host: int) -> np.ndarray:
        """Hop counts to `host` (cached); hosts never forward."""
        if host in self._dist:
            return self._dist[host]
        n_hosts = self.n_hosts
        dist = np.full(len(self.adj), -1, dtype=np.int64)
        dist[host] = 0
        q = deque([host])
        while q:
            u = q.popleft()
            if u < n_hosts and u != host:
                continue
            for v, *_ in self.adj[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    q.append(v)
        self._dist[host] = dist
        return dist

    def next_hops(self, node: int) -> dict[int, list[int]]:
        """host -> equal-cost output interfaces at `node`, in the order ECMP indexes them."""
        out = {}
        for h in range(self.n_hosts):
            d = self.dist_to(h)
            if h == node or d[node] < 0:
                continue
            cand = sorted((v, i) for v, i, *_ in self.adj[node] if d[v] == d[node] - 1)
            out[h] = [i for _, i in cand]
        return out

    def hash_path(self, src: int, dst: int, sport: int) -> list[int]:
        """Node ids a QP's packets cross, with the routers' ECMP choice."""
        d = self.dist_to(dst)
        key = _cpp().tracegen.EcmpRouting.FlowHash(_sim_ip(src), _sim_ip(dst), sport, ROCE_PORT)
        path, u = [src], src
        while u != dst:
            cand = sorted(v for v, *_ in self.adj[u] if d[v] == d[u] - 1)
            u = cand[key % len(cand)]
            path.append(u)
        return path

    def hops(self, path: list[int]) -> list[tuple[int, int, int]]:
        """(bps, delay_ps, ifg_ps) per hop of a node path."""
        out = []
        for u, v in zip(path, path[1:]):
            bps, dl = self.link(u, v)
            out.append((bps, dl, _ifg_ps(bps)))
        return out


def _sim_ip(host: int) -> int:
    """Host i's address in the simulators' plan, 11.(i/256).(i%256).1."""
    return 0x0B000001 + (host // 256) * 0x10000 + (host % 256) * 0x100


def _fill_replay(R, sc: Scenario, plan: ReplayPlan, cfg, dcqcn: bool, arb: str,
                 per_message: bool | None = None) -> None:
    n = len(sc)
    R.Resize(n)
    R.pmtu = cfg.pmtu
    R.arbitration = ARBITRATION[arb]
    R.cnpIntervalPs = int((sc.sim or {}).get("cnp_interval_ns", 4000)) * 1000
    _fill(R.src, sc.src, u32=True)
    _fill(R.dst, sc.dst, u32=True)
    _fill(R.qpOf, sc.qp, u32=True)
    _fill(R.bytes, sc.bytes, u64=True)
    R.ResizeQps(len(sc.qp_src))
    for q, row in enumerate(zip(sc.qp_src.tolist(), sc.qp_dst.tolist(), sc.qp_sqpn.tolist(),
                                sc.qp_dqpn.tolist(), sc.qp_sport.tolist())):
        R.SetQp(q, *row)
    t0_ps = sc.t0_ns * 1000
    R.t0Ps = t0_ps
    fixed = plan.fixed_start_ns >= 0
    _fill(R.fixedStartPs, np.where(fixed, t0_ps + plan.fixed_start_ns * 1000, -1))
    _fill(R.extraGapPs, plan.extra_gap_ns * 1000)
    _fill(R.relOffPs, plan.rel_off_ns * 1000)
    _fill(R.postPs, plan.post_ns * 1000)
    _fill(R.opOf, plan.op, u32=True)
    _fill(R.depsLeft, plan.n_deps + (~fixed).astype(np.int64), u32=True)  # + op release
    _fill(R.depPtr, plan.dep_ptr, u32=True)
    _fill(R.dependents, plan.dependents, u32=True)
    _fill(R.edgeGapPs, plan.edge_gap_ns * 1000)
    R.ResizeOps(len(plan.op_gap_ns))
    _fill(R.opGapPs, plan.op_gap_ns * 1000)
    _fill(R.opTailPs, plan.op_tail_ns * 1000)
    _fill(R.opDepsLeft, plan.op_n_deps, u32=True)
    _fill(R.opLinesLeft, np.diff(plan.op_line_ptr), u32=True)
    _fill(R.opDepPtr, plan.op_dep_ptr, u32=True)
    _fill(R.opDependents, plan.op_dependents, u32=True)
    _fill(R.opLinePtr, plan.op_line_ptr, u32=True)
    _fill(R.opLines, plan.op_lines, u32=True)
    D = R.dcqcn
    D.enabled = bool(dcqcn)
    D.g = cfg.ewma_gain
    D.alphaIntervalPs = max(1, round(cfg.alpha_resume_interval_us * 10**6))
    D.decreaseIntervalPs = max(1, round(cfg.rate_decrease_interval_us * 10**6))
    D.increaseIntervalPs = max(1, round(cfg.rp_timer_us * 10**6))
    D.aiBps, D.haiBps, D.minBps = cfg.rate_ai_bps, cfg.rate_hai_bps, cfg.min_rate_bps
    D.fastRecoverySteps = cfg.fast_recovery_times
    D.clampTarget = cfg.clamp_target_rate
    D.byteReset, D.perMessage = dcqcn_extras(sc, per_message)


def _fill(vec, arr: np.ndarray, u32: bool = False, u64: bool = False) -> None:
    """numpy int64 -> std::vector in one C++ call (cppyy passes the buffer as a pointer)."""
    a = np.ascontiguousarray(arr, dtype=np.int64)
    if len(a) == 0:
        vec.clear()     # cppyy cannot pass an empty buffer as a pointer
        return
    Rp = _cpp().tracegen.Replay
    (Rp.FillU32 if u32 else Rp.FillU64 if u64 else Rp.FillI64)(vec, a, len(a))


def _standalone_ps(R, sc: Scenario, fab: _Fabric, qp_hops: list[list[int]]) -> np.ndarray:
    """Each flow alone on its QP's path (C++ recurrence), computed once per (bytes, path)."""
    cache: dict = {}
    out = np.zeros(len(sc), dtype=np.int64)
    for f in range(len(sc)):
        hops = fab.hops(qp_hops[int(sc.qp[f])])
        key = (int(sc.bytes[f]), tuple(hops))
        if key not in cache:
            bps, dl, ifg = zip(*hops)
            cache[key] = int(R.StandaloneFctPs(f, list(bps), list(dl), list(ifg)))
        out[f] = cache[key]
    return out


def _np(vec) -> np.ndarray:
    return np.array(list(vec), dtype=np.int64)
