"""`tracegen collective`: one NCCL collective swept over sizes, as NVIDIA's nccl-tests runs it
(`all_reduce_perf -b 8M -e 1G -f 2`), timed by tracegen's schedule on a cluster preset.

Every size is one CommOp over all GPUs of `--nodes` nodes, chained after the previous size (as the
benchmark runs them one after the other), expanded by the collectives stage and scheduled; its
time is the op's scheduled duration. The table is nccl-tests' (size, count, type, redop, root,
time, algbw, busbw) with nccl-tests' definitions (its doc/PERFORMANCE.md):
  algbw = size / time;  busbw = algbw x factor,  factor: all_reduce 2(n-1)/n; all_gather,
  reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1.
Sizes: all_reduce/broadcast/reduce the buffer; all_gather/reduce_scatter the gathered buffer
(count = elements per rank); alltoall one rank's send buffer (count = elements to each peer, as
nccl-tests prints it); sendrecv what each rank sends to the next (rank r -> r+1, all at once).
`-o DIR` writes what `tracegen generate` writes (pcaps, ns-3 scenario, flows.csv, summary.md) for
the sweep: the capture of one all_reduce_perf run (without its warm-up iterations), through the
same output guard (outdir: a new folder or one tracegen wrote, replaced whole; --force).

Bounds, checked before anything runs: a size is at most MAX_SIZE_BYTES (1 TiB); a sweep has at
most MAX_SIZES sizes (counted, not listed); its transfers (the work estimate's per-op count,
work.op_transfers) stay within --max-work, like a job's. Every option is checked before the sweep.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import click

from ..config import show
from ..errors import ConfigError
from ..tables import CollKind, Dim, Phase

COLLECTIVES = {"all_reduce": CollKind.ALLREDUCE, "all_gather": CollKind.ALLGATHER,
               "reduce_scatter": CollKind.REDUCESCATTER, "alltoall": CollKind.ALLTOALL,
               "broadcast": CollKind.BROADCAST, "reduce": CollKind.REDUCE,
               "sendrecv": CollKind.SENDRECV}
TYPES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4, "uint32": 4,
         "double": 8, "int64": 8, "uint64": 8}
_SIZE = re.compile(r"([0-9]+)([KMGTkmgt]?)[bB]?")
MAX_SIZE_BYTES = 1 << 40          # one size: 1 TiB, far beyond any GPU buffer
MAX_SIZES = 1000                  # sizes in one sweep (nccl-tests' own sweeps have ~30)


def parse_size(text: str, flag: str) -> int:
    """nccl-tests' sizes: 8, 64K, 8M, 1G (binary multiples), at most MAX_SIZE_BYTES."""
    m = _SIZE.fullmatch(str(text).strip())
    if not m:
        raise ConfigError(f"{flag} {show(text)}: use bytes or a size like 64K, 8M, 1G")
    digits = m.group(1).lstrip("0")
    if len(digits) > 16:
        raise ConfigError(f"{flag}: a {len(digits)}-digit size; at most 1T ({MAX_SIZE_BYTES:,} bytes)")
    value = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]
    if value > MAX_SIZE_BYTES:
        raise ConfigError(f"{flag} {show(text)}: {value:,} bytes; at most 1T ({MAX_SIZE_BYTES:,} bytes)")
    return value


def busbw_factor(kind: CollKind, n: int) -> float:
    if kind == CollKind.ALLREDUCE:
        return 2 * (n - 1) / n
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL):
        return (n - 1) / n
    return 1.0


def count_sizes(min_bytes: int, max_bytes: int, factor: int, step_bytes: int) -> int:
    """len(sizes(...)) without listing them (min_bytes >= 1: a factor sweep has <= 41 sizes)."""
    if factor > 1:
        n, size = 0, min_bytes
        while size <= max_bytes:
            n, size = n + 1, size * factor
        return n
    return (max_bytes - min_bytes) // step_bytes + 1


