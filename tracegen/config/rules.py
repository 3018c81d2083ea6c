"""Validation: every key's type and range again on a built Job, then the rules between keys
(Megatron's divisibility rules, the cluster filling the parallel world, network thresholds, ...).
May import: config.keys, config.schema, config.sections, config.values, errors.
"""
from __future__ import annotations

from .keys.declare import WORLD_MAX
from .schema import SCALARS, TYPES
from .sections import SECTIONS, Cluster, FabricConfig, Job, Model, Network, Output, Parallelism
from .values import check_value, show, show_tail, small_int
from ..errors import ConfigError


def validate(job: Job) -> Job:
    """Check every key and the rules between keys; returns the job, raises ConfigError."""
    for key, typ in SCALARS.items():
        check_value(key, getattr(job, key), typ)
    for sec in SECTIONS:
        part = getattr(job, sec)
        for key, typ in TYPES[sec].items():
            check_value(f"{sec}.{key}", getattr(part, key), typ)
    _check_model(job.model)
    _check_sharding(job.model, job.parallelism)
    _check_moe(job.model)
    _check_parallel_features(job.model, job.parallelism)
    _check_world(job.parallelism, job.cluster)
    _check_network(job.network)
    _check_fabric(job.fabric)
    _check_marks(job.output, job.network)
    _check_nics(job.cluster)
    _check_tables(job.output)
    _check_output(job)
    return job


def _check_output(job: Job) -> None:
    it = job.output.iteration
    if it >= job.iterations:
        have = "iteration 0" if job.iterations == 1 else f"iterations 0..{job.iterations - 1}"
        raise ConfigError(f"output.iteration={it}: this job has {have} (iterations={job.iterations}); "
                          "pick one of those, -1 for all, or raise iterations")


TABLE_FORMATS = ("csv", "parquet")


def table_formats(out: Output) -> list[str]:
    """output.tables as a list, in TABLE_FORMATS order."""
    given = {x.strip().lower() for x in out.tables.split(",") if x.strip()}
    return [f for f in TABLE_FORMATS if f in given]


def _check_tables(out: Output) -> None:
    given = [x.strip().lower() for x in out.tables.split(",") if x.strip()]
    bad = [x for x in given if x not in TABLE_FORMATS]
    if bad or not given:
        raise ConfigError(f"output.tables={out.tables!r}: use csv, parquet or csv,parquet")
    if "parquet" in given:
        import importlib.util
        if importlib.util.find_spec("pyarrow") is None:
            raise ConfigError("output.tables=parquet needs pyarrow, which is not installed: "
                              "pip install 'tracegen[parquet]', or set output.tables=csv")


def _check_model(m: Model) -> None:
    if m.hidden % m.heads:
        raise ConfigError(f"model.heads={m.heads} does not divide model.hidden={m.hidden}")
    if m.kv_heads and (m.kv_heads > m.heads or m.heads % m.kv_heads):
        raise ConfigError(f"model.kv_heads={m.kv_heads} does not divide model.heads={m.heads}")
    if m.position_embeddings and m.max_position_embeddings and m.max_position_embeddings < m.seq_len:
        raise ConfigError(f"model.max_position_embeddings={m.max_position_embeddings} is below "
                          f"model.seq_len={m.seq_len}; raise it (or 0 for seq_len)")


def _check_moe(m: Model) -> None:
    if not m.experts:
        return
    if m.top_k > m.experts:
        raise ConfigError(f"model.top_k={m.top_k} exceeds model.experts={m.experts}")
    if m.first_k_dense >= m.layers:
        raise ConfigError(f"model.first_k_dense={m.first_k_dense} leaves no MoE layer of "
                          f"model.layers={m.layers}; lower it or set model.experts=0")


