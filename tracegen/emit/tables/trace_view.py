"""TraceView: what a picture is drawn from - the columns of the flow and op tables plus the few facts
about the fabric a picture needs (ranks, NIC names, rails, the busiest links' utilisation), built
from a pipeline run (`TraceView.from_run`) or from a written trace folder (`TraceView.from_dir`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...tables import CollKind, Dim, LinkKind, Ragged

TOP_LINKS = 8


def top_link_utilisation(flows, fabric, top: int = TOP_LINKS) -> dict:
    """The busiest fabric links' utilisation over the iteration, from the schedule's own link
    loads (fluid.LinkLoad: exact, piecewise constant): {bin_ns, name, gbps, util[top][bins]} -
    what link_utilisation.png draws and summary.json keeps (so `tracegen report` redraws it)."""
    load = getattr(flows, "link_load", None)
    end = int(flows.op_end_ns.max()) if flows.op_end_ns is not None and len(flows.op_end_ns) else 0
    if load is None or end <= 0 or not len(load.t):
        return {}
    from ...report.build import UTIL_BINS
    width = max(1, -(-end // UTIL_BINS))
    used, busy = load.binned_used(width, UTIL_BINS)                     # only links with a load
    gbps = np.repeat(fabric.links["gbps"], 2).astype(np.float64)[used]
    util = busy * 8 / (gbps[:, None] * width)
    order = np.argsort(-util.sum(axis=1), kind="stable")[:top]          # busiest over the iteration
    order = order[util[order].max(axis=1) > 0]
    return {"bin_ns": int(width), "name": [fabric.link_dir_name(int(d)) for d in used[order]],
            "gbps": gbps[order].astype(int).tolist(),
            "util": np.round(util[order], 5).tolist(), "truncated": bool(load.truncated)}


@dataclass
class TraceView:
    title: str
    world: int
    nic_names: list[str]
    nic_node: np.ndarray
    nic_rail: np.ndarray
    # flow table columns (one row per transfer)
    src_rank: np.ndarray
    dst_rank: np.ndarray
    src_nic: np.ndarray
    dst_nic: np.ndarray
    link: np.ndarray            # LinkKind codes
    dim: np.ndarray             # Dim codes (of the transfer's CommOp)
    nbytes: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    # op table columns (one row per CommOp)
    op_kind: np.ndarray
    op_dim: np.ndarray
    op_iteration: np.ndarray
    op_gap_ns: np.ndarray
    op_start_ns: np.ndarray
    op_end_ns: np.ndarray
    op_group: Ragged
    extra: dict = field(default_factory=dict)   # further flow columns by name (e.g. route)
    links: dict = field(default_factory=dict)   # "utilisation": top_link_utilisation (summary.json)

    @property
    def n_nics(self) -> int:
        return len(self.nic_names)

    @staticmethod
    def from_run(run) -> "TraceView":
        f, fab = run.flows, run.fabric
        r, ops = f.rows, f.ops.rows
        none = np.full(len(ops), -1, np.int64)
        return TraceView(
            title=run.job.name, world=fab.world,
            nic_names=[fab.nic_name(i) for i in range(fab.n_nics)],
            nic_node=np.asarray(fab.nic_node), nic_rail=np.asarray(fab.nic_rail),
            src_rank=r["src_rank"], dst_rank=r["dst_rank"], src_nic=r["src_nic"], dst_nic=r["dst_nic"],
            link=r["link"], dim=ops["dim"][r["op_id"]] if len(r) else np.zeros(0, np.uint8),
            nbytes=r["bytes"], start_ns=r["start_ns"], end_ns=r["end_ns"],
            op_kind=ops["kind"], op_dim=ops["dim"], op_iteration=ops["iteration"], op_gap_ns=ops["gap_ns"],
            op_start_ns=f.op_start_ns if f.op_start_ns is not None else none,
            op_end_ns=f.op_end_ns if f.op_end_ns is not None else none, op_group=f.ops.groups,
            links=_links_meta(run))

    @staticmethod
    def from_dir(trace_dir: Path) -> "TraceView":
        """A written trace folder, checked as it is read (trace_read: a damaged file is one line)."""
        from .read import FLOW_COLUMNS, OP_COLUMNS, check_ranges, read_summary, read_table
        trace_dir = Path(trace_dir)
        meta = read_summary(trace_dir)
        flows = read_table(trace_dir, "flows", FLOW_COLUMNS)
        ops = read_table(trace_dir, "ops", OP_COLUMNS)
        check_ranges(trace_dir, flows, ops, int(meta["world"]), len(meta["nic_names"]))
        code = lambda enum, names: np.array([enum[x].value for x in names] if len(names) else [], np.uint8)
        coll = {k.label: int(k) for k in CollKind}
        return TraceView(
            title=meta["job"]["name"], world=int(meta["world"]), nic_names=list(meta["nic_names"]),
            nic_node=np.array(meta["nic_node"], np.int64), nic_rail=np.array(meta["nic_rail"], np.int64),
            src_rank=flows["src_rank"], dst_rank=flows["dst_rank"], src_nic=flows["src_nic"],
            dst_nic=flows["dst_nic"], link=code(LinkKind, flows["link"]), dim=code(Dim, flows["dim"]),
            nbytes=flows["bytes"], start_ns=flows["start_ns"], end_ns=flows["end_ns"],
            op_kind=np.array([coll[x] for x in ops["collective"]], np.uint8), op_dim=code(Dim, ops["dim"]),
            op_iteration=ops["iteration"], op_gap_ns=ops["gap_ns"], op_start_ns=ops["start_ns"],
            op_end_ns=ops["end_ns"], op_group=ops["group"],
            links={"utilisation": meta.get("link_utilisation", {})})


def _links_meta(run) -> dict:
    return {"utilisation": top_link_utilisation(run.flows, run.fabric)}
