"""Routes over the fabric: shortest paths, and ECMP by a hash at every switch.

A packet goes NIC -> its leaf -> ... -> the destination's leaf -> NIC along a shortest path (hop
count). Where a switch has several next hops on a shortest path it picks one by hashing the
packet's header fields, as switch ASICs do (WIRE.md), deterministically. `fabric.ecmp_hash`
chooses the fields and how a switch turns them into a choice:

5-tuple (default; every switch's factory setting):
    crc  = CRC-32 (zlib's) of  src IP | dst IP | protocol 17 | UDP sport | UDP dport 4791
           (network byte order; 4-byte IPv4 or 16-byte IPv6 addresses, as on the wire)
    h_s  = fmix32(crc ^ seed_s),  seed_s = fmix32(ecmp_seed * 0x9E3779B1 + s * 0x85EBCA77 + 1)
    next = the (h_s mod n)-th of the n candidate next hops, in ascending switch order

  fmix32 is MurmurHash3's finaliser: mixing the per-switch seed in non-linearly keeps the choices
  of successive switches independent (a seed XORed into a CRC alone would make every switch pick
  by the same bits: hash polarisation). The UDP source port is mlx5's hash of the QPN pair, so QPs
  land on next hops as if at random: 1,000 QPs over 8 spines put each spine within about +-8 %
  (one sigma) of the mean, not closer.

qp (RoCE queue-pair hashing: the BTH destination QP as a hash field - "RDMA Queue Pair" in
    Juniper's enhanced hash key, a UDF/flex-hash field on Broadcom ASICs - with the UDP ports left
    out, so the QPN, not mlx5's port hash of it, decides):
    crc  = CRC-32 (zlib's) of  src IP | dst IP | BTH DestQP (3 bytes)
    h_s  = ((crc >> w_s) ^ seed_s) & 255,  w_s = 0 at leaves, 16 at every other switch (a hash
           offset per tier: a leaf and the aggregation switch above it pick by different CRC bits)
    next = the (h_s mod n)-th candidate, as above: entry h_s of a 256-entry ECMP member table
           filled with the n candidates in turn, as ASICs hold ECMP groups

  CRC-32 is linear: for consecutive DestQPs between two addresses the low CRC bits run through
  every value in turn, so with 2, 4 or 8 next hops each takes exactly one in n of any 8 aligned
  consecutive QPs (NCCL numbers QPs consecutively), other counts within one table entry's share
  (n = 3: 86/85/85 of 256), and a leaf's and an aggregation switch's choices are jointly balanced
  over 32-64 QPs (tests/test_fabric.py checks both).

All arithmetic is on uint32, so a C++ replica gives the same choices. The schedule, every pcap
view and the ns-3 scenario (which pins each QP's path, emit/sims/ns3.py) route with this one function.

This module holds the Router; ecmp_hash.py the hash functions, route_graph.py the graph kernels.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .ecmp_hash import ECMP_HASHES, fmix32, qp_crc, switch_seeds, tuple_crc
from .route_graph import bfs, components, farthest, next_hops, twin_leaves


class Router:
    """Shortest-path ECMP routing over a fabric's switch graph (see module doc).

    Node ids are the simulators' (NICs 0..n_nics-1, then switches); a route is given as the list of
    link-direction ids it crosses (direction 2*l goes a -> b of fabric.links[l], 2*l + 1 b -> a).
    Memory: O(links + switches x twin classes), the distance rows capped at DIST_CACHE_BYTES
    (beyond it they are recomputed per batch of routes)."""

    DIST_CACHE_BYTES = 256 << 20

    def __init__(self, fabric):
        self.fabric = fabric
        n_nics, n_sw = fabric.n_nics, fabric.n_switches
        links = fabric.links
        a, b = links["a"].astype(np.int64), links["b"].astype(np.int64)
        sw = (a >= n_nics) & (b >= n_nics)
        # adjacency between switches (CSR), each switch's neighbours in ascending order, with the
        # direction ids (parallel links in link order, a -> b before b -> a)
        u = np.r_[a[sw], b[sw]] - n_nics
        v = np.r_[b[sw], a[sw]] - n_nics
        d = np.r_[2 * np.flatnonzero(sw), 2 * np.flatnonzero(sw) + 1]
        order = np.lexsort((v, u))
        self.nbr, self.ndir = v[order], d[order]
        self.ptr = np.zeros(n_sw + 1, np.int64)
        np.cumsum(np.bincount(u, minlength=n_sw), out=self.ptr[1:])
        # NIC ports: for each (NIC, plane) its leaf and the up / down direction ids
        nic_link = np.flatnonzero(~sw)
        nic = np.where(a[nic_link] < n_nics, a[nic_link], b[nic_link])
        leaf = np.where(a[nic_link] < n_nics, b[nic_link], a[nic_link]) - n_nics
        up = np.where(a[nic_link] < n_nics, 2 * nic_link, 2 * nic_link + 1)
        planes = fabric.planes
        self.port_leaf = np.full((n_nics, planes), -1, np.int64)
        self.port_up = np.full((n_nics, planes), -1, np.int64)
        self.port_down = np.full((n_nics, planes), -1, np.int64)
        plane = fabric.sw_plane[leaf].astype(np.int64)
        self.port_leaf[nic, plane], self.port_up[nic, plane], self.port_down[nic, plane] = leaf, up, up ^ 1
        self.leaves = np.unique(self.port_leaf[self.port_leaf >= 0])
        self.leaf_col = np.full(n_sw, -1, np.int64)
        self.leaf_col[self.leaves] = np.arange(len(self.leaves))
        self.seeds = switch_seeds(n_sw, fabric.ecmp_seed)
        self.hash_kind = getattr(fabric, "ecmp_hash", "5-tuple")
        if self.hash_kind not in ECMP_HASHES:
            raise ConfigError(f"fabric.ecmp_hash: {self.hash_kind!r} is not one of {', '.join(ECMP_HASHES)}")
        # qp hash: the CRC bits a switch picks by (hash offset per tier: 0 at leaves, 16 above)
        self.shift = np.full(n_sw, 16, np.uint32)
        self.shift[self.leaves] = 0
        self._check_connected()
        # twin classes of the leaves, the switch whose BFS serves each, and every leaf's twin
        classes, self.leaf_class = np.unique(twin_leaves(self.ptr, self.nbr, self.leaves), return_inverse=True)
        self.class_source = self.leaves[classes]
        self.cls = np.full(n_sw, -1, np.int64)
        self.cls[self.leaves] = self.leaf_class
        self.twin = np.full(n_sw, -1, np.int64)
        self.twin[self.leaves] = self.class_source[self.leaf_class]
        # distance rows: every class's BFS once (for the longest route), kept while they fit
        keep = min(len(classes), self.DIST_CACHE_BYTES // (4 * max(n_sw, 1)))
        self._dist = np.empty((keep, n_sw), np.int32)
        self._row = np.full(len(classes), -1, np.int64)      # distance row of each class, -1: none
        self._row[:keep] = np.arange(keep)
        # the longest route: 2 NIC links + the farthest any switch is from a leaf
        far = farthest(self.ptr, self.nbr, self.class_source, self._dist)
        self.max_links = far + 2 if len(self.leaves) else 2

    def _check_connected(self) -> None:
        """Every leaf reaches every other leaf of its plane."""
        fabric, leaves = self.fabric, self.leaves
        if not len(leaves):
            return
        comp = components(self.ptr, self.nbr)[leaves]
        plane = fabric.sw_plane[leaves].astype(np.int64)
        pairs = np.unique(np.column_stack([plane, comp]), axis=0)        # (plane, component) in use
        split = np.isin(plane, pairs[np.r_[False, pairs[1:, 0] == pairs[:-1, 0]], 0])
        if split.any():
            i = int(np.argmax(split))
            j = int(np.argmax((plane == plane[i]) & (comp != comp[i])))
            raise ConfigError(f"fabric: {fabric.sw_name[leaves[i]]} cannot reach "
                              f"{fabric.sw_name[leaves[j]]}; connect every leaf")

    def _rows(self, classes: np.ndarray) -> np.ndarray:
        """Row of self._dist holding the BFS of each class's representative (computed on demand;
        the rows are dropped and rebuilt when they would outgrow DIST_CACHE_BYTES)."""
        classes = np.asarray(classes, np.int64)
        need = np.unique(classes)
        missing = need[self._row[need] < 0]
        if len(missing):
            n_sw = self._dist.shape[1]
            if (len(self._dist) + len(missing)) * max(n_sw, 1) * 4 > self.DIST_CACHE_BYTES:
                self._row[:] = -1
                self._dist = self._dist[:0]
                missing = need
            new = np.empty((len(missing), n_sw), np.int32)
            for k, c in enumerate(missing.tolist()):
                bfs(self.ptr, self.nbr, int(self.class_source[c]), new[k])
            self._row[missing] = len(self._dist) + np.arange(len(missing))
            self._dist = np.concatenate([self._dist, new])
        return self._row[classes]

    def distance(self, switch, leaf) -> np.ndarray:
        """Hops between switches and leaves (with NICs), element-wise (-1: unreachable)."""
        switch, leaf = np.broadcast_arrays(np.asarray(switch, np.int64), np.asarray(leaf, np.int64))
        row = self._rows(self.cls[leaf])
        d = self._dist[row, switch].astype(np.int64)
        return np.where(switch == leaf, 0, np.where(switch == self.twin[leaf], 2, d))

    def neighbours(self, switch: int) -> np.ndarray:
        """Switches linked to `switch`, ascending (the order ECMP candidates are counted in)."""
        return self.nbr[self.ptr[switch]:self.ptr[switch + 1]]

    def hops(self, src_nic, dst_nic, plane=0) -> np.ndarray:
        """Links on a shortest path (2 under one leaf)."""
        s = self.port_leaf[np.asarray(src_nic), plane]
        t = self.port_leaf[np.asarray(dst_nic), plane]
        return self.distance(s, t) + 2

    def routes(self, src_nic, dst_nic, sport, plane, ip_version: int = 4,
               batch: int = 1 << 16, dest_qpn=None) -> np.ndarray:
        """[n, max_links] link-direction ids of each packet's route, -1 padded. `sport` (UDP
        source port) is what the 5-tuple hash reads, `dest_qpn` (BTH DestQP) what the qp hash
        reads; a caller passes both, as the packet carries both."""
        src_nic, dst_nic = np.asarray(src_nic, np.int64), np.asarray(dst_nic, np.int64)
        plane = np.broadcast_to(np.asarray(plane, np.int64), src_nic.shape)
        out = np.full((len(src_nic), self.max_links), -1, np.int64)
        ip = self.fabric.nic_ip
        if not len(src_nic):
            crc = np.zeros(0, np.uint32)
        elif self.hash_kind == "qp":
            if dest_qpn is None:
                raise ValueError("the qp ECMP hash needs each packet's destination QPN")
            q = np.broadcast_to(np.asarray(dest_qpn, np.int64), src_nic.shape)
            crc = qp_crc(ip[src_nic], ip[dst_nic], q, ip_version)
        else:
            crc = tuple_crc(ip[src_nic], ip[dst_nic], np.asarray(sport), ip_version)
        for lo in range(0, len(src_nic), batch):
            sl = slice(lo, lo + batch)
            out[sl] = self._walk(src_nic[sl], dst_nic[sl], plane[sl], crc[sl])
        return out

    def choose(self, crc: np.ndarray, switch: np.ndarray) -> np.ndarray:
        """The hash value each switch takes modulo its candidate count (see module doc)."""
        if self.hash_kind == "qp":   # an entry of a 256-entry member table (round-robin filled)
            return ((crc >> self.shift[switch]) ^ self.seeds[switch]) & np.uint32(0xFF)
        return fmix32(crc ^ self.seeds[switch])

    def _walk(self, src, dst, plane, crc) -> np.ndarray:
        n = len(src)
        out = np.full((n, self.max_links), -1, np.int64)
        cur = self.port_leaf[src, plane]
        goal = self.port_leaf[dst, plane]
        row = self._rows(self.cls[goal])
        twin = self.twin[goal]
        out[:, 0] = self.port_up[src, plane]
        k = np.ones(n, np.int64)
        live = cur != goal
        rows = np.arange(n)
        while live.any():
            r = rows[live]
            c = cur[r]
            h = np.ascontiguousarray(self.choose(crc[r], c), np.uint32)
            nxt, dirs = np.empty(len(r), np.int64), np.empty(len(r), np.int64)
            next_hops(self.ptr, self.nbr, self.ndir, self._dist, row[r], c, goal[r], twin[r], h, nxt, dirs)
            if (nxt < 0).any():
                raise RuntimeError("routing: a switch without a next hop on a shortest path")
            out[r, k[r]] = dirs
            cur[r] = nxt
            k[r] += 1
            live = cur != goal
        out[rows, k] = self.port_down[dst, plane]
        return out

    def node_after(self, route: np.ndarray, k: int) -> np.ndarray:
        """Node id each route reaches after its link k (-1 where the route is shorter)."""
        d = route[:, k] if route.shape[1] > k else np.full(len(route), -1, np.int64)
        links = self.fabric.links
        safe = np.maximum(d, 0) >> 1
        return np.where(d < 0, -1, np.where(d & 1, links["a"][safe], links["b"][safe])).astype(np.int64)

    def path_nodes(self, route: np.ndarray) -> list[int]:
        """Node ids along one route (link-direction ids, -1 padded)."""
        links = self.fabric.links
        dirs = route[route >= 0]
        ends = np.where(dirs & 1, links["a"][dirs >> 1], links["b"][dirs >> 1])
        first = links["a"][dirs[0] >> 1] if not dirs[0] & 1 else links["b"][dirs[0] >> 1]
        return [int(first)] + [int(x) for x in ends]
