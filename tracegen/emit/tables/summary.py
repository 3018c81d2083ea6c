"""summary.md (for people), summary.json (for tools and `tracegen report`) and job.resolved.yaml
(the resolved job: `tracegen generate DIR/job.resolved.yaml` writes the same trace again)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from ... import __version__
from ...config import job_to_dict, parse_start_time
from ...report.render import render_markdown


def summary_data(run, files: dict | None = None, extra: dict | None = None) -> dict:
    fab, rep = run.fabric, run.report
    return {
        "tracegen": __version__,
        "job": job_to_dict(run.job),
        "world": fab.world, "nodes": fab.nodes, "gpus_per_node": fab.gpus_per_node,
        "nic_gbps": fab.nic_gbps, "nvlink_gbps": fab.nvlink_gbps,
        # output.start_time: capture timestamps are start_time_ns + the schedule's ns
        "start_time_ns": parse_start_time(run.job.output.start_time),
        "iteration_ns": rep.iteration_ns, "transfers": rep.transfers, "fabric_transfers": rep.net_transfers,
        "nic_names": [fab.nic_name(i) for i in range(fab.n_nics)],
        "nic_node": np.asarray(fab.nic_node).tolist(), "nic_rail": np.asarray(fab.nic_rail).tolist(),
        "rank_node": np.asarray(fab.rank_node).tolist(), "rank_gpu": np.asarray(fab.rank_gpu).tolist(),
        "rank_nic": np.asarray(fab.rank_nic).tolist(),
        "nic_tx_bytes": rep.nic_tx_bytes.tolist(), "nic_rx_bytes": rep.nic_rx_bytes.tolist(),
        "pcap_estimate": {"packets": rep.pcap_packets, "bytes": rep.pcap_bytes},
        "links": _links(fab),
        "link_utilisation": _top_links(run),
        "files": files or {},
        **(extra or {}),
    }


def _top_links(run) -> dict:
    from .trace_view import top_link_utilisation
    return top_link_utilisation(run.flows, run.fabric)


def _links(fab) -> dict:
    """Per link direction (the ids of flows' `route`): name, Gb/s, tier."""
    n = 2 * len(fab.links)
    if n > 400_000:
        return {}
    from ...report.build import LINK_TIERS
    tier = np.repeat(fab.link_tier(), 2) * 2 + np.tile([0, 1], len(fab.links))
    return {"name": [fab.link_dir_name(d) for d in range(n)],
            "gbps": np.repeat(fab.links["gbps"], 2).astype(int).tolist(),
            "tier": [LINK_TIERS[t] for t in tier.tolist()]}


def write_summaries(run, dest: Path, files: dict | None = None, extra: dict | None = None) -> None:
    names = [run.fabric.nic_name(i) for i in range(run.fabric.n_nics)]
    (dest / "summary.md").write_text(render_markdown(run.report, names, run.fabric, files=files))
    (dest / "summary.json").write_text(json.dumps(summary_data(run, files, extra), indent=1) + "\n")
    (dest / "job.resolved.yaml").write_text("# the resolved job of this trace: every key, defaults included\n"
                                   + yaml.safe_dump(job_to_dict(run.job), sort_keys=False))
