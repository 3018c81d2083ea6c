"""Job description: YAML / preset / dict -> frozen dataclasses, validated with one-line errors.

Sections: model, parallelism, cluster, nccl, network, output. Every key has a default here, so a
YAML file names only what differs. Megatron argument names are accepted as aliases.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# Dense peak (TFLOP/s) at the precision training runs in; MFU is the fraction achieved.
# Memory per GPU (bytes) a plan is held against: H100/A100 SXM 80 GB, H200 141 GB, B200 180 GB.
GPU_MEMORY_BYTES = {"a100": 80 * 10**9, "h100": 80 * 10**9, "h200": 141 * 10**9, "b200": 180 * 10**9}

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
    # Switches that only change the parameter count (GPT-style defaults; llama flips all four).
    gated_mlp: bool = False            # SwiGLU: 3 MLP matrices (gate, up, down) instead of 2
    position_embeddings: bool = True   # learned s x h position table (GPT); False for RoPE
    tied_embeddings: bool = True       # LM head shares the input embedding; False: its own V x h
    bias: bool = True                  # biases on linears and LayerNorms; False: none (RMSNorm)
    head_dim: int = 0                  # 0: hidden / heads
    # Mixture of experts (experts = 0: dense). Layers after the first `first_k_dense` are MoE.
    experts: int = 0                   # routed experts per MoE layer
    top_k: int = 2                     # experts each token is routed to
    moe_ffn_hidden: int = 0            # 0: ffn_hidden; width of one routed / shared expert
    shared_experts: int = 0            # always-on experts (DeepSeek), computed locally
    first_k_dense: int = 0             # leading dense layers before the MoE layers
    capacity_factor: float = 1.0       # dispatch buffer = tokens x top_k x capacity_factor rows
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0             # decoupled RoPE key width per head
    v_head_dim: int = 0                # 0: head_dim
    # Megatron's sizing rules: position table rows (`--max-position-embeddings`, >= seq_len) and the
    # vocabulary padded to a multiple of make_vocab_size_divisible_by x tp (`_vocab_size_with_padding`)
    max_position_embeddings: int = 0  # 0: seq_len
    make_vocab_size_divisible_by: int = 128
    flash_attention: bool = True       # no s x s attention scores kept for backward (memory model)

    @property
    def bytes_per_elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def positions(self) -> int:
        """Rows of the learned position table (0 without one)."""
        return (self.max_position_embeddings or self.seq_len) if self.position_embeddings else 0

    def padded_vocab(self, tp: int = 1) -> int:
        """Megatron's `_vocab_size_with_padding`: V rounded up to a multiple of 128·tp."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab // multiple) * multiple

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def moe_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn

    @property
    def dhead(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.experts > 0 and layer >= self.first_k_dense

    @property
    def moe_layers(self) -> int:
        return max(0, self.layers - self.first_k_dense) if self.experts else 0

    @property
    def kv_elems_per_token(self) -> int:
        """K and V elements per token that context parallelism passes around the ring.

        MLA: K and V are up-projected per head before attention (heads x (qk + rope) and heads x v).
        """
        if self.mla:
            return self.heads * (self.dhead + self.rope_head_dim + (self.v_head_dim or self.dhead))
        return 2 * (self.kv_heads or self.heads) * self.dhead


@dataclass(frozen=True)
class Parallelism:
    dp: int = 2
    tp: int = 2
    pp: int = 2
    micro_batch: int = 1         # b
    global_batch: int = 8        # sequences per iteration over all DP replicas
    dp_bucket_bytes: int = 25 * 1000 * 1000   # DDP / Megatron gradient bucket (25 MB default)
    grad_dtype: str = ""         # "": Megatron's rule (fp32 for bf16 models, else the model dtype)
    sp: bool = False             # Megatron sequence parallelism: TP AllReduce -> AllGather + ReduceScatter
    cp: int = 1                  # context parallelism (ring attention over sequence chunks)
    ep: int = 1                  # expert parallelism (Megatron-core's expert grid: etp-ep-edp-pp)
    expert_tp: int = 0           # expert tensor parallelism (--expert-tensor-parallel-size); 0: = tp
    zero: int = 0                # ZeRO stage 0..3 (3 = FSDP)
    vpp: int = 1                 # virtual pipeline stages per rank (interleaved 1F1B)
    pp_scatter_gather: bool = False   # send 1/t of each activation, AllGather it over TP after
    recompute: str = "none"      # none | selective | full activation recomputation
    dp_overlap: bool = True      # release gradient buckets during backward (False: all after it)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def microbatches(self) -> int:
        """m: micro-batches per iteration per pipeline."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (Megatron-core's default: the attention TP size)."""
        return self.expert_tp or self.tp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: ranks of a stage / (etp·ep) (`initialize_model_parallel`)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)


def grad_elem_bytes(model: "Model", par: Parallelism) -> int:
    """Bytes per gradient element DP reduces. Megatron (arguments.py, bf16): gradients are
    accumulated and all-reduced in fp32 unless --grad-reduce-in-bf16; fp16/fp32 keep their dtype."""
    if par.grad_dtype:
        return DTYPE_BYTES[par.grad_dtype]
    return 4 if model.dtype == "bf16" else DTYPE_BYTES[model.dtype]


