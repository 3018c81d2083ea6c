"""Switch views and queue-mode marks of a scenario whose links change mid-run (issue 23): every
frame on the route and at the rate of its epoch (emit/packets/epoch_paths.py).

Judges share no code with tracegen.emit: the captures are read with wire_check's stdlib reader
and parsed here; the epochs come from the scenario YAML (its event times) and, for the routes,
from the fabric's own timeline (fabric.timeline.epoch_routes: the routes the fluid engine moved
its flows with); queue_replay.py replays leaf0's egress queues from the captures alone.

The scenario: tests/test_scenario_timed_events.py's 1:1 leaf-spine (8 ranks alternating between
two leaves of 4 nodes, 4 spines, qp hash: every ring hop crosses a spine), with leaf0-spine1
flapping (down [200, 400) µs and [700, 900) µs) and leaf0-spine2 degraded 400 -> 100 Gb/s at
300 µs; leaf0's switch view (one file per port: its 4 NICs, its 4 uplinks), queue-mode marks.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from queue_replay import Row, replay  # noqa: E402
from wire_check import check_capture, read_records, tags  # noqa: E402

from tracegen.cli import main  # noqa: E402

LAT = 1000
KMIN = 5000
DOWN = [(200_000, 400_000), (700_000, 900_000)]      # leaf0-spine1's flap: down intervals
DEGRADE_NS, SLOW_GBPS, FAST_GBPS = 300_000, 100, 400
JOB = f"""model: tiny
parallelism: {{dp: 8, tp: 1, pp: 1, micro_batch: 1, global_batch: 8}}
cluster: {{gpus_per_node: 1, nics_per_node: 1}}
fabric: {{kind: leaf-spine, nodes_per_leaf: 4, spines: 4, ecmp_hash: qp, link_latency_ns: {LAT}}}
nccl: {{algorithm: ring, qps_per_connection: 4}}
detail: full
output: {{switch: %(switch)s, ecn_marking: queue, vlan: true, format: pcapng, pictures: false, perfetto: false,
         tables: csv}}
network: {{kmin_bytes: {KMIN}, kmax_bytes: 200000, pmax: 0.2, pfc: false}}
"""
SCENARIO = f"""placement: explicit
jobs: [{{job: j.yaml, nodes: [0, 4, 1, 5, 2, 6, 3, 7]}}]
ecmp_on_failure: %(ecmp)s
events:
  - {{type: flap, link: leaf0-spine1, at_ns: 200000, down_ns: 200000, up_ns: 300000, count: 2}}
  - {{type: degrade, link: leaf0-spine2, gbps: {SLOW_GBPS}, at_ns: {DEGRADE_NS}}}
"""
FCS_PREAMBLE_IFG = 4 + 8 + 12


def _generate(base: Path, ecmp: str = "rehash", switch: str = "leaf0") -> Path:
    base.mkdir(parents=True, exist_ok=True)
    (base / "j.yaml").write_text(JOB % {"switch": switch})
    (base / "s.yaml").write_text(SCENARIO % {"ecmp": ecmp})
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--scenario", str(base / "s.yaml"),
                                    "-o", str(base / "out")])
    assert res.exit_code == 0, res.output
    return base / "out"


@pytest.fixture(scope="module")
def rehash(tmp_path_factory):
    return _generate(tmp_path_factory.mktemp("rehash"))


def _frames(path: Path):
    """Per frame: time, orig length, source MAC, and for a RoCEv2 frame (802.1Q, IPv4) its IP
    source and destination (ints), UDP source port, opcode, DestQP; else None for those."""
    _, recs, bad = read_records(path)
    assert not bad, bad
    out = []
    for _, t, orig, fr in recs:
        rocev2 = len(fr) > 60 and fr[12:14] == b"\x81\x00" and fr[16:18] == b"\x08\x00"
        udp = 18 + (fr[18] & 0x0F) * 4 if rocev2 else 0
        if rocev2 and fr[27] == 17 and struct.unpack_from(">H", fr, udp + 2)[0] == 4791:
            ips, ipd = struct.unpack_from(">II", fr, 30)
            sport = struct.unpack_from(">H", fr, udp)[0]
            out.append((t, orig, fr[6:12], ips, ipd, sport, fr[udp + 8], int.from_bytes(fr[udp + 13:udp + 16], "big")))
        else:
            out.append((t, orig, fr[6:12], None, None, None, None, None))
    return out


def _frames_dst(path: Path):
    """_frames with each frame's destination MAC appended."""
    _, recs, _ = read_records(path)
    return [f + (fr[0:6],) for f, (_, _, _, fr) in zip(_frames(path), recs)]


