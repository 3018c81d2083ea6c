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

    @property
    def bytes_per_elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

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
    grad_dtype: str = ""         # "" = model dtype; "fp32" for fp32 gradient reduction
    sp: bool = False             # Megatron sequence parallelism: TP AllReduce -> AllGather + ReduceScatter
    cp: int = 1                  # context parallelism (ring attention over sequence chunks)
    ep: int = 1                  # expert parallelism, carved out of dp
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
class Nccl:
    algorithm: str = "ring"              # ring | tree | halving_doubling | hierarchical | auto
    channels: int = 2
    ring_msg_bytes: int = 1 << 20        # Simple protocol: 1 MiB slice per network message
    ring_chunk_bytes: int = 2 << 20      # Simple: 2 MiB chunk per ring step per loop
    p2p_chunk_bytes: int = 128 << 10     # send/recv network chunk
    qps_per_connection: int = 1
    protocol: str = "simple"             # simple | ll | ll128 | auto (NCCL_PROTO)
    simple_step_bytes: int = 512 << 10   # NCCL_BUFFSIZE / NCCL_STEPS: Tree chunk, Broadcast/Reduce chunk
    pxn: bool = False                    # cross-rail sends hop over NVLink to the destination's rail first
    fifo_tc: int = -1                    # NCCL_IB_FIFO_TC: traffic class (DSCP << 2 | ECN) of the receiver's
                                         # QPs - its CTS and ACKs - in pcaps; -1: the data's (output.dscp)


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
    lab_gbps: int = 0            # > 0: testers of this rate - the whole trace is scheduled again with
                                 # NICs (and leaf-spine links, scaled alike) at it (--lab-rate 100G)


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


# --- loading: YAML / preset / dict -> normalised dict -> Job ------------------------------------
# A "doc" is a partial job: {"name": .., "model": {field: value}, ...} holding canonical keys with
# checked values only; the dataclass defaults fill in the rest when the Job is built.

SECTIONS = {"model": Model, "parallelism": Parallelism, "cluster": Cluster, "nccl": Nccl,
            "network": Network, "output": Output}
_SCALARS = {"name": str, "iterations": int, "seed": int}
_PRESET_DIRS = {"model": "models", "cluster": "clusters"}   # sections that may name a preset
_TOP_EXTRA = ("preset", "description")                      # job-level keys that are not Job fields

# Megatron-LM argument names (dashes as underscores), accepted as synonyms of ours.
ALIASES = {
    "parallelism": {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
                    "data_parallel_size": "dp", "micro_batch_size": "micro_batch",
                    "global_batch_size": "global_batch", "sequence_parallel": "sp",
                    "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
                    "virtual_pipeline_model_parallel_size": "vpp",
                    "recompute_granularity": "recompute", "zero_stage": "zero"},
    "model": {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
              "num_query_groups": "kv_heads", "ffn_hidden_size": "ffn_hidden",
              "seq_length": "seq_len", "padded_vocab_size": "vocab", "vocab_size": "vocab",
              "num_experts": "experts", "moe_router_topk": "top_k",
              "moe_ffn_hidden_size": "moe_ffn_hidden", "kv_channels": "head_dim"},
}


def _field_types(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)   # annotations are strings under `from __future__`
    return {f.name: hints[f.name] for f in fields(cls)}


_TYPES = {sec: _field_types(cls) for sec, cls in SECTIONS.items()}

# Per-key rules. Integers not listed in _POSITIVE or _RANGES must be >= 0.
_POSITIVE = {
    "iterations",
    "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
    "parallelism.dp", "parallelism.tp", "parallelism.pp", "parallelism.micro_batch",
    "parallelism.global_batch", "parallelism.dp_bucket_bytes", "parallelism.cp", "parallelism.ep",
    "parallelism.vpp", "model.top_k",
    "cluster.gpus_per_node", "cluster.nic_gbps", "cluster.nvlink_gbps", "cluster.nodes_per_leaf",
    "cluster.spines",
    "nccl.channels", "nccl.ring_msg_bytes", "nccl.ring_chunk_bytes", "nccl.p2p_chunk_bytes",
    "nccl.qps_per_connection", "nccl.simple_step_bytes",
    "network.kmax_bytes", "network.buffer_bytes",
}
_RANGES = {"parallelism.zero": (0, 3), "output.dscp": (0, 63), "output.pcp": (0, 7), "output.ecn": (0, 3),
           "output.vlan_id": (1, 4094), "network.pmax": (0.0, 1.0),
           "output.pkey": (1, 0xFFFF), "output.iteration": (-1, 2**31 - 1),
           "output.ecn_mark_fraction": (0.0, 1.0), "nccl.fifo_tc": (-1, 255)}