@dataclass(frozen=True)
class Cluster:
    name: str = "mini-h100"
    nodes: int = 0               # 0: world / gpus_per_node
    gpus_per_node: int = 2
    gpu: str = "h100"
    mfu: float = 0.4
    nic_gbps: int = 400          # one NIC per GPU, on its rail
    nvlink_gbps: int = 3600      # per GPU per direction (H100 NVLink4: 450 GB/s)
    nics_per_node: int = 0       # 0: one NIC per GPU; 1, 2, 4: GPUs share NICs (a rail per NIC)
    gpu_nic_map: str = ""        # "0,0,1,1,...": NIC of each GPU; "": GPU i -> NIC i // (gpus/nics)

    def node_count(self, world: int) -> int:
        return self.nodes or world // self.gpus_per_node

    @property
    def nics(self) -> int:
        return self.nics_per_node or self.gpus_per_node

    def nic_of_gpu(self) -> list[int]:
        if self.gpu_nic_map:
            return [int(x) for x in self.gpu_nic_map.split(",")]
        share = self.gpus_per_node // self.nics
        return [g // share for g in range(self.gpus_per_node)]


@dataclass(frozen=True)
class FabricConfig:
    """The switch fabric the NICs plug into (topology.py builds it; routing.py routes over it).

    kind: rail-optimised - two tiers, NIC i of each group of `nodes_per_leaf` nodes on the leaf of
                           rail i (NVIDIA DGX SuperPOD style); every leaf to every spine
          leaf-spine     - two tiers, ToR leaves: every NIC of a node on one leaf
          fat-tree       - three tiers, k-ary (pods of k/2 leaves and k/2 spines, (k/2)^2 cores)
          file           - switches and links listed in a topology YAML (`file`)
    `planes` > 1 splits each NIC into that many ports of nic_gbps / planes, each on its own copy
    of the fabric (multi-plane); a QP uses plane QPN mod planes.
    """
    name: str = ""
    kind: str = "rail-optimised"
    nodes_per_leaf: int = 16     # two-tier: nodes under one leaf (rail-optimised: per rail)
    spines: int = 2              # two-tier: spine count (every leaf has one uplink to each)
    k: int = 0                   # fat-tree radix (0: the smallest even k that holds every NIC)
    placement: str = ""          # fat-tree: node (a node's NICs on consecutive leaf ports) | rail
    leaf_spine_gbps: int = 0     # 0: nic_gbps / planes (or from `oversubscription`)
    spine_core_gbps: int = 0     # fat-tree spine(aggregation)-core links; 0: leaf_spine_gbps
    oversubscription: float = 0.0       # > 0: leaf uplink rate = leaf downlink Gb/s / (ratio x uplinks)
    core_oversubscription: float = 0.0  # fat-tree: the same for spine uplinks to the cores
    link_latency_ns: int = 1000  # per link: propagation + switching (NIC-leaf links)
    leaf_spine_latency_ns: int = -1     # -1: link_latency_ns
    spine_core_latency_ns: int = -1     # -1: link_latency_ns
    planes: int = 1
    ecmp_seed: int = 0           # seeds every switch's ECMP hash (routing.py)
    ecmp_hash: str = "5-tuple"   # 5-tuple | qp (BTH DestQP with the addresses; routing.py)
    file: str = ""               # kind=file: topology YAML (switches, links; see routing docs)


@dataclass(frozen=True)
class Nccl:
    algorithm: str = "ring"              # ring | tree | halving_doubling | hierarchical | auto
    channels: int = 2
    ring_msg_bytes: int = 1 << 20        # Simple protocol: 1 MiB slice per network message
    ring_chunk_bytes: int = 2 << 20      # Simple: 2 MiB chunk per ring step per loop
    p2p_chunk_bytes: int = 128 << 10     # send/recv network chunk
    qps_per_connection: int = 1
    protocol: str = "simple"             # simple | ll | ll128 | auto (NCCL_PROTO)
    simple_step_bytes: int = 512 << 10   # NCCL_BUFFSIZE / NCCL_STEPS: Tree chunk, Broadcast/Reduce chunk
    pxn: bool = True                     # a cross-rail send hops over NVLink to the sender node's GPU on the
                                         # destination's rail first (NCCL >= 2.12 default: rail-aligned)
    fifo_tc: int = -1                    # NCCL_IB_FIFO_TC: traffic class (DSCP << 2 | ECN) of the receiver's
                                         # QPs - its CTS and ACKs - in pcaps; -1: the data's (output.dscp)


@dataclass(frozen=True)
class Network:
    """Settings for the simulators (ns-3 export, `tracegen ns3 run`) and switch labs."""
    cc_mode: str = "dcqcn"       # dcqcn | hpcc | timely | dctcp | hpcc-pint
    kmin_bytes: int = 150_000    # ECN marking (DCQCN's RED) on a NIC-rate port; scales with rate
    kmax_bytes: int = 1_500_000
    pmax: float = 0.2
    pfc: bool = True
    buffer_bytes: int = 32 << 20  # per switch, shared by its ports
    # DCQCN reaction point: NVIDIA ConnectX firmware defaults (DOCA "DCQCN CC Parameters";
    # mlxconfig RPG_* / DCE_TCP_* / RATE_REDUCE_MONITOR_PERIOD / MIN_TIME_BETWEEN_CNPS), see
    # ns3_scenarios/dcqcn.h and the README's ns-3 section
    dcqcn_rate_ai_mbps: float = 5.0    # rpg_ai_rate; 0: 5 Mb/s per 25 Gb/s of NIC (HPCC's run.py)
    dcqcn_rate_hai_mbps: float = 50.0  # rpg_hai_rate; 0: 50 Mb/s per 25 Gb/s of NIC (HPCC's run.py)
    dcqcn_min_rate_mbps: float = 1.0   # rpg_min_rate
    dcqcn_g: float = 5 / 1024          # alpha's EWMA gain: 1 - dce_tcp_g / 1024, dce_tcp_g = 1019
    dcqcn_alpha_resume_us: float = 1.0  # alpha update period (dce_tcp_rtt)
    dcqcn_rate_decrease_us: float = 4.0  # at most one rate cut per period (rate_reduce_monitor_period)
    dcqcn_rp_timer_us: float = 300.0   # rate increase period (rpg_time_reset)
    dcqcn_byte_reset_bytes: int = 32767  # rate increase per bytes sent (rpg_byte_reset); 0: none (HPCC)
    dcqcn_fast_recovery: int = 1       # increase events of fast recovery before AI / HAI (rpg_threshold)
    dcqcn_per_message_reset: bool = False  # every message starts at line rate (HPCC, SimAI: a QP per flow)
    cnp_interval_us: float = 4.0       # notification point: <= 1 CNP per QP per interval (min_time_between_cnps)
    # PFC on the RoCE priority, per switch ingress port
    pfc_xoff_bytes: int = 0            # pause above this; 0: dynamic, 1/8 of the free buffer
    pfc_resume_offset_bytes: int = 3072  # resume at Xoff - offset (HPCC: 3 KB)
    pfc_headroom_bytes: int = 0        # reserved per port; 0: 3 x the link's bandwidth-delay
    pfc_pause_quanta: int = 65535      # PAUSE time in 512-bit-time quanta (refreshed at half)


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
    payload: str = "zero"        # zero | pattern | none (none: records end at the headers, orig_len real)
    ack_every: int = 0           # 0: one ACK per message (on the A bit); N: also every N packets
    # pcap budget and filters (emit/select.py): refuse writing more than max_bytes (0: no limit)
    max_bytes: int = 2 << 30
    time_window: str = ""        # "START_NS:END_NS": only packets starting in [START, END)
    nics: str = ""               # "0,3" or "node0001-rail0,...": only these NICs' files
    ranks: str = ""              # "0,5": only the files of the NICs these ranks use
    collectives: str = ""        # "dp,pp" (parallelism) or "allreduce,sendrecv" (kind): only their packets
    iteration: int = -1          # -1: every iteration
    # wire details
    qp_split: bool = False       # nccl.qps_per_connection > 1: False = whole messages round-robin over
                                 # the QPs (NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL's default); True = every
                                 # message split in 128 B-aligned parts, one per QP
    ip_version: int = 4          # 4 | 6 (RoCEv2 over IPv6: fd00::<IPv4 plan>)
    pkey: int = 0xFFFF           # BTH P_Key (0xFFFF: default partition, full member)
    # congestion artefacts (emit/congestion.py): CE marks on this fraction of data packets, and
    # the CNPs (<= 1 per QP per 4 us) the receivers send back
    ecn_mark_fraction: float = 0.0
    ecn_pattern: str = "random"  # random (seeded by ecn_seed) | periodic (every 1/fraction-th)
    ecn_seed: int = 0
    dcqcn: bool = False          # open-loop reaction: after a CNP the QP's later messages are paced at the
                                 # rate DCQCN gives it (parameters as the ns-3 export, network.cc_mode=dcqcn)
    # capture files and views (emit/capture_file.py, emit/views.py)
    format: str = "pcap"         # pcap (nanosecond) | pcapng (one interface block per NIC / port)
    comments: bool = False       # pcapng: per-packet comment naming collective, op, step, chunk
    merge: bool = False          # one merged file for the selected NICs instead of one per NIC
    switch: str = ""             # "leaf3" / "spine0": one file per port of that switch instead
    lab: str = ""                # lab plan YAML (emit/lab.py): one replayable pcap per tester port
    # tables and pictures (emit/flows.py, emit/tables_out.py, emit/perfetto.py, emit/plots.py)
    tables: str = "csv"          # flow + op tables: "csv", "parquet" (needs pyarrow) or "csv,parquet"
    perfetto: bool = True        # perfetto.json: the schedule as a Chrome trace (ui.perfetto.dev)
    pictures: bool = True        # gantt.png, traffic_matrix.png, timeline.png
    lab_gbps: int = 0            # > 0: testers of this rate - the whole trace is scheduled again with
                                 # NICs (and leaf-spine links, scaled alike) at it (--lab-rate 100G)


@dataclass(frozen=True)
class Job:
    name: str = "default"
    model: Model = field(default_factory=Model)
    parallelism: Parallelism = field(default_factory=Parallelism)
    cluster: Cluster = field(default_factory=Cluster)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    nccl: Nccl = field(default_factory=Nccl)
    network: Network = field(default_factory=Network)
    output: Output = field(default_factory=Output)
    iterations: int = 1
    seed: int = 0
    detail: str = "auto"     # schedule granularity: full (every chunk) | conn (per connection per op) | auto

    @property
    def world(self) -> int:
        return self.parallelism.world

    @property
    def nodes(self) -> int:
        return self.cluster.node_count(self.world)


# --- loading: YAML / preset / dict -> normalised dict -> Job ------------------------------------
# A "doc" is a partial job: {"name": .., "model": {field: value}, ...} holding canonical keys with
# checked values only; the dataclass defaults fill in the rest when the Job is built.

SECTIONS = {"model": Model, "parallelism": Parallelism, "cluster": Cluster, "fabric": FabricConfig,
            "nccl": Nccl,
            "network": Network, "output": Output}
_SCALARS = {"name": str, "iterations": int, "seed": int, "detail": str}
_PRESET_DIRS = {"model": "models", "cluster": "clusters", "fabric": "fabrics"}   # sections that may name a preset
_TOP_EXTRA = ("preset", "description")                      # job-level keys that are not Job fields

# Megatron-LM argument names (dashes as underscores), accepted as synonyms of ours.
ALIASES = {
    "parallelism": {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
                    "data_parallel_size": "dp", "micro_batch_size": "micro_batch",
                    "global_batch_size": "global_batch", "sequence_parallel": "sp",
                    "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
                    "virtual_pipeline_model_parallel_size": "vpp",
                    "recompute_granularity": "recompute", "zero_stage": "zero",
                    "expert_tensor_parallel_size": "expert_tp"},
    "model": {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
              "num_query_groups": "kv_heads", "ffn_hidden_size": "ffn_hidden",
              "seq_length": "seq_len", "padded_vocab_size": "vocab", "vocab_size": "vocab",
              "num_experts": "experts", "moe_router_topk": "top_k",
              "moe_ffn_hidden_size": "moe_ffn_hidden", "kv_channels": "head_dim",
              "use_flash_attn": "flash_attention"},
}


# Keys that moved to another section and stay accepted where they were (old job files, cluster
# presets): cluster.nodes_per_leaf -> fabric.nodes_per_leaf, and so on.
MOVED = {"cluster": {k: "fabric" for k in ("nodes_per_leaf", "spines", "leaf_spine_gbps",
                                           "link_latency_ns")}}


def _field_types(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)   # annotations are strings under `from __future__`
    return {f.name: hints[f.name] for f in fields(cls)}


_TYPES = {sec: _field_types(cls) for sec, cls in SECTIONS.items()}

# Per-key rules, checked before any work is done. Every integer and float key has a range
# (docs/limits.md is rendered from these tables: `python -m tracegen.config --limits`):
#   _POSITIVE  integers that must be >= 1 (their upper bound: _RANGES, else _INT_MAX);
#   _RANGES    key -> (lo, hi) or (lo, hi, why), inclusive. `why` says where the bound comes from;
#   other integers must be 0.._INT_MAX, other floats finite and 0.._FLOAT_MAX.
# A new key slots in by adding a row (tests/test_bad_input.py checks every key has one).
_POSITIVE = {
    "iterations",
    "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
    "parallelism.dp", "parallelism.tp", "parallelism.pp", "parallelism.micro_batch",
    "parallelism.global_batch", "parallelism.dp_bucket_bytes", "parallelism.cp", "parallelism.ep",
    "parallelism.vpp", "model.top_k", "model.make_vocab_size_divisible_by",
    "cluster.gpus_per_node", "cluster.nic_gbps", "cluster.nvlink_gbps", "fabric.nodes_per_leaf",
    "fabric.spines", "fabric.planes",
    "nccl.channels", "nccl.ring_msg_bytes", "nccl.ring_chunk_bytes", "nccl.p2p_chunk_bytes",
    "nccl.qps_per_connection", "nccl.simple_step_bytes",
    "network.kmax_bytes", "network.buffer_bytes",
}
_K, _M, _G, _T = 1 << 10, 1 << 20, 1 << 30, 1 << 40
_RANGES = {
    "iterations": (1, 1000, "training iterations traced in one run"),
    "seed": (0, 2**32 - 1, "32-bit seed"),
    "model.layers": (1, 10_000, "transformer layers (the largest models have ~100)"),
    "model.hidden": (1, _M, "hidden size"),
    "model.heads": (1, 65_536, "attention heads"),
    "model.kv_heads": (0, 65_536, "query groups; 0: same as heads"),
    "model.ffn_hidden": (0, 4 * _M, "MLP width; 0: 4 x hidden"),
    "model.vocab": (1, 16 * _M, "vocabulary size"),
    "model.seq_len": (1, 16 * _M, "tokens per sequence"),
    "model.head_dim": (0, 65_536, "0: hidden / heads"),
    "model.experts": (0, 65_536, "routed experts per MoE layer"),
    "model.top_k": (1, 1024, "experts per token"),
    "model.moe_ffn_hidden": (0, 4 * _M, "expert MLP width; 0: ffn_hidden"),
    "model.shared_experts": (0, 1024, "always-on experts"),
    "model.first_k_dense": (0, 10_000, "leading dense layers"),
    "model.capacity_factor": (0.001, 64.0, "dispatch buffer over even routing"),
    "model.q_lora_rank": (0, _M, "MLA query rank"),
    "model.kv_lora_rank": (0, _M, "MLA key/value rank"),
    "model.rope_head_dim": (0, 65_536, "MLA decoupled RoPE width"),
    "model.v_head_dim": (0, 65_536, "0: head_dim"),
    "model.max_position_embeddings": (0, 16 * _M, "rows of a learned position table; 0: seq_len"),
    "model.make_vocab_size_divisible_by": (1, 65_536, "vocabulary padding multiple (x tp)"),
    "parallelism.dp": (1, _M, "data-parallel replicas"),
    "parallelism.tp": (1, 1024, "tensor-parallel ranks"),
    "parallelism.pp": (1, 1024, "pipeline stages"),
    "parallelism.micro_batch": (1, 65_536, "sequences per micro-batch"),
    "parallelism.global_batch": (1, 16 * _M, "sequences per iteration"),
    "parallelism.dp_bucket_bytes": (1, 1 << 50, "gradient bucket (huge: one bucket per stage)"),
    "parallelism.cp": (1, 1024, "context-parallel ranks"),
    "parallelism.ep": (1, 65_536, "expert-parallel ranks"),
    "parallelism.expert_tp": (0, 1024, "expert tensor-parallel ranks; 0: tp"),
    "parallelism.zero": (0, 3, "ZeRO stage"),
    "parallelism.vpp": (1, 1024, "model chunks per pipeline rank"),
    "cluster.nodes": (0, _M, "0: world / gpus_per_node"),
    "cluster.gpus_per_node": (1, 1024, "GPUs per node (an NVLink domain)"),
    "cluster.mfu": (0.001, 1.0, "model FLOPs utilisation, a fraction of peak"),
    "cluster.nic_gbps": (1, 1_000_000, "Gb/s per NIC (today's NICs: 100-800)"),
    "cluster.nvlink_gbps": (1, 1_000_000, "Gb/s per GPU per direction (NVLink5: 7,200)"),
    "fabric.nodes_per_leaf": (1, _M, "nodes under one leaf (rail-optimised: per rail)"),
    "fabric.spines": (1, 65_536, "spine switches (two-tier)"),
    "fabric.k": (0, 1024, "fat-tree radix; 0: the smallest even k that holds every NIC"),
    "fabric.leaf_spine_gbps": (0, 10_000_000, "Gb/s per leaf-spine link; 0: from oversubscription or the NIC port"),
    "fabric.spine_core_gbps": (0, 10_000_000, "Gb/s per spine-core link; 0: from core_oversubscription or leaf-spine"),
    "fabric.oversubscription": (0.0, 1000.0, "leaf downlink : uplink Gb/s; 0: use leaf_spine_gbps"),
    "fabric.core_oversubscription": (0.0, 1000.0, "spine downlink : uplink Gb/s (fat-tree)"),
    "fabric.link_latency_ns": (0, 100_000_000, "ns per link (100 ms: 20,000 km of fibre)"),
    "fabric.leaf_spine_latency_ns": (-1, 100_000_000, "-1: link_latency_ns"),
    "fabric.spine_core_latency_ns": (-1, 100_000_000, "-1: link_latency_ns"),
    "fabric.planes": (1, 16, "independent fabric planes per NIC"),
    "fabric.ecmp_seed": (0, 2**32 - 1, "seeds every switch's ECMP hash"),
    "cluster.nics_per_node": (0, 1024, "0: one NIC per GPU"),
    "nccl.channels": (1, 64, "NCCL's MAXCHANNELS"),
    "nccl.ring_msg_bytes": (256, _G, "network message of the Simple protocol"),
    "nccl.ring_chunk_bytes": (1 * _K, _G, "ring chunk per step"),
    "nccl.p2p_chunk_bytes": (1 * _K, _G, "send/recv network chunk"),
    "nccl.qps_per_connection": (1, 128, "NCCL_IB_QPS_PER_CONNECTION"),
    "nccl.simple_step_bytes": (1 * _K, _G, "NCCL_BUFFSIZE / NCCL_STEPS"),
    "network.kmin_bytes": (0, 64 * _G, "ECN marking starts"),
    "network.kmax_bytes": (1, 64 * _G, "ECN marking at pmax"),
    "network.pmax": (0.0, 1.0, "a probability"),
    "network.dcqcn_g": (0.0, 1.0, "DCQCN alpha gain"),
    "network.dcqcn_rate_ai_mbps": (0.0, 1e6, "DCQCN additive increase; 0: 5 Mb/s per 25 Gb/s of NIC"),
    "network.dcqcn_rate_hai_mbps": (0.0, 1e6, "DCQCN hyper increase; 0: 50 Mb/s per 25 Gb/s of NIC"),
    "network.dcqcn_min_rate_mbps": (0.001, 1e7, "DCQCN rate floor"),
    "network.dcqcn_alpha_resume_us": (0.001, 1e6, "alpha update period"),
    "network.dcqcn_rate_decrease_us": (0.001, 1e6, "at most one rate cut per period"),
    "network.dcqcn_rp_timer_us": (0.001, 1e6, "rate increase period"),
    "network.dcqcn_fast_recovery": (0, 1000, "fast-recovery periods before AI / HAI"),
    "network.dcqcn_byte_reset_bytes": (0, _G, "bytes sent per rate increase; 0: timer only"),
    "network.cnp_interval_us": (0.0, 1e6, "<= 1 CNP per QP per interval"),
    "network.pfc_xoff_bytes": (0, _T, "pause above; 0: dynamic (1/8 of the free buffer)"),
    "network.pfc_resume_offset_bytes": (0, _G, "resume at Xoff - offset"),
    "network.pfc_headroom_bytes": (0, _G, "per port; 0: 3 x the link's bandwidth-delay"),
    "network.pfc_pause_quanta": (1, 65535, "PAUSE time in 512-bit quanta"),
    "network.buffer_bytes": (1, _T, "switch buffer"),
    "output.vlan_id": (1, 4094, "802.1Q VID"),
    "output.pcp": (0, 7, "802.1Q priority"),
    "output.dscp": (0, 63, "6-bit DSCP"),
    "output.ecn": (0, 3, "2-bit ECN"),
    "output.snaplen": (0, 262_144, "libpcap's largest snaplen; 0: whole frames"),
    "output.ack_every": (0, 16 * _M, "packets per coalesced ACK; 0: one per message"),
    "output.max_bytes": (0, 1 << 50, "pcap budget; 0: no limit"),
    "output.iteration": (-1, 999, "-1: every iteration (else < iterations)"),
    "output.pkey": (1, 0xFFFF, "16-bit BTH P_Key"),
    "output.ecn_mark_fraction": (0.0, 1.0, "a fraction of data packets"),
    "output.ecn_seed": (0, 2**32 - 1, "32-bit seed"),
    "output.lab_gbps": (0, 1_000_000, "testers' rate; 0: the NICs'"),
    "nccl.fifo_tc": (-1, 255, "NCCL_IB_FIFO_TC; -1: the data's"),
}
_INT_MAX = 2**31 - 1        # integers without a row of their own
_FLOAT_MAX = 1e9
_STR_MAX = 65_536           # characters in any string key
_NAME_MAX = 100             # characters in a job name (it names folders and files)
_WORLD_MAX = 1 << 20        # GPUs: dp x tp x pp x cp
_CHOICES = {
    "model.dtype": tuple(DTYPE_BYTES),
    "fabric.kind": ("rail-optimised", "leaf-spine", "fat-tree", "file"),
    "fabric.ecmp_hash": ("5-tuple", "qp"),
    "detail": ("auto", "full", "conn"),
    "fabric.placement": ("", "node", "rail"),
    "parallelism.grad_dtype": ("",) + tuple(DTYPE_BYTES),
    "cluster.gpu": tuple(GPU_PEAK_TFLOPS),
    "parallelism.recompute": ("none", "selective", "full"),
    "nccl.algorithm": ("ring", "tree", "halving_doubling", "hierarchical", "auto"),
    "nccl.protocol": ("simple", "ll", "ll128", "auto"),
    "network.cc_mode": ("dcqcn", "hpcc", "timely", "dctcp", "hpcc-pint"),
    "output.pmtu": (256, 512, 1024, 2048, 4096),   # IB MTUs: RoCE has no other
    "output.payload": ("zero", "pattern", "none"),
    "output.ip_version": (4, 6),
    "output.ecn_pattern": ("random", "periodic"),
    "output.format": ("pcap", "pcapng"),
}
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")   # becomes a directory name under traces/
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _show(value: Any) -> str:
    if value is None:
        return "null (leave the key out to keep the default)"
    return show(value)


def show_path(path: Any) -> str:
    """A path as the user wrote it, or its repr when it holds newlines or other control
    characters (a message stays one line)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def show(value: Any, limit: int = 60) -> str:
    """A repr of at most ~`limit` characters that never walks more of `value` than it prints:
    safe on alias bombs (10^9 shared leaves), deep nesting and 10^5-digit integers."""
    out: list[str] = []
    budget = [limit]

    def put(text: str) -> bool:
        out.append(text[:max(budget[0], 0)])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(v: Any, depth: int) -> bool:
        if isinstance(v, bool) or v is None or isinstance(v, float):
            return put(repr(v))
        if isinstance(v, int):
            if abs(v) < 10**18:
                return put(repr(v))
            return put(f"<a {int(v.bit_length() * 0.30103) + 1}-digit integer>")
        if isinstance(v, (str, bytes)):
            return put(repr(v[:limit + 1]))
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            if depth > 3:
                return put("...")
            opener, closer = {dict: "{}", list: "[]", tuple: "()"}.get(type(v), "{}")
            if not put(opener):
                return False
            items = v.items() if isinstance(v, dict) else v
            for k, item in enumerate(items):
                if k and not put(", "):
                    return False
                if isinstance(v, dict):
                    if not (walk(item[0], depth + 1) and put(": ") and walk(item[1], depth + 1)):
                        return False
                elif not walk(item, depth + 1):
                    return False
            return put(closer)
        return put(repr(v)[:limit + 1])

    if walk(value, 0):
        return "".join(out)
    return "".join(out)[:max(limit - 3, 1)] + "..."


def _check_type(path: str, value: Any, typ: type) -> Any:
    # bool is an int subclass and YAML turns `yes` into True: never let one pass for the other.
    is_bool = isinstance(value, bool)
    ok = (typ is bool and is_bool) or (typ is str and isinstance(value, str)) \
        or (typ is int and isinstance(value, int) and not is_bool) \
        or (typ is float and isinstance(value, (int, float)) and not is_bool)
    if not ok:
        raise ConfigError(f"{path}: expected {_TYPE_WORDS[typ]}, got {_show(value)}")
    if typ is float:
        try:
            value = float(value)
        except OverflowError:        # an integer beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {_show(value)}")
    if typ is str and len(value) > _STR_MAX:
        raise ConfigError(f"{path}: a string of {len(value):,} characters; at most {_STR_MAX:,}")
    return value


def bounds(rule: str, typ: type = int) -> tuple:
    """(lo, hi) accepted for a numeric key (canonical 'section.key')."""
    if rule in _RANGES:
        return _RANGES[rule][:2]
    if typ is float:
        return 0.0, _FLOAT_MAX
    return (1 if rule in _POSITIVE else 0), _INT_MAX


def _check_value(path: str, value: Any, typ: type, rule: str | None = None) -> Any:
    """Type and range of one key; `path` is what the user wrote, `rule` its canonical name."""
    rule = rule or path
    value = _check_type(path, value, typ)
    if rule in _CHOICES:
        if value not in _CHOICES[rule]:
            accepted = ", ".join(repr(c) for c in _CHOICES[rule])
            raise ConfigError(f"{path}: {show(value)} is not accepted — use one of {accepted}")
    elif typ in (int, float):
        lo, hi = bounds(rule, typ)
        if not lo <= value <= hi:
            why = _RANGES[rule][2] if len(_RANGES.get(rule, ())) > 2 else ""
            why = f" ({why})" if why else ""
            if typ is int and value < min(lo, 1) and ((rule in _POSITIVE) or (lo == 0 and hi > 1024)):
                raise ConfigError(f"{path}: must be {'a positive integer' if lo else '>= 0'}, got {show(value)}")
            if value > hi and lo in (0, 1):
                raise ConfigError(f"{path}: must be at most {_num(hi)}{why}, got {show(value)}")
            raise ConfigError(f"{path}: must be in {_num(lo)}..{_num(hi)}{why}, got {show(value)}")
    if rule == "name" and not _JOB_NAME.fullmatch(value):
        raise ConfigError(f"name: {show(value)} is not usable as a directory name — "
                          "use letters, digits, '.', '_' and '-'")
    if rule == "name" and len(value) > _NAME_MAX:
        raise ConfigError(f"name: {len(value)} characters; a job name names folders and files, "
                          f"use at most {_NAME_MAX}")
    if rule in ("output.dir", "output.lab") and "\0" in value:
        raise ConfigError(f"{path}: a path cannot contain a NUL character")
    if rule == "output.time_window" and value:
        parse_time_window(value)
    return value


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def parse_time_window(text: str) -> tuple[int, int]:
    """'START_NS:END_NS' (either side may be empty) -> [start, end), 0 <= start < end < 2^63."""
    a, sep, b = text.partition(":")
    window = None
    if sep:
        a, b = a.strip(), b.strip()
        start = small_int(a, 19) if a else 0
        end = small_int(b, 19) if b else 2**63 - 1
        if start is not None and end is not None:
            window = (start, end)
    if window is None or not 0 <= window[0] < window[1] <= 2**63 - 1:
        raise ConfigError(f"output.time_window={show(text)}: use START_NS:END_NS with "
                          "0 <= START < END < 2^63 (integer ns, either side may be left empty)")
    return window


def small_int(text: str, digits: int = 9) -> int | None:
    """The integer in `text` if it is 1..`digits` ASCII digits (no sign, no spaces), else None.
    (str.isdigit() also accepts '²', which int() refuses; long strings cost quadratic time.)"""
    if 0 < len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def _keys(sec: str) -> list[str]:
    """Keys accepted in a section ('' = the job's top level), canonical names first."""
    if not sec:
        return [*_SCALARS, *SECTIONS, *_TOP_EXTRA]
    extra = ["preset"] if sec in _PRESET_DIRS else []
    return [*_TYPES[sec], *ALIASES.get(sec, {}), *extra]


def _unknown(sec: str, key: Any) -> ConfigError:
    """An unknown key `key` in section `sec` ('' = top level); `key` may be any YAML key."""
    text = key if isinstance(key, str) and key.isprintable() else show(key, 40)
    path = f"{sec}.{text}" if sec else text
    if isinstance(key, str) and key.isprintable() and len(key) > 60:
        path = f"{sec}.{key[:57]}..." if sec else key[:57] + "..."
    # A key valid in another section is the likeliest slip (seq_len under parallelism).
    homes = [s for s in SECTIONS if s != sec and text in _keys(s) and text not in ("name", "preset")]
    if homes:
        hint = f"did you mean '{homes[0]}.{text}'?"
    elif sec and text in _SCALARS:
        hint = f"'{text}' belongs at the top level of the job"
    else:
        close = difflib.get_close_matches(text[:100], _keys(sec), n=1)
        if close:
            hint = f"did you mean '{sec + '.' if sec else ''}{close[0]}'?"
        else:
            valid = _keys(sec) if not sec else list(_TYPES[sec])
            hint = "valid keys: " + ", ".join(valid)
    return ConfigError(f"unknown key '{path}' — {hint}")


def _section_fields(sec: str, mapping: dict) -> dict:
    """A section's keys -> canonical names with checked values."""
    aliases, out, given = ALIASES.get(sec, {}), {}, {}
    for key, value in mapping.items():
        home = MOVED.get(sec, {}).get(key)
        if home:   # carried to its section by _merge_job, checked by that section's rules
            out[f"@{home}.{key}"] = _check_value(f"{sec}.{key}", value, _TYPES[home][key], f"{home}.{key}")
            continue
        name = aliases.get(key, key)
        if name not in _TYPES[sec]:
            raise _unknown(sec, key)
        if name in given:
            raise ConfigError(f"{sec}: both '{given[name]}' and '{key}' set "
                              f"{sec}.{name} — keep one")
        given[name] = key
        out[name] = _check_value(f"{sec}.{key}", value, _TYPES[sec][name], f"{sec}.{name}")
    return out


def _merge_section(sec: str, base: dict, value: Any, stack: tuple = ()) -> dict:
    """A preset name replaces the section; a mapping overlays it (after its own `preset:`)."""
    if isinstance(value, str) and sec in _PRESET_DIRS:
        return _preset_section(sec, value, stack)
    if not isinstance(value, dict):
        want = "a mapping or a preset name" if sec in _PRESET_DIRS else "a mapping"
        raise ConfigError(f"{sec}: expected {want}, got {_show(value)}")
    value = dict(value)
    out = dict(base)
    if sec in _PRESET_DIRS and "preset" in value:
        out = _preset_section(sec, value.pop("preset"), stack)
    out.update(_section_fields(sec, value))
    return out


def _merge_job(base: dict, doc: Any, stack: tuple = ()) -> dict:
    """Overlay a job mapping on a doc: a top-level `preset:` first, then section by section."""
    if not isinstance(doc, dict):
        raise ConfigError(f"a job must be a mapping of keys, got {_show(doc)}")
    out = _preset_job(doc["preset"], stack) if "preset" in doc else dict(base)
    for key, value in doc.items():
        if key in SECTIONS:
            out[key] = _merge_section(key, out.get(key, {}), value, stack)
            _carry_moved(out, key)
        elif key in _SCALARS:
            out[key] = _check_value(key, value, _SCALARS[key])
        elif key not in _TOP_EXTRA:
            raise _unknown("", key)
    return out


def _carry_moved(doc: dict, sec: str) -> None:
    """Move a section's `@home.key` entries (moved keys, see MOVED) into section `home`."""
    moved = [k for k in doc[sec] if k.startswith("@")]
    if not moved:
        return
    doc[sec] = dict(doc[sec])
    for k in moved:
        home, _, key = k[1:].partition(".")
        doc[home] = {**doc.get(home, {}), key: doc[sec].pop(k)}


# --- presets (package data, read through importlib.resources so an installed wheel works) ----

def _preset_dir(kind: str):
    return resources.files("tracegen") / "presets" / kind


def _preset_names(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".yaml"))


def _read_preset(kind: str, name: Any, stack: tuple) -> dict:
    names = _preset_names(kind)
    what = kind[:-1]    # "models" -> "model"
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(name[:100], names, n=1) if isinstance(name, str) else []
        hint = f"did you mean '{close[0]}'?" if close else "available: " + ", ".join(names)
        raise ConfigError(f"unknown {what} preset {show(name)} — {hint}")
    if (kind, name) in stack:
        raise ConfigError(f"{what} preset '{name}' includes itself")
    where = f"preset {kind}/{name}.yaml"
    doc = _parse_yaml((_preset_dir(kind) / f"{name}.yaml").read_text("utf-8"), where)
    doc.pop("description", None)
    return doc


def _preset_section(sec: str, name: Any, stack: tuple) -> dict:
    kind = _PRESET_DIRS[sec]
    doc = _read_preset(kind, name, stack)
    doc.setdefault("name", name)
    return _merge_section(sec, {}, doc, stack + ((kind, name),))


def _preset_job(name: Any, stack: tuple = ()) -> dict:
    doc = _read_preset("jobs", name, stack)
    out = _merge_job({}, doc, stack + (("jobs", name),))
    out.setdefault("name", name)
    return out


def list_presets() -> dict[str, list[tuple[str, str]]]:
    """{"jobs"|"models"|"clusters"|"fabrics": [(name, one-line description)]}, sorted by name."""
    def describe(kind: str, name: str) -> str:
        text = (_preset_dir(kind) / f"{name}.yaml").read_text("utf-8")
        desc = _parse_yaml(text, f"preset {kind}/{name}.yaml").get("description", "")
        return " ".join(str(desc).split())
    return {kind: [(n, describe(kind, n)) for n in _preset_names(kind)]
            for kind in ("jobs", "models", "clusters", "fabrics")}


# --- YAML --------------------------------------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys: YAML silently keeps the last one, hiding typos."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":   # `<<:` keys may repeat by design
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, typing.Hashable):   # unhashable keys: construct_mapping reports them
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {show(key)}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


