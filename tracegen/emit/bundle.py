"""A whole trace set in one folder: pcap/, flows.csv, ns3/, summary.md."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..pipeline import Run
from ..report import render_markdown
from .flows import write_flows_csv


def with_pcap_estimate(run: Run) -> Run:
    from .pcap import estimate_pcap
    pkts, nbytes = estimate_pcap(run.flows, run.fabric, run.job.output, nccl=run.job.nccl,
                                 network=run.job.network)
    return replace(run, report=replace(run.report, pcap_packets=pkts, pcap_bytes=nbytes))


def write_bundle(run: Run, dest: Path, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Write every output of `run` into `dest` (an empty folder); returns counts for the user."""
    counts = {}
    out = run.job.output
    write_flows_csv(run.flows, dest / "flows.csv")
    counts["flows"] = len(run.flows)
    if out.pcap:
        from .pcap import write_pcaps
        (dest / "pcap").mkdir()
        counts["pcaps"] = len(write_pcaps(run.flows, run.fabric, out, dest / "pcap", progress=progress,
                                          nccl=run.job.nccl, network=run.job.network))
    if out.ns3:
        from .ns3 import write_ns3
        (dest / "ns3").mkdir()
        write_ns3(run.flows, run.fabric, run.job, dest / "ns3")
    from .timeline import write_timeline
    write_timeline(run.flows, run.fabric.world, dest / "timeline.png",
                   title=f"{run.job.name}: transfers per rank, one iteration")
    names = [run.fabric.nic_name(i) for i in range(run.fabric.n_nics)]
    (dest / "summary.md").write_text(render_markdown(run.report, names, run.fabric))
    return counts
