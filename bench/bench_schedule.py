"""What does sharing every link cost? One job scheduled four ways, side by side:

  full  + fabric   every chunk transfer, sharing NIC ports, switch ports and NVLink (detail full)
  full  + NICs     every chunk transfer, sharing NIC and NVLink ports only (the old NIC-only model)
  conn  + fabric   per NCCL connection per op, sharing every link (detail conn)
  conn  + NICs     per connection, NIC and NVLink ports only

Each variant runs in its own process (numba's compiled engine loaded from its on-disk cache) so
its wall time and peak memory (VmHWM) are its own. Printed: rows scheduled, schedule seconds,
peak RSS, the iteration time it finds, and ratios against `full + NICs`.

Run: python bench/bench_schedule.py [--preset llama3-70b] [--set parallelism.dp=8 ...]
Default: llama3-70b at 256 GPUs (dp 8).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from tracegen.config import load_job
from tracegen.fabric.topology import build_fabric
from tracegen.workload import build_commops
from tracegen.collectives import expand
from tracegen.timing.schedule import schedule
from tracegen.timing.schedule_conn import schedule_connections
job = load_job(preset={preset!r}, sets={sets!r})
fabric = build_fabric(job)
ops = build_commops(job)
fabric.router                      # routes are part of the fabric, not of the schedule
t0 = time.perf_counter()
if {detail!r} == "full":
    tr = expand(ops, fabric, job.nccl)
    t1 = time.perf_counter()
    flows = schedule(ops, tr, fabric, job, shared_fabric={shared!r})
else:
    t1 = time.perf_counter()
    flows = schedule_connections(ops, fabric, job, shared_fabric={shared!r})
t2 = time.perf_counter()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps(dict(rows=len(flows), expand_s=t1 - t0, schedule_s=t2 - t1, peak=hwm * 1024,
                      iteration_ns=int(flows.op_end_ns.max()))))
"""


def run(preset: str, sets: list[str], detail: str, shared: bool) -> dict:
    code = CHILD.format(root=str(ROOT), preset=preset, sets=sets, detail=detail, shared=shared)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-70b")
    ap.add_argument("--set", dest="sets", action="append",
                    default=None, help="job overrides (default: parallelism.dp=8, global_batch=64)")
    ap.add_argument("--skip-full", action="store_true", help="only the connection-level variants")
    a = ap.parse_args()
    sets = a.sets or ["parallelism.dp=8", "parallelism.global_batch=64"]
    run(a.preset, sets, "conn", True)                     # warm numba's cache and the OS
    variants = [(d, s) for d in (("conn",) if a.skip_full else ("full", "conn")) for s in (False, True)]
    res = {v: run(a.preset, sets, *v) for v in variants}
    base = res[variants[0]]
    print(f"{a.preset} {' '.join(sets)}")
    print(f"{'variant':16s} {'rows':>12s} {'expand s':>9s} {'schedule s':>11s} {'x time':>7s} "
          f"{'peak GB':>8s} {'x mem':>6s} {'iteration':>12s}")
    for (d, s), r in res.items():
        print(f"{d + (' + fabric' if s else ' + NICs'):16s} {r['rows']:12,d} {r['expand_s']:9.2f} "
              f"{r['schedule_s']:11.2f} {r['schedule_s'] / base['schedule_s']:7.2f} {r['peak'] / 1e9:8.2f} "
              f"{r['peak'] / base['peak']:6.2f} {r['iteration_ns'] / 1e6:10.3f} ms")


if __name__ == "__main__":
    main()