YAML_MAX_BYTES = 256 << 10      # a job file or lab plan is a few hundred bytes
YAML_MAX_DEPTH = 32             # nested mappings / sequences
YAML_MAX_VALUES = 100_000       # values after expanding aliases (an alias bomb has 10^9)


def _check_shape(text: str, where: str) -> None:
    """Depth and alias-expanded size from the event stream, before anything is constructed."""
    stack: list[list] = [[None, 0]]          # [anchor, values] per open collection
    sizes: dict[str, int] = {}                # anchor -> values it expands to
    parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for ev in yaml.parse(text, Loader=parser):
        if isinstance(ev, yaml.CollectionStartEvent):
            stack.append([ev.anchor, 1])
            if len(stack) - 1 > YAML_MAX_DEPTH:
                line = ev.start_mark.line + 1 if ev.start_mark else 0
                raise ConfigError(f"{where}:{line}: nested more than {YAML_MAX_DEPTH} levels deep; "
                                  "a job needs 2")
            continue
        if isinstance(ev, yaml.CollectionEndEvent):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
        elif isinstance(ev, yaml.AliasEvent):
            anchor, n = None, sizes.get(ev.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        if stack[-1][1] > YAML_MAX_VALUES:
            raise ConfigError(f"{where}: expands to more than {YAML_MAX_VALUES:,} values "
                              "(YAML aliases referring to aliases?); a job needs a few dozen")


def _parse_yaml(text: str, where: str) -> dict:
    doc = _load_yaml(text, where)
    if not isinstance(doc, dict):
        got = "an empty file" if doc is None else f"a {type(doc).__name__}"
        raise ConfigError(f"{where}: expected a mapping of keys (model:, parallelism:, ...), "
                          f"got {got}")
    return doc


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def _load_yaml(text: str, where: str) -> Any:
    """Any YAML document, checked for size, depth and alias expansion before it is built."""
    if len(text) > YAML_MAX_BYTES:
        raise ConfigError(f"{where}: {len(text):,} characters; YAML input is capped at "
                          f"{YAML_MAX_BYTES:,} (a job file needs a few hundred)")
    try:
        _check_shape(text, where)
        doc = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}{line}: not valid YAML ({_clip(problem, 120)})") from None
    except (ValueError, OverflowError) as e:      # a 5,000-digit integer, 2001-02-30, ...
        raise ConfigError(f"{where}: a value YAML cannot read ({_clip(e, 100)})") from None
    except RecursionError:                       # _check_shape makes this unreachable; kept as a net
        raise ConfigError(f"{where}: nested too deeply") from None
    return doc


