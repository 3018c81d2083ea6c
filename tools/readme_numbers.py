"""The numbers README.md quotes, regenerated from the code that produces them.

    python tools/readme_numbers.py            # rewrite every marked block of README.md
    python tools/readme_numbers.py --check    # exit 1 naming each block that differs; writes nothing
    python tools/readme_numbers.py --check --quick   # the same, long cells kept as the README has them

A block is the text between `<!-- readme_numbers: NAME begin -->` and
`<!-- readme_numbers: NAME end -->`; only that text is ever rewritten. Each number comes from the
path `tracegen` itself prints it on: the preset table from `tracegen plan --preset P --json` (run
in-process), the samples from the commands they show (their output into a pipe, trailing blanks
stripped), the example's frame count from the committed pcap that tests/test_examples.py
regenerates byte for byte.

Long cells: deepseek-v3's pcap estimate needs its whole wire plan (26 M network messages: minutes
and ~17 GB); bench/bench_scale.py's table, four llama3-405b plans of 2,048-16,384 GPUs (minutes;
its wall time and memory columns are the machine's and stay as measured). With --quick
(tests/test_readme_numbers.py without TRACEGEN_LONG=1) both are kept as the README has them, and
deepseek-v3's other cells are still computed: its transfers from the chunk templates alone, the
count `plan` prints for a job it times chunk by chunk.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))            # this checkout's tracegen, whatever is installed
README = ROOT / "README.md"
MARK = re.compile(r"(<!-- readme_numbers: ([\w-]+) begin -->)(.*?)(<!-- readme_numbers: \2 end -->)", re.S)

# The preset table: what each row is for (prose, kept here) and which rows need the long path.
PRESET_ROWS = [
    ("default", "every traffic kind (DP, TP, PP, tied embeddings) of a tiny model", "`tracegen generate`"),
    ("gpt2-small", "the tutorial's baseline: the pipeline boundary on the wire", "`--nics 0` (one NIC)"),
    ("llama3-8b", "TP inside a node over NVLink, DP AllReduce across nodes", "`--no-pcap`, or filters"),
    ("mixtral-8x7b", "expert-parallel AllToAll across nodes, SP", "`--no-pcap`, or filters"),
    ("llama3-70b", "interleaved 1F1B (vpp=5), SP, ZeRO-1", "`tracegen plan` first"),
    ("deepseek-v3", "MLA, 256 experts over ep=16, pp=4, ZeRO-1", "`tracegen plan` first (long, below)"),
    ("gpt3-175b", "3D parallelism at scale (tp=8, pp=8, dp=2)", "`tracegen plan` first"),
]
LONG_PRESETS = {"deepseek-v3"}
PRESET_HEADER = ("| preset | GPUs | what it shows | transfers | pcap of every NIC | start with |\n"
                 "|---|---|---|---|---|---|")

COLLECTIVE_ARGS = ["collective", "all_reduce", "-b", "8M", "-e", "1G", "-f", "2", "--nodes", "16"]
RING_TREE_NODES = (4, 8, 16)
# The README runs it with `--png docs/token-premium-dante.png`; the picture is not regenerated
# here (it only adds a `wrote ...` line to the output, left out of the sample).
TOKENS_ARGS = ["tokens", "dante-it", "dante-en", "--reference", "dante-en", "--train-bpe", "2000"]
TOKENS_SHOWN = TOKENS_ARGS + ["--png", "docs/token-premium-dante.png"]
EXAMPLE_PCAP = ROOT / "traces" / "examples" / "default-pp-nic0" / "pcap" / "node0000-rail0.pcap"


def cli(args: list[str]) -> str:
    """What `tracegen ARGS | cat` prints (in-process; stdout is not a terminal, so tables are as
    wide as they need); exits on a failure."""
    from click.testing import CliRunner
    from tracegen.cli import main
    res = CliRunner().invoke(main, args, env={"COLUMNS": "100"})
    if res.exit_code != 0:
        raise SystemExit(f"tracegen {' '.join(args)} failed ({res.exit_code}): {res.output[-2000:]}")
    return "\n".join(line.rstrip() for line in res.stdout.splitlines())


@functools.lru_cache(maxsize=None)
def _plan_text(preset: str) -> str:
    return cli(["plan", "--preset", preset, "--json"])


def plan_json(preset: str) -> dict:
    return json.loads(_plan_text(preset))


def chunk_transfers(preset: str) -> int:
    """The transfers `tracegen plan` counts for a job it times chunk by chunk (detail full): the
    collectives stage's rows, built without the schedule or the pcap estimate."""
    from tracegen.collectives import expand
    from tracegen.config import load_job
    from tracegen.pipeline import chunk_transfer_count, pick_detail
    from tracegen.fabric.topology import build_fabric
    from tracegen.workload import build_commops
    job = load_job(None, preset=preset, sets=[])
    fabric, ops = build_fabric(job), build_commops(job)
    if pick_detail(job.detail, False, chunk_transfer_count(ops, fabric, job)) != "full":
        raise SystemExit(f"{preset} is timed per connection: chunk_transfers does not give plan's count")
    return len(expand(ops, fabric, job.nccl))


