"""`tracegen export chakra|simai JOB -o DIR`: the job's CommOp table for other simulators.

chakra  one Chakra execution trace per rank (`<job>.<rank>.et`, mlc-chakra's schema and writer)
        plus comm_groups.json — ASTRA-sim 2.x and other Chakra consumers read them
simai   the SimAI / AICB workload text (`<job>.txt`) that SimAI-Analytical / SimAI-Simulator run
Only the workload stage runs (no schedule): what is exported is what must be communicated.
"""
from __future__ import annotations

from pathlib import Path

import click

from .errors import ConfigError, OutputError


@click.group("export")
def export() -> None:
    """Write the job's CommOp table for other simulators (Chakra ET, SimAI workload)."""


def _ops(job_file, preset, sets, detail=None):
    from .cli import _load
    from .workload import build_commops
    job = _load(job_file, preset, sets, detail)
    return job, build_commops(job)


def _common(f):
    from .cli import _job_options
    f = click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
                     help="Output folder (default traces/<job name>/<format>).")(f)
    return _job_options(f)


@export.command("chakra")
@_common
def chakra(job_file, preset, sets, detail, out_dir):
    """One Chakra ET file per rank (compute, COMM_COLL, COMM_SEND/RECV nodes with data deps)."""
    from .cli import _fail
    from .emit.chakra import write_chakra
    try:
        job, ops = _ops(job_file, preset, sets)
        dest = Path(out_dir or Path("traces") / job.name / "chakra")
        paths = write_chakra(ops, job.world, job.name, dest)
    except (ConfigError, OutputError) as e:
        _fail(str(e))
    click.echo(f"wrote {dest}/: {job.world} Chakra ET files ({job.name}.<rank>.et) "
               f"from {len(ops)} ops, comm_groups.json")
    return paths


@export.command("simai")
@_common
def simai(job_file, preset, sets, detail, out_dir):
    """The SimAI / AICB workload text of the job."""
    from .cli import _fail
    from .emit.simai import write_simai
    try:
        job, ops = _ops(job_file, preset, sets)
        dest = Path(out_dir or Path("traces") / job.name / "simai")
        path, notes = write_simai(job, ops, dest)
    except (ConfigError, OutputError) as e:
        _fail(str(e))
    for n in notes[:5]:
        click.echo(f"note: {n}", err=True)
    if len(notes) > 5:
        click.echo(f"note: ... and {len(notes) - 5} more ops without a SimAI column", err=True)
    click.echo(f"wrote {path}")
