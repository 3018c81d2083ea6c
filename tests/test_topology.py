"""Fabric: rails, shared NICs (nics_per_node, gpu_nic_map), PXN and the address plan."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.config import job_from_dict
from tracegen.errors import ConfigError
from schedule_validator import assert_valid, fabric_routes
from tracegen.pipeline import run_pipeline
from tracegen.tables import LinkKind
from tracegen.fabric.topology import build_fabric


def job(nics=0, gmap="", pxn=False, dp=4, tp=1, gpn=8, algorithm="ring"):
    return job_from_dict({
        "model": {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64},
        "parallelism": {"dp": dp, "tp": tp, "pp": 1, "global_batch": dp},
        "cluster": {"gpus_per_node": gpn, "nics_per_node": nics, "gpu_nic_map": gmap, "nodes": dp * tp // gpn},
        "nccl": {"pxn": pxn, "algorithm": algorithm}})


def test_default_one_nic_per_gpu_on_its_rail():
    f = build_fabric(job(dp=16))
    assert f.n_nics == 16 and (f.rank_nic == np.arange(16)).all()
    assert (f.nic_rail == np.arange(16) % 8).all()
    assert f.nic_ip_str(9) == "10.1.0.2" and bytes(f.nic_mac[9]).hex() == "020001000101"


@pytest.mark.parametrize("nics", [1, 2, 4, 8])
def test_nics_per_node_shares_nics_between_neighbouring_gpus(nics):
    f = build_fabric(job(nics=nics, dp=16))
    assert f.n_nics == 2 * nics
    share = 8 // nics
    assert (f.rank_nic == (np.arange(16) // 8) * nics + (np.arange(16) % 8) // share).all()
    assert f.n_leaves == nics and len(f.links) == 2 * nics + nics * (f.n_spines)


def test_gpu_nic_map_and_transfers_use_the_gpus_nic():
    j = job(nics=2, gmap="1,1,1,1,0,0,0,0", dp=16)
    run = run_pipeline(j)
    f, r = run.fabric, run.flows.rows
    assert (f.rank_nic[:8] == [1, 1, 1, 1, 0, 0, 0, 0]).all()
    net = r[r["link"] == LinkKind.NET]
    assert len(net) and (net["src_nic"] == f.rank_nic[net["src_rank"]]).all()
    assert (net["dst_nic"] == f.rank_nic[net["dst_rank"]]).all()
    # GPUs sharing a NIC share its rate: no window carries more than it can (judged by
    # tests/schedule_validator.py from WIRE.md, with NIC ports per NIC, not per GPU)
    assert_valid(run.flows, f, j.output, fabric_routes, exact=False)


@pytest.mark.parametrize("nics", [2, 4, 8])
def test_pxn_keeps_every_net_send_on_the_destination_rail(nics):
    j = job(nics=nics, pxn=True, dp=16, tp=1)
    run = run_pipeline(j)
    f, r = run.fabric, run.flows.rows
    net = r[r["link"] == LinkKind.NET]
    assert len(net)
    assert (f.nic_rail[net["src_nic"]] == f.nic_rail[net["dst_nic"]]).all()
    same = f.rank_node[r["src_rank"]] == f.rank_node[r["dst_rank"]]
    assert (r["link"][same] == LinkKind.NVLINK).all()


@pytest.mark.parametrize("kw,key", [
    (dict(nics=3), "nics_per_node"),
    (dict(nics=16), "nics_per_node"),
    (dict(nics=2, gmap="0,1"), "gpu_nic_map"),
    (dict(nics=2, gmap="0,0,0,0,1,1,1,2"), "gpu_nic_map"),
])
def test_bad_nic_plans(kw, key):
    with pytest.raises(ConfigError, match=key):
        job(dp=16, **kw)


def test_gpus_sharing_a_nic_keep_their_own_qps(tmp_path):
    """Two GPUs behind one NIC talking to two GPUs behind another: separate QPs (NCCL connections)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.utils import rdpcap
    from tracegen.emit.views.pcap import write_pcaps
    j = job_from_dict({
        "model": {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64},
        "parallelism": {"dp": 4, "tp": 2, "pp": 2, "global_batch": 4},
        "cluster": {"gpus_per_node": 8, "nics_per_node": 1}})   # PP: 8 GPU pairs, one NIC pair
    run = run_pipeline(j)
    r = run.flows.rows
    net = r[r["link"] == LinkKind.NET]
    # One NCCL connection per (rank pair, communicator, channel); PP and the embedding group
    # (first and last stage) are two communicators between the same ranks.
    dim = run.flows.ops.rows["dim"][net["op_id"]]
    pairs = {(int(a), int(b), int(d), int(c)) for a, b, d, c in
             zip(net["src_rank"], net["dst_rank"], dim, net["channel"]) if run.fabric.rank_nic[a] == 0}
    paths = write_pcaps(run.flows, run.fabric, j.output, tmp_path)
    dqps = {(p[IP].dst, int(p[BTH].dqpn)) for p in rdpcap(str(paths[0]))
            if BTH in p and p[BTH].opcode in (0x06, 0x0B) and p[IP].src == run.fabric.nic_ip_str(0)}
    assert len(pairs) > 1 and len(dqps) == len(pairs)


