"""`tracegen export chakra|simai|otg JOB -o DIR`: the job's CommOp table for other simulators, or its
RoCE traffic for a traffic generator (otg).

chakra  one Chakra execution trace per rank (`<job>.<rank>.et`, mlc-chakra's schema and writer)
        plus comm_groups.json — ASTRA-sim 2.x and other Chakra consumers read them
simai   the SimAI / AICB workload text (`<job>.txt`) that SimAI-Analytical / SimAI-Simulator run
Only the workload stage runs for these (no schedule): what is exported is what must be communicated.
otg     the RDMA WRITEs of the job's wire plan (as its pcaps carry them) between a lab plan's hosts
        as an Open Traffic Generator config (otg.json / otg.yaml, built and validated by snappi)
        plus otg-schedule.json (counts and start times the model cannot hold): emit/sims/otg.py

Where: by default `chakra/`, `simai/` or `otg/` inside the folder `generate` writes for the job
(traces/<name>/ or output.dir): a sub-output with its own manifest, so that folder stays
tracegen's and the next `generate` replaces it (the export goes with the old trace: a warning says
so). The folder is written as generate writes a trace (outdir.Writer): a new folder, or one this
command wrote before, replaced whole in one rename; anything else (a user's folder, `.`, home) is
refused before any work unless --force (beside the user's files, never over one).
"""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import ConfigError


@click.group("export")
def export() -> None:
    """Write the job's CommOp table for other simulators (Chakra ET, SimAI workload) or its RoCEv2
    traffic for a traffic generator (OTG / snappi)."""


def _common(f):
    from .common import job_options
    f = click.option("--force", is_flag=True,
                     help="Write into a folder tracegen would refuse (not its own, the current folder, ...), "
                          "beside what is there; deletes only files tracegen wrote.")(f)
    f = click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
                     help="Output folder (default: <format>/ in the job's trace folder, traces/<job name>/<format>).")(f)
    return job_options(f)


def _export(fmt: str, job_file, preset, sets, detail, out_dir, force, fill) -> None:
    """Load the job, check where it goes (before any work), then build its CommOps and write them
    with fill(job, ops, tmp) -> (message, notes) into a temp folder swapped into place."""
    from ..output import folder as outdir, place
    from .common import command_errors, load
    from ..workload import build_commops
    with command_errors():
        if detail:
            raise ConfigError(f"export {fmt}: --detail shapes the schedule, which export does not build; leave it out")
        job = load(job_file, preset, sets)
        if job.fabric.kind == "file":       # the CommOps need no fabric, but a broken topology file is a broken job
            from ..fabric.topology_file import read_topology
            read_topology(job.fabric, job.nodes, job.cluster.nics, job.cluster.nic_gbps)
        if out_dir:
            path, shown = place.choose(out_dir, "", job.name)
        else:
            trace, trace_shown = place.choose(None, job.output.dir, job.name)
            path, shown = trace / fmt, f"{trace_shown}/{fmt}"
        target = place.inspect(path, shown, force, protect=(job_file,), names=())
        said: dict = {}
        with outdir.Writer(target, force, what="export", names=()) as w:
            ops = build_commops(job)
            w.write(lambda tmp: said.update(zip(("message", "notes"), fill(job, ops, tmp))))
        for n in said["notes"][:5]:
            click.echo(f"note: {n}", err=True)
        if len(said["notes"]) > 5:
            click.echo(f"note: ... and {len(said['notes']) - 5} more ops without a SimAI column", err=True)
        for warning in w.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(f"wrote {shown}/: {said['message']}")


@export.command("chakra")
@_common
def chakra(job_file, preset, sets, detail, out_dir, force):
    """One Chakra ET file per rank (compute, COMM_COLL, COMM_SEND/RECV nodes with data deps)."""
    def fill(job, ops, tmp: Path):
        from ..emit.sims.chakra import write_chakra
        write_chakra(ops, job.world, job.name, tmp)
        return (f"{job.world} Chakra ET files ({job.name}.<rank>.et) from {len(ops)} ops, "
                "comm_groups.json"), []
    _export("chakra", job_file, preset, sets, detail, out_dir, force, fill)


@export.command("simai")
@_common
def simai(job_file, preset, sets, detail, out_dir, force):
    """The SimAI / AICB workload text of the job."""
    def fill(job, ops, tmp: Path):
        from ..emit.sims.simai import write_simai
        path, notes = write_simai(job, ops, tmp)
        return path.name, notes
    _export("simai", job_file, preset, sets, detail, out_dir, force, fill)


OTG_NAMES = ("otg.json", "otg.yaml", "otg-schedule.json")


@export.command("otg")
@_common
@click.option("--lab", default=None, type=click.Path(dir_okay=False), metavar="PLAN.yaml",
              help="Tester ports and addresses from a lab plan (see emit/views/lab.py); default: every NIC "
                   "with traffic at the job's own addresses.")
@click.option("--max-flows", type=click.IntRange(1, 1_000_000), default=None, metavar="N",
              help="At most N OTG flows (default 4096); beyond, phases and collectives are merged "
                   "per QP and message size, then per QP (see README).")
def otg(job_file, preset, sets, detail, out_dir, force, lab, max_flows):
    """The job's RoCEv2 traffic as an Open Traffic Generator config (snappi) for a closed-loop tester."""
    from ..output import folder as outdir, place
    from .common import command_errors, load, pcap_options
    from ..timing.work import DEFAULT_MAX_WORK, estimate
    with command_errors():
        try:
            import snappi  # noqa: F401
        except ImportError:
            raise ConfigError("export otg builds its config with snappi: pip install 'tracegen[otg]'") from None
        from ..emit.sims.otg import DEFAULT_MAX_FLOWS, write_otg
        job = pcap_options(load(job_file, preset, sets, detail), lab=lab, ns3=False)
        if job.output.time_window:
            raise ConfigError("export otg: output.time_window cuts messages into packets; an OTG flow holds "
                              "whole messages - leave it out")
        if out_dir:
            path, shown = place.choose(out_dir, "", job.name)
        else:
            trace, trace_shown = place.choose(None, job.output.dir, job.name)
            path, shown = trace / "otg", f"{trace_shown}/otg"
        said, got = {}, {}

        def work():
            from ..pipeline import run_pipeline
            estimate(job, DEFAULT_MAX_WORK, pcap=True)
            got["run"] = run_pipeline(job, emit=True)

        w = outdir.write_folder(path, shown, lambda tmp: said.update(
            message=write_otg(got["run"], tmp, max_flows or DEFAULT_MAX_FLOWS)), force=force,
            protect=(job_file, job.output.lab), names=OTG_NAMES, what="export", work=work)
        for warning in w.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(f"wrote {w.t.shown}/: {said['message']}")
