"""Mutation testing for maintainers: does the test suite notice small plausible bugs?

Each mutation is one textual edit of one source file (a plausible bug). For every mutation this
script copies the checkout (tracegen/, tests/, pyproject.toml, traces/examples/) into a temporary
directory, applies the edit there - the working tree is never touched - runs the chosen tests
against the copy (pytest -x -q -p no:cacheprovider, PYTHONPATH = the copy) and reports:

  caught   some test failed (the first failing test is named)
  MISSED   every test passed: the suite cannot tell this bug from the real code
  stale    the edit's text is no longer in the file (the code moved on: update the mutation)

Run from the repository root:

  python tools/mutate.py                                  # the default mutations and test subset
  python tools/mutate.py --list                           # names and edits only
  python tools/mutate.py -m psn-2^23 -m rx-port-ignored   # some mutations
  python tools/mutate.py --tests tests                    # against the full suite (slow: ~5 min each)
  python tools/mutate.py --tests "tests/test_psn_wrap.py tests/test_workload.py"

Exit status 1 when a mutation is missed or stale. The README's "Development" section keeps the
last result. Add a mutation by appending (name, file, old text, new text) to MUTATIONS; the old
text must occur exactly once in the file.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, file, old, new): each a bug found to slip through the suite once (issue 18), or weakly guarded.
MUTATIONS = [
    # the six of issue 18's probe, on today's engine
    ("rx-ports-not-shared", "tracegen/connections.py", "        ok = links >= 0\n",
     "        ok = (links >= 0) & (links % 2 == 0)   # only a -> b directions: NIC receive ports dropped\n"),
    ("store-and-forward-dropped", "tracegen/connections.py",
     "sf = np.where(gbps > 0, -(-bits // np.maximum(gbps, 1)), 0).sum(axis=1)", "sf = 0"),
    ("psn-2^23", "tracegen/emit/roce.py", "PSN_MASK = 0xFFFFFF", "PSN_MASK = 0x7FFFFF"),
    ("attention-core-halved", "tracegen/workload/compute.py",
     "attn_core_ns=ns(4 * tokens", "attn_core_ns=ns(2 * tokens"),
    ("report-rx-from-src-nic", "tracegen/report.py",
     'rx = np.bincount(r["dst_nic"][net]', 'rx = np.bincount(r["src_nic"][net]'),
    ("moe-capacity-floor", "tracegen/workload/compute.py", "math.ceil(", "math.floor("),
    # weakly guarded before issue 18
    ("transfer-dep-dropped", "tracegen/fluid.py",
     "                    if e > ready[d]:\n                        ready[d] = e\n", ""),
    ("wire-time-halved", "tracegen/schedule.py",
     "tr.deps, on_wire.astype(np.float64), lat,", "tr.deps, (on_wire // 2).astype(np.float64), lat,"),
    ("tree-bandwidth-untuned", "tracegen/collectives/tuning.py", "bus *= 0.92 * 0.85", "bus *= 1.0"),
    # the fabric model
    ("links-not-shared", "tracegen/fluid.py", "            wsum[ln] += lk_w[k]\n", "            wsum[ln] = lk_w[k]\n"),
    ("ecmp-always-first-next-hop", "tracegen/routing.py",
     "pick = (h % np.maximum(cnt, 1).astype(np.uint32)).astype(np.int64)",
     "pick = (np.asarray(crc[r] * 0 + 0, np.int64) % np.maximum(cnt, 1))"),
    ("qp-send-queue-ignored", "tracegen/schedule.py",
     "queue=send_queues(ops, rows, row_conn))", "queue=None)"),
]

DEFAULT_TESTS = ("tests/test_schedule_validator.py tests/test_fabric.py tests/test_detail.py "
                 "tests/test_compute_closed_forms.py tests/test_psn_wrap.py "
                 "tests/test_report_asym.py tests/test_timing_closed_forms.py tests/test_examples.py "
                 "tests/test_workload.py tests/test_topology.py tests/test_collectives.py")

COPY = ("tracegen", "tests", "tools", "traces/examples", "pyproject.toml", "README.md")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for item in COPY:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        elif src.exists():
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)


def run_one(name: str, path: str, old: str, new: str, tests: list[str], timeout: int) -> tuple[str, str, float]:
    """(verdict, first failing test or note, seconds) for one mutation."""
    with tempfile.TemporaryDirectory(prefix=f"mutate-{name.replace('^', '')}-") as tmp:
        work = Path(tmp)
        _copy_tree(work)
        target = work / path
        text = target.read_text()
        if text.count(old) != 1:
            return "stale", f"{path}: the old text occurs {text.count(old)} times (expected once)", 0.0
        target.write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
        env.pop("TRACEGEN_CI", None)
        t0 = time.perf_counter()
        try:
            res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                  "-o", "addopts=", *tests], cwd=work, env=env, capture_output=True,
                                 text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "caught", f"timeout after {timeout} s", time.perf_counter() - t0
        secs = time.perf_counter() - t0
        if res.returncode == 0:
            return "MISSED", "all passed: " + (res.stdout.strip().splitlines() or ["?"])[-1], secs
        failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("FAILED ")]
        errors = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("ERROR ")]
        first = (failed or errors or [f"pytest exit {res.returncode}"])[0]
        return "caught", first, secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--mutation", action="append", help="run only these mutations (by name)")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help="pytest arguments (space-separated paths / node ids)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per mutation")
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.mutation or m[0] in args.mutation]
    if args.mutation and len(chosen) != len(set(args.mutation)):
        known = ", ".join(m[0] for m in MUTATIONS)
        ap.error(f"unknown mutation; known: {known}")
    if args.list:
        for name, path, old, new in chosen:
            print(f"{name}: {path}: {old!r} -> {new!r}")
        return 0
    tests = args.tests.split()
    print(f"{len(chosen)} mutations, tests: {' '.join(tests)}")
    print(f"| mutation | file | verdict | first failing test | s |\n|---|---|---|---|---|")
    bad = 0
    for name, path, old, new in chosen:
        verdict, note, secs = run_one(name, path, old, new, tests, args.timeout)
        bad += verdict != "caught"
        print(f"| {name} | `{path}` | {verdict} | `{note}` | {secs:.0f} |", flush=True)
    print(f"\n{len(chosen) - bad} of {len(chosen)} caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