def _check_parallel_features(m: Model, p: Parallelism) -> None:
    """SP, CP, EP, interleaving: the combinations Megatron accepts."""
    if p.sp and p.tp == 1:
        raise ConfigError("parallelism.sp=true needs parallelism.tp > 1 (sequence parallelism splits "
                          "the TP group's activations); set sp: false or raise tp")
    if p.cp > 1 and m.seq_len % (2 * p.cp):
        raise ConfigError(f"model.seq_len={m.seq_len} is not a multiple of 2·parallelism.cp = {2 * p.cp} "
                          "(load-balanced context parallelism gives each rank two chunks)")
    if p.sp and p.tp > 1 and m.seq_len % (p.cp * p.tp):
        # Megatron-core scatters each micro-batch's [s/cp, b, h] activations over TP along s:
        # tensor_parallel/mappings.py _split_along_first_dim and _reduce_scatter_along_first_dim
        # assert "First dimension of the tensor should be divisible by tensor parallel size".
        what = (f"parallelism.cp·tp = {p.cp}·{p.tp} = {p.cp * p.tp}" if p.cp > 1
                else f"parallelism.tp={p.tp}")
        raise ConfigError(f"model.seq_len={m.seq_len} is not a multiple of {what} with parallelism.sp=true "
                          "(sequence parallelism splits every sequence over the TP ranks; Megatron asserts "
                          f"it); make seq_len a multiple of {p.cp * p.tp} or set sp: false")
    if p.ep > 1 and not m.experts:
        raise ConfigError(f"parallelism.ep={p.ep} needs a mixture-of-experts model (model.experts > 0)")
    if p.expert_tp and not m.experts:
        raise ConfigError(f"parallelism.expert_tp={p.expert_tp} needs a mixture-of-experts model "
                          "(model.experts > 0); leave it 0")
    if m.experts and m.experts % p.ep:
        raise ConfigError(f"parallelism.ep={p.ep} does not divide model.experts={m.experts}")
    stage = p.tp * p.cp * p.dp
    if m.experts and stage % (p.etp * p.ep):
        raise ConfigError(f"parallelism.expert_tp·ep = {p.etp}·{p.ep} does not divide the "
                          f"{stage} ranks of a pipeline stage (tp·cp·dp); change ep or expert_tp")
    if m.experts and m.moe_ffn % p.etp:
        raise ConfigError(f"parallelism.expert_tp={p.etp} does not divide the expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and m.shared_experts and m.moe_ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the shared-expert width "
                          f"{m.moe_ffn} (model.moe_ffn_hidden)")
    if m.experts and p.tp > 1 and not p.sp:
        raise ConfigError("mixture-of-experts with tp > 1 needs parallelism.sp=true (Megatron-core's "
                          "token dispatcher takes sequence-parallel token shards); set sp: true")
    if p.vpp > 1:
        if p.pp == 1:
            raise ConfigError(f"parallelism.vpp={p.vpp} needs parallelism.pp > 1")
        if m.layers % (p.pp * p.vpp):
            raise ConfigError(f"parallelism.pp·vpp = {p.pp}·{p.vpp} does not divide model.layers={m.layers}")
        if p.microbatches % p.pp:
            raise ConfigError(f"interleaved 1F1B needs micro-batches ({p.microbatches}) to be a multiple "
                              f"of parallelism.pp={p.pp}; change global_batch")
    if p.pp_scatter_gather and p.pp == 1:
        raise ConfigError("parallelism.pp_scatter_gather=true needs parallelism.pp > 1")


def _check_sharding(m: Model, p: Parallelism) -> None:
    """Megatron's divisibility rules: TP splits heads, query groups, MLP; PP splits layers."""
    if m.heads % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.heads={m.heads}")
    if m.kv_heads and m.kv_heads % p.tp:   # each TP rank holds whole query groups
        raise ConfigError(f"parallelism.tp={p.tp} does not divide model.kv_heads={m.kv_heads}")
    if m.ffn % p.tp:
        raise ConfigError(f"parallelism.tp={p.tp} does not divide the MLP width {m.ffn} "
                          "(model.ffn_hidden)")
    if m.layers % p.pp:
        raise ConfigError(f"parallelism.pp={p.pp} does not divide model.layers={m.layers}")
    per_step = p.micro_batch * p.dp
    if p.global_batch % per_step:
        raise ConfigError(f"parallelism.global_batch={p.global_batch} is not a multiple of "
                          f"micro_batch·dp = {p.micro_batch}·{p.dp} = {per_step}")


