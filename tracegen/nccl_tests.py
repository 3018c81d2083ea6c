"""`tracegen collective`: one NCCL collective swept over sizes, as NVIDIA's nccl-tests runs it
(`all_reduce_perf -b 8M -e 1G -f 2`), timed by tracegen's schedule on a cluster preset.

Every size is one CommOp over all GPUs of `--nodes` nodes, chained after the previous size (as the
benchmark runs them one after the other), expanded by the collectives stage and scheduled; its
time is the op's scheduled duration. The table is nccl-tests' (size, count, type, redop, root,
time, algbw, busbw) with nccl-tests' definitions (its doc/PERFORMANCE.md):
  algbw = size / time;  busbw = algbw x factor,  factor: all_reduce 2(n-1)/n; all_gather,
  reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1.
Sizes: all_reduce/broadcast/reduce the buffer; all_gather/reduce_scatter the gathered buffer
(count = elements per rank); alltoall one rank's send buffer; sendrecv what each rank sends to the
next (rank r -> r+1, all at once).
`-o DIR` writes what `tracegen generate` writes (pcaps, ns-3 scenario, flows.csv, summary.md) for
the sweep: the capture of one all_reduce_perf run (without its warm-up iterations).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from .errors import ConfigError, OutputError
from .tables import CollKind, Dim, Phase

COLLECTIVES = {"all_reduce": CollKind.ALLREDUCE, "all_gather": CollKind.ALLGATHER,
               "reduce_scatter": CollKind.REDUCESCATTER, "alltoall": CollKind.ALLTOALL,
               "broadcast": CollKind.BROADCAST, "reduce": CollKind.REDUCE,
               "sendrecv": CollKind.SENDRECV}
TYPES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4, "uint32": 4,
         "double": 8, "int64": 8, "uint64": 8}
_SIZE = re.compile(r"(\d+)([KMGkmg]?)[bB]?")


def parse_size(text: str, flag: str) -> int:
    """nccl-tests' sizes: 8, 64K, 8M, 1G (binary multiples)."""
    m = _SIZE.fullmatch(str(text).strip())
    if not m:
        raise ConfigError(f"{flag} {text!r}: use bytes or a size like 64K, 8M, 1G")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def busbw_factor(kind: CollKind, n: int) -> float:
    if kind == CollKind.ALLREDUCE:
        return 2 * (n - 1) / n
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL):
        return (n - 1) / n
    return 1.0


def sizes(min_bytes: int, max_bytes: int, factor: int, step_bytes: int) -> list[int]:
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size = size * factor if factor > 1 else size + step_bytes
    return out


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_ns: int

    @property
    def algbw_gbps(self) -> float:       # GB/s = bytes / ns
        return self.size_bytes / self.time_ns if self.time_ns else 0.0


def collective_job(cluster: str, nodes: int, algorithm: str, channels: int, protocol: str,
                   name: str):
    """A Job that only sets the fabric and NCCL: every GPU of `nodes` nodes, one DP group."""
    from .config import job_from_dict
    if nodes < 1:
        raise ConfigError(f"--nodes {nodes}: give at least 1 node")
    base = job_from_dict({"cluster": cluster}, name=name).cluster
    world = nodes * base.gpus_per_node
    return job_from_dict({
        "name": name, "cluster": {"preset": cluster, "nodes": nodes},
        "parallelism": {"dp": world, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": world},
        # NCCL's search finds one channel per NIC on rail-optimised nodes and doubles them
        "nccl": {"algorithm": algorithm, "protocol": protocol, "channels": channels or 2 * base.nics}},
        name=name)


def build_ops(kind: CollKind, world: int, size_list: list[int], elem_bytes: int):
    """One op per size (sendrecv: one per ring pair), each size after the whole previous one."""
    from .workload.streams import OpList
    ops = OpList()
    prev: list[int] = []
    per_size = []
    for i, size in enumerate(size_list):
        if kind == CollKind.SENDRECV:
            groups = [[r, (r + 1) % world] for r in range(world)]
        else:
            groups = [list(range(world))]
        ids = [ops.new(kind, Dim.DP, Phase.FWD, 0, -1, -1, i, 0, size, elem_bytes, g) for g in groups]
        for op_id in ids:
            ops.meet(op_id, prev, 0)
        per_size.append(ids)
        prev = ids
    return ops.table(), per_size


def run_collective(name: str, cluster: str, nodes: int, min_bytes: int, max_bytes: int,
                   factor: int = 2, step_bytes: int = 0, dtype: str = "float",
                   algorithm: str = "ring", channels: int = 0, protocol: str = "simple"):
    """(rows, run): the nccl-tests table of one sweep and the pipeline Run behind it."""
    from .collectives import expand
    from .pipeline import Run
    from .report import build_report
    from .schedule import schedule
    from .topology import build_fabric
    if name not in COLLECTIVES:
        raise ConfigError(f"collective {name!r}: use one of " + ", ".join(COLLECTIVES))
    if dtype not in TYPES:
        raise ConfigError(f"-d {dtype!r}: use one of " + ", ".join(TYPES))
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ConfigError(f"-b {min_bytes} / -e {max_bytes}: need 1 <= minbytes <= maxbytes")
    if factor < 2 and step_bytes < 1:
        raise ConfigError("-f FACTOR must be >= 2, or give -i STEPBYTES >= 1")
    kind, eb = COLLECTIVES[name], TYPES[dtype]
    job = collective_job(cluster, nodes, algorithm, channels, protocol,
                         f"{name}-{nodes}x{cluster}")
    fabric = build_fabric(job)
    n = fabric.world
    if n < 2:
        raise ConfigError(f"--nodes {nodes} x {fabric.gpus_per_node} GPUs: a collective needs 2 or more")
    size_list = sizes(min_bytes, max_bytes, factor, step_bytes)
    ops, per_size = build_ops(kind, n, size_list, eb)
    transfers = expand(ops, fabric, job.nccl)
    flows = schedule(ops, transfers, fabric, job)
    rows = []
    redop = "sum" if kind in (CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.REDUCE) else "none"
    root = 0 if kind in (CollKind.BROADCAST, CollKind.REDUCE) else -1
    for size, ids in zip(size_list, per_size):
        start = int(min(flows.op_start_ns[i] for i in ids))
        end = int(max(flows.op_end_ns[i] for i in ids))
        per_rank = kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER)
        count = size // eb // (n if per_rank else 1)
        rows.append(Row(size, count, dtype, redop, root, end - start))
    report = replace(build_report(job, fabric, flows), memory=None)
    dims = [replace(d, formula_rank_bytes=-1, formula=f"nccl-tests {name}: busbw = algbw x "
                    f"{busbw_factor(kind, n):.4f}") for d in report.dims]
    return rows, Run(job, fabric, ops, transfers, flows, replace(report, dims=dims))


