"""The job format as data: every key of a job declared once, in the section it belongs to - name,
type, default, accepted range or choices, and a doc; its unit is in its name (_bytes, _ns, _us,
_gbps, _mbps). Everything else reads these declarations: the tables config/values.py checks keys with
(and words its messages from), docs/limits.md's rows, and the JSON Schema for job files that
ships as tracegen/schema/job.schema.json (`python -m tracegen.config --schema` rewrites it; a
test fails when it is stale). Rules between keys stay code (config/rules.py).

Imports nothing of tracegen: the other config modules build on it.
"""
from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

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

_K, _M, _G, _T = 1 << 10, 1 << 20, 1 << 30, 1 << 40
INT_MAX = 2**31 - 1        # integers declared without a range
FLOAT_MAX = 1e9
STR_MAX = 65_536           # characters in any string key
NAME_MAX = 100             # characters in a job name (it names folders and files)
WORLD_MAX = 1 << 20        # GPUs: dp x tp x pp x cp
JOB_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"   # a job name becomes a directory name under traces/


def key(default: Any, doc: str, lo: float | None = None, hi: float | None = None, *,
        choices: tuple = (), zero_or: tuple[float, str] | None = None, count: bool | None = None) -> Any:
    """One key: its default and doc, and what it accepts - a number in [lo, hi], one of `choices`,
    or with `zero_or` = (floor, why) 0 or [floor, hi]. `count` (default: an integer with lo >= 1)
    words a value below the range 'must be a positive integer'."""
    return field(default=default, metadata={"doc": doc, "lo": lo, "hi": hi, "choices": tuple(choices),
                                            "zero_or": zero_or, "count": count})


@dataclass(frozen=True)
class ModelKeys:
    name: str = key("tiny", "the model's name (a preset names it)")
    layers: int = key(4, "transformer layers (the largest models have ~100)", 1, 10_000)
    hidden: int = key(256, "hidden size", 1, _M)
    heads: int = key(8, "attention heads", 1, 65_536)
    kv_heads: int = key(0, "query groups; 0: same as heads", 0, 65_536)
    ffn_hidden: int = key(0, "MLP width; 0: 4 x hidden", 0, 4 * _M)
    vocab: int = key(4096, "vocabulary size", 1, 16 * _M)
    seq_len: int = key(256, "tokens per sequence", 1, 16 * _M)
    dtype: str = key("bf16", "precision of weights and activations", choices=tuple(DTYPE_BYTES))
    # Switches that only change the parameter count (GPT-style defaults; llama flips all four).
    gated_mlp: bool = key(False, "SwiGLU: 3 MLP matrices (gate, up, down) instead of 2")
    position_embeddings: bool = key(True, "a learned s x h position table (GPT); false for RoPE")
    tied_embeddings: bool = key(True, "the LM head shares the input embedding; false: its own V x h")
    bias: bool = key(True, "biases on linears and LayerNorms; false: none (RMSNorm)")
    head_dim: int = key(0, "0: hidden / heads", 0, 65_536)
    # Mixture of experts (experts = 0: dense). Layers after the first `first_k_dense` are MoE.
    experts: int = key(0, "routed experts per MoE layer", 0, 65_536)
    top_k: int = key(2, "experts per token", 1, 1024)
    moe_ffn_hidden: int = key(0, "expert MLP width; 0: ffn_hidden", 0, 4 * _M)
    shared_experts: int = key(0, "always-on experts", 0, 1024)
    first_k_dense: int = key(0, "leading dense layers", 0, 10_000)
    capacity_factor: float = key(1.0, "dispatch buffer over even routing", 0.001, 64.0)
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on.
    q_lora_rank: int = key(0, "MLA query rank", 0, _M)
    kv_lora_rank: int = key(0, "MLA key/value rank", 0, _M)
    rope_head_dim: int = key(0, "MLA decoupled RoPE width", 0, 65_536)
    v_head_dim: int = key(0, "0: head_dim", 0, 65_536)
    # Megatron's sizing rules: position table rows (`--max-position-embeddings`, >= seq_len) and the
    # vocabulary padded to a multiple of make_vocab_size_divisible_by x tp (`_vocab_size_with_padding`)
    max_position_embeddings: int = key(0, "rows of a learned position table; 0: seq_len", 0, 16 * _M)
    make_vocab_size_divisible_by: int = key(128, "vocabulary padding multiple (x tp)", 1, 65_536)
    flash_attention: bool = key(True, "no s x s attention scores kept for backward (memory model)")


