"""The scenario file: several jobs on one cluster and fabric, and the events on them.

    name: two-tenants              # optional (default: the file's stem)
    cluster: {gpus_per_node: 8}    # optional: a cluster preset or mapping, as in a job file;
    fabric: {kind: leaf-spine}     #   without them every job runs on the FIRST job's cluster
                                   #   and fabric, as written in its file
    nodes: 8                       # optional: nodes of the scenario (default: the jobs' sum)
    placement: contiguous          # contiguous | interleaved | random | explicit
    seed: 0                        # random placement's seed
    ecmp_on_failure: rehash        # rehash | resilient (events.py)
    jobs:
      - job: a.yaml                # a job file, relative to this file; or
      - preset: default            # a job preset; or
      - pattern: incast            # a lab benchmark pattern (patterns.py): incast | alltoall | allreduce
        ranks: 8                   #   its GPUs (whole nodes), bytes (default 8 MiB), gap_ns between
        bytes: 8388608             #   repetitions (default 0), iterations (default 1)
        start_ns: 1000000          # the job's first op is released this late (default 0)
        iterations: 2              # overrides the job's `iterations`
        nodes: [1, 3]              # explicit placement: the scenario nodes it runs on
        name: b                    # the job's name in the report (default: the job's name)
        dscp: 34                   # the job's traffic class on its RoCE frames (default output.dscp);
        pcp: 4                     #   pcp: its 802.1Q priority (needs output.vlan; default output.pcp)
    events:                        # spec_events.py, events.py
      - {type: down, switch: spine1}                  # from t=0 to the end
      - {type: down, link: leaf0-spine2, at_ns: 2000000, until_ns: 5000000}   # down in [at, until)
      - {type: degrade, link: leaf1-spine0, gbps: 100, at_ns: 1000000}       # from at_ns on
      - {type: flap, link: leaf0-spine1, at_ns: 1000000, down_ns: 200000, up_ns: 300000, count: 3}
      - {type: straggler, job: b, rank: 3, factor: 1.5}                      # from t=0 only

The `events:` list is read by spec_events.py (a flap is expanded there into its down intervals).

Every job's cluster and fabric sections are replaced by the scenario's (the hardware is one), the
job's `cluster.nodes` by what its parallelism needs; the job is then loaded and validated as a
job file is. The jobs share one NCCL configuration and one packet format (pmtu, vlan, ip_version):
they are timed as one table. The file goes through the hardened YAML reader; every error is one
line naming the key.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..config import Job, check_field, job_from_dict, read_yaml_file, show, show_path
from ..config.paths import rebase
from ..config.presets import read_preset
from ..errors import ConfigError
from .spec_events import scenario_events
from .spec_values import MAX_START_NS, choice, mapping, unknown_key

TOP_KEYS = ("name", "description", "cluster", "fabric", "nodes", "placement", "seed", "ecmp_on_failure",
            "jobs", "events")
JOB_KEYS = ("job", "preset", "pattern", "name", "start_ns", "iterations", "nodes", "ranks", "bytes", "gap_ns",
            "dscp", "pcp")
PATTERN_ONLY = ("ranks", "bytes", "gap_ns")
PLACEMENTS = ("contiguous", "interleaved", "random", "explicit")
ECMP_ON_FAILURE = ("rehash", "resilient")
MAX_JOBS = 64
MAX_NODES = 65_536
SAME_WIRE = ("pmtu", "vlan", "ip_version")   # output keys the schedule reads (packet sizes, routes)


@dataclass(frozen=True)
class JobEntry:
    name: str
    job: Job
    start_ns: int
    nodes: tuple | None            # explicit placement
    source: str                    # the file or preset, for messages
    pattern: tuple | None = None   # a lab pattern (patterns.py): (kind, ranks, bytes, gap_ns)
    dscp: int | None = None        # the job's traffic class (None: output.dscp / output.pcp)
    pcp: int | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    jobs: tuple
    nodes: int
    placement: str
    seed: int
    ecmp_on_failure: str
    events: tuple

    @property
    def hardware(self) -> Job:
        """The job whose cluster and fabric sections are the scenario's (every job has them)."""
        return self.jobs[0].job


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file -> Scenario: every job loaded and validated on the scenario's hardware."""
    shown = show_path(path)
    doc = read_yaml_file(path, "scenario file")
    try:
        return _build(doc, Path(path), shown)
    except ConfigError as e:
        raise ConfigError(f"{shown}: {e}") from None


