"""The mainline-ns-3 RoCE scenario: a tracegen scenario dir -> a packet-level simulation.

Reads like an ns-3 example: create nodes -> install the Internet stack -> point-to-point links
with switch queues -> routes -> one RoCE NIC application per host -> run. Helpers below do the
repeated wiring. Model, and why:

- Links: topology.txt's rates and delays; device Mtu 9000 (a 4 KiB RoCE payload must not be
  fragmented). ns-3's point-to-point frame is PPP(2) + IP + UDP + RoCE; the Ethernet bytes a real
  wire also carries (MAC 14, 802.1Q 4, FCS 4, preamble 8, inter-frame gap 12 = 42, minus the 2
  PPP bytes) become the device's InterframeGap, so a packet occupies a link exactly as long as
  tracegen.schedule counts it. Time resolution is 1 ps so that those gaps are exact.
- Switch egress queues: RED used as DCQCN's ECN marker (instantaneous queue, QW=1; mark with a
  probability rising to Pmax between Kmin and Kmax bytes, mark all above Kmax; never drop), per
  port rate from config.txt's KMIN_MAP/KMAX_MAP/PMAX_MAP. Queues are effectively unbounded: the
  fabric is lossless as with PFC (no PAUSE frames are modelled), so no retransmission is needed.
  Device transmit queues hold one packet, so the queue RED watches is the real backlog.
- Routing: shortest paths (hop count) from topology.txt; where several next hops tie, ECMP picks
  one per flow by a hash of (src IP, dst IP, UDP sport, dport) (ecmp_routing.h; ns-3's own ECMP
  is per packet). A QP keeps its path; two QPs may share a spine link, as in a real fabric.
- NICs and replay: see roce_nic.h and inputs.py.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from tracegen.errors import ConfigError
from .inputs import ReplayPlan, Scenario, replay_plan

MTU = 9000
ETH_EXTRA_BYTES = 14 + 4 + 4 + 8 + 12 - 2   # MAC + VLAN + FCS + preamble + IFG, minus PPP
QUEUE_LIMIT = "1000000000B"                 # lossless stand-in: never reached
QPN_BASE = 0x100                            # QP 1 would decode as GSI in tshark
ROCE_PORT = 4791

_ns = None


def load_ns3():
    """Import ns-3 (~15 s) and JIT the C++ NIC and routing classes once per process."""
    global _ns
    if _ns is None:
        from ns import ns
        import cppyy
        ns.Time.SetResolution(ns.Time.PS)
        here = resources.files("ns3_scenarios")
        for name in ("ecmp_routing.h", "roce_nic.h"):
            cppyy.cppdef((here / name).read_text(encoding="utf-8"))
        _ns = ns
    return _ns


@dataclass
class SimResult:
    start_ps: np.ndarray
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


def simulate(sc: Scenario, *, gap: str = "zero", dcqcn: bool = False,
             pcap_dir: Path | None = None, plan: ReplayPlan | None = None) -> SimResult:
    ns = load_ns3()
    t_setup = time.perf_counter()
    topo, cfg = sc.topology, sc.config
    ns.Simulator.Destroy()   # a fresh simulator if this process ran one before
    if pcap_dir is not None:
        ns.Config.SetDefault("ns3::PcapFileWrapper::NanosecMode", ns.BooleanValue(True))
    ns.Config.SetDefault("ns3::UdpSocket::RcvBufSize", ns.UintegerValue(1 << 30))

    _check_topology(topo)

    # 1. nodes: hosts 0..n_hosts-1, then switches, as numbered in topology.txt
    nodes = ns.NodeContainer()
    nodes.Create(topo.n_nodes)

    # 2. Internet stack (our routing replaces the default one below)
    ns.InternetStackHelper().Install(nodes)

    # 3. links, switch egress queues (before addresses: Assign would install its own), addresses
    is_host = np.arange(topo.n_nodes) < topo.n_hosts
    fab = _Fabric(topo.n_nodes, topo.n_hosts)
    host_dev = {}
    for k in range(len(topo.a)):
        a, b = int(topo.a[k]), int(topo.b[k])
        if is_host[b] and not is_host[a]:
            a, b = b, a                         # host end first: it gets the .1 address
        devs = _p2p_link(ns, nodes.Get(a), nodes.Get(b), int(topo.bps[k]), int(topo.delay_ps[k]))
        for end, node in ((0, a), (1, b)):
            _install_queue(ns, devs.Get(end), host=is_host[node], bps=int(topo.bps[k]), cfg=cfg,
                           stream=2 * k + end)
        _assign(ns, devs, k, host_link=bool(is_host[a]), host=a)
        fab.add(a, b, int(topo.bps[k]), int(topo.delay_ps[k]))
        if is_host[a]:
            host_dev[a] = devs.Get(0)
        if is_host[b]:
            host_dev[b] = devs.Get(1)

    # 4. routes: ECMP over shortest paths
    for node in range(topo.n_nodes):
        _install_routes(ns, nodes.Get(node), fab.next_hops(node))

    # 5. one RoCE NIC per host, and the replay that starts flows as dependencies complete
    plan = plan or replay_plan(sc, gap)
    R = _cpp().tracegen.Replay()
    _fill_replay(R, sc, plan, cfg, dcqcn)
    for h in range(topo.n_hosts):
        nic = ns.CreateObject[_cpp().tracegen.RoceNic]()
        bps = fab.host_bps(h)
        nic.Setup(R, bps, _ifg_ps(bps))
        nodes.Get(h).AddApplication(nic)
        nic.SetStartTime(ns.Seconds(0))
        R.nics.push_back(nic)                   # the replay holds the NICs alive
    standalone = _standalone_ps(R, sc, fab)
    if pcap_dir is not None:
        pcap_dir.mkdir(parents=True, exist_ok=True)
        p2p = ns.PointToPointHelper()
        for h in range(topo.n_hosts):
            p2p.EnablePcap(str(pcap_dir / f"host{h:04d}.pcap"), host_dev[h], False, True)
    R.Begin()   # schedules fixed-time flows and root ops; node start-up events come first
    setup_s = time.perf_counter() - t_setup

    # 6. run until no event is left: every flow done (or stuck: reported by the caller)
    t_run = time.perf_counter()
    ns.Simulator.Run()
    run_s = time.perf_counter() - t_run
    sim_end = ns.Simulator.Now().GetPicoSeconds()
    res = SimResult(
        start_ps=_np(R.startPs), end_ps=_np(R.endPs), standalone_ps=standalone,
        rx_bytes=_np(R.rxBytes), rx_pkts=_np(R.rxPkts), ce_pkts=_np(R.cePkts), cnps=_np(R.cnps),
        cnps_heeded=_np(R.cnpsHeeded), psn_errors=_np(R.psnErrors), completed=int(R.completed),
        op_release_ps=_np(R.opReleasePs), op_end_ps=_np(R.opEndPs),
        ops_completed=int(R.opsCompleted),
        sim_end_ps=int(sim_end), setup_s=setup_s, run_s=run_s, plan=plan)
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


def _p2p_link(ns, a, b, bps: int, delay_ps: int):
    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(bps)))
    p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(MTU))
    p2p.SetDeviceAttribute("InterframeGap", ns.TimeValue(ns.PicoSeconds(_ifg_ps(bps))))
    p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.PicoSeconds(delay_ps)))
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1p")))
    return p2p.Install(a, b)


def _install_queue(ns, dev, *, host: bool, bps: int, cfg, stream: int) -> None:
    tch = ns.TrafficControlHelper()
    if host:   # the NIC paces at line rate: this queue stays empty
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                             ns.QueueSizeValue(ns.QueueSize(QUEUE_LIMIT)))
    else:
        pkt = cfg.pmtu + 60
        tch.SetRootQueueDisc(
            "ns3::RedQueueDisc",
            "UseEcn", ns.BooleanValue(True), "UseHardDrop", ns.BooleanValue(False),
            "Gentle", ns.BooleanValue(False), "QW", ns.DoubleValue(1.0),
            "MinTh", ns.DoubleValue(cfg.kmin_bytes[bps]),
            "MaxTh", ns.DoubleValue(cfg.kmax_bytes[bps]),
            "LInterm", ns.DoubleValue(1.0 / max(cfg.pmax[bps], 1e-9)),
            "MeanPktSize", ns.UintegerValue(pkt),
            "MaxSize", ns.QueueSizeValue(ns.QueueSize(QUEUE_LIMIT)))
    _cpp().tracegen.AssignQueueStream(tch.Install(dev).Get(0), stream)


def _assign(ns, devs, k: int, *, host_link: bool, host: int) -> None:
    """Host links 11.(h/256).(h%256).0/24 with the host at .1 (the simulators' plan);
    switch links 12.x.y.0/24."""
    addr = ns.Ipv4AddressHelper()
    base = f"11.{host // 256}.{host % 256}.0" if host_link else f"12.{k // 256 % 256}.{k % 256}.0"
    addr.SetBase(ns.Ipv4Address(base), ns.Ipv4Mask("255.255.255.0"))
    addr.Assign(devs)


def _install_routes(ns, node, hops: dict[int, list[int]]) -> None:
    cpp = _cpp()
    r = ns.CreateObject[cpp.tracegen.EcmpRouting]()
    for host, ifaces in hops.items():
        for i in ifaces:
            r.AddNextHop(host, i)
    node.GetObject[ns.Ipv4]().SetRoutingProtocol(r)


class _Fabric:
    """The link graph as ns-3 numbers interfaces (loopback 0, then one per link in order)."""

    def __init__(self, n_nodes: int, n_hosts: int):
        self.adj: list[list[tuple[int, int, int, int]]] = [[] for _ in range(n_nodes)]
        self.n_hosts = n_hosts
        self._dist: dict[int, np.ndarray] = {}

    def add(self, a: int, b: int, bps: int, delay_ps: int) -> None:
        self.adj[a].append((b, len(self.adj[a]) + 1, bps, delay_ps))
        self.adj[b].append((a, len(self.adj[b]) + 1, bps, delay_ps))

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

    def path(self, src: int, dst: int, sport: int) -> list[tuple[int, int, int]]:
        """(bps, delay_ps, ifg_ps) per hop of a flow, with the routers' ECMP choice."""
        d = self.dist_to(dst)
        key = _cpp().tracegen.EcmpRouting.FlowHash(_sim_ip(src), _sim_ip(dst), sport, ROCE_PORT)
        hops, u = [], src
        while u != dst:
            cand = sorted((v, bps, dl) for v, _, bps, dl in self.adj[u] if d[v] == d[u] - 1)
            v, bps, dl = cand[key % len(cand)]
            hops.append((bps, dl, _ifg_ps(bps)))
            u = v
        return hops


def _sim_ip(host: int) -> int:
    """Host i's address in the simulators' plan, 11.(i/256).(i%256).1."""
    return 0x0B000001 + (host // 256) * 0x10000 + (host % 256) * 0x100


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """k for the k-th (0-based) appearance of each key, in array order."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    pos = np.arange(len(keys))
    start = np.maximum.accumulate(np.where(new, pos, 0)) if len(keys) else pos
    occ = np.empty(len(keys), dtype=np.int64)
    occ[order] = pos - start
    return occ


def _fill_replay(R, sc: Scenario, plan: ReplayPlan, cfg, dcqcn: bool) -> None:
    n = len(sc)
    R.Resize(n)
    R.pmtu = cfg.pmtu
    # QPs: every flow is one RC QP pair; each host numbers its QP ends from 0x100 in flow order.
    ends = np.empty(2 * n, dtype=np.int64)
    ends[0::2], ends[1::2] = sc.src, sc.dst
    qpn = QPN_BASE + _occurrence(ends)
    for f, row in enumerate(zip(sc.src.tolist(), sc.dst.tolist(), sc.bytes.tolist(),
                                sc.hpcc_sport.tolist(), qpn[0::2].tolist(), qpn[1::2].tolist())):
        R.SetFlow(f, *row)
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
    D.alphaIntervalPs = int(cfg.alpha_resume_interval_us * 10**6)
    D.decreaseIntervalPs = int(cfg.rate_decrease_interval_us * 10**6)
    D.increaseIntervalPs = int(cfg.rp_timer_us * 10**6)
    D.aiBps, D.haiBps, D.minBps = cfg.rate_ai_bps, cfg.rate_hai_bps, cfg.min_rate_bps
    D.fastRecoverySteps = cfg.fast_recovery_times


def _fill(vec, arr: np.ndarray, u32: bool = False) -> None:
    """numpy int64 -> std::vector in one C++ call (cppyy passes the buffer as a pointer)."""
    a = np.ascontiguousarray(arr, dtype=np.int64)
    if len(a) == 0:
        vec.clear()     # cppyy cannot pass an empty buffer as a pointer
        return
    Rp = _cpp().tracegen.Replay
    (Rp.FillU32 if u32 else Rp.FillI64)(vec, a, len(a))


def _standalone_ps(R, sc: Scenario, fab: _Fabric) -> np.ndarray:
    """Each flow alone on its ECMP path (C++ recurrence), computed once per (bytes, path)."""
    cache: dict = {}
    out = np.zeros(len(sc), dtype=np.int64)
    for f in range(len(sc)):
        hops = fab.path(int(sc.src[f]), int(sc.dst[f]), int(sc.hpcc_sport[f]))
        key = (int(sc.bytes[f]), tuple(hops))
        if key not in cache:
            bps, dl, ifg = zip(*hops)
            cache[key] = int(R.StandaloneFctPs(f, list(bps), list(dl), list(ifg)))
        out[f] = cache[key]
    return out


def _np(vec) -> np.ndarray:
    return np.array(list(vec), dtype=np.int64)
