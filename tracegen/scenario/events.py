"""Events on the fabric and the GPUs: what the schedule sees of them.

Fabric events hold over [at_ns, until_ns) (spec.py; a flap is its down intervals). All from t=0
to the end: the fabric is built without the links down (apply_fabric_events, as ever). Any of
them timed: every link is kept and the run is cut into epochs (timed_fabric; fabric/timeline.py),
the engine changes capacities and moves flows at their instants (timing/epochs.py).

down      a switch-to-switch link, or a spine/core switch (every link of it), is gone while the
          event holds: routing does not use it (fabric.routing.Router over the remaining graph), and ECMP
          spreads over the members left (`ecmp_on_failure`, below). A leaf cannot go down (its
          hosts would be cut off): take its uplinks down instead.
degrade   a link runs at `gbps` (a bad optic: 400 -> 100 Gb/s) in both directions; routes stay (a
          slow member stays in the ECMP group - switches do not weigh members by rate). `gbps`
          must be below the link's rate (a faster "degrade" is refused: it would be an upgrade).
straggler a GPU computes `factor` times slower (from t=0): the compute before every op its TP group takes part
          in (a TP group computes in lockstep, and a collective waits for its slowest member:
          workload/streams.py gives a shared op the largest of its members' gaps) is x factor.

ecmp_on_failure (what a switch does with the flows of an ECMP group that lost a member):
  rehash     the group is rebuilt with n-1 members and every flow is hashed again (h mod (n-1)):
             flows on surviving members move too - plain modulo-N next-hop selection as
             routing.py does it (RFC 2991 "Modulo-N Hash": a change in the number of next hops
             remaps flows on every next hop; RFC 2992 analyses the disruption).
  resilient  flows whose path avoided the failed member keep it; only the failed member's flows
             are hashed again over the survivors - resilient hashing of the ASICs' ECMP member
             tables (NVIDIA Cumulus Linux "Resilient Hashing", Arista EOS "Resilient ECMP").
  When a member comes back: rehash hashes every flow over the whole group again (flows move
  back); resilient leaves the flows that moved where they are (fabric/timeline.epoch_routes).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ..fabric.kinds import LEAF
from ..tables import CommOps, Dim


def _switch(fabric, name: str, where: str) -> int:
    s = fabric.switch_id(name)
    if s < 0:
        some = ", ".join(fabric.sw_name[:4]) + (", ..." if fabric.n_switches > 4 else "")
        raise ConfigError(f"{where}: no switch {name!r} in this {fabric.kind} fabric ({some})")
    return s


def _links_of(fabric, name: str, where: str) -> np.ndarray:
    """Indexes into fabric.links of the link(s) 'A-B' names (two switches; parallel links: all)."""
    n_nics = fabric.n_nics
    for cut in [k for k, ch in enumerate(name) if ch == "-"]:
        a, b = fabric.switch_id(name[:cut]), fabric.switch_id(name[cut + 1:])
        if a >= 0 and b >= 0:
            la, lb = fabric.links["a"].astype(np.int64) - n_nics, fabric.links["b"].astype(np.int64) - n_nics
            hit = np.flatnonzero(((la == a) & (lb == b)) | ((la == b) & (lb == a)))
            if not len(hit):
                raise ConfigError(f"{where}: {name!r}: {name[:cut]} and {name[cut + 1:]} are not linked")
            return hit
    raise ConfigError(f"{where}: {name!r} is not a link between two switches — write it as SWITCH-SWITCH, "
                      f"e.g. {fabric.sw_name[0]}-{fabric.sw_name[-1]} (links of NICs cannot go down here)")


def apply_fabric_events(fabric, events, ecmp_on_failure: str = "rehash"):
    """The fabric the scenario runs on: links down removed, degraded links at their rate."""
    events = [e for e in events if e.type in ("down", "degrade")]
    if not events:
        return fabric
    if any(e.timed for e in events):
        return timed_fabric(fabric, events, ecmp_on_failure)
    n_fixed = fabric.planes * fabric.n_nics          # NIC ports come first in fabric.links
    down = np.zeros(len(fabric.links), bool)
    gbps = fabric.links["gbps"].copy()
    n_nics = fabric.n_nics
    for e in events:
        if e.type == "down" and e.switch:
            s = _switch(fabric, e.switch, e.where + ".switch")
            if fabric.sw_tier[s] == LEAF:
                raise ConfigError(f"{e.where}.switch: {e.switch} is a leaf — its hosts would be cut off; "
                                  f"take its uplinks down instead (type: down, link: {e.switch}-...)")
            down |= (fabric.links["a"] == n_nics + s) | (fabric.links["b"] == n_nics + s)
        elif e.type == "down":
            down[_links_of(fabric, e.link, e.where + ".link")] = True
        else:
            gbps[_degraded(fabric, e)] = e.gbps
    assert not down[:n_fixed].any()
    links = fabric.links.copy()
    links["gbps"] = gbps
    keep = ~down
    new = dataclasses.replace(fabric, links=links[keep])
    try:
        reduced = new.router
    except ConfigError as err:
        raise ConfigError(f"events: with the links down, {str(err).removeprefix('fabric: ')}") from None
    if ecmp_on_failure == "resilient" and down.any():
        new_id = np.full(len(links), -1, np.int64)
        new_id[keep] = np.arange(int(keep.sum()))
        full = dataclasses.replace(fabric, links=links)
        new._cache["router"] = ResilientRouter(full.router, reduced, new_id)
    return new


MAX_STATES = 256      # distinct sets of links down over a run: each routes every QP once more
INF_NS = np.iinfo(np.int64).max


def _degraded(fabric, e) -> np.ndarray:
    """The links a degrade event slows: refused unless it is below every one's rate (a faster
    'degrade' would model an upgrade the event does not mean; one at the rate changes nothing)."""
    hit = _links_of(fabric, e.link, e.where + ".link")
    nominal = int(fabric.links["gbps"][hit].min())
    if e.gbps >= nominal:
        raise ConfigError(f"{e.where}.gbps: {e.gbps:,} is not below {e.link}'s {nominal:,} Gb/s — a degraded link "
                          "runs slower than its rate: lower gbps, or drop the event")
    return hit


def _event_links(fabric, e) -> np.ndarray:
    """The links (indexes into fabric.links) one fabric event acts on."""
    if e.type == "degrade":
        return _degraded(fabric, e)
    n_nics = fabric.n_nics
    if e.type == "down" and e.switch:
        s = _switch(fabric, e.switch, e.where + ".switch")
        if fabric.sw_tier[s] == LEAF:
            raise ConfigError(f"{e.where}.switch: {e.switch} is a leaf — its hosts would be cut off; "
                              f"take its uplinks down instead (type: down, link: {e.switch}-...)")
        return np.flatnonzero((fabric.links["a"] == n_nics + s) | (fabric.links["b"] == n_nics + s))
    return _links_of(fabric, e.link, e.where + ".link")


def timed_fabric(fabric, events, ecmp_on_failure: str = "rehash"):
    """The fabric with events during the run: every link kept, epoch 0 (t=0) as the fabric
    itself, the later epochs in Fabric.epochs (fabric/timeline.py). An epoch starts at every
    instant where the links down or the rates change: a link is down while any of its down
    events holds ([at_ns, until_ns)); a degraded link runs at the lowest rate of its degrade
    events holding. Routes per epoch: the remaining graph's ECMP, rehash or
    resilient as at t=0 (module doc). Rehash is a function of the links down alone (modulo-N over
    the members up): a link coming back moves flows back onto it (every flow hashed again over the
    full group). Resilient remembers: a flow keeps its route while that crosses no link down, so
    flows that left a failed member stay on the survivors after it returns
    (fabric/timeline.epoch_routes, with the source)."""
    from ..fabric.timeline import Epoch, MappedRouter
    hit = [(e, _event_links(fabric, e)) for e in events]
    nominal = fabric.links["gbps"].astype(np.int64)
    n_fixed = fabric.planes * fabric.n_nics          # NIC ports come first in fabric.links
    cuts = sorted({0} | {e.at_ns for e in events} | {e.until_ns for e in events if e.until_ns is not None})
    states: list = []                                 # (at_ns, down, gbps) where something changes
    at = np.array([e.at_ns for e in events], np.int64)
    until = np.array([INF_NS if e.until_ns is None else e.until_ns for e in events], np.int64)
    for t in cuts:
        down = np.zeros(len(nominal), bool)
        deg = np.full(len(nominal), INF_NS, np.int64)
        for k in np.flatnonzero((at <= t) & (t < until)).tolist():     # the events holding at t
            e, links = hit[k]
            if e.type == "down":
                down[links] = True
            else:
                deg[links] = np.minimum(deg[links], e.gbps)
        gbps = np.where(deg < INF_NS, deg, nominal)     # the event's rate, as at t=0 (apply_fabric_events)
        assert not down[:n_fixed].any()
        seen_as = np.where(down, 0, gbps)              # a rate hidden under a down is no change
        if not states or not (np.array_equal(down, states[-1][1]) and np.array_equal(seen_as, states[-1][3])):
            states.append((t, down, gbps, seen_as))
    full = dataclasses.replace(fabric, links=fabric.links.copy())
    full_router = full.router
    routers: dict[bytes, tuple] = {}
    epochs = []
    for t, down, gbps, _ in states:
        key = down.tobytes()
        if key not in routers:
            if len(routers) >= MAX_STATES:
                raise ConfigError(f"events: more than {MAX_STATES} distinct sets of links down over the run "
                                  "(each routes every flow again) — fewer events on distinct links")
            # epoch 0 resilient: today's ResilientRouter (intact routes kept unless they cross a
            # link down); later epochs: the reduced router, for the flows that must move
            # (fabric/timeline.epoch_routes keeps the others where they were)
            mode = ecmp_on_failure if not epochs else "rehash"
            routers[key] = (len(routers), _router(full, full_router, down, mode, t, MappedRouter))
        state, router = routers[key]
        epochs.append(Epoch(int(t), np.where(down, 0, gbps).astype(np.int64), router, state,
                            sticky=ecmp_on_failure == "resilient"))
    t0, down0, gbps0, _ = states[0]
    links = fabric.links.copy()
    links["gbps"] = np.where(down0, nominal, gbps0)   # a link down from t=0 keeps its rate: no route crosses it
    new = dataclasses.replace(fabric, links=links)
    new._cache["router"] = epochs[0].router
    new._cache["epochs"] = tuple(epochs[1:])
    return new


def _router(full, full_router, down: np.ndarray, ecmp_on_failure: str, t: int, mapped):
    """The routes with `down` links gone, in the full fabric's link ids."""
    if not down.any():
        return full_router
    keep = np.flatnonzero(~down)
    reduced = dataclasses.replace(full, links=full.links[keep])
    try:
        inner = reduced.router
    except ConfigError as err:
        raise ConfigError(f"events: with the links down at {t:,} ns, {str(err).removeprefix('fabric: ')}") from None
    if ecmp_on_failure == "resilient":
        new_id = np.full(len(down), -1, np.int64)
        new_id[keep] = np.arange(len(keep))
        inner = ResilientRouter(full_router, inner, new_id)
    return mapped(inner, keep, full_router)


