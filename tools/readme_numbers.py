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

ns-3 cells (the incast of tests/test_ns3_fabric.py, the default job's run) need the pip package
ns3 (the test extra) and load it once: about a minute. Speeds and wall times are the machine's:
the README names them as measurements, never between markers.

Long cells: the llama3-405b leaf0 command's pcaps (minutes, ~2.5 GB); the ns-3 cells of the
fat-tree k=8 and of bench_ns3.py's job (minutes); deepseek-v3's pcap estimate needs its whole wire plan (26 M network messages: minutes
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


TABLES_PRESET = "gpt2-small"


def table_sizes(old: str, quick: bool) -> str:
    """flows.parquet and flows.csv of one preset, as `generate --set output.tables=csv,parquet`
    writes them (no pcap, ns-3 or pictures: they do not change the tables)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:
        cli(["generate", "-q", "--preset", TABLES_PRESET, "--set", "output.tables=csv,parquet", "--set",
             "output.pictures=false", "--no-pcap", "--no-ns3", "-o", f"{tmp}/t"])
        pq, csv = (Path(tmp, "t", f"flows.{ext}").stat().st_size for ext in ("parquet", "csv"))
    return (f"for {TABLES_PRESET} ({plan_json(TABLES_PRESET)['transfers']:,} transfers) flows.parquet is "
            f"{fmt_bytes(pq)}, flows.csv {fmt_bytes(csv)}")


def otg_lab(old: str, quick: bool) -> str:
    """`tracegen export otg --lab lab.yaml` for the default job, lab.yaml as the README shows it:
    the ports, flows and payload bytes it reports (tests/test_export_otg.py counts the same bytes
    in the lab pcaps with its own parser)."""
    import tempfile
    text = README.read_text("utf-8")
    m = re.search(r"```yaml\n# lab.yaml\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("README.md has no lab.yaml block")
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:
        Path(tmp, "lab.yaml").write_text(m.group(1), "utf-8")
        said = cli(["export", "otg", "--lab", f"{tmp}/lab.yaml", "-o", f"{tmp}/otg"])
    got = re.search(r"(\d+) ports, ([\d,]+) flows \(level \w[\w-]*\), ([\d,]+) B of RDMA WRITE payload", said)
    if not got:
        raise SystemExit(f"export otg said: {said[-300:]}")
    return f"{got.group(1)} ports, {got.group(2)} flows, {got.group(3)} B"


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


def ecmp_qp_spread(old: str, quick: bool) -> str:
    """fabric.ecmp_hash: qp - the same 1,000 consecutive QPs, hashed on their BTH DestQP: the largest
    distance of any spine's count from its share, in QPs, over 4 and 8 spines and seeds 0-5."""
    import numpy as np
    from tracegen.config import job_from_dict
    from tracegen.timing.connections import udp_sport
    from tracegen.fabric.topology import build_fabric
    worst = 0.0
    for spines in (4, 8):
        for seed in ECMP_SEEDS:
            job = job_from_dict({"model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32},
                                 "parallelism": {"dp": 4, "tp": 1, "pp": 1, "global_batch": 4},
                                 "cluster": {"gpus_per_node": 1},
                                 "fabric": {"nodes_per_leaf": 1, "spines": spines, "ecmp_seed": seed,
                                            "ecmp_hash": "qp"}})
            f = build_fabric(job)
            qpn = np.arange(0x100, 0x100 + ECMP_QPS)
            route = f.router.routes(np.zeros(ECMP_QPS, int), np.full(ECMP_QPS, 3), udp_sport(qpn, qpn + 0x40), 0,
                                    dest_qpn=qpn + 0x40)
            counts = np.bincount(f.router.node_after(route, 1) - f.spine_node_id(0), minlength=spines)
            worst = max(worst, float(np.abs(counts - ECMP_QPS / spines).max()))
    n = int(np.ceil(worst))
    return "exactly uniform" if n == 0 else "within one QP of uniform" if n == 1 else f"within {n} QPs of uniform"


def deepseek_messages(old: str, quick: bool) -> str:
    """The network messages deepseek-v3's pcap estimate expands (plan's net msgs, all dims): long."""
    if quick:
        return old
    return f"{sum(d['net_messages'] for d in plan_json('deepseek-v3')['dims']) / 1e6:.1f} M"


# The port-queue example: the default job's PP and DP traffic, dp 8 on 2 nodes per leaf, leaf0's
# switch view; waits of the frames leaf0's NICs send onto its uplinks.
WAIT_ARGS = ["--collective", "pp,dp", "--set", "parallelism.dp=8", "--set", "parallelism.global_batch=32",
             "--set", "fabric.nodes_per_leaf=2", "--switch", "leaf0", "--no-ns3"]
WAIT_FABRICS = ("leaf-spine-2to1", "leaf-spine-4to1")


def _roce_key(frame: bytes):
    """(src IP, dst IP, IP id, BTH opcode, dest QP, PSN) of an IPv4 RoCEv2 frame: one sent frame,
    whichever copy of it a file holds (a router changes MACs and TTL, never these)."""
    off = 14 + (4 if frame[12:14] == b"\x81\x00" else 0)
    if frame[off - 2:off] != b"\x08\x00":
        return None
    ip = frame[off:off + 20]
    bth = frame[off + (ip[0] & 15) * 4 + 8:][:12]
    return ip[12:20], ip[4:6], bth[0], bth[5:8], bth[9:12]


def _pcap_records(path: Path):
    import struct
    data = path.read_bytes()
    off = 24
    while off < len(data):
        sec, nsec, incl = struct.unpack_from("<III", data, off)
        yield sec * 10**9 + nsec, data[off + 16:off + 16 + incl]
        off += 16 + incl


def uplink_waits(fabric: str) -> tuple[int, float, float]:
    """(frames, p50 ns, max ns) of leaf0's uplink waits: the time a frame leaves on a leaf0-spine
    port less the time its NIC sent it less the NIC link's latency (the port files are cut-through:
    0 when the port was free). From the pcaps `tracegen generate` writes, read here."""
    import tempfile
    import numpy as np
    from tracegen.config import load_job
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:
        cli(["generate", "-q", "--set", f"fabric={fabric}", *WAIT_ARGS, "-o", f"{tmp}/v"])
        files = sorted(Path(tmp, "v", "pcap").glob("*.pcap"))
        sent = {}
        for f in files:
            if "spine" not in f.name:
                for t, fr in _pcap_records(f):
                    if fr[6:8] == b"\x02\x00":                    # a NIC's source MAC: as it sent it
                        sent[_roce_key(fr)] = t
        up = [(t, _roce_key(fr)) for f in files if "spine" in f.name
              for t, fr in _pcap_records(f) if fr[6:8] == b"\x02\x4c"]   # leaf0 -> spine
    job = load_job(None, sets=[f"fabric={fabric}", *[a for a in WAIT_ARGS if "=" in a]])
    waits = np.array([t - sent[k] - job.fabric.link_latency_ns for t, k in up])
    if len(waits) == 0 or waits.min() < 0:
        raise SystemExit(f"uplink waits on {fabric}: {len(waits)} frames, min {waits.min() if len(waits) else '-'}")
    return len(waits), float(np.median(waits)), float(waits.max())


def port_waits(old: str, quick: bool) -> str:
    (n, p50, mx), (n4, p50_4, mx4) = (uplink_waits(f) for f in WAIT_FABRICS)
    us = lambda ns: f"{ns / 1000:.1f}"
    return (f"waits p50 {us(p50)} µs, max {us(mx)} µs at the uplink over {n:,} frames (4:1: {us(p50_4)} / "
            f"{us(mx4)} µs, {n4:,} frames)")


@functools.lru_cache(maxsize=None)
def _ns3_runs() -> dict:
    """The incast of tests/test_ns3_fabric.py (six 8 MiB writes into host 0 over 4:1 uplinks) under
    DCQCN+PFC, PFC alone and neither, and the default job (nic auto): sim/summary.json of each.
    ns-3 (pip) loads once here: its import and first compile are most of the time."""
    import tempfile
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from ns3_scenarios.scenario import load_ns3
        load_ns3()
    except Exception as e:   # the README's ns-3 numbers need it: say so, as the test extra's absence
        raise SystemExit(f"the ns-3 numbers need the pip package ns3 (pip install -e '.[test]'): {e}")
    from test_ns3_fabric import simulate, write_incast
    from test_ns3_run import make_trace
    out = {}
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:   # no "test" in the path (pip ns3)
        root = write_incast(Path(tmp) / "incast")
        for name, kw in {"dcqcn_pfc": dict(dcqcn=True), "pfc": dict(dcqcn=False),
                         "none": dict(dcqcn=False, pfc=False)}.items():
            out[name] = simulate(root, **kw).s
        (Path(tmp) / "default").mkdir()
        make_trace(Path(tmp) / "default", {})
        out["default"] = simulate(Path(tmp) / "default").s
    return out


def ns3_default(old: str, quick: bool) -> str:
    s = _ns3_runs()["default"]
    return (f"iteration {s['sim_over_analytic']:.4f} × the analytic, per-flow duration / analytic p50 "
            f"{s['flow_vs_schedule_p50']:.4f}, p99 {s['flow_vs_schedule_p99']:.4f} (slowdown vs standalone on "
            f"the wire p50 {s['slowdown_on_wire_p50']:.2f}, p99 {s['slowdown_on_wire_p99']:.2f}; from posting "
            f"p50 {s['slowdown_p50']:.2f}, p99 {s['slowdown_p99']:.2f})")


def ns3_incast(old: str, quick: bool) -> str:
    runs = _ns3_runs()
    mb = lambda s: f"{s['max_switch_buffer_bytes'] / 1e6:.1f} MB"
    done = lambda s: f"done after {s['sim_iteration_ns'] / 1e6:.3g} ms"
    pauses = lambda s: (f"{s['pfc']['pause_frames']:,} PAUSE frames, {s['pfc']['paused_us_total'] / 1000:.1f} ms "
                        "paused in total" if s["pfc"]["pause_frames"] else "no PAUSE frame")
    both, pfc, none = runs["dcqcn_pfc"], runs["pfc"], runs["none"]
    if any(s["completed"] != s["flows"] for s in (both, pfc, none)):
        raise SystemExit("the ns-3 incast left flows unfinished")
    return (f"DCQCN+PFC {both['ce_packets']:,} CE-marked packets, {both['dcqcn_rate_cuts']:,} rate cuts, "
            f"{pauses(both)}, buffer peak {mb(both)}, {done(both)}; PFC only {pfc['ce_packets']:,} CE, "
            f"{pauses(pfc)}, buffer peak {mb(pfc)}, {done(pfc)}; neither: {mb(none)} peak, {done(none)}")


LEAF0_ARGS = ["generate", "--preset", "llama3-405b", "--nics", "0,8,16,24,32,40,48,56", "--iteration", "0",
              "--time-window", "80000000:400000000", "--no-ns3", "-o", "traces/leaf0"]


def leaf0_counts(old: str, quick: bool) -> str:
    """The README's llama3-405b leaf0 command (long: minutes, ~2.5 GB): its pcaps' frames and
    flows.csv's rows (one per connection-level flow), written into a temp folder."""
    if quick:
        return old
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:
        cli([*LEAF0_ARGS[:-1], f"{tmp}/leaf0"])
        frames = [sum(1 for _ in _pcap_records(f)) for f in sorted(Path(tmp, "leaf0", "pcap").glob("*.pcap"))]
        with open(Path(tmp, "leaf0", "flows.csv"), "rb") as f:
            flows = sum(1 for _ in f) - 1
        clean = _tshark_clean(sorted(Path(tmp, "leaf0", "pcap").glob("*.pcap")))
    each = (f"{len(frames)} pcaps of {frames[0]:,} frames each" if len(set(frames)) == 1 else
            f"{len(frames)} pcaps of {min(frames):,}-{max(frames):,} frames")
    return f"{each}, {clean}; flows.csv of {flows / 1e6:.1f} M connection-level flows"


def _tshark_clean(files: list[Path]) -> str:
    """"tshark clean" when tshark finds no malformed frame in any file (what the README claims)."""
    import shutil
    import subprocess
    if not shutil.which("tshark"):
        raise SystemExit("the leaf0 cell says its pcaps are tshark clean: install tshark to check it")
    bad = 0
    for f in files:
        res = subprocess.run(["tshark", "-n", "-r", str(f), "-Y", "_ws.malformed", "-T", "fields", "-e",
                              "frame.number"], capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise SystemExit(f"tshark on {f.name}: {res.stderr.strip()[-300:]}")
        bad += len(res.stdout.split())
    return "tshark clean" if bad == 0 else f"{bad:,} frames tshark calls malformed"


# How DCQCN's state moves the iteration in ns-3: seconds a simulation once ns-3 is loaded, except the
# fat-tree's and bench_ns3's (~30-60 s each here): those are long cells.
# (row text, the job's --set keys). {hosts} and {flows} are the scenario's.
NS3_JOBS = [
    ("default job ({hosts} hosts, {flows:,} flows; rail-optimised, non-blocking: no ECN mark)", ()),
    ("leaf-spine 2:1 (`--set fabric=leaf-spine-2to1`, dp 8, tp 2, pp 2, global batch 32; {flows:,} flows)",
     ("fabric=leaf-spine-2to1", "parallelism.dp=8", "parallelism.tp=2", "parallelism.pp=2",
      "parallelism.global_batch=32")),
    ("leaf-spine 4:1 (`leaf-spine-4to1`, dp 8, tp 2, pp 1, global batch 8; {flows:,} flows)",
     ("fabric=leaf-spine-4to1", "parallelism.dp=8", "parallelism.tp=2", "parallelism.pp=1",
      "parallelism.global_batch=8")),
    ("fat-tree k=8 (`fat-tree-k8`, dp 16, tp 2, pp 2, global batch 32; {flows:,} flows)",
     ("fabric=fat-tree-k8", "parallelism.dp=16", "parallelism.tp=2", "parallelism.pp=2",
      "parallelism.global_batch=32")),
    ("4:1, 2 nodes per leaf, 100G uplinks (`tests/test_ns3_run.py` OVERSUBSCRIBED; {flows:,} flows)",
     ("parallelism.dp=4", "parallelism.tp=2", "parallelism.pp=2", "parallelism.global_batch=16",
      "fabric.nodes_per_leaf=2", "fabric.spines=2", "fabric.leaf_spine_gbps=100")),
]
NS3_MODES = {"qp": dict(dcqcn=True, dcqcn_state="qp"), "message": dict(dcqcn=True, dcqcn_state="message"),
             "off": dict(dcqcn=False)}
NS3_QP_HASH = NS3_JOBS[3][1] + ("fabric.ecmp_hash=qp",)
# bench/bench_ns3.py's default job: 64 hosts, non-blocking
NS3_BENCH = ("parallelism.dp=16", "parallelism.tp=2", "parallelism.pp=2", "parallelism.global_batch=64",
             "fabric.nodes_per_leaf=8", "fabric.spines=8")


@functools.lru_cache(maxsize=None)
def _ns3_sim(sets: tuple, mode: str) -> dict:
    """sim/summary.json of `tracegen generate --no-pcap` + `tracegen ns3 run` (nic auto) for the
    default job with `sets`, DCQCN as `mode`: the functions those commands call, in-process."""
    import tempfile
    from ns3_scenarios import run_scenario
    from tracegen.config import load_job
    from tracegen.emit.sims.ns3 import write_ns3
    from tracegen.pipeline import run_pipeline
    _ns3_runs()                                    # loads ns-3 (and says so if it is absent)
    job = load_job(None, sets=list(sets))
    run = run_pipeline(job)
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as tmp:
        write_ns3(run.flows, run.fabric, job, Path(tmp) / "ns3")
        s = run_scenario(Path(tmp), **NS3_MODES[mode])
    if s["completed"] != s["flows"]:
        raise SystemExit(f"ns-3 {sets} {mode}: {s['flows'] - s['completed']} flows never completed")
    return s


def _ratio(x: float) -> str:
    """4 decimals near 1 (0.9994, 1.0005), else 4 significant digits (1.829, 54.99)."""
    import math
    if abs(x - 1) < 0.1:
        return f"{x:.4f}"
    return f"{x:.{max(0, 3 - math.floor(math.log10(abs(x))))}f}"


NS3_LONG_ROWS = {3}           # the fat-tree's 4,616 flows: ~30 s a simulation here; the others a few s


def ns3_dcqcn_table(old: str, quick: bool) -> str:
    """With --quick the fat-tree row is kept as the README has it, the others simulated."""
    kept = {line.split("(")[0]: line for line in old.strip().splitlines()[2:]}
    lines = ["| job | DCQCN, state per QP (default) | DCQCN, state per message | no DCQCN |", "|---|---|---|---|"]
    for k, (text, sets) in enumerate(NS3_JOBS):
        if quick and k in NS3_LONG_ROWS:
            lines.append(kept.get("| " + text.split("(")[0], f"| {text.split('(')[0]}(run without --quick) |"))
            continue
        runs = [_ns3_sim(sets, m) for m in NS3_MODES]
        lines.append(f"| {text.format(hosts=runs[0]['hosts'], flows=runs[0]['flows'])} | "
                     + " | ".join(_ratio(r["sim_over_analytic"]) for r in runs) + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def ns3_oversubscribed(old: str, quick: bool) -> str:
    """The table's last row in words: per-QP state's slowdown, the cuts per message vs per QP, and
    how close per-message state comes to no DCQCN."""
    sets = NS3_JOBS[-1][1]
    qp, msg, off = (_ns3_sim(sets, m) for m in NS3_MODES)
    pct = abs(msg["sim_iteration_ns"] / off["sim_iteration_ns"] - 1) * 100
    close = "exactly" if pct == 0 else f"within {max(pct, 0.01):.2f} %"
    return (f"takes {qp['sim_over_analytic']:.0f}× the schedule. Per message, the CNPs mostly arrive after their "
            f"message's last packet ({msg['dcqcn_rate_cuts']:,} cuts instead of {qp['dcqcn_rate_cuts']:,} on that "
            f"job) and the iteration is the no-DCQCN one {close}")


def ns3_vs_schedule(old: str, quick: bool) -> str:
    """No DCQCN, NICs as the schedule shares them: simulated / analytic on the oversubscribed
    fabrics of the table and the fat-tree routed by the qp hash."""
    if quick:
        return old
    runs = [(_ns3_sim(NS3_JOBS[k][1], "off")["sim_over_analytic"], what)
            for k, what in ((1, "2:1 leaf-spine"), (2, "4:1"), (3, "k=8 fat-tree"))]
    runs.append((_ns3_sim(NS3_QP_HASH, "off")["sim_over_analytic"], "k=8 fat-tree routed by the qp hash"))
    import math
    worst = math.ceil(max(abs(r - 1) for r, _ in runs) * 100)
    return (f"within {worst} %: sim / analytic " + ", ".join(f"{r:.3f} ({what})" for r, what in runs))


def ns3_bench(old: str, quick: bool) -> str:
    """bench/bench_ns3.py's job: its size, and how far DCQCN per QP / per message moves it."""
    if quick:
        return old
    qp, msg = _ns3_sim(NS3_BENCH, "qp"), _ns3_sim(NS3_BENCH, "message")
    return (f"{qp['hosts']} hosts, {qp['flows']:,} flows, ~{qp['bytes_scheduled'] // 4096 / 1000:.0f}k packets, "
            f"non-blocking; it ends {qp['sim_over_analytic']:.2f} × after the analytic schedule with DCQCN state "
            f"per QP, {msg['sim_over_analytic']:.3f} × with state per message")


BENCH_SIZES = ("2k", "4k", "8k", "16k", "32k", "64k", "128k")


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
    "table-sizes": Block(table_sizes, "flows.parquet and flows.csv sizes (tracegen generate)"),
    "otg-lab": Block(otg_lab, "export otg of the README's lab.yaml (tracegen export otg)"),
    "collective": Block(collective_sample, "the `tracegen collective` sample"),
    "ring-tree": Block(ring_tree_table, "ring vs tree busbw at 1 GiB (tracegen collective)"),
    "tokens": Block(tokens_sample, "the `tracegen tokens` sample"),
    "default-net-flows": Block(default_net_flows, "the default job's transfers on the fabric (tracegen plan)"),
    "ecmp-spread": Block(ecmp_spread, "spine shares of 1,000 consecutive QPs (routing.py)"),
    "ecmp-qp-spread": Block(ecmp_qp_spread, "spine shares of 1,000 consecutive QPs, qp hash (routing.py)"),
    "port-waits": Block(port_waits, "uplink waits of the port-queue example (tracegen generate --switch leaf0)"),
    "ns3-default": Block(ns3_default, "the default job in ns-3 (tracegen ns3 run)"),
    "ns3-incast": Block(ns3_incast, "the ns-3 incast of tests/test_ns3_fabric.py"),
    "leaf0": Block(leaf0_counts, "the llama3-405b leaf0 command's frames and flows (tracegen generate, long)"),
    "ns3-dcqcn-table": Block(ns3_dcqcn_table, "ns-3 iteration vs the schedule per DCQCN state (long)"),
    "ns3-oversubscribed": Block(ns3_oversubscribed, "the oversubscribed job under DCQCN in ns-3 (long)"),
    "ns3-vs-schedule": Block(ns3_vs_schedule, "ns-3 without DCQCN vs the schedule (long)"),
    "ns3-bench": Block(ns3_bench, "bench/bench_ns3.py's job in ns-3 (long)"),
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
