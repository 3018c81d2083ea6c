"""A whole trace set in one folder: pcap/, flows.csv (or .parquet), ops.*, perfetto.json, ns3/,
pictures, summary.md / summary.json / job.resolved.yaml."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from .. import progress as _progress
from ..config import parse_start_time, table_formats
from ..errors import OutputError
from ..pipeline import Run
from ..tables import LinkKind
from .tables.flows import fabric_columns, write_flows_csv, write_ops_csv


def on_the_wire(run: Run) -> bool:
    """Whether any transfer crosses a NIC. A one-node job's all stay on NVLink: it has tables,
    pictures and Perfetto, but nothing for a pcap or an ns-3 scenario to show."""
    return bool((run.flows.rows["link"] == LinkKind.NET).any())


def wire_note(run: Run) -> str | None:
    """The one line `generate` says instead of writing pcaps / ns-3 files nothing crosses."""
    out = run.job.output
    skipped = [what for what, on in (("no pcap files", out.pcap), ("no ns-3 scenario", out.ns3)) if on]
    if not skipped or on_the_wire(run):
        return None
    why = "one node" if run.fabric.nodes == 1 else "every rank's peers share its node"
    return (f"no traffic crosses a NIC ({why}: every transfer stays on NVLink), so "
            f"{' and '.join(skipped)} written")


def pcap_flows(run: Run):
    """The flows the pcaps are written from: the schedule's chunks, or - timed per connection -
    the chunks of the selected NICs placed in it (emit/views/placed.py; built once per run). Without a
    NIC selection (nics, ranks, a switch or lab view) a connection-level run has none: None."""
    if run.flows.detail != "conn":
        return run.flows
    out = run.job.output
    if not (out.nics or out.ranks or out.switch or out.lab):
        return None
    key = id(run.flows)
    if key not in _PLACED:
        from .views.placed import placed_flows
        _progress.stage("pcap estimate: chunks of the selected NICs, placed in their connections", "ops")
        _PLACED.clear()
        _PLACED[key] = (run.flows, placed_flows(run))
    return _PLACED[key][1]


_PLACED: dict = {}


def with_pcap_estimate(run: Run) -> Run:
    from .views.pcap import estimate_pcap
    flows = pcap_flows(run)
    pkts, nbytes = estimate_pcap(flows if flows is not None else run.flows, run.fabric, run.job.output,
                                 nccl=run.job.nccl, network=run.job.network)
    return replace(run, report=replace(run.report, pcap_packets=pkts, pcap_bytes=nbytes))


def write_bundle(run: Run, dest: Path, progress: Callable[[int, int], None] | None = None,
                 workers: int = 0, scheduler: str = "") -> dict[str, int]:
    """Write every output of `run` into `dest` (an empty folder); returns counts for the user.
    workers / scheduler: the pcap files on a Dask cluster (pcap.write_pcaps). Each output is a
    stage of its own (tracegen.progress: the CLI's bars), counted in rows, slices or bytes;
    progress: the pcap bytes written (done, total), else the progress hook."""
    counts = {}
    out = run.job.output
    formats = table_formats(out)
    fab_cols = fabric_columns(run.flows)
    stage = _progress.stage
    if "csv" in formats:
        stage(f"flows.csv: {len(run.flows):,} rows", "rows")
        write_flows_csv(run.flows, dest / "flows.csv", extra=fab_cols)
        stage(f"ops.csv: {len(run.flows.ops):,} rows", "rows")
        write_ops_csv(run.flows, dest / "ops.csv")
    if "parquet" in formats:
        from .tables.parquet import write_flows_parquet, write_ops_parquet
        stage(f"flows.parquet: {len(run.flows):,} rows", "rows")
        write_flows_parquet(run.flows, dest / "flows.parquet", run.job.name, extra=fab_cols)
        stage(f"ops.parquet: {len(run.flows.ops):,} rows", "rows")
        write_ops_parquet(run.flows, dest / "ops.parquet", run.job.name)
    counts["flows"] = len(run.flows)
    extra = {}
    if out.perfetto:
        from .tables.perfetto import write_perfetto
        from .packets.select import parse
        stage("perfetto.json", "slices")
        sel = parse(out, run.fabric)
        extra["perfetto"] = write_perfetto(run.flows, run.fabric, dest / "perfetto.json", title=run.job.name,
                                           nic_mask=sel.nic_mask if (out.nics or out.ranks) else None,
                                           start_ns=parse_start_time(out.start_time))
    wire = on_the_wire(run)          # else: nothing to capture or simulate (wire_note says so)
    if out.pcap and wire:
        from .views.pcap import write_pcaps
        flows = pcap_flows(run)
        if flows is None:
            raise OutputError("pcaps of a job timed per connection are written for the NICs they show: "
                              "select some (--nics, --ranks, --switch or --lab), or --no-pcap")
        (dest / "pcap").mkdir()
        stage("pcap files", "bytes")
        if progress is None and _progress.active():
            progress = _progress.report
        counts["pcaps"] = len(write_pcaps(flows, run.fabric, out, dest / "pcap", progress=progress,
                                          nccl=run.job.nccl, network=run.job.network, workers=workers,
                                          scheduler=scheduler))
        from .views.pcap import queue_settling
        settling = queue_settling(flows, run.fabric, out, nccl=run.job.nccl, network=run.job.network)
        if settling is not None:    # output.ecn_marking=queue: did the marks/pauses settle?
            extra["queue_marks"] = settling
            if not settling["settled"]:
                run.report.notes.append(
                    f"output.ecn_marking=queue: the marks/pauses did not settle in {settling['rounds']} rounds "
                    "(summary.json queue_marks; the README's 'Marks from the queues' says what is written)")
        from .views.pcap import causality_note, frame_causality
        causal = frame_causality(flows, run.fabric, out, nccl=run.job.nccl, network=run.job.network)
        if causal is not None:
            extra["causality"] = causal
            run.report.notes.extend(f"{n} (summary.json causality)" for n in causality_note(causal))
        if out.switch:              # the counters the switch should show (views/counters.py)
            from .views.counters import COLUMNS
            from .views.pcap import port_counters
            from .tables.counters import write_counters
            stage("port_counters")
            rows = port_counters(flows, run.fabric, out, nccl=run.job.nccl, network=run.job.network)
            write_counters(COLUMNS, rows, dest, formats, run.job.name)
    if out.ns3 and wire:
        from .sims.ns3 import NO_FLOWS_NOTE, write_ns3
        stage("ns-3 scenario")
        if not write_ns3(run.flows, run.fabric, run.job, dest / "ns3") and \
                NO_FLOWS_NOTE not in run.report.notes:            # no NIC traffic: no scenario
            run.report.notes.append(NO_FLOWS_NOTE)
    if out.pictures:
        from .pictures.plots import TraceView, draw_all
        stage("pictures", "pictures")
        draw_all(TraceView.from_run(run), dest)
    from .tables.summary import write_summaries
    stage("summary.md, summary.json")
    write_summaries(run, dest, files=sorted(p.name for p in dest.iterdir()), extra=extra)
    return counts
