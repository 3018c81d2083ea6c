"""Cluster + fabric config -> Fabric: where each rank lives, which NIC it uses, the switches and
links, and (through routing.Router) which links a byte crosses.

Layout: ranks fill nodes in order (rank r on node r // gpus_per_node, GPU r % gpus_per_node);
GPU g of every node uses NIC `gpu_nic_map[g]` of its node (default: one NIC per GPU, GPU i -> NIC i;
with fewer NICs, neighbouring GPUs share one), and NIC i of every node is on "rail i"
(NCCL_CROSS_NIC=2). The switches come from fabric_kinds (rail-optimised two-tier by default);
they are L3 routers, so a host sees frames to and from its leaf's router MAC.

Address plan (documented for labs):
  NIC MAC     02:00:<rail>:<node hi>:<node lo>:01      (locally administered)
  NIC IPv4    10.<rail>.<node // 200>.<node % 200 + 1>
  router MAC  02:<4c leaf | 53 spine | 43 core>:<plane>:00:<index hi>:<index lo>  ("L", "S", "C":
              locally administered, unnamed in Wireshark's vendor lists; 02:01-02:20 are MS-NLB's)
Node ids in the simulators' numbering: NICs 0..n_nics-1, then switches (plane by plane: leaves,
spines, cores). Links: every NIC port first (plane by plane, NIC order), then switch links.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..config import Cluster, Job
from ..errors import ConfigError
from .kinds import CORE, LEAF, SPINE, build_switch_graph

LINK_DTYPE = np.dtype([("a", "i4"), ("b", "i4"), ("gbps", "i8"), ("latency_ns", "i8")])


@dataclass(frozen=True, eq=False)
class Fabric:
    world: int
    nodes: int
    gpus_per_node: int
    nic_gbps: int
    nvlink_gbps: int
    link_latency_ns: int     # NIC-leaf links
    rank_node: np.ndarray    # i4 [world]
    rank_gpu: np.ndarray     # i4 [world]
    rank_nic: np.ndarray     # i4 [world]: the NIC each GPU sends through
    nic_node: np.ndarray     # i4 [n_nics]
    nic_rail: np.ndarray     # i4 [n_nics]
    nic_mac: np.ndarray      # u1 [n_nics, 6]
    nic_ip: np.ndarray       # u4 [n_nics] IPv4 as an integer
    sw_name: list            # per switch
    sw_tier: np.ndarray      # i1 per switch (1 leaf, 2 spine, 3 core)
    sw_plane: np.ndarray     # i2 per switch
    sw_index: np.ndarray     # i4 per switch: number within its tier and plane
    sw_mac: np.ndarray       # u1 [n_switches, 6] router MACs
    nic_port_leaf: np.ndarray  # i4 [n_nics, planes]: switch index of each NIC port's leaf
    links: np.ndarray        # LINK_DTYPE, simulator node ids
    planes: int = 1
    kind: str = "rail-optimised"
    ecmp_seed: int = 0
    ecmp_hash: str = "5-tuple"   # routing.py: the fields each switch hashes
    ip_version: int = 4      # what the ECMP hash reads (the addresses on the wire)
    _cache: dict = field(default_factory=dict, repr=False, init=False)   # router, name index

    # --- sizes and names ----------------------------------------------------------------------
    @property
    def n_nics(self) -> int:
        return len(self.nic_node)

    @property
    def n_switches(self) -> int:
        return len(self.sw_name)

    @property
    def port_gbps(self) -> int:
        """Rate of one NIC port (nic_gbps / planes)."""
        return self.nic_gbps // self.planes

    def nic_name(self, nic: int) -> str:
        return f"node{int(self.nic_node[nic]):04d}-rail{int(self.nic_rail[nic])}"

    def nic_ip_str(self, nic: int) -> str:
        ip = int(self.nic_ip[nic])
        return ".".join(str((ip >> s) & 0xFF) for s in (24, 16, 8, 0))

    def switch_id(self, name: str) -> int:
        """Switch index of a name (leaf3, spine0, core1, p1-leaf0), or -1."""
        return self._cache.setdefault("sw_ids", {n: i for i, n in enumerate(self.sw_name)}).get(name, -1)

    def node_id(self, switch: int) -> int:
        return self.n_nics + int(switch)

    # --- the two-tier view the older emitters use (plane 0) -----------------------------------
    @cached_property
    def _plane0(self) -> dict:
        p0 = self.sw_plane == 0
        return {t: np.flatnonzero(p0 & (self.sw_tier == t)) for t in (LEAF, SPINE, CORE)}

    @property
    def n_leaves(self) -> int:
        return len(self._plane0[LEAF])

    @property
    def n_spines(self) -> int:
        return len(self._plane0[SPINE])

    @property
    def nic_leaf(self) -> np.ndarray:
        """Leaf number (among plane 0's leaves) of every NIC."""
        return self.sw_index[self.nic_port_leaf[:, 0]].astype(np.int32)

    @property
    def leaf_mac(self) -> np.ndarray:
        return self.sw_mac[self._plane0[LEAF]]

    @property
    def leaf_spine_gbps(self) -> int:
        sw = (self.links["a"] >= self.n_nics) & (self.links["b"] >= self.n_nics)
        return int(self.links["gbps"][sw].max()) if sw.any() else self.nic_gbps

    def leaf_node_id(self, leaf: int) -> int:
        return self.n_nics + int(self._plane0[LEAF][leaf])

    def spine_node_id(self, spine: int) -> int:
        """Node id of plane 0's spine number `spine`. A fabric may have none (every NIC on one
        leaf: n_spines == 0; or a file fabric whose leaves link directly): IndexError then,
        saying so - ask n_spines first, or use tier_node_ids / switch_ids_text."""
        ids = self._plane0[SPINE]
        if not 0 <= spine < len(ids):
            raise IndexError(f"spine {spine}: this {self.kind} fabric has "
                             + (f"spines 0..{len(ids) - 1} on plane 0" if len(ids) else
                                "no spines (its leaves need none: one leaf per plane, or leaves linked directly)"))
        return self.n_nics + int(ids[spine])

    def tier_node_ids(self, tier: int, plane: int | None = None) -> np.ndarray:
        """Node ids of the switches of a tier (LEAF 1, SPINE 2, CORE 3), ascending; of one plane
        or of all; empty when the fabric has none."""
        sel = self.sw_tier == tier
        if plane is not None:
            sel &= self.sw_plane == plane
        return (self.n_nics + np.flatnonzero(sel)).astype(np.int64)

    def switch_ids_text(self) -> str:
        """The switches' node ids per tier, for a README: 'leaves 8..9, spines 10..13',
        'leaf 8 (no spines)', 'leaves 64..79, spines 80..95, cores 96..111' (several runs where
        planes interleave: 'leaves 8..9 and 12..13')."""
        parts = []
        for tier, one, many in ((LEAF, "leaf", "leaves"), (SPINE, "spine", "spines"), (CORE, "core", "cores")):
            ids = self.tier_node_ids(tier)
            if not len(ids):
                if tier == SPINE:
                    parts.append("no spines")
                continue
            cut = np.flatnonzero(np.diff(ids) != 1) + 1
            runs = [f"{r[0]}..{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in np.split(ids, cut)]
            parts.append(f"{one if len(ids) == 1 else many} {' and '.join(runs)}")
        return ", ".join(parts)

    # --- paths --------------------------------------------------------------------------------
    @property
    def router(self):
        from .routing import Router
        if "router" not in self._cache:
            self._cache["router"] = Router(self)
        return self._cache["router"]

    def same_node(self, src_rank, dst_rank) -> np.ndarray:
        return self.rank_node[src_rank] == self.rank_node[dst_rank]

    def hops(self, src_nic, dst_nic) -> np.ndarray:
        """Links on a shortest path between two NICs (2 under one leaf, 4 through a spine...)."""
        return self.router.hops(src_nic, dst_nic)

    def path(self, src_nic: int, dst_nic: int, udp_sport: int, plane: int = 0, dest_qpn: int = 0) -> list[int]:
        """Simulator node ids a packet crosses, ECMP by its header fields (routing.py: the
        5-tuple with udp_sport, or the addresses with the BTH DestQP)."""
        r = self.router
        return r.path_nodes(r.routes([src_nic], [dst_nic], [udp_sport], plane, self.ip_version,
                                     dest_qpn=[dest_qpn])[0])

    def qp_paths(self, src_nic, dst_nic, udp_sport, src_qpn, dst_qpn, reverse: bool = False) -> list[list[int]]:
        """Per QP, the route of its data packets as simulator node ids (the ns-3 export pins it),
        one routing pass for all: the QP's plane is its sender QPN mod planes (timing/connections.py),
        its data carry the receiver's QPN as DestQP. reverse: the route of what the receiver
        returns (ACKs, CTS), dst -> src with the same UDP source port and the sender's QPN as
        DestQP (emit/copies.item_dest_qpn)."""
        src, dst = np.asarray(src_nic, np.int64), np.asarray(dst_nic, np.int64)
        sqpn, dqpn = np.asarray(src_qpn, np.int64), np.asarray(dst_qpn, np.int64)
        if reverse:
            src, dst, dqpn = dst, src, sqpn
        r = self.router
        route = r.routes(src, dst, udp_sport, sqpn % self.planes, self.ip_version, dest_qpn=dqpn)
        nodes = np.column_stack([src] + [r.node_after(route, k) for k in range(route.shape[1])])
        return [row[row >= 0].tolist() for row in nodes]

    @property
    def epochs(self) -> tuple:
        """Timed changes of the fabric during the run (scenario events at t > 0): the epochs after
        the first, as fabric/timeline.Epoch; () for a fabric that stays as it is (every job)."""
        return self._cache.get("epochs", ())

    @property
    def n_link_dirs(self) -> int:
        return 2 * len(self.links)

    def link_dir_name(self, d: int) -> str:
        """'leaf0->spine1', 'node0003-rail1->leaf0', ... for a link direction id."""
        ln = self.links[d >> 1]
        a, b = (int(ln["a"]), int(ln["b"])) if not d & 1 else (int(ln["b"]), int(ln["a"]))
        return f"{self.node_name(a)}->{self.node_name(b)}"

    def node_name(self, node: int) -> str:
        return self.nic_name(node) if node < self.n_nics else self.sw_name[node - self.n_nics]

    def link_tier(self) -> np.ndarray:
        """Per link: 0 NIC-leaf, 1 leaf-spine, 2 spine-core (the higher end's tier - 1; a link
        between two switches is 1 at least: a file fabric's leaves may link directly)."""
        ta = np.where(self.links["a"] < self.n_nics, 0, self.sw_tier[np.maximum(self.links["a"] - self.n_nics, 0)])
        tb = np.where(self.links["b"] < self.n_nics, 0, self.sw_tier[np.maximum(self.links["b"] - self.n_nics, 0)])
        tier = np.maximum(ta, tb).astype(np.int64) - 1
        return np.where((ta > 0) & (tb > 0), np.maximum(tier, 1), tier)


def tier_label(tier: int) -> str:
    return ["NIC-leaf", "leaf-spine", "spine-core"][tier]


ROUTER_MAC_BYTE = {LEAF: 0x4C, SPINE: 0x53, CORE: 0x43}


def _router_macs(tier: np.ndarray, plane: np.ndarray, index: np.ndarray) -> np.ndarray:
    mac = np.zeros((len(tier), 6), dtype=np.uint8)
    mac[:, 0] = 0x02
    mac[:, 1] = np.vectorize(ROUTER_MAC_BYTE.get)(tier) if len(tier) else 0
    mac[:, 2] = plane
    mac[:, 4] = index >> 8
    mac[:, 5] = index & 0xFF
    return mac


def build_fabric(job: Job) -> Fabric:
    c: Cluster = job.cluster
    world = job.world
    gpn = c.gpus_per_node
    nodes = job.nodes
    if nodes * gpn != world:
        raise ConfigError(
            f"cluster: nodes={nodes} x gpus_per_node={gpn} = {nodes * gpn} GPUs but dp*tp*pp = {world}; "
            "make them equal")
    ranks = np.arange(world, dtype=np.int32)
    rank_node = ranks // gpn
    rank_gpu = ranks % gpn
    nics = c.nics
    rank_nic = (rank_node * nics + np.asarray(c.nic_of_gpu(), dtype=np.int32)[rank_gpu]).astype(np.int32)
    nic_ids = np.arange(nodes * nics, dtype=np.int32)
    nic_node, nic_rail = nic_ids // nics, nic_ids % nics
    n_nics = len(nic_ids)

    fc = job.fabric
    g = build_switch_graph(fc, nodes, nics, c.nic_gbps)
    nic_mac = np.zeros((n_nics, 6), dtype=np.uint8)
    nic_mac[:, 0] = 0x02
    nic_mac[:, 2] = nic_rail
    nic_mac[:, 3] = nic_node >> 8
    nic_mac[:, 4] = nic_node & 0xFF
    nic_mac[:, 5] = 0x01
    nic_ip = ((10 << 24) | (nic_rail.astype(np.uint32) << 16)
              | ((nic_node // 200).astype(np.uint32) << 8) | (nic_node % 200 + 1).astype(np.uint32))

    planes = g.nic_leaf.shape[1]
    links = np.zeros(planes * n_nics + len(g.links), LINK_DTYPE)     # NIC ports plane by plane, then switches
    links["a"][:planes * n_nics] = np.tile(np.arange(n_nics), planes)
    links["b"][:planes * n_nics] = n_nics + g.nic_leaf.T.ravel()
    links["gbps"][:planes * n_nics], links["latency_ns"][:planes * n_nics] = g.port_gbps, g.port_latency_ns
    for k, col in enumerate(("a", "b", "gbps", "latency_ns")):
        links[col][planes * n_nics:] = g.links[:, k] + (n_nics if k < 2 else 0)
    fabric = Fabric(
        world=world, nodes=nodes, gpus_per_node=gpn, nic_gbps=c.nic_gbps, nvlink_gbps=c.nvlink_gbps,
        link_latency_ns=fc.link_latency_ns,
        rank_node=rank_node, rank_gpu=rank_gpu, rank_nic=rank_nic,
        nic_node=nic_node, nic_rail=nic_rail, nic_mac=nic_mac, nic_ip=nic_ip.astype(np.uint32),
        sw_name=g.names, sw_tier=g.tier, sw_plane=g.plane, sw_index=g.index,
        sw_mac=_router_macs(g.tier, g.plane, g.index), nic_port_leaf=g.nic_leaf,
        links=links,
        planes=planes, kind=fc.kind, ecmp_seed=fc.ecmp_seed, ecmp_hash=fc.ecmp_hash,
        ip_version=job.output.ip_version,
    )
    if fc.kind == "file":       # the built kinds span at most 4 switch links; a file could chain 10,000
        far = fabric.router.max_links - 2
        if far > MAX_FILE_SPAN:
            raise ConfigError(f"fabric.file {fc.file}: links: a switch is {far} links from a NIC's leaf; "
                              f"at most {MAX_FILE_SPAN} (real fabrics: 2-4), so every route fits "
                              f"{MAX_FILE_SPAN + 2} links (TTLs, route tables): shorten the chain")
    return fabric


MAX_FILE_SPAN = 30


def ecmp_spine(udp_sport: int, n_spines: int) -> int:
    """Deprecated stand-in kept for old callers: spine index by sport modulo (use Fabric.path)."""
    return int(udp_sport) % n_spines
