"""`tracegen export chakra|simai`: the CommOp table for other simulators, read back by their own
readers — mlc-chakra's decodeMessage for the Chakra ET files, a reader of SimAI's documented
workload layout (astra-sim-alibabacloud Workload::initialize_workload) for the SimAI text."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import load_job
from tracegen.corpus.traffic import compute_ns_per_iteration
from tracegen.tables import CollKind, Dim
from tracegen.workload import build_commops

pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2",
                         reason="mlc-chakra is not installed (pip install 'tracegen[chakra]')")
from chakra.src.third_party.utils.protolib import decodeMessage  # noqa: E402

JOBS = {"default": {},
        "moe": {"model": "mixtral-8x7b", "parallelism": {"dp": 4, "tp": 2, "pp": 2, "ep": 2,
                                                         "sp": True, "global_batch": 8},
                "set": {"model.layers": 4}}}
CHAKRA_COLL = {CollKind.ALLREDUCE: pb.ALL_REDUCE, CollKind.REDUCESCATTER: pb.REDUCE_SCATTER,
               CollKind.ALLGATHER: pb.ALL_GATHER, CollKind.ALLTOALL: pb.ALL_TO_ALL,
               CollKind.BROADCAST: pb.BROADCAST, CollKind.REDUCE: pb.REDUCE}


def read_et(path):
    """Chakra's own reader: a GlobalMetadata, then Node messages until the file ends."""
    with open(path, "rb") as f:
        meta = pb.GlobalMetadata()
        assert decodeMessage(f, meta)
        nodes = []
        while True:
            n = pb.Node()
            if not decodeMessage(f, n):
                break
            nodes.append(n)
    return meta, nodes


def attrs(node) -> dict:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def export(tmp_path, fmt, spec):
    spec = dict(spec)
    sets = [f"{k}={v}" for k, v in spec.pop("set", {}).items()]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "job", **spec}))
    args = ["export", fmt, str(path), "-o", str(tmp_path / fmt)] + [
        x for s in sets for x in ("--set", s)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    job = load_job(str(path), sets=sets)
    return job, build_commops(job), tmp_path / fmt


@pytest.mark.parametrize("name", sorted(JOBS))
def test_chakra_et_decodes_and_matches_the_op_table(tmp_path, name):
    job, ops, d = export(tmp_path, "chakra", JOBS[name])
    groups = {int(k): v for k, v in json.loads((d / "comm_groups.json").read_text()).items()}
    rows = ops.rows
    seen_pgs, busiest = set(), 0
    for rank in range(job.world):
        meta, nodes = read_et(d / f"job.{rank}.et")
        a = {x.name: getattr(x, x.WhichOneof("value")) for x in meta.attr}
        assert a["rank"] == rank and a["world_size"] == job.world
        mine = [o for o in range(len(ops)) if rank in ops.groups[o].tolist()]
        comm = [o for o in mine if rows["kind"][o] != CollKind.MARKER]
        comm_nodes = [n for n in nodes if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE,
                                                      pb.COMM_RECV_NODE)]
        comp_nodes = [n for n in nodes if n.type == pb.COMP_NODE]
        # node counts: one comm node per op of the rank, one compute node per op with a gap
        assert len(comm_nodes) == len(comm)
        # one compute piece per op at most, never more compute than the gaps of its ops
        assert len(comp_nodes) <= sum(1 for o in mine if rows["gap_ns"][o] > 0)
        exact = sum(attrs(n)["duration_ns"] for n in comp_nodes)
        assert 0 < exact <= int(rows["gap_ns"][mine].sum())
        assert abs(sum(n.duration_micros for n in comp_nodes) * 1000 - exact) <= 500
        busiest = max(busiest, exact)
        assert [n.id for n in nodes] == list(range(len(nodes)))
        by_op = {int(re.search(r"op(\d+)$", n.name).group(1)): n for n in comm_nodes}
        assert sorted(by_op) == comm
        for o in comm:
            n = by_op[o]
            at = attrs(n)
            kind = CollKind(int(rows["kind"][o]))
            # AllGather: each rank's shard (ASTRA-sim's Ring reads comm_size as the input)
            shards = len(ops.groups[o]) if kind == CollKind.ALLGATHER else 1
            assert at["comm_size"] * shards == int(rows["bytes"][o]) and f"op{o}" in n.name
            if kind == CollKind.SENDRECV:
                src, dst = ops.groups[o].tolist()
                assert at["comm_tag"] == o
                if rank == src:
                    assert n.type == pb.COMM_SEND_NODE and at["comm_dst"] == dst
                else:
                    assert n.type == pb.COMM_RECV_NODE and at["comm_src"] == src
            else:
                assert n.type == pb.COMM_COLL_NODE and at["comm_type"] == CHAKRA_COLL[kind]
                pg = int(at["pg_name"])
                assert groups[pg] == ops.groups[o].tolist()
                seen_pgs.add(pg)
            assert all(dep < n.id for dep in n.data_deps)
        # dependencies: an op's node depends on (the compute before it, or) the rank's dep ops
        for o in comm:
            n = by_op[o]
            before = f"compute before op{o}"
            if any(x.name == before for x in comp_nodes):
                assert [nodes[x].name for x in n.data_deps] == [before]
            mine_deps = [d for d in ops.deps[o].tolist() if d in by_op]
            if rows["gap_ns"][o] == 0:
                assert {by_op[d].id for d in mine_deps} <= set(n.data_deps)
    assert seen_pgs == set(groups)
    assert busiest == compute_ns_per_iteration(job)