def format_table(name: str, rows: list[Row], n: int, header: str) -> str:
    kind = COLLECTIVES[name]
    f = busbw_factor(kind, n)
    out = [f"# {header}",
           "#",
           f"#{'size':>12}{'count':>14}{'type':>10}{'redop':>8}{'root':>8}{'time':>11}{'algbw':>9}{'busbw':>9}",
           f"#{'(B)':>12}{'(elements)':>14}{'':>10}{'':>8}{'':>8}{'(us)':>11}{'(GB/s)':>9}{'(GB/s)':>9}"]
    for r in rows:
        out.append(f" {r.size_bytes:>12}{r.count:>14}{r.dtype:>10}{r.redop:>8}{r.root:>8}"
                   f"{r.time_ns / 1e3:>11.2f}{r.algbw_gbps:>9.2f}{r.algbw_gbps * f:>9.2f}")
    avg = sum(r.algbw_gbps * f for r in rows) / len(rows) if rows else 0.0
    out.append(f"# Avg bus bandwidth    : {avg:.3f}")
    return "\n".join(out)


@click.command("collective")
@click.argument("name", metavar="COLLECTIVE", type=click.Choice(list(COLLECTIVES)))
@click.option("-b", "--minbytes", default="8M", show_default=True, help="Smallest size (8, 64K, 8M, 1G).")
@click.option("-e", "--maxbytes", default="1G", show_default=True, help="Largest size.")
@click.option("-f", "--stepfactor", type=int, default=2, show_default=True, help="Multiply the size by this.")
@click.option("-i", "--stepbytes", default="0", help="Add this to the size instead (with -f 1).")
@click.option("-d", "--datatype", default="float", show_default=True, type=click.Choice(list(TYPES)))
@click.option("--nodes", type=int, default=4, show_default=True, help="Nodes of the cluster preset.")
@click.option("--cluster", default="dgx-h100", show_default=True, help="Cluster preset (tracegen presets).")
@click.option("--algorithm", default="ring", show_default=True,
              type=click.Choice(["ring", "tree", "halving_doubling", "hierarchical", "auto"]))
@click.option("--protocol", default="simple", show_default=True, type=click.Choice(["simple", "ll", "ll128", "auto"]))
@click.option("--channels", type=int, default=0, help="NCCL channels (default: 2 per NIC, NCCL's doubled search result).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Also write pcaps, ns-3 scenario, flows.csv, summary.md of the sweep here.")
@click.option("--max-bytes", default=None, metavar="SIZE", help="With -o: refuse pcaps beyond SIZE (default 2GiB).")
@click.option("--nics", default=None, metavar="LIST", help="With -o: only these NICs' pcaps.")
def collective(name, minbytes, maxbytes, stepfactor, stepbytes, datatype, nodes, cluster, algorithm,
               protocol, channels, out_dir, max_bytes, nics):
    """Time one NCCL collective over sizes like nccl-tests' *_perf (e.g. `tracegen collective
    all_reduce -b 8M -e 1G -f 2 --nodes 16`) and print its table; -o writes the capture."""
    try:
        rows, run = run_collective(name, cluster, nodes, parse_size(minbytes, "-b"),
                                   parse_size(maxbytes, "-e"), stepfactor, parse_size(stepbytes, "-i"),
                                   datatype, algorithm, channels, protocol)
        f = run.fabric
        header = (f"tracegen collective {name}: {f.nodes} nodes x {f.gpus_per_node} GPUs ({cluster}), "
                  f"nccl {run.job.nccl.algorithm}/{run.job.nccl.protocol}, {run.job.nccl.channels} channels; "
                  "time = scheduled duration")
        click.echo(format_table(name, rows, f.world, header))
        if out_dir:
            _write(run, Path(out_dir), max_bytes, nics)
    except (ConfigError, OutputError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def _write(run, target: Path, max_bytes, nics) -> None:
    from . import outdir
    from .config import validate
    from .emit.bundle import with_pcap_estimate, write_bundle
    from .emit.select import check_budget, parse_bytes
    out = run.job.output
    if max_bytes is not None:
        out = replace(out, max_bytes=parse_bytes(max_bytes))
    if nics is not None:
        out = replace(out, nics=nics)
    job = validate(replace(run.job, output=out))
    run = with_pcap_estimate(replace(run, job=job))
    check_budget(run.report.pcap_packets, run.report.pcap_bytes, job.output)
    counts: dict = {}
    with outdir.signals_as_interrupts(), outdir.Writer(outdir.inspect(Path(target), str(target))) as w:
        w.write(lambda tmp: counts.update(write_bundle(run, tmp)))
    click.echo(f"wrote {target}/ (" + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")")
