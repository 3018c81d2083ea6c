"""Two fluid engines on the same inputs: this checkout's tracegen/timing/fluid.py against the one of a git
revision (default 006d49d, the engine that re-solved every active item at every event). Every
fluid.run call of each job's pipeline (detail full and conn) runs both; per job it prints the max
|delta| ns of start/finish/end/op_start/op_end (entries that differ / all), the relative
difference of the link loads (binned) and item rates, and the time each engine took (the first
call of each includes numba's cache load or compile). A benchmark and a check for engine
rewrites, not a test (the test is tests/test_fluid_maxmin.py, an independent judge).

Run: PYTHONPATH=. python bench/bench_fluid_engines.py [--old REV] [job names...]
"""
import argparse
import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tracegen.timing import fluid
from tracegen.config import job_from_dict, load_job
from tracegen.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parents[1]


def load_old(rev: str):
    """tracegen/timing/fluid.py of `rev` as a module of its own (its relative imports made absolute)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:tracegen/timing/fluid.py"], check=True,
                          capture_output=True, text=True).stdout
    text = text.replace("from . import progress", "from tracegen import progress")
    text = text.replace("from .tables import", "from tracegen.tables import")
    text = text.replace("from .fluid_records import", "from tracegen.timing.fluid_records import")
    d = Path(tempfile.mkdtemp(prefix="fluid_old_"))
    (d / "fluid_old.py").write_text(text)
    spec = importlib.util.spec_from_file_location("fluid_old", d / "fluid_old.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

M = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512}
MOE = dict(M, experts=8, top_k=2)
JOBS = {
    "default": None,
    "dense dp4 tp2 pp2 rail": dict(model=M, parallelism=dict(dp=4, tp=2, pp=2, global_batch=16)),
    "tree dp16 tp2": dict(model=M, parallelism=dict(dp=16, tp=2, pp=1, global_batch=32), nccl={"algorithm": "tree"}),
    "cp2 tp2 dp2 pp2": dict(model=M, parallelism=dict(cp=2, tp=2, dp=2, pp=2, global_batch=8)),
    "dense dp4 tp8 pp2 dgx": dict(model=M, parallelism=dict(dp=4, tp=8, pp=2, global_batch=16), cluster="dgx-h100"),
    "moe ep4 dp4 tp2 sp": dict(model=MOE, parallelism=dict(dp=4, ep=4, tp=2, sp=True, pp=1, global_batch=16)),
    "moe ep8 dp8 fat-tree": dict(model=MOE, parallelism=dict(dp=8, ep=8, tp=1, pp=2, global_batch=32),
                                 fabric="fat-tree-k8"),
    "dense dp8 tp2 pp2 2:1": dict(model=M, parallelism=dict(dp=8, tp=2, pp=2, global_batch=32),
                                  fabric="leaf-spine-2to1"),
    "dense dp8 tp2 4:1": dict(model=M, parallelism=dict(dp=8, tp=2, pp=1, global_batch=32), fabric="leaf-spine-4to1"),
    "dense dp8 tp2 2-plane": dict(model=M, parallelism=dict(dp=8, tp=2, pp=1, global_batch=32), fabric="multi-plane-2"),
    "mixtral-8x7b-512 small": dict(model=dict(preset="mixtral-8x7b", layers=2, seq_len=512),
                                   parallelism=dict(dp=8, ep=8, tp=1, pp=1, global_batch=16)),
}

new_run = fluid.run
stats = {}


def both(*a, **kw):
    t0 = time.perf_counter()
    out_new = new_run(*a, **kw)
    t1 = time.perf_counter()
    out_old = OLD.run(*a, **kw)
    t2 = time.perf_counter()
    s = stats
    s["calls"] = s.get("calls", 0) + 1
    s["t_new"] = s.get("t_new", 0) + t1 - t0
    s["t_old"] = s.get("t_old", 0) + t2 - t1
    for name, x, y in zip(("start", "finish", "end", "op_start", "op_end"), out_new[:5], out_old[:5]):
        d = np.abs(x.astype(np.int64) - y.astype(np.int64))
        s[name] = max(s.get(name, 0), int(d.max()) if len(d) else 0)
        s[name + "_n"] = s.get(name + "_n", 0) + int((d > 0).sum())
        s["n_" + name] = s.get("n_" + name, 0) + len(d)
    if len(out_new) > 5 and out_new[5] is not None:
        ln, lo = out_new[5], out_old[5]
        nl = int(max(ln.link.max(initial=0), lo.link.max(initial=0))) + 1
        span = int(max(ln.t.max(initial=0), lo.t.max(initial=0))) + 1
        bins = 200
        bw = max(1, -(-span // bins))
        bn, bo = ln.binned(nl, bw, bins), lo.binned(nl, bw, bins)
        rel = np.abs(bn - bo).max() / max(bo.max(), 1e-300)
        s["load_rel"] = max(s.get("load_rel", 0), float(rel))
    if len(out_new) > 6:
        rn, ro = out_new[6], out_old[6]
        # rate in effect just after each record time (the last record at t), sampled at all times
        def curve(r):
            o = np.lexsort((np.arange(len(r.t)), r.t, r.item))
            it, t, v = r.item[o], r.t[o], r.bytes_per_ns[o]
            last = np.r_[(it[1:] != it[:-1]) | (t[1:] != t[:-1]), True]
            return it[last], t[last], v[last]
        a, b = curve(rn), curve(ro)
        worst = 0.0
        for it in np.union1d(a[0], b[0])[:2000]:
            ta, va = a[1][a[0] == it], a[2][a[0] == it]
            tb, vb = b[1][b[0] == it], b[2][b[0] == it]
            ts = np.union1d(ta, tb)
            fa = va[np.maximum(np.searchsorted(ta, ts, "right") - 1, 0)] if len(ta) else np.zeros(len(ts))
            fb = vb[np.maximum(np.searchsorted(tb, ts, "right") - 1, 0)] if len(tb) else np.zeros(len(ts))
            fa = np.where(ts >= (ta[0] if len(ta) else 0), fa, 0)
            fb = np.where(ts >= (tb[0] if len(tb) else 0), fb, 0)
            worst = max(worst, float(np.max(np.abs(fa - fb) / np.maximum(np.maximum(fa, fb), 1e-300))))
        s["rate_rel"] = max(s.get("rate_rel", 0), worst)
    return out_new


fluid.run = both


def main(names):
    for name in names or list(JOBS):
        for detail in ("full", "conn"):
            stats.clear()
            spec = JOBS[name]
            j = load_job(preset="default") if spec is None else job_from_dict(spec, name="cmp")
            j = dataclasses.replace(j, detail=detail)
            t0 = time.perf_counter()
            try:
                r = run_pipeline(j)
            except Exception as e:           # noqa: BLE001
                print(f"{name:28s} {detail:4s} ERROR {type(e).__name__}: {e}")
                continue
            keys = ("start", "finish", "end", "op_start", "op_end")
            d = " ".join(f"{k}={stats.get(k, 0)}({stats.get(k + '_n', 0)}/{stats.get('n_' + k, 0)})" for k in keys)
            print(f"{name:28s} {detail:4s} calls={stats.get('calls', 0)} iter_ns={r.report.iteration_ns} "
                  f"maxdelta_ns {d} load_rel={stats.get('load_rel', '-')} rate_rel={stats.get('rate_rel', '-')} "
                  f"t_new={stats.get('t_new', 0):.2f}s t_old={stats.get('t_old', 0):.2f}s wall={time.perf_counter() - t0:.1f}s",
                  flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="006d49d")
    ap.add_argument("jobs", nargs="*", help=f"of {list(JOBS)} (default: all)")
    a = ap.parse_args()
    OLD = load_old(a.old)
    main(a.jobs)
