"""Config stage: YAML / presets / dicts -> Job, one-line errors naming the key, parameter counts."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from tracegen.config import (Cluster, Job, Model, Parallelism, job_from_dict, job_to_dict,
                             list_presets, load_job, validate)
from tracegen.errors import ConfigError
from tracegen.workload.params import (layer_param_count, narayanan_eq2, param_count,
                                      stage_extra_param_count)

JOB_PRESETS = ["default", "gpt2-small", "llama3-8b", "gpt3-175b", "llama3-70b", "mixtral-8x7b",
               "deepseek-v3", "llama3-405b", "llama3-405b-2k", "llama3-405b-4k", "llama3-405b-8k",
               "llama3-405b-32k", "llama3-405b-64k", "llama3-405b-128k",
               "gpt3-175b-1k", "deepseek-v3-2k", "mixtral-8x7b-512"]


def error_of(d: dict) -> str:
    with pytest.raises(ConfigError) as e:
        job_from_dict(d)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def write(tmp_path, text: str, name: str = "job.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# --- defaults and presets -------------------------------------------------------------------

def test_default_job_is_job_defaults():
    assert load_job() == Job()
    assert load_job(preset="default") == Job()
    assert load_job().nodes == 4 and load_job().world == 8


def test_list_presets():
    p = list_presets()
    assert set(p) == {"jobs", "models", "clusters", "fabrics"}
    assert [n for n, _ in p["jobs"]] == sorted(JOB_PRESETS)
    assert [n for n, _ in p["models"]] == sorted(["tiny", "gpt2-small", "llama3-8b", "gpt3-175b",
                                                  "llama3-70b", "llama3-405b", "mixtral-8x7b",
                                                  "deepseek-v3"])
    assert [n for n, _ in p["clusters"]] == sorted(["mini-h100", "dgx-h100", "dgx-a100"])
    assert {"dgx-h100-su", "leaf-spine-2to1", "leaf-spine-4to1", "fat-tree-k8"} <= {n for n, _ in p["fabrics"]}
    for items in p.values():
        for name, desc in items:
            assert desc and "\n" not in desc, name


def test_model_and_cluster_presets_match_defaults():
    assert job_from_dict({"model": "tiny"}).model == Model()
    assert job_from_dict({"cluster": "mini-h100"}).cluster == Cluster()


@pytest.mark.parametrize("name", JOB_PRESETS)
def test_job_presets_load_and_round_trip(name):
    job = load_job(preset=name)
    assert job.name == name
    assert job.world == job.nodes * job.cluster.gpus_per_node
    assert job_from_dict(job_to_dict(job)) == job


def test_job_preset_shapes():
    gpt2 = load_job(preset="gpt2-small")
    assert (gpt2.model.layers, gpt2.model.hidden, gpt2.model.heads) == (12, 768, 12)
    assert (gpt2.model.vocab, gpt2.model.seq_len, gpt2.model.dtype) == (50257, 1024, "fp16")
    assert gpt2.parallelism.micro_batch == 32 and gpt2.world == 8 and gpt2.nodes == 2 and gpt2.cluster.gpus_per_node == 4
    # the tutorial's S_act: b·s·h·B
    assert 32 * 1024 * 768 * gpt2.model.bytes_per_elem == 50_331_648

    llama = load_job(preset="llama3-8b")
    m = llama.model
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == (32, 4096, 32, 8, 14336)
    assert (m.vocab, m.seq_len, m.dtype) == (128256, 8192, "bf16")
    assert m.gated_mlp and not m.position_embeddings and not m.tied_embeddings and not m.bias
    assert (llama.parallelism.tp, llama.parallelism.dp, llama.parallelism.pp) == (8, 2, 1)
    assert llama.nodes == 2 and llama.cluster.gpus_per_node == 8 and llama.cluster.gpu == "h100"

    gpt3 = load_job(preset="gpt3-175b")
    m, par = gpt3.model, gpt3.parallelism
    assert (m.layers, m.hidden, m.heads, m.vocab, m.seq_len) == (96, 12288, 96, 50257, 2048)
    assert (par.tp, par.pp, par.dp, par.micro_batch) == (8, 8, 2, 1)
    assert par.global_batch % par.dp == 0 and gpt3.nodes == 16

    a100 = job_from_dict({"cluster": "dgx-a100", "parallelism": {"dp": 2, "tp": 2, "pp": 2}})
    assert (a100.cluster.gpu, a100.cluster.nic_gbps, a100.cluster.nvlink_gbps) == ("a100", 200, 2400)
    h100 = load_job(preset="llama3-8b").cluster
    assert (h100.nic_gbps, h100.nvlink_gbps) == (400, 3600)


# --- parameter counts -----------------------------------------------------------------------

# Narayanan et al. 2021, Table 1 (V=51,200, s=2048), printed with one decimal.
TABLE1 = [(2304, 24, 24, 1.7), (12288, 80, 96, 145.6), (20480, 105, 128, 529.6),
          (25600, 128, 160, 1008.0), (12288, 96, 96, 174.6)]


@pytest.mark.parametrize("h,l,a,billions", TABLE1)
def test_param_count_narayanan_table1(h, l, a, billions):
    m = Model(layers=l, hidden=h, heads=a, vocab=51200, seq_len=2048)
    assert round(narayanan_eq2(m) / 1e9, 1) == billions
    assert round(param_count(m) / 1e9, 1) == billions


@pytest.mark.parametrize("m", [Model(), Model(layers=24, hidden=2304, heads=24, vocab=51200, seq_len=2048),
                               Model(layers=3, hidden=96, heads=4, vocab=1000, seq_len=77)])
def test_exact_count_is_eq2_plus_final_layernorm(m):
    # eq. 2 counts 12h²+13h per layer and (V+s)·h embeddings; the final LayerNorm (2h) is extra.
    assert layer_param_count(m) == 12 * m.hidden ** 2 + 13 * m.hidden
    assert param_count(m) == narayanan_eq2(m) + 2 * m.hidden


def test_param_count_presets():
    gpt3 = load_job(preset="gpt3-175b").model
    assert round(narayanan_eq2(gpt3) / 1e9, 1) == 174.6
    assert round(param_count(gpt3) / 1e9, 1) == 174.6
    llama = load_job(preset="llama3-8b").model
    assert param_count(llama) == pytest.approx(8.03e9, rel=0.01)
    assert param_count(llama) == 8_030_261_248          # Meta-Llama-3-8B checkpoint
    gpt2 = load_job(preset="gpt2-small").model
    assert param_count(gpt2) == pytest.approx(124e6, rel=0.01)
    assert param_count(gpt2) == 124_439_808             # HF gpt2 checkpoint


def test_gqa_and_gated_mlp_change_the_count():
    base = Model(layers=2, hidden=512, heads=8, ffn_hidden=1024, bias=False)
    gqa = dataclasses.replace(base, kv_heads=2)        # K, V shrink from 512 to 128 wide
    assert layer_param_count(base) - layer_param_count(gqa) == 2 * 512 * (512 - 128)
    gated = dataclasses.replace(base, gated_mlp=True)
    assert layer_param_count(gated) - layer_param_count(base) == 512 * 1024
    untied = dataclasses.replace(base, tied_embeddings=False)
    assert param_count(untied) - param_count(base) == base.vocab * 512
    nopos = dataclasses.replace(base, position_embeddings=False)
    assert param_count(base) - param_count(nopos) == base.seq_len * 512


@pytest.mark.parametrize("pp", [1, 2, 4])
@pytest.mark.parametrize("tied", [True, False])
def test_stage_extras_add_up(pp, tied):
    m = Model(layers=4, tied_embeddings=tied)
    total = m.layers * layer_param_count(m) + sum(stage_extra_param_count(m, s, pp) for s in range(pp))
    # tied + pp>1: the last stage keeps its own copy of the word embedding as LM head (Megatron)
    assert total == param_count(m) + (m.vocab * m.hidden if tied and pp > 1 else 0)


# --- YAML files -----------------------------------------------------------------------------

def test_yaml_job_file_with_presets(tmp_path):
    p = write(tmp_path, """
