"""Switch graphs of the fabric kinds: which switches exist, where every NIC port plugs in, and the
switch-to-switch links with their rates and latencies (topology.py adds the NICs and addresses).

Kinds (config `fabric.kind`, see config.FabricConfig):
  rail-optimised  two tiers; NIC i of each group of `nodes_per_leaf` nodes on the leaf of rail i of
                  that group (DGX SuperPOD scalable units); every leaf links to every spine.
  leaf-spine      two tiers with top-of-rack leaves: all NICs of `nodes_per_leaf` nodes on one leaf.
  fat-tree        three tiers, k-ary (Al-Fares et al. 2008): pods of k/2 leaves and k/2 spines
                  (aggregation), every leaf of a pod to every spine of the pod, spine j of each pod
                  to cores j*k/2 .. j*k/2 + k/2 - 1. k/2 NIC ports per leaf; only the pods the NICs
                  need are built. Placement `node` fills leaves in NIC order (a node's NICs on
                  consecutive ports), `rail` in rail-major order (rail 0 of every node first).
  file            switches, links and each NIC's leaf from a YAML file (custom, uneven fabrics;
                  read and checked by topology_file.py).
Multi-plane (`planes` = P > 1): the graph is built once per plane (switch names prefixed `pK-` for
plane K > 0); each NIC has one port of nic_gbps / P on every plane.

Uplink rates: `leaf_spine_gbps` if set, else from `oversubscription` (ratio of a full leaf's
NIC-facing Gb/s to its uplink Gb/s), else the NIC port rate. Spine-core likewise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..config import FabricConfig
from ..errors import ConfigError

LEAF, SPINE, CORE = 1, 2, 3
TIER_NAMES = {LEAF: "leaf", SPINE: "spine", CORE: "core"}


@dataclass(frozen=True)
class SwitchGraph:
    names: list[str]         # per switch, unique (leaf3, spine0, core5, p1-leaf3, ...)
    tier: np.ndarray         # i1 per switch: LEAF / SPINE / CORE
    plane: np.ndarray        # i2 per switch
    index: np.ndarray        # i4 per switch: its number among switches of its tier and plane
    nic_leaf: np.ndarray     # i4 [n_nics, planes]: the switch each NIC port plugs into
    port_gbps: int           # NIC port rate (nic_gbps / planes)
    port_latency_ns: int
    links: np.ndarray        # [m, 4] i8: switch a, switch b, gbps, latency_ns

    @property
    def n_switches(self) -> int:
        return len(self.names)


MAX_LINK_GBPS = 10_000_000     # the most fabric.leaf_spine_gbps / spine_core_gbps accept (docs/limits.md)


def _uplink_gbps(explicit: int, ratio: float, down_gbps: int, uplinks: int, port_gbps: int) -> int:
    """down_gbps / (ratio x uplinks) rounded up, in exact arithmetic on the ratio as written
    (2.5 is 5/2: no float error, and 0.0001 divides by 1/10000, never by a rounded 0), at most
    MAX_LINK_GBPS: an uplink no faster than a user could set one."""
    if explicit:
        return explicit
    if ratio > 0 and uplinks:
        need = Fraction(down_gbps) / (Fraction(repr(float(ratio))) * uplinks)
        return int(min(MAX_LINK_GBPS, max(1, math.ceil(need))))
    return port_gbps


def _lat(value: int, default: int) -> int:
    return default if value < 0 else value


class _Builder:
    def __init__(self):
        self.names: list[str] = []
        self.tier: list[int] = []
        self.plane: list[int] = []
        self.index: list[int] = []
        self.links: list[np.ndarray] = []      # blocks of [m, 4]: switch a, switch b, gbps, latency_ns

    def add(self, tier: int, count: int, plane: int) -> np.ndarray:
        first = len(self.names)
        pre = f"p{plane}-" if plane else ""
        self.names += [f"{pre}{TIER_NAMES[tier]}{i}" for i in range(count)]
        self.tier += [tier] * count
        self.plane += [plane] * count
        self.index += list(range(count))
        return np.arange(first, first + count)

    def link(self, a, b, gbps: int, lat: int) -> None:
        """Links a[i] - b[i] (arrays or one pair), all of one rate and latency, in that order."""
        a, b = np.broadcast_arrays(np.asarray(a, np.int64).reshape(-1), np.asarray(b, np.int64).reshape(-1))
        self.links.append(np.column_stack([a, b, np.full(len(a), gbps, np.int64), np.full(len(a), lat, np.int64)]))

    def graph(self, nic_leaf, port_gbps, port_lat) -> SwitchGraph:
        links = np.concatenate(self.links) if self.links else np.zeros((0, 4), np.int64)
        return SwitchGraph(self.names, np.array(self.tier, np.int8), np.array(self.plane, np.int16),
                           np.array(self.index, np.int32), np.asarray(nic_leaf, np.int32), port_gbps,
                           port_lat, links)


def build_switch_graph(fc: FabricConfig, nodes: int, nics_per_node: int, nic_gbps: int) -> SwitchGraph:
    if fc.planes > 1 and nic_gbps % fc.planes:
        raise ConfigError(f"fabric.planes={fc.planes} does not divide cluster.nic_gbps={nic_gbps}; "
                          "each plane gets an equal share of the NIC")
    port = nic_gbps // fc.planes
    if fc.kind == "file":
        if fc.planes != 1:
            raise ConfigError("fabric.planes > 1 with fabric.kind=file: list every plane's switches "
                              "in the file instead")
        return _from_file(fc, nodes, nics_per_node, port)
    b = _Builder()
    n_nics = nodes * nics_per_node
    nic_leaf = np.zeros((n_nics, fc.planes), np.int32)
    for p in range(fc.planes):
        build = {"rail-optimised": _two_tier, "leaf-spine": _two_tier, "fat-tree": _fat_tree}[fc.kind]
        nic_leaf[:, p] = build(b, fc, p, nodes, nics_per_node, port)
    return b.graph(nic_leaf, port, fc.link_latency_ns)


def _two_tier(b: _Builder, fc: FabricConfig, plane: int, nodes: int, nics: int, port: int) -> np.ndarray:
    nic = np.arange(nodes * nics)
    node, rail = nic // nics, nic % nics
    groups = -(-nodes // fc.nodes_per_leaf)
    if fc.kind == "rail-optimised":
        leaf_of = rail * groups + node // fc.nodes_per_leaf
        n_leaves, down = nics * groups, min(fc.nodes_per_leaf, nodes) * port
    else:
        leaf_of = node // fc.nodes_per_leaf
        n_leaves, down = groups, min(fc.nodes_per_leaf, nodes) * nics * port
    leaves = b.add(LEAF, n_leaves, plane)
    if n_leaves > 1:        # one leaf needs no spine
        spines = b.add(SPINE, fc.spines, plane)
        gbps = _uplink_gbps(fc.leaf_spine_gbps, fc.oversubscription, down, fc.spines, port)
        lat = _lat(fc.leaf_spine_latency_ns, fc.link_latency_ns)
        b.link(np.repeat(leaves, len(spines)), np.tile(spines, len(leaves)), gbps, lat)   # leaf by leaf
    return leaves[leaf_of]


def link_count(fc: FabricConfig, nodes: int, nics: int) -> tuple[int, str]:
    """Links the fabric would have (NIC ports included) without building it, and what drives it:
    lets a job be refused before any work (timing/work.py)."""
    n_nics = nodes * nics
    if fc.kind == "file":
        return n_nics, "the topology file"
    if fc.kind == "fat-tree":
        k = fc.k or fat_tree_k(n_nics)
        half = max(1, k // 2)
        leaves = -(-n_nics // half)
        pods = -(-leaves // half)
        sw = (leaves * half if leaves > 1 else 0) + (pods * half * half if pods > 1 else 0)
        return fc.planes * (n_nics + sw), f"fabric.k={k}"
    groups = -(-nodes // fc.nodes_per_leaf)
    leaves = nics * groups if fc.kind == "rail-optimised" else groups
    up = leaves * fc.spines if leaves > 1 else 0
    return fc.planes * (n_nics + up), f"{leaves:,} leaves x fabric.spines={fc.spines:,}"


def fat_tree_k(n_ports: int) -> int:
    """The smallest even k whose fat-tree (k^3/4 host ports) holds n_ports."""
    k = 2
    while k ** 3 // 4 < n_ports:
        k += 2
    return k


def _fat_tree(b: _Builder, fc: FabricConfig, plane: int, nodes: int, nics: int, port: int) -> np.ndarray:
    n_nics = nodes * nics
    k = fc.k or fat_tree_k(n_nics)
    if k % 2 or k < 2:
        raise ConfigError(f"fabric.k={k}: a fat-tree needs an even radix >= 2")
    half = k // 2
    if n_nics > k ** 3 // 4:
        raise ConfigError(f"fabric.k={k}: a k-ary fat-tree holds {k ** 3 // 4} NIC ports, the job has "
                          f"{n_nics}; raise fabric.k to {fat_tree_k(n_nics)} or leave it 0 (auto)")
    nic = np.arange(n_nics)
    if (fc.placement or "node") == "rail":
        nic_order = (nic % nics) * nodes + nic // nics          # rail-major position of each NIC
    else:
        nic_order = nic
    n_leaves = -(-n_nics // half)
    pods = -(-n_leaves // half)
    leaves = b.add(LEAF, n_leaves, plane)
    if n_leaves == 1:
        return leaves[nic_order // half]
    spines = b.add(SPINE, pods * half, plane)
    up = _uplink_gbps(fc.leaf_spine_gbps, fc.oversubscription, half * port, half, port)
    lat_ls = _lat(fc.leaf_spine_latency_ns, fc.link_latency_ns)
    pod_first = np.arange(n_leaves) // half * half          # each leaf to the k/2 spines of its pod
    b.link(np.repeat(leaves, half), spines[(pod_first[:, None] + np.arange(half)).ravel()], up, lat_ls)
    if pods > 1:
        cores = b.add(CORE, half * half, plane)
        core_up = _uplink_gbps(fc.spine_core_gbps, fc.core_oversubscription, half * up, half,
                               fc.spine_core_gbps or up)
        lat_sc = _lat(fc.spine_core_latency_ns, fc.link_latency_ns)
        j = np.arange(pods * half) % half                     # spine j of each pod to cores j*k/2 ..
        b.link(np.repeat(spines, half), cores[(j[:, None] * half + np.arange(half)).ravel()], core_up, lat_sc)
    return leaves[nic_order // half]


# --- file ---------------------------------------------------------------------------------------

def _from_file(fc: FabricConfig, nodes: int, nics: int, port: int) -> SwitchGraph:
    from .topology_file import read_topology
    names, tiers, links, nic_leaf = read_topology(fc, nodes, nics, port)
    b = _Builder()
    b.names, b.tier, b.plane = names, tiers, [0] * len(names)
    counts: dict[int, int] = {}
    for t in tiers:
        b.index.append(counts.get(t, 0))
        counts[t] = counts.get(t, 0) + 1
    for a, z, gbps, lat in links:
        b.link(a, z, gbps, lat)
    return b.graph(nic_leaf.reshape(-1, 1), port, fc.link_latency_ns)
