"""manifest.json: flow.txt line -> flow row with the (sip, dip, sport) each line gets in the
simulators' fct files, the CommOps with their dependencies, the transfers of net ops that are not
lines, the NCCL connections (QPs) and their paths, and what `tracegen ns3 run` needs beyond
config.txt (NIC sharing, PFC, CNP, DCQCN)."""
from __future__ import annotations

import json

import numpy as np

from ...config import Job
from ...errors import OutputError
from ...tables import CollKind, Dim, Flows, LinkKind
from ...fabric.topology import Fabric
from .ns3_config import SIMAI_FCT_FILE
from .ns3_lines import BATCH, DPORT, QP_DTYPE, T0_NS, batches, qp_table

NIC_SHARING = ("serial", "fair")


def _sim_settings(flows: Flows, fabric: Fabric, job: Job) -> dict:
    """What `tracegen ns3 run` needs beyond config.txt: how the schedule shares a NIC, and the
    PFC and CNP settings of the job's network section."""
    net = job.network
    sharing = getattr(flows, "nic_sharing", "serial")
    if sharing not in NIC_SHARING:
        raise OutputError(f"ns3: flow table's nic_sharing {sharing!r} is not one of {NIC_SHARING}")
    return {
        "nic_sharing": sharing,
        "nic_sharing_note": "how the schedule shares a NIC among its transfers: serial (one "
                            "after the other, in order of readiness) or fair (max-min fair "
                            "share of every link); the ns-3 NIC arbitrates the same way",
        "cnp_interval_ns": round(net.cnp_interval_us * 1000),
        "dcqcn": {"byte_reset_bytes": int(net.dcqcn_byte_reset_bytes),
                  "per_message_reset": bool(net.dcqcn_per_message_reset),
                  "note": "the reaction point's keys config.txt cannot carry: the byte counter "
                          "(rpg_byte_reset; 0: timer only, HPCC's model) and whether every "
                          "message starts at line rate (HPCC and SimAI: a QP per flow) instead "
                          "of keeping its QP's rate state"},
        "pfc": {"enabled": bool(net.pfc), "buffer_bytes": net.buffer_bytes,
                "xoff_bytes": net.pfc_xoff_bytes, "resume_offset_bytes": net.pfc_resume_offset_bytes,
                "headroom_bytes": net.pfc_headroom_bytes, "pause_quanta": net.pfc_pause_quanta},
    }


