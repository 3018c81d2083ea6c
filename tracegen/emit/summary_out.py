"""summary.md (for people), summary.json (for tools and `tracegen report`) and job.resolved.yaml
(the resolved job: `tracegen generate DIR/job.resolved.yaml` writes the same trace again)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from .. import __version__
from ..config import job_to_dict
from ..report import render_markdown


def summary_data(run, files: dict | None = None, extra: dict | None = None) -> dict:
    fab, rep = run.fabric, run.report
    return {
        "tracegen": __version__,
        "job": job_to_dict(run.job),
        "world": fab.world, "nodes": fab.nodes, "gpus_per_node": fab.gpus_per_node,
        "nic_gbps": fab.nic_gbps, "nvlink_gbps": fab.nvlink_gbps,
        "iteration_ns": rep.iteration_ns, "transfers": rep.transfers, "fabric_transfers": rep.net_transfers,
        "nic_names": [fab.nic_name(i) for i in range(fab.n_nics)],
        "nic_node": np.asarray(fab.nic_node).tolist(), "nic_rail": np.asarray(fab.nic_rail).tolist(),
        "rank_node": np.asarray(fab.rank_node).tolist(), "rank_gpu": np.asarray(fab.rank_gpu).tolist(),
        "rank_nic": np.asarray(fab.rank_nic).tolist(),
        "nic_tx_bytes": rep.nic_tx_bytes.tolist(), "nic_rx_bytes": rep.nic_rx_bytes.tolist(),
        "pcap_estimate": {"packets": rep.pcap_packets, "bytes": rep.pcap_bytes},
        "files": files or {},
        **(extra or {}),
    }


def write_summaries(run, dest: Path, files: dict | None = None, extra: dict | None = None) -> None:
    names = [run.fabric.nic_name(i) for i in range(run.fabric.n_nics)]
    (dest / "summary.md").write_text(render_markdown(run.report, names, run.fabric, files=files))
    (dest / "summary.json").write_text(json.dumps(summary_data(run, files, extra), indent=1) + "\n")
    (dest / "job.resolved.yaml").write_text("# the resolved job of this trace: every key, defaults included\n"
                                   + yaml.safe_dump(job_to_dict(run.job), sort_keys=False))
