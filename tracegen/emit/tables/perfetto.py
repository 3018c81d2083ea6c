"""Flow table -> perfetto.json: the schedule as a Chrome trace-event file (open it in ui.perfetto.dev
or chrome://tracing).

Tracks (a "process" per rank and per NIC, so each folds open on its own):
  * rank r (node, GPU): `compute` (the compute gaps the workload puts before each op, merged) and
    `collectives` (one slice per CommOp the rank takes part in, from its release to its last
    transfer's end, named "TP AllReduce", "PP SendRecv"...). Ops that overlap in time on one rank
    (DP buckets under backward) go to extra lanes `collectives 2`, `collectives 3`...
  * NIC node0001-rail0: `tx` and `rx`, one slice per transfer on the fabric (lanes as above when
    the schedule overlaps them).
  * flow arrows: CommOp -> the ops that depend on it (rank tracks), and on the NIC tracks transfer
    -> the fabric transfers that need its data.

Time: `ts`/`dur` in microseconds (the format's unit) with three decimals: the schedule's integer
nanoseconds exactly (no `displayTimeUnit`: Perfetto versions have read it as the unit of `ts`). Slices on one thread never overlap (lanes), and every arrow end sits strictly
inside its slice, so arrows bind to the right slices. Big jobs: NIC tracks are capped at
`MAX_NIC_SLICES` (the selected NICs first, `output.nics` / `output.ranks`), arrows at `MAX_ARROWS`;
what was left out is said in the trace's metadata.
"""
from __future__ import annotations

import heapq
import json
import time
from pathlib import Path

import numpy as np

from ... import progress
from ...tables import CollKind, Dim, Flows, LinkKind

MAX_NIC_SLICES = 1_000_000     # ~300 MB of JSON: what a browser tab opens comfortably
MAX_ARROWS = 200_000
LANE_STRIDE = 1000          # tid = pid * LANE_STRIDE + lane: thread ids unique over the whole trace


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy interval packing: lane per interval so that intervals in one lane never overlap.
    Intervals are visited by start; an interval takes the lowest-numbered free lane."""
    order = np.lexsort((end, start))
    lane = np.zeros(len(start), np.int64)
    busy: list[tuple[int, int]] = []     # (end, lane) of lanes in use
    free: list[int] = []
    n_lanes = 0
    s_list, e_list = start[order].tolist(), end[order].tolist()
    for k, (s, e) in enumerate(zip(s_list, e_list)):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            ln = heapq.heappop(free)
        else:
            ln, n_lanes = n_lanes, n_lanes + 1
        lane[order[k]] = ln
        heapq.heappush(busy, (e, ln))
    return lane


def _merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, as sorted disjoint intervals."""
    if not len(start):
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


class _Writer:
    def __init__(self, f):
        self.f, self.first, self.count = f, True, 0

    def __call__(self, ev: dict) -> None:
        self.lines([json.dumps(ev, separators=(",", ":"))])

    def lines(self, events: list[str]) -> None:
        """Events already in JSON (the hot paths format them with f-strings: json.dumps per event
        was most of the file's time at 16k GPUs); the same bytes as __call__ would write."""
        if not events:
            return
        self.f.write(("" if self.first else ",\n") + ",\n".join(events))
        self.first = False
        self.count += len(events)


def _us_list(ns) -> list[float]:
    """_us of each value: the floats json.dumps writes (Python's round, as _us)."""
    return [round(x / 1000, 3) for x in np.asarray(ns).tolist()]


def _merge_per_rank(rank: np.ndarray, start: np.ndarray, end: np.ndarray, world: int):
    """_merge of each rank's intervals: [(starts, ends)] by rank."""
    o = np.argsort(rank, kind="stable")
    b = np.searchsorted(rank[o], np.arange(world + 1))
    s, e = start[o], end[o]
    return [_merge(s[b[k]:b[k + 1]], e[b[k]:b[k + 1]]) for k in range(world)]


def _utc_text(ns: int) -> str:
    """Epoch ns as ISO 8601 UTC with all nine fraction digits (datetime would keep six)."""
    sec, frac = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{frac:09d}Z"