def manifest(flows: Flows, fabric: Fabric, job: Job, lines: np.ndarray, warnings: list[str], link_events=None):
    """manifest.json in chunks: header, hosts, one flow record per flow.txt line, one op record
    per CommOp, then the transfers of NET ops that are not flow.txt lines (see _op_records)."""
    rows = flows.rows
    nic_rank = np.full(fabric.n_nics, -1, dtype=np.int64)
    nic_rank[fabric.rank_nic] = np.arange(fabric.world)
    hosts = [{"host": i, "rank": int(nic_rank[i]), "name": fabric.nic_name(i),
              "node": int(fabric.nic_node[i]), "rail": int(fabric.nic_rail[i]),
              "sim_ip": _sim_ip_hex(i), "nic_ip": fabric.nic_ip_str(i)}
             for i in range(fabric.n_nics)]
    zero = np.flatnonzero(flows.net & (rows["wire_bytes"] == 0))
    header = {
        "format": "tracegen-ns3/3",
        "job": job.name,
        "t0_ns": T0_NS,
        "flow_file": "flow.txt",
        "first_flow_line": 2,
        "note": "flows[k] is flow.txt line k+2; start in flow.txt = (t0_ns + start_ns) s*1e-9; "
                "flow.txt size = wire_bytes (payload + LL/LL128 flags), bytes = payload",
        "ops_note": "ops[i] is CommOp i: released gap_ns after its deps (op ids) complete; "
                    "op_start_ns/op_end_ns are the analytic release and completion; net: it has "
                    "flow.txt lines. local_transfers: the transfers of net ops that are not "
                    "flow.txt lines (NVLink, zero-byte NET), with analytic times and deps, so a "
                    "replay can follow flow deps through them",
        "cc_mode": job.network.cc_mode,
        "hpcc": {"config": "config.txt", "topology": "topology.txt", "fct": "fct.txt",
                 "sport": "hpcc_sport: 10000 + k-th flow of the (src, dst) pair, mod 65536 "
                          "(third.cc since 2020-07; before: host_sport, k-th flow of the "
                          "source host)"},
        "simai": {"config": "config_simai.txt", "topology": "topology_simai.txt",
                  "fct": SIMAI_FCT_FILE,
                  "sport": "hpcc_sport (SimAI numbers per (src, dst) pair, as HPCC)"},
        "sim": _sim_settings(flows, fabric, job),
        "qps_note": "qps[q]: one RC QP per NCCL connection (src/dst host, QPNs, UDP source "
                    "port on the wire); flows[k].qp names it. A qps record may carry `path`: "
                    "the node ids its packets cross (src host .. dst host), and `rpath`: the "
                    "node ids what its receiver returns (ACKs) crosses (dst host .. src host); "
                    "tracegen ns3 run routes them that way instead of by its own ECMP hash",
        "net_bytes": int(lines["bytes"].sum()),
        "net_wire_bytes": int(lines["wire_bytes"].sum()),
        "skipped_zero_byte_transfers": rows["transfer_id"][zero].tolist(),
        "warnings": warnings,
    }
    if link_events:                 # a scenario's timed link events (ns3_events.py)
        header["link_events_note"] = ("link_events[i]: at t0_ns + at_ns, the topology.txt links [a, b, gbps] "
                                      "change rate (0: down; a link's rate again: up), and the QPs in repin "
                                      "[qp, path, rpath] move to those node paths (the scenario's routes then)")
        header["link_events"] = link_events
    # Header indented; arrays one compact element per line (readable, diffable).
    yield json.dumps(header, indent=1)[:-2]
    yield ',\n "hosts": [\n' + ",\n".join("  " + json.dumps(h, separators=(",", ":"))
                                            for h in hosts) + "\n ]"
    yield ',\n "flows": ['
    ip = [_sim_ip_hex(i) for i in range(fabric.n_nics)]
    for lo, part in zip(range(0, len(lines), BATCH), batches(lines)):
        yield ("\n" if lo == 0 else ",\n") + ",\n".join(_flow_records(flows, part, lo, ip))
    yield "\n ]" if len(lines) else "]"
    op_recs, local_recs = _op_records(flows, lines)
    _, qps = qp_table(flows, fabric)
    qp_recs = [_QP_RECORD % r for r in zip(range(len(qps)), *(qps[k].tolist() for k in
                                                               QP_DTYPE.names))]
    paths_of = getattr(fabric, "qp_paths", None)   # the routing seam (see qp_table)
    if paths_of is not None and len(qps):
        for key, reverse in (("path", False), ("rpath", True)):
            paths = paths_of(qps["src"], qps["dst"], qps["sport"], qps["sqpn"], qps["dqpn"], reverse=reverse)
            qp_recs = [rec[:-1] + ',"%s":[%s]}' % (key, ",".join(map(str, p))) for rec, p in zip(qp_recs, paths)]
    for name, recs in (("ops", op_recs), ("local_transfers", local_recs), ("qps", qp_recs)):
        yield f',\n "{name}": [' + ("\n" + ",\n".join(recs) + "\n ]" if recs else "]")
    yield "\n}\n"


def _flow_records(flows: Flows, part: np.ndarray, first_index: int, ip: list[str]) -> list[str]:
    rows, ops, deps = flows.rows, flows.ops.rows, flows.deps
    sel = part["row"]
    op = rows["op_id"][sel]
    kind_label = {int(k): k.label for k in CollKind}
    dim_name = {int(d): d.name for d in Dim}
    cols = zip(range(first_index, first_index + len(part)), rows["transfer_id"][sel].tolist(),
               part["part"].tolist(), part["parts"].tolist(), op.tolist(),
               [kind_label[x] for x in ops["kind"][op].tolist()],
               [dim_name[x] for x in ops["dim"][op].tolist()],
               *(rows[k][sel].tolist() for k in ("step", "chunk", "channel", "src_rank",
                                                  "dst_rank")),
               part["src"].tolist(), part["dst"].tolist(), part["bytes"].tolist(),
               part["wire_bytes"].tolist(),
               rows["start_ns"][sel].tolist(), rows["end_ns"][sel].tolist(),
               part["hpcc_sport"].tolist(), part["host_sport"].tolist(), part["qp"].tolist(),
               deps.ptr[sel].tolist(), deps.ptr[sel + 1].tolist())
    dval = deps.values
    # A format string, not json.dumps per record: 5x faster at a million lines.
    return [_FLOW_RECORD % (k, tid, pt, pts, o, kind, dim, step, chunk, chan, sr, dr, src, dst,
                            nbytes, wbytes, start, end, ip[src], ip[dst], DPORT, hsp, hsp, osp,
                            qp, ",".join(map(str, dval[d0:d1].tolist())))
            for (k, tid, pt, pts, o, kind, dim, step, chunk, chan, sr, dr, src, dst, nbytes,
                 wbytes, start, end, hsp, osp, qp, d0, d1) in cols]


