"""A scenario folder read back: `tracegen report DIR`, and generate's pictures (drawn from the files
read back, so both draw the same). Every damaged file is one ConfigError line naming the file and the key or line."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import show, show_path
from ..errors import ConfigError
from ..report.kpi import jain
from ..tables import Dim
from .report import nodes_text, pct_text

SCENARIO_JSON_MAX_BYTES = 64 << 20
TABLE_MAX_BYTES = 4 << 30          # ops.csv / link_time.csv: larger is refused, not read
_FIX = "the file is damaged: write the scenario again (tracegen generate --scenario FILE)"


@dataclass(frozen=True)
class SavedJob:
    name: str
    nodes: list
    start_ns: int
    iterations: int
    end_ns: int
    jct_ns: int
    alone_jct_ns: int
    busbw_pct: float | None
    alone_busbw_pct: float | None

    @property
    def slowdown(self) -> float:
        return self.jct_ns / self.alone_jct_ns if self.alone_jct_ns else float("nan")


@dataclass(frozen=True)
class SavedOps:
    """ops.csv: per op (markers left out) its job (index), dimension, release and end."""
    job: np.ndarray
    dim: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray


@dataclass(frozen=True)
class SavedLinkTime:
    """link_time.csv: per row a link direction's name, a job (index), the link's Gb/s and the
    job's Gb/s per time bin (edges ns)."""
    edges: np.ndarray
    link_names: list
    jobs: np.ndarray
    link_gbps: list
    gbps: np.ndarray


@dataclass(frozen=True)
class SavedScenario:
    """What the pictures and `report` read of a scenario folder: scenario.json's jobs, and (when
    the folder has them) ops.csv and link_time.csv."""
    name: str
    jobs: list
    ops: SavedOps | None = None
    link_time: SavedLinkTime | None = None

    @property
    def fairness(self) -> float:
        return jain(np.array([j.slowdown for j in self.jobs])) if len(self.jobs) > 1 else 1.0


def _bad(path, where: str, what: str) -> ConfigError:
    return ConfigError(f"{path}{': ' + where if where else ''}: {what}; {_FIX}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get(path, doc: dict, key: str, kind: str, where: str = ""):
    if key not in doc:
        raise _bad(path, where.rstrip("."), f"no key {key!r}")
    v = doc[key]
    ok = {"int": lambda x: _is_int(x) and 0 <= x < 2**63, "str": lambda x: isinstance(x, str),
          "list": lambda x: isinstance(x, list),
          "pct": lambda x: x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x))}[kind](v)
    if not ok:
        what = {"int": "a non-negative integer", "str": "a string", "list": "a list", "pct": "a number or null"}[kind]
        raise _bad(path, f"{where}{key}", f"{show(v)} is not {what}")
    return v


def _text(path: Path, limit: int) -> str:
    shown = show_path(path)
    if path.stat().st_size > limit:
        raise _bad(shown, "", f"larger than {limit >> 20} MiB")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(shown, f"byte {e.start}", "not UTF-8 text") from None


def read_scenario_folder(folder: Path) -> SavedScenario:
    """A folder `generate --scenario` wrote, type-checked: scenario.json, and ops.csv and
    link_time.csv when there; ConfigError (one line naming the file and the key or line) when
    damaged."""
    folder = Path(folder)
    texts = {"scenario.json": _text(folder / "scenario.json", SCENARIO_JSON_MAX_BYTES)}
    for name in ("ops.csv", "link_time.csv"):
        if (folder / name).is_file():
            texts[name] = _text(folder / name, TABLE_MAX_BYTES)
    return read_scenario_texts(texts, folder)


def read_scenario_texts(texts: dict, folder: Path = Path(".")) -> SavedScenario:
    """The SavedScenario of a scenario's file texts (name -> text; scenario.json required)."""
    saved = _read_json(texts["scenario.json"], show_path(Path(folder) / "scenario.json"))
    names = [j.name for j in saved.jobs]
    ops = _read_ops(texts["ops.csv"], show_path(Path(folder) / "ops.csv"), names) if "ops.csv" in texts else None
    lt = (_read_link_time(texts["link_time.csv"], show_path(Path(folder) / "link_time.csv"), names)
          if "link_time.csv" in texts else None)
    return SavedScenario(saved.name, saved.jobs, ops, lt)