name: my-run
iterations: 3
seed: 7
model: {preset: llama3-8b, seq_len: 4096}
parallelism: {dp: 2, tp: 8, pp: 2, global_batch: 32}
cluster: {preset: dgx-h100, nodes: 4}
network: {cc_mode: hpcc}
output: {pmtu: 1024, vlan: false}
""")
    job = load_job(p)
    assert (job.name, job.iterations, job.seed) == ("my-run", 3, 7)
    assert job.model.name == "llama3-8b" and job.model.seq_len == 4096 and job.model.kv_heads == 8
    assert job.cluster.name == "dgx-h100" and job.nodes == 4
    assert job.network.cc_mode == "hpcc" and job.output.pmtu == 1024 and job.output.vlan is False


def test_yaml_model_as_name_and_file_stem_as_job_name(tmp_path):
    p = write(tmp_path, "model: gpt2-small\nparallelism: {tp: 2}\n", "small-run.yaml")
    job = load_job(p)
    assert job.name == "small-run" and job.model == load_job(preset="gpt2-small").model


def test_yaml_job_extends_job_preset(tmp_path):
    p = write(tmp_path, "preset: llama3-8b\nmodel: {seq_len: 2048}\nparallelism: {global_batch: 32}\n")
    job, base = load_job(p), load_job(preset="llama3-8b")
    assert job.model == dataclasses.replace(base.model, seq_len=2048)
    assert job.parallelism == dataclasses.replace(base.parallelism, global_batch=32)
    assert job.cluster == base.cluster


def test_yaml_ints_for_floats(tmp_path):
    job = load_job(write(tmp_path, "cluster: {mfu: 1}\nnetwork: {pmax: 0}\n"))
    assert job.cluster.mfu == 1.0 and isinstance(job.cluster.mfu, float)
    assert isinstance(job.network.pmax, float)


@pytest.mark.parametrize("text,expect", [
    ("model: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("", "empty file"),
    ("just a string\n", "expected a mapping"),
    ("parallelism:\n  tp: 2\n  tp: 4\n", "duplicate key 'tp'"),
])
def test_bad_yaml_files(tmp_path, text, expect):
    p = write(tmp_path, text, "bad.yaml")
    with pytest.raises(ConfigError, match=expect) as e:
        load_job(p)
    assert "bad.yaml" in str(e.value) and "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: no such job file"):
        load_job(tmp_path / "nope.yaml")


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"j\.yaml: unknown key 'parallelism\.tpp'"):
        load_job(write(tmp_path, "parallelism: {tpp: 2}\n", "j.yaml"))


def test_path_and_preset_together():
    with pytest.raises(ConfigError, match="not both"):
        load_job("x.yaml", preset="default")


# --- unknown keys, aliases --------------------------------------------------------------------

@pytest.mark.parametrize("d,msg", [
    ({"parallelism": {"tpp": 2}}, "unknown key 'parallelism.tpp' — did you mean 'parallelism.tp'?"),
    ({"paralelism": {"tp": 2}}, "unknown key 'paralelism' — did you mean 'parallelism'?"),
    ({"model": {"hiden": 64}}, "unknown key 'model.hiden' — did you mean 'model.hidden'?"),
    ({"output": {"pmut": 1024}}, "unknown key 'output.pmut' — did you mean 'output.pmtu'?"),
    ({"tp": 2}, "unknown key 'tp' — did you mean 'parallelism.tp'?"),
    ({"parallelism": {"seq_len": 2}}, "unknown key 'parallelism.seq_len' — did you mean 'model.seq_len'?"),
    ({"model": {"micro_batch_size": 2}},
     "unknown key 'model.micro_batch_size' — did you mean 'parallelism.micro_batch_size'?"),
])
def test_unknown_key_suggests(d, msg):
    assert error_of(d) == msg


def test_unknown_key_without_close_match_lists_valid_keys():
    msg = error_of({"nccl": {"zzzzzz": 1}})
    assert msg.startswith("unknown key 'nccl.zzzzzz' — valid keys: algorithm, channels")


ALIAS_CASES = [
    ("parallelism", "tensor_model_parallel_size", "tp", 4),
    ("parallelism", "pipeline_model_parallel_size", "pp", 1),
    ("parallelism", "data_parallel_size", "dp", 4),
    ("parallelism", "micro_batch_size", "micro_batch", 2),
    ("parallelism", "global_batch_size", "global_batch", 16),
    ("model", "num_layers", "layers", 6),
    ("model", "hidden_size", "hidden", 512),
    ("model", "num_attention_heads", "heads", 4),
    ("model", "num_query_groups", "kv_heads", 4),
    ("model", "ffn_hidden_size", "ffn_hidden", 2048),
    ("model", "seq_length", "seq_len", 512),
    ("model", "padded_vocab_size", "vocab", 50304),
    ("model", "vocab_size", "vocab", 50257),
]


@pytest.mark.parametrize("sec,alias,name,value", ALIAS_CASES)
def test_megatron_aliases(sec, alias, name, value):
    job = job_from_dict({sec: {alias: value}})
    assert getattr(getattr(job, sec), name) == value
    assert job == job_from_dict({sec: {name: value}})


@pytest.mark.parametrize("sec,alias,name,value", ALIAS_CASES)
def test_alias_and_name_together(sec, alias, name, value):
    msg = error_of({sec: {alias: value, name: value}})
    assert alias in msg and name in msg and "keep one" in msg


def test_megatron_style_job():
    job = job_from_dict({
        "model": {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                  "num_query_groups": 8, "ffn_hidden_size": 14336, "seq_length": 8192,
                  "padded_vocab_size": 128256},
        "parallelism": {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 1,
                        "data_parallel_size": 2, "micro_batch_size": 1, "global_batch_size": 16},
        "cluster": "dgx-h100"})
    assert (job.model.layers, job.model.kv_heads, job.parallelism.tp, job.nodes) == (32, 8, 8, 2)


def test_two_aliases_of_one_key():
    assert "keep one" in error_of({"model": {"vocab_size": 4096, "padded_vocab_size": 4096}})


# --- types --------------------------------------------------------------------------------------

@pytest.mark.parametrize("d,msg", [
    ({"model": {"layers": "abc"}}, "model.layers: expected an integer, got 'abc'"),
    ({"model": {"layers": True}}, "model.layers: expected an integer, got True"),
    ({"model": {"layers": 4.0}}, "model.layers: expected an integer, got 4.0"),
    ({"model": {"num_layers": 4.5}}, "model.num_layers: expected an integer, got 4.5"),
    ({"parallelism": {"dp": "2"}}, "parallelism.dp: expected an integer, got '2'"),
    ({"output": {"pcap": 1}}, "output.pcap: expected true or false, got 1"),
    ({"output": {"payload": 0}}, "output.payload: expected a string, got 0"),
    ({"cluster": {"mfu": "high"}}, "cluster.mfu: expected a number, got 'high'"),
    ({"cluster": {"mfu": True}}, "cluster.mfu: expected a number, got True"),
    ({"iterations": "2"}, "iterations: expected an integer, got '2'"),
    ({"model": {"hidden": None}}, "model.hidden: expected an integer, got null"),
    ({"model": 7}, "model: expected a mapping or a preset name, got 7"),
    ({"nccl": "fast"}, "nccl: expected a mapping, got 'fast'"),
])
def test_wrong_types(d, msg):
    assert error_of(d).startswith(msg)


def test_not_a_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        job_from_dict([1, 2])  # type: ignore[arg-type]


# --- values ------------------------------------------------------------------------------------

POSITIVE = [
    "model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len",
    "parallelism.dp", "parallelism.tp", "parallelism.pp", "parallelism.micro_batch",
    "parallelism.global_batch", "parallelism.dp_bucket_bytes",
    "cluster.gpus_per_node", "cluster.nic_gbps", "cluster.nvlink_gbps", "cluster.nodes_per_leaf",
    "cluster.spines", "nccl.channels", "nccl.ring_msg_bytes", "nccl.ring_chunk_bytes",
    "nccl.p2p_chunk_bytes", "nccl.qps_per_connection", "network.buffer_bytes", "iterations",
]


def nested(path: str, value) -> dict:
    sec, _, key = path.rpartition(".")
    return {sec: {key: value}} if sec else {key: value}


@pytest.mark.parametrize("path", POSITIVE)
@pytest.mark.parametrize("value", [0, -1])
def test_non_positive_sizes(path, value):
    assert error_of(nested(path, value)) == f"{path}: must be a positive integer, got {value}"


@pytest.mark.parametrize("path", ["model.kv_heads", "model.ffn_hidden", "cluster.nodes", "seed",
                                  "cluster.link_latency_ns", "output.snaplen", "output.ack_every"])
def test_negative_counts(path):
    assert error_of(nested(path, -1)).startswith(f"{path}: must be >= 0")


@pytest.mark.parametrize("path,bad,good", [
    ("model.dtype", "fp64", "fp16"),
    ("cluster.gpu", "v100", "a100"),
    ("nccl.algorithm", "bruck", "ring"),
    ("network.cc_mode", "cubic", "hpcc-pint"),
    ("output.pmtu", 1500, 2048),
    ("output.payload", "random", "pattern"),
    ("parallelism.grad_dtype", "fp64", "fp32"),
])
def test_enums(path, bad, good):
    msg = error_of(nested(path, bad))
    assert msg.startswith(f"{path}: {bad!r} is not accepted — use one of ")
    assert repr(good) in msg
    job_from_dict(nested(path, good))


@pytest.mark.parametrize("path,bad,good", [
    ("output.dscp", 64, 63), ("output.dscp", -1, 0),
    ("output.pcp", 8, 7), ("output.ecn", 4, 3),
    ("output.vlan_id", 0, 1), ("output.vlan_id", 4095, 4094),
    ("network.pmax", 1.5, 1.0),
    ("cluster.mfu", 0, 1), ("cluster.mfu", 1.01, 0.01), ("cluster.mfu", -0.5, 0.5),
])
def test_ranges(path, bad, good):
    assert error_of(nested(path, bad)).startswith(f"{path}: must be")
    job_from_dict(nested(path, good))


def test_non_finite_float():
    assert error_of({"cluster": {"mfu": float("nan")}}).startswith("cluster.mfu: expected a finite")


def test_job_name_must_be_a_directory_name():
    assert error_of({"name": "../x"}).startswith("name: '../x' is not usable")
    assert job_from_dict({"name": "run_1.a-b"}).name == "run_1.a-b"


# --- rules between keys -------------------------------------------------------------------------

def cross(model=None, par=None, cluster=None) -> str:
    return error_of({"model": model or {}, "parallelism": par or {}, "cluster": cluster or {}})


def test_tp_must_divide_heads():
    msg = cross({"heads": 32, "hidden": 4096}, {"tp": 3, "dp": 1, "pp": 1}, {"gpus_per_node": 3})
    assert msg == "parallelism.tp=3 does not divide model.heads=32"


def test_tp_must_divide_kv_heads():
    # Megatron splits query groups across TP ranks: num_query_groups % tp == 0
    msg = cross({"heads": 32, "kv_heads": 4, "hidden": 4096}, {"tp": 8, "dp": 1, "pp": 1},
                {"gpus_per_node": 8})
    assert msg == "parallelism.tp=8 does not divide model.kv_heads=4"


def test_kv_heads_must_divide_heads():
    assert cross({"heads": 8, "kv_heads": 3}) == "model.kv_heads=3 does not divide model.heads=8"
    assert "model.kv_heads=16" in cross({"heads": 8, "kv_heads": 16})


def test_heads_must_divide_hidden():
    assert cross({"hidden": 250, "heads": 8}) == "model.heads=8 does not divide model.hidden=250"


def test_tp_must_divide_ffn():
    assert "model.ffn_hidden" in cross({"ffn_hidden": 1001})


def test_pp_must_divide_layers():
    assert cross({"layers": 5}) == "parallelism.pp=2 does not divide model.layers=5"


def test_global_batch_multiple_of_micro_batch_times_dp():
    msg = cross(par={"micro_batch": 2, "global_batch": 10})
    assert msg.startswith("parallelism.global_batch=10 is not a multiple of micro_batch·dp")


def test_world_size_vs_given_nodes():
    msg = cross(cluster={"nodes": 3})
    assert "cluster.nodes=3" in msg and "dp·tp·pp" in msg and "grow the cluster (cluster.nodes=4)" in msg
    assert "or lower a degree to fit 6 GPUs" in msg


def test_too_few_gpus_suggests_both_fixes():
    msg = cross({"layers": 4}, {"tp": 2, "dp": 2, "pp": 2}, {"nodes": 2})
    assert msg.endswith("— grow the cluster (cluster.nodes=4) or lower a degree to fit 4 GPUs "
                        "(parallelism.pp=1 or parallelism.dp=1)")


def test_unset_degrees_are_one_unless_a_preset_sets_them(tmp_path):
    job = job_from_dict({"model": "llama3-8b", "parallelism": {"tp": 8, "dp": 2}, "cluster": "dgx-h100"})
    assert (job.parallelism.dp, job.parallelism.tp, job.parallelism.pp, job.nodes) == (2, 8, 1, 2)
    job = load_job(write(tmp_path, "model: gpt2-small\nparallelism: {tensor_model_parallel_size: 4}\n"
                                   "cluster: {gpus_per_node: 8}\n"))
    assert (job.parallelism.dp, job.parallelism.tp, job.parallelism.pp) == (2, 4, 1)
    # a preset's degrees stay; the built-in defaults stay when no degree is named
    job = load_job(write(tmp_path, "preset: gpt3-175b\nparallelism: {tp: 4}\ncluster: {nodes: 8}\n"))
    assert (job.parallelism.dp, job.parallelism.tp, job.parallelism.pp) == (2, 4, 8)
    assert job_from_dict({"parallelism": {"global_batch": 16}}).parallelism.pp == 2
    # --set on the built-in default job keeps its degrees (it is the `default` preset)
    assert load_job(sets=["parallelism.tp=1", "cluster.gpus_per_node=1"]).parallelism.pp == 2


def test_gpus_not_filling_nodes():
    msg = cross(par={"dp": 3, "tp": 1, "pp": 1, "global_batch": 3}, cluster={"gpus_per_node": 2})
    assert "not filling nodes" in msg and "cluster.gpus_per_node=2" in msg


def test_world_size_fits():
    job = job_from_dict({"parallelism": {"dp": 4, "tp": 2, "pp": 2, "global_batch": 8}, "cluster": {"nodes": 8}})
    assert job.nodes == 8 and job.world == 16


def test_kmin_le_kmax():
    assert "network.kmin_bytes" in error_of({"network": {"kmin_bytes": 2, "kmax_bytes": 1}})


def test_validate_catches_directly_built_jobs():
    with pytest.raises(ConfigError, match="parallelism.tp=3 does not divide model.heads=8"):
        validate(Job(parallelism=Parallelism(tp=3, dp=1, pp=2), cluster=Cluster(gpus_per_node=6)))
    assert validate(Job()) == Job()


# --- presets by name ---------------------------------------------------------------------------

def test_unknown_presets():
    assert error_of({"model": "llama3-8c"}) == "unknown model preset 'llama3-8c' — did you mean 'llama3-8b'?"
    assert "did you mean 'dgx-h100'" in error_of({"cluster": {"preset": "dgx-h10"}})
    with pytest.raises(ConfigError, match="unknown job preset 'nope' — available: .*default"):
        load_job(preset="nope")


# --- --set ------------------------------------------------------------------------------------

def test_sets_override_last():
    job = load_job(preset="llama3-8b", sets=["parallelism.dp=4", "model.dtype=fp16",
                                              "cluster.nodes=4", "model.seq_len=4096",
                                              "iterations=2", "output.vlan=false"])
    assert (job.parallelism.dp, job.model.dtype, job.nodes) == (4, "fp16", 4)
    assert (job.model.seq_len, job.iterations, job.output.vlan) == (4096, 2, False)


def test_sets_apply_in_order_and_accept_aliases_and_presets():
    job = load_job(sets=["model=gpt2-small", "model.num_layers=6", "parallelism.tensor_model_parallel_size=1",
                         "parallelism.dp=4"])
    assert job.model.name == "gpt2-small" and job.model.layers == 6 and job.parallelism.tp == 1


def test_sets_keep_strings_raw(tmp_path):
    job = load_job(sets=["model.name=007", "output.dir=", "name=run-1"])
    assert (job.model.name, job.output.dir, job.name) == ("007", "", "run-1")


def test_set_on_file(tmp_path):
    job = load_job(write(tmp_path, "parallelism: {dp: 2, tp: 2}\n"), sets=["parallelism.dp=4", "cluster.gpus_per_node=4"])
    assert job.world == 8 and job.nodes == 2 and job.parallelism.pp == 1


@pytest.mark.parametrize("item,expect", [
    ("parallelism.dp", "expected KEY=VALUE"),
    ("=4", "expected KEY=VALUE"),
    ("parallelism.tpp=2", "unknown key 'parallelism.tpp' — did you mean 'parallelism.tp'?"),
    ("paralelism.dp=2", "unknown key 'paralelism' — did you mean 'parallelism'?"),
    ("model.a.b=1", "unknown key 'model.a.b'"),
    ("bogus=1", "unknown key 'bogus'"),
    ("parallelism.dp=abc", "parallelism.dp: expected an integer, got 'abc'"),
    ("parallelism.dp=[", "not valid YAML"),
    ("parallelism.tp=3", "parallelism.tp=3 does not divide model.heads=8"),
])
def test_bad_sets(item, expect):
    with pytest.raises(ConfigError) as e:
        load_job(sets=[item])
    assert expect in str(e.value) and "\n" not in str(e.value)


# --- round trip ------------------------------------------------------------------------------

def test_job_to_dict_shape_and_round_trip():
    job = load_job(preset="gpt3-175b", sets=["network.cc_mode=hpcc", "output.pmtu=1024", "seed=3"])
    d = job_to_dict(job)
    assert list(d) == ["name", "iterations", "seed", "detail", "model", "parallelism", "cluster", "fabric",
                       "nccl", "network", "output"]
    assert d["parallelism"]["tp"] == 8 and d["network"]["cc_mode"] == "hpcc"
    assert job_from_dict(d) == job
    assert job_from_dict(yaml.safe_load(yaml.safe_dump(d))) == job   # also through a YAML file
    d["parallelism"]["dp"], d["cluster"]["nodes"] = 1, 8
    assert job_from_dict(d).parallelism.dp == 1
    assert job.parallelism.dp == 2                # the dict was a copy
