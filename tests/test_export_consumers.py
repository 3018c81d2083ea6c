"""The exports as their simulators read them: each check encodes the consumer's documented
semantics with a small reader of our own, and compares with closed forms (FORMULAS.md, Megatron's
rank layout, the model's architecture) — never with the op table that wrote the file.

ASTRA-sim 2.x (astra-sim/astra-sim, read 2026-03): Workload::issue_coll_comm hands comm_size to
Sys::generate_all_*; Ring::Ring takes it as each rank's input: AllReduce msg size/n, 2(n-1)
steps; ReduceScatter msg size/n, n-1 steps; AllGather msg size, n-1 steps (final size·n);
AllToAll msg size/n to each of n-1 peers. Workload::initialize_comm_groups reads
--comm-group-configuration as {"<id>": [npus]} (stoi of the key; CommunicatorGroup::set_id
asserts id > 0; extract_comm_group stops the rank on an unknown pg_name).
SimAI (aliyun/SimAI astra-sim-alibabacloud, read 2026-08): Workload::initialize_workload (header,
row count, 12 fields a row, suffix -> group per column), Layer::report / compute_time (group sizes
TP=tp, EP=ep, DP=all_gpus/(tp·pp), DP_EP=DP/ep; size·(n-1)/n per rank, 2x for AllReduce; ga and
vpp only in the bubble (pp-1)/(ga·vpp)); AICB's writer puts every micro-batch's rows in the file.
"""
from __future__ import annotations

import json
from fractions import Fraction

import pytest
import yaml
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import load_job

pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2",
                         reason="mlc-chakra is not installed (pip install 'tracegen[chakra]')")
from chakra.src.third_party.utils.protolib import decodeMessage  # noqa: E402


def export(tmp_path, fmt, spec=None, preset=None, sets=()):
    args = ["export", fmt, "-o", str(tmp_path / fmt)]
    if preset:
        args += ["--preset", preset]
        job = load_job(preset=preset, sets=list(sets))
    else:
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump({"name": "job", **spec}))
        args.insert(2, str(path))
        job = load_job(str(path), sets=list(sets))
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return job, tmp_path / fmt


# --- ASTRA-sim's reading of the Chakra files --------------------------------------------------------

