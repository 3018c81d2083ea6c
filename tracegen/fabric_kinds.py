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
  file            switches, links and each NIC's leaf from a YAML file (custom, uneven fabrics).
Multi-plane (`planes` = P > 1): the graph is built once per plane (switch names prefixed `pK-` for
plane K > 0); each NIC has one port of nic_gbps / P on every plane.

Uplink rates: `leaf_spine_gbps` if set, else from `oversubscription` (ratio of a full leaf's
NIC-facing Gb/s to its uplink Gb/s), else the NIC port rate. Spine-core likewise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from .config import FabricConfig
from .errors import ConfigError

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


def _ceil_div(a: float, b: float) -> int:
    return int(-(-int(round(a * 1000)) // int(round(b * 1000))))


def _uplink_gbps(explicit: int, ratio: float, down_gbps: int, uplinks: int, port_gbps: int) -> int:
    if explicit:
        return explicit
    if ratio > 0 and uplinks:
        return max(1, _ceil_div(down_gbps, ratio * uplinks))
    return port_gbps


def _lat(value: int, default: int) -> int:
    return default if value < 0 else value


class _Builder:
    def __init__(self):
        self.names: list[str] = []
        self.tier: list[int] = []
        self.plane: list[int] = []
        self.index: list[int] = []
        self.links: list[tuple[int, int, int, int]] = []

    def add(self, tier: int, count: int, plane: int) -> np.ndarray:
        first = len(self.names)
        pre = f"p{plane}-" if plane else ""
        self.names += [f"{pre}{TIER_NAMES[tier]}{i}" for i in range(count)]
        self.tier += [tier] * count
        self.plane += [plane] * count
        self.index += list(range(count))
        return np.arange(first, first + count)

    def link(self, a, b, gbps: int, lat: int) -> None:
        self.links.append((int(a), int(b), int(gbps), int(lat)))

    def graph(self, nic_leaf, port_gbps, port_lat) -> SwitchGraph:
        links = np.array(self.links, dtype=np.int64).reshape(-1, 4)
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
        for lf in leaves:
            for sp in spines:
                b.link(lf, sp, gbps, lat)
    return leaves[leaf_of]


def link_count(fc: FabricConfig, nodes: int, nics: int) -> tuple[int, str]:
    """Links the fabric would have (NIC ports included) without building it, and what drives it:
    lets a job be refused before any work (work.py)."""
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
    for lf in range(n_leaves):
        pod = lf // half
        for j in range(half):
            b.link(leaves[lf], spines[pod * half + j], up, lat_ls)
    if pods > 1:
        cores = b.add(CORE, half * half, plane)
        core_up = _uplink_gbps(fc.spine_core_gbps, fc.core_oversubscription, half * up, half,
                               fc.spine_core_gbps or up)
        lat_sc = _lat(fc.spine_core_latency_ns, fc.link_latency_ns)
        for pod in range(pods):
            for j in range(half):
                for c in range(half):
                    b.link(spines[pod * half + j], cores[j * half + c], core_up, lat_sc)
    return leaves[nic_order // half]


# --- file ---------------------------------------------------------------------------------------

FILE_HELP = ("a topology file is a mapping with 'switches' ({name: tier}, tier 1 = leaf: NICs plug "
             "in there), 'links' ([[a, b, gbps, latency_ns], ...]; gbps and latency optional) and "
             "'nics' (the leaf of each NIC in NIC order, or {nic name: leaf})")


_SWITCH_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")


def _from_file(fc: FabricConfig, nodes: int, nics: int, port: int) -> SwitchGraph:
    path = Path(fc.file)
    if not fc.file:
        raise ConfigError("fabric.kind=file needs fabric.file: the topology YAML's path")
    try:
        doc = yaml.safe_load(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"fabric.file={fc.file!r}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"fabric.file={fc.file!r}: cannot read it ({e.__class__.__name__})") from None
    where = f"fabric.file {fc.file}"
    if not isinstance(doc, dict) or not {"switches", "links", "nics"} <= set(doc):
        raise ConfigError(f"{where}: {FILE_HELP}")
    sw = doc["switches"]
    if not isinstance(sw, dict) or not sw:
        raise ConfigError(f"{where}: 'switches' must map switch names to tiers (1, 2, 3)")
    names = [str(n) for n in sw]
    for n in names:      # a name names files (switch views) and appears in MAC-less reports
        if not _SWITCH_NAME.fullmatch(n) or n.startswith("node"):
            raise ConfigError(f"{where}: switch name {n[:40]!r}: use letters, digits, '.', '_', '-' "
                              "(at most 64, not starting with 'node': NIC names do)")
    idx = {n: i for i, n in enumerate(names)}
    tiers = []
    for n, t in sw.items():
        if t not in (1, 2, 3):
            raise ConfigError(f"{where}: switch {n!r} has tier {t!r}; use 1 (leaf), 2 or 3")
        tiers.append(t)
    b = _Builder()
    b.names, b.tier, b.plane = names, tiers, [0] * len(names)
    counts: dict[int, int] = {}
    for t in tiers:
        b.index.append(counts.get(t, 0))
        counts[t] = counts.get(t, 0) + 1
    if not isinstance(doc["links"], list):
        raise ConfigError(f"{where}: 'links' must be a list of [a, b, gbps, latency_ns]")
    for k, ln in enumerate(doc["links"]):
        if not isinstance(ln, list) or not 2 <= len(ln) <= 4 or str(ln[0]) not in idx or str(ln[1]) not in idx \
                or ln[0] == ln[1]:
            raise ConfigError(f"{where}: links[{k}] = {str(ln)[:60]}: give [a, b, gbps, latency_ns] "
                              "with two different switches named in 'switches'")
        gbps = ln[2] if len(ln) > 2 else port
        lat = ln[3] if len(ln) > 3 else fc.link_latency_ns
        if not (isinstance(gbps, int) and 0 < gbps <= 10**7 and isinstance(lat, int) and 0 <= lat <= 10**9):
            raise ConfigError(f"{where}: links[{k}]: gbps must be a positive integer and latency_ns >= 0")
        b.link(idx[str(ln[0])], idx[str(ln[1])], gbps, lat)
    n_nics = nodes * nics
    spec = doc["nics"]
    if isinstance(spec, dict):
        names_of = {f"node{n // nics:04d}-rail{n % nics}": n for n in range(n_nics)}
        leaf = [None] * n_nics
        for k, v in spec.items():
            if str(k) not in names_of:
                raise ConfigError(f"{where}: nics: {str(k)[:40]!r} is not a NIC of this job "
                                  f"(node0000-rail0 .. {list(names_of)[-1]})")
            leaf[names_of[str(k)]] = v
    elif isinstance(spec, list):
        leaf = list(spec)
    else:
        raise ConfigError(f"{where}: 'nics' must be a list or a mapping")
    if len(leaf) != n_nics or any(v is None for v in leaf):
        raise ConfigError(f"{where}: 'nics' must place all {n_nics} NICs of the job (got {len(leaf)})")
    out = np.zeros((n_nics, 1), np.int32)
    for n, v in enumerate(leaf):
        if str(v) not in idx or tiers[idx[str(v)]] != 1:
            raise ConfigError(f"{where}: NIC {n} on {str(v)[:40]!r}, which is not a tier-1 switch")
        out[n, 0] = idx[str(v)]
    return b.graph(out, port, fc.link_latency_ns)
