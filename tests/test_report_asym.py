"""The report's per-NIC table on traffic where what a NIC sends differs from what it receives -
a Broadcast's root only sends, a Reduce's root only receives, the first pipeline stage only sends
activations forward and the last only receives them - checked against those closed forms, in the
Report arrays and in the rendered summary.md and terminal tables."""
from __future__ import annotations

import numpy as np
import pytest

from tg_helpers import cluster_job, run_ops
from tracegen.config import job_from_dict
from tracegen.pipeline import run_pipeline
from tracegen.report.build import build_report
from tracegen.report.render import render_markdown, report_tables
from tracegen.tables import CollKind, Dim, Flows, Phase, Ragged

S = 3 << 20


def nic_table(text_rows) -> dict[str, tuple[int, int]]:
    return {r[0]: (int(r[1].replace(",", "")), int(r[2].replace(",", ""))) for r in text_rows}


def markdown_table(md: str, heading: str) -> list[list[str]]:
    """Rows of the first Markdown table under a '## heading...' line."""
    lines = md.split("## " + heading, 1)[1].split("\n## ", 1)[0].splitlines()
    rows = [ln.strip("|").split("|") for ln in lines if ln.startswith("| ") and "tx bytes" not in ln]
    return [[c.strip() for c in r] for r in rows]


def check_tables(rep, fabric, want_tx, want_rx):
    assert list(rep.nic_tx_bytes) == list(want_tx)
    assert list(rep.nic_rx_bytes) == list(want_rx)
    names = [fabric.nic_name(i) for i in range(fabric.n_nics)]
    md = render_markdown(rep, names, fabric)
    each = nic_table(markdown_table(md, "Payload bytes of each NIC"))
    summary = nic_table(markdown_table(md, "Payload bytes per NIC"))
    term = next(rows for title, _, rows in report_tables(rep, exact=True) if title.startswith("Payload bytes of each"))
    term = nic_table(term)
    for i, name in enumerate(names):
        assert each[name] == (want_tx[i], want_rx[i])
        assert term[str(i)] == (want_tx[i], want_rx[i])
    assert summary["all (sum)"] == (sum(want_tx), sum(want_rx))
    assert summary["max"] == (max(want_tx), max(want_rx)) and summary["min"] == (min(want_tx), min(want_rx))


@pytest.mark.parametrize("channels", [1, 2])
def test_broadcast_root_only_sends(channels):
    """Ring Broadcast from group[0] along the group order: the root sends S and receives nothing,
    the ring's last member receives S and sends nothing, the others relay S."""
    order = [2, 0, 1, 3]
    job = cluster_job(4, nccl={"channels": channels})
    flows, fabric = run_ops(job, [(CollKind.BROADCAST, order, S, 0, [])])
    tx, rx = [S] * 4, [S] * 4
    rx[order[0]], tx[order[-1]] = 0, 0
    check_tables(build_report(job, fabric, flows), fabric, tx, rx)


@pytest.mark.parametrize("channels", [1, 2])
def test_reduce_root_only_receives(channels):
    """Ring Reduce to group[0]: data runs group[1] -> ... -> group[-1] -> root: the root receives
    S and sends nothing, group[1] sends S and receives nothing."""
    order = [2, 0, 1, 3]
    job = cluster_job(4, nccl={"channels": channels})
    flows, fabric = run_ops(job, [(CollKind.REDUCE, order, S, 0, [])])
    tx, rx = [S] * 4, [S] * 4
    tx[order[0]], rx[order[1]] = 0, 0
    check_tables(build_report(job, fabric, flows), fabric, tx, rx)


def test_pipeline_forward_first_stage_sends_last_stage_receives():
    """pp=4, one GPU per node: forward activations only (a flow table of the forward PP sends):
    stage 0 sends m x b·s·h·B and receives nothing, stage 3 the reverse; backward mirrors it."""
    b, s, h, m = 1, 128, 256, 3
    job = job_from_dict({"model": {"layers": 4, "hidden": h, "heads": 8, "vocab": 512, "seq_len": s},
                         "parallelism": {"dp": 1, "tp": 1, "pp": 4, "micro_batch": b, "global_batch": b * m},
                         "cluster": {"gpus_per_node": 1}})
    run = run_pipeline(job)
    f = run.flows
    ops = f.ops.rows
    s_act = b * s * h * 2
    for phase, sender, receiver in ((Phase.FWD, 0, 3), (Phase.BWD, 3, 0)):
        keep = (ops["dim"][f.rows["op_id"]] == Dim.PP) & (ops["phase"][f.rows["op_id"]] == phase)
        part = Flows(f.rows[keep], Ragged.empty(int(keep.sum())), f.ops, f.op_start_ns, f.op_end_ns)
        tx, rx = [m * s_act] * 4, [m * s_act] * 4
        tx[receiver], rx[sender] = 0, 0
        check_tables(build_report(job, run.fabric, part), run.fabric, tx, rx)
    # the whole iteration: every NIC receives what its neighbours sent it
    rep = run.report
    r = f.rows[f.net]
    for nic in range(run.fabric.n_nics):
        assert rep.nic_rx_bytes[nic] == r["bytes"][r["dst_nic"] == nic].sum()
        assert rep.nic_tx_bytes[nic] == r["bytes"][r["src_nic"] == nic].sum()
    assert rep.nic_tx_bytes.sum() == rep.nic_rx_bytes.sum()
    assert not np.array_equal(rep.nic_tx_bytes, np.zeros(4))