_CHOICES = {
    "model.dtype": tuple(DTYPE_BYTES),
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
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_type(path: str, value: Any, typ: type) -> Any:
    # bool is an int subclass and YAML turns `yes` into True: never let one pass for the other.
    is_bool = isinstance(value, bool)
    ok = (typ is bool and is_bool) or (typ is str and isinstance(value, str)) \
        or (typ is int and isinstance(value, int) and not is_bool) \
        or (typ is float and isinstance(value, (int, float)) and not is_bool)
    if not ok:
        raise ConfigError(f"{path}: expected {_TYPE_WORDS[typ]}, got {_show(value)}")
    if typ is float and not math.isfinite(value):
        raise ConfigError(f"{path}: expected a finite number, got {value!r}")
    return float(value) if typ is float else value


def _check_value(path: str, value: Any, typ: type, rule: str | None = None) -> Any:
    """Type and range of one key; `path` is what the user wrote, `rule` its canonical name."""
    rule = rule or path
    value = _check_type(path, value, typ)
    if rule in _CHOICES and value not in _CHOICES[rule]:
        accepted = ", ".join(repr(c) for c in _CHOICES[rule])
        raise ConfigError(f"{path}: {value!r} is not accepted — use one of {accepted}")
    if rule in _RANGES:
        lo, hi = _RANGES[rule]
        if not lo <= value <= hi:
            raise ConfigError(f"{path}: must be in {lo}..{hi}, got {value!r}")
    elif typ is int and rule in _POSITIVE and value < 1:
        raise ConfigError(f"{path}: must be a positive integer, got {value}")
    elif typ is int and value < 0:
        raise ConfigError(f"{path}: must be >= 0, got {value}")
    if rule == "model.capacity_factor" and not value > 0:
        raise ConfigError(f"{path}: must be > 0 (1.0 = buffers sized for a perfectly even routing), got {value!r}")
    if rule == "cluster.mfu" and not 0 < value <= 1:
        raise ConfigError(f"{path}: must be a fraction in (0, 1], got {value!r}")
    if rule == "name" and not _JOB_NAME.fullmatch(value):
        raise ConfigError(f"name: {value!r} is not usable as a directory name — "
                          "use letters, digits, '.', '_' and '-'")
    return value


def _keys(sec: str) -> list[str]:
    """Keys accepted in a section ('' = the job's top level), canonical names first."""
    if not sec:
        return [*_SCALARS, *SECTIONS, *_TOP_EXTRA]
    extra = ["preset"] if sec in _PRESET_DIRS else []
    return [*_TYPES[sec], *ALIASES.get(sec, {}), *extra]


def _unknown(path: str) -> ConfigError:
    sec, _, key = path.rpartition(".")
    key = str(key)
    # A key valid in another section is the likeliest slip (seq_len under parallelism).
    homes = [s for s in SECTIONS if s != sec and key in _keys(s) and key not in ("name", "preset")]
    if homes:
        hint = f"did you mean '{homes[0]}.{key}'?"
    elif sec and key in _SCALARS:
        hint = f"'{key}' belongs at the top level of the job"
    else:
        close = difflib.get_close_matches(key, _keys(sec), n=1)
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
        name = aliases.get(key, key)
        if name not in _TYPES[sec]:
            raise _unknown(f"{sec}.{key}")
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
        elif key in _SCALARS:
            out[key] = _check_value(key, value, _SCALARS[key])
        elif key not in _TOP_EXTRA:
            raise _unknown(str(key))
    return out


# --- presets (package data, read through importlib.resources so an installed wheel works) ----

def _preset_dir(kind: str):
    return resources.files("tracegen") / "presets" / kind


def _preset_names(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".yaml"))


def _read_preset(kind: str, name: Any, stack: tuple) -> dict:
    names = _preset_names(kind)
    what = kind[:-1]    # "models" -> "model"
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "available: " + ", ".join(names)
        raise ConfigError(f"unknown {what} preset {name!r} — {hint}")
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
    """{"jobs"|"models"|"clusters": [(name, one-line description)]}, sorted by name."""
    def describe(kind: str, name: str) -> str:
        text = (_preset_dir(kind) / f"{name}.yaml").read_text("utf-8")
        desc = _parse_yaml(text, f"preset {kind}/{name}.yaml").get("description", "")
        return " ".join(str(desc).split())
    return {kind: [(n, describe(kind, n)) for n in _preset_names(kind)]
            for kind in ("jobs", "models", "clusters")}


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
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _parse_yaml(text: str, where: str) -> dict:
    try:
        doc = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}{line}: not valid YAML ({problem})") from None
    if not isinstance(doc, dict):
        got = "an empty file" if doc is None else f"a {type(doc).__name__}"
        raise ConfigError(f"{where}: expected a mapping of keys (model:, parallelism:, ...), "
                          f"got {got}")
    return doc


