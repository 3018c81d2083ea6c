"""DCQCN as `tracegen ns3 run` models it: NVIDIA's documented ConnectX defaults, the reaction
point's arithmetic in closed form, and what persists per QP.

Oracles: the constants are NVIDIA's published defaults (DOCA "DCQCN CC Parameters" page, and
`mlxconfig -d <dev> q` on ConnectX-5/-6 firmware: DCE_TCP_G 1019, DCE_TCP_RTT 1,
RATE_REDUCE_MONITOR_PERIOD 4, RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1,
RPG_AI_RATE 5, RPG_HAI_RATE 50, RPG_MIN_RATE 1, RPG_GD 11, INITIAL_ALPHA_VALUE 1023,
MIN_TIME_BETWEEN_CNPS 4), read here from config.txt with the HPCC-reader of test_ns3_export;
the rates are the DCQCN equations (Zhu et al., SIGCOMM 2015; HPCC's rdma-hw.cc) worked by hand;
a lone flow's completion time is the store-and-forward sum over its packets.
"""
from __future__ import annotations

import json
import tempfile
import shutil
from pathlib import Path

import pytest

from test_ns3_export import make_flows, make_ops, read_hpcc_config
from test_ns3_run import OVERSUBSCRIBED, load_ns3_or_skip, make_trace, read_csv
from tracegen.config import job_from_dict
from tracegen.emit.sims.ns3 import write_ns3
from tracegen.tables import CollKind, Dim, LinkKind
from tracegen.fabric.topology import build_fabric

LINE = 400e9
G = 1 - 1019 / 1024               # dce_tcp_g = 1019: alpha = (1019/1024) alpha (+ 5/1024)
AI, HAI, MIN = 5e6, 50e6, 1e6     # rpg_ai_rate, rpg_hai_rate, rpg_min_rate (Mb/s)
US = 1_000_000                    # ps


@pytest.fixture(scope="module")
def tg():
    load_ns3_or_skip()
    import cppyy
    return cppyy.gbl.tracegen


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="tg-dcqcn-"))
    assert "test" not in str(d)       # pip ns3 drops libraries from paths containing "test"
    yield d
    shutil.rmtree(d, ignore_errors=True)


def nvidia(tg, byte_reset=32767):
    d = tg.Dcqcn()
    d.enabled = True
    d.g, d.alphaIntervalPs, d.decreaseIntervalPs, d.increaseIntervalPs = G, US, 4 * US, 300 * US
    d.byteReset, d.aiBps, d.haiBps, d.minBps, d.fastRecoverySteps = byte_reset, AI, HAI, MIN, 1
    return d


def test_the_export_carries_nvidias_defaults(tmp_path):
    """config.txt (HPCC's keys) and manifest sim.dcqcn hold the ConnectX defaults of a job that
    sets nothing."""
    job = job_from_dict({})
    fabric = build_fabric(job)
    d = tmp_path / "scn"
    write_ns3(make_flows(fabric, [(0, LinkKind.NET, 0, 2, 1 << 20, 0, [])]), fabric, job, d)
    cfg = read_hpcc_config((d / "config.txt").read_text())
    assert cfg["CC_MODE"] == 1 and cfg["EWMA_GAIN"] == G
    assert (cfg["RATE_AI"], cfg["RATE_HAI"], cfg["MIN_RATE"]) == ("5Mb/s", "50Mb/s", "1Mb/s")
    assert (cfg["ALPHA_RESUME_INTERVAL"], cfg["RATE_DECREASE_INTERVAL"], cfg["RP_TIMER"]) == (1, 4, 300)
    assert cfg["FAST_RECOVERY_TIMES"] == 1 and cfg["CLAMP_TARGET_RATE"] == 0
    sim = json.loads((d / "manifest.json").read_text())["sim"]
    assert sim["dcqcn"]["byte_reset_bytes"] == 32767 and sim["dcqcn"]["per_message_reset"] is False
    assert sim["cnp_interval_ns"] == 4000


