"""Which scenario nodes each job runs on, and its ranks renamed to those nodes' GPUs.

Placement is by whole nodes (a node's GPUs, NICs and NVLink belong to one job, as schedulers hand
them out), so a job's GPU g of its node k is GPU g of scenario node nodes[k]: its NIC mapping and
NVLink are the job's own, only where its nodes sit on the fabric changes.
  contiguous   job after job, in file order: job 0 on nodes 0..n0-1, job 1 next, ...
  interleaved  by node, round robin over the jobs that still need nodes (A B A B ...)
  random       a permutation of the scenario's nodes drawn with `seed` (numpy PCG64), dealt out
               in file order
  explicit     each job's `nodes:` list, as written
Checked: no node twice, every node exists, every job gets exactly the nodes it needs.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError


def place(scenario) -> list[np.ndarray]:
    """Per job, its scenario node numbers in the job's node order."""
    need = [e.job.nodes for e in scenario.jobs]
    total = scenario.nodes
    if scenario.placement == "explicit":
        out = [np.asarray(e.nodes, np.int64) for e in scenario.jobs]
    elif scenario.placement == "contiguous":
        cut = np.cumsum([0] + need)
        out = [np.arange(cut[i], cut[i + 1], dtype=np.int64) for i in range(len(need))]
    elif scenario.placement == "interleaved":
        lists: list[list[int]] = [[] for _ in need]
        node, i = 0, 0
        while node < sum(need):
            while len(lists[i]) >= need[i]:
                i = (i + 1) % len(need)
            lists[i].append(node)
            node, i = node + 1, (i + 1) % len(need)
        out = [np.asarray(x, np.int64) for x in lists]
    else:
        perm = np.random.default_rng(scenario.seed).permutation(total)
        cut = np.cumsum([0] + need)
        out = [np.sort(perm[cut[i]:cut[i + 1]]).astype(np.int64) for i in range(len(need))]
    owner = np.full(total, -1, np.int64)
    for i, nodes in enumerate(out):
        bad = nodes[(nodes < 0) | (nodes >= total)]
        if len(bad):
            raise ConfigError(f"jobs[{i}].nodes: node {int(bad[0])} — the scenario has nodes 0..{total - 1} "
                              "(raise `nodes:`)")
        taken = nodes[owner[nodes] >= 0]
        if len(taken):
            raise ConfigError(f"jobs[{i}].nodes: node {int(taken[0])} is also jobs[{int(owner[taken[0]])}]'s — "
                              "a node runs one job")
        if len(np.unique(nodes)) != len(nodes):
            raise ConfigError(f"jobs[{i}].nodes: a node listed twice")
        owner[nodes] = i
    return out


def rank_map(nodes: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Per job rank (node r // gpn, GPU r % gpn of the job): its scenario GPU (= scenario rank)."""
    r = np.arange(len(nodes) * gpus_per_node, dtype=np.int64)
    return nodes[r // gpus_per_node] * gpus_per_node + r % gpus_per_node