class ResilientRouter:
    """Routes after a failure with resilient hashing: a route of the intact fabric that avoids
    every link down is kept (its link ids renumbered); the others take the reduced fabric's route
    (hashed over the surviving members). Everything else is the reduced fabric's Router."""

    def __init__(self, full, reduced, new_id: np.ndarray):
        self.full, self.reduced, self.new_id = full, reduced, new_id

    def __getattr__(self, name):
        return getattr(self.reduced, name)

    def routes(self, src_nic, dst_nic, sport, plane, ip_version: int = 4, batch: int = 1 << 16, dest_qpn=None):
        new = self.reduced.routes(src_nic, dst_nic, sport, plane, ip_version, batch, dest_qpn)
        old = self.full.routes(src_nic, dst_nic, sport, plane, ip_version, batch, dest_qpn)
        used = old >= 0
        nid = self.new_id[np.maximum(old, 0) >> 1]
        mapped = np.where(used, 2 * nid + (old & 1), -1)
        hit = (used & (nid < 0)).any(axis=1)
        width = new.shape[1]
        if mapped.shape[1] < width:
            mapped = np.pad(mapped, ((0, 0), (0, width - mapped.shape[1])), constant_values=-1)
        out = new.copy()
        out[~hit] = mapped[~hit][:, :width]
        return out


