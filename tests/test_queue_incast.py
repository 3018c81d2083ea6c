"""output.ecn_marking=queue at the incast's congestion point, judged from the captures alone
(issue 24): the leaf's egress port towards a receiving NIC.

An expert-parallel AllToAll of 16 single-GPU ranks (8 nodes, 2 leaves of the 4:1 leaf-spine):
every NIC receives from 15 others at once - N:1 at each NIC port, fed by the leaf's other NICs
and by the spines. queue_replay.py (no tracegen code) replays leaf0's egress queues from its
switch view; on its ports to NICs RED's rules must hold (no CE set there at or below Kmin, every
data packet above Kmax CE, the count on the ramp near pmax's line), PAUSE frames reach a leaf0
NIC only in its slot after one of its frames found a leaf0 egress queue above Xoff, with the
quanta that queue needs to drain to Xon, and the NIC sends nothing of that priority meanwhile;
lowering Kmin raises the marks; the wire validator (PAUSE frames included in the no-overlap rule)
and tshark pass; the expected counters are the captures' counts; the merged capture holds the
pauses of the NIC files."""
from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from queue_replay import FCS, Row, frames, judge_pauses, pauses, replay
from tracegen.cli import main
from wire_check import Stats, check_wire, tags

KMAX, PMAX = 200_000, 0.2       # a ramp over most of the incast queue's range (PFC holds it near
                                # Xoff + the headroom of its 8 ingresses: ~260 KB)
XOFF, RESUME = 150_000, 3072
LAT = 1000                     # the scenario's fabric.link_latency_ns below
R = Row
# A job with no network traffic (tp=2 on one node: NVLink only) carries the output and network
# settings; the lab pattern `incast` (BMWG draft 7.2: ranks 1..N-1 each send `bytes` to rank 0
# at once) is the traffic: 15 senders, 4 of them under leaf0 with rank 0, 10 behind the spines.
QUIET = """parallelism: {{dp: 1, tp: 2, pp: 1, global_batch: 1}}
model: {{layers: 1}}
nccl: {{pxn: false}}
output: {{{view}, ecn_marking: queue, format: {fmt}, tables: "csv,parquet", pictures: false, perfetto: false}}
network: {{kmin_bytes: {kmin}, kmax_bytes: {kmax}, pmax: {pmax}, pfc_xoff_bytes: {xoff},
          pfc_resume_offset_bytes: {resume}}}
"""
SCENARIO = """name: incast
fabric: {{kind: leaf-spine, nodes_per_leaf: 4, spines: 4, oversubscription: 4.0, link_latency_ns: {lat}}}
jobs:
  - {{job: quiet.yaml}}
  - {{pattern: incast, ranks: 16, bytes: 1048576, iterations: 1, name: incast}}
"""


def _run(base: Path, kmin: int, view: str = "switch: leaf0", fmt: str = "pcapng") -> Path:
    base.mkdir(parents=True)
    (base / "quiet.yaml").write_text(QUIET.format(view=view, fmt=fmt, kmin=kmin, kmax=KMAX, pmax=PMAX, xoff=XOFF,
                                                  resume=RESUME))
    (base / "incast.yaml").write_text(SCENARIO.format(lat=LAT))
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--scenario", str(base / "incast.yaml"),
                                    "-o", str(base / "out")])
    assert res.exit_code == 0, res.output
    return base / "out"


def _rates(out: Path):
    """Gb/s per port file, from its pcapng interface's if_speed."""
    from wire_check import read_records
    return lambda stem: next(iter(read_records(next((out / "pcap").glob(stem + ".*")))[0])).speed_bps // 10**9


def _lat(out: Path) -> int:
    return LAT


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("incast")
    return {k: _run(base / f"k{k}", k) for k in (20_000, 100_000)}


def _nic_port(r) -> bool:
    return "-node" in r[R.FILE]


