"""Keys with no effect: a key whose value another key's value makes inert is refused when the user
wrote it and reset to its default when a preset carried it in.
May import: config.schema, config.sections, config.values, errors.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .schema import KEYS
from .sections import Job
from .values import show
from ..errors import ConfigError


# --- keys with no effect ----------------------------------------------------------------------
# A key that changes nothing because of another key's value: written by the user (job file,
# --set, a mapping) with a value other than its default, it is refused naming both keys; carried
# in by a preset (a cluster preset's spines under a fat-tree), it is reset to its default, so
# job.resolved.yaml shows what acts and replays. Rows: (key, other key, acts(other's value),
# what the key does, the other key's setting that makes it act) - read off where the pipeline
# uses each key (fabric/kinds.py, workload/params.py, emit/packets/plan_build.py, emit/sims/ns3.py).

_TWO_TIER = ("rail-optimised", "leaf-spine")
_BUILT, _TWO_TIER_S = "rail-optimised, leaf-spine or fat-tree", "rail-optimised or leaf-spine"


def _is(*values):
    return lambda v: v in values


class _OR_QUEUE:
    """acts(other's value), or always with output.ecn_marking=queue (its marks are seeded by
    ecn_seed and cause CNPs, whatever the fraction)."""

    def __init__(self, acts):
        self.acts = acts

    def __call__(self, v, job: Job | None = None) -> bool:
        return self.acts(v) or (job is not None and job.output.ecn_marking == "queue")


_FAT, _TWO, _NOT_FILE = _is("fat-tree"), _is(*_TWO_TIER), (lambda v: v != "file")
_POS, _MANY, _ZERO, _TRUE = (lambda v: v > 0), (lambda v: v > 1), (lambda v: v == 0), (lambda v: v is True)
INERT = [
    ("fabric.nodes_per_leaf", "fabric.kind", _TWO, "it counts the nodes under a two-tier leaf", _TWO_TIER_S),
    ("fabric.spines", "fabric.kind", _TWO, "it counts a two-tier fabric's spines", _TWO_TIER_S),
    ("fabric.k", "fabric.kind", _FAT, "it is a fat-tree's radix", "fat-tree"),
    ("fabric.placement", "fabric.kind", _FAT, "it orders NICs on a fat-tree's leaves", "fat-tree"),
    ("fabric.spine_core_gbps", "fabric.kind", _FAT, "it rates a fat-tree's spine-core links", "fat-tree"),
    ("fabric.core_oversubscription", "fabric.kind", _FAT, "it rates a fat-tree's spine-core links", "fat-tree"),
    ("fabric.spine_core_latency_ns", "fabric.kind", _FAT, "it delays a fat-tree's spine-core links", "fat-tree"),
    ("fabric.leaf_spine_gbps", "fabric.kind", _NOT_FILE, "the topology file rates every link", _BUILT),
    ("fabric.oversubscription", "fabric.kind", _NOT_FILE, "the topology file rates every link", _BUILT),
    ("fabric.leaf_spine_latency_ns", "fabric.kind", _NOT_FILE, "the topology file delays every link", _BUILT),
    ("fabric.oversubscription", "fabric.leaf_spine_gbps", _ZERO, "an explicit uplink rate wins over a ratio", "0"),
    ("fabric.core_oversubscription", "fabric.spine_core_gbps", _ZERO, "an explicit uplink rate wins over a ratio",
     "0"),
    ("model.top_k", "model.experts", _POS, "it counts the experts a token goes to", "> 0"),
    ("model.moe_ffn_hidden", "model.experts", _POS, "it is an expert's width", "> 0"),
    ("model.shared_experts", "model.experts", _POS, "it counts the always-on experts of MoE layers", "> 0"),
    ("model.first_k_dense", "model.experts", _POS, "it counts the dense layers before the MoE layers", "> 0"),
    ("model.capacity_factor", "model.experts", _POS, "it sizes the MoE dispatch buffer", "> 0"),
    ("model.q_lora_rank", "model.kv_lora_rank", _POS, "it is latent attention's query rank", "> 0"),
    ("model.rope_head_dim", "model.kv_lora_rank", _POS, "it is latent attention's RoPE key width", "> 0"),
    ("model.v_head_dim", "model.kv_lora_rank", _POS, "it is latent attention's value width", "> 0"),
    ("model.kv_heads", "model.kv_lora_rank", _ZERO, "latent attention has no query groups", "0"),
    ("model.max_position_embeddings", "model.position_embeddings", _TRUE,
     "it counts the rows of a learned position table", "true"),
    ("output.vlan_id", "output.vlan", _TRUE, "it is the 802.1Q tag's VID", "true"),
    ("output.pcp", "output.vlan", _TRUE, "it is the 802.1Q tag's priority", "true"),
    ("output.qp_split", "nccl.qps_per_connection", _MANY, "it spreads messages over a connection's QPs", "> 1"),
    ("output.ecn_pattern", "output.ecn_mark_fraction", _POS, "it places CE marks", "> 0"),
    ("output.ecn_seed", "output.ecn_mark_fraction", _OR_QUEUE(_POS), "it seeds CE marks", "> 0"),
    ("output.ecn_seed", "output.ecn_pattern", _OR_QUEUE(_is("random")), "it seeds random CE marks", "random"),
    ("output.dcqcn", "output.ecn_mark_fraction", _OR_QUEUE(_POS), "senders react to CNPs, which only CE marks cause",
     "> 0"),
    ("output.ecn_mark_fraction", "output.ecn_marking", _is("fraction"), "the port queues place CE marks", "fraction"),
    ("network.pfc_xoff_bytes", "network.pfc", _TRUE, "it is a PFC threshold", "true"),
    ("network.pfc_resume_offset_bytes", "network.pfc", _TRUE, "it is a PFC threshold", "true"),
    ("network.pfc_headroom_bytes", "network.pfc", _TRUE, "it is PFC headroom", "true"),
    ("network.pfc_pause_quanta", "network.pfc", _TRUE, "it is the PFC PAUSE time", "true"),
    ("network.dcqcn_rate_ai_mbps", "network.cc_mode", _is("dcqcn"), "it is DCQCN's additive increase", "dcqcn"),
    ("network.dcqcn_rate_hai_mbps", "network.cc_mode", _is("dcqcn"), "it is DCQCN's hyper increase", "dcqcn"),
]


def _get(job: Job, key: str) -> Any:
    sec, _, name = key.partition(".")
    return getattr(getattr(job, sec), name)


def _default(key: str) -> Any:
    return KEYS[key].default


def _yaml_word(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return v if isinstance(v, str) and v.isprintable() and 0 < len(v) <= 60 else show(v)


def inert_keys(job: Job) -> list[tuple[str, str]]:
    """(key, other key) of every key with a non-default value that has no effect (INERT)."""
    out = []
    for key, other, acts, _, _ in INERT:
        on = acts(_get(job, other), job) if isinstance(acts, _OR_QUEUE) else acts(_get(job, other))
        if _get(job, key) != _default(key) and not on:
            out.append((key, other))
    return out


def settle_inert(job: Job, written: dict[str, str]) -> Job:
    """Refuse the keys the user wrote that have no effect; reset those presets carried in."""
    rows = {(k, o): (what, want) for k, o, _, what, want in INERT}
    for key, other in inert_keys(job):
        if _get(job, key) == _default(key):      # reset by an earlier row
            continue
        if key in written:
            what, want = rows[key, other]
            fix = f"set {other} {want}" if want.startswith(">") else f"set {other}: {want}"
            raise ConfigError(f"{written[key]}={_yaml_word(_get(job, key))} has no effect with "
                              f"{written.get(other, other)}={_yaml_word(_get(job, other))} ({what}); "
                              f"remove it or {fix}")
        sec, _, name = key.partition(".")
        job = dataclasses.replace(job, **{sec: dataclasses.replace(getattr(job, sec), **{name: _default(key)})})
    return job
