"""A scenario's timed link events in its ns-3 scenario: what each simulator can apply of them.

Input: the fabric's later epochs (Fabric.epochs, fabric/timeline.py: from each instant a timed
event changes the fabric, every link's rate, 0 when down, and the routes then - rehash, or
resilient with its memory, fabric.timeline.epoch_routes). Written:

- manifest.json `link_events` (tracegen ns3 run, ns3_scenarios/scenario.py): per instant, the
  links of topology.txt whose rate changes (gbps 0: down, the rate again: up or restored) and
  the QPs whose path changes then (`repin`: QP, its new data path and ACK path as node ids - the
  epoch's own routes, so the run moves exactly the flows the schedule moves). Times are ns from
  the trace's start (flow.txt time = t0_ns + at_ns).
- config.txt / config_simai.txt `LINK_DOWN us A B`: HPCC's third.cc reads one link going down for
  good (main(): `conf >> link_down_time >> link_down_A >> link_down_B`, then, when
  link_down_time > 0, Simulator::Schedule(Seconds(2) + MicroSeconds(link_down_time),
  &TakeDownLink, ...): the link's two QbbNetDevices TakeDown() and every route is computed again
  (CalculateRoutes / SetRoutingEntries, RedistributeQp). Seconds(2) is flow.txt's t0 (T0_NS).
  It has no key for a link coming back, a rate change, or a second link: those are named in one
  warning line.
"""
from __future__ import annotations

import numpy as np

from ...tables import Flows
from ...fabric.topology import Fabric
from .ns3_lines import qp_table


def link_events(flows: Flows, fabric: Fabric) -> tuple[list[dict], list[str], str]:
    """(manifest records, warnings, config.txt LINK_DOWN value) of the fabric's epochs after t=0
    (none: [], [], "0 0 0"). fabric: the one the flows were timed on; topology.txt lists its
    links in order, so a link of an epoch is the topology line of the same index."""
    epochs = getattr(fabric, "epochs", ())
    if not epochs:
        return [], [], "0 0 0"
    from ...fabric.timeline import epoch_routes
    _, qps = qp_table(flows, fabric)
    src, dst, sport = (qps[k].astype(np.int64) for k in ("src", "dst", "sport"))
    sqpn, dqpn = qps["sqpn"].astype(np.int64), qps["dqpn"].astype(np.int64)
    plane = sqpn % fabric.planes            # a QP's plane: its sender QPN (Fabric.qp_paths)
    walk = fabric.router

    def node_paths(routes, first):
        """[QPs, nodes] of each QP's path, -1 padded."""
        return np.column_stack([first] + [walk.node_after(routes, k) for k in range(routes.shape[1])])

    def padded(tables):
        w = max(a.shape[1] for a in tables)
        return [np.pad(a, ((0, 0), (0, w - a.shape[1])), constant_values=-1) for a in tables]

    def as_list(row):
        return row[row >= 0].tolist()
    fwd = padded([node_paths(r, src) for r in epoch_routes(fabric, src, dst, sport, plane, fabric.ip_version, dest_qpn=dqpn)])
    rev = padded([node_paths(r, dst) for r in epoch_routes(fabric, dst, src, sport, plane, fabric.ip_version, dest_qpn=sqpn)])
    a_of, b_of = fabric.links["a"].astype(np.int64), fabric.links["b"].astype(np.int64)
    name = lambda k: f"{fabric.node_name(int(a_of[k]))}-{fabric.node_name(int(b_of[k]))}"   # noqa: E731
    rates = fabric.links["gbps"].astype(np.int64)
    records, hpcc, not_hpcc = [], None, []
    for i, e in enumerate(epochs):
        t = int(e.at_ns)
        changed = np.flatnonzero(e.gbps != rates)
        moved = np.flatnonzero((fwd[i + 1] != fwd[i]).any(axis=1) | (rev[i + 1] != rev[i]).any(axis=1))
        repin = [[q, as_list(fwd[i + 1][q]), as_list(rev[i + 1][q])] for q in moved.tolist()]
        records.append({"at_ns": t, "links": [[int(a_of[k]), int(b_of[k]), int(e.gbps[k])] for k in changed],
                        "repin": repin})
        for k in changed.tolist():
            if e.gbps[k] == 0 and hpcc is None and t % 1000 == 0:
                hpcc = f"{t // 1000} {int(a_of[k])} {int(b_of[k])}"      # HPCC's clock: whole µs after t0
                continue
            not_hpcc.append(f"{name(k)} {'down' if e.gbps[k] == 0 else f'at {int(e.gbps[k])} Gb/s'} at {t:,} ns")
        rates = e.gbps.astype(np.int64)
    warnings = []
    if not_hpcc:
        warnings.append("config.txt / config_simai.txt: HPCC's LINK_DOWN takes one link down for good (whole µs "
                        "after t0); not expressed there (tracegen ns3 run applies them): " + ", ".join(not_hpcc))
    return records, warnings, hpcc or "0 0 0"
