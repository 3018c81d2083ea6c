"""The fabric section's keys: the switch fabric's kind, sizes, rates, latencies, planes and ECMP."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import M, key

_ZERO_OR_LEAF = (0.01, "below 1:100 an uplink would outrun 100 x its leaf's downlinks")
_ZERO_OR_SPINE = (0.01, "below 1:100 an uplink would outrun 100 x its spine's downlinks")


@dataclass(frozen=True)
class FabricKeys:
    """kind: rail-optimised - two tiers, NIC i of each group of `nodes_per_leaf` nodes on the leaf of
                           rail i (NVIDIA DGX SuperPOD style); every leaf to every spine
          leaf-spine     - two tiers, ToR leaves: every NIC of a node on one leaf
          fat-tree       - three tiers, k-ary (pods of k/2 leaves and k/2 spines, (k/2)^2 cores)
          file           - switches and links listed in a topology YAML (`file`)
    `planes` > 1 splits each NIC into that many ports of nic_gbps / planes, each on its own copy
    of the fabric (multi-plane); a QP uses plane QPN mod planes."""
    name: str = key("", "the fabric's name (a preset names it)")
    kind: str = key("rail-optimised", "switch fabric the NICs plug into",
                    choices=("rail-optimised", "leaf-spine", "fat-tree", "file"))
    nodes_per_leaf: int = key(16, "nodes under one leaf (rail-optimised: per rail)", 1, M)
    spines: int = key(2, "spine switches (two-tier)", 1, 65_536)
    k: int = key(0, "fat-tree radix; 0: the smallest even k that holds every NIC", 0, 1024)
    placement: str = key("", "fat-tree: a node's NICs on consecutive leaf ports (node) or rail-major "
                             "(rail); '': node", choices=("", "node", "rail"))
    leaf_spine_gbps: int = key(0, "Gb/s per leaf-spine link; 0: from oversubscription or the NIC port",
                               0, 10_000_000)
    spine_core_gbps: int = key(0, "Gb/s per spine-core link; 0: from core_oversubscription or leaf-spine",
                               0, 10_000_000)
    oversubscription: float = key(0.0, "leaf downlink : uplink Gb/s; 0: use leaf_spine_gbps", 0.0, 1000.0,
                                  zero_or=_ZERO_OR_LEAF)
    core_oversubscription: float = key(0.0, "spine downlink : uplink Gb/s (fat-tree)", 0.0, 1000.0,
                                       zero_or=_ZERO_OR_SPINE)
    link_latency_ns: int = key(1000, "ns per link (100 ms: 20,000 km of fibre)", 0, 100_000_000)
    leaf_spine_latency_ns: int = key(-1, "-1: link_latency_ns", -1, 100_000_000)
    spine_core_latency_ns: int = key(-1, "-1: link_latency_ns", -1, 100_000_000)
    planes: int = key(1, "independent fabric planes per NIC", 1, 16)
    ecmp_seed: int = key(0, "seeds every switch's ECMP hash", 0, 2**32 - 1)
    ecmp_hash: str = key("5-tuple", "what switches hash: the 5-tuple, or BTH DestQP with the addresses (qp)",
                         choices=("5-tuple", "qp"))
    file: str = key("", "kind file: the topology YAML (switches, links, nics), relative to the file naming it")