def check_sweep(min_bytes: int, max_bytes: int, factor: int, step_bytes: int) -> int:
    """The sweep's options, and its size count within MAX_SIZES; returns the count."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ConfigError(f"-b {min_bytes} / -e {max_bytes}: need 1 <= minbytes <= maxbytes")
    if factor < 2 and step_bytes < 1:
        raise ConfigError("-f FACTOR must be >= 2, or give -i STEPBYTES >= 1")
    n = count_sizes(min_bytes, max_bytes, factor, step_bytes)
    if n > MAX_SIZES:
        how = f"-i {step_bytes}" if factor < 2 else f"-f {factor}"
        raise ConfigError(f"-b {min_bytes} -e {max_bytes} {how}: {n:,} sizes, more than {MAX_SIZES:,}; "
                          "narrow the range (-b, -e) or take bigger steps (-i, or -f 2)")
    return n


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
    from ..config import job_from_dict
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
    from ..workload.streams import OpList
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


def sweep_transfers(kind: CollKind, job, size_list: list[int], elem_bytes: int) -> int:
    """The transfers the collectives stage will make for the sweep (work.op_transfers per size:
    within ~30 % of the real count for every collective and algorithm)."""
    from ..collectives import tuning
    from ..timing.work_templates import op_transfers
    c = job.cluster
    n, N = job.world, job.world // job.cluster.gpus_per_node
    if kind == CollKind.SENDRECV:      # n pairs of 2 ranks, point to point
        return n * sum(op_transfers(int(kind), tuning.plan(kind, job.nccl, 2, 1, 2, s, c.nic_gbps, c.nvlink_gbps),
                                    2, 1, 2, s, elem_bytes) for s in size_list)
    return sum(op_transfers(int(kind), tuning.plan(kind, job.nccl, n, N, c.gpus_per_node, s, c.nic_gbps,
                                                   c.nvlink_gbps), n, N, c.gpus_per_node, s, elem_bytes)
               for s in size_list)


def check_work(kind: CollKind, job, size_list: list[int], elem_bytes: int, max_work: int) -> int:
    """Refuse a sweep whose transfers (+ 4 units per op, as a job's) exceed max_work (0: no limit)."""
    from ..timing.work import OP_UNITS
    ops = len(size_list) * (job.world if kind == CollKind.SENDRECV else 1)
    units = sweep_transfers(kind, job, size_list, elem_bytes) + OP_UNITS * ops
    if max_work and units > max_work:
        raise ConfigError(f"sweep too big for --max-work {max_work:,}: ~{units:,} transfers over {len(size_list):,} "
                          f"sizes on {job.world} GPUs; shrink it (fewer or smaller sizes: -b, -e, -f, -i; "
                          "fewer --nodes; more --channels is not fewer) or raise --max-work (0: no limit)")
    return units


def run_collective(name: str, cluster: str, nodes: int, min_bytes: int, max_bytes: int,
                   factor: int = 2, step_bytes: int = 0, dtype: str = "float",
                   algorithm: str = "ring", channels: int = 0, protocol: str = "simple",
                   max_work: int | None = None):
    """(rows, run): the nccl-tests table of one sweep and the pipeline Run behind it.
    max_work: refuse beyond that many work units (None: work.DEFAULT_MAX_WORK; 0: no limit)."""
    from ..collectives import expand
    from ..pipeline import Run
    from ..report.build import build_report
    from ..timing.schedule import schedule
    from ..fabric.topology import build_fabric
    from ..timing.work import DEFAULT_MAX_WORK
    if name not in COLLECTIVES:
        raise ConfigError(f"collective {name!r}: use one of " + ", ".join(COLLECTIVES))
    if dtype not in TYPES:
        raise ConfigError(f"-d {dtype!r}: use one of " + ", ".join(TYPES))
    check_sweep(min_bytes, max_bytes, factor, step_bytes)
    kind, eb = COLLECTIVES[name], TYPES[dtype]
    job = collective_job(cluster, nodes, algorithm, channels, protocol,
                         f"{name}-{nodes}x{cluster}")
    fabric = build_fabric(job)
    n = fabric.world
    if n < 2:
        raise ConfigError(f"--nodes {nodes} x {fabric.gpus_per_node} GPUs: a collective needs 2 or more")
    size_list = sizes(min_bytes, max_bytes, factor, step_bytes)
    check_work(kind, job, size_list, eb, DEFAULT_MAX_WORK if max_work is None else max_work)
    ops, per_size = build_ops(kind, n, size_list, eb)
    transfers = expand(ops, fabric, job.nccl)
    flows = schedule(ops, transfers, fabric, job)
    rows = []
    redop = "sum" if kind in (CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.REDUCE) else "none"
    root = 0 if kind in (CollKind.BROADCAST, CollKind.REDUCE) else -1
    for size, ids in zip(size_list, per_size):
        start = int(min(flows.op_start_ns[i] for i in ids))
        end = int(max(flows.op_end_ns[i] for i in ids))
        # nccl-tests prints paramcount: AllGather / ReduceScatter per rank, AlltoAll per peer
        # (src/alltoall.cu AlltoAllGetCollByteCount: count/nranks), the others the whole buffer
        per_rank = kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL)
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
@click.option("-b", "--minbytes", default="8M", show_default=True, help="Smallest size (8, 64K, 8M, 1G; at most 1T).")
@click.option("-e", "--maxbytes", default="1G", show_default=True, help="Largest size.")
@click.option("-f", "--stepfactor", type=int, default=2, show_default=True, help="Multiply the size by this.")
@click.option("-i", "--stepbytes", default="0",
              help=f"Add this to the size instead (with -f 1); a sweep has at most {MAX_SIZES:,} sizes.")
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
@click.option("--force", is_flag=True,
              help="With -o: write into a folder tracegen would refuse, beside what is there; deletes only "
                   "files tracegen wrote.")