def read_yaml_file(path: str | Path, what: str = "job file") -> dict:
    """A YAML mapping from a file: size-capped before reading on, UTF-8, strict (duplicate keys,
    depth, aliases), every problem a ConfigError naming the file."""
    path = Path(path)
    shown = show_path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(YAML_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: no such {what}") from None
    except IsADirectoryError:
        raise ConfigError(f"{shown}: is a folder; give the path of a YAML {what}") from None
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read {what} ({e.strerror or e.__class__.__name__})") from None
    if len(data) > YAML_MAX_BYTES:
        raise ConfigError(f"{shown}: larger than {YAML_MAX_BYTES >> 10} KiB; a {what} needs a few "
                          "hundred bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{shown}: not UTF-8 at byte offset {e.start} (byte 0x{data[e.start]:02x}); "
                          f"save the {what} as UTF-8") from None
    return _parse_yaml(text, shown)


def _read_yaml(path: str | Path) -> dict:
    return read_yaml_file(path, "job file")


# --- --set overrides ---------------------------------------------------------------------------

def _set_fragment(item: str) -> dict:
    """'parallelism.dp=4' -> {"parallelism": {"dp": 4}}; the value is a YAML scalar."""
    key, eq, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    if not eq or not key:
        raise ConfigError(f"--set {show(item)}: expected KEY=VALUE, e.g. parallelism.dp=4")
    sec, dot, name = key.partition(".")
    if dot and sec not in SECTIONS:
        raise _unknown("", sec)
    if dot and (not name or "." in name):
        raise ConfigError(f"unknown key '{key}' — use SECTION.KEY, e.g. model.seq_len")
    typ = _TYPES[sec].get(ALIASES.get(sec, {}).get(name, name)) if dot else _SCALARS.get(key)
    value = raw if typ is str or not raw else _yaml_scalar(item, raw)
    if not dot and key in SECTIONS and not isinstance(value, dict):
        value = raw   # `model=llama3-8b`: a preset name, never a number
    return {sec: {name: value}} if dot else {key: value}


def _yaml_scalar(item: str, raw: str) -> Any:
    try:
        return _load_yaml(raw, "--set")
    except ConfigError:
        raise ConfigError(f"--set {show(item)}: value is not valid YAML") from None


def _apply_sets(doc: dict, sets: Sequence[str]) -> dict:
    for item in sets:
        try:
            doc = _merge_job(doc, _set_fragment(item))
        except ConfigError as e:
            msg = str(e)
            msg = msg if msg.startswith("--set") else f"--set {show(item)}: {msg}"
            raise ConfigError(msg) from None
    return doc


# --- public API --------------------------------------------------------------------------------

def load_job(path: str | Path | None = None, preset: str | None = None,
             sets: Sequence[str] = ()) -> Job:
    """A job from a YAML file, a job preset, or the built-in default; `sets` are applied last."""
    if path is not None and preset is not None:
        raise ConfigError("give a job file or a preset, not both")
    if isinstance(sets, str):   # a lone "a=b" would otherwise be iterated letter by letter
        sets = [sets]
    if path is not None:
        raw = _read_yaml(path)
        try:
            doc = _unset_degrees_are_one(_merge_job({}, raw), raw)
        except ConfigError as e:
            raise ConfigError(f"{show_path(path)}: {e}") from None
        if "name" not in raw:   # the file's stem, made safe as a directory name
            doc["name"] = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).stem).strip("-.") or "job"
    elif preset is not None:
        doc = _preset_job(preset)
    else:
        doc = {}
    return _build(_apply_sets(doc, sets), "default")