@dataclass(frozen=True)
class ParallelismKeys:
    dp: int = key(2, "data-parallel replicas", 1, _M)
    tp: int = key(2, "tensor-parallel ranks", 1, 1024)
    pp: int = key(2, "pipeline stages", 1, 1024)
    micro_batch: int = key(1, "sequences per micro-batch", 1, 65_536)
    global_batch: int = key(8, "sequences per iteration", 1, 16 * _M)
    dp_bucket_bytes: int = key(25 * 1000 * 1000, "gradient bucket (huge: one bucket per stage)", 1, 1 << 50)
    grad_dtype: str = key("", "gradients' dtype in DP; '': Megatron's rule (fp32 for bf16 models, else "
                              "the model's)", choices=("",) + tuple(DTYPE_BYTES))
    sp: bool = key(False, "Megatron sequence parallelism: TP AllReduce -> AllGather + ReduceScatter")
    cp: int = key(1, "context-parallel ranks", 1, 1024)
    ep: int = key(1, "expert-parallel ranks", 1, 65_536)
    expert_tp: int = key(0, "expert tensor-parallel ranks; 0: tp", 0, 1024)
    zero: int = key(0, "ZeRO stage", 0, 3)
    vpp: int = key(1, "model chunks per pipeline rank", 1, 1024)
    pp_scatter_gather: bool = key(False, "send 1/t of each activation between stages, AllGather it over "
                                         "TP after")
    recompute: str = key("none", "activation recomputation", choices=("none", "selective", "full"))
    dp_overlap: bool = key(True, "release gradient buckets during backward (false: all after it)")


@dataclass(frozen=True)
class ClusterKeys:
    name: str = key("mini-h100", "the cluster's name (a preset names it)")
    nodes: int = key(0, "0: world / gpus_per_node", 0, _M)
    gpus_per_node: int = key(2, "GPUs per node (an NVLink domain)", 1, 1024)
    gpu: str = key("h100", "GPU model (peak TFLOP/s, memory)", choices=tuple(GPU_PEAK_TFLOPS))
    mfu: float = key(0.4, "model FLOPs utilisation, a fraction of peak", 0.001, 1.0)
    nic_gbps: int = key(400, "Gb/s per NIC (today's NICs: 100-800)", 1, 1_000_000)
    nvlink_gbps: int = key(3600, "Gb/s per GPU per direction (NVLink5: 7,200)", 1, 1_000_000)
    nics_per_node: int = key(0, "0: one NIC per GPU", 0, 1024)
    gpu_nic_map: str = key("", "NIC of each GPU, '0,0,1,1,...'; '': GPU i on NIC i // (gpus / nics)")


_ZERO_OR_LEAF = (0.01, "below 1:100 an uplink would outrun 100 x its leaf's downlinks")
_ZERO_OR_SPINE = (0.01, "below 1:100 an uplink would outrun 100 x its spine's downlinks")
_KBPS = (0.001, "HPCC's config takes whole Kb/s")


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
    nodes_per_leaf: int = key(16, "nodes under one leaf (rail-optimised: per rail)", 1, _M)
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


@dataclass(frozen=True)
class NcclKeys:
    algorithm: str = key("ring", "NCCL_ALGO", choices=("ring", "tree", "halving_doubling", "hierarchical", "auto"))
    channels: int = key(2, "NCCL's MAXCHANNELS", 1, 64)
    ring_msg_bytes: int = key(1 << 20, "network message of the Simple protocol", 256, _G)
    ring_chunk_bytes: int = key(2 << 20, "ring chunk per step", 1 * _K, _G)
    p2p_chunk_bytes: int = key(128 << 10, "send/recv network chunk", 1 * _K, _G)
    qps_per_connection: int = key(1, "NCCL_IB_QPS_PER_CONNECTION", 1, 128)
    protocol: str = key("simple", "NCCL_PROTO", choices=("simple", "ll", "ll128", "auto"))
    simple_step_bytes: int = key(512 << 10, "NCCL_BUFFSIZE / NCCL_STEPS", 1 * _K, _G)
    pxn: bool = key(True, "a cross-rail send hops over NVLink to the GPU on the destination's rail first "
                          "(NCCL >= 2.12: rail-aligned)")
    fifo_tc: int = key(-1, "NCCL_IB_FIFO_TC; -1: the data's", -1, 255)


