"""How does `tracegen plan` scale? The llama3-405b job (TP8 PP16, s 8192, global batch 2048) at
2,048 / 4,096 / 8,192 / 16,384 H100s, each planned in a fresh process (the CLI's own path:
work estimate, folded workload, connection-level schedule on the fabric, report).

Prints per size: wall time, peak RSS, the ops built and timed, the iteration time, and the time
ratio of each doubling. A benchmark, not a test: numbers depend on the machine (2-core VM here).

Run: python bench/bench_scale.py [--sizes 2k,4k,8k,16k] [--timeout 600]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = {"2k": "llama3-405b-2k", "4k": "llama3-405b-4k", "8k": "llama3-405b-8k", "16k": "llama3-405b"}

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from tracegen.config import load_job
from tracegen.pipeline import run_pipeline
from tracegen.timing.work import estimate
t0 = time.perf_counter()
job = load_job(preset={preset!r})
w = estimate(job, 0, pcap=True, emit=False)          # as `tracegen plan` does, then the pipeline
run = run_pipeline(job)
print(json.dumps(dict(gpus=job.world, ops=w.ops, timed_ops=len(run.ops), rows=len(run.flows),
                      detail=run.flows.detail, iteration_ns=run.report.iteration_ns,
                      wall_s=time.perf_counter() - t0,
                      peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
"""


def run(preset: str, timeout: int) -> dict:
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), preset=preset)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    wall = time.perf_counter() - t0
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out.update(process_wall_s=wall)                 # with the interpreter's start and imports
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2k,4k,8k,16k")
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()
    sizes = sorted((s.strip() for s in a.sizes.split(",")), key=lambda s: int(s[:-1]))
    print(f"{'GPUs':>7} {'wall s':>8} {'peak GB':>8} {'ops':>10} {'timed':>8} {'rows':>10} "
          f"{'iteration ms':>13} {'x prev':>7}")
    prev = None
    for s in sizes:
        r = run(PRESETS[s], a.timeout)
        if "error" in r:
            print(f"{s:>7} {r['error']}")
            prev = None
            continue
        ratio = f"{r['process_wall_s'] / prev:.2f}" if prev else "-"
        rss = f"{r['peak_rss_gb']:.2f}"
        print(f"{r['gpus']:>7,} {r['process_wall_s']:>8.1f} {rss:>8} {r['ops']:>10,} {r['timed_ops']:>8,} "
              f"{r['rows']:>10,} {r['iteration_ns'] / 1e6:>13,.1f} {ratio:>7}")
        prev = r["process_wall_s"]
    print("targets (issue 17): 16,384 GPUs <= 60 s and <= 4 GB; each doubling <= 2.2x time")


if __name__ == "__main__":
    main()