def job_from_dict(d: dict, name: str = "job") -> Job:
    """A job from a mapping shaped like a job file; `name` unless the mapping has one."""
    doc = _unset_degrees_are_one(_merge_job({}, d), d)
    if "name" not in d:
        doc["name"] = name
    return _build(doc, name)


DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp")
_ONE_WHEN_UNSET = ("pp", "cp", "ep", "vpp")


def _unset_degrees_are_one(doc: dict, raw: dict) -> dict:
    """A job that names some parallel degrees gets 1 for the pp, cp, ep, vpp it leaves out, unless
    a preset it names sets them: `{tp: 8, dp: 2}` means pp=1, not the built-in default job's pp=2.
    dp and tp keep the built-in 2 when left out; a job that names no degree keeps every built-in
    default (the default job: dp=tp=pp=2)."""
    par = raw.get("parallelism") if isinstance(raw, dict) else None
    if not isinstance(par, dict):
        return doc
    aliases = ALIASES["parallelism"]
    if not any(aliases.get(k, k) in DEGREES for k in par):
        return doc
    doc = dict(doc)
    doc["parallelism"] = {**{d: 1 for d in _ONE_WHEN_UNSET}, **doc.get("parallelism", {})}
    return doc


def job_to_dict(job: Job) -> dict:
    """Every key, canonical names: job_from_dict(job_to_dict(j)) == j."""
    out: dict[str, Any] = {k: getattr(job, k) for k in _SCALARS}
    out.update({sec: dataclasses.asdict(getattr(job, sec)) for sec in SECTIONS})
    return out


