"""The job's sections as frozen dataclasses: each section's keys (declared in config/keys/) and
the sizes derived from them (padded vocabulary, head width, world size, NIC of each GPU, ...).
May import: config.keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .keys.cluster import ClusterKeys
from .keys.declare import DTYPE_BYTES
from .keys.fabric import FabricKeys
from .keys.job import JobKeys
from .keys.model import ModelKeys
from .keys.nccl import NcclKeys
from .keys.network import NetworkKeys
from .keys.output import OutputKeys
from .keys.parallelism import ParallelismKeys


# The sections: their keys are declared in config/keys/ (type, default, range, doc); here
# they gain what is derived from them.

class Model(ModelKeys):
    """A transformer: its keys (keys/model.py) and the sizes derived from them."""

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


class Parallelism(ParallelismKeys):
    """How the job is split: degrees, batches, sharding (keys/parallelism.py)."""

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


class Cluster(ClusterKeys):
    """Nodes, GPUs and NICs (keys/cluster.py)."""

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


class FabricConfig(FabricKeys):
    """The switch fabric the NICs plug into (fabric/topology.py builds it; fabric/routing.py routes over it);
    kinds and keys: keys/fabric.py."""


class Nccl(NcclKeys):
    """NCCL's algorithm, protocol and chunking (keys/nccl.py)."""


class Network(NetworkKeys):
    """Settings for the simulators (ns-3 export, `tracegen ns3 run`) and switch labs
    (keys/network.py)."""


class Output(OutputKeys):
    """What generate writes and how (keys/output.py)."""

    @property
    def view(self) -> str:
        """The capture view asked for: lab, switch, merge or nic (one file per host NIC)."""
        return "lab" if self.lab else "switch" if self.switch else "merge" if self.merge else "nic"

    @property
    def pcap_needs_schedule(self) -> bool:
        """Must the pcap estimate schedule packets, or can it count them from the plan alone (a
        host view with no time window and marks not taken from the switch queues)?"""
        return bool(self.time_window) or self.view != "nic" or self.ecn_marking == "queue"


@dataclass(frozen=True)
class Job(JobKeys):
    """A whole job: the top-level keys (keys/job.py) and one value per section."""
    model: Model = field(default_factory=Model)
    parallelism: Parallelism = field(default_factory=Parallelism)
    cluster: Cluster = field(default_factory=Cluster)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    nccl: Nccl = field(default_factory=Nccl)
    network: Network = field(default_factory=Network)
    output: Output = field(default_factory=Output)

    @property
    def world(self) -> int:
        return self.parallelism.world

    @property
    def nodes(self) -> int:
        return self.cluster.node_count(self.world)


SECTIONS = {"model": Model, "parallelism": Parallelism, "cluster": Cluster, "fabric": FabricConfig,
            "nccl": Nccl, "network": Network, "output": Output}