def _frames_psn(path: Path):
    """_frames with each RoCE frame's PSN appended (None otherwise)."""
    _, recs, _ = read_records(path)
    out = []
    for f, (_, _, _, fr) in zip(_frames(path), recs):
        psn = None
        if f[3] is not None:
            bth = 18 + (fr[18] & 0x0F) * 4 + 8
            psn = int.from_bytes(fr[bth + 9:bth + 12], "big")
        out.append(f + (psn,))
    return out


def test_a_flapping_link_carries_no_frame_while_down_and_flows_move_back(rehash):
    t = np.array([f[0] for f in _frames(rehash / "pcap" / "leaf0-spine1.pcapng")])
    for a, b in DOWN:
        assert not ((t >= a) & (t < b)).any(), f"frames on leaf0-spine1 while down [{a}, {b})"
    between, after = ((t >= 400_000) & (t < 700_000)).sum(), (t >= 900_000).sum()
    assert (t < 200_000).sum() > 100 and between > 100 and after > 100, (between, after)   # rehash: back
    others = [np.array([f[0] for f in _frames(rehash / "pcap" / f"leaf0-spine{s}.pcapng")]) for s in (0, 2, 3)]
    for a, b in DOWN:          # the flows moved to the other spines meanwhile
        assert sum(((o >= a) & (o < b)).sum() for o in others) > 1000
    # each uplink file's frames carry the MACs of its two ends (fabric/topology.py's router MAC plan:
    # leaf 02:4c:00:00:00:<i>, spine 02:53:00:00:00:<i>): the spine the frame really crossed
    leaf = bytes.fromhex("024c00000000")
    for s in range(4):
        spine = bytes.fromhex(f"0253000000{s:02x}")
        pairs = {(f[2], f[8]) for f in _frames_dst(rehash / "pcap" / f"leaf0-spine{s}.pcapng")}
        assert pairs == {(leaf, spine), (spine, leaf)}, (s, pairs)
    print(f"\nleaf0-spine1: {len(t)} frames, none in {DOWN}; {between} between the downs, {after} after")


def test_resilient_flows_stay_where_they_moved(tmp_path):
    """Resilient hashing: a returning member gets no busy flow back (fabric/timeline.epoch_routes):
    after its first down, leaf0-spine1 carries nothing."""
    out = _generate(tmp_path / "res", ecmp="resilient")
    t = np.array([f[0] for f in _frames(out / "pcap" / "leaf0-spine1.pcapng")])
    assert (t < DOWN[0][0]).sum() > 100 and not (t >= DOWN[0][0]).any(), t[t >= DOWN[0][0]][:5]


def test_a_degraded_link_spaces_its_frames_at_the_new_rate(rehash):
    """leaf0-spine2 at 100 Gb/s from 300 µs: consecutive frames of one direction at least the
    100G serialisation of the first apart after the instant; before it 400G back to back."""
    fr = _frames(rehash / "pcap" / "leaf0-spine2.pcapng")
    t = np.array([f[0] for f in fr])
    orig = np.array([f[1] for f in fr])
    src = np.array([f[2] == fr[0][2] for f in fr])
    slowest_before = 0.0
    for side in (src, ~src):
        ts, ln = t[side], orig[side]
        gap = np.diff(ts)
        bits = (ln[:-1] + FCS_PREAMBLE_IFG) * 8
        after = ts[:-1] >= DEGRADE_NS
        assert after.sum() > 100 and (~after).sum() > 100
        assert (gap[after] >= np.floor(bits[after] / SLOW_GBPS)).all(), "faster than 100G after the instant"
        assert (gap[~after] >= np.floor(bits[~after] / FAST_GBPS)).all()
        tight = gap[~after] < bits[~after] / SLOW_GBPS           # closer than 100G allows: 400G then
        assert tight.mean() > 0.5, tight.mean()
        slowest_before = max(slowest_before, tight.mean())
    print(f"\nleaf0-spine2: before {DEGRADE_NS} ns {slowest_before:.0%} of the gaps under the 100G spacing; "
          "after it none")


