"""Fabric: rails, shared NICs (nics_per_node, gpu_nic_map), PXN and the address plan."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.config import job_from_dict
from tracegen.errors import ConfigError
from schedule_validator import assert_valid, fabric_routes
from tracegen.pipeline import run_pipeline
from tracegen.tables import LinkKind
from tracegen.topology import build_fabric


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
    from tracegen.emit.pcap import write_pcaps
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