def _build(doc: dict, path: Path, shown: str) -> Scenario:
    for key in doc:
        if key not in TOP_KEYS:
            raise unknown_key("", key, TOP_KEYS)
    name = doc.get("name")
    if name is None:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-.") or "scenario"
    else:
        check_field("name", name, str)
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name) or name.strip(".") == "":
            raise ConfigError(f"name: {show(name)} — letters, digits, '.', '_', '-' (it names a folder)")
    if "description" in doc:
        check_field("description", doc["description"], str)
    placement = choice(doc.get("placement", "contiguous"), "placement", PLACEMENTS)
    seed = check_field("seed", doc.get("seed", 0), int, 0, 2**32 - 1)
    if "seed" in doc and placement != "random":
        raise ConfigError(f"seed: has no effect with placement: {placement} — drop it or use placement: random")
    ecmp = choice(doc.get("ecmp_on_failure", "rehash"), "ecmp_on_failure", ECMP_ON_FAILURE)
    jobs_doc = doc.get("jobs")
    if not isinstance(jobs_doc, list) or not jobs_doc:
        raise ConfigError(f"jobs: expected a list of jobs ({{job: FILE}} or {{preset: NAME}}), got {show(jobs_doc)}")
    if len(jobs_doc) > MAX_JOBS:
        raise ConfigError(f"jobs: {len(jobs_doc)} jobs; at most {MAX_JOBS}")
    hardware = {}
    for sec in ("cluster", "fabric"):
        if sec in doc:
            value = doc[sec]
            if not isinstance(value, (dict, str)):
                raise ConfigError(f"{sec}: expected a mapping or a preset name, got {show(value)}")
            hardware[sec] = rebase(value, path.parent, sec) if isinstance(value, dict) else value
    entries = []
    for i, item in enumerate(jobs_doc):
        entries.append(_job_entry(i, item, path.parent, hardware, explicit=placement == "explicit"))
        if entries[-1][1] is not None and not any(e[1] is not None for e in entries[:-1]):
            first = _hardware_of(entries[-1][1])  # without the scenario's own: the first job's, as written
            for sec in ("cluster", "fabric"):
                hardware.setdefault(sec, first.get(sec, {}))
    loaded = {i: _loaded(i, e, hardware) for i, e in enumerate(entries) if e[1] is not None}
    if len(loaded) < len(entries):
        hw = next(iter(loaded.values())).job if loaded else _hardware_job(hardware)
        loaded.update({i: _pattern(e, hw) for i, e in enumerate(entries) if e[1] is None})
    jobs = tuple(dataclasses.replace(loaded[i], dscp=entries[i][8], pcp=entries[i][9]) for i in range(len(entries)))
    _check_same(jobs)
    _check_class(jobs)
    names = [j.name for j in jobs]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise ConfigError(f"jobs[{i}]: name {n!r} is also jobs[{names.index(n)}]'s — give one a `name:`")
    need = sum(j.job.nodes for j in jobs)
    explicit_max = max((max(j.nodes) + 1 for j in jobs if j.nodes), default=0)
    nodes = doc.get("nodes")
    if nodes is None:
        nodes = max(need, explicit_max)
    else:
        nodes = check_field("nodes", nodes, int, 1, MAX_NODES)
    cl = doc.get("cluster")          # the scenario's own cluster.nodes (a job's is the job's)
    if isinstance(cl, dict) and "nodes" in cl:
        given = check_field("cluster.nodes", cl["nodes"], int, 1, MAX_NODES)
        if "nodes" in doc and given != nodes:
            raise ConfigError(f"nodes: {nodes} but cluster.nodes: {given} — keep one")
        nodes = given
    if need > nodes:
        raise ConfigError(f"nodes: the jobs need {need} nodes ({' + '.join(str(j.job.nodes) for j in jobs)}), "
                          f"the scenario has {nodes} — raise nodes or drop a job")
    events = scenario_events(doc.get("events", []), jobs)
    return Scenario(name, str(path), jobs, int(nodes), placement, int(seed), ecmp, events)