def _check_world(p: Parallelism, c: Cluster) -> None:
    world, gpn = p.world, c.gpus_per_node
    sizes = (f"dp·tp·pp·cp = {p.dp}·{p.tp}·{p.pp}·{p.cp} = {world:,}" if p.cp > 1
             else f"dp·tp·pp = {p.dp}·{p.tp}·{p.pp} = {world:,}")
    if world > WORLD_MAX:
        raise ConfigError(f"parallelism {sizes} GPUs; tracegen models at most {WORLD_MAX:,}")
    if c.nodes and c.nodes * gpn != world:
        have = c.nodes * gpn
        grow, lower = ("grow", "lower") if have < world else ("shrink", "raise")
        cluster_fix = (f"{grow} the cluster (cluster.nodes={world // gpn})" if world % gpn == 0
                       else f"{grow} the cluster to {world} GPUs (cluster.nodes × cluster.gpus_per_node)")
        degrees = " or ".join(f"parallelism.{k}={v}" for k, v in _degree_fixes(p, have))
        degree_fix = f"{lower} a degree to fit {have} GPUs" + (f" ({degrees})" if degrees else "")
        raise ConfigError(f"cluster.nodes={c.nodes} × cluster.gpus_per_node={gpn} = "
                          f"{have} GPUs but parallelism {sizes} — {cluster_fix} or {degree_fix}")
    if not c.nodes and world % gpn:
        raise ConfigError(f"parallelism {sizes} GPUs not filling nodes of "
                          f"cluster.gpus_per_node={gpn} — make it a multiple of {gpn} "
                          f"or set cluster.gpus_per_node to a divisor of {world}")


def _degree_fixes(p: Parallelism, gpus: int) -> list[tuple[str, int]]:
    """Single-degree changes that make dp·tp·pp·cp equal `gpus` (pp first: the usual slip is the
    default pp=2 left in)."""
    out = []
    for k in ("pp", "dp", "tp", "cp"):
        v = getattr(p, k)
        rest = p.world // v
        if gpus % rest == 0 and gpus // rest != v:
            out.append((k, gpus // rest))
    return out[:2]


def _check_nics(c: Cluster) -> None:
    if c.nics_per_node and c.nics_per_node > c.gpus_per_node:
        raise ConfigError(f"cluster.nics_per_node={c.nics_per_node} exceeds cluster.gpus_per_node="
                          f"{c.gpus_per_node}; use at most one NIC per GPU")
    if not c.gpu_nic_map:
        if c.gpus_per_node % c.nics:
            raise ConfigError(f"cluster.nics_per_node={c.nics} does not divide cluster.gpus_per_node="
                              f"{c.gpus_per_node}; set cluster.gpu_nic_map to place GPUs on NICs")
        return
    parts = c.gpu_nic_map.split(",")
    if len(parts) != c.gpus_per_node or any(small_int(p.strip(), 4) is None for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)}: give {c.gpus_per_node} comma-separated "
                          "NIC indices, one per GPU (e.g. '0,0,1,1')")
    if any(int(p) >= c.nics for p in parts):
        raise ConfigError(f"cluster.gpu_nic_map={show(c.gpu_nic_map)} names a NIC >= cluster.nics_per_node={c.nics}")


