"""A scenario's outputs complete (issue 23): pcaps of a scenario timed per connection, link_time.csv's
exact split of each link between the jobs, `report DIR` redrawing every picture from the files.

Judges: tests/wire_check.py (its own pcap reader and RoCEv2 rules) and tshark on the pcaps; the same
scenario timed per chunk writes the same frames per NIC (count and bytes: only their times differ);
each job's frames carry its own class (a struct parser of this file); per job and link, the bytes of
link_time.csv equal a sum made here from flows.csv's routes and net_wire_bytes (one QP per
connection: the route column is the whole path) with ops.csv's job of each op, and summed over the
jobs every bin equals the engine's own link load (fluid LinkLoad); `report` redraws the pictures
byte for byte with the timing engine made to fail.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

JOB = """model: tiny
parallelism: {dp: 8, tp: 1, pp: 1, micro_batch: 1, global_batch: 8}
cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: {kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}
nccl: {algorithm: ring, qps_per_connection: %(qps)d}
detail: %(detail)s
"""
TWO_JOBS = """name: two
placement: interleaved
jobs:
  - {job: j.yaml, name: a, dscp: 10, pcp: 1}
  - {job: j.yaml, name: b, start_ns: 100000, dscp: 34, pcp: 4}
"""


def generate(tmp: Path, detail: str = "conn", qps: int = 2, *opts: str, out: str = "out", scenario: str = TWO_JOBS):
    (tmp / "j.yaml").write_text(JOB % {"detail": detail, "qps": qps})
    (tmp / "s.yaml").write_text(scenario)
    return subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "-o", out, "-q",
                           *opts], capture_output=True, text=True, env=ENV, cwd=tmp)


def classes(path: Path):
    """(pcp, dscp) of every RoCEv2 frame of a classic pcap (802.1Q, IPv4, UDP 4791)."""
    data = path.read_bytes()
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack_from("<I", data, at + 8)[0]
        f = data[at + 16:at + 16 + incl]
        at += 16 + incl
        if struct.unpack_from("!H", f, 12)[0] != 0x8100 or struct.unpack_from("!H", f, 16)[0] != 0x0800:
            continue
        ihl = (f[18] & 15) * 4
        if f[18 + 9] == 17 and struct.unpack_from("!H", f, 18 + ihl + 2)[0] == 4791 and f[18 + ihl + 8] != 0x81:
            yield struct.unpack_from("!H", f, 14)[0] >> 13, f[19] >> 2


def frames_and_bytes(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    at, n, total = 24, 0, 0
    while at + 16 <= len(data):
        incl, orig = struct.unpack_from("<II", data, at + 8)
        at += 16 + incl
        n, total = n + 1, total + orig
    return n, total


# --- 1. pcaps of a scenario timed per connection ------------------------------------------------------

def test_pcaps_of_a_scenario_timed_per_connection(tmp_path):
    from wire_check import check_wire
    conn, full = tmp_path / "conn", tmp_path / "full"
    conn.mkdir()
    full.mkdir()
    got = generate(conn, "conn", 2, "--no-ns3")
    assert got.returncode == 0, got.stderr
    assert "warning" not in got.stderr, got.stderr
    d = conn / "out"
    pcaps = sorted((d / "pcap").glob("*.pcap"))
    assert len(pcaps) == 16                                  # every NIC of both jobs
    assert check_wire(d / "pcap", port_rate_gbps=400) == []
    if shutil.which("tshark"):
        for p in pcaps[:4]:
            bad = subprocess.run(["tshark", "-r", str(p), "-Y", "_ws.malformed or _ws.expert.severity >= error"],
                                 capture_output=True, text=True)
            assert bad.returncode == 0 and bad.stdout.strip() == "", (p.name, bad.stdout[:500])
    jobs = {j["name"]: j for j in json.loads((d / "scenario.json").read_text())["jobs"]}
    node_job = {n: name for name, j in jobs.items() for n in j["nodes"]}
    for p in pcaps:                                          # each job's frames carry its class
        want = {(jobs[node_job[int(p.stem[4:8])]]["pcp"], jobs[node_job[int(p.stem[4:8])]]["dscp"])}
        assert set(classes(p)) == want, p.name
    # timed per chunk, the same scenario writes the same frames on every NIC (times differ)
    got = generate(full, "full", 2, "--no-ns3")
    assert got.returncode == 0, got.stderr
    for p in pcaps:
        assert frames_and_bytes(p) == frames_and_bytes(full / "out" / "pcap" / p.name), p.name


def test_detail_conn_with_ns3_is_one_line_and_auto_times_per_chunk(tmp_path):
    got = generate(tmp_path, "conn", 1)                      # ns-3 wanted: every chunk, not conn
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1 and "detail" in lines[0] and "--no-ns3" in lines[0], got.stderr
    assert not (tmp_path / "out").exists()
    got = generate(tmp_path, "auto", 1)
    assert got.returncode == 0, got.stderr
    assert json.loads((tmp_path / "out" / "scenario.json").read_text())["detail"] == "full"
    assert (tmp_path / "out" / "ns3" / "flow.txt").is_file()


# --- 2. link_time.csv: each link's bytes split exactly between the jobs ----------------------------------

@pytest.mark.parametrize("detail", ["conn", "full"])
def test_link_time_splits_each_link_exactly_between_the_jobs(tmp_path, detail):
    from tracegen.scenario.run import run_scenario, scenario_fabric
    from tracegen.scenario.spec import load_scenario
    got = generate(tmp_path, detail, 1, "--no-ns3", "--no-pcap")
    assert got.returncode == 0, got.stderr
    d = tmp_path / "out"
    fab = scenario_fabric(load_scenario(tmp_path / "s.yaml"))
    job_of_op = {int(r["op_id"]): r["job"] for r in csv.DictReader((d / "ops.csv").open())}
    # the test's own sum: every network row's bytes on every link of its (one QP) route
    routed: dict[tuple[str, str], int] = defaultdict(int)
    for r in csv.DictReader((d / "flows.csv").open()):
        if r["route"]:
            for ln in r["route"].split(";"):
                routed[(fab.link_dir_name(int(ln)), job_of_op[int(r["op_id"])])] += int(r["net_wire_bytes"])
    table = list(csv.reader((d / "link_time.csv").open()))
    head, body = table[0], table[1:]
    assert head[:3] == ["link", "job", "link_gbps"]
    bins = [tuple(int(x) for x in h.split("_")[1:]) for h in head[3:]]
    written = {(row[0], row[1]): sum(float(x) * (b - a) / 8 for x, (a, b) in zip(row[3:], bins)) for row in body}
    assert set(written) == set(routed)
    for k, v in routed.items():
        assert written[k] == pytest.approx(v, rel=1e-3), k   # the proportional split misses by ~1 %
    # summed over the jobs, every bin is the engine's own load of the link
    run = run_scenario(load_scenario(tmp_path / "s.yaml"), rates=True)
    width = bins[0][1] - bins[0][0]
    used, load = run.flows.link_load.binned_used(width, len(bins))
    per_link: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(bins)))
    for row in body:
        per_link[row[0]] += np.array([float(x) for x in row[3:]]) * width / 8
    engine = {fab.link_dir_name(int(ln)): load[k] for k, ln in enumerate(used) if load[k].sum() > 0}
    assert set(per_link) <= set(engine)
    for name, v in per_link.items():
        assert np.allclose(v, engine[name], rtol=1e-6, atol=width / 8 * 0.002 * 2), name
    # the link's rate column: NIC ports 400 Gb/s; at 2:1 a leaf's 2 x 400 Gb/s of hosts go up over
    # 2 spine links of 400 / 2 each
    assert all(row[2] == ("400" if "node" in row[0] else "200") for row in body)


@pytest.mark.parametrize("detail, ecmp", [("conn", "resilient"), ("full", "rehash")])
def test_link_time_is_exact_when_links_change_during_the_run(tmp_path, detail, ecmp):
    """A flap and a timed degrade: items move between routes at the epochs' instants; per bin,
    the jobs' bytes on each link still add up to the engine's own load of it, and no job puts a
    byte on the flapping link's directions in a bin wholly inside a down interval."""
    from tracegen.scenario.run import run_scenario, scenario_fabric
    from tracegen.scenario.spec import load_scenario
    body = TWO_JOBS + (f"ecmp_on_failure: {ecmp}\nevents:\n"
                       "  - {type: flap, link: leaf0-spine0, at_ns: 200000, down_ns: 300000, up_ns: 150000, count: 2}\n"
                       "  - {type: degrade, link: leaf1-spine1, gbps: 50, at_ns: 400000, until_ns: 900000}\n")
    got = generate(tmp_path, detail, 2, "--no-ns3", "--no-pcap", scenario=body)
    assert got.returncode == 0, got.stderr
    d = tmp_path / "out"
    table = list(csv.reader((d / "link_time.csv").open()))
    head, body = table[0], table[1:]
    bins = [tuple(int(x) for x in h.split("_")[1:]) for h in head[3:]]
    width = bins[0][1] - bins[0][0]
    run = run_scenario(load_scenario(tmp_path / "s.yaml"), rates=True)
    assert len(run.fabric.epochs) == 6
    used, load = run.flows.link_load.binned_used(width, len(bins))
    fab = scenario_fabric(load_scenario(tmp_path / "s.yaml"))
    engine = {fab.link_dir_name(int(ln)): load[k] for k, ln in enumerate(used) if load[k].sum() > 0}
    per_link: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(bins)))
    for row in body:
        per_link[row[0]] += np.array([float(x) for x in row[3:]]) * width / 8
    assert set(per_link) <= set(engine)
    for name, v in per_link.items():
        assert np.allclose(v, engine[name], rtol=1e-6, atol=width / 8 * 0.002 * 2), name
    down = [(200_000, 500_000), (650_000, 950_000)]
    inside = [k for k, (a, b) in enumerate(bins) if any(lo <= a and b <= hi for lo, hi in down)]
    assert inside
    for name in ("leaf0->spine0", "spine0->leaf0"):
        assert per_link.get(name, np.zeros(len(bins)))[inside].sum() == 0, name
        assert per_link[name].sum() > 0                      # it does carry bytes while up