def _job_entry(i: int, item: Any, base: Path, hardware: dict, explicit: bool) -> tuple:
    where = f"jobs[{i}]"
    if isinstance(item, str):
        raise ConfigError(f"{where}: {show(item)} — write {{job: {item}}} (a job file) or {{preset: {item}}}")
    mapping(item, where)
    for key in item:
        if key not in JOB_KEYS:
            raise unknown_key(f"{where}.", key, JOB_KEYS)
    pattern = None
    given = [k for k in ("job", "preset", "pattern") if k in item]
    if len(given) != 1:
        raise ConfigError(f"{where}: give `job: FILE` (relative to the scenario file), `preset: NAME` or "
                          "`pattern: incast|alltoall|allreduce`, one of them")
    if "pattern" not in item:
        for k in PATTERN_ONLY:
            if k in item:
                raise ConfigError(f"{where}.{k}: only for a `pattern:` job (a job file or preset sizes itself)")
    if "pattern" in item:
        from .patterns import DEFAULT_BYTES, PATTERNS
        kind = choice(item["pattern"], f"{where}.pattern", PATTERNS)
        if "ranks" not in item:
            raise ConfigError(f"{where}: pattern: {kind} needs `ranks:` (its GPUs, whole nodes)")
        ranks = check_field(f"{where}.ranks", item["ranks"], int, 2, 4096)
        nbytes = check_field(f"{where}.bytes", item.get("bytes", DEFAULT_BYTES), int, 1, 1 << 40)
        gap = check_field(f"{where}.gap_ns", item.get("gap_ns", 0), int, 0, MAX_START_NS)
        its = check_field(f"{where}.iterations", item.get("iterations", 1), int, 1, 1000)
        raw, source, default_name = None, f"pattern {kind}", f"{kind}{i}"
        pattern = (kind, ranks, nbytes, gap, its)
    elif "job" in item:
        f = check_field(f"{where}.job", item["job"], str)
        file = base / f
        raw = rebase(read_yaml_file(file, "job file"), file.parent)
        source, default_name = f, re.sub(r"[^A-Za-z0-9._-]+", "-", Path(f).stem).strip("-.") or f"job{i}"
    else:
        p = check_field(f"{where}.preset", item["preset"], str)
        raw, source, default_name = {"preset": p}, f"preset {p}", p
    start = check_field(f"{where}.start_ns", item.get("start_ns", 0), int, 0, MAX_START_NS)
    if "iterations" in item and raw is not None:
        raw = {**raw, "iterations": item["iterations"]}
    nodes = None
    if "nodes" in item:
        if not explicit:
            raise ConfigError(f"{where}.nodes: only with placement: explicit (the scenario's placement "
                              "places every job)")
        nl = item["nodes"]
        if not isinstance(nl, list) or not nl:
            raise ConfigError(f"{where}.nodes: expected a list of node numbers, got {show(nl)}")
        nodes = tuple(check_field(f"{where}.nodes[{k}]", v, int, 0, MAX_NODES - 1) for k, v in enumerate(nl))
    elif explicit:
        raise ConfigError(f"{where}: placement: explicit needs `nodes: [...]` for every job")
    name = item.get("name")
    if name is not None:
        check_field(f"{where}.name", name, str)
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
            raise ConfigError(f"{where}.name: {show(name)} — letters, digits, '.', '_', '-'")
    dscp = check_field(f"{where}.dscp", item["dscp"], int, 0, 63) if "dscp" in item else None
    pcp = check_field(f"{where}.pcp", item["pcp"], int, 0, 7) if "pcp" in item else None
    return (where, raw, source, name, default_name, start, nodes, pattern if raw is None else None, dscp, pcp)


def _hardware_of(raw: dict, stack: tuple = ()) -> dict:
    """A job mapping's cluster and fabric sections as written, with those of the job preset it
    starts from (`preset:`) beneath: what the job runs on, to be given to every job."""
    out: dict = {}
    if isinstance(raw.get("preset"), str):
        name = raw["preset"]
        out = _hardware_of(read_preset("jobs", name, stack), stack + (("jobs", name),))
    for sec in ("cluster", "fabric"):
        if sec not in raw:
            continue
        value, base = raw[sec], out.get(sec)
        if isinstance(value, dict) and "preset" not in value and base is not None:
            value = {**({"preset": base} if isinstance(base, str) else base), **value}
        out[sec] = value
    return out


