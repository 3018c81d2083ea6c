"""ACKs never leave before what they acknowledge has arrived, even where schedule.schedule's
FIX_ROUNDS do not settle (the 16k placed view left ~2,500 [ack] violations): Mixtral 8x7B's expert
AllToAll, timed per connection and placed on two NICs, still has ~10k late ACKs and ~7.6k late
CTSs after FIX_ROUNDS; the ACK-only rounds that follow settle the ACKs. Judged from the schedule's
own arrival times, not from the fix rounds' bookkeeping."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import tracegen.emit.packets.cnps as cnps
import tracegen.emit.packets.pacing as pacing
import tracegen.emit.packets.queue_rounds as queue_rounds
import tracegen.emit.packets.schedule as schedule_mod
from tracegen.cli import main
from tracegen.emit.packets.plan import ACK_CTS, ACK_DATA, CTS

ARGS = ["generate", "-q", "--no-ns3", "--preset", "mixtral-8x7b", "--detail", "conn", "--nics", "0,8",
        "--iteration", "0", "--payload", "none", "--time-window", "900000:910000"]


def _plans(monkeypatch, tmp_path, ack_rounds=None, said=None):
    plans, schedule = [], schedule_mod.schedule

    def keep(p):
        schedule(p)
        plans.append(p)
    for mod in (pacing, cnps, queue_rounds):     # every caller of schedule()
        monkeypatch.setattr(mod, "schedule", keep)
    if ack_rounds is not None:
        monkeypatch.setattr(schedule_mod, "ACK_ROUNDS", ack_rounds)
    r = CliRunner().invoke(main, ARGS + ["-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    if said is not None:
        said.append(r.output)
    assert plans
    return plans


def _early_acks(p) -> int:
    """ACKs sent before the CTS or data packet they answer has arrived whole at their NIC."""
    C = len(p.cts_msg)
    n_ack = len(p.k_kind) - C
    assert (p.k_kind[:C] == ACK_CTS).all() and (p.k_kind[C:n_ack] == ACK_DATA).all()
    bad = int((p.k_tx_ns[:C] < p.k_rx_ns[n_ack:] + p.k_wire_ns[n_ack:]).sum())
    m, j = p.k_msg[C:n_ack], p.k_pkt[C:n_ack]
    # the received segment holding packet j of message m: the last one of m starting at or before j
    rx = p.rx
    o = np.lexsort((rx.ka, rx.msg))
    s = o[np.searchsorted(rx.msg[o] * (1 << 32) + rx.ka[o], m * (1 << 32) + j, "right") - 1]
    assert (rx.msg[s] == m).all() and (rx.ka[s] <= j).all() and (j < rx.kb[s]).all()
    end = rx.t[s] + p.offset(m, j) - p.offset(m, rx.ka[s]) + p.wire.span(p.m_npk[m], m, j, j + 1)
    bad += int((p.k_tx_ns[C:n_ack] < end).sum())
    return bad


def test_no_ack_leaves_before_what_it_answers(monkeypatch, tmp_path):
    p = max(_plans(monkeypatch, tmp_path), key=lambda p: len(p.k_kind))
    assert p.late_acks == 0
    assert _early_acks(p) == 0


def test_without_the_ack_rounds_acks_are_early(monkeypatch, tmp_path):
    """The judge can fail: the schedule as it was (FIX_ROUNDS only) leaves early ACKs."""
    p = max(_plans(monkeypatch, tmp_path, ack_rounds=0), key=lambda p: len(p.k_kind))
    assert p.late_acks > 0
    assert _early_acks(p) > 0


def test_the_user_is_told_how_many_frames_are_late(monkeypatch, tmp_path):
    """summary.json's causality counts what the schedule left late - here, without the ACK-only
    rounds, exactly the early ACKs the judge above finds from the arrival times - and the run
    says so in one note."""
    import json
    said = []
    p = max(_plans(monkeypatch, tmp_path, ack_rounds=0, said=said), key=lambda p: len(p.k_kind))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    c = summary["causality"]
    assert c["late_acks"] == _early_acks(p) > 0
    assert c["late_frames"] == c["late_acks"] + c["late_messages"] + c["late_cts"]
    warned = [ln for ln in said[0].splitlines() if "stamped before what they wait for" in ln]
    assert len(warned) == 1 and f"{c['late_acks']:,} ACKs" in warned[0]


def _early_messages(p) -> int:
    """Messages whose first packet leaves before the CTS granting them has arrived whole at the
    sender (the wire's [cts] order), from the schedule's own times."""
    cts = np.flatnonzero(p.k_kind == CTS)
    m = p.k_msg[cts]
    tx = p.tx
    first = (tx.ka == 0)
    start = np.full(p.n_msgs, -1, np.int64)
    start[tx.msg[first]] = tx.t[first]
    assert (start[m] >= 0).all()
    return int((start[m] < p.k_rx_ns[cts] + p.k_wire_ns[cts]).sum())


def test_no_message_leaves_before_its_cts_when_the_fix_rounds_run_out(monkeypatch, tmp_path):
    """With no fixed-point rounds at all Mixtral's placed view has messages ahead of their CTS
    (2 when only ACKs are moved); the rounds that follow move such messages (CTSs keep their
    times) until none is: 0 early messages, judged from arrival times, and summary.json says 0."""
    import json
    monkeypatch.setattr(schedule_mod, "FIX_ROUNDS", 0)
    p = max(_plans(monkeypatch, tmp_path), key=lambda p: len(p.k_kind))
    assert _early_messages(p) == 0 and p.late_data == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["causality"]["late_messages"] == 0


def test_the_early_message_judge_can_fail(monkeypatch, tmp_path):
    """Without the rounds after FIX_ROUNDS = 2 the same view leaves a message ahead of its CTS."""
    monkeypatch.setattr(schedule_mod, "FIX_ROUNDS", 2)
    p = max(_plans(monkeypatch, tmp_path, ack_rounds=0), key=lambda p: len(p.k_kind))
    assert _early_messages(p) > 0 and p.late_data > 0
