"""Cluster -> Fabric: where each rank lives, which NIC it uses, and which wires a byte crosses.

Layout: ranks fill nodes in order (rank r on node r // gpus_per_node, GPU r % gpus_per_node);
GPU g of every node uses NIC `gpu_nic_map[g]` of its node (default: one NIC per GPU, GPU i -> NIC i;
with fewer NICs, neighbouring GPUs share one), and NIC i of every node is on "rail i"
(NCCL_CROSS_NIC=2). The fabric is a rail-optimised two-tier leaf-spine: NIC i of a group of
`nodes_per_leaf` nodes hangs off the leaf of rail i of that group; every leaf connects to every
spine. Leaves are L3 routers, so a host sees frames to and from its leaf's router MAC.

Address plan (documented for labs):
  NIC MAC   02:00:<rail>:<node hi>:<node lo>:01      (locally administered)
  NIC IPv4  10.<rail>.<node // 200>.<node % 200 + 1>
  leaf MAC  02:01:00:00:<leaf hi>:<leaf lo>
Node ids in the simulators' numbering: NICs 0..n_nics-1, then leaves, then spines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import Cluster, Job
from .errors import ConfigError

LINK_DTYPE = np.dtype([("a", "i4"), ("b", "i4"), ("gbps", "i8"), ("latency_ns", "i8")])


@dataclass(frozen=True)
class Fabric:
    world: int
    nodes: int
    gpus_per_node: int
    nic_gbps: int
    nvlink_gbps: int
    leaf_spine_gbps: int
    link_latency_ns: int
    rank_node: np.ndarray    # i4 [world]
    rank_gpu: np.ndarray     # i4 [world]
    rank_nic: np.ndarray     # i4 [world]: the NIC each GPU sends through
    nic_node: np.ndarray     # i4 [n_nics]
    nic_rail: np.ndarray     # i4 [n_nics]
    nic_leaf: np.ndarray     # i4 [n_nics]: leaf index 0..n_leaves-1
    nic_mac: np.ndarray      # u1 [n_nics, 6]
    nic_ip: np.ndarray       # u4 [n_nics] IPv4 as an integer
    leaf_mac: np.ndarray     # u1 [n_leaves, 6]
    n_leaves: int
    n_spines: int
    links: np.ndarray        # LINK_DTYPE, simulator node ids

    @property
    def n_nics(self) -> int:
        return len(self.nic_node)

    @property
    def n_switches(self) -> int:
        return self.n_leaves + self.n_spines

    def leaf_node_id(self, leaf: int) -> int:
        return self.n_nics + leaf

    def spine_node_id(self, spine: int) -> int:
        return self.n_nics + self.n_leaves + spine

    def nic_name(self, nic: int) -> str:
        return f"node{int(self.nic_node[nic]):04d}-rail{int(self.nic_rail[nic])}"

    def nic_ip_str(self, nic: int) -> str:
        ip = int(self.nic_ip[nic])
        return ".".join(str((ip >> s) & 0xFF) for s in (24, 16, 8, 0))

    def same_node(self, src_rank, dst_rank) -> np.ndarray:
        return self.rank_node[src_rank] == self.rank_node[dst_rank]

    def hops(self, src_nic, dst_nic) -> np.ndarray:
        """Switch-to-switch path length: 2 links under one leaf, 4 through a spine."""
        same_leaf = self.nic_leaf[src_nic] == self.nic_leaf[dst_nic]
        return np.where(same_leaf, 2, 4)

    def path(self, src_nic: int, dst_nic: int, udp_sport: int) -> list[int]:
        """Simulator node ids a packet crosses; the spine is chosen by ECMP on the UDP source port."""
        a, b = int(self.nic_leaf[src_nic]), int(self.nic_leaf[dst_nic])
        if a == b:
            return [src_nic, self.leaf_node_id(a), dst_nic]
        spine = ecmp_spine(udp_sport, self.n_spines)
        return [src_nic, self.leaf_node_id(a), self.spine_node_id(spine), self.leaf_node_id(b), dst_nic]


def ecmp_spine(udp_sport: int, n_spines: int) -> int:
    """A deterministic stand-in for the switches' 5-tuple hash: only the source port varies per QP."""
    return int(udp_sport) % n_spines


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

    groups = -(-nodes // c.nodes_per_leaf)
    nic_leaf = (nic_rail * groups + nic_node // c.nodes_per_leaf).astype(np.int32)
    n_leaves = nics * groups
    # One leaf needs no spine; otherwise at least one.
    n_spines = c.spines if n_leaves > 1 else 0

    nic_mac = np.zeros((n_nics, 6), dtype=np.uint8)
    nic_mac[:, 0] = 0x02
    nic_mac[:, 2] = nic_rail
    nic_mac[:, 3] = nic_node >> 8
    nic_mac[:, 4] = nic_node & 0xFF
    nic_mac[:, 5] = 0x01
    nic_ip = ((10 << 24) | (nic_rail.astype(np.uint32) << 16)
              | ((nic_node // 200).astype(np.uint32) << 8) | (nic_node % 200 + 1).astype(np.uint32))
    leaf_mac = np.zeros((n_leaves, 6), dtype=np.uint8)
    leaf_mac[:, 0] = 0x02
    leaf_mac[:, 1] = 0x01
    leaf_mac[:, 4] = np.arange(n_leaves) >> 8
    leaf_mac[:, 5] = np.arange(n_leaves) & 0xFF

    ls_gbps = c.leaf_spine_gbps or c.nic_gbps
    links = [(n, n_nics + int(nic_leaf[n]), c.nic_gbps, c.link_latency_ns) for n in range(n_nics)]
    links += [(n_nics + lf, n_nics + n_leaves + sp, ls_gbps, c.link_latency_ns)
              for lf in range(n_leaves) for sp in range(n_spines)]
    return Fabric(
        world=world, nodes=nodes, gpus_per_node=gpn, nic_gbps=c.nic_gbps, nvlink_gbps=c.nvlink_gbps,
        leaf_spine_gbps=ls_gbps, link_latency_ns=c.link_latency_ns,
        rank_node=rank_node, rank_gpu=rank_gpu, rank_nic=rank_nic,
        nic_node=nic_node, nic_rail=nic_rail, nic_leaf=nic_leaf, nic_mac=nic_mac,
        nic_ip=nic_ip.astype(np.uint32), leaf_mac=leaf_mac, n_leaves=n_leaves, n_spines=n_spines,
        links=np.array(links, dtype=LINK_DTYPE),
    )