def test_frames_cross_the_links_of_their_epoch_route(rehash):
    """Every RoCE frame leaf0's NICs send up an uplink is on a link of its QP's route (the fluid
    engine's: the fabric timeline's routes of its 5-tuple) in the epoch its message started in
    at the NIC (its First/Only packet in the NIC's file; a control frame: its own send time) - or,
    a message that would have crossed a link while down, of a later epoch (up to SLACK_NS after its
    last packet left the NIC: the time its frames may queue on the way).
    (CNPs all carry PSN 0: their copies up the uplinks cannot be told apart, they are left out.)"""
    from tracegen.fabric.timeline import epoch_routes
    from tracegen.scenario.run import prepare
    from tracegen.scenario.spec import load_scenario
    SLACK_NS = 100_000          # this fabric's hash collisions queue MBs at leaf0's uplinks (~80 µs)
    _, fabric = prepare(load_scenario(rehash.parent / "s.yaml"))
    starts = np.array([0] + [e.at_ns for e in fabric.epochs])
    nic_of = {int(ip): k for k, ip in enumerate(fabric.nic_ip)}
    first_ops = {6, 10, 11}                 # RDMA WRITE First, Only, Only with immediate
    sent = {}                               # (ips, ipd, dqp, psn, opcode) -> its message's start at the NIC
    names = {fabric.nic_name(k): k for k in range(len(fabric.nic_ip))}
    for f in sorted((rehash / "pcap").glob("leaf0-node*.pcapng")):
        me = names[f.stem.removeprefix("leaf0-")]
        start = {}
        for t, _, _, ips, ipd, _, op, dqp, psn in _frames_psn(f):
            if ips is None or nic_of[ips] != me or op == 0x81:
                continue                    # received by the NIC; CNPs (all PSN 0: not told apart)
            if op > 11:                     # an ACK: alone (in the data's QP direction for a CTS's)
                sent[ips, ipd, dqp, psn, op] = [t, t]
                continue
            if op in first_ops:             # a message's first packet
                start[ips, ipd, dqp] = [t, t]
            start[ips, ipd, dqp][1] = t     # ... and its last so far (the list is shared)
            sent[ips, ipd, dqp, psn, op] = start[ips, ipd, dqp]
    leaf0 = fabric.node_id(fabric.switch_id("leaf0"))
    L = fabric.links
    n, n_exact = 0, 0
    for s in range(4):
        sp = fabric.node_id(fabric.switch_id(f"spine{s}"))
        (link,) = np.flatnonzero(((L["a"] == leaf0) & (L["b"] == sp)) | ((L["a"] == sp) & (L["b"] == leaf0)))
        up = [x for x in _frames_psn(rehash / "pcap" / f"leaf0-spine{s}.pcapng")
              if x[3] is not None and (x[3], x[4], x[7], x[8], x[6]) in sent]
        t = np.array([x[0] for x in up])
        t0 = np.array([sent[x[3], x[4], x[7], x[8], x[6]][0] for x in up])
        t_end = np.array([sent[x[3], x[4], x[7], x[8], x[6]][1] for x in up])
        src = np.array([nic_of[x[3]] for x in up])
        dst = np.array([nic_of[x[4]] for x in up])
        on = np.stack([((r >> 1) == link).any(axis=1) for r in epoch_routes(
            fabric, src, dst, np.array([x[5] for x in up]), np.zeros_like(src), 4,
            dest_qpn=np.array([x[7] for x in up]))])                             # [epochs, frames]
        e0 = np.searchsorted(starts, t0, "right") - 1
        e1 = np.searchsorted(starts, np.maximum(t, t_end + SLACK_NS), "right") - 1
        exact = on[e0, np.arange(len(t))]
        later = np.array([on[a:b + 1, k].any() for k, (a, b) in enumerate(zip(e0, e1))])
        bad = [(up[k][0], e0[k], e1[k]) for k in np.flatnonzero(~later)[:5]]
        assert len(t) > 1000 and later.all(), f"spine{s}: {int((~later).sum())} frames off their route: {bad}"
        n, n_exact = n + len(t), n_exact + int(exact.sum())
    # measured: 92 % (1 MB messages paced over ~100 µs: those on the wire at one of the five
    # instants keep their route, or move whole to the next epoch's)
    assert n_exact >= 0.85 * n, (n_exact, n)
    print(f"\nleaf0's NICs up its uplinks: {n} RoCE frames, {n_exact} on the route of the epoch their message "
          f"started in, {n - n_exact} of messages on the wire across an instant")


def test_queue_marks_follow_the_replayed_queues(rehash):
    rows, _ = replay(rehash, leaf="leaf0", lat=LAT)
    data = [r for r in rows if r[Row.DATA]]
    here = [r for r in data if r[Row.CE] and not r[Row.CE_UP]]
    assert len(data) > 10_000 and len(here) > 100, (len(data), len(here))
    assert not [r for r in here if r[Row.QUEUE] <= KMIN]
    print(f"\nleaf0: {len(data)} data frames, {len(here)} CE set at leaf0, none at or below Kmin")