def tp_group(ops: CommOps, rank: int) -> np.ndarray:
    """The ranks computing in lockstep with `rank`: its TP (and SP) groups' ranks, or itself."""
    members = {rank}
    lens = ops.groups.lengths()
    for i in np.flatnonzero(np.isin(ops.rows["dim"], (Dim.TP, Dim.SP)) & (lens > 1)).tolist():
        g = ops.groups[i]
        if rank in g:
            members.update(g.tolist())
    return np.array(sorted(members), np.int64)


def apply_stragglers(ops: CommOps, events, job_index: int) -> CommOps:
    """A job's ops (its own rank numbers) with its stragglers' compute slowed."""
    mine = [e for e in events if e.type == "straggler" and e.job == job_index]
    if not mine:
        return ops
    rows = ops.rows.copy()
    ptr, vals = ops.groups.ptr, ops.groups.values
    owner = np.repeat(np.arange(len(rows)), np.diff(ptr))
    factor = np.ones(len(rows))
    for e in mine:
        hit = np.zeros(len(rows), bool)
        hit[owner[np.isin(vals, tp_group(ops, e.rank))]] = True
        factor = np.where(hit, np.maximum(factor, e.factor), factor)
    rows["gap_ns"] = np.round(rows["gap_ns"] * factor).astype(np.int64)
    return dataclasses.replace(ops, rows=rows)