SIMAI_TYPES = {"NONE", "ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL"}


def read_simai(text: str) -> tuple[dict, list[dict]]:
    """SimAI's Workload::initialize_workload, as a reader: header tokens `key: value`, the row
    count, then rows of 12 whitespace-separated fields (name, dependency, then compute / comm
    type / comm size for forward, input gradient, weight gradient, and the update time)."""
    lines = text.split("\n")
    tok = lines[0].split()
    assert tok[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    head = {tok[i][:-1]: int(tok[i + 1]) for i in range(1, len(tok) - 1) if tok[i].endswith(":")}
    n = int(lines[1])
    body = " ".join(lines[2:]).split()
    assert len(body) == 12 * n
    rows = []
    for i in range(n):
        f = body[12 * i:12 * i + 12]
        r = {"name": f[0], "dep": int(f[1])}
        for j, col in enumerate(("fwd", "ig", "wg")):
            r[f"{col}_compute"] = int(f[2 + 3 * j])
            r[f"{col}_type"] = f[3 + 3 * j]
            r[f"{col}_size"] = int(f[4 + 3 * j])
            base = r[f"{col}_type"].removesuffix("_DP_EP").removesuffix("_EP")
            assert base in SIMAI_TYPES, r
        r["update"] = int(f[11])
        rows.append(r)
    return head, rows


@pytest.mark.parametrize("name", sorted(JOBS))
def test_simai_workload_parses_by_its_layout(tmp_path, name):
    job, ops, d = export(tmp_path, "simai", JOBS[name])
    from tracegen.emit.sims.simai import busiest, simai_stages
    files, notes = simai_stages(job, ops)
    p, r = job.parallelism, ops.rows
    assert (d / "job.txt").read_text() == busiest(files).text
    stage_files = sorted(x.name for x in d.iterdir() if x.name != "job.txt" and not x.name.startswith("."))  # not the manifest
    assert stage_files == ([f"job.stage{s}.txt" for s in range(p.pp)] if p.pp > 1 else [])
    for f in files:
        if p.pp > 1:
            assert (d / f"job.stage{f.stage}.txt").read_text() == f.text
        head, rows = read_simai(f.text)
        assert (head["model_parallel_NPU_group"], head["ep"], head["pp"], head["vpp"], head["ga"],
                head["all_gpus"]) == (p.tp, p.ep, p.pp, p.vpp, p.microbatches, job.world)
        assert (head["pp_comm"] > 0) == (p.pp > 1)
        # every written op's bytes are in exactly one column, each op of the rank at most once
        assert len(set(f.written)) == len(f.written)
        assert all(f.rank in ops.groups[o].tolist() and r["iteration"][o] == 0 for o in f.written)
        sizes = sum(x["fwd_size"] + x["ig_size"] + x["wg_size"] for x in rows)
        assert sizes == int(r["bytes"][f.written].sum())
        dp = [o for o in f.written if r["dim"][o] in (Dim.DP, Dim.EDP)]
        assert sum(x["wg_size"] for x in rows) == int(r["bytes"][dp].sum()) > 0
        assert {Dim(int(r["dim"][o])) for o in f.written} & {Dim.TP, Dim.SP}
        assert all(x["dep"] == -1 for x in rows)
        if name == "moe":
            assert any(x["fwd_type"] == "ALLTOALL_EP" for x in rows)
            assert any(x["wg_type"].endswith("_DP_EP") for x in rows)
    # what SimAI cannot hold is said, never silently dropped
    emb = any(r["dim"][o] == Dim.EMB for o in range(len(ops)))
    assert any("EMB AllReduce" in n for n in notes) == emb


def test_export_without_chakra_says_how_to_install(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("chakra"):
            raise ImportError("No module named 'chakra'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    res = CliRunner().invoke(main, ["export", "chakra", "-o", str(tmp_path / "c")])
    assert res.exit_code == 2 and "tracegen[chakra]" in res.output
