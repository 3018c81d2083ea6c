"""CommOp table -> Chakra execution traces (MLCommons Chakra ET), one `<name>.<rank>.et` per rank.

Written with the `mlc-chakra` package's own protobuf schema (chakra.schema.protobuf.et_def_pb2)
and writer (chakra.src.third_party.utils.protolib.encodeMessage: a varint length before each
message): a GlobalMetadata, then the rank's Node messages in dependency order, as ASTRA-sim 2.x
reads them (astra-sim/workload/Workload.cc: `<prefix>.<rank>.et` through the Chakra feeder).

Per rank, for every CommOp the rank takes part in (its group holds the rank), in dependency
order (node ids count up, every data dep has a lower id):
  COMP_NODE      "compute before op N": the piece of the rank's compute it runs right before
                 the op (rank_steps: a forked op's gap is not run twice, a receiver does not run
                 its sender's), exact ns in attr `duration_ns`; `duration_micros` (what
                 ASTRA-sim replays: Workload::issue_replay, µs x 1000, 0 -> 1 ns; one compute
                 node at a time, HardwareResource) rounded so that the rank's running total
                 stays within 0.5 µs of the exact one
  COMM_COLL_NODE a collective: attrs comm_type (Chakra's CollectiveCommType), pg_name (a group
                 of comm_groups.json), comm_size = the bytes each rank puts IN, as PyTorch ET
                 records them (chakra's converter: PyTorchNode.comm_size sums the input tensors)
                 and as ASTRA-sim reads them (Workload::issue_coll_comm -> Ring::Ring):
                   AllReduce      the buffer S         ring moves 2(n-1)/n·S per rank
                   ReduceScatter  the input S          msg S/n, n-1 steps: (n-1)/n·S
                   AllGather      one rank's shard S/n msg S/n, n-1 steps: (n-1)/n·S
                                  (ASTRA-sim's final size is comm_size·n: writing the gathered
                                  S would cost n times too much)
                   AllToAll       the send buffer S    msg S/n to each of n-1 peers
                   Broadcast      S; ASTRA-sim does not simulate it: it waits the node's
                                  duration_micros, 0 here, so 1 ns
  COMM_SEND_NODE / COMM_RECV_NODE
                 a point-to-point op (group [src, dst]): comm_dst / comm_src, comm_tag (the op
                 id, the same on both sides), comm_size
  data deps: the compute node before it, else the previous compute piece of its stream point,
  else the rank's nodes of the op's dep ops (deps on ops of other ranks are carried by the
  communication itself). Markers (end of iteration) have no
  communication: their compute node, if any, stands for them.
comm_groups.json: {"<pg_name>": [ranks]}, ASTRA-sim's --comm-group-configuration
(Workload::initialize_comm_groups: stoi of each key, a list of NPU ids; ids start at 1 because
CommunicatorGroup::set_id asserts id > 0 and pg_name "0" means all ranks in
Workload::extract_comm_group); without it a rank stops at its first collective ("communicator
group not found"). What each group is (dim, ranks): comm_groups_info.json.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ... import __version__
from ...errors import ConfigError, OutputError
from ...tables import CollKind, CommOps, Dim
from .rank_steps import rank_steps, topo_order  # noqa: F401 (topo_order: simai)

SCHEMA = "1.0.2-chakra.1.0.0"   # what mlc-chakra's own converters put in GlobalMetadata
COLL_TYPE = {CollKind.ALLREDUCE: "ALL_REDUCE", CollKind.REDUCESCATTER: "REDUCE_SCATTER",
             CollKind.ALLGATHER: "ALL_GATHER", CollKind.ALLTOALL: "ALL_TO_ALL",
             CollKind.BROADCAST: "BROADCAST", CollKind.REDUCE: "REDUCE"}


def _chakra():
    try:
        from chakra.schema.protobuf import et_def_pb2 as pb
        from chakra.src.third_party.utils.protolib import encodeMessage
    except ImportError as e:
        raise ConfigError(f"Chakra export needs the mlc-chakra package ({e}); install it: "
                          "pip install 'tracegen[chakra]'") from None
    return pb, encodeMessage


def process_groups(ops: CommOps) -> tuple[np.ndarray, dict[int, dict]]:
    """pg id per op (0: none, point-to-point and markers) and {id: {"dim", "ranks"}}: one group
    per distinct (dim, ranks in order) of the collectives, numbered from 1 in op order."""
    pg = np.zeros(len(ops), dtype=np.int64)
    groups: dict[tuple, int] = {}
    info: dict[int, dict] = {}
    for o, (k, d) in enumerate(zip(ops.rows["kind"].tolist(), ops.rows["dim"].tolist())):
        if CollKind(k) in COLL_TYPE:
            key = (d, tuple(ops.groups[o].tolist()))
            if key not in groups:
                groups[key] = len(groups) + 1
                info[groups[key]] = {"dim": Dim(d).name, "ranks": list(key[1])}
            pg[o] = groups[key]
    return pg, info


def rank_nodes(ops: CommOps, rank: int, pg: np.ndarray, pb, order: list[int] | None = None) -> list:
    """The rank's Chakra nodes (see the module docstring), ids 0.. in dependency order."""
    A = pb.AttributeProto
    rows, nodes = ops.rows, []
    node_of: dict[int, list[int]] = {}     # op -> the rank's nodes standing for its completion
    chain: dict[frozenset, int] = {}       # stream point -> its last compute node so far

    def new(name, typ):
        n = pb.Node(id=len(nodes), name=name, type=typ)
        n.attr.append(A(name="is_cpu_op", bool_val=False))
        nodes.append(n)
        return n

    exact_ns = written_us = 0              # the rank's compute so far, exact and as written
    for st in rank_steps(ops, rank, order if order is not None else topo_order(ops)):
        o = st.op
        kind, dim = CollKind(int(rows["kind"][o])), Dim(int(rows["dim"][o]))
        deps = [chain[st.after]] if st.after in chain else sorted(
            {n for d in st.after for n in node_of[d]})
        if st.compute_ns > 0:              # the next piece of this stream point's compute
            c = new(f"compute before op{o}", pb.COMP_NODE)
            exact_ns += st.compute_ns      # carry the rounding: 300 ns gaps are not all 0 µs
            c.duration_micros = (exact_ns + 500) // 1000 - written_us
            written_us += c.duration_micros
            c.attr.append(A(name="duration_ns", int64_val=st.compute_ns))
            c.data_deps.extend(deps)
            deps = [c.id]
            chain[st.after] = c.id
        label = f"{dim.name} {kind.label} op{o}"
        size = int(rows["bytes"][o])
        if kind == CollKind.ALLGATHER:     # each rank's shard (see the module docstring)
            n_ranks = len(ops.groups[o])
            if size % n_ranks:
                raise OutputError(f"chakra: AllGather op {o} of {size} B does not split "
                                  f"into {n_ranks} equal shards")
            size //= n_ranks
        if kind in COLL_TYPE:
            n = new(label, pb.COMM_COLL_NODE)
            n.attr.extend([A(name="comm_type", int64_val=getattr(pb, COLL_TYPE[kind])),
                           A(name="comm_size", int64_val=size),
                           A(name="pg_name", string_val=str(int(pg[o])))])
        elif kind == CollKind.SENDRECV:
            src, dst = ops.groups[o].tolist()[:2]
            if rank == src:
                n = new(label, pb.COMM_SEND_NODE)
                n.attr.append(A(name="comm_dst", int32_val=int(dst)))
            else:
                n = new(label, pb.COMM_RECV_NODE)
                n.attr.append(A(name="comm_src", int32_val=int(src)))
            n.attr.extend([A(name="comm_tag", int32_val=o), A(name="comm_size", int64_val=size)])
        else:
            node_of[o] = deps              # a marker: its compute node, or its deps, stand for it
            continue
        n.data_deps.extend(deps)
        node_of[o] = [n.id]
    return nodes