def _check_network(n: Network) -> None:
    if n.kmin_bytes > n.kmax_bytes:
        raise ConfigError(f"network.kmin_bytes={n.kmin_bytes} exceeds "
                          f"network.kmax_bytes={n.kmax_bytes}")
    for key in ("dcqcn_min_rate_mbps", "dcqcn_g", "dcqcn_alpha_resume_us",
                "dcqcn_rate_decrease_us", "dcqcn_rp_timer_us"):
        if not getattr(n, key) > 0:
            raise ConfigError(f"network.{key}: must be > 0, got {getattr(n, key)!r}")
    for key in ("dcqcn_rate_ai_mbps", "dcqcn_rate_hai_mbps", "cnp_interval_us"):
        if getattr(n, key) < 0:
            raise ConfigError(f"network.{key}: must be >= 0, got {getattr(n, key)!r}")
    # The switch buffer bounds every queue (ns3_scenarios/roce_switch.h Admit): thresholds above
    # it are never reached.
    if n.kmax_bytes > n.buffer_bytes:
        raise ConfigError(f"network.kmax_bytes={n.kmax_bytes} is above network.buffer_bytes={n.buffer_bytes}: "
                          "no queue grows that long, ECN marking would never reach pmax; lower kmax_bytes "
                          "or raise buffer_bytes")
    if n.pfc_xoff_bytes > n.buffer_bytes:
        raise ConfigError(f"network.pfc_xoff_bytes={n.pfc_xoff_bytes} is above network.buffer_bytes="
                          f"{n.buffer_bytes}: the buffer drops before a port reaches Xoff, PFC would never "
                          "pause; lower pfc_xoff_bytes (0: dynamic) or raise buffer_bytes")
    if n.pfc_headroom_bytes > n.buffer_bytes:
        raise ConfigError(f"network.pfc_headroom_bytes={n.pfc_headroom_bytes} is above network.buffer_bytes="
                          f"{n.buffer_bytes}: one port's headroom cannot exceed the whole buffer; lower "
                          "pfc_headroom_bytes (0: 3 x the link's bandwidth-delay) or raise buffer_bytes")
    if n.pfc_xoff_bytes and n.pfc_resume_offset_bytes >= n.pfc_xoff_bytes:
        raise ConfigError(f"network.pfc_resume_offset_bytes={n.pfc_resume_offset_bytes} must be "
                          f"below network.pfc_xoff_bytes={n.pfc_xoff_bytes} (Xon = Xoff - offset)")


def _check_fabric(f: FabricConfig) -> None:
    if f.kind == "file" and not f.file:
        raise ConfigError("fabric.kind=file needs fabric.file: the topology YAML's path (relative to "
                          "the job file that names it)")
    if f.file and f.kind != "file":
        raise ConfigError(f"fabric.file={show_tail(f.file)} is ignored with fabric.kind={f.kind}: that kind "
                          "builds its own switches; set fabric.kind: file to use the file, or remove fabric.file")
    if f.kind == "file" and f.planes != 1:
        raise ConfigError(f"fabric.planes={f.planes} with fabric.kind=file: list every plane's switches "
                          "in the topology file instead (planes: 1)")


def _check_marks(out: Output, n: Network) -> None:
    """CE marks, CNPs and DCQCN's reaction against the ECN bits data packets are sent with."""
    if out.ecn_mark_fraction > 0 and out.ecn in (0, 3):
        sent = "Not-ECT (output.ecn=0): a switch marks only ECN-capable packets (RFC 3168 §5)" \
            if out.ecn == 0 else "CE already (output.ecn=3): a mark could not be told from the rest"
        raise ConfigError(f"output.ecn_mark_fraction={out.ecn_mark_fraction:g} marks CE on data packets "
                          f"sent {sent}; set output.ecn=2 (ECT(0)) or 1, or ecn_mark_fraction: 0")
    if out.ecn_marking == "queue" and out.ecn in (0, 3):
        raise ConfigError(f"output.ecn_marking=queue marks CE on data packets sent with output.ecn={out.ecn} "
                          "(a switch marks only ECN-capable packets, RFC 3168 §5); set output.ecn=2 (ECT(0)) or 1")
    if out.comments and out.format != "pcapng":
        raise ConfigError("output.comments=true needs output.format=pcapng (pcap has no comments); "
                          "set format: pcapng or comments: false")
    if out.dcqcn and n.cc_mode != "dcqcn":
        raise ConfigError(f"output.dcqcn=true follows DCQCN's rate control; network.cc_mode is "
                          f"{n.cc_mode!r} - set network.cc_mode=dcqcn or output.dcqcn=false")