def _read_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such job file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read job file ({e.__class__.__name__})") from None
    return _parse_yaml(text, str(path))


# --- --set overrides ---------------------------------------------------------------------------

def _set_fragment(item: str) -> dict:
    """'parallelism.dp=4' -> {"parallelism": {"dp": 4}}; the value is a YAML scalar."""
    key, eq, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    if not eq or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. parallelism.dp=4")
    sec, dot, name = key.partition(".")
    if dot and sec not in SECTIONS:
        raise _unknown(sec)
    if dot and (not name or "." in name):
        raise ConfigError(f"unknown key '{key}' — use SECTION.KEY, e.g. model.seq_len")
    typ = _TYPES[sec].get(ALIASES.get(sec, {}).get(name, name)) if dot else _SCALARS.get(key)
    value = raw if typ is str or not raw else _yaml_scalar(item, raw)
    if not dot and key in SECTIONS and not isinstance(value, dict):
        value = raw   # `model=llama3-8b`: a preset name, never a number
    return {sec: {name: value}} if dot else {key: value}


def _yaml_scalar(item: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(f"--set {item!r}: value is not valid YAML") from None


def _apply_sets(doc: dict, sets: Sequence[str]) -> dict:
    for item in sets:
        try:
            doc = _merge_job(doc, _set_fragment(item))
        except ConfigError as e:
            msg = str(e)
            msg = msg if msg.startswith("--set") else f"--set {item!r}: {msg}"
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
            doc = _merge_job({}, raw)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        if "name" not in raw:   # the file's stem, made safe as a directory name
            doc["name"] = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).stem).strip("-.") or "job"
    elif preset is not None:
        doc = _preset_job(preset)
    else:
        doc = {}
    return _build(_apply_sets(doc, sets), "default")


def job_from_dict(d: dict, name: str = "job") -> Job:
    """A job from a mapping shaped like a job file; `name` unless the mapping has one."""
    doc = _merge_job({}, d)
    if "name" not in d:
        doc["name"] = name
    return _build(doc, name)


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
    return job


def _check_model(m: Model) -> None:
    if m.hidden % m.heads:
        raise ConfigError(f"model.heads={m.heads} does not divide model.hidden={m.hidden}")
    if m.kv_heads and (m.kv_heads > m.heads or m.heads % m.kv_heads):
        raise ConfigError(f"model.kv_heads={m.kv_heads} does not divide model.heads={m.heads}")


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
    if m.experts and m.experts % p.ep:
        raise ConfigError(f"parallelism.ep={p.ep} does not divide model.experts={m.experts}")
    if p.dp % p.ep:
        raise ConfigError(f"parallelism.ep={p.ep} does not divide parallelism.dp={p.dp} "
                          "(expert parallelism is carved out of data parallelism)")
    if m.experts and p.ep > 1 and p.tp > 1 and not p.sp:
        raise ConfigError("mixture-of-experts with tp > 1 and ep > 1 needs parallelism.sp=true "
                          "(Megatron requires sequence parallelism there)")
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
    sizes = (f"dp·tp·pp·cp = {p.dp}·{p.tp}·{p.pp}·{p.cp} = {world}" if p.cp > 1
             else f"dp·tp·pp = {p.dp}·{p.tp}·{p.pp} = {world}")
    if c.nodes and c.nodes * gpn != world:
        fix = f"set cluster.nodes={world // gpn}" if world % gpn == 0 else "change parallelism"
        raise ConfigError(f"cluster.nodes={c.nodes} × cluster.gpus_per_node={gpn} = "
                          f"{c.nodes * gpn} GPUs but parallelism {sizes} — {fix}")
    if not c.nodes and world % gpn:
        raise ConfigError(f"parallelism {sizes} GPUs not filling nodes of "
                          f"cluster.gpus_per_node={gpn} — make it a multiple of {gpn} "
                          f"or set cluster.gpus_per_node to a divisor of {world}")


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
    if len(parts) != c.gpus_per_node or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={c.gpu_nic_map!r}: give {c.gpus_per_node} comma-separated "
                          "NIC indices, one per GPU (e.g. '0,0,1,1')")
    if any(int(p) >= c.nics for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={c.gpu_nic_map!r} names a NIC >= cluster.nics_per_node={c.nics}")


def _check_network(n: Network) -> None:
    if n.kmin_bytes > n.kmax_bytes:
        raise ConfigError(f"network.kmin_bytes={n.kmin_bytes} exceeds "
                          f"network.kmax_bytes={n.kmax_bytes}")
