"""Job description: YAML / preset / dict -> frozen dataclasses, validated with one-line errors.

Sections: model, parallelism, cluster, nccl, network, output. Every key has a default here, so a
YAML file names only what differs. Megatron argument names are accepted as aliases.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# Dense peak (TFLOP/s) at the precision training runs in; MFU is the fraction achieved.
GPU_PEAK_TFLOPS = {
    "a100": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0, "fp8": 312.0},
    "h100": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
    "h200": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
    "b200": {"fp32": 80.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
}


@dataclass(frozen=True)
class Model:
    name: str = "tiny"
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 0          # 0: same as heads (no GQA)
    ffn_hidden: int = 0        # 0: 4 * hidden
    vocab: int = 4096
    seq_len: int = 256
    dtype: str = "bf16"
    # Architecture switches that only change the parameter count (GPT-style defaults; llama: all flipped).
    gated_mlp: bool = False            # SwiGLU: 3 MLP matrices (gate, up, down) instead of 2
    position_embeddings: bool = True   # learned s x h position table (GPT); False for RoPE
    tied_embeddings: bool = True       # LM head shares the input embedding; False: its own V x h
    bias: bool = True                  # biases on linears and LayerNorms; False: none (RMSNorm)

    @property
    def bytes_per_elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden


@dataclass(frozen=True)
class Parallelism:
    dp: int = 2
    tp: int = 2
    pp: int = 2
    micro_batch: int = 1         # b
    global_batch: int = 8        # sequences per iteration over all DP replicas
    dp_bucket_bytes: int = 25 * 1000 * 1000   # DDP / Megatron gradient bucket (25 MB default)
    grad_dtype: str = ""         # "" = model dtype; "fp32" for fp32 gradient reduction

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def microbatches(self) -> int:
        """m: micro-batches per iteration per pipeline."""
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True)
class Cluster:
    name: str = "mini-h100"
    nodes: int = 0               # 0: world / gpus_per_node
    gpus_per_node: int = 2
    gpu: str = "h100"
    mfu: float = 0.4
    nic_gbps: int = 400          # one NIC per GPU, on its rail
    nvlink_gbps: int = 3600      # per GPU per direction (H100 NVLink4: 450 GB/s)
    nodes_per_leaf: int = 16     # rail-optimised leaf: one leaf per rail per group of nodes
    spines: int = 2
    leaf_spine_gbps: int = 0     # 0: same as nic_gbps
    link_latency_ns: int = 1000  # per hop propagation + switching

    def node_count(self, world: int) -> int:
        return self.nodes or world // self.gpus_per_node


@dataclass(frozen=True)
class Nccl:
    algorithm: str = "ring"
    channels: int = 2
    ring_msg_bytes: int = 1 << 20        # Simple protocol: 1 MiB slice per network message
    ring_chunk_bytes: int = 2 << 20      # Simple: 2 MiB chunk per ring step per loop
    p2p_chunk_bytes: int = 128 << 10     # send/recv network chunk
    qps_per_connection: int = 1


@dataclass(frozen=True)
class Network:
    """Settings for the simulators (ns-3 export) and switch labs."""
    cc_mode: str = "dcqcn"       # dcqcn | hpcc | timely | dctcp | hpcc-pint
    kmin_bytes: int = 150_000
    kmax_bytes: int = 1_500_000
    pmax: float = 0.2
    pfc: bool = True
    buffer_bytes: int = 32 << 20  # per switch


@dataclass(frozen=True)
class Output:
    dir: str = ""                # "" -> traces/<job name>
    pcap: bool = True
    ns3: bool = True
    pmtu: int = 4096
    vlan: bool = True
    vlan_id: int = 100
    pcp: int = 3
    dscp: int = 26
    ecn: int = 2                 # 2 = ECT(0)
    snaplen: int = 0             # 0: whole frames
    payload: str = "zero"        # zero | pattern
    ack_every: int = 0           # 0: one ACK per message (on the A bit); N: also every N packets


@dataclass(frozen=True)
class Job:
    name: str = "default"
    model: Model = field(default_factory=Model)
    parallelism: Parallelism = field(default_factory=Parallelism)
    cluster: Cluster = field(default_factory=Cluster)
    nccl: Nccl = field(default_factory=Nccl)
    network: Network = field(default_factory=Network)
    output: Output = field(default_factory=Output)
    iterations: int = 1
    seed: int = 0

    @property
    def world(self) -> int:
        return self.parallelism.world

    @property
    def nodes(self) -> int:
        return self.cluster.node_count(self.world)