@dataclass(frozen=True)
class NetworkKeys:
    """Settings for the simulators (ns-3 export, `tracegen ns3 run`) and switch labs."""
    cc_mode: str = key("dcqcn", "congestion control the simulators run",
                       choices=("dcqcn", "hpcc", "timely", "dctcp", "hpcc-pint"))
    kmin_bytes: int = key(150_000, "ECN marking starts", 0, 64 * _G)
    kmax_bytes: int = key(1_500_000, "ECN marking at pmax", 1, 64 * _G)
    pmax: float = key(0.2, "a probability", 0.0, 1.0)
    pfc: bool = key(True, "PFC on the RoCE priority")
    buffer_bytes: int = key(32 << 20, "switch buffer", 1, _T)
    # DCQCN reaction point: NVIDIA ConnectX firmware defaults (DOCA "DCQCN CC Parameters";
    # mlxconfig RPG_* / DCE_TCP_* / RATE_REDUCE_MONITOR_PERIOD / MIN_TIME_BETWEEN_CNPS), see
    # ns3_scenarios/dcqcn.h and the README's ns-3 section
    dcqcn_rate_ai_mbps: float = key(5.0, "DCQCN additive increase (rpg_ai_rate); 0: 5 Mb/s per 25 Gb/s of NIC "
                                    "(HPCC's run.py)", 0.0, 1e6, zero_or=_KBPS)
    dcqcn_rate_hai_mbps: float = key(50.0, "DCQCN hyper increase (rpg_hai_rate); 0: 50 Mb/s per 25 Gb/s of NIC "
                                     "(HPCC's run.py)", 0.0, 1e6, zero_or=_KBPS)
    dcqcn_min_rate_mbps: float = key(1.0, "DCQCN rate floor (rpg_min_rate)", 0.001, 1e7)
    dcqcn_g: float = key(5 / 1024, "DCQCN alpha gain: 1 - dce_tcp_g / 1024, dce_tcp_g = 1019", 0.0, 1.0)
    dcqcn_alpha_resume_us: float = key(1.0, "alpha update period (dce_tcp_rtt)", 0.001, 1e6)
    dcqcn_rate_decrease_us: float = key(4.0, "at most one rate cut per period (rate_reduce_monitor_period)",
                                        0.001, 1e6)
    dcqcn_rp_timer_us: float = key(300.0, "rate increase period (rpg_time_reset)", 0.001, 1e6)
    dcqcn_byte_reset_bytes: int = key(32767, "bytes sent per rate increase (rpg_byte_reset); 0: timer only (HPCC)",
                                      0, _G)
    dcqcn_fast_recovery: int = key(1, "fast-recovery periods before AI / HAI (rpg_threshold)", 0, 1000)
    dcqcn_per_message_reset: bool = key(False, "every message starts at line rate (HPCC, SimAI: a QP per flow)")
    cnp_interval_us: float = key(4.0, "<= 1 CNP per QP per interval (min_time_between_cnps)", 0.0, 1e6)
    # PFC on the RoCE priority, per switch ingress port
    pfc_xoff_bytes: int = key(0, "pause above; 0: dynamic (1/8 of the free buffer)", 0, _T)
    pfc_resume_offset_bytes: int = key(3072, "resume at Xoff - offset", 0, _G)
    pfc_headroom_bytes: int = key(0, "per port; 0: 3 x the link's bandwidth-delay", 0, _G)
    pfc_pause_quanta: int = key(65535, "PAUSE time in 512-bit quanta", 1, 65535, count=False)