def test_reaction_point_closed_forms(tg):
    """One QP at 400 Gb/s: a CNP at t=0 cuts at the decrease tick 4 us + 1 ns later by alpha/2,
    alpha having decayed 4 ticks from 1; byte-counter events every 32,767 bytes move the rate
    halfway to the target (fast recovery, then additive increase); a second CNP after an increase
    clamps the target to the rate before cutting again."""
    D, rp = nvidia(tg), tg.DcqcnRp()
    rp.Reset(LINE)
    assert rp.rateBps == rp.targetBps == LINE and not rp.cut
    assert rp.OnCnp(D, 0) == 4 * US + 1000
    assert rp.Decrease(D, 4 * US + 1000)
    a1 = (1 - G) ** 4
    r1 = LINE * (1 - a1 / 2)
    assert rp.alpha == pytest.approx(a1, rel=1e-12) and rp.rateBps == pytest.approx(r1, rel=1e-12)
    assert rp.targetBps == LINE                     # no increase since the first CNP: no clamp
    assert not rp.OnSent(D, LINE, 32766) and rp.OnSent(D, LINE, 1)      # fast recovery
    r2 = (r1 + LINE) / 2
    assert rp.rateBps == pytest.approx(r2, rel=1e-12) and rp.targetBps == LINE
    assert rp.OnSent(D, LINE, 32767)                # additive: target capped at line rate
    r3 = (r2 + LINE) / 2
    assert rp.rateBps == pytest.approx(r3, rel=1e-12) and rp.targetBps == LINE
    # a CNP at 10 us: the next tick is 12 us + 1 ns; alpha decays to 10 us, then the CNP counts
    assert rp.OnCnp(D, 10 * US) == 12 * US + 1000
    assert rp.Decrease(D, 12 * US + 1000)
    a2 = ((1 - G) * (1 - G) ** 10 + G) * (1 - G)
    assert rp.alpha == pytest.approx(a2, rel=1e-12)
    assert rp.targetBps == pytest.approx(r3, rel=1e-12)            # clamped: it had increased
    assert rp.rateBps == pytest.approx(r3 * (1 - a2 / 2), rel=1e-12)
    assert not rp.Decrease(D, 16 * US + 1000)       # no CNP in that period: no cut
    # the floor: cuts never go below rpg_min_rate
    for k in range(60):
        at = rp.OnCnp(D, (20 + 4 * k) * US)
        rp.Decrease(D, at)
    assert rp.rateBps == MIN


def test_timer_only_is_hppcs_single_counter(tg):
    """Without the byte counter (HPCC's model) the RP timer's events go fast recovery, additive
    (+AI), then hyper increase (+HAI) - FAST_RECOVERY_TIMES 1 - each time halfway to the
    target."""
    D, rp = nvidia(tg, byte_reset=0), tg.DcqcnRp()
    rp.Reset(LINE)
    rp.OnCnp(D, 0)
    rp.Decrease(D, 4 * US + 1000)
    assert not rp.OnSent(D, LINE, 10**9)            # no byte counter
    r, t = rp.rateBps, rp.targetBps
    rp.OnCnp(D, 5 * US)
    rp.Decrease(D, 8 * US + 1000)                   # consecutive cuts: no clamp, target stays
    assert rp.targetBps == t == LINE
    r = rp.rateBps
    rp.targetBps = t = 100e9                        # a target below line rate, to see AI / HAI
    steps = []
    for _ in range(3):
        rp.Increase(D, LINE, True)
        steps.append((rp.rateBps, rp.targetBps))
    r1 = (r + t) / 2
    r2 = (r1 + t + AI) / 2
    r3 = (r2 + t + AI + HAI) / 2
    assert steps == [pytest.approx((r1, t)), pytest.approx((r2, t + AI)),
                     pytest.approx((r3, t + AI + HAI))]


def lone(root: Path, senders, nbytes=1 << 20):
    job = job_from_dict({"parallelism": {"dp": 4, "tp": 1, "pp": 1, "global_batch": 4},
                         "cluster": {"gpus_per_node": 1, "nodes_per_leaf": 4}}, name="pair")
    fabric = build_fabric(job)
    specs = [(0, LinkKind.NET, s, 0, nbytes, 0, []) for s in senders]
    write_ns3(make_flows(fabric, specs, make_ops([(CollKind.ALLTOALL, Dim.EP)])), fabric, job,
              root / "ns3")
    return root