def test_without_rate_records_the_split_still_sums_to_each_links_load(tmp_path):
    """The fallback (no item rates kept, e.g. plan's run): the jobs' shares of each bin add up to
    the engine's load of the link."""
    from tracegen.scenario import report
    from tracegen.scenario.run import run_scenario
    from tracegen.scenario.spec import load_scenario
    (tmp_path / "j.yaml").write_text(JOB % {"detail": "conn", "qps": 2})
    (tmp_path / "s.yaml").write_text(TWO_JOBS)
    run = run_scenario(load_scenario(tmp_path / "s.yaml"))
    assert run.flows.item_rates is None
    edges, links, jobs, gbps = report.link_time(run)
    width = int(edges[1] - edges[0])
    used, load = run.flows.link_load.binned_used(width, len(edges) - 1)
    for k, ln in enumerate(used.tolist()):
        mine = gbps[links == ln].sum(axis=0) * width / 8
        assert np.allclose(mine, load[k], rtol=1e-9, atol=1e-6), ln


# --- 3. report DIR redraws every picture from the files ---------------------------------------------

PICS = ("jobs_gantt.png", "link_load_by_job.png", "slowdowns.png")


def test_report_redraws_every_picture_without_timing_again(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from tracegen.cli import main
    got = generate(tmp_path, "conn", 2, "--no-ns3", "--no-pcap")
    assert got.returncode == 0, got.stderr
    d = tmp_path / "out"
    drawn = {n: (d / n).read_bytes() for n in PICS}

    def no_timing(*a, **k):
        raise AssertionError("report timed the scenario again")
    import tracegen.scenario.run as scenario_run
    import tracegen.timing.fluid as fluid
    monkeypatch.setattr(scenario_run, "run_scenario", no_timing)
    monkeypatch.setattr(fluid, "run", no_timing)
    res = CliRunner().invoke(main, ["report", str(d), "-o", str(tmp_path / "pics")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "pics").iterdir() if not p.name.startswith(".")) == list(PICS)
    for n in PICS:
        assert (tmp_path / "pics" / n).read_bytes() == drawn[n], n
    res = CliRunner().invoke(main, ["report", str(d), "--only", "jobs_gantt", "-o", str(tmp_path / "one")])
    assert res.exit_code == 0 and (tmp_path / "one" / "jobs_gantt.png").read_bytes() == drawn["jobs_gantt.png"]


@pytest.mark.parametrize("name, damage, key", [
    ("ops.csv", lambda t: t.replace("job,op_id", "job,op"), "ops.csv: line 1"),
    ("ops.csv", lambda t: t.replace(",a,", ",zz,", 1) if ",a," in t else t.replace("\na,", "\nzz,", 1), "ops.csv: line 2"),
    ("ops.csv", lambda t: t.replace("\na,", "\na,x,", 1), "ops.csv: line 2"),
    ("link_time.csv", lambda t: t.replace(",400,", ",-1,", 1), "link_time.csv: line 2"),
    ("link_time.csv", lambda t: t.replace("gbps_0_", "gbps_5_", 1), "link_time.csv: line 1"),
])
def test_damaged_tables_are_one_line_exit_2(tmp_path, name, damage, key):
    got = generate(tmp_path, "conn", 2, "--no-ns3", "--no-pcap")
    assert got.returncode == 0, got.stderr
    d = tmp_path / "out"
    path = d / name
    path.write_text(damage(path.read_text()))
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "report", str(d), "-o", str(tmp_path / "pics")],
                         capture_output=True, text=True, env=ENV)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and key in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "pics").exists()


