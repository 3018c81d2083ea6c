"""Every user mistake: one line on stderr, exit 2, no traceback, nothing written (issue 13).

* tests/bad_configs/*.yaml: one invalid job per file, its expected message on the first line
  (`# expect: ...`); each goes through `generate` and `plan` in a real subprocess, in a fresh
  working folder holding only the job file and tests/bad_configs/labs/ (lab plans the jobs
  name). The runs go through a small thread pool (subprocesses, so 2 cores stay busy).
* bad command-line arguments, oversized YAML, the environment (NUMBA_DISABLE_JIT);
* the tables behind the checks: every numeric key has a range, docs/limits.md is current, error
  messages never walk an unbounded value, the work estimate matches the real pipeline.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tracegen import config
from tracegen.config import SECTIONS, _CHOICES, _RANGES, _SCALARS, _TYPES, load_job, show
from tracegen.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "bad_configs"
CASES = sorted(CORPUS.glob("*.yaml"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
ENV.pop("NUMBA_DISABLE_JIT", None)


def expected(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8")
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: ...'"
    return first[len("# expect: "):]


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"/")
            for p in sorted(d.rglob("*"))}


def tracegen(*args, cwd, env=ENV, timeout=120):
    return subprocess.run([sys.executable, "-m", "tracegen.cli", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=timeout)


def _run_case(case: Path, cmd: str, root: Path):
    cwd = root / f"{case.stem}.{cmd}"
    cwd.mkdir()
    shutil.copy(case, cwd / case.name)
    shutil.copytree(CORPUS / "labs", cwd / "labs")
    before = tree(cwd)
    extra = ["-q", "--no-ns3"] if cmd == "generate" else []
    res = tracegen(cmd, case.name, *extra, cwd=cwd)
    return res, before, tree(cwd)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    jobs = [(c, cmd) for c in CASES for cmd in ("generate", "plan")]
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2))) as pool:
        done = list(pool.map(lambda a: _run_case(*a, root), jobs))
    return {(c.name, cmd): r for (c, cmd), r in zip(jobs, done)}


def test_the_corpus_is_big_enough_and_runs_this_checkout():
    assert len(CASES) >= 60
    res = subprocess.run([sys.executable, "-c", "import tracegen; print(tracegen.__file__)"],
                         env=ENV, cwd="/", capture_output=True, text=True)
    assert Path(res.stdout.strip()).resolve().is_relative_to(ROOT), res.stdout


def one_line(res, want: str | None = None, code: int = 2) -> str:
    err = res.stderr.decode("utf-8", "replace")
    out = res.stdout.decode("utf-8", "replace")
    assert res.returncode == code, (res.returncode, err[-3000:])
    assert "Traceback" not in err + out, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    if want is not None:
        assert want in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("cmd", ["generate", "plan"])
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_config(corpus, case, cmd):
    res, before, after = corpus[(case.name, cmd)]
    one_line(res, expected(case))
    assert res.stdout == b"", "nothing on stdout"
    assert after == before, "nothing written, nothing changed"


# --- command-line arguments ---------------------------------------------------------------------

BAD_ARGS = [
    (["generate", "--max-bytes", "inf"], "--max-bytes 'inf'"),
    (["generate", "--max-bytes", "nan"], "--max-bytes 'nan'"),
    (["generate", "--max-bytes", "1e400"], "--max-bytes '1e400': beyond"),
    (["generate", "--max-bytes", "0.5"], "not a whole number of bytes"),
    (["generate", "--max-bytes", "-1"], "--max-bytes '-1'"),
    (["generate", "--snaplen", "4294967296"], "output.snaplen: must be at most 262,144"),
    (["generate", "--snaplen", "-1"], "output.snaplen: must be >= 0"),
    (["generate", "--snaplen", "abc"], "'abc' is not a valid integer"),
    (["generate", "--time-window", "0:1e30"], "output.time_window='0:1e30'"),
    (["generate", "--time-window", "0:100000000000000000000"], "output.time_window="),
    (["generate", "--time-window", "9:3"], "0 <= START < END"),
    (["generate", "--iteration", "5"], "output.iteration=5: this job has iteration 0"),
    (["generate", "--iteration", "99999999999999999999999"], "output.iteration: must be in -1..999"),
    (["generate", "--nics", "²"], "output.nics: '²' is no NIC"),
    (["generate", "--ranks", "99999999999999999999"], "output.ranks:"),
    (["generate", "--switch", "spine0"], "no selected packet crosses --switch spine0"),
    (["generate", "--switch", "spine99"], "output.switch='spine99'"),
    (["generate", "--time-window", "900000000:"], "nothing to write: --time-window 900000000:"),
    (["generate", "--collective", "ep"], "--collective ep (output.collectives) has no traffic"),
    (["generate", "--max-work", "abc"], "--max-work 'abc'"),
    (["generate", "--max-work", "1000"], "job too big for --max-work 1,000"),
    (["plan", "--max-work", "1000"], "job too big for --max-work 1,000"),
    (["generate", "--set", "model.layers=1000000000000000000000000000000"], "model.layers: must be at most"),
    (["generate", "--set", "a.b=1"], "unknown key 'a'"),
    (["generate", "--set", "model.x.y=1"], "use SECTION.KEY"),
    (["generate", "--set", "name=" + "n" * 300], "name: 300 characters"),
    (["generate", "--set", "model.layers=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"],
     "--set"),
    (["generate", "-o", "x" * 300], "a name of 300 bytes"),
    (["generate", "--format", "pcapx"], "'pcapx' is not one of"),
    (["generate", "--no-such-option"], "No such option '--no-such-option'"),
    (["plan", "missing.yaml"], "job file 'missing.yaml' not found"),
    (["generate", "--preset", "default", "job.yaml"], "give a job file or a preset, not both"),
]


@pytest.fixture(scope="module")
def arg_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("args")

    def run(k):
        args, _ = BAD_ARGS[k]
        cwd = root / str(k)
        cwd.mkdir()
        (cwd / "job.yaml").write_text("name: j\n")
        res = tracegen(*args, *(["-q", "--no-ns3"] if args[0] == "generate" else []), cwd=cwd)
        return res, sorted(os.listdir(cwd))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(run, range(len(BAD_ARGS))))


@pytest.mark.parametrize("k", range(len(BAD_ARGS)), ids=[" ".join(a)[:60] for a, _ in BAD_ARGS])
def test_bad_argument(arg_results, k):
    res, names = arg_results[k]
    one_line(res, BAD_ARGS[k][1])
    assert names == ["job.yaml"], "nothing written"


def test_big_yaml_is_refused_before_parsing(tmp_path):
    job = tmp_path / "big.yaml"
    with open(job, "w") as f:                          # 50 MB of valid YAML
        f.write("description: |\n")
        line = "  " + "x" * 98 + "\n"
        for _ in range(500_000):
            f.write(line)
    res = tracegen("plan", "big.yaml", cwd=tmp_path, timeout=30)
    one_line(res, "big.yaml: larger than 256 KiB")


def test_job_file_that_is_a_folder_or_unreadable(tmp_path):
    (tmp_path / "d.yaml").mkdir()
    one_line(tracegen("plan", "d.yaml", cwd=tmp_path), "'d.yaml' is a directory")


def test_job_file_that_is_dev_zero(tmp_path):
    (tmp_path / "job.yaml").symlink_to("/dev/zero")
    before = tree(tmp_path)
    for cmd in ("plan", "generate"):
        res = tracegen(cmd, "job.yaml", *(["-q", "--no-ns3"] if cmd == "generate" else []), cwd=tmp_path, timeout=60)
        one_line(res, "job.yaml: larger than 256 KiB")
        assert tree(tmp_path) == before


# two leaves joined through one spine by 1 Gb/s links: a job planned on it is far slower
TOPO = ("switches: {l0: 1, l1: 1, s: 2}\nlinks: [[l0, s, 1], [l1, s, 1]]\n"
        "nics: [l0, l0, l0, l0, l1, l1, l1, l1]\n")


def test_relative_fabric_file_resolves_from_the_job_file_not_the_current_folder(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.yaml").write_text("fabric: {kind: file, file: fab.yaml}\n")
    (tmp_path / "jobs" / "fab.yaml").write_text(TOPO)
    res = tracegen("plan", "--json", "jobs/job.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    default = tracegen("plan", "--json", cwd=tmp_path)
    slow, fast = (json.loads(r.stdout)["iteration_ns"] for r in (res, default))
    assert slow > 10 * fast                         # timed on the 1 Gb/s file fabric next to the job
    # the same file beside the current folder only: not the one the job names
    (tmp_path / "jobs" / "fab.yaml").rename(tmp_path / "fab.yaml")
    before = tree(tmp_path)
    for cmd in ("plan", "generate"):
        res = tracegen(cmd, "jobs/job.yaml", *(["-q", "--no-ns3", "-o", "out"] if cmd == "generate" else []),
                       cwd=tmp_path)
        line = one_line(res)                 # fabric_kinds' words, or read_yaml_file's: the path it looked at
        assert str(tmp_path / "jobs" / "fab.yaml") in line and "no such" in line, line
        assert tree(tmp_path) == before, "nothing written"


def test_numba_disable_jit(tmp_path):
    """NUMBA_DISABLE_JIT=1 used to end in AttributeError (schedule.py's `py_func`). Now: one
    line naming the variable, or - once the scheduler runs without numba - a normal trace."""
    env = {**ENV, "NUMBA_DISABLE_JIT": "1"}
    res = tracegen("generate", "-q", "--no-ns3", "--no-pcap", "-o", "out", cwd=tmp_path, env=env)
    if res.returncode == 0:
        assert (tmp_path / "out" / "flows.csv").is_file()
    else:
        one_line(res, "NUMBA_DISABLE_JIT")
        assert os.listdir(tmp_path) == []


# --- the tables behind the checks ---------------------------------------------------------------

def _numeric_keys():
    keys = [(k, t) for k, t in _SCALARS.items()]
    keys += [(f"{sec}.{k}", t) for sec in SECTIONS for k, t in _TYPES[sec].items()]
    return [k for k, t in keys if t in (int, float)]


def test_every_numeric_key_has_a_documented_range():
    missing = [k for k in _numeric_keys() if k not in _RANGES and k not in _CHOICES]
    assert not missing, f"declare a range (lo, hi) in tracegen/config/keys/ (its section) for: {missing}"
    for k, row in _RANGES.items():
        lo, hi = row[:2]
        assert lo <= hi and abs(hi) < 2**62, k


def test_docs_limits_table_is_current():
    doc = (ROOT / "docs" / "limits.md").read_text("utf-8")
    assert doc == config.limits_doc(doc), "docs/limits.md is stale: python -m tracegen.config --limits docs/limits.md"
    assert doc.count("\n| `") == len(config.limits_rows())     # one table, every row


@pytest.mark.parametrize("key", _numeric_keys())
def test_every_numeric_key_refuses_beyond_its_range(key):
    lo, hi = config.bounds(key, int if key not in ("model.capacity_factor", "cluster.mfu",
                                                   "network.pmax", "output.ecn_mark_fraction") else float)
    if key in _CHOICES:
        return
    sec, _, name = key.rpartition(".")
    for bad in (hi * 2 + 1, 10**400 if isinstance(hi, int) else 1e300):
        doc = {sec: {name: bad}} if sec else {name: bad}
        with pytest.raises(ConfigError, match=rf"^{key}: must be"):
            config.job_from_dict(doc)


def test_show_never_walks_an_unbounded_value():
    bomb = ["x"] * 9
    for _ in range(12):                                 # 9^12 leaves, shared
        bomb = [bomb] * 9
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    for v in (bomb, deep, 10**5000, "y" * 10**6, {i: i for i in range(10**5)}):
        assert len(show(v)) <= 63


def test_error_messages_of_huge_values_are_short():
    with pytest.raises(ConfigError) as e:
        config.job_from_dict({"model": {"layers": 10**5000}})
    assert len(str(e.value)) < 200 and "5001-digit" in str(e.value)


def test_yaml_depth_and_aliases_are_capped_before_construction(tmp_path):
    p = tmp_path / "j.yaml"
    p.write_text("model: " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(ConfigError, match="nested more than 32"):
        load_job(p)
    p.write_text("model: {layers: 4}\nx: &x [1]\n")   # an anchor alone is fine; the key is not
    with pytest.raises(ConfigError, match="unknown key 'x'"):
        load_job(p)


# --- the work estimate follows the real pipeline ------------------------------------------------

@pytest.mark.parametrize("preset,sets", [
    ("default", []), ("gpt2-small", []), ("mixtral-8x7b", []),
    ("default", ["nccl.algorithm=tree"]), ("default", ["nccl.algorithm=hierarchical"]),
    ("default", ["nccl.algorithm=halving_doubling", "parallelism.zero=3"]),
    ("default", ["nccl.algorithm=auto", "nccl.protocol=auto"]),
    ("default", ["parallelism.cp=2", "parallelism.dp=1"]),
    ("default", ["parallelism.sp=true", "parallelism.recompute=full"]),
])
def test_work_estimate_matches_the_pipeline(preset, sets):
    from tracegen.collectives import expand
    from tracegen.fabric.topology import build_fabric
    from tracegen.timing.work import _closed_forms, estimate
    from tracegen.workload import build_commops
    job = load_job(preset=preset, sets=sets)
    w = estimate(job)
    ops = build_commops(job)
    tr = expand(ops, build_fabric(job), job.nccl)
    assert 0.8 * len(tr) <= w.transfers <= 1.25 * len(tr)
    assert w.ops == len(ops)
    ops_est, _ = _closed_forms(job)
    assert len(ops) <= ops_est <= 4 * len(ops)          # an upper estimate, not far off


@pytest.mark.parametrize("preset", ["default", "gpt2-small", "llama3-8b", "gpt3-175b", "llama3-70b",
                                    "mixtral-8x7b", "deepseek-v3"])
def test_every_shipped_preset_fits_the_default_work_budget(preset):
    from tracegen.timing.work import DEFAULT_MAX_WORK, estimate
    w = estimate(load_job(preset=preset), DEFAULT_MAX_WORK)      # raises beyond the budget
    assert w.memory_bytes < 16 << 30


# --- MoE jobs: AllToAll pairs ----------------------------------------------------------------

MOE_JOBS = [("mixtral-8x7b", []), ("deepseek-v3", ["model.layers=4"]),
            ("deepseek-v3-2k", ["parallelism.global_batch=128", "parallelism.pp=16", "model.layers=16"]),
            ("deepseek-v3", ["model.layers=4", "parallelism.recompute=full", "parallelism.ep=4"])]


@pytest.mark.parametrize("preset,sets", MOE_JOBS)
def test_alltoall_pairs_are_the_built_tables(preset, sets):
    """The closed form the early refusal uses, judged by the CommOp table the workload builds."""
    import numpy as np
    from tracegen.tables import CollKind
    from tracegen.timing.alltoall_agg import alltoall_pairs
    from tracegen.workload import build_commops
    job = load_job(preset=preset, sets=sets)
    ops = build_commops(job)
    a2a = np.flatnonzero(ops.rows["kind"] == CollKind.ALLTOALL)
    n = np.array([len(ops.groups[i]) for i in a2a])
    assert alltoall_pairs(job) == (len(a2a), int((n * (n - 1)).sum()))


@pytest.mark.parametrize("preset,sets", MOE_JOBS[:3])
def test_connection_rows_of_moe_jobs_are_estimated(preset, sets):
    """An AllToAll has a connection-level row per pair and channel, not a ring's n per channel."""
    from tracegen.fabric.topology import build_fabric
    from tracegen.timing.conn_edges import edge_table
    from tracegen.timing.work import estimate
    from tracegen.workload import build_commops
    job = load_job(preset=preset, sets=[*sets, "detail=conn"])
    w = estimate(job, emit=False)
    rows = len(edge_table(build_commops(job), build_fabric(job), job)["op_id"])
    assert 0.9 * rows <= w.conn_edges <= 1.1 * rows


def test_moe_job_beyond_the_budget_is_refused_before_its_ops_are_built():
    """deepseek-v3-2k at chunk level (--detail full lists every pair: 87,840 AllToAlls x 64 x 63);
    refused in seconds (the CommOp table alone took ~2 min), one line naming what to shrink, exit 2.
    Per connection (plan's auto) its AllToAlls are timed per sender (timing/alltoall_agg.py), and
    generate, which writes every pair, refuses it in one line too."""
    import time
    t0 = time.perf_counter()
    res = tracegen("plan", "--preset", "deepseek-v3-2k", "--detail", "full", cwd=ROOT)
    assert res.returncode == 2 and time.perf_counter() - t0 < 30
    err = res.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and res.stdout == b""
    assert "354,170,880" in err and "parallelism.ep=64" in err and "global_batch=15360" in err
    res = tracegen("generate", "--preset", "deepseek-v3-2k", "-o", "/nonexistent/never-written", cwd=ROOT)
    err = res.stderr.decode().strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "354,170,880" in err and "tracegen plan" in err


@pytest.mark.parametrize("kind", ["ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "BROADCAST", "REDUCE"])
def test_ring_closed_form_counts_tiny_ops_like_the_template(kind):
    """Fewer elements than ranks: the estimate takes a ring's closed form (its template, 2 n (n - 1)
    rows per channel, cost 4 GB at 4,096 ranks); the template builder judges it."""
    from types import SimpleNamespace
    from tracegen.collectives import ALGORITHMS
    from tracegen.tables import CollKind
    from tracegen.timing.work_templates import transfers as _transfers
    k = CollKind[kind]
    build = ALGORITHMS.get(("ring", k))
    if build is None:
        pytest.skip("no ring for this kind")
    for N, L in [(1, 8), (4, 8), (2, 1), (32, 1), (3, 2), (16, 8)]:
        n = N * L
        for e in sorted({1, 2, 3, n // 2, n - 1, n + 1} - {0}):
            for ch in (1, 2, 4):
                plan = SimpleNamespace(channels=ch, chunk_bytes=1 << 19, algo="ring")
                assert _transfers(int(k), plan, n, N, L, 4 * e, 4) == len(build(N, L, e, 4, ch, 1 << 19)), (N, L, e, ch)