_FLOW_RECORD = (
    '{"index":%d,"transfer_id":%d,"part":%d,"parts":%d,"op_id":%d,"kind":"%s","dim":"%s",'
    '"step":%d,"chunk":%d,"channel":%d,"src_rank":%d,"dst_rank":%d,"src_nic":%d,"dst_nic":%d,'
    '"bytes":%d,"wire_bytes":%d,"start_ns":%d,"end_ns":%d,"sip":"%s","dip":"%s","dport":%d,'
    '"hpcc_sport":%d,"simai_sport":%d,"host_sport":%d,"qp":%d,"deps":[%s]}')
_QP_RECORD = '  {"qp":%d,"src":%d,"dst":%d,"sqpn":%d,"dqpn":%d,"sport":%d}'


def _op_times(flows: Flows) -> tuple[np.ndarray, np.ndarray]:
    """Analytic op release / completion: the schedule's, or (a hand-built table without them)
    the first transfer's start / the last transfer's end (0 for an op without transfers)."""
    n = len(flows.ops)
    if flows.op_start_ns is not None and flows.op_end_ns is not None:
        return (np.asarray(flows.op_start_ns, dtype=np.int64),
                np.asarray(flows.op_end_ns, dtype=np.int64))
    rows = flows.rows
    start = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    np.minimum.at(start, rows["op_id"], rows["start_ns"])
    np.maximum.at(end, rows["op_id"], rows["end_ns"])
    start[start == np.iinfo(np.int64).max] = 0
    return start, np.maximum(start, end)


def _op_records(flows: Flows, lines: np.ndarray) -> tuple[list[str], list[str]]:
    """One record per CommOp (all of them: NVLink-only ops and markers keep the chain), and one
    per transfer of a net op that is not a flow.txt line."""
    ops, rows = flows.ops.rows, flows.rows
    n = len(ops)
    start, end = _op_times(flows)
    net = np.zeros(n, dtype=bool)
    net[rows["op_id"][lines["row"]]] = True
    kind_label = {int(k): k.label for k in CollKind}
    dim_name = {int(d): d.name for d in Dim}
    dptr, dval = flows.ops.deps.ptr.tolist(), flows.ops.deps.values.tolist()
    op_recs = [_OP_RECORD % (o, kind_label[k], dim_name[d], it,
                             ",".join(map(str, dval[dptr[o]:dptr[o + 1]])), gap, s, e,
                             "true" if nt else "false", nb, nr)
               for o, k, d, it, gap, s, e, nt, nb, nr in zip(
                   ops["op_id"].tolist(), ops["kind"].tolist(), ops["dim"].tolist(),
                   ops["iteration"].tolist(), ops["gap_ns"].tolist(), start.tolist(), end.tolist(),
                   net.tolist(), ops["bytes"].tolist(), flows.ops.groups.lengths().tolist())]
    in_file = np.zeros(len(rows), dtype=bool)
    in_file[lines["row"]] = True
    local = np.flatnonzero(net[rows["op_id"]] & ~in_file)
    link_name = {int(x): x.name for x in LinkKind}
    tptr, tval = flows.deps.ptr, flows.deps.values
    local_recs = [_LOCAL_RECORD % (t, o, link_name[lk], s, e,
                                   ",".join(map(str, tval[tptr[t]:tptr[t + 1]].tolist())))
                  for t, o, lk, s, e in zip(
                      local.tolist(), rows["op_id"][local].tolist(), rows["link"][local].tolist(),
                      rows["start_ns"][local].tolist(), rows["end_ns"][local].tolist())]
    return op_recs, local_recs


_OP_RECORD = ('  {"op_id":%d,"kind":"%s","dim":"%s","iteration":%d,"deps":[%s],"gap_ns":%d,'
              '"op_start_ns":%d,"op_end_ns":%d,"net":%s,"bytes":%d,"ranks":%d}')
_LOCAL_RECORD = ('  {"transfer_id":%d,"op_id":%d,"link":"%s","start_ns":%d,"end_ns":%d,'
                 '"deps":[%s]}')


def _sim_ip_hex(host: int) -> str:
    """Host IP as the simulators print it in fct.txt ("%08x")."""
    return f"{0x0B000001 + (host // 256) * 0x10000 + (host % 256) * 0x100:08x}"