def _read_json(text: str, shown: str) -> SavedScenario:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(shown, f"line {e.lineno} column {e.colno}", f"not JSON ({e.msg})") from None
    except RecursionError:
        raise _bad(shown, "", "nested too deeply") from None
    if not isinstance(doc, dict):
        raise _bad(shown, "", f"a JSON object is expected, not {type(doc).__name__}")
    name = _get(shown, doc, "scenario", "str")
    jobs_doc = _get(shown, doc, "jobs", "list")
    if not jobs_doc:
        raise _bad(shown, "jobs", "no jobs")
    jobs = []
    for i, j in enumerate(jobs_doc):
        where = f"jobs[{i}]."
        if not isinstance(j, dict):
            raise _bad(shown, f"jobs[{i}]", f"{show(j)} is not an object")
        nodes = _get(shown, j, "nodes", "list", where)
        if not all(_is_int(n) and n >= 0 for n in nodes):
            raise _bad(shown, f"{where}nodes", "a list of node numbers is expected")
        got = [_get(shown, j, k, kind, where) for k, kind in (
            ("name", "str"), ("start_ns", "int"), ("iterations", "int"), ("jct_ns", "int"), ("alone_jct_ns", "int"),
            ("busbw_pct", "pct"), ("alone_busbw_pct", "pct"))]
        if got[4] == 0:
            raise _bad(shown, f"{where}alone_jct_ns", "0: no time alone to compare with")
        jobs.append(SavedJob(got[0], nodes, got[1], got[2], _get(shown, j, "end_ns", "int", where), *got[3:]))
    if len({j.name for j in jobs}) != len(jobs):
        raise _bad(shown, "jobs", "two jobs have one name")
    return SavedScenario(name, jobs)


OPS_HEADER = "job,op_id,job_op_id,kind,dim,iteration,ranks,bytes,start_ns,end_ns"


def _lines(text: str, shown: str, header_ok, header_what: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or not header_ok(lines[0]):
        raise _bad(shown, "line 1", f"the header is not {header_what}")
    return lines


def _int(text: str, shown: str, line: int, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise _bad(shown, f"line {line}", f"{what} {text[:40]!r} is not a non-negative integer")
    return int(text)


def _read_ops(text: str, shown: str, names: list) -> SavedOps:
    lines = _lines(text, shown, lambda h: h == OPS_HEADER, repr(OPS_HEADER))
    job_of = {n: k for k, n in enumerate(names)}
    dims = {d.name: int(d) for d in Dim}
    n = len(lines) - 1
    job, dim, start, end = (np.zeros(n, np.int64) for _ in range(4))
    for i, line in enumerate(lines[1:]):
        f = line.split(",")
        if len(f) != 10:
            raise _bad(shown, f"line {i + 2}", f"{len(f)} fields, not 10")
        if f[0] not in job_of:
            raise _bad(shown, f"line {i + 2}", f"job {f[0][:40]!r} is not in scenario.json")
        if f[4] not in dims:
            raise _bad(shown, f"line {i + 2}", f"dim {f[4][:40]!r} is none of {', '.join(dims)}")
        job[i], dim[i] = job_of[f[0]], dims[f[4]]
        start[i], end[i] = _int(f[8], shown, i + 2, "start_ns"), _int(f[9], shown, i + 2, "end_ns")
    return SavedOps(job, dim, start, end)


def _read_link_time(text: str, shown: str, names: list) -> SavedLinkTime:
    lines = _lines(text, shown, lambda h: h.startswith("link,job,link_gbps,gbps_"),
                   "link,job,link_gbps,gbps_START_END,...")
    head = lines[0].split(",")[3:]
    edges = [0]
    for k, h in enumerate(head):
        a, _, b = h.removeprefix("gbps_").partition("_")
        if not (h.startswith("gbps_") and a.isdigit() and b.isdigit() and int(a) == edges[-1] and int(b) > int(a)):
            raise _bad(shown, "line 1", f"column {k + 4} {h[:40]!r} is not gbps_START_END of the next time bin")
        edges.append(int(b))
    job_of = {n: k for k, n in enumerate(names)}
    links, jobs, rates, rows = [], [], [], []
    for i, line in enumerate(lines[1:]):
        f = line.split(",")
        if len(f) != 3 + len(head):
            raise _bad(shown, f"line {i + 2}", f"{len(f)} fields, not {3 + len(head)}")
        if f[1] not in job_of:
            raise _bad(shown, f"line {i + 2}", f"job {f[1][:40]!r} is not in scenario.json")
        try:
            vals = [float(x) for x in f[2:]]
        except ValueError:
            raise _bad(shown, f"line {i + 2}", "a rate is not a number") from None
        if not all(np.isfinite(v) and v >= 0 for v in vals) or vals[0] <= 0:
            raise _bad(shown, f"line {i + 2}", "a rate is negative, zero or not finite")
        links.append(f[0])
        jobs.append(job_of[f[1]])
        rates.append(vals[0])
        rows.append(vals[1:])
    return SavedLinkTime(np.array(edges, np.int64), links, np.array(jobs, np.int64), rates,
                         np.array(rows, np.float64).reshape(len(rows), len(head)))


def saved_tables(saved: SavedScenario) -> list[tuple[str, list[str], list[list[str]]]]:
    """The jobs' table of scenario_tables (slowdown = JCT / alone, recomputed) and Jain's index."""
    rows = [[j.name, nodes_text(np.array(j.nodes)), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
             f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", pct_text(j.busbw_pct), pct_text(j.alone_busbw_pct)]
            for j in saved.jobs]
    return [(f"Scenario {saved.name}", ["what", "value"],
             [["jobs", str(len(saved.jobs))], ["Jain fairness of slowdowns", f"{saved.fairness:.4f}"]]),
            ("Jobs: time in the scenario vs alone (same nodes, same fabric)",
             ["job", "nodes", "start ns", "iters", "JCT ms", "alone ms", "slowdown", "busbw %", "alone busbw %"], rows)]
