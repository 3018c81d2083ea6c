"""Hypothesis over the inputs (issue 13): any mapping, YAML text, bytes, --set or lab plan gives a
Job (or None) or a one-line ConfigError, nothing else; random valid small jobs go through the
pipeline with the schedule's invariants and the work estimate close to the real counts.

The suite runs a small, derandomized budget (a few seconds). Maintainers run the long profile
before a release (docs/limits.md):  TRACEGEN_FUZZ=long python -m pytest -q tests/test_fuzz.py
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tracegen import config
from tracegen.config import ALIASES, SECTIONS, Job, Output, _TYPES, job_from_dict, load_job
from tracegen.errors import ConfigError

LONG = os.environ.get("TRACEGEN_FUZZ") == "long"
settings.register_profile("tracegen-ci", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("tracegen-long", deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
PROFILE = "tracegen-long" if LONG else "tracegen-ci"
SCALE = 25 if LONG else 1


def budget(n: int):
    return settings(settings.get_profile(PROFILE), max_examples=n * SCALE)


def ok_or_config_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ConfigError as e:
        msg = str(e)
        assert "\n" not in msg and 0 < len(msg) < 600, msg
        return None


# --- config loading ------------------------------------------------------------------------------

KEY_NAMES = sorted({k for sec in SECTIONS for k in _TYPES[sec]} | {a for sec in ALIASES for a in ALIASES[sec]}
                   | set(SECTIONS) | {"name", "iterations", "seed", "preset", "description"})
PRESETS = ["tiny", "llama3-8b", "default", "dgx-h100", "mini-h100", "nope"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.integers(-3, 70) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from(PRESETS + ["ring", "fp8", "0:10", "leaf0", "²", "1e30"]))
keys = st.sampled_from(KEY_NAMES) | st.text(max_size=6) | st.integers(-2, 2) | st.floats() | st.none()
values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(keys, ch, max_size=3),
                      max_leaves=12)


def section(sec: str):
    names = list(_TYPES[sec]) + list(ALIASES.get(sec, {})) + ["preset", "zz"]
    return st.dictionaries(st.sampled_from(names), scalars | values, max_size=6)


job_docs = st.fixed_dictionaries({}, optional={
    **{sec: section(sec) | scalars for sec in SECTIONS},
    "name": scalars, "iterations": st.integers(-1, 3) | scalars, "seed": scalars,
    "preset": st.sampled_from(PRESETS) | scalars,
}) | st.dictionaries(keys, values, max_size=4)


@budget(400)
@given(job_docs)
def test_any_mapping_is_a_job_or_a_config_error(doc):
    job = ok_or_config_error(job_from_dict, doc)
    event("a job" if job is not None else "a ConfigError")
    assert job is None or isinstance(job, Job)
    if job is not None:
        assert config.validate(job) is job


@budget(200)
@given(st.text(max_size=300) | job_docs.map(lambda d: yaml.safe_dump(d, allow_unicode=True)))
def test_any_yaml_text_is_a_job_or_a_config_error(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("y") / "job.yaml"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    job = ok_or_config_error(load_job, p)
    assert job is None or isinstance(job, Job)


@budget(100)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_job_or_a_config_error(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("b") / "job.yaml"
    p.write_bytes(data)
    ok_or_config_error(load_job, p)


@budget(200)
@given(st.lists(st.text(max_size=30) | st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
    [f"{s}.{k}" for s in SECTIONS for k in _TYPES[s]] + ["name", "iterations", "model", "a.b"]),
    st.text(max_size=12) | st.integers(-2**70, 2**70).map(str)), max_size=3))
def test_any_set_arguments_are_a_job_or_a_config_error(sets):
    ok_or_config_error(load_job, None, None, sets)


lab_docs = st.fixed_dictionaries({"hosts": st.sampled_from(["leaf0", "leaf1", "leaf9"]) | st.lists(
    st.integers(-1, 9) | st.sampled_from(["node0000-rail0", "node0001-rail1", "x"]) | st.none(), max_size=4)},
    optional={"ports": st.lists(st.text(max_size=10) | st.integers(0, 3) | st.none(), max_size=4),
              "mac": st.text(max_size=20) | st.sampled_from(["02:aa:00:00:00:01", "ff:ff:ff:ff:ff:ff",
                                                             "02:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"]),
              "ipv4": st.text(max_size=16) | st.sampled_from(["192.168.0.1", "255.255.255.255",
                                                              "223.255.255.255", "0.0.0.1"]),
              "dut_mac": scalars, "l2": scalars, "zz": scalars})


@budget(200)
@given(lab_docs)
def test_any_lab_plan_is_accepted_or_a_config_error(tmp_path_factory, doc):
    from tracegen.emit.views.lab import check_plan, load
    p = tmp_path_factory.mktemp("lab") / "lab.yaml"
    p.write_text(yaml.safe_dump(doc))
    out = Output(lab=str(p))
    ok_or_config_error(check_plan, out)
    plan = ok_or_config_error(load, out, FABRIC)
    if plan is not None:                                     # what it accepted is usable
        assert len(plan.ports) == len(plan.nics) == len(set(plan.ports))
        assert not (plan.mac[:, 0] & 1).any()
        assert all(p and "/" not in p and len(p) <= 64 for p in plan.ports)


def _fabric():
    from tracegen.fabric.topology import build_fabric
    return build_fabric(Job())                               # the default job: 8 NICs, 2 leaves


FABRIC = _fabric()


# --- random valid small jobs through the pipeline ------------------------------------------------

@st.composite
def small_jobs(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 3]))
    dp = draw(st.sampled_from([1, 2, 3, 4]))
    cp = draw(st.sampled_from([1, 1, 2]))
    experts = draw(st.sampled_from([0, 0, 4]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if dp % e == 0 and (e == 1 or experts % e == 0 and experts)]))
    sp = tp > 1 and (draw(st.booleans()) or (experts > 0 and ep > 1))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    mb = draw(st.integers(1, 2))
    m = draw(st.integers(1, 3)) * (pp if vpp > 1 else 1)
    world = dp * tp * pp * cp
    gpn = draw(st.sampled_from([g for g in (1, 2, 4, 8) if world % g == 0]))
    return {
        "iterations": draw(st.integers(1, 2)),
        "model": {"layers": pp * vpp * draw(st.integers(1, 2)), "hidden": 128, "heads": 8, "vocab": 512,
                  "seq_len": 64 * cp, "experts": experts, "top_k": 2, "dtype": draw(st.sampled_from(["bf16", "fp32"]))},
        "parallelism": {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "sp": sp, "vpp": vpp,
                        "micro_batch": mb, "global_batch": mb * dp * m,
                        "zero": draw(st.integers(0, 3)), "recompute": draw(st.sampled_from(["none", "selective", "full"])),
                        "dp_overlap": draw(st.booleans()), "dp_bucket_bytes": draw(st.sampled_from([100_000, 25_000_000]))},
        "cluster": {"gpus_per_node": gpn, "nodes_per_leaf": draw(st.integers(1, 4)), "spines": draw(st.integers(1, 2)),
                    "link_latency_ns": draw(st.integers(0, 5000)), "nic_gbps": draw(st.sampled_from([100, 400]))},
        "nccl": {"algorithm": draw(st.sampled_from(["ring", "tree", "halving_doubling", "hierarchical", "auto"])),
                 "protocol": draw(st.sampled_from(["simple", "ll", "ll128", "auto"])),
                 "channels": draw(st.integers(1, 4)), "pxn": draw(st.booleans()),
                 "ring_chunk_bytes": draw(st.sampled_from([4096, 2 << 20]))},
        "output": {"pmtu": draw(st.sampled_from([1024, 4096]))},
    }


@budget(30)
@given(small_jobs())
def test_random_small_jobs_keep_the_schedule_invariants(doc):
    from tracegen.pipeline import run_pipeline
    from tracegen.timing.schedule import duration_ns, net_wire_bytes
    from tracegen.tables import LinkKind
    from tracegen.timing.work import estimate
    job = ok_or_config_error(job_from_dict, doc)
    assume(job is not None)
    w = estimate(job)
    run = run_pipeline(job)
    f, fab = run.flows.rows, run.fabric
    n = len(f)
    assert w.ops == len(run.ops)
    assert 0.8 * n <= w.transfers <= 1.25 * n or (n == 0 and w.transfers == 0), (w.transfers, n)
    start, end = f["start_ns"].astype(np.int64), f["end_ns"].astype(np.int64)
    assert (start >= 0).all()
    net = f["link"] == LinkKind.NET
    wire = np.where(net, duration_ns(net_wire_bytes(f["wire_bytes"], f["max_msg_bytes"], job.output.pmtu),
                                     fab.nic_gbps),
                    duration_ns(f["wire_bytes"], fab.nvlink_gbps))
    assert (end >= start + wire).all()
    deps = run.flows.deps
    owner = np.repeat(np.arange(n), np.diff(deps.ptr))
    assert (end[deps.values] <= start[owner]).all(), "a transfer starts before the data it needs arrived"
    op_start, op_end = run.flows.op_start_ns, run.flows.op_end_ns
    assert (op_end >= op_start).all() and (op_start >= 0).all()
    assert (start >= op_start[f["op_id"]]).all()
    od = run.ops.deps
    op_owner = np.repeat(np.arange(len(run.ops)), np.diff(od.ptr))
    assert (op_end[od.values] <= op_start[op_owner]).all(), "an op released before its dependencies ended"


def test_profile_follows_the_environment():
    """CI runs the derandomized profile (same examples every run); TRACEGEN_FUZZ=long runs 25x as
    many random ones."""
    prof = settings.get_profile(PROFILE)
    if LONG:
        assert not prof.derandomize and budget(8).max_examples == 200
    else:
        assert prof.derandomize and budget(8).max_examples == 8