def _build(doc: dict, name: str) -> Job:
    scalars = {k: doc[k] for k in _SCALARS if k in doc}
    scalars.setdefault("name", name)
    sections = {sec: cls(**doc.get(sec, {})) for sec, cls in SECTIONS.items()}
    return validate(Job(**scalars, **sections))


def validate(job: Job) -> Job:
    """Check every key and the rules between keys; returns the job, raises ConfigError."""
    for key, typ in _SCALARS.items():
        _check_value(key, getattr(job, key), typ)
    for sec in SECTIONS:
        part = getattr(job, sec)
        for key, typ in _TYPES[sec].items():
            _check_value(f"{sec}.{key}", getattr(part, key), typ)
    _check_model(job.model)
    _check_sharding(job.model, job.parallelism)
    _check_moe(job.model)
    _check_parallel_features(job.model, job.parallelism)
    _check_world(job.parallelism, job.cluster)
    _check_network(job.network)
    _check_nics(job.cluster)
    _check_tables(job.output)
    _check_output(job)
    return job


def _check_output(job: Job) -> None:
    it = job.output.iteration
    if it >= job.iterations:
        have = "iteration 0" if job.iterations == 1 else f"iterations 0..{job.iterations - 1}"
        raise ConfigError(f"output.iteration={it}: this job has {have} (iterations={job.iterations}); "
                          "pick one of those, -1 for all, or raise iterations")


