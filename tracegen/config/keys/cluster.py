"""The cluster section's keys: nodes, GPUs, NICs and their rates."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import GPU_PEAK_TFLOPS, M, key


@dataclass(frozen=True)
class ClusterKeys:
    name: str = key("mini-h100", "the cluster's name (a preset names it)")
    nodes: int = key(0, "0: world / gpus_per_node", 0, M)
    gpus_per_node: int = key(2, "GPUs per node (an NVLink domain)", 1, 1024)
    gpu: str = key("h100", "GPU model (peak TFLOP/s, memory)", choices=tuple(GPU_PEAK_TFLOPS))
    mfu: float = key(0.4, "model FLOPs utilisation, a fraction of peak", 0.001, 1.0)
    nic_gbps: int = key(400, "Gb/s per NIC (today's NICs: 100-800)", 1, 1_000_000)
    nvlink_gbps: int = key(3600, "Gb/s per GPU per direction (NVLink5: 7,200)", 1, 1_000_000)
    nics_per_node: int = key(0, "0: one NIC per GPU", 0, 1024)
    gpu_nic_map: str = key("", "NIC of each GPU, '0,0,1,1,...'; '': GPU i on NIC i // (gpus / nics)")