def test_nic_port_marks_follow_its_replayed_queue(runs):
    kmin = 20_000
    out = runs[kmin]
    rows, _ = replay(out, lat=_lat(out))
    data = [r for r in rows if _nic_port(r) and r[R.DATA]]
    fresh = [r for r in data if not r[R.CE_UP]]           # not CE before this port: RED decides here
    here = [r for r in fresh if r[R.CE]]
    assert len(data) > 3000 and len(here) > 100, (len(data), len(here))
    assert {r[R.FILE] for r in here} == {"leaf0-node0001-rail0"}, "marks at the receiver's port (rank 0)"
    assert max(r[R.QUEUE] for r in data) > KMAX, "the incast must fill a NIC port's queue above Kmax"
    low = [r for r in here if r[R.QUEUE] <= kmin]
    assert not low, f"{len(low)} CE set at a NIC port with its queue <= Kmin: {low[:3]}"
    high = [r for r in data if r[R.QUEUE] > KMAX and not r[R.CE]]
    assert not high, f"{len(high)} data packets above Kmax leave unmarked: {high[:3]}"
    ramp = [r for r in fresh if kmin < r[R.QUEUE] <= KMAX]
    p = [PMAX * (r[R.QUEUE] - kmin) / (KMAX - kmin) for r in ramp]
    mean, sd = sum(p), math.sqrt(sum(x * (1 - x) for x in p))
    got = sum(r[R.CE] for r in ramp)
    assert abs(got - mean) <= 5 * sd + 1, (got, mean, sd)
    # the uplinks keep marking by their own queues
    up = [r for r in rows if not _nic_port(r) and r[R.DATA] and not r[R.CE_UP]]
    assert not [r for r in up if r[R.CE] and r[R.QUEUE] <= kmin]
    print(f"\nleaf0 ports to NICs: {len(data)} data frames, {len(here)} CE set there ({got} on the ramp, "
          f"{mean:.0f} expected), max queue {max(r[R.QUEUE] for r in data)} B")


def test_lowering_kmin_raises_the_nic_port_marks(runs):
    counts = {}
    for k, out in runs.items():
        rows, _ = replay(out, lat=_lat(out))
        counts[k] = sum(1 for r in rows if _nic_port(r) and r[R.DATA] and r[R.CE] and not r[R.CE_UP])
    assert counts[20_000] > counts[100_000] > 0, counts


def test_pauses_only_above_xoff_in_their_slot(runs):
    """queue_replay.judge_pauses on leaf0's NICs: each PAUSE follows a frame of that NIC finding a
    leaf0 egress queue above Xoff (here: the port to the incast's receiver), in its slot, with the
    quanta to drain to Xon; the NIC waits; no arrival above Xoff goes without a pause."""
    out = runs[20_000]
    rows, leaf_mac = replay(out, lat=LAT)
    n, at_nics, _, kinds = judge_pauses(out, rows, leaf_mac, LAT, _rates(out), XOFF, XOFF - RESUME)
    assert n > 10 and at_nics == n, (n, at_nics)
    assert kinds["xon"] > 0 and kinds["pause"] == n, kinds
    print(f"\n{n} PAUSE frames judged, {at_nics} after leaf0's port to the receiving NIC went above Xoff; "
          f"PFC frames {dict(kinds)}")