def read_comm_groups(path) -> dict[int, list[int]]:
    """Workload::initialize_comm_groups: a JSON object, std::stoi of each key, a list of NPU ids;
    ids > 0 (CommunicatorGroup::set_id; "0" is the implicit all-ranks group)."""
    def no_dupes(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicate group ids {keys}"
        return dict(pairs)
    raw = json.loads(open(path).read(), object_pairs_hook=no_dupes)
    groups = {}
    for k, v in raw.items():
        assert k == str(int(k)) and int(k) > 0, k
        assert isinstance(v, list) and all(isinstance(x, int) for x in v) and len(set(v)) == len(v)
        groups[int(k)] = v
    return groups


def read_et(path):
    with open(path, "rb") as f:
        meta = pb.GlobalMetadata()
        assert decodeMessage(f, meta)
        nodes = []
        while True:
            n = pb.Node()
            if not decodeMessage(f, n):
                return nodes
            nodes.append(n)


def attrs(node) -> dict:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def astra_ring_bytes(comm_type: int, size: int, n: int) -> Fraction:
    """Bytes one rank sends for a COMM_COLL_NODE (Ring::Ring: msg_size x steps)."""
    return {pb.ALL_REDUCE: Fraction(size, n) * 2 * (n - 1),
            pb.REDUCE_SCATTER: Fraction(size, n) * (n - 1),
            pb.ALL_GATHER: Fraction(size) * (n - 1),
            pb.ALL_TO_ALL: Fraction(size, n) * (n - 1)}[comm_type]


def colls(d, job, rank, groups):
    """(comm_type, comm_size, group ranks) of the rank's collectives, as ASTRA-sim resolves them."""
    out = []
    for n in read_et(d / f"{job.name}.{rank}.et"):
        if n.type == pb.COMM_COLL_NODE:
            a = attrs(n)
            assert a["pg_name"] in {str(k) for k in groups}, "communicator group not found"
            ranks = groups[int(a["pg_name"])]
            assert rank in ranks         # else get_position_in_group() = -1
            out.append((a["comm_type"], a["comm_size"], sorted(ranks)))
    return out


def megatron_groups(job, rank) -> dict[str, list[int]]:
    """initialize_model_parallel's rank order tp-cp-dp-pp (cp = 1 here), and the expert grid
    etp-ep-edp within a stage."""
    p = job.parallelism
    tp, n = p.tp, job.world // p.pp
    base = rank // n * n
    etp, ep = p.etp, p.ep
    local = rank - base
    return {"TP": [rank // tp * tp + j for j in range(tp)],
            "DP": [base + local % tp + j * tp for j in range(n // tp)],
            "EP": [base + local // (etp * ep) * etp * ep + local % etp + j * etp
                   for j in range(ep)],
            "EDP": [base + local % (etp * ep) + j * etp * ep for j in range(n // (etp * ep))],
            # the model-parallel group (grad norm): the rank's TP group in every stage
            "MP": sorted(x - base + s * n for s in range(p.pp) for x in
                         [rank // tp * tp + j for j in range(tp)]),
            # the tied embedding's sync: the rank's place in the first and the last stage
            "EMB": sorted({local, local + (p.pp - 1) * n})}


SP_JOB = {"model": "tiny", "parallelism": {"tp": 4, "sp": True, "dp": 2, "pp": 1,
                                           "micro_batch": 1, "global_batch": 6}}


def test_chakra_sp_traffic_is_what_astra_sim_moves(tmp_path):
    """Sequence parallelism moves 10·(t-1)/t·S_act per rank per layer per micro-batch (6 AllGather
    + 4 ReduceScatter), plus the LM head (1 AG forward, 1 AG + 1 RS backward) and the learned
    position embedding (1 AllReduce forward, 1 AG backward): what ASTRA-sim's ring moves for the
    AllGather/ReduceScatter nodes must add up to that, and every AllGather's comm_size is one
    rank's shard, output / group size."""
    job, d = export(tmp_path, "chakra", SP_JOB)
    groups = read_comm_groups(d / "comm_groups.json")
    p, m = job.parallelism, job.model
    t, mb, layers = p.tp, p.microbatches, m.layers
    s_act = p.micro_batch * m.seq_len * m.hidden * 2
    for rank in range(job.world):
        cs = colls(d, job, rank, groups)
        ag = [c for c in cs if c[0] == pb.ALL_GATHER]
        rs = [c for c in cs if c[0] == pb.REDUCE_SCATTER]
        assert ag and all(size * len(g) == s_act for _, size, g in ag)
        assert all(size == s_act for _, size, _ in rs)
        assert all(g == megatron_groups(job, rank)["TP"] for _, _, g in ag + rs)
        assert (len(ag), len(rs)) == ((6 * layers + 3) * mb, (4 * layers + 1) * mb)
        moved = sum(astra_ring_bytes(*c[:2], len(c[2])) for c in ag + rs)
        assert moved == (10 * layers + 4) * mb * Fraction(t - 1, t) * s_act
        ar = [c for c in cs if c[0] == pb.ALL_REDUCE and c[1] == s_act]
        assert len(ar) == mb and all(g == megatron_groups(job, rank)["TP"] for _, _, g in ar)


def test_chakra_comm_groups_are_what_astra_sim_needs(tmp_path):
    """Every pg_name of every rank's collectives is a key of comm_groups.json (else ASTRA-sim
    stops the rank), keys parse as ASTRA-sim parses them, each group holds the rank and is one
    of its Megatron groups, and no group is listed that no node uses."""
    job, d = export(tmp_path, "chakra", {
        "model": "mixtral-8x7b", "parallelism": {"dp": 4, "tp": 2, "pp": 2, "ep": 2, "sp": True,
                                                 "global_batch": 8}}, sets=["model.layers=4"])
    groups = read_comm_groups(d / "comm_groups.json")
    used = set()
    for rank in range(job.world):
        mine = megatron_groups(job, rank).values()
        for n in read_et(d / f"job.{rank}.et"):
            if n.type == pb.COMM_COLL_NODE:
                pg = attrs(n)["pg_name"]
                used.add(int(pg))
                assert sorted(groups[int(pg)]) in mine, (rank, groups[int(pg)])
    assert used == set(groups)


def test_chakra_alltoall_is_the_send_buffer(tmp_path):
    """FORMULAS: an EP AllToAll carries tokens·top_k·capacity·h·B per rank (tokens = b·s/t under
    SP); PyTorch ET and ASTRA-sim take comm_size as that send buffer (Ring: size/n per peer)."""
    job, d = export(tmp_path, "chakra", preset="mixtral-8x7b", sets=["model.layers=2"])
    groups = read_comm_groups(d / "comm_groups.json")
    p, m = job.parallelism, job.model
    buf = Fraction(p.micro_batch * m.seq_len, p.tp) * m.top_k * Fraction(m.capacity_factor) \
        * m.hidden * 2
    for rank in (0, job.world - 1):
        a2a = [c for c in colls(d, job, rank, groups) if c[0] == pb.ALL_TO_ALL]
        assert len(a2a) == 4 * m.layers * p.microbatches
        assert all(size == buf and g == megatron_groups(job, rank)["EP"] for _, size, g in a2a)


@pytest.mark.parametrize("sets", [[], ["parallelism.tp=1", "parallelism.dp=4"],
                                  ["parallelism.cp=2", "parallelism.dp=1"]])
def test_chakra_compute_is_the_ranks_compute(tmp_path, sets):
    """ASTRA-sim runs a rank's COMP_NODEs one at a time (HardwareResource: one GPU compute node
    in flight) for duration_micros x 1000 ns each (Workload::issue_replay): per rank that must
    add up to tracegen's compute per iteration, the busiest stage's on its ranks, within half a
    microsecond although most gaps of these jobs are below 1 µs; the compute a PP or CP
    sender does before a send is not the receiver's, the gap of a forked gradient bucket is part
    of the span it forks from."""
    from tracegen.corpus.traffic import compute_ns_per_iteration
    job, d = export(tmp_path, "chakra", preset="default", sets=sets)
    per_rank = []
    for rank in range(job.world):
        comp = [n for n in read_et(d / f"default.{rank}.et") if n.type == pb.COMP_NODE]
        assert comp
        per_rank.append(sum(n.duration_micros for n in comp) * 1000)
    last = job.world - job.world // job.parallelism.pp
    assert all(abs(x - compute_ns_per_iteration(job)) <= 500 for x in per_rank[last:])
    assert max(per_rank) <= compute_ns_per_iteration(job) + 500


# --- SimAI's reading of the workload text -----------------------------------------------------------

def read_simai(text: str) -> tuple[dict, list[dict]]:
    """Workload::initialize_workload: header `key: value` tokens, the row count, then 12
    whitespace-separated fields per row (read with >>, so any whitespace)."""
    first, rest = text.split("\n", 1)
    tok = first.split()
    assert tok[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    head = {tok[i][:-1]: int(tok[i + 1]) for i in range(1, len(tok) - 1) if tok[i].endswith(":")}
    body = rest.split()
    n = int(body[0])
    assert len(body) == 1 + 12 * n
    rows = []
    for i in range(n):
        f = body[1 + 12 * i:13 + 12 * i]
        r = {"name": f[0], "dep": int(f[1]), "update": int(f[11])}
        for j, col in enumerate(("fwd", "ig", "wg")):
            r[col] = (int(f[2 + 3 * j]), f[3 + 3 * j], int(f[4 + 3 * j]))
        rows.append(r)
    return head, rows


def simai_colls(head, rows):
    """(column, type, group, group size, size) per collective as SimAI runs it: the plain name
    is TP in the forward / input-gradient columns and DP in the weight-gradient one."""
    dp = head["all_gpus"] // (head["model_parallel_NPU_group"] * head["pp"])
    out = []
    for r in rows:
        for col in ("fwd", "ig", "wg"):
            _, ctype, size = r[col]
            if ctype == "NONE":
                assert size == 0
                continue
            base = next(b for b in ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL")
                        if ctype.startswith(b))
            group = {"": "DP" if col == "wg" else "TP", "_EP": "EP", "_DP_EP": "DP_EP"}.get(
                ctype[len(base):])
            assert group is not None, f"{ctype}: SimAI gives it no group (no time)"
            # Layer::report: EP_size for EP, else TP_size (fwd/ig); DP/ep for DP_EP, else DP (wg)
            if col == "wg":
                n = dp // head["ep"] if group == "DP_EP" else dp
            else:
                n = head["ep"] if group == "EP" else head["model_parallel_NPU_group"]
            # ... and MockNcclGroup's ranks of that group: the same count, or the analytical mode
            # and the simulator time different groups
            assert n == {"TP": head["model_parallel_NPU_group"], "EP": head["ep"], "DP": dp,
                         "DP_EP": dp // head["ep"]}[group], (col, ctype)
            out.append((col, base, group, n, size))
    return out


def simai_compute(rows) -> int:
    return sum(r[c][0] for r in rows for c in ("fwd", "ig", "wg"))


def llama_grad_bytes(job) -> int:
    """Gradient bytes a llama-3 TP rank reduces over DP (fp32): per layer q,o h² and k,v
    h·kv·(h/heads), gated MLP 3·h·ffn, all split over t; 2 RMSNorm weights replicated; input and
    output embeddings of the padded vocabulary (multiple of 128·t) split over t; final norm."""
    m, t = job.model, job.parallelism.tp
    kv = m.hidden * m.kv_heads * (m.hidden // m.heads)
    per_layer = (2 * m.hidden ** 2 + 2 * kv + 3 * m.hidden * m.ffn_hidden) // t + 2 * m.hidden
    vocab = -(-m.vocab // (128 * t)) * 128 * t
    return 4 * (m.layers * per_layer + 2 * vocab * m.hidden // t + m.hidden)


def test_simai_llama3_8b_holds_every_microbatch_and_its_compute(tmp_path):
    from tracegen.corpus.traffic import compute_ns_per_iteration
    job, d = export(tmp_path, "simai", preset="llama3-8b")
    head, rows = read_simai((d / "llama3-8b.txt").read_text())
    p, m = job.parallelism, job.model
    assert (head["model_parallel_NPU_group"], head["ep"], head["pp"], head["vpp"], head["ga"],
            head["all_gpus"], head["pp_comm"]) == (8, 1, 1, 1, 8, 16, 0)
    assert [x.name for x in d.iterdir() if not x.name.startswith(".")] == ["llama3-8b.txt"], \
        "one file without pipeline parallelism (beside the folder's manifest)"
    # SimAI adds the compute columns once (no repetition by ga): all micro-batches are in
    assert simai_compute(rows) == compute_ns_per_iteration(job)
    cs = simai_colls(head, rows)
    s_act = p.micro_batch * m.seq_len * m.hidden * 2
    tp_act = [c for c in cs if c[1:] == ("ALLREDUCE", "TP", 8, s_act)]
    # FORMULAS: 2 AllReduce forward + 2 backward per layer per micro-batch; plus the embedding's
    # forward and the LM head's backward AllReduce (non-SP Megatron)
    assert len(tp_act) == (4 * m.layers + 2) * p.microbatches
    assert all(c[0] != "wg" for c in tp_act)
    grads = [c for c in cs if c[0] == "wg" and c[4] > 1024]
    assert all(c[1:4] == ("ALLREDUCE", "DP", 2) for c in grads)
    assert sum(c[4] for c in grads) == llama_grad_bytes(job)
    assert all(r["dep"] == -1 and r["update"] == 0 for r in rows)


def test_simai_mixtral_labels_each_op_by_its_group(tmp_path):
    """The dispatch/combine AllToAll runs on SimAI's EP group (ep ranks), the expert-TP
    AllGather/ReduceScatter on the TP group (etp = tp: Megatron's expert TP group is the TP
    group), gradients on DP; compute as tracegen's."""
    from tracegen.corpus.traffic import compute_ns_per_iteration
    job, d = export(tmp_path, "simai", preset="mixtral-8x7b")
    head, rows = read_simai((d / "mixtral-8x7b.txt").read_text())
    p, m = job.parallelism, job.model
    assert (head["ep"], head["ga"]) == (p.ep, p.microbatches)
    assert p.etp == p.tp and megatron_groups(job, 0)["TP"] == list(range(p.tp))
    assert simai_compute(rows) == compute_ns_per_iteration(job)
    cs = simai_colls(head, rows)
    a2a = [c for c in cs if c[1] == "ALLTOALL"]
    assert len(a2a) == 4 * m.layers * p.microbatches      # 2 forward + 2 backward per MoE layer
    assert {c[2:4] for c in a2a} == {("EP", p.ep)}
    ag_rs = [c for c in cs if c[1] in ("ALLGATHER", "REDUCESCATTER")]
    assert ag_rs and {c[2:4] for c in ag_rs} == {("TP", p.tp)}
    assert {c[2] for c in cs if c[0] == "wg"} == {"DP"}


def test_simai_pipeline_one_stage_per_file(tmp_path):
    """pp = 2: each file holds one stage's layers for every micro-batch (2 TP AllReduces forward
    and 2 backward per layer, + the embedding's forward one on the first stage and the LM head's
    backward one on the last), vpp the job's model chunks, pp_comm the b·s·h·B activation
    (FORMULAS: 50,331,648 B for GPT-2 small, b=32); job.txt is the busiest stage."""
    from tracegen.corpus.traffic import compute_ns_per_iteration
    job, d = export(tmp_path, "simai", preset="gpt2-small", sets=["parallelism.vpp=2"])
    p, m = job.parallelism, job.model
    s_act = p.micro_batch * m.seq_len * m.hidden * 2
    computes = []
    for s in range(p.pp):
        head, rows = read_simai((d / f"gpt2-small.stage{s}.txt").read_text())
        assert (head["pp"], head["vpp"], head["ga"], head["pp_comm"]) == (2, 2, 4, 50_331_648)
        tp_act = [c for c in simai_colls(head, rows) if c[1:] == ("ALLREDUCE", "TP", 2, s_act)]
        assert len(tp_act) == (4 * m.layers // p.pp + 1) * p.microbatches
        computes.append(simai_compute(rows))
    main_text = (d / "gpt2-small.txt").read_text()
    assert main_text == (d / f"gpt2-small.stage{computes.index(max(computes))}.txt").read_text()
    assert max(computes) == compute_ns_per_iteration(job)


@pytest.mark.parametrize("sets", [["parallelism.tp=1", "parallelism.dp=4"],
                                  ["parallelism.cp=2", "parallelism.dp=1"],
                                  ["parallelism.zero=3", "parallelism.dp=4", "parallelism.pp=1"]])
def test_simai_keeps_compute_before_ops_it_cannot_run(tmp_path, sets):
    """Compute that precedes a PP send, a CP ring step, a ZeRO-3 forward gather (SimAI's forward
    column has no DP group) or the end of the iteration has no SimAI collective to sit before: it
    still is in a compute column, so SimAI's total is tracegen's; gradient syncs run on SimAI's
    DP group of all_gpus/(tp·pp) = dp·cp ranks."""
    from tracegen.corpus.traffic import compute_ns_per_iteration
    job, d = export(tmp_path, "simai", preset="default", sets=sets)
    head, rows = read_simai((d / "default.txt").read_text())
    assert simai_compute(rows) == compute_ns_per_iteration(job)
    p = job.parallelism
    grads = [c for c in simai_colls(head, rows) if c[0] == "wg"]
    assert grads and {c[2:4] for c in grads} == {("DP", p.dp * p.cp)}


def test_simai_backward_runs_bottom_up_in_our_order(tmp_path):
    """SimAI runs a workload's forward columns from the first row down and its input- and
    weight-gradient columns from the last row up (Workload's fwd_in_bckwd iteration: layers n-1
    .. 0), so read bottom-up the backward collectives must come in the order tracegen runs them
    (their op numbers, in the row names: one name per column that holds a collective)."""
    import re
    _, d = export(tmp_path, "simai", preset="gpt2-small")
    checked = 0
    for f in sorted(d.glob("gpt2-small.stage*.txt")):
        _, rows = read_simai(f.read_text())
        seq = []
        for r in reversed(rows):
            names = r["name"].split("|")
            n_back = sum(r[c][1] != "NONE" for c in ("ig", "wg"))
            assert len(names) == n_back + (r["fwd"][1] != "NONE") or r["name"].startswith("row")
            seq += [int(re.search(r"op(\d+)$", x).group(1)) for x in names[len(names) - n_back:]]
        assert len(seq) > 10 and seq == sorted(seq), f"{f.name}: backward order {seq[:12]}"
        checked += len(seq)
    assert checked > 40