def test_without_link_time_the_link_picture_is_left_out_and_only_names_why(tmp_path):
    got = generate(tmp_path, "conn", 2, "--no-ns3", "--no-pcap")
    assert got.returncode == 0, got.stderr
    d = tmp_path / "out"
    (d / "link_time.csv").unlink()
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "report", str(d), "-o", str(tmp_path / "pics")],
                         capture_output=True, text=True, env=ENV)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "pics").iterdir() if not p.name.startswith(".")) == \
        ["jobs_gantt.png", "slowdowns.png"]
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "report", str(d), "--only", "link_load_by_job",
                          "-o", str(tmp_path / "p2")], capture_output=True, text=True, env=ENV)
    assert out.returncode == 2 and "link_time.csv" in out.stderr and len(out.stderr.strip().splitlines()) == 1


# --- 4. ns-3 of the mix with link events ------------------------------------------------------------

NS3_SCENARIO = """cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: {kind: leaf-spine, nodes_per_leaf: 2, spines: 2, ecmp_hash: 5-tuple}
placement: interleaved
jobs:
  - {pattern: allreduce, ranks: 4, bytes: 4194304, name: a}
  - {pattern: allreduce, ranks: 4, bytes: 4194304, name: b}
events:
  - %s
"""
T_NS = 50_000