@dataclass(frozen=True)
class OutputKeys:
    dir: str = key("", "output folder; '': traces/<job name>")
    pcap: bool = key(True, "write the pcap files")
    ns3: bool = key(True, "write the ns-3 scenario")
    pmtu: int = key(4096, "RoCE path MTU (IB MTUs: RoCE has no other)", choices=(256, 512, 1024, 2048, 4096))
    vlan: bool = key(True, "an 802.1Q tag on every frame")
    vlan_id: int = key(100, "802.1Q VID", 1, 4094, count=False)
    pcp: int = key(3, "802.1Q priority", 0, 7)
    dscp: int = key(26, "6-bit DSCP", 0, 63)
    ecn: int = key(2, "2-bit ECN", 0, 3)
    snaplen: int = key(0, "libpcap's largest snaplen; 0: whole frames", 0, 262_144)
    payload: str = key("zero", "payload bytes: zeros, a pattern, or none (records end at the headers, "
                               "orig_len real)", choices=("zero", "pattern", "none"))
    ack_every: int = key(0, "packets per coalesced ACK; 0: one per message", 0, 16 * _M)
    # pcap budget and filters (emit/packets/select.py)
    max_bytes: int = key(2 << 30, "pcap budget; 0: no limit", 0, 1 << 50)
    time_window: str = key("", "START_NS:END_NS: only packets starting in [START, END)")
    nics: str = key("", "'0,3' or 'node0001-rail0,...': only these NICs' files")
    ranks: str = key("", "'0,5': only the files of the NICs these ranks use")
    collectives: str = key("", "'dp,pp' (parallelism) or 'allreduce,sendrecv' (kind): only their packets")
    iteration: int = key(-1, "-1: every iteration (else < iterations)", -1, 999)
    # wire details
    qp_split: bool = key(False, "nccl.qps_per_connection > 1: every message split in 128 B-aligned parts, "
                                "one per QP; false: whole messages round-robin over the QPs (NCCL's default)")
    ip_version: int = key(4, "RoCEv2 over IPv4, or IPv6 (fd00::<IPv4 plan>)", choices=(4, 6))
    pkey: int = key(0xFFFF, "16-bit BTH P_Key", 1, 0xFFFF, count=False)
    # congestion artefacts (emit/packets/congestion.py): CE marks and the CNPs receivers send back
    ecn_marking: str = key("fraction", "where CE marks come from: fraction (ecn_mark_fraction, seeded) or queue "
                                       "(RED on each switch-to-switch egress queue: network.kmin_bytes, kmax_bytes, "
                                       "pmax; with network.pfc PFC pauses above Xoff; emit/packets/queue_marks.py)",
                           choices=("fraction", "queue"))
    ecn_mark_fraction: float = key(0.0, "a fraction of data packets", 0.0, 1.0)
    ecn_pattern: str = key("random", "where CE marks go: random (seeded by ecn_seed) or periodic",
                           choices=("random", "periodic"))
    ecn_seed: int = key(0, "32-bit seed", 0, 2**32 - 1)
    dcqcn: bool = key(False, "open loop: after a CNP a QP's later messages are paced at DCQCN's rate "
                             "(network.cc_mode dcqcn)")
    # capture files and views (emit/packets/capture_file.py, emit/views.py)
    format: str = key("pcap", "pcap (nanosecond) or pcapng (one interface block per NIC / port)",
                      choices=("pcap", "pcapng"))
    comments: bool = key(False, "pcapng: a comment per packet naming collective, op, step, chunk")
    merge: bool = key(False, "one merged file for the selected NICs instead of one per NIC")
    switch: str = key("", "'leaf3' / 'spine0': one file per port of that switch instead")
    lab: str = key("", "lab plan YAML: one replayable pcap per tester port; relative to the file naming it")
    # tables and pictures (emit/tables/flows.py, emit/tables/parquet.py, emit/tables/perfetto.py, emit/pictures/plots.py)
    tables: str = key("csv", "flow + op tables: csv, parquet (needs pyarrow) or csv,parquet")
    perfetto: bool = key(True, "perfetto.json: the schedule as a Chrome trace (ui.perfetto.dev)")
    pictures: bool = key(True, "gantt.png, traffic_matrix.png, timeline.png")
    lab_gbps: int = key(0, "testers' rate; 0: the NICs'", 0, 1_000_000)
    # a string or an integer (config.parse_start_time): the one key of two types
    start_time: str = key(0, "when the capture starts: ISO 8601 with a timezone (2026-12-04T09:00:00Z, ns "
                             "fractions kept) or integer epoch ns; every capture timestamp is it + schedule ns")