def test_a_lone_flow_keeps_line_rate(workdir):
    """Alone on its path a message never meets a queue: no CE mark, no CNP, no cut, and it
    completes exactly when its last packet arrives - the store-and-forward sum over its packets
    (frames back to back on the NIC link at 400 Gb/s, the last one once more on the leaf's)."""
    from ns3_scenarios import run_scenario
    load_ns3_or_skip()
    root = lone(workdir / "lone", [1])
    s = run_scenario(root, dcqcn=True)
    assert s["ce_packets"] == s["cnps_sent"] == s["dcqcn_rate_cuts"] == 0
    f = read_csv(root / "ns3/sim/flows.csv")[0]
    n, size = -(-(1 << 20) // 4096), 1 << 20
    # per packet: BTH 12 + payload + ICRC 4 + UDP 8 + IPv4 20 (+ RETH 16 first, ImmDt 4 last),
    # on the wire + 14 MAC + 4 VLAN + 4 FCS + 8 preamble + 12 IFG
    ip = [20 + 8 + 12 + min(4096, size - 4096 * k) + 4 + 16 * (k == 0) + 4 * (k == n - 1)
          for k in range(n)]
    ps = lambda b: b * 8e12 / LINE
    links = (root / "ns3/topology.txt").read_text().split("\n")[2:]
    delays = {ln.split()[3] for ln in links if ln}
    assert delays == {"1000ns"}
    delay_ps = 1000 * 1000
    expect = sum(ps(b + 42) for b in ip) - ps(40) + ps(ip[-1] + 2) + 2 * delay_ps
    assert abs(int(f["fct_ns"]) * 1000 - expect) <= 2000 + n, (f["fct_ns"], expect / 1000)


def test_rate_state_outlives_a_message_unless_reset_per_message(workdir):
    """Host 1 and host 2 each write 2 MiB to host 0 at once (one port, congested: CNPs cut both
    QPs); then host 1 writes 1 MiB more on the same QP, alone. With state per QP (ConnectX) that
    message starts at the rate the cuts left and takes far longer than alone on its path; with
    state per message (HPCC, SimAI) it starts at line rate and completes in exactly its
    standalone time."""
    from ns3_scenarios import run_scenario
    load_ns3_or_skip()
    job = job_from_dict({"parallelism": {"dp": 4, "tp": 1, "pp": 1, "global_batch": 4},
                         "cluster": {"gpus_per_node": 1, "nodes_per_leaf": 4}}, name="again")
    fabric = build_fabric(job)
    # transfers 0 and 2 share (ranks, op, channel = id % 2): one connection, one QP
    specs = [(0, LinkKind.NET, 1, 0, 2 << 20, 0, []), (0, LinkKind.NET, 2, 0, 2 << 20, 0, []),
             (0, LinkKind.NET, 1, 0, 1 << 20, 0, [0, 1])]
    root = workdir / "again"
    write_ns3(make_flows(fabric, specs, make_ops([(CollKind.ALLTOALL, Dim.EP)])), fabric, job,
              root / "ns3")
    man = json.loads((root / "ns3/manifest.json").read_text())
    assert man["flows"][0]["qp"] == man["flows"][2]["qp"] != man["flows"][1]["qp"]
    out = {}
    for state in ("qp", "message"):
        s = run_scenario(root, dcqcn=True, dcqcn_state=state)
        assert s["completed"] == 3 and s["dcqcn_rate_cuts"] > 0
        out[state] = read_csv(root / "ns3/sim/flows.csv")
    first, again = out["message"][0], out["message"][2]
    assert int(first["cnps_heeded"]) > 0
    assert int(again["start_ns"]) >= int(out["message"][1]["end_ns"])      # alone by then
    assert int(again["fct_ns"]) == int(again["standalone_fct_ns"])
    again = out["qp"][2]
    assert int(again["fct_ns"]) > 1.5 * int(again["standalone_fct_ns"]), again


def test_per_message_reset_matches_no_dcqcn_on_the_4to1_job(workdir):
    """The 4:1 job: with DCQCN state per message the iteration is the no-DCQCN one within 1 %
    (the CNPs mostly arrive after their message's last packet and are not heeded), as HPCC's
    DCQCN changes nothing on these files."""
    from ns3_scenarios import run_scenario
    load_ns3_or_skip()
    root = workdir / "over"
    root.mkdir()
    make_trace(root, OVERSUBSCRIBED)
    off = run_scenario(root, dcqcn=False)
    msg = run_scenario(root, dcqcn=True, dcqcn_state="message")
    assert msg["options"]["dcqcn_state"] == "message" and msg["dcqcn_rate_cuts"] > 0
    assert abs(msg["sim_iteration_ns"] / off["sim_iteration_ns"] - 1) <= 0.01
    assert msg["cnps_ignored"] > 0
