"""Rules between job keys (issue 22): each inconsistent pair refused in one line naming both keys,
keys with no effect on the chosen kind, paths a job names, the YAML reader other inputs share.

The expected messages and key pairs are written out here (not read from config.INERT), so that
removing a check or a row breaks a test."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tracegen import config
from tracegen.config import (check_field, inert_keys, job_from_dict, job_to_dict, load_job,
                             read_yaml_file, with_options)
from tracegen.errors import ConfigError


def error_of(d: dict) -> str:
    with pytest.raises(ConfigError) as e:
        job_from_dict(d)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# --- sequence parallelism: Megatron-core's _split_along_first_dim asserts s/cp % tp == 0 --------

def test_sp_needs_seq_len_a_multiple_of_tp():
    msg = error_of({"model": {"seq_len": 250}, "parallelism": {"sp": True, "tp": 4, "dp": 1, "pp": 2}})
    assert msg.startswith("model.seq_len=250 is not a multiple of parallelism.tp=4 with parallelism.sp=true")
    assert "make seq_len a multiple of 4 or set sp: false" in msg
    job_from_dict({"model": {"seq_len": 252}, "parallelism": {"sp": True, "tp": 4, "dp": 1, "pp": 2}})
    job_from_dict({"model": {"seq_len": 250}, "parallelism": {"sp": False, "tp": 4, "dp": 1, "pp": 2}})


def test_sp_with_cp_needs_seq_len_a_multiple_of_cp_times_tp():
    # 260 is a multiple of 2·cp = 4 (context parallelism's own rule) but not of cp·tp = 8
    msg = error_of({"model": {"seq_len": 260}, "parallelism": {"sp": True, "tp": 4, "cp": 2, "dp": 1, "pp": 1}})
    assert "parallelism.cp·tp = 2·4 = 8 with parallelism.sp=true" in msg
    job_from_dict({"model": {"seq_len": 264}, "parallelism": {"sp": True, "tp": 4, "cp": 2, "dp": 1, "pp": 1}})


# --- fabric -------------------------------------------------------------------------------------

def test_fabric_file_and_kind_file_go_together():
    assert "is ignored with fabric.kind=leaf-spine" in error_of({"fabric": {"kind": "leaf-spine", "file": "/t.yaml"}})
    assert "is ignored with fabric.kind=rail-optimised" in error_of({"fabric": {"file": "/t.yaml"}})
    assert error_of({"fabric": {"kind": "file"}}).startswith("fabric.kind=file needs fabric.file")
    assert "fabric.planes=2 with fabric.kind=file" in error_of({"fabric": {"kind": "file", "file": "/t", "planes": 2}})
    assert job_from_dict({"fabric": {"kind": "file", "file": "/t.yaml"}}).fabric.file == "/t.yaml"


# (key as written, its value, the other key and value named, the job): every row of config.INERT
NO_EFFECT = [
    ("fabric.nodes_per_leaf", 4, "fabric.kind=fat-tree", {"fabric": {"kind": "fat-tree", "nodes_per_leaf": 4}}),
    ("fabric.nodes_per_leaf", 4, "fabric.kind=file", {"fabric": {"kind": "file", "file": "/t", "nodes_per_leaf": 4}}),
    ("fabric.spines", 4, "fabric.kind=fat-tree", {"fabric": {"kind": "fat-tree", "spines": 4}}),
    ("cluster.spines", 4, "fabric.kind=fat-tree", {"cluster": {"spines": 4}, "fabric": {"kind": "fat-tree"}}),
    ("fabric.k", 8, "fabric.kind=leaf-spine", {"fabric": {"kind": "leaf-spine", "k": 8}}),
    ("fabric.k", 8, "fabric.kind=rail-optimised", {"fabric": {"k": 8}}),
    ("fabric.placement", "rail", "fabric.kind=leaf-spine", {"fabric": {"kind": "leaf-spine", "placement": "rail"}}),
    ("fabric.spine_core_gbps", 100, "fabric.kind=leaf-spine",
     {"fabric": {"kind": "leaf-spine", "spine_core_gbps": 100}}),
    ("fabric.core_oversubscription", 2, "fabric.kind=rail-optimised", {"fabric": {"core_oversubscription": 2}}),
    ("fabric.spine_core_latency_ns", 9, "fabric.kind=rail-optimised", {"fabric": {"spine_core_latency_ns": 9}}),
    ("fabric.leaf_spine_gbps", 100, "fabric.kind=file",
     {"fabric": {"kind": "file", "file": "/t", "leaf_spine_gbps": 100}}),
    ("fabric.oversubscription", 2, "fabric.kind=file",
     {"fabric": {"kind": "file", "file": "/t", "oversubscription": 2}}),
    ("fabric.leaf_spine_latency_ns", 9, "fabric.kind=file",
     {"fabric": {"kind": "file", "file": "/t", "leaf_spine_latency_ns": 9}}),
    ("fabric.oversubscription", 2, "fabric.leaf_spine_gbps=100",
     {"fabric": {"leaf_spine_gbps": 100, "oversubscription": 2}}),
    ("fabric.core_oversubscription", 2, "fabric.spine_core_gbps=100",
     {"fabric": {"kind": "fat-tree", "spine_core_gbps": 100, "core_oversubscription": 2}}),
    ("model.top_k", 4, "model.experts=0", {"model": {"top_k": 4}}),
    ("model.moe_router_topk", 4, "model.experts=0", {"model": {"moe_router_topk": 4}}),
    ("model.moe_ffn_hidden", 64, "model.experts=0", {"model": {"moe_ffn_hidden": 64}}),
    ("model.shared_experts", 1, "model.experts=0", {"model": {"shared_experts": 1}}),
    ("model.first_k_dense", 1, "model.experts=0", {"model": {"first_k_dense": 1}}),
    ("model.capacity_factor", 2, "model.experts=0", {"model": {"capacity_factor": 2}}),
    ("model.q_lora_rank", 64, "model.kv_lora_rank=0", {"model": {"q_lora_rank": 64}}),
    ("model.rope_head_dim", 16, "model.kv_lora_rank=0", {"model": {"rope_head_dim": 16}}),
    ("model.v_head_dim", 16, "model.kv_lora_rank=0", {"model": {"v_head_dim": 16}}),
    ("model.kv_heads", 4, "model.kv_lora_rank=64", {"model": {"kv_lora_rank": 64, "kv_heads": 4}}),
    ("model.max_position_embeddings", 512, "model.position_embeddings=false",
     {"model": {"position_embeddings": False, "max_position_embeddings": 512}}),
    ("output.vlan_id", 7, "output.vlan=false", {"output": {"vlan": False, "vlan_id": 7}}),
    ("output.pcp", 5, "output.vlan=false", {"output": {"vlan": False, "pcp": 5}}),
    ("output.qp_split", "true", "nccl.qps_per_connection=1", {"output": {"qp_split": True}}),
    ("output.ecn_pattern", "periodic", "output.ecn_mark_fraction=0", {"output": {"ecn_pattern": "periodic"}}),
    ("output.ecn_seed", 3, "output.ecn_mark_fraction=0", {"output": {"ecn_seed": 3}}),
    ("output.ecn_seed", 3, "output.ecn_pattern=periodic",
     {"output": {"ecn_mark_fraction": 0.1, "ecn_pattern": "periodic", "ecn_seed": 3}}),
    ("output.dcqcn", "true", "output.ecn_mark_fraction=0", {"output": {"dcqcn": True}}),
    ("output.ecn_mark_fraction", 0.1, "output.ecn_marking=queue",
     {"output": {"ecn_marking": "queue", "ecn_mark_fraction": 0.1}}),
    ("network.pfc_xoff_bytes", 500000, "network.pfc=false", {"network": {"pfc": False, "pfc_xoff_bytes": 500000}}),
    ("network.pfc_resume_offset_bytes", 1, "network.pfc=false",
     {"network": {"pfc": False, "pfc_resume_offset_bytes": 1}}),
    ("network.pfc_headroom_bytes", 1, "network.pfc=false", {"network": {"pfc": False, "pfc_headroom_bytes": 1}}),
    ("network.pfc_pause_quanta", 1, "network.pfc=false", {"network": {"pfc": False, "pfc_pause_quanta": 1}}),
    ("network.dcqcn_rate_ai_mbps", 40, "network.cc_mode=hpcc",
     {"network": {"cc_mode": "hpcc", "dcqcn_rate_ai_mbps": 40}}),
    ("network.dcqcn_rate_hai_mbps", 40, "network.cc_mode=dctcp",
     {"network": {"cc_mode": "dctcp", "dcqcn_rate_hai_mbps": 40}}),
]


@pytest.mark.parametrize("key,value,other,job", NO_EFFECT, ids=[f"{r[0]}|{r[2]}" for r in NO_EFFECT])
def test_a_key_with_no_effect_is_refused_naming_both_keys(key, value, other, job):
    msg = error_of(job)
    assert msg.startswith(f"{key}={value} has no effect with {other} (")
    assert "remove it or set " in msg


def test_no_effect_rows_are_all_tested():
    assert {r[0] for r in NO_EFFECT} >= {k for k, *_ in config.INERT}
    assert len({(k, o) for k, o, *_ in config.INERT}) <= len(NO_EFFECT)


def test_keys_that_act_are_accepted():
    ok = [{"fabric": {"kind": "fat-tree", "k": 8, "placement": "rail", "spine_core_gbps": 800,
                      "spine_core_latency_ns": 9, "leaf_spine_gbps": 400}},
          {"fabric": {"kind": "leaf-spine", "nodes_per_leaf": 4, "spines": 4, "oversubscription": 2}},
          {"model": {"experts": 4, "top_k": 1, "capacity_factor": 2, "first_k_dense": 1}, "parallelism": {"sp": True}},
          {"output": {"ecn_mark_fraction": 0.1, "ecn_seed": 3, "dcqcn": True, "vlan_id": 7}},
          {"output": {"ecn_marking": "queue", "ecn_seed": 3, "dcqcn": True}},
          {"output": {"qp_split": True}, "nccl": {"qps_per_connection": 2}},
          {"network": {"pfc_xoff_bytes": 500000, "dcqcn_rate_ai_mbps": 40}},
          # at its default a key is harmless whatever else is set (job.resolved.yaml names every key)
          {"fabric": {"kind": "leaf-spine", "k": 0, "spine_core_gbps": 0}, "output": {"vlan": False, "vlan_id": 100}}]
    for d in ok:
        job_from_dict(d)


def test_no_effect_keys_a_preset_carries_are_reset_and_replay(tmp_path):
    # dgx-h100 carries nodes_per_leaf 32, spines 16, leaf_spine_gbps 800 into the fabric section: on a
    # fat-tree the first two do nothing (reset to their defaults), the rate rates the leaf uplinks.
    job = load_job(sets=["cluster=dgx-h100", "fabric.kind=fat-tree", "parallelism.dp=4"])
    f = job.fabric
    assert (f.nodes_per_leaf, f.spines, f.leaf_spine_gbps) == (16, 2, 800)
    p = tmp_path / "job.resolved.yaml"
    p.write_text(yaml.safe_dump(job_to_dict(job), sort_keys=False))
    assert load_job(p) == job


@pytest.mark.parametrize("preset", [n for n, _ in config.list_presets()["jobs"]])
def test_every_shipped_job_replays_every_key_as_written(preset, tmp_path):
    job = load_job(preset=preset)
    assert inert_keys(job) == []
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(job_to_dict(job), sort_keys=False))
    assert load_job(p) == job          # every key written by the user: nothing is without effect


def test_oversubscription_has_a_floor_above_zero():
    assert error_of({"fabric": {"kind": "leaf-spine", "oversubscription": 0.0001}}).startswith(
        "fabric.oversubscription: must be 0 or in 0.01..1000")
    assert "fabric.core_oversubscription: must be 0 or in 0.01..1000" in error_of(
        {"fabric": {"kind": "fat-tree", "core_oversubscription": 0.001}})
    assert "network.dcqcn_rate_ai_mbps: must be 0 or in 0.001.." in error_of({"network": {"dcqcn_rate_ai_mbps": 1e-6}})
    from tracegen.fabric.topology import build_fabric
    job = job_from_dict({"fabric": {"kind": "leaf-spine", "nodes_per_leaf": 1, "oversubscription": 0.01}})
    up = build_fabric(job).links
    up = up[up["a"] >= 8]["gbps"]                    # 2 NICs x 400G down, 2 spines: 800 / (0.01 x 2)
    assert set(up.tolist()) == {40_000}


# --- network and output -------------------------------------------------------------------------

def test_thresholds_above_the_switch_buffer():
    assert error_of({"network": {"kmax_bytes": 40 << 20}}).startswith(
        f"network.kmax_bytes={40 << 20} is above network.buffer_bytes={32 << 20}")
    assert error_of({"network": {"pfc_xoff_bytes": 33 << 20}}).startswith(
        f"network.pfc_xoff_bytes={33 << 20} is above network.buffer_bytes={32 << 20}")
    assert error_of({"network": {"pfc_headroom_bytes": 33 << 20}}).startswith("network.pfc_headroom_bytes=")
    job_from_dict({"network": {"kmax_bytes": 32 << 20, "pfc_xoff_bytes": 32 << 20, "pfc_headroom_bytes": 32 << 20}})


def test_ce_marks_need_ect_packets():
    msg = error_of({"output": {"ecn": 0, "ecn_mark_fraction": 0.05}})
    assert msg.startswith("output.ecn_mark_fraction=0.05 marks CE on data packets sent Not-ECT (output.ecn=0)")
    assert "output.ecn=3" in error_of({"output": {"ecn": 3, "ecn_mark_fraction": 0.05}})
    job_from_dict({"output": {"ecn": 1, "ecn_mark_fraction": 0.05}})
    job_from_dict({"output": {"ecn": 0}})
    assert error_of({"output": {"ecn": 0, "ecn_marking": "queue"}}).startswith(
        "output.ecn_marking=queue marks CE on data packets sent with output.ecn=0")
    job_from_dict({"output": {"ecn": 1, "ecn_marking": "queue"}})


def test_pcap_comments_and_dcqcn_need_their_partner_key():
    assert error_of({"output": {"comments": True}}).startswith("output.comments=true needs output.format=pcapng")
    job_from_dict({"output": {"comments": True, "format": "pcapng"}})
    msg = error_of({"output": {"dcqcn": True, "ecn_mark_fraction": 0.1}, "network": {"cc_mode": "timely"}})
    assert "output.dcqcn=true" in msg and "network.cc_mode" in msg


def test_description_is_a_string_within_the_limit():
    assert error_of({"description": "d" * 65_537}) == "description: a string of 65,537 characters; at most 65,536"
    assert error_of({"description": {"a": 1}}).startswith("description: expected a string")
    job_from_dict({"description": "d" * 65_536})


# --- paths a job names: from the file that names them -------------------------------------------

def test_relative_paths_resolve_from_the_job_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "job.yaml").write_text("fabric: {kind: file, file: fab.yaml}\noutput: {lab: ../lab.yaml}\n")
    job = load_job("sub/job.yaml")
    assert job.fabric.file == str(tmp_path / "sub" / "fab.yaml")
    assert job.output.lab == str(tmp_path / "sub" / "../lab.yaml")
    (tmp_path / "job.yaml").write_text("fabric: {kind: file, file: /abs/fab.yaml}\n")
    assert load_job("job.yaml").fabric.file == "/abs/fab.yaml"
    # --set is typed in the current folder
    assert load_job(sets=["fabric.kind=file", "fabric.file=here.yaml"]).fabric.file == str(tmp_path / "here.yaml")


def test_relative_paths_in_presets_resolve_from_the_preset(tmp_path, monkeypatch):
    root = tmp_path / "presets"
    for kind, text in {"fabrics": "kind: file\nfile: topo/fab.yaml\n",
                       "jobs": "fabric: {kind: file, file: fab2.yaml}\noutput: {lab: lab.yaml}\n"}.items():
        (root / kind).mkdir(parents=True)
        (root / kind / "mine.yaml").write_text(text)
    monkeypatch.setattr(config.presets, "preset_dir", lambda kind: root / kind)
    monkeypatch.chdir(tmp_path)
    assert job_from_dict({"fabric": "mine"}).fabric.file == str(root / "fabrics" / "topo/fab.yaml")
    job = load_job(preset="mine")
    assert (job.fabric.file, job.output.lab) == (str(root / "jobs" / "fab2.yaml"), str(root / "jobs" / "lab.yaml"))


def test_a_relative_topology_file_is_read_next_to_the_job(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fab.yaml").write_text("switches: {a: 1}\nlinks: []\nnics: [a, a, a, a, a, a, a, a]\n")
    (tmp_path / "sub" / "job.yaml").write_text("fabric: {kind: file, file: fab.yaml}\n")
    monkeypatch.chdir(tmp_path)
    from tracegen.fabric.topology import build_fabric
    assert build_fabric(load_job("sub/job.yaml")).sw_name == ["a"]
    (tmp_path / "sub" / "fab.yaml").rename(tmp_path / "fab.yaml")      # beside the cwd only: not ours
    with pytest.raises(ConfigError, match="fab.yaml"):
        build_fabric(load_job("sub/job.yaml"))


# --- options typed on the command line ------------------------------------------------------------

def test_with_options_names_the_option():
    job = load_job()
    with pytest.raises(ConfigError) as e:
        with_options(job, "output", {"time_window": "9:3"}, {"time_window": "--time-window"})
    assert str(e.value).startswith("--time-window '9:3': use START_NS:END_NS")
    with pytest.raises(ConfigError) as e:
        with_options(job, "output", {"time_window": "9:3"})
    assert str(e.value).startswith("output.time_window='9:3': use START_NS:END_NS")
    with pytest.raises(ConfigError, match=r"^--snaplen: must be at most 262,144"):
        with_options(job, "output", {"snaplen": 1 << 20}, {"snaplen": "--snaplen"})
    out = with_options(job, "output", {"time_window": "3:9", "lab": "p.yaml"}).output
    assert out.time_window == "3:9" and out.lab == os.path.join(os.getcwd(), "p.yaml")


# --- the YAML reader every input shares ---------------------------------------------------------

def test_got_an_integer(tmp_path):
    p = tmp_path / "j.yaml"
    for text, want in [("42\n", "got an integer"), ("- 1\n", "got a list"), ("abc\n", "got a string"),
                       ("1.5\n", "got a number"), ("true\n", "got a boolean (true)"), ("", "got an empty file")]:
        p.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_job(p)
        assert str(e.value).endswith(f"expected a mapping of keys (model:, parallelism:, ...), {want}")


def test_read_yaml_file_serves_other_inputs(tmp_path):
    p = tmp_path / "topo.yaml"
    p.write_text("[1, 2]\n")
    with pytest.raises(ConfigError) as e:
        read_yaml_file(p, "topology file")
    assert str(e.value) == f"{p}: expected a mapping of keys, got a list"
    p.write_text("links: " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(ConfigError, match=r"nested more than 32 levels deep$"):
        read_yaml_file(p, "topology file")
    p.write_text("switches: {a: 1, a: 2}\n")
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        read_yaml_file(p, "topology file")
    with pytest.raises(ConfigError, match="no such topology file"):
        read_yaml_file(tmp_path / "missing.yaml", "topology file")
    with pytest.raises(ConfigError, match="larger than 256 KiB; a topology file needs"):
        read_yaml_file("/dev/zero", "topology file")
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8 at byte offset 8"):
        read_yaml_file(p, "topology file")


def test_check_field_is_strict():
    assert check_field("links[0][2]", 400, int, 1, 10**7) == 400
    assert check_field("x", 2, float) == 2.0 and isinstance(check_field("x", 2, float), float)
    for value, typ, want in [(True, int, "links[0][2]: expected an integer, got True"),
                             (True, float, "links[0][2]: expected a number, got True"),
                             ("400", int, "links[0][2]: expected an integer, got '400'"),
                             (0, int, "links[0][2]: must be in 1..10,000,000, got 0")]:
        with pytest.raises(ConfigError) as e:
            check_field("links[0][2]", value, typ, 1, 10**7)
        assert str(e.value) == want
    with pytest.raises(ConfigError, match=r"^w: must be >= 0, got -1$"):
        check_field("w", -1, int, 0)


def test_a_job_file_that_is_dev_zero(tmp_path):
    (tmp_path / "job.yaml").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="job.yaml: larger than 256 KiB"):
        load_job(tmp_path / "job.yaml")


def test_preset_paths_are_package_paths():
    assert Path(str(config.presets.preset_dir("fabrics"))).is_dir()


def test_moe_with_tensor_parallel_needs_sequence_parallel():
    """Megatron-core (arguments.py) refuses MoE with tensor parallelism but without sequence
    parallelism: its token dispatcher takes the sequence-parallel token shards."""
    moe = {"model": {"experts": 4, "top_k": 1}, "parallelism": {"tp": 2, "ep": 2, "dp": 2, "global_batch": 8}}
    assert "parallelism.sp" in error_of(moe)
    job_from_dict({**moe, "parallelism": {**moe["parallelism"], "sp": True}})