def test_captures_are_clean(rehash):
    """wire_check: NIC files hold every frame of their QPs (complete); an uplink file holds the
    messages its QPs' routes put on it in each epoch (a QP's messages change links at a rehash),
    so its PSNs only go forward, and the rules that need a QP's whole stream (ACK, CTS, CNP
    pairing) are judged on the NIC files."""
    bad = []
    for f in sorted((rehash / "pcap").glob("*.pcapng")):
        nic = "-node" in f.name
        v = check_capture(f, None, complete=nic)
        bad += [x for x in v if nic or tags([x]).keys().isdisjoint({"[ack]", "[cts]", "[cnp]"})]
    assert not bad, f"{len(bad)} violations {dict(tags(bad))}: " + "\n".join(bad[:10])
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed")
    for f in sorted((rehash / "pcap").glob("*")):
        res = subprocess.run(["tshark", "-n", "-r", str(f), "-Y", "_ws.malformed", "-T", "fields", "-e",
                              "frame.number"], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and not res.stdout.split(), (f.name, res.stdout[:200], res.stderr[-300:])


# The two commands tests/bad_configs/commands refused before (a switch view, queue marks of a
# fabric that changes mid-run): now written, the same bytes twice (queue marks without PFC: with
# it the pass holds t=0 rates - bad_configs/commands/scenario-timed-queue-marks-pfc.yaml).
SMALL_JOB = ("model: tiny\nparallelism: {dp: 2, tp: 1, pp: 1, micro_batch: 1, global_batch: 2}\n"
             "cluster: {gpus_per_node: 1, nics_per_node: 1}\nfabric: {kind: leaf-spine, nodes_per_leaf: 1, spines: 2}\n")
SMALL = {"switch-view": ("events: [{type: down, switch: spine1, at_ns: 5000}]\n", "output: {switch: spine0}\n"),
         "queue-marks": ("events: [{type: degrade, link: leaf0-spine0, gbps: 100, at_ns: 5000}]\n",
                         "output: {ecn_marking: queue}\nnetwork: {pfc: false}\n")}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_formerly_refused_views_are_written_the_same_twice(tmp_path, case):
    events, output = SMALL[case]
    (tmp_path / "j.yaml").write_text(SMALL_JOB + output)
    (tmp_path / "s.yaml").write_text("jobs: [{job: j.yaml, name: a}, {job: j.yaml, name: b}]\n" + events)
    outs = []
    for k in range(2):
        res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--scenario", str(tmp_path / "s.yaml"),
                                        "-o", str(tmp_path / f"out{k}")])
        assert res.exit_code == 0, res.output
        outs.append({p.name: p.read_bytes() for p in sorted((tmp_path / f"out{k}" / "pcap").iterdir())})
    assert outs[0] == outs[1] and outs[0]
    if case == "switch-view":      # spine1 down from 5 µs: spine0 carries every frame after it
        t = np.array([f[0] for name, _ in outs[0].items() for f in _frames(tmp_path / "out0" / "pcap" / name)])
        assert (t > 5000).sum() > 100
    bad = []
    for name in outs[0]:
        v = check_capture(tmp_path / "out0" / "pcap" / name, 400, complete="spine" not in name)
        bad += [x for x in v if "spine" not in name or tags([x]).keys().isdisjoint({"[ack]", "[cts]", "[cnp]"})]
    assert not bad, bad[:5]


def test_frames_left_on_a_down_link_are_told(tmp_path, monkeypatch):
    """With one re-routing round only, frames stay on leaf0-spine1 while it is down: the run
    warns with their count, which covers what the link's own capture shows inside the down
    intervals (an own parser; the count is by whole segments, so at most a few more)."""
    import re
    import tracegen.emit.packets.epoch_paths as epoch_paths
    monkeypatch.setattr(epoch_paths, "MOVE_ROUNDS", 1)
    (tmp_path / "j.yaml").write_text(JOB % {"switch": "leaf0"})
    (tmp_path / "s.yaml").write_text(SCENARIO % {"ecmp": "rehash"})
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--scenario", str(tmp_path / "s.yaml"),
                                    "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    said = re.findall(r"warning: pcaps: ([\d,]+) frames drawn on a link while it is down", res.output)
    t = np.array([f[0] for f in _frames(tmp_path / "out" / "pcap" / "leaf0-spine1.pcapng")])
    seen = int(sum(((t >= a) & (t < b)).sum() for a, b in DOWN))
    assert seen > 0 and len(said) == 1
    assert seen <= int(said[0].replace(",", "")) <= 1.05 * seen, (said, seen)