def write_perfetto(flows: Flows, fabric, path: Path, title: str = "", nic_mask: np.ndarray | None = None,
                   max_nic_slices: int = MAX_NIC_SLICES, max_arrows: int = MAX_ARROWS, start_ns: int = 0) -> dict:
    """Write the trace; returns counts (slices, arrows, NICs shown) for the summary. start_ns
    (output.start_time): `ts` stays relative to it; it goes into otherData as start_time_ns (and
    as UTC text). Absolute epoch µs (~1.8e15) would still be exact in a double at µs, but not the
    three decimals (ns) every `ts` carries; and Perfetto shows times from the trace's start anyway."""
    ops, groups = flows.ops.rows, flows.ops.groups
    world, n_nics = fabric.world, fabric.n_nics
    op_start = flows.op_start_ns if flows.op_start_ns is not None else np.full(len(ops), -1, np.int64)
    op_end = flows.op_end_ns if flows.op_end_ns is not None else np.full(len(ops), -1, np.int64)
    dim_names = {int(d): d.name for d in Dim}
    coll = {int(k): k.label for k in CollKind}
    rank_pid = lambda r: 1 + r
    nic_pid = lambda n: 1 + world + n

    # --- rank tracks: one (op, rank) pair per member of each op's group -------------------------
    glen = groups.lengths()
    pair_op = np.repeat(np.arange(len(ops)), glen)
    pair_rank = groups.values.astype(np.int64)
    real = (ops["kind"][pair_op] != CollKind.MARKER) & (op_start[pair_op] >= 0)
    real &= op_end[pair_op] >= op_start[pair_op]
    c_op, c_rank = pair_op[real], pair_rank[real]
    c_s, c_e = op_start[c_op], op_end[c_op]
    c_lane = np.zeros(len(c_op), np.int64)
    by_rank = np.argsort(c_rank, kind="stable")
    bounds = np.searchsorted(c_rank[by_rank], np.arange(world + 1))
    for r in range(world):
        idx = by_rank[bounds[r]:bounds[r + 1]]
        if len(idx):
            c_lane[idx] = _lanes(c_s[idx], c_e[idx])
    # compute: gap_ns before each op's release, on its members (a p2p op: the sender only)
    sender_only = ops["kind"][pair_op] == CollKind.SENDRECV
    first = np.zeros(len(pair_op), bool)
    first[groups.ptr[:-1][glen > 0]] = True
    keep = (ops["gap_ns"][pair_op] > 0) & (op_start[pair_op] >= 0) & (~sender_only | first)
    g_rank, g_e = pair_rank[keep], op_start[pair_op[keep]]
    g_s = g_e - ops["gap_ns"][pair_op[keep]]

    # --- NIC tracks: fabric transfers, tx on the source NIC and rx on the destination NIC -------
    r = flows.rows
    net_idx = np.flatnonzero(r["link"] == LinkKind.NET)
    shown = np.ones(n_nics, bool) if nic_mask is None else nic_mask.copy()
    per_nic = np.bincount(r["src_nic"][net_idx], minlength=n_nics) + np.bincount(r["dst_nic"][net_idx],
                                                                                 minlength=n_nics)
    if per_nic[shown].sum() > max_nic_slices:   # keep whole NICs, in index order, up to the cap
        cum = np.cumsum(np.where(shown, per_nic, 0))
        shown &= cum <= max_nic_slices
    nics_shown = int(shown.sum())
    tx_idx = net_idx[shown[r["src_nic"][net_idx]]]
    rx_idx = net_idx[shown[r["dst_nic"][net_idx]]]

    def nic_lanes(idx, nic_col):
        lane = np.zeros(len(idx), np.int64)
        nic = r[nic_col][idx]
        o = np.argsort(nic, kind="stable")
        b = np.searchsorted(nic[o], np.arange(n_nics + 1))
        for n in np.flatnonzero(np.diff(b)):
            sel = o[b[n]:b[n + 1]]
            lane[sel] = _lanes(r["start_ns"][idx[sel]], r["end_ns"][idx[sel]])
        return lane

    tx_lane, rx_lane = nic_lanes(tx_idx, "src_nic"), nic_lanes(rx_idx, "dst_nic")

    counts = {"rank_slices": 0, "compute_slices": 0, "nic_slices": 0, "arrows": 0,
              "nics_shown": nics_shown, "nics": n_nics, "arrows_dropped": 0}
    with open(path, "w") as f:
        f.write('{"otherData":' + json.dumps(
            {"generator": "tracegen", "title": title, "nics_shown": f"{nics_shown} of {n_nics}",
             "time": "ts/dur in µs; the schedule is integer ns",
             **({"start_time_ns": start_ns, "start_time": _utc_text(start_ns),
                 "ts_origin": "ts 0 is start_time_ns (output.start_time)"} if start_ns else {})},
            separators=(",", ":"))
            + ',"traceEvents":[\n')
        emit = _Writer(f)

        def meta(pid, tid, name, sort):
            if tid is None:
                emit({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
                emit({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": sort}})
            else:
                emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
                emit({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort}})

        # names and order of tracks
        c_lanes_of = np.zeros(world, np.int64)
        np.maximum.at(c_lanes_of, c_rank, c_lane + 1)
        for rank in range(world):
            pid = rank_pid(rank)
            meta(pid, None, f"rank {rank} (node {int(fabric.rank_node[rank])}, GPU {int(fabric.rank_gpu[rank])})", pid)
            meta(pid, pid * LANE_STRIDE, "compute", 0)
            for ln in range(max(1, int(c_lanes_of[rank]))):
                meta(pid, pid * LANE_STRIDE + 1 + ln, "collectives" + (f" {ln + 1}" if ln else ""), 1 + ln)
        tx_lanes_of = np.zeros(n_nics, np.int64)
        rx_lanes_of = np.zeros(n_nics, np.int64)
        np.maximum.at(tx_lanes_of, r["src_nic"][tx_idx], tx_lane + 1)
        np.maximum.at(rx_lanes_of, r["dst_nic"][rx_idx], rx_lane + 1)
        half = LANE_STRIDE // 2
        for nic in np.flatnonzero(shown).tolist():
            pid = nic_pid(nic)
            meta(pid, None, f"NIC {fabric.nic_name(nic)}", pid)
            for ln in range(max(1, int(tx_lanes_of[nic]))):
                meta(pid, pid * LANE_STRIDE + ln, "tx" + (f" {ln + 1}" if ln else ""), ln)
            for ln in range(max(1, int(rx_lanes_of[nic]))):
                meta(pid, pid * LANE_STRIDE + half + ln, "rx" + (f" {ln + 1}" if ln else ""), half + ln)

        # compute slices (merged per rank)
        merged = _merge_per_rank(g_rank, g_s, g_e, world)
        n_compute = sum(len(s) for s, _ in merged)
        total = n_compute + len(c_op) + len(tx_idx) + len(rx_idx)   # slices on the CLI's bar, per block
        done = 0
        for rank, (s, e) in enumerate(merged):
            if done // progress.BLOCK_ROWS != (done + len(s)) // progress.BLOCK_ROWS:
                progress.report(done, total)
            done += len(s)
            pid = rank_pid(rank)
            head = f'{{"ph":"X","name":"compute","cat":"compute","pid":{pid},"tid":{pid * LANE_STRIDE},"ts":'
            emit.lines([f'{head}{a},"dur":{d}}}' for a, d in zip(_us_list(s), _us_list(e - s))])
            counts["compute_slices"] += len(s)

        # collective slices: per op, its name, category and arguments formatted once
        c_tid = rank_pid(c_rank) * LANE_STRIDE + 1 + c_lane
        o = np.lexsort((c_s, c_tid))
        phases = ["FWD", "BWD", "OPT"]
        op_head, op_tail = {}, {}
        for op_id in np.unique(c_op).tolist():
            row = ops[op_id]
            dim = dim_names[int(row["dim"])]
            op_head[op_id] = '{"ph":"X","name":' + json.dumps(f"{dim} {coll[int(row['kind'])]}") + ',"cat":' + \
                json.dumps(dim) + ',"pid":'
            op_tail[op_id] = ',"args":' + json.dumps(
                {"op_id": op_id, "bytes": int(row["bytes"]), "group": int(glen[op_id]),
                 "phase": phases[int(row["phase"])], "layer": int(row["layer"]),
                 "microbatch": int(row["microbatch"]), "bucket": int(row["bucket"]),
                 "iteration": int(row["iteration"])}, separators=(",", ":")) + "}"
        for lo in range(0, len(o), progress.BLOCK_ROWS):
            k = o[lo:lo + progress.BLOCK_ROWS]
            emit.lines([f'{op_head[op]}{pid},"tid":{tid},"ts":{a},"dur":{d}{op_tail[op]}' for op, pid, tid, a, d in
                        zip(c_op[k].tolist(), rank_pid(c_rank[k]).tolist(), c_tid[k].tolist(), _us_list(c_s[k]),
                            _us_list(c_e[k] - c_s[k]))])
            counts["rank_slices"] += len(k)
            progress.report(n_compute + lo + len(k), total)

        # NIC slices
        op_of = r["op_id"]
        done = n_compute + len(c_op)
        op_name = {}
        for op_id in np.unique(op_of[np.r_[tx_idx, rx_idx]]).tolist():
            dim = dim_names[int(ops[op_id]["dim"])]
            op_name[op_id] = '{"ph":"X","name":' + json.dumps(f"{dim} {coll[int(ops[op_id]['kind'])]}") + \
                ',"cat":' + json.dumps(dim) + ',"pid":'
        nic_names = {}
        for idx, lane, nic_col, peer_col, base, done in ((tx_idx, tx_lane, "src_nic", "dst_nic", 0, done),
                                                         (rx_idx, rx_lane, "dst_nic", "src_nic", half,
                                                          done + len(tx_idx))):
            tid = nic_pid(r[nic_col][idx]) * LANE_STRIDE + base + lane
            o = np.lexsort((r["start_ns"][idx], tid))
            for lo in range(0, len(o), progress.BLOCK_ROWS):
                k = o[lo:lo + progress.BLOCK_ROWS]
                t = idx[k]
                peers = r[peer_col][t].tolist()
                for n in set(peers) - nic_names.keys():
                    nic_names[n] = json.dumps(fabric.nic_name(n))
                emit.lines([f'{op_name[op]}{pid},"tid":{td},"ts":{a},"dur":{d},"args":{{"transfer_id":{tr},'
                            f'"op_id":{op},"bytes":{nb},"peer":{nic_names[pe]},"src_rank":{sr},"dst_rank":{dr},'
                            f'"step":{st},"channel":{ch},"chunk":{cu}}}}}'
                            for op, pid, td, a, d, tr, nb, pe, sr, dr, st, ch, cu in
                            zip(op_of[t].tolist(), nic_pid(r[nic_col][t]).tolist(), tid[k].tolist(),
                                _us_list(r["start_ns"][t]), _us_list(r["end_ns"][t] - r["start_ns"][t]),
                                t.tolist(), r["bytes"][t].tolist(), peers, r["src_rank"][t].tolist(),
                                r["dst_rank"][t].tolist(), r["step"][t].tolist(), r["channel"][t].tolist(),
                                r["chunk"][t].tolist())])
                counts["nic_slices"] += len(k)
                progress.report(done + lo + len(k), total)

        # arrows: (pid, tid, ts_ns inside the source slice) -> (pid, tid, ts_ns inside the target)
        arrows = []
        # op -> dependent op, on a rank both share (else the first member of each)
        slot = dict(zip(zip(c_op.tolist(), c_rank.tolist()),            # (op, rank) -> (tid, start, end)
                        zip(c_tid.tolist(), c_s.tolist(), c_e.tolist())))
        first_rank = {}
        for (op_id, rank) in slot:
            first_rank.setdefault(op_id, rank)
        odeps = flows.ops.deps
        for a in sorted(first_rank):
            members_a = set(groups[a].tolist())
            for b in odeps[a].tolist():
                if b not in first_rank:
                    continue
                common = [x for x in groups[b].tolist() if x in members_a and (a, x) in slot and (b, x) in slot]
                ra, rb = (common[0], common[0]) if common else (first_rank[a], first_rank[b])
                arrows.append(("dep", slot[(b, rb)], rank_pid(rb), slot[(a, ra)], rank_pid(ra)))
        # fabric transfer -> fabric transfer that needs its data (tx tracks)
        tx_slot = {int(t): (int(nic_pid(r["src_nic"][t]) * LANE_STRIDE + ln), int(r["start_ns"][t]),
                            int(r["end_ns"][t])) for t, ln in zip(tx_idx.tolist(), tx_lane.tolist())}
        for t in sorted(tx_slot):
            for d in flows.deps[t].tolist():
                if d in tx_slot:
                    arrows.append(("data", tx_slot[d], tx_slot[d][0] // LANE_STRIDE, tx_slot[t],
                                   tx_slot[t][0] // LANE_STRIDE))
        flow_id = 0
        for cat, (stid, ss, se), spid, (ttid, ts_, te), tpid in arrows:
            if se - ss < 2 or te - ts_ < 2:
                continue          # a slice too short to hold an arrow end strictly inside
            if flow_id >= max_arrows:
                counts["arrows_dropped"] += 1
                continue
            flow_id += 1
            emit({"ph": "s", "name": cat, "cat": cat, "id": flow_id, "pid": int(spid), "tid": stid,
                  "ts": _us(ss + (se - ss) // 2)})
            emit({"ph": "f", "bp": "e", "name": cat, "cat": cat, "id": flow_id, "pid": int(tpid), "tid": ttid,
                  "ts": _us(ts_ + (te - ts_) // 2)})
        counts["arrows"] = flow_id
        f.write("\n]}\n")
    return counts