def test_incast_views_are_clean(runs):
    stats = {}
    for out in runs.values():
        bad = check_wire(out)
        assert not bad, f"{len(bad)} violations {dict(tags(bad))}: " + "\n".join(bad[:10])
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed")
    for f in sorted((runs[20_000] / "pcap").glob("*")):
        res = subprocess.run(["tshark", "-n", "-r", str(f), "-Y", "_ws.malformed", "-T", "fields", "-e",
                              "frame.number"], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and not res.stdout.split(), (f.name, res.stdout[:200], res.stderr[-300:])
    del stats


COUNTERS = ("tx_frames", "tx_bytes", "rx_frames", "rx_bytes", "ecn_marked", "pfc_pause_tx", "pfc_pause_rx")


def _recount(out: Path, sw: str, rows, mac) -> dict:
    """Per (port file, priority) of switch sw's view: the COUNTERS from its captures - frames and
    bytes per direction (sent: the switch's MAC as source), CE set at the port (leaving it CE, not
    CE upstream: rows of replay()), PFC frames (PAUSE and XON) sent and received."""
    want = {}
    for f in sorted((out / "pcap").glob(f"{sw}-*")):
        for t, orig, h in frames(f):
            if h is None:
                continue
            row = want.setdefault((f.stem, h[1]), [0] * 7)
            tx = h[0] == mac
            row[0 if tx else 2] += 1
            row[1 if tx else 3] += orig + FCS
        for p in pauses(f):
            want.setdefault((f.stem, p[1]), [0] * 7)[5 if p[3] == mac else 6] += 1
    for r in rows:
        want[r[R.FILE], r[R.PCP]][4] += r[R.DATA] and r[R.CE] and not r[R.CE_UP]
    return want


def _counters(out: Path):
    with open(out / "port_counters.csv") as fh:
        got_rows = list(csv.DictReader(fh))
    return got_rows, {(r["port"], int(r["priority"])): [int(r[c]) for c in COUNTERS] for r in got_rows}


def test_counters_equal_the_captures(runs):
    """port_counters.csv against an own count of leaf0's port files (_recount)."""
    import pyarrow.parquet as pq
    out = runs[20_000]
    rows, leaf_mac = replay(out, lat=_lat(out))
    want = _recount(out, "leaf0", rows, leaf_mac)
    got_rows, got = _counters(out)
    assert got == want
    at_nics = sum(v[4] for k, v in want.items() if "-node" in k[0])
    assert at_nics > 100, at_nics
    to_spines = sum(v[5] for k, v in want.items() if "-spine" in k[0])
    assert to_spines > 0, "leaf0 pauses the spine ports feeding its port to the receiver"
    table = pq.read_table(out / "port_counters.parquet").to_pylist()
    assert [{k: str(v) for k, v in r.items()} for r in table] == got_rows
    print(f"\nport_counters: {at_nics} CE set at leaf0's ports to NICs, "
          f"{sum(v[5] for v in want.values())} PFC frames sent ({to_spines} to spines)")


def test_merged_views_hold_the_pauses(runs, tmp_path):
    """The merged pcapng (one interface per NIC) holds every PAUSE of leaf0's NIC port files on
    that NIC's interface at the same time; the classic merged pcap holds each once, as the leaf
    sends it (one link latency before the NIC's timestamp); both pass the wire validator (the
    pcapng's PAUSEs in the no-overlap rule of their NIC's link)."""
    from wire_check import read_records
    want = defaultdict(list)
    for f in sorted((runs[20_000] / "pcap").glob("leaf0-node*")):
        want[f.stem[len("leaf0-"):]] = [(t, q) for t, _, q, _ in pauses(f)]
    assert sum(map(len, want.values())) > 10
    for fmt in ("pcapng", "pcap"):
        out = _run(tmp_path / fmt, 20_000, "merge: true", fmt)
        files = sorted((out / "pcap").glob("*"))
        assert len(files) == 1, files
        ifaces, recs, bad = read_records(files[0])
        assert not bad
        got = defaultdict(list)
        for i, t, orig, fr in recs:
            if fr[12:14] == b"\x88\x08":
                got[ifaces[i].name if fmt == "pcapng" else "all"].append((t, int.from_bytes(fr[24:26], "big")))
        if fmt == "pcapng":
            assert {k: v for k, v in got.items() if k in want} == {k: v for k, v in want.items() if v}
        else:
            assert sorted(got["all"]) == sorted((t - LAT, q) for v in want.values() for t, q in v)
        stats = Stats()                   # classic pcap: no if_speed; every NIC port of the preset is 400G
        bad = check_wire(out, port_rate_gbps=None if fmt == "pcapng" else 400, stats=stats)
        assert not bad, bad[:5]
        n = sum(map(len, want.values()))
        # pcapng: each PAUSE judged in its slot on its NIC's interface; classic: the leaf's
        # PAUSEs to several NICs share its MAC, their link is not named - left out of [overlap]
        assert stats["pfc"] == n and stats["pfc_unattributed"] == (0 if fmt == "pcapng" else n), stats


def test_spine_ports_towards_the_leaf_mark_by_their_queue(tmp_path):
    """The same incast in spine0's switch view: spine0's port towards leaf0 (where two leaves'
    uplinks meet) marks by its own replayed queue (no CE set there at or below Kmin, every data
    packet above Kmax CE) - a switch-to-switch egress port like the leaf's uplinks; spine0's PFC
    frames judged from its captures (queue_replay.judge_pauses) and counted in port_counters (sent
    and received, by source MAC)."""
    kmin = 20_000
    out = _run(tmp_path / "spine", kmin, "switch: spine0")
    rows, mac = replay(out, leaf="spine0", lat=LAT)
    data = [r for r in rows if r[R.FILE] == "spine0-leaf0" and r[R.DATA]]
    here = [r for r in data if r[R.CE] and not r[R.CE_UP]]
    assert len(data) > 500 and len(here) > 10, (len(data), len(here))
    assert max(r[R.QUEUE] for r in data) > kmin
    assert not [r for r in here if r[R.QUEUE] <= kmin]
    assert not [r for r in data if r[R.QUEUE] > KMAX and not r[R.CE]]
    # PFC between switches, from spine0's captures: spine0's PAUSEs to the leaf uplinks feeding its
    # port to leaf0 only above Xoff (the cascade), leaf0's PAUSEs to spine0 hold spine0's port
    n, _, _, kinds = judge_pauses(out, rows, mac, LAT, _rates(out), XOFF, XOFF - RESUME, leaf="spine0")
    assert n > 0 and kinds["pause_rx"] > 0, kinds
    # port_counters of spine0's view equal its captures' recount, PFC frames sent and received included
    want = _recount(out, "spine0", rows, mac)
    assert _counters(out)[1] == want
    assert sum(v[6] for v in want.values()) > 0 and sum(v[4] for v in want.values()) > 0
    print(f"\nspine0 -> leaf0: {len(data)} data frames, {len(here)} CE set there, "
          f"max queue {max(r[R.QUEUE] for r in data)} B; spine0's PFC frames {dict(kinds)}")
