"""Events during the run (issue 23): a link or spine down from t = T (until T2), a flapping link, a
link degraded at T - the fluid engine changes capacities at the instant and flows in flight move.

Judges: closed forms computed here from the run without the event (an uplink-bound ring moves its
bytes at a constant rate r; from T it moves the bytes left at r x the capacity left), the link
loads the engine records (no byte on a spine's links while it is down, bytes before and after),
the routes of every epoch (none crosses a link down), the independent schedule validator, and
equality with the t=0 path where the timeline has nothing to change.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tracegen.scenario.run import run_scenario
from tracegen.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

# as tests/test_scenario.py's t=0 spine test: 8 ranks alternating between two leaves of 4 nodes,
# 4 spines (1:1), qp hash, 32 QPs a connection: every ring hop crosses leaves, uplink-bound
JOB = """model: tiny
parallelism: {dp: 8, tp: 1, pp: 1, micro_batch: 1, global_batch: 8}
cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: {kind: leaf-spine, nodes_per_leaf: 4, spines: %(spines)d, ecmp_hash: qp}
nccl: {algorithm: ring, qps_per_connection: %(qps)d}
detail: %(detail)s
"""
ALTERNATE = "placement: explicit\njobs: [{job: j.yaml, nodes: [0, 4, 1, 5, 2, 6, 3, 7]}]\n"


def _run(tmp: Path, events: str = "", spines: int = 4, qps: int = 32, detail: str = "full", ecmp: str = "rehash"):
    (tmp / "j.yaml").write_text(JOB % {"spines": spines, "qps": qps, "detail": detail})
    s = tmp / "s.yaml"
    s.write_text(ALTERNATE + f"ecmp_on_failure: {ecmp}\n" + (f"events: [{events}]\n" if events else ""))
    return run_scenario(load_scenario(s))


def _big(run) -> tuple[int, int, int]:
    """The ring AllReduce of the gradients (the largest op): its id, start and end."""
    o = int(np.argmax(run.ops.rows["bytes"]))
    return o, int(run.flows.op_start_ns[o]), int(run.flows.op_end_ns[o])


def _switch_dirs(run, name: str) -> np.ndarray:
    f = run.fabric
    node = f.node_id(f.switch_id(name))
    ln = np.flatnonzero((f.links["a"] == node) | (f.links["b"] == node))
    return np.r_[2 * ln, 2 * ln + 1]


def _link_dirs(run, a: str, b: str) -> np.ndarray:
    f = run.fabric
    na, nb = f.node_id(f.switch_id(a)), f.node_id(f.switch_id(b))
    ln = np.flatnonzero(((f.links["a"] == na) & (f.links["b"] == nb)) | ((f.links["a"] == nb) & (f.links["b"] == na)))
    return np.r_[2 * ln, 2 * ln + 1]


def _bytes_on(run, dirs, lo: int, hi: int) -> float:
    """Bytes the engine's load records put on link directions `dirs` within [lo, hi): each record
    holds its link's load from its time to the link's next record."""
    L = run.flows.link_load
    assert L is not None and not L.truncated
    total = 0.0
    for d in np.asarray(dirs).tolist():
        m = L.link == d
        t, v = L.t[m].astype(np.int64), L.bytes_per_ns[m]
        o = np.argsort(t, kind="stable")
        t, v = t[o], v[o]
        ends = np.r_[t[1:], max(hi, int(t[-1]) if len(t) else hi)]
        a, b = np.clip(t, lo, hi), np.clip(ends, lo, hi)
        total += float((v * np.maximum(b - a, 0)).sum())
    return total


def _routes_cross(router, conns, dirs) -> bool:
    route = router.routes(np.repeat(conns.src_nic, conns.qps), np.repeat(conns.dst_nic, conns.qps), conns.sport,
                          conns.plane, dest_qpn=conns.qpn_dst)
    return bool(np.isin(route, dirs).any())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("base"))


def test_a_spine_down_from_t_slows_the_rest_of_the_ring_by_4_3_and_carries_nothing_after(tmp_path, base):
    from schedule_validator import assert_valid
    o, s0, e0 = _big(base)
    T = s0 + (e0 - s0) // 2
    down = _run(tmp_path, f"{{type: down, switch: spine1, at_ns: {T}}}")
    # closed form: the ring moves its bytes at a constant rate r (4 uplinks of 4 x 400 Gb/s carry a
    # leaf's 4 hops); bytes left at T: r x (e0 - T); from T the 3 spines left give 3/4 r
    expect = T + (e0 - T) / (3 / 4)
    _, s1, e1 = _big(down)
    assert s1 == s0
    assert (e1 - s0) == pytest.approx(expect - s0, rel=0.05), (e1, expect)
    assert e1 > e0 + 0.9 * (expect - e0)                    # it did slow down (not only within 5 %)
    dirs = _switch_dirs(down, "spine1")
    assert _bytes_on(down, dirs, s0, T) > 0.2 * base.ops.rows["bytes"][o] / 8   # before T it carried its share
    assert _bytes_on(down, dirs, T, e1 + 1) == 0.0           # after T not a byte
    # the routes: epoch 0 crosses spine1, the epoch from T does not
    f = down.fabric
    assert [e.at_ns for e in f.epochs] == [T]
    assert _routes_cross(f.router, down.flows.conns, dirs)
    assert not _routes_cross(f.epochs[0].router, down.flows.conns, dirs)
    assert_valid(down.flows, down.fabric, down.scenario.hardware.output, exact=False)


def test_down_for_a_while_and_a_flap_lose_the_closed_form_time(tmp_path, base):
    from schedule_validator import assert_valid
    o, s0, e0 = _big(base)
    T1 = s0 + (e0 - s0) // 4
    # down over [T1, T2): 3/4 of the rate for T2 - T1, so (T2 - T1) / 4 lost
    T2 = T1 + 120_000
    run = _run(tmp_path, f"{{type: down, switch: spine1, at_ns: {T1}, until_ns: {T2}}}")
    lost = _big(run)[2] - e0
    assert lost == pytest.approx((T2 - T1) / 4, rel=0.05), lost
    dirs = _switch_dirs(run, "spine1")
    assert _bytes_on(run, dirs, T1, T2) == 0.0
    assert _bytes_on(run, dirs, T2, _big(run)[2]) > 0        # back up: rehash moves flows back onto it
    assert_valid(run.flows, run.fabric, run.scenario.hardware.output, exact=False)
    # a flap: down 100 us, up 50 us, twice - 2 x 100 us at 3/4 rate
    flap = _run(tmp_path, f"{{type: flap, switch: spine1, at_ns: {T1}, down_ns: 100000, up_ns: 50000, count: 2}}")
    assert [(e.at_ns, e.until_ns) for e in flap.scenario.events] == [(T1, T1 + 100_000), (T1 + 150_000, T1 + 250_000)]
    lost = _big(flap)[2] - e0
    assert lost == pytest.approx(2 * 100_000 / 4, rel=0.05), lost
    assert _bytes_on(flap, dirs, T1 + 100_000, T1 + 150_000) > 0
    assert _bytes_on(flap, dirs, T1 + 150_000, T1 + 250_000) == 0.0
    assert_valid(flap.flows, flap.fabric, flap.scenario.hardware.output, exact=False)


def test_a_link_every_flow_crosses_degraded_at_t(tmp_path):
    from schedule_validator import assert_valid
    # one spine: leaf0-spine0 carries every hop (leaf0 -> leaf1 or back), 4 hops a direction
    base = _run(tmp_path, spines=1, qps=1)
    o, s0, e0 = _big(base)
    T = s0 + (e0 - s0) // 2
    slow = _run(tmp_path, f"{{type: degrade, link: leaf0-spine0, gbps: 100, at_ns: {T}}}", spines=1, qps=1)
    # 400 -> 100 Gb/s: the bytes left at T move at a quarter of the rate
    expect = T + (e0 - T) * 400 / 100
    e1 = _big(slow)[2]
    assert (e1 - s0) == pytest.approx(expect - s0, rel=0.05), (e1, expect)
    dirs = _link_dirs(slow, "leaf0", "spine0")
    L = slow.flows.link_load
    after = (L.t >= T) & np.isin(L.link, dirs)
    assert after.any() and L.bytes_per_ns[after].max() <= 100 / 8 * (1 + 1e-9)   # the new capacity holds
    assert_valid(slow.flows, slow.fabric, slow.scenario.hardware.output, exact=False)


def test_connection_level_moves_its_items_too(tmp_path):
    base = _run(tmp_path, detail="conn")
    o, s0, e0 = _big(base)
    T = s0 + (e0 - s0) // 2
    down = _run(tmp_path, f"{{type: down, switch: spine1, at_ns: {T}}}", detail="conn")
    e1 = _big(down)[2]
    # slower than intact, no slower than the link rate alone allows (a channel's rate cap from
    # its pipeline can only make the 3/4 bite less)
    assert e0 < e1 <= T + (e0 - T) / (3 / 4) * 1.01
    dirs = _switch_dirs(down, "spine1")
    assert _bytes_on(down, dirs, s0, T) > 0
    assert _bytes_on(down, dirs, T, e1 + 1) == 0.0


def test_resilient_keeps_the_flows_that_avoided_the_failure_and_the_moved_ones_stay(tmp_path, base):
    from tracegen.fabric.timeline import epoch_routes
    o, s0, e0 = _big(base)
    T1, T2 = s0 + (e0 - s0) // 4, s0 + (e0 - s0) // 2
    event = f"{{type: down, switch: spine1, at_ns: {T1}, until_ns: {T2}}}"
    res = _run(tmp_path, event, ecmp="resilient")
    f, c = res.fabric, res.flows.conns
    dirs = _switch_dirs(res, "spine1")
    r0, r1, r2 = epoch_routes(f, np.repeat(c.src_nic, c.qps), np.repeat(c.dst_nic, c.qps), c.sport, c.plane,
                              dest_qpn=c.qpn_dst)
    w = min(r0.shape[1], r1.shape[1])
    hit = np.isin(r0, dirs).any(axis=1)
    assert hit.any() and (~hit).any()
    assert (r1[~hit][:, :w] == r0[~hit][:, :w]).all()           # untouched flows stay
    assert not np.isin(r1, dirs).any()
    assert (r2 == r1).all()                                      # back up: nobody is moved back
    # the engine: no byte on spine1 from T1 on (resilient), bytes again after T2 (rehash)
    assert _bytes_on(res, dirs, s0, T1) > 0
    assert _bytes_on(res, dirs, T1, _big(res)[2] + 1) == 0.0
    rh = _run(tmp_path, event)
    assert _bytes_on(rh, dirs, T2, _big(rh)[2] + 1) > 0
    # resilient loses the 1/4 of spine1 for the rest of the op, rehash only over [T1, T2)
    assert _big(res)[2] == pytest.approx(T1 + (e0 - T1) / (3 / 4), rel=0.05)


def test_the_timed_path_with_nothing_to_change_is_the_fixed_fabric(tmp_path):
    # a spine down from t=0 to the end (the fixed, reduced fabric) vs the same plus a degrade long
    # after the run (the timed fabric: every link kept, epoch 0 routes around spine1): same times
    fixed = _run(tmp_path, "{type: down, switch: spine1}")
    timed = _run(tmp_path, "{type: down, switch: spine1}, {type: degrade, link: leaf0-spine0, gbps: 100, "
                           "at_ns: 900000000000}")
    assert not fixed.fabric.epochs and len(timed.fabric.epochs) == 1
    assert np.array_equal(fixed.flows.op_end_ns, timed.flows.op_end_ns)
    assert np.array_equal(fixed.flows.rows["start_ns"], timed.flows.rows["start_ns"])
    assert np.array_equal(fixed.flows.rows["end_ns"], timed.flows.rows["end_ns"])


def test_plan_and_generate_show_the_events_with_their_times(tmp_path):
    (tmp_path / "j.yaml").write_text(JOB % {"spines": 4, "qps": 4, "detail": "full"})
    (tmp_path / "s.yaml").write_text(ALTERNATE + "events: [{type: flap, link: leaf0-spine2, at_ns: 100000, "
                                     "down_ns: 20000, up_ns: 30000, count: 2}, "
                                     "{type: degrade, link: leaf1-spine0, gbps: 100, at_ns: 5000, until_ns: 90000}]\n")
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", "--scenario", "s.yaml"], cwd=tmp_path,
                         env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "leaf0-spine2 down from 100,000 ns until 120,000 ns" in text
    assert "leaf0-spine2 down from 150,000 ns until 170,000 ns" in text
    assert "leaf1-spine0 at 100 Gb/s from 5,000 ns until 90,000 ns" in text
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "--no-pcap",
                          "--no-ns3", "-q", "-o", "out"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    ev = json.loads((tmp_path / "out" / "scenario.json").read_text())["events"]
    assert ev == [{"type": "down", "link": "leaf0-spine2", "at_ns": 100000, "until_ns": 120000},
                  {"type": "down", "link": "leaf0-spine2", "at_ns": 150000, "until_ns": 170000},
                  {"type": "degrade", "link": "leaf1-spine0", "gbps": 100, "at_ns": 5000, "until_ns": 90000}]


def test_link_bytes_follow_the_flows_that_moved(tmp_path, base):
    from tracegen.scenario.report import link_bytes_csv
    o, s0, e0 = _big(base)
    T = s0 + (e0 - s0) // 2
    down = _run(tmp_path, f"{{type: down, switch: spine1, at_ns: {T}}}")
    f = down.fabric
    got: dict[str, float] = {}
    for line in link_bytes_csv(down).splitlines()[1:]:
        name, _, v = line.rsplit(",", 2)
        got[name] = got.get(name, 0.0) + float(v)
    for d in range(f.n_link_dirs):           # every link direction: the engine's bytes on it
        want = _bytes_on(down, [d], 0, 1 << 62)
        assert got.get(f.link_dir_name(d), 0.0) == pytest.approx(want, rel=1e-6, abs=2), f.link_dir_name(d)
    # spine1 carried bytes only before T: less than a spine that stayed up
    s1 = sum(v for k, v in got.items() if "spine1" in k)
    s0_ = sum(v for k, v in got.items() if "spine0" in k)
    assert 0 < s1 < 0.8 * s0_


def test_pcaps_of_a_flapping_scenario_pass_the_wire_checks(tmp_path):
    from wire_check import Stats, check_wire, tags
    (tmp_path / "j.yaml").write_text(JOB % {"spines": 4, "qps": 4, "detail": "full"})
    (tmp_path / "s.yaml").write_text(ALTERNATE + "events: [{type: flap, switch: spine1, at_ns: 200000, "
                                     "down_ns: 100000, up_ns: 50000, count: 2}]\n")
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "--no-ns3", "-q",
                          "-o", "out"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    st = Stats()
    bad = check_wire(str(tmp_path / "out" / "pcap"), port_rate_gbps=400, stats=st)
    assert st["files"] == 8 and st["roce"] > 0
    assert not bad, dict(tags(bad))


def test_the_epochs_of_overlapping_events(tmp_path):
    from tracegen.scenario.run import prepare
    (tmp_path / "j.yaml").write_text(JOB % {"spines": 4, "qps": 1, "detail": "full"})
    (tmp_path / "s.yaml").write_text(ALTERNATE + "events: [{type: down, link: leaf0-spine1, at_ns: 100, until_ns: 200}, "
                                     "{type: degrade, link: leaf0-spine1, gbps: 100, at_ns: 150, until_ns: 300}, "
                                     "{type: degrade, link: leaf0-spine1, gbps: 200, at_ns: 120, until_ns: 400}, "
                                     "{type: down, switch: spine3, at_ns: 0, until_ns: 50}]\n")
    _, f = prepare(load_scenario(tmp_path / "s.yaml"))
    ln = _link_dirs(SimpleRun(f), "leaf0", "spine1")[0] // 2
    # a link is down while a down event holds; else at the lowest rate of the degrades holding
    assert [(e.at_ns, int(e.gbps[ln])) for e in f.epochs] == [(50, 400), (100, 0), (200, 100), (300, 200), (400, 400)]
    node = f.node_id(f.switch_id("spine3"))
    on3 = (f.links["a"] == node) | (f.links["b"] == node)
    assert (f.links["gbps"][on3] == 400).all()          # down at t=0: no route crosses it, its rate kept
    assert all((e.gbps[on3] == 400).all() for e in f.epochs)   # up again from 50 ns


class SimpleRun:
    def __init__(self, fabric):
        self.fabric = fabric