TABLE_FORMATS = ("csv", "parquet")


def table_formats(out: Output) -> list[str]:
    """output.tables as a list, in TABLE_FORMATS order."""
    given = {x.strip().lower() for x in out.tables.split(",") if x.strip()}
    return [f for f in TABLE_FORMATS if f in given]


def _check_tables(out: Output) -> None:
    given = [x.strip().lower() for x in out.tables.split(",") if x.strip()]
    bad = [x for x in given if x not in TABLE_FORMATS]
    if bad or not given:
        raise ConfigError(f"output.tables={out.tables!r}: use csv, parquet or csv,parquet")
    if "parquet" in given:
        import importlib.util
        if importlib.util.find_spec("pyarrow") is None:
            raise ConfigError("output.tables=parquet needs pyarrow, which is not installed: "
                              "pip install 'tracegen[parquet]', or set output.tables=csv")


def _check_model(m: Model) -> None:
    if m.hidden % m.heads:
        raise ConfigError(f"model.heads={m.heads} does not divide model.hidden={m.hidden}")
    if m.kv_heads and (m.kv_heads > m.heads or m.heads % m.kv_heads):
        raise ConfigError(f"model.kv_heads={m.kv_heads} does not divide model.heads={m.heads}")
    if m.position_embeddings and m.max_position_embeddings and m.max_position_embeddings < m.seq_len:
        raise ConfigError(f"model.max_position_embeddings={m.max_position_embeddings} is below "
                          f"model.seq_len={m.seq_len}; raise it (or 0 for seq_len)")


def _check_moe(m: Model) -> None:
    if not m.experts:
        return
    if m.top_k > m.experts:
        raise ConfigError(f"model.top_k={m.top_k} exceeds model.experts={m.experts}")
    if m.first_k_dense >= m.layers:
        raise ConfigError(f"model.first_k_dense={m.first_k_dense} leaves no MoE layer of "
                          f"model.layers={m.layers}; lower it or set model.experts=0")