@pytest.mark.timeout(900)
def test_ns3_run_applies_a_link_down_and_a_degrade_at_their_time():
    """Two 4-rank ring AllReduces interleaved on a 1:1 leaf-spine (every hop crosses leaves);
    leaf0-spine0 goes down (or to 100 Gb/s) at T = 50 us. `generate --scenario` writes the ns-3
    scenario of the mix with the event; `tracegen ns3 run` of it ends within 10 % of the schedule
    (scenario.json) and of a closed form of a ring whose rates are steady: by T it has done T/D0
    of its work (D0: the schedule without the event), the rest takes (1 - T/D0) x D1, D1 the
    schedule with the link in that state from t=0. And later than the run without the event.
    (pip ns3 drops libraries from paths holding "test": a tempfile folder, not tmp_path.)"""
    import importlib.util
    import tempfile
    if importlib.util.find_spec("ns") is None:
        pytest.skip("the pip ns3 package is not installed")
    root = Path(tempfile.mkdtemp(prefix="tg-ns3-events-"))
    try:
        cases = {"base": "{type: straggler, job: a, rank: 0, factor: 1.0}",
                 "down": "{type: down, link: leaf0-spine0, at_ns: %d}" % T_NS,
                 "degrade": "{type: degrade, link: leaf0-spine0, gbps: 100, at_ns: %d}" % T_NS,
                 "down0": "{type: down, link: leaf0-spine0}", "degrade0": "{type: degrade, link: leaf0-spine0, gbps: 100}"}
        sim, ana, warned = {}, {}, {}
        for name, event in cases.items():
            (root / f"{name}.yaml").write_text(NS3_SCENARIO % event)
            gen = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", f"{name}.yaml",
                                  "--no-pcap", "-o", name, "-q"], capture_output=True, text=True, env=ENV, cwd=root)
            assert gen.returncode == 0, gen.stderr
            warned[name] = [line for line in gen.stderr.splitlines() if line.startswith("warning")]
            ana[name] = max(j["end_ns"] for j in json.loads((root / name / "scenario.json").read_text())["jobs"])
            if name.endswith("0"):
                continue                                         # the schedule from t=0 only
            out = subprocess.run([sys.executable, "-m", "tracegen.cli", "ns3", "run", f"{name}/ns3", "--no-dcqcn",
                                  "-q"], capture_output=True, text=True, env=ENV, cwd=root, timeout=850)
            assert out.returncode == 0, out.stderr[-2000:]
            s = json.loads((root / name / "ns3" / "sim" / "summary.json").read_text())
            assert s["completed"] == s["flows"] > 0
            sim[name] = s["sim_iteration_ns"]
        d0 = ana["base"]
        assert abs(sim["base"] / d0 - 1) < 0.02, (sim, ana)
        for name in ("down", "degrade"):
            assert ana[name + "0"] > 1.3 * d0, ana                 # the event slows the fabric
            closed = T_NS + (1 - T_NS / d0) * ana[name + "0"]
            assert abs(sim[name] / closed - 1) < 0.10, (name, sim[name], closed)
            assert abs(sim[name] / ana[name] - 1) < 0.10, (name, sim[name], ana[name])
            assert sim[name] > 1.1 * sim["base"], (name, sim)
        # manifest: the link (leaf0 = host count 8, spine0 = 8 + 4 leaves) and the QPs moved off it
        man = json.loads((root / "down" / "ns3" / "manifest.json").read_text())
        [ev] = man["link_events"]
        assert ev["at_ns"] == T_NS and ev["links"] == [[8, 12, 0]] and ev["repin"]
        for _, path, rpath in ev["repin"]:
            for p in (path, rpath):
                assert {(8, 12), (12, 8)}.isdisjoint(zip(p, p[1:])), p
        qps = {q["qp"]: q for q in man["qps"]}
        assert any({(8, 12), (12, 8)} & set(zip(qps[q]["path"], qps[q]["path"][1:])) for q, _, _ in ev["repin"])
        assert "link_events" not in json.loads((root / "base" / "ns3" / "manifest.json").read_text())
        # HPCC's config: LINK_DOWN us A B for the down; the degrade it cannot take, in one warning
        conf = lambda name: next(line for line in (root / name / "ns3" / "config.txt").read_text().splitlines()  # noqa: E731
                                 if line.startswith("LINK_DOWN"))
        assert conf("down") == "LINK_DOWN 50 8 12" and conf("degrade") == conf("base") == "LINK_DOWN 0 0 0"
        assert warned["down"] == [] and len(warned["degrade"]) == 1, warned
        assert "leaf0-spine0 at 100 Gb/s" in warned["degrade"][0]
    finally:
        shutil.rmtree(root, ignore_errors=True)