def _hardware_job(hardware: dict) -> Job:
    """The built-in default job on the scenario's cluster and fabric (a scenario of patterns only)."""
    raw = {sec: ({"preset": v} if isinstance(v, str) else {k: x for k, x in v.items() if k != "nodes"})
           if sec == "cluster" else v for sec, v in hardware.items()}
    try:
        return job_from_dict(raw, "hardware")
    except ConfigError as e:
        raise ConfigError(f"cluster/fabric: {e} (a scenario of patterns only runs them on the default "
                          "job's hardware: add a job file or preset)") from None


def _pattern(entry: tuple, hw: Job) -> JobEntry:
    """A lab pattern (patterns.py) as a job on the scenario's hardware and NCCL configuration."""
    where, _, source, name, default_name, start, nodes, pattern = entry[:8]
    kind, ranks, nbytes, gap, its = pattern
    gpn = hw.cluster.gpus_per_node
    if ranks % gpn:
        raise ConfigError(f"{where}.ranks: {ranks} — a pattern runs on whole nodes: a multiple of "
                          f"cluster.gpus_per_node={gpn}")
    par = dataclasses.replace(hw.parallelism, dp=ranks, tp=1, pp=1, cp=1, ep=1)
    job = dataclasses.replace(hw, name=name or default_name, iterations=its, parallelism=par)
    if nodes is not None and len(nodes) != job.nodes:
        raise ConfigError(f"{where}.nodes: {len(nodes)} nodes listed; the pattern needs {job.nodes} "
                          f"({ranks} ranks / cluster.gpus_per_node={gpn})")
    return JobEntry(name or default_name, job, start, nodes, source, pattern[:4])


def _loaded(i: int, entry: tuple, hardware: dict) -> JobEntry:
    where, raw, source, name, default_name, start, nodes = entry[:7]
    raw = dict(raw)
    for sec in ("cluster", "fabric"):
        value = hardware.get(sec, {})
        if sec == "cluster":           # the job's own node count follows from its parallelism
            value = {"preset": value} if isinstance(value, str) else {k: v for k, v in value.items() if k != "nodes"}
        raw[sec] = value
    try:
        job = job_from_dict(raw, default_name)
    except ConfigError as e:
        raise ConfigError(f"{where} ({source}): {e}") from None
    if nodes is not None and len(nodes) != job.nodes:
        raise ConfigError(f"{where}.nodes: {len(nodes)} nodes listed; the job needs {job.nodes} "
                          f"({job.world} GPUs / cluster.gpus_per_node={job.cluster.gpus_per_node})")
    return JobEntry(name or job.name, job, start, nodes, source)


def _check_same(jobs: tuple) -> None:
    """One NCCL configuration and packet format: the jobs are timed as one table."""
    first = jobs[0].job
    for i, e in enumerate(jobs[1:], 1):
        for f in fields(first.nccl):
            a, b = getattr(first.nccl, f.name), getattr(e.job.nccl, f.name)
            if a != b:
                raise ConfigError(f"jobs[{i}] ({e.source}): nccl.{f.name}={show(b)} but jobs[0] has {show(a)} — "
                                  "the jobs of a scenario share one NCCL configuration: set it alike")
        for k in SAME_WIRE:
            a, b = getattr(first.output, k), getattr(e.job.output, k)
            if a != b:
                raise ConfigError(f"jobs[{i}] ({e.source}): output.{k}={show(b)} but jobs[0] has {show(a)} — "
                                  "the jobs of a scenario share one packet format: set it alike")
        if e.job.detail != first.detail:
            raise ConfigError(f"jobs[{i}] ({e.source}): detail={e.job.detail} but jobs[0] has {first.detail} — "
                              "the scenario is timed at one granularity: set it alike")


def _check_class(jobs: tuple) -> None:
    """A job's pcp is its frames' 802.1Q priority: without a VLAN tag there is none to carry it."""
    for i, e in enumerate(jobs):
        if e.pcp is not None and not e.job.output.vlan:
            raise ConfigError(f"jobs[{i}].pcp: {e.pcp} but output.vlan is false (no 802.1Q tag to carry it) — "
                              f"set output.vlan: true in the jobs' files or drop jobs[{i}].pcp")