def _check_parallel_features(m: Model, p: Parallelism) -> None:
    """SP, CP, EP, interleaving: the combinations Megatron accepts."""
    if p.sp and p.tp == 1:
        raise ConfigError("parallelism.sp=true needs parallelism.tp > 1 (sequence parallelism splits "
                          "the TP group's activations); set sp: false or raise tp")
    if p.cp > 1 and m.seq_len % (2 * p.cp):
        raise ConfigError(f"model.seq_len={m.seq_len} is not a multiple of 2·parallelism.cp = {2 * p.cp} "
                          "(load-balanced context parallelism gives each rank two chunks)")
    if p.ep > 1 and not m.experts:
        raise ConfigError(f"parallelism.ep={p.ep} needs a mixture-of-experts model (model.experts > 0)")
    if p.expert_tp and not m.experts:
        raise ConfigError(f"parallelism.expert_tp={p.expert_tp} needs a mixture-of-experts model "
                          "(model.experts > 0); leave it 0")
    if m.experts and m.experts % p.ep:
        raise ConfigError(f"parallelism.ep={p.ep} does not divide model.experts={m.experts}")
    stage = p.tp * p.cp * p.dp
    if m.experts and stage % (p.etp * p.ep):
        raise ConfigError(f"parallelism.expert_tp·ep = {p.etp}·{p.ep} does not divide the "
                          f"{stage} ranks of a pipeline stage (tp·cp·dp); change ep or expert_tp")
    if m.experts and m.moe_ffn % p.etp:
        raise ConfigError(f"parallelism.expert_tp={p.etp} does not divide the expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and m.shared_experts and m.moe_ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the shared-expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and p.tp > 1 and not p.sp:
        raise ConfigError("mixture-of-experts with tp > 1 needs parallelism.sp=true (Megatron-core's "
                          "token dispatcher takes sequence-parallel token shards); set sp: true")
    if p.vpp > 1:
        if p.pp == 1:
            raise ConfigError(f"parallelism.vpp={p.vpp} needs parallelism.pp > 1")
        if m.layers % (p.pp * p.vpp):
            raise ConfigError(f"parallelism.pp·vpp = {p.pp}·{p.vpp} does not divide model.layers={m.layers}")
        if p.microbatches % p.pp:
            raise ConfigError(f"interleaved 1F1B needs micro-batches ({p.microbatches}) to be a multiple "
                              f"of parallelism.pp={p.pp}; change global_batch")
    if p.pp_scatter_gather and p.pp == 1:
        raise ConfigError("parallelism.pp_scatter_gather=true needs parallelism.pp > 1")


def _check_sharding(m: Model, p: Parallelism) -> None:
    """Megatron's divisibility rules: TP splits heads, query groups, MLP; PP splits layers."""
    if m.heads % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.heads={m.heads}")
    if m.kv_heads and m.kv_heads % p.tp:   # each TP rank holds whole query groups
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.kv_heads={m.kv_heads}")
    if m.ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the MLP width {m.ffn} "
                          "(model.ffn_hidden)")
    if m.layers % p.pp:
        raise ConfigError(f"parallelism.pp={p.pp} does not divide model.layers={m.layers}")
    per_step = p.micro_batch * p.dp
    if p.global_batch % per_step:
        raise ConfigError(f"parallelism.global_batch={p.global_batch} is not a multiple of "
                          f"micro_batch·dp = {p.micro_batch}·{p.dp} = {per_step}")


def _check_world(p: Parallelism, c: Cluster) -> None:
    world, gpn = p.world, c.gpus_per_node
    sizes = (f"dp·tp·pp·cp = {p.dp}·{p.tp}·{p.pp}·{p.cp} = {world:,}" if p.cp > 1
             else f"dp·tp·pp = {p.dp}·{p.tp}·{p.pp} = {world:,}")
    if world > _WORLD_MAX:
        raise ConfigError(f"parallelism {sizes} GPUs; tracegen models at most {_WORLD_MAX:,}")
    if c.nodes and c.nodes * gpn != world:
        have = c.nodes * gpn
        grow, lower = ("grow", "lower") if have < world else ("shrink", "raise")
        cluster_fix = (f"{grow} the cluster (cluster.nodes={world // gpn})" if world % gpn == 0
                       else f"{grow} the cluster to {world} GPUs (cluster.nodes × cluster.gpus_per_node)")
        degrees = " or ".join(f"parallelism.{k}={v}" for k, v in _degree_fixes(p, have))
        degree_fix = f"{lower} a degree to fit {have} GPUs" + (f" ({degrees})" if degrees else "")
        raise ConfigError(f"cluster.nodes={c.nodes} × cluster.gpus_per_node={gpn} = "
                          f"{have} GPUs but parallelism {sizes} — {cluster_fix} or {degree_fix}")
    if not c.nodes and world % gpn:
        raise ConfigError(f"parallelism {sizes} GPUs not filling nodes of "
                          f"cluster.gpus_per_node={gpn} — make it a multiple of {gpn} "
                          f"or set cluster.gpus_per_node to a divisor of {world}")


def _degree_fixes(p: Parallelism, gpus: int) -> list[tuple[str, int]]:
    """Single-degree changes that make dp·tp·pp·cp equal `gpus` (pp first: the usual slip is the
    default pp=2 left in)."""
    out = []
    for k in ("pp", "dp", "tp", "cp"):
        v = getattr(p, k)
        rest = p.world // v
        if gpus % rest == 0 and gpus // rest != v:
            out.append((k, gpus // rest))
    return out[:2]


def _check_nics(c: Cluster) -> None:
    if c.nics_per_node and c.nics_per_node > c.gpus_per_node:
        raise ConfigError(f"cluster.nics_per_node={c.nics_per_node} exceeds cluster.gpus_per_node="
                          f"{c.gpus_per_node}; use at most one NIC per GPU")
    if not c.gpu_nic_map:
        if c.gpus_per_node % c.nics:
            raise ConfigError(f"cluster.nics_per_node={c.nics} does not divide cluster.gpus_per_node="
                              f"{c.gpus_per_node}; set cluster.gpu_nic_map to place GPUs on NICs")
        return
    parts = c.gpu_nic_map.split(",")
    if len(parts) != c.gpus_per_node or any(small_int(p.strip(), 4) is None for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)}: give {c.gpus_per_node} comma-separated "
                          "NIC indices, one per GPU (e.g. '0,0,1,1')")
    if any(int(p) >= c.nics for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)} names a NIC >= cluster.nics_per_node={c.nics}")


def _check_network(n: Network) -> None:
    if n.kmin_bytes > n.kmax_bytes:
        raise ConfigError(f"network.kmin_bytes={n.kmin_bytes} exceeds "
                          f"network.kmax_bytes={n.kmax_bytes}")
    for key in ("dcqcn_min_rate_mbps", "dcqcn_g", "dcqcn_alpha_resume_us",
                "dcqcn_rate_decrease_us", "dcqcn_rp_timer_us"):
        if not getattr(n, key) > 0:
            raise ConfigError(f"network.{key}: must be > 0, got {getattr(n, key)!r}")
    for key in ("dcqcn_rate_ai_mbps", "dcqcn_rate_hai_mbps", "cnp_interval_us"):
        if getattr(n, key) < 0:
            raise ConfigError(f"network.{key}: must be >= 0, got {getattr(n, key)!r}")
    if n.pfc_xoff_bytes and n.pfc_resume_offset_bytes >= n.pfc_xoff_bytes:
        raise ConfigError(f"network.pfc_resume_offset_bytes={n.pfc_resume_offset_bytes} must be "
                          f"below network.pfc_xoff_bytes={n.pfc_xoff_bytes} (Xon = Xoff - offset)")


# --- the limits table (docs/limits.md) ---------------------------------------------------------

def limits_rows() -> list[tuple[str, str, str]]:
    """(key, accepted values, why) for every numeric or enumerated key, in section order."""
    rows = []
    keyed = [(k, t) for k, t in _SCALARS.items()] + [
        (f"{sec}.{k}", t) for sec in SECTIONS for k, t in _TYPES[sec].items()]
    for key, typ in keyed:
        if key in _CHOICES:
            rows.append((key, ", ".join(str(c) for c in _CHOICES[key] if c != ""), ""))
        elif typ in (int, float):
            lo, hi = bounds(key, typ)
            why = _RANGES[key][2] if len(_RANGES.get(key, ())) > 2 else ""
            rows.append((key, f"{_num(lo)} .. {_num(hi)}", why))
    return rows


def limits_markdown() -> str:
    lines = ["| key | accepted | note |", "|---|---|---|"]
    lines += [f"| `{k}` | {v} | {w} |" for k, v, w in limits_rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--limits"]:
        sys.stdout.write(limits_markdown())
