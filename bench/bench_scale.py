"""How does `tracegen plan` scale? The llama3-405b job (TP8 PP16 vpp2, s 8192) at 2,048 to 131,072
H100s (2k-16k: global batch 2,048; 32k-128k: 16 micro-batches per pipeline, as at 16k) and the MoE
presets (deepseek-v3: 64 GPUs, ep 16; deepseek-v3-2k: 2,048 GPUs, ep 64), each planned in a fresh
process the way `tracegen plan` does it (work estimate, folded workload, schedule, report, pcap
estimate).

Prints per size: wall time, CPU time (the child's user + system), peak RSS, the ops built and
timed, the rows timed, the iteration time, each doubling's wall time, CPU time and memory ratio (to
the size before it in the run: measured side by side) and the load average after it (the machine
is shared: wall time swings with the load, CPU time much less). A size whose work estimate exceeds the memory available (MemAvailable, or --max-gb) is
skipped with a message before it runs, and each child runs under an address-space cap of that much
(a misestimate ends in MemoryError, not in the kernel's OOM killer); a job the default --max-work
refuses prints the refusal. A benchmark, not a test: numbers depend on the machine (2-core VM here).

Run: python bench/bench_scale.py [--sizes 16k,32k,64k,128k,moe] [--timeout 900] [--max-gb 9]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = {"2k": "llama3-405b-2k", "4k": "llama3-405b-4k", "8k": "llama3-405b-8k", "16k": "llama3-405b",
           "32k": "llama3-405b-32k", "64k": "llama3-405b-64k", "128k": "llama3-405b-128k",
           "moe": "deepseek-v3", "moe-2k": "deepseek-v3-2k"}
DOUBLINGS = ("2k", "4k", "8k", "16k", "32k", "64k", "128k")

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
cap = {cap_bytes!r}
if cap:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from tracegen.cli.common import run_job
from tracegen.config import load_job
from tracegen.errors import ConfigError
from tracegen.timing.work import DEFAULT_MAX_WORK, estimate
t0 = time.perf_counter()
job = load_job(preset={preset!r})
try:
    w = estimate(job, DEFAULT_MAX_WORK, pcap=True, emit=False)     # as `tracegen plan` does, then its run
except ConfigError as e:
    print(json.dumps(dict(refused=str(e))))
    sys.exit(0)
run = run_job(job, quiet=True, budget=False)
print(json.dumps(dict(gpus=job.world, ops=w.ops, timed_ops=len(run.ops), rows=len(run.flows),
                      detail=run.flows.detail, iteration_ns=run.report.iteration_ns,
                      wall_s=time.perf_counter() - t0,
                      cpu_s=sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
                      peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
"""


def load() -> str:
    """The 1-minute load average after a run (the machine is shared: wall time swings with it;
    cpu s - the child's user + system time - much less)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (0 if unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def estimated_bytes(preset: str) -> tuple[int, str]:
    """(the work estimate's peak memory, '' or the refusal) - the closed forms and the CommOp table
    only (seconds), in a process of its own."""
    code = ("import json, sys; sys.path.insert(0, %r)\n"
            "from tracegen.config import load_job\nfrom tracegen.errors import ConfigError\n"
            "from tracegen.timing.work import DEFAULT_MAX_WORK, estimate\n"
            "try:\n    w = estimate(load_job(preset=%r), DEFAULT_MAX_WORK, pcap=True, emit=False)\n"
            "    print(json.dumps([w.memory_bytes, '']))\n"
            "except ConfigError as e:\n    print(json.dumps([0, str(e)]))\n") % (str(ROOT), preset)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        return 0, res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
    mem, why = json.loads(res.stdout.strip().splitlines()[-1])
    return int(mem), why


def run(preset: str, timeout: int, cap_bytes: int = 0) -> dict:
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), preset=preset, cap_bytes=cap_bytes)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    wall = time.perf_counter() - t0
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "refused" in out:
        return {"error": out["refused"]}
    out.update(process_wall_s=wall)                 # with the interpreter's start and imports
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16k,32k,64k,128k,moe,moe-2k",
                    help=f"comma list of {','.join(PRESETS)}")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--max-gb", type=float, default=0,
                    help="memory a size may take (default: MemAvailable now); beyond: skipped")
    a = ap.parse_args()
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in PRESETS]
    if bad:
        ap.error(f"--sizes: {bad[0]} is none of {','.join(PRESETS)}")
    sizes.sort(key=lambda s: (s not in DOUBLINGS, DOUBLINGS.index(s) if s in DOUBLINGS else 0))
    budget = int(a.max_gb * 2**30) if a.max_gb else available_bytes()
    print(f"memory a size may take: {budget / 2**30:.1f} GB")
    print(f"{'size':>7} {'GPUs':>8} {'wall s':>8} {'cpu s':>7} {'peak GB':>8} {'ops':>12} {'timed':>8} {'rows':>11} "
          f"{'iteration ms':>13} {'x time':>7} {'x cpu':>6} {'x mem':>6}  load")
    prev = None
    for s in sizes:
        est, why = estimated_bytes(PRESETS[s])
        if why:
            print(f"{s:>7} refused by the work estimate: {why}")
            prev = None
            continue
        if budget and est > budget:
            print(f"{s:>7} skipped: the work estimate is {est / 2**30:.1f} GB, {budget / 2**30:.1f} GB available")
            prev = None
            continue
        r = run(PRESETS[s], a.timeout, budget)
        if "error" in r:
            print(f"{s:>7} {r['error']}")
            prev = None
            continue
        doubled = prev is not None and s in DOUBLINGS and prev[0] in DOUBLINGS
        t_ratio = f"{r['process_wall_s'] / prev[1]:.2f}" if doubled else "-"
        m_ratio = f"{r['peak_rss_gb'] / prev[2]:.2f}" if doubled else "-"
        c_ratio = f"{r['cpu_s'] / prev[3]:.2f}" if doubled else "-"
        print(f"{s:>7} {r['gpus']:>8,} {r['process_wall_s']:>8.1f} {r['cpu_s']:>7.1f} {r['peak_rss_gb']:>8.2f} "
              f"{r['ops']:>12,} {r['timed_ops']:>8,} {r['rows']:>11,} {r['iteration_ns'] / 1e6:>13,.1f} {t_ratio:>7} "
              f"{c_ratio:>6} {m_ratio:>6}  {load()}")
        prev = (s, r["process_wall_s"], r["peak_rss_gb"], r["cpu_s"]) if s in DOUBLINGS else None
    print("targets (issue 27): 131,072 GPUs <= 5 min and <= 8 GB, each doubling from 16k <= 2.2x time; "
          "deepseek-v3 <= 4 GB; deepseek-v3-2k <= 2 min and <= 8 GB")


if __name__ == "__main__":
    main()