@dataclass(frozen=True)
class JobKeys:
    name: str = key("default", "names the output folder traces/<name>")
    iterations: int = key(1, "training iterations traced in one run", 1, 1000)
    seed: int = key(0, "32-bit seed", 0, 2**32 - 1)
    detail: str = key("auto", "schedule granularity: every chunk (full), per connection per op (conn), "
                              "or by size (auto)", choices=("auto", "full", "conn"))


# --- sections, names, and the tables read off the declarations ---------------------------------

SECTION_KEYS = {"model": ModelKeys, "parallelism": ParallelismKeys, "cluster": ClusterKeys,
                "fabric": FabricKeys, "nccl": NcclKeys, "network": NetworkKeys, "output": OutputKeys}
PRESET_DIRS = {"model": "models", "cluster": "clusters", "fabric": "fabrics"}   # sections that may name a preset
TOP_EXTRA = {"preset": "a job preset this job starts from (tracegen presets)",
             "description": "free text, one line in `tracegen presets`"}   # job keys that are not Job fields

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


@dataclass(frozen=True)
class Decl:
    """A declared key, as the tables below and the schema read it."""
    typ: type
    default: Any
    doc: str
    lo: float | None
    hi: float | None
    choices: tuple
    zero_or: tuple[float, str] | None
    count: bool


def _decls(cls: type, prefix: str = "") -> dict[str, Decl]:
    hints = typing.get_type_hints(cls)     # annotations are strings under `from __future__`
    out = {}
    for f in fields(cls):
        m, typ = f.metadata, hints[f.name]
        count = m["count"] if m["count"] is not None else (typ is int and (m["lo"] or 0) >= 1)
        out[prefix + f.name] = Decl(typ, f.default, m["doc"], m["lo"], m["hi"], m["choices"], m["zero_or"], count)
    return out


KEYS: dict[str, Decl] = {**_decls(JobKeys), **{k: d for sec, cls in SECTION_KEYS.items()
                                                for k, d in _decls(cls, sec + ".").items()}}
SCALARS = {k: d.typ for k, d in KEYS.items() if "." not in k}
TYPES = {sec: {k.partition(".")[2]: d.typ for k, d in KEYS.items() if k.startswith(sec + ".")}
         for sec in SECTION_KEYS}
RANGES = {k: (d.lo, d.hi, d.doc) for k, d in KEYS.items() if d.lo is not None}
POSITIVE = {k for k, d in KEYS.items() if d.count}
CHOICES = {k: d.choices for k, d in KEYS.items() if d.choices}
ZERO_OR = {k: d.zero_or for k, d in KEYS.items() if d.zero_or}


# Keys that take an ISO 8601 time or integer epoch ns (config.parse_start_time); up to 2100: a
# classic pcap's seconds field is 32 bits unsigned (it wraps in 2106).
TIME_KEYS = {"output.start_time"}
TIME_MAX_NS = 4_102_444_800 * 10**9      # 2100-01-01T00:00:00Z
TIME_PATTERN = (r"^([0-9]{1,19}|[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
                r"([Zz]|[+-][0-9]{2}:?[0-9]{2}))$")


def bounds(rule: str, typ: type = int) -> tuple:
    """(lo, hi) accepted for a numeric key (canonical 'section.key')."""
    if rule in RANGES:
        return RANGES[rule][:2]
    if typ is float:
        return 0.0, FLOAT_MAX
    return (1 if rule in POSITIVE else 0), INT_MAX


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def limits_rows() -> list[tuple[str, str, str]]:
    """(key, accepted values, note) for every numeric or enumerated key, in section order."""
    rows = []
    for k, d in KEYS.items():
        if d.choices:
            rows.append((k, ", ".join(str(c) for c in d.choices if c != ""), d.doc))
        elif k in TIME_KEYS:
            rows.append((k, f"ISO 8601 with a timezone, or epoch ns 0 .. {_num(TIME_MAX_NS - 1)} (1970 .. 2100)", d.doc))
        elif d.typ in (int, float):
            lo, hi = bounds(k, d.typ)
            accepted, note = f"{_num(lo)} .. {_num(hi)}", d.doc
            if d.zero_or:
                accepted, note = f"0, or {_num(d.zero_or[0])} .. {_num(hi)}", f"{d.doc}; {d.zero_or[1]}"
            rows.append((k, accepted, note))
    return rows


