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
  python tools/mutate.py --tests tests                    # the whole suite (the README's table)
  python tools/mutate.py --tests tests --jobs 2 --readme  # ... two at a time, table into README.md
  python tools/mutate.py --tests "tests/test_psn_wrap.py tests/test_workload.py"

Each mutation runs the test files that name the mutated module first (so a caught bug is found in
seconds), then the rest of --tests; pytest stops at the first failure (-x). A test that runs away
fails on pytest-timeout's per-test limit (--test-timeout), which counts as caught only when the
run did not reach the whole-mutation --timeout; a mutation that hangs the whole run is "hang".

Exit status 1 when a mutation is missed or stale. The README's "Development" section keeps the
last result. Add a mutation by appending (name, file, old text, new text) to MUTATIONS; the old
text must occur exactly once in the file.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
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

COPY = ("tracegen", "tests", "tools", "traces/examples", "templates", "ns3_scenarios", "pyproject.toml",
        "README.md", "docs")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for item in COPY:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        elif src.exists():
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)


def related_tests(path: str, tests: list[str]) -> list[str]:
    """Test files (within `tests`) that name the mutated module: its dotted name, or its leaf
    name in an import. They run first, so a caught mutation costs seconds, not the whole suite."""
    mod = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    leaf = mod.rsplit(".", 1)[-1]
    pat = re.compile(rf"{re.escape(mod)}\b|import[^\n]*\b{re.escape(leaf)}\b|\b{re.escape(leaf)}\.py\b")
    files: list[Path] = []
    for t in tests:
        p = ROOT / t.split("::")[0]
        files += sorted(p.rglob("test_*.py")) if p.is_dir() else [p] if p.suffix == ".py" else []
    return [str(f.relative_to(ROOT)) for f in files if pat.search(f.read_text(errors="replace"))]


def run_one(name: str, path: str, old: str, new: str, tests: list[str], timeout: int,
            test_timeout: int) -> tuple[str, str, float]:
    """(verdict, first failing test or note, seconds) for one mutation."""
    safe = re.sub(r"[^\w-]", "", name)
    with tempfile.TemporaryDirectory(prefix=f"mutate-{safe}-") as tmp:
        work = Path(tmp)
        _copy_tree(work)
        target = work / path
        text = target.read_text()
        if text.count(old) != 1:
            return "stale", f"{path}: the old text occurs {text.count(old)} times (expected once)", 0.0
        target.write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1",
                   NUMBA_CACHE_DIR=str(work / ".numba-cache"))
        env.pop("TRACEGEN_CI", None)
        order = related_tests(path, tests) + tests          # pytest runs a path given twice once
        t0 = time.perf_counter()
        try:
            res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                  "-o", "addopts=", f"--timeout={test_timeout}", *order], cwd=work,
                                 env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "hang", f"the run passed {timeout} s", time.perf_counter() - t0
        secs = time.perf_counter() - t0
        if res.returncode == 0:
            return "MISSED", "all passed: " + (res.stdout.strip().splitlines() or ["?"])[-1], secs
        failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("FAILED ")]
        errors = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("ERROR ")]
        first = (failed or errors or [f"pytest exit {res.returncode}"])[0]
        if "Timeout" in res.stdout and not failed:
            first += " (per-test timeout)"
        return "caught", first, secs


README_BEGIN, README_END = "<!-- mutate.py table: begin -->", "<!-- mutate.py table: end -->"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--mutation", action="append", help="run only these mutations (by name)")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help="pytest arguments (space-separated paths / node ids)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per mutation (the whole run)")
    ap.add_argument("--test-timeout", type=int, default=600, help="seconds per test (pytest-timeout)")
    ap.add_argument("--jobs", type=int, default=1, help="mutations run side by side")
    ap.add_argument("--readme", action="store_true", help="write the table into README.md between its markers")
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
    print(f"{len(chosen)} mutations, tests: {' '.join(tests)}", flush=True)
    rows: dict[str, str] = {}
    bad = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, *m, tests, args.timeout, args.test_timeout): m for m in chosen}
        for fut in as_completed(futures):
            name, path, _, _ = futures[fut]
            verdict, note, secs = fut.result()
            bad += verdict != "caught"
            rows[name] = f"| {name} | `{path}` | {verdict} | `{note}` | {secs:.0f} |"
            print(rows[name], flush=True)
    table = ["| mutation | file | verdict | first failing test | s |", "|---|---|---|---|---|"]
    table += [rows[m[0]] for m in chosen]
    summary = f"{len(chosen) - bad} of {len(chosen)} caught ({100 * (len(chosen) - bad) / max(1, len(chosen)):.0f} %)"
    print("\n" + "\n".join(table) + "\n\n" + summary)
    if args.readme:
        readme = ROOT / "README.md"
        text = readme.read_text()
        if README_BEGIN not in text or README_END not in text:
            print(f"README.md has no {README_BEGIN} ... {README_END} markers", file=sys.stderr)
            return 2
        head, rest = text.split(README_BEGIN, 1)
        _, tail = rest.split(README_END, 1)
        readme.write_text(head + README_BEGIN + "\n" + f"`python tools/mutate.py --tests \"{args.tests}\"`: "
                          + summary + ".\n\n" + "\n".join(table) + "\n" + README_END + tail)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
