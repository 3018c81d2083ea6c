"""A fabric that changes during the run: epochs between the instants of timed events.

The Fabric keeps every link (its link ids are the same in every epoch); `Fabric.epochs` lists the
later epochs, each with its links' rates (0: down) and the router of that epoch. The fabric itself
is epoch 0 (from t=0): its links' gbps are epoch 0's rates (a link down keeps its nominal rate -
no route crosses it) and its router avoids epoch 0's links down. A router of an epoch routes over
the links up (a Router of the reduced fabric, or events.py's resilient one) and answers in the
full fabric's link ids (MappedRouter). The timing engine (timing/epochs.py) turns the epochs into
capacity changes and route changes at their instants; epoch_routes gives every epoch's routes of
a set of flows (the one place that knows resilient hashing's memory).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Epoch:
    at_ns: int                  # the epoch starts here (it lasts until the next one's at_ns)
    gbps: np.ndarray            # i8 [n_links]: each link's rate, 0 when down
    router: object              # routes in this epoch, in the full fabric's link ids
    state: int                  # epochs with the same links down share a state (and their router)
    sticky: bool = False        # resilient hashing: a flow keeps the route it had unless that crosses a link down


class MappedRouter:
    """A router of a reduced fabric (links kept: keep[i] is the full fabric's link of its link i)
    answering in the full fabric's link ids; node walks (path_nodes, node_after) are the full
    fabric's router's, as the ids are."""

    def __init__(self, inner, keep: np.ndarray, full):
        self.inner, self.keep, self.full = inner, np.asarray(keep, np.int64), full

    def __getattr__(self, name):
        return getattr(self.full, name)

    @property
    def max_links(self) -> int:
        return max(self.inner.max_links, self.full.max_links)

    def hops(self, src_nic, dst_nic, plane=0) -> np.ndarray:
        return self.inner.hops(src_nic, dst_nic, plane)

    def routes(self, src_nic, dst_nic, sport, plane, ip_version: int = 4, batch: int = 1 << 16, dest_qpn=None):
        r = self.inner.routes(src_nic, dst_nic, sport, plane, ip_version, batch, dest_qpn)
        out = np.where(r >= 0, 2 * self.keep[np.maximum(r, 0) >> 1] + (r & 1), -1)
        if out.shape[1] < self.max_links:
            out = np.pad(out, ((0, 0), (0, self.max_links - out.shape[1])), constant_values=-1)
        return out


def epoch_routes(fabric, src_nic, dst_nic, sport, plane, ip_version: int = 4, dest_qpn=None):
    """(A generator: one epoch's table at a time.) The routes of the given flows in every epoch
    (epoch 0 - the fabric's router - first), each [n, width] link-direction ids, -1 padded. Rehash:
    each epoch's router alone (modulo-N over the members up: a function of the links down).
    Resilient (Epoch.sticky): a flow keeps its route of the epoch before while that crosses no link
    down now, else the epoch's router hashes it over the members up - when a link comes back, flows
    that left it stay where they are: a resilient group hands a returning member only buckets that
    have been idle for idle_timer (Linux nexthop-group-resilient, ip-nexthop(8): default 120 s;
    unbalanced_timer 0: never forced), far longer than the gaps of a training step, so busy flows
    are not moved back."""
    src, dst = np.asarray(src_nic, np.int64), np.asarray(dst_nic, np.int64)
    last = fabric.router.routes(src, dst, sport, plane, ip_version, dest_qpn=dest_qpn)
    yield last
    recent: dict = {}               # the last two states' tables: a flap alternates two (routed once each)
    for e in fabric.epochs:
        new = recent.get(e.state)
        if new is None:
            new = e.router.routes(src, dst, sport, plane, ip_version, dest_qpn=dest_qpn)
            recent = {**dict(list(recent.items())[-1:]), e.state: new}
        if e.sticky:
            prev = last
            w = max(prev.shape[1], new.shape[1])
            prev = np.pad(prev, ((0, 0), (0, w - prev.shape[1])), constant_values=-1)
            new = np.pad(new, ((0, 0), (0, w - new.shape[1])), constant_values=-1)
            down = np.repeat(e.gbps == 0, 2)
            hit = ((prev >= 0) & down[np.maximum(prev, 0)]).any(axis=1)
            new = np.where(hit[:, None], new, prev)
        last = new
        yield new