@click.option("--max-work", default=None, metavar="N",
              help="Refuse sweeps estimated beyond N work units (~transfers; default as generate's; 0: no limit).")
def collective(name, minbytes, maxbytes, stepfactor, stepbytes, datatype, nodes, cluster, algorithm,
               protocol, channels, out_dir, max_bytes, nics, force, max_work):
    """Time one NCCL collective over sizes like nccl-tests' *_perf (e.g. `tracegen collective
    all_reduce -b 8M -e 1G -f 2 --nodes 16`) and print its table; -o writes the capture."""
    from ..output import place
    from .common import command_errors
    from ..timing.work import parse_work
    with command_errors():
        # every option first: nothing runs before a mistake is found
        lo, hi, step = parse_size(minbytes, "-b"), parse_size(maxbytes, "-e"), parse_size(stepbytes, "-i")
        check_sweep(lo, hi, stepfactor, step)
        work = parse_work(max_work) if max_work is not None else None
        if max_bytes is not None:
            from ..emit.packets.select import parse_bytes
            parse_bytes(max_bytes)
        target = None
        if out_dir:
            out = _output(name, cluster, nodes, algorithm, channels, protocol, max_bytes, nics)
            path, shown = place.choose(out_dir, "", name)
            target = place.inspect(path, shown, force)
        elif max_bytes is not None or nics is not None or force:
            raise ConfigError("--max-bytes, --nics and --force shape what -o writes; add -o DIR or leave them out")
        rows, run = run_collective(name, cluster, nodes, lo, hi, stepfactor, step, datatype, algorithm, channels,
                                   protocol, max_work=work)
        f = run.fabric
        header = (f"tracegen collective {name}: {f.nodes} nodes x {f.gpus_per_node} GPUs ({cluster}), "
                  f"nccl {run.job.nccl.algorithm}/{run.job.nccl.protocol}, {run.job.nccl.channels} channels; "
                  "time = scheduled duration")
        click.echo(format_table(name, rows, f.world, header))
        if target is not None:
            _write(replace(run, job=replace(run.job, output=out)), target, force)


def _output(name, cluster, nodes, algorithm, channels, protocol, max_bytes, nics):
    """The sweep job's output section with -o's options, validated (before the sweep runs)."""
    from ..config import validate
    from ..emit.packets.select import parse_bytes
    job = collective_job(cluster, nodes, algorithm, channels, protocol, f"{name}-{nodes}x{cluster}")
    out = job.output
    if max_bytes is not None:
        out = replace(out, max_bytes=parse_bytes(max_bytes))
    if nics is not None:
        out = replace(out, nics=nics)
    job = validate(replace(job, output=out))
    from ..emit.packets.select import parse
    from ..fabric.topology import build_fabric
    parse(job.output, build_fabric(job))           # NIC names and indices against the fabric
    return job.output


def _write(run, target, force: bool) -> None:
    from ..output import folder as outdir
    from ..emit.bundle import with_pcap_estimate, write_bundle
    from ..emit.packets.select import check_budget
    run = with_pcap_estimate(run)
    check_budget(run.report.pcap_packets, run.report.pcap_bytes, run.job.output)
    counts: dict = {}
    with outdir.Writer(target, force) as w:
        w.write(lambda tmp: counts.update(write_bundle(run, tmp)))
    for warning in w.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {target.shown}/ (" + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")")