def fmt_count(n: int) -> str:
    return f"{n:,}"


def fmt_bytes(n: int) -> str:
    """As `tracegen plan` prints the pcap estimate (report/render.py _short_bytes)."""
    from tracegen.report.render import _short_bytes
    return _short_bytes(n)


def _old_cells(old: str, preset: str) -> list[str] | None:
    for line in old.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == f"`{preset}`":
            return cells
    return None


def preset_table(old: str, quick: bool) -> str:
    from tracegen.config import load_job
    lines = [PRESET_HEADER]
    for k, (preset, what, start) in enumerate(PRESET_ROWS):
        job = load_job(None, preset=preset, sets=[])
        gpn = job.world // job.nodes
        gpus = f"{job.world} ({job.nodes} nodes × {gpn})" if k == 0 else f"{job.world} ({job.nodes} × {gpn})"
        if quick and preset in LONG_PRESETS:
            transfers = fmt_count(chunk_transfers(preset))
            kept = _old_cells(old, preset)
            pcap = kept[4] if kept and len(kept) == 6 else "(run tools/readme_numbers.py without --quick)"
        else:
            doc = plan_json(preset)
            transfers, pcap = fmt_count(doc["transfers"]), fmt_bytes(doc["pcap"]["bytes"])
        lines.append(f"| `{preset}` | {gpus} | {what} | {transfers} | {pcap} | {start} |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def collective_sample(old: str, quick: bool) -> str:
    return "\n```\ntracegen " + " ".join(COLLECTIVE_ARGS) + "\n" + cli(COLLECTIVE_ARGS) + "\n```\n"


def ring_tree_table(old: str, quick: bool) -> str:
    """busbw of a 1 GiB AllReduce, ring vs tree: the busbw column of `tracegen collective
    all_reduce -b 1G -e 1G --nodes N --algorithm A`."""
    lines = ["| nodes | ring | tree | tree / ring |", "|---|---|---|---|"]
    for nodes in RING_TREE_NODES:
        bw = {}
        for algo in ("ring", "tree"):
            out = cli(["collective", "all_reduce", "-b", "1G", "-e", "1G", "--nodes", str(nodes), "--algorithm", algo])
            row = [line for line in out.splitlines() if not line.startswith("#")]
            bw[algo] = row[0].split()[-1]
        lines.append(f"| {nodes} | {bw['ring']} | {bw['tree']} | {float(bw['tree']) / float(bw['ring']):.2f} |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def tokens_sample(old: str, quick: bool) -> str:
    return ("\n```\ntracegen " + " ".join(TOKENS_SHOWN) + "\n```\n```\n" + cli(TOKENS_ARGS) + "\n```\n")


def example_frames(old: str, quick: bool) -> str:
    """Records in the committed example capture (classic pcap: 24 B file header, 16 B per record)."""
    import struct
    data = EXAMPLE_PCAP.read_bytes()
    off, n = 24, 0
    while off < len(data):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
        n += 1
    return fmt_count(n)


def gpt3_transfers(old: str, quick: bool) -> str:
    return fmt_count(plan_json("gpt3-175b")["transfers"])


def default_net_flows(old: str, quick: bool) -> str:
    """The default job's transfers on the fabric: the flows of its ns-3 scenario (flow.txt)."""
    return fmt_count(plan_json("default")["net_transfers"])


ECMP_QPS, ECMP_SEEDS = 1000, range(6)


def ecmp_spread(old: str, quick: bool) -> str:
    """How far the busiest or idlest spine is from its share when 1,000 consecutive QPs (mlx5
    source ports of QPN pairs, as connections.py numbers them) cross a two-leaf fabric, per
    spine count, over fabric.ecmp_seed 0-5: the routes every schedule, pcap and ns-3 scenario use."""
    import numpy as np
    from tracegen.config import job_from_dict
    from tracegen.timing.connections import udp_sport
    from tracegen.fabric.topology import build_fabric
    parts = []
    for spines in (4, 8):
        devs = []
        for seed in ECMP_SEEDS:
            job = job_from_dict({"model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32},
                                 "parallelism": {"dp": 4, "tp": 1, "pp": 1, "global_batch": 4},
                                 "cluster": {"gpus_per_node": 1},
                                 "fabric": {"nodes_per_leaf": 1, "spines": spines, "ecmp_seed": seed}})
            f = build_fabric(job)
            qpn = np.arange(0x100, 0x100 + ECMP_QPS)
            sport = udp_sport(qpn, qpn + 0x40)
            first_hop = f.router.node_after(f.router.routes(np.zeros(ECMP_QPS, int), np.full(ECMP_QPS, 3), sport, 0), 1)
            counts = np.bincount(first_hop - f.spine_node_id(0), minlength=spines)
            share = ECMP_QPS / spines
            devs.append(float(np.abs(counts - share).max() / share * 100))
        parts.append(f"{min(devs):.0f}-{max(devs):.0f} % ({spines} spines)")
    return " or ".join(parts)


def deepseek_messages(old: str, quick: bool) -> str:
    """The network messages deepseek-v3's pcap estimate expands (plan's net msgs, all dims): long."""
    if quick:
        return old
    return f"{sum(d['net_messages'] for d in plan_json('deepseek-v3')['dims']) / 1e6:.1f} M"


BENCH_SIZES = ("2k", "4k", "8k", "16k")


def bench_scale_table(old: str, quick: bool) -> str:
    """bench/bench_scale.py's table: ops (timed), rows and the iteration from its own fresh-process
    plans (long: minutes); wall s and peak GB are the machine's, kept as measured in the README."""
    if quick:
        return old
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_scale
    kept = {}
    for line in old.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        kept[cells[0]] = cells[1:3]
    lines = ["| GPUs | wall s | peak GB | ops (timed) | rows | iteration |", "|---|---|---|---|---|---|"]
    for size in BENCH_SIZES:
        r = bench_scale.run(bench_scale.PRESETS[size], 1800)
        if "error" in r:
            raise SystemExit(f"bench_scale {size}: {r['error']}")
        gpus = fmt_count(r["gpus"])
        wall, peak = kept.get(gpus, [f"{r['process_wall_s']:.1f}", f"{r['peak_rss_gb']:.2f}"])
        lines.append(f"| {gpus} | {wall} | {peak} | {r['ops']:,} ({r['timed_ops']:,}) | {r['rows']:,} | "
                     f"{r['iteration_ns'] / 1e9:.1f} s |")
    return "\n\n" + "\n".join(lines) + "\n\n"


@dataclass(frozen=True)
class Block:
    render: Callable[[str, bool], str]
    what: str


BLOCKS = {
    "presets": Block(preset_table, "the preset table (tracegen plan --preset P --json)"),
    "gpt3-transfers": Block(gpt3_transfers, "gpt3-175b's transfers (tracegen plan)"),
    "example-frames": Block(example_frames, "frames of traces/examples/default-pp-nic0"),
    "collective": Block(collective_sample, "the `tracegen collective` sample"),
    "ring-tree": Block(ring_tree_table, "ring vs tree busbw at 1 GiB (tracegen collective)"),
    "tokens": Block(tokens_sample, "the `tracegen tokens` sample"),
    "default-net-flows": Block(default_net_flows, "the default job's transfers on the fabric (tracegen plan)"),
    "ecmp-spread": Block(ecmp_spread, "spine shares of 1,000 consecutive QPs (routing.py)"),
    "deepseek-messages": Block(deepseek_messages, "deepseek-v3's network messages (tracegen plan, long)"),
    "bench-scale": Block(bench_scale_table, "bench/bench_scale.py's counts (long)"),
}


def regenerate(text: str, quick: bool = False, only: set[str] | None = None) -> tuple[str, list[str]]:
    """(new text, names of the blocks whose content changed). Unknown or missing blocks are errors."""
    found = [m.group(2) for m in MARK.finditer(text)]
    unknown = sorted(set(found) - set(BLOCKS))
    missing = sorted(set(BLOCKS) - set(found))
    twice = sorted({n for n in found if found.count(n) > 1})
    if unknown or missing or twice:
        raise SystemExit(f"README.md markers: unknown {unknown}, missing {missing}, repeated {twice}")
    changed: list[str] = []

    def sub(m: re.Match) -> str:
        name, old = m.group(2), m.group(3)
        if only is not None and name not in only:
            return m.group(0)
        new = BLOCKS[name].render(old, quick)
        if new != old:
            changed.append(name)
        return m.group(1) + new + m.group(4)

    return MARK.sub(sub, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 naming each block that differs")
    ap.add_argument("--quick", action="store_true",
                    help="keep the long cells (deepseek-v3's pcap, bench_scale's table) as they are")
    ap.add_argument("--only", action="append", metavar="NAME", choices=sorted(BLOCKS),
                    help="only this block (repeatable)")
    ap.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    text = a.readme.read_text("utf-8")
    new, changed = regenerate(text, a.quick, set(a.only) if a.only else None)
    if a.check:
        for name in changed:
            print(f"README.md block {name!r} ({BLOCKS[name].what}) differs from what the code prints; "
                  "run python tools/readme_numbers.py", file=sys.stderr)
        return 1 if changed else 0
    if new != text:
        a.readme.write_text(new, "utf-8")
    print(f"README.md: {', '.join(changed) if changed else 'no block'} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