def limits_markdown() -> str:
    lines = ["| key | accepted | note |", "|---|---|---|"]
    lines += [f"| `{k}` | {v} | {w} |" for k, v, w in limits_rows()]
    return "\n".join(lines) + "\n"


# --- the JSON Schema for job files ---------------------------------------------------------------
# Draft-07 (what editors' YAML support reads best). Types are strict as the loader is: `true` is no
# number. One difference JSON cannot express: YAML's `2.0` is a float the loader refuses for an
# integer key, while JSON Schema (draft 6 on) counts 2.0 as an integer. It checks each key alone;
# the rules between keys (config.validate) stay the loader's.

# Found from the package root (as the presets are), not from this module: it stays put when
# modules move (tools/layout.map).
SCHEMA_PATH = Path(str(resources.files("tracegen"))) / "schema" / "job.schema.json"
_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _unit(name: str) -> str:
    for suffix, unit in (("_bytes", "bytes"), ("_ns", "ns"), ("_us", "µs"), ("_gbps", "Gb/s"), ("_mbps", "Mb/s")):
        if name.endswith(suffix):
            return unit
    return ""


def _key_schema(name: str, d: Decl) -> dict:
    unit = _unit(name)
    out: dict[str, Any] = {"description": d.doc + (f" [{unit}]" if unit else ""), "default": d.default}
    if d.choices:
        out["enum"] = list(d.choices)
        return out
    if name in TIME_KEYS:    # the loader checks the ISO form itself
        out["type"] = ["string", "integer"]
        out.update(minimum=0, maximum=TIME_MAX_NS - 1, maxLength=64, pattern=TIME_PATTERN)
        return out
    out["type"] = _JSON_TYPES[d.typ]
    if d.typ in (int, float):
        lo, hi = bounds(name, d.typ)
        if d.zero_or:
            out["anyOf"] = [{"const": 0}, {"minimum": d.zero_or[0]}]
        out.update(minimum=lo, maximum=hi)
    if d.typ is str:
        out["maxLength"] = STR_MAX
    return out


def _section_schema(sec: str, presets: dict[str, list[str]]) -> dict:
    props = {k.partition(".")[2]: _key_schema(k, d) for k, d in KEYS.items() if k.startswith(sec + ".")}
    for alias, canon in ALIASES.get(sec, {}).items():
        props[alias] = {**props[canon], "description": f"Megatron-LM's name for {canon}"}
    for moved, home in MOVED.get(sec, {}).items():
        props[moved] = {**_key_schema(f"{home}.{moved}", KEYS[f"{home}.{moved}"]),
                        "description": f"{home}.{moved}, still accepted here"}
    if sec in PRESET_DIRS:
        props["preset"] = {"description": f"a {sec} preset this section starts from", "enum": presets[sec]}
    return {"type": "object", "additionalProperties": False, "properties": props}


def job_schema(presets: dict[str, list[str]]) -> dict:
    """The JSON Schema of a job file; `presets`: preset names by section ('model', ...) and 'jobs'."""
    props: dict[str, Any] = {k: _key_schema(k, d) for k, d in KEYS.items() if "." not in k}
    props["name"].update(pattern=f"^{JOB_NAME}$", maxLength=NAME_MAX)
    props["preset"] = {"description": TOP_EXTRA["preset"], "enum": presets["jobs"]}
    props["description"] = {"description": TOP_EXTRA["description"], "type": "string", "maxLength": STR_MAX}
    for sec in SECTION_KEYS:
        ref = {"$ref": f"#/definitions/{sec}"}
        props[sec] = ({"if": {"type": "string"}, "then": {"enum": presets[sec]}, "else": ref}
                      if sec in PRESET_DIRS else ref)
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "tracegen job",
            "description": "An LLM training job for tracegen (tracegen generate JOB.yaml); every key "
                           "optional. Ranges: docs/limits.md.",
            "type": "object", "additionalProperties": False, "properties": props,
            "definitions": {sec: _section_schema(sec, presets) for sec in SECTION_KEYS}}


def schema_text(presets: dict[str, list[str]]) -> str:
    return json.dumps(job_schema(presets), indent=1, ensure_ascii=False) + "\n"