def write_chakra(ops: CommOps, world: int, name: str, dest: Path) -> list[Path]:
    """One `<name>.<rank>.et` per rank plus comm_groups.json / comm_groups_info.json in dest."""
    pb, encode = _chakra()
    pg, info = process_groups(ops)
    order = topo_order(ops)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(world):
        meta = pb.GlobalMetadata(version="0.0.4")
        meta.attr.extend([pb.AttributeProto(name="schema", string_val=SCHEMA),
                          pb.AttributeProto(name="generator", string_val=f"tracegen {__version__}"),
                          pb.AttributeProto(name="rank", int64_val=rank),
                          pb.AttributeProto(name="world_size", int64_val=world)])
        path = dest / f"{name}.{rank}.et"
        _atomic(path, lambda f, m=meta, r=rank: _write_rank(f, encode, m,
                                                           rank_nodes(ops, r, pg, pb, order)))
        paths.append(path)
    for fname, body in (("comm_groups.json", {str(k): v["ranks"] for k, v in info.items()}),
                        ("comm_groups_info.json", {str(k): v for k, v in info.items()})):
        path = dest / fname
        _atomic(path, lambda f, b=body: f.write(json.dumps(b, indent=1).encode() + b"\n"))
        paths.append(path)
    return paths


def _write_rank(f, encode, meta, nodes) -> None:
    encode(f, meta)
    for n in nodes:
        encode(f, n)


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