# --- fabrics without spines; jobs without a NIC -------------------------------------------------

from tracegen.config import load_job  # noqa: E402


@pytest.mark.parametrize("sets,text,spines", [
    ([], "leaves 8..9, spines 10..11", 2),                                     # the default job
    (["fabric.kind=leaf-spine"], "leaf 8, no spines", 0),                      # 4 nodes fit one leaf
    (["fabric.kind=fat-tree", "fabric.k=16"], "leaf 8, no spines", 0),         # 8 ports of 8: one leaf
    (["fabric.kind=fat-tree", "fabric.k=8"], "leaves 8..9, spines 10..13", 4),  # one pod, no core
    (["fabric=multi-plane-2", "fabric.kind=leaf-spine", "fabric.nodes_per_leaf=2"],
     "leaves 8..9 and 12..13, spines 10..11 and 14..15", 2),
])
def test_switch_ids_of_every_shape(sets, text, spines):
    """What a README needs about switch ids, well defined for any fabric: per tier the node ids
    (NICs 0..7 first), spines only where there are; spine_node_id refuses one that does not exist."""
    f = build_fabric(load_job(sets=sets))
    assert f.switch_ids_text() == text and f.n_spines == spines
    assert f.tier_node_ids(2, plane=0).tolist() == list(range(f.n_nics + f.n_leaves, f.n_nics + f.n_leaves + spines))
    if spines:
        assert f.spine_node_id(spines - 1) == f.tier_node_ids(2, plane=0)[-1]
    with pytest.raises(IndexError, match="no spines" if not spines else f"spines 0..{spines - 1}"):
        f.spine_node_id(spines)


@pytest.mark.parametrize("extra,line", [
    ([], "no pcap files and no ns-3 scenario written"),
    (["--no-ns3"], "no pcap files written"),
    (["--nics", "0", "--format", "pcapng"], "no pcap files and no ns-3 scenario written"),
    (["--no-pcap", "--no-ns3"], None),
])
def test_one_node_job_writes_everything_but_the_wire(tmp_path, extra, line):
    """One node of 8 GPUs: every transfer on NVLink. Tables, pictures, Perfetto and summaries are
    written; pcaps and ns-3 files are not, and one line says why (none when neither was asked)."""
    from click.testing import CliRunner
    from tracegen.cli import main
    out = tmp_path / "one"
    res = CliRunner().invoke(main, ["generate", "-q", "--set", "cluster.nodes=1", "--set", "cluster.gpus_per_node=8",
                                    *extra, "-o", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    if line is None:
        assert lines == []
    else:
        assert lines == [f"warning: no traffic crosses a NIC (one node: every transfer stays on NVLink), so {line}"]
    files = {p.name for p in out.iterdir()}
    assert {"flows.csv", "ops.csv", "perfetto.json", "summary.json", "summary.md", "gantt.png",
            "traffic_matrix.png", "timeline.png"} <= files and not {"pcap", "ns3"} & files
    import csv
    rows = list(csv.DictReader(open(out / "flows.csv")))
    assert rows and {r["link"] for r in rows} == {"NVLINK"} and {r["route"] for r in rows} == {""}
    import json
    summary = json.loads((out / "summary.json").read_text())
    assert summary["job"]["output"]["pcap"] is ("--no-pcap" not in extra)          # the job as asked
