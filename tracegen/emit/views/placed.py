"""Chunks only where they are written: a connection-level schedule's pcaps for the selected NICs.

A job timed per connection (detail conn) has one row per (op, NCCL connection). To write the pcaps
of a few NICs, only the ops whose network connections touch them are expanded into NCCL's chunk
transfers (collectives.expand_parts, a block of ops at a time; a folded op (CommOps.replicas) for each replica it has there, its
ranks shifted; a ring AllReduce too large to list, from ring_edges' closed form for the ring
positions involved), and only the chunks a selected NIC sends or receives are kept. Each chunk is
placed inside its connection row's interval, in step order, in proportion to the bytes before
it: the row's [start, last byte sent] is what the fluid schedule gave the connection for this op,
so the chunks keep its rate and the op's timing; where that rate changed (Flows.item_rates, the
connection's fluid item's rate records) the chunks lie on the connection's sent-bytes curve, each
carrying its stretch of it (ItemRates.within) so that its packets follow it. The QP numbers, UDP source ports and routes are
the whole job's (Flows.conns), PSNs and IPv4 identifications count from the first frame of a
selected NIC's QPs (every frame of those QPs is kept); a peer NIC's own counters only see the
frames kept.
"""
from __future__ import annotations

import numpy as np

from ...timing import fluid
from ... import progress
from ...collectives import expand_parts, op_templates
from ...collectives.edges import net_wire_bytes, pxn_split
from ...collectives.ring_edges import RingShape
from ...collectives.ring import ring_orders
from ...timing.connections import communicator
from ...timing.conn_edges import CLOSED_FORM_ROWS
from ...tables import FLOW_DTYPE, LinkKind, Ragged, Flows
from ...errors import ConfigError
from ...fabric.kinds import LEAF
from ..packets.select import parse


def placed_flows(run) -> Flows:
    """Chunk-level flows for the NICs the job's output selects, inside run.flows' timing."""
    flows, ops, fabric, job = run.flows, run.ops, run.fabric, run.job
    out = job.output
    mask = shown_nics(out, fabric)
    r = flows.rows
    net = r["link"] == LinkKind.NET
    touch = net & (mask[np.maximum(r["src_nic"], 0)] | mask[np.maximum(r["dst_nic"], 0)])
    conn_rows = np.flatnonzero(touch)
    op = r["op_id"][conn_rows].astype(np.int64)
    stride, reps = max(ops.replica_stride, 1), ops.replicas
    shift = np.where(ops.tiled()[op], ((r["src_rank"][conn_rows] // stride) % reps) * stride, 0)
    pairs = np.unique(np.column_stack([op, shift]), axis=0) if len(op) else np.zeros((0, 2), np.int64)
    cols = _chunks(ops, fabric, job, pairs, mask)
    if cols is None:
        return _table(flows, ops, fabric, {k: np.zeros(0, np.int64) for k in _COLS}, np.zeros(0, np.int64),
                      np.zeros(0, np.int64), np.zeros(0, np.int64))
    # each chunk's connection row: (op, src rank, dst rank, channel)
    world = fabric.world
    key = lambda o, s, d, c: ((np.asarray(o, np.int64) * world + s) * world + d) * 1024 + c
    row_keys = key(r["op_id"][conn_rows], r["src_rank"][conn_rows], r["dst_rank"][conn_rows], r["channel"][conn_rows])
    order = np.argsort(row_keys)
    k = key(cols["op_id"], cols["src_rank"], cols["dst_rank"], cols["channel"])
    at = np.searchsorted(row_keys[order], k)
    if len(k) and ((at >= len(order)).any() or (row_keys[order][np.minimum(at, len(order) - 1)] != k).any()):
        raise RuntimeError("a chunk without its connection row: the expansion and the schedule disagree")
    row = conn_rows[order[at]]
    # place: chunks of one row in step order, by their bytes on the wire
    w = net_wire_bytes(cols["wire_bytes"], np.maximum(cols["max_msg_bytes"], 1), out.pmtu, out.vlan,
                       out.ip_version).astype(np.int64)
    seq = np.lexsort((cols["chunk"], cols["step"], row))
    row_s, w_s = row[seq], w[seq]
    first = np.r_[True, row_s[1:] != row_s[:-1]]
    cum = np.cumsum(w_s)
    base = np.maximum.accumulate(np.where(first, cum - w_s, 0))
    before, through = cum - w_s - base, cum - base
    total = np.zeros(len(r), np.int64)
    np.add.at(total, row_s, w_s)
    s, f = r["start_ns"][row_s].astype(np.int64), flows.finish_ns[row_s].astype(np.int64)
    lat = r["end_ns"][row_s].astype(np.int64) - f
    span = np.maximum(f - s, 0).astype(np.float64)
    t_start = s + np.floor(span * before / np.maximum(total[row_s], 1)).astype(np.int64)
    t_fin = s + np.ceil(span * through / np.maximum(total[row_s], 1)).astype(np.int64)
    if flows.item_rates is not None and flows.row_item is not None:
        # the connection's rate changed meanwhile (other traffic joined or left its links): its
        # chunks on its sent-bytes curve, each chunk at the rate it had then
        it = flows.row_item[row_s]
        a, ok = fluid.progress_times(flows.item_rates, it, before / np.maximum(total[row_s], 1), f)
        b, _ = fluid.progress_times(flows.item_rates, it, through / np.maximum(total[row_s], 1), f)
        t_start[ok] = np.clip(np.floor(a[ok]).astype(np.int64), s[ok], f[ok])
        t_fin[ok] = np.clip(np.ceil(b[ok]).astype(np.int64), t_start[ok], f[ok])
    rates = None
    if flows.item_rates is not None and flows.row_item is not None:
        # each chunk gets its stretch of its connection's curve: its packets follow it (emit/packets/rate_curve.py)
        rates = flows.item_rates.within(flows.row_item[row_s], t_start, t_fin)
    cols = {name: v[seq] for name, v in cols.items()}
    return _table(flows, ops, fabric, cols, t_start, t_fin + lat, t_fin, rates)


def shown_nics(out, fabric) -> np.ndarray:
    """Mask of the NICs whose traffic the view can show: the --nics/--ranks selection, narrowed
    to a leaf's NICs for a leaf's switch view (its ports carry only their traffic) or to the
    lab plan's hosts. Switches above the leaves carry any NIC's traffic: refused (ConfigError)."""
    mask = parse(out, fabric).nic_mask.copy()
    if out.switch:
        from .files import switch_index
        sw = switch_index(fabric, out.switch)
        if fabric.sw_tier[sw] != LEAF:
            raise ConfigError(f"output.switch={out.switch.strip()!r}: a job timed per connection expands chunks "
                              "only for the NICs shown, and a switch above the leaves carries any NIC's traffic; "
                              "use a leaf view, --nics, or --detail full")
        mask &= (fabric.nic_port_leaf == sw).any(axis=1)
    if out.lab:
        from .lab import load
        lab_nics = np.zeros(fabric.n_nics, bool)
        lab_nics[list(load(out, fabric).nics)] = True
        mask &= lab_nics
    return mask


_COLS = ("op_id", "algo", "proto", "max_msg_bytes", "src_rank", "dst_rank", "channel", "step", "chunk",
         "bytes", "wire_bytes", "link")


# Chunk rows expanded at a time (a block of whole ops; 131,072 GPUs: the selected NICs' ops list
# ~38 M chunk rows of every rank, of which only the selected NICs' are kept): memory bounded by a block.
EXPAND_BLOCK_ROWS = 1 << 21


def _chunks(ops, fabric, job, pairs, mask):
    """Chunk transfers (columns) of the (op, rank shift) pairs that a selected NIC sends or receives."""
    if not len(pairs):
        return None
    need = np.unique(pairs[:, 0])
    listed, big = [], []
    for part in op_templates(ops, fabric, job.nccl, need.tolist(), max_rows=CLOSED_FORM_ROWS):
        (big if isinstance(part[2], RingShape) else listed).append(part)
    big = [i for i, *_ in big]
    todo = pairs[np.isin(pairs[:, 0], [i for i, *_ in listed])]
    cols = {k: [] for k in _COLS}
    work, done = len(todo) + len(big), 0         # the CLI's bar: (op, replica) pairs, then big rings
    lo = 0
    while lo < len(listed):                      # blocks of whole ops, in op order (as pairs)
        hi, rows = lo + 1, len(listed[lo][2])
        while hi < len(listed) and rows + len(listed[hi][2]) <= EXPAND_BLOCK_ROWS:
            rows += len(listed[hi][2])
            hi += 1
        block = listed[lo:hi]
        tr = expand_parts(block, fabric, job.nccl).rows
        ops_sorted = tr["op_id"].astype(np.int64)     # op order already (parts in op order)
        mine = todo[(todo[:, 0] >= block[0][0]) & (todo[:, 0] <= block[-1][0])]
        for o, sh in progress.counted(mine.tolist(), total=work, done=done):
            a, b = np.searchsorted(ops_sorted, [o, o + 1])
            t = tr[a:b]
            src, dst = t["src_rank"].astype(np.int64) + sh, t["dst_rank"].astype(np.int64) + sh
            keep = (t["link"] == LinkKind.NET) & (mask[fabric.rank_nic[src]] | mask[fabric.rank_nic[dst]])
            for k in _COLS:
                cols[k].append(src[keep] if k == "src_rank" else dst[keep] if k == "dst_rank" else t[k][keep])
        done += len(mine)
        del tr, ops_sorted
        lo = hi
    for o in progress.counted(big, total=work, done=done, block=1):
        for k, v in _ring_rows(ops, fabric, job, o, mask).items():
            cols[k].append(v)
    return {k: np.concatenate(v).astype(np.int64) if v else np.zeros(0, np.int64) for k, v in cols.items()}


def _ring_rows(ops, fabric, job, o: int, mask) -> dict:
    """The chunk transfers of a ring AllReduce too large to list (ring.allreduce's rows), only those
    a selected NIC sends or receives: per channel, the ring positions on a selected NIC's node or
    sending to a selected NIC's GPU, each of their 2(n-1) steps per loop, empty chunks
    dropped; cross-rail sends split by PXN as expand does."""
    [(_, group, shape, plan)] = op_templates(ops, fabric, job.nccl, [o], max_rows=CLOSED_FORM_ROWS)
    n, C = shape.n, shape.channels
    order = ring_orders(shape.nodes, shape.local, C)
    size = shape.block_bytes()                                    # [loops, C, n]
    steps = 2 * (n - 1)
    k = np.arange(steps)
    cols = {name: [] for name in _COLS}
    node_sel = np.zeros(fabric.nodes, bool)
    node_sel[fabric.rank_node[np.flatnonzero(mask[fabric.rank_nic])]] = True
    for c in range(C):
        pos = order[c]
        src, dst = group[pos], group[np.roll(pos, -1)]
        # a send's network leg leaves from its node (PXN: through the GPU on the receiver's rail)
        i = np.flatnonzero(node_sel[fabric.rank_node[src]] | mask[fabric.rank_nic[dst]])
        if not len(i):
            continue
        blk = np.where(k[None, :] < n - 1, (i[:, None] - k[None, :]) % n, (i[:, None] + 1 - (k[None, :] - (n - 1))) % n)
        for L in range(size.shape[0]):
            b = size[L, c][blk]                                   # [positions, steps]
            live = b > 0
            ii, kk = np.nonzero(live)
            m = len(ii)
            vals = dict(op_id=np.full(m, o), algo=np.full(m, int(plan.algo_id)), proto=np.full(m, int(plan.proto)),
                        max_msg_bytes=np.full(m, plan.max_msg_bytes), src_rank=src[i[ii]], dst_rank=dst[i[ii]],
                        channel=np.full(m, c), step=kk, chunk=(L * C + c) * n + blk[ii, kk], bytes=b[ii, kk],
                        wire_bytes=b[ii, kk], link=np.where(fabric.same_node(src[i[ii]], dst[i[ii]]),
                                                          int(LinkKind.NVLINK), int(LinkKind.NET)))
            vals = {name: np.asarray(v, np.int64) for name, v in vals.items()}
            if job.nccl.pxn and m:
                names = [x for x in _COLS if x not in ("src_rank", "dst_rank", "link")]
                sr, dr, lk, _, *rest = pxn_split(vals["src_rank"], vals["dst_rank"], vals["link"], fabric,
                                                 *(vals[x] for x in names))
                vals = dict(zip(names, rest), src_rank=sr, dst_rank=dr, link=lk.astype(np.int64))
            keep = (vals["link"] == LinkKind.NET) & (mask[fabric.rank_nic[vals["src_rank"]]]
                                                     | mask[fabric.rank_nic[vals["dst_rank"]]])
            for name in _COLS:
                cols[name].append(vals[name][keep])
    from ...collectives.protocol import wire_bytes
    out = {name: np.concatenate(v).astype(np.int64) if v else np.zeros(0, np.int64) for name, v in cols.items()}
    out["wire_bytes"] = wire_bytes(out["bytes"], np.full(len(out["bytes"]), int(plan.proto)))
    return out


def _table(flows: Flows, ops, fabric, cols: dict, start, end, finish, rates=None) -> Flows:
    n = len(cols["op_id"])
    rows = np.zeros(n, FLOW_DTYPE)
    rows["transfer_id"] = np.arange(n)
    for name in _COLS:
        rows[name] = cols[name]
    rows["src_nic"], rows["dst_nic"] = fabric.rank_nic[cols["src_rank"]], fabric.rank_nic[cols["dst_rank"]]
    rows["start_ns"], rows["end_ns"] = start, end
    row_conn = (flows.conns.lookup(cols["src_rank"], cols["dst_rank"],
                                   communicator(ops.rows["dim"][cols["op_id"]]), cols["channel"])
                if n else np.zeros(0, np.int64))
    return Flows(rows, Ragged.empty(n), ops, flows.op_start_ns, flows.op_end_ns, conns=flows.conns,
                 row_conn=row_conn, finish_ns=np.asarray(finish, np.int64), detail="placed", item_rates=rates,
                 nic_sharing=flows.nic_sharing, op_tc=flows.op_tc)
