"""ns-3 scenario export, checked by readers written here from the simulators' C++ logic.

The readers below are independent of tracegen.emit.sims.ns3: they follow HPCC's scratch/third.cc
(config.txt as a stream of `KEY value` tokens; topology/flow/trace as `>>` token streams) and
ns-3-alibabacloud dev/qp's scratch/common.h + config.h (line-based `KEY rest-of-line` config,
7-field topology header). Anything they cannot read the C++ could not read either.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from decimal import Decimal

import numpy as np
import pytest

from tracegen.collectives.protocol import wire_bytes
from tracegen.config import Cluster, Job, Network, Parallelism, FabricConfig
from tracegen.emit.sims.ns3 import write_ns3
from tracegen.errors import ConfigError
from tracegen.tables import (COMMOP_DTYPE, FLOW_DTYPE, Algo, CollKind, CommOps, Dim, Flows,
                             LinkKind, Phase, Proto, Ragged)
from tracegen.fabric.topology import build_fabric

UINT32_MAX = 2**32 - 1

# ------------------------------------------------------------------ HPCC third.cc reader
# Every key third.cc's config loop compares against, with what it reads after the key.
U32, U64, DBL, STR = "u32", "u64", "double", "string"
THIRD_CC_KEYS = {
    "ENABLE_QCN": U32, "USE_DYNAMIC_PFC_THRESHOLD": U32, "CLAMP_TARGET_RATE": U32,
    "PAUSE_TIME": DBL, "DATA_RATE": STR, "LINK_DELAY": STR, "PACKET_PAYLOAD_SIZE": U32,
    "L2_CHUNK_SIZE": U32, "L2_ACK_INTERVAL": U32, "L2_BACK_TO_ZERO": U32, "TOPOLOGY_FILE": STR,
    "FLOW_FILE": STR, "TRACE_FILE": STR, "TRACE_OUTPUT_FILE": STR, "SIMULATOR_STOP_TIME": DBL,
    "ALPHA_RESUME_INTERVAL": DBL, "RP_TIMER": DBL, "EWMA_GAIN": DBL, "FAST_RECOVERY_TIMES": U32,
    "RATE_AI": STR, "RATE_HAI": STR, "ERROR_RATE_PER_LINK": DBL, "CC_MODE": U32,
    "RATE_DECREASE_INTERVAL": DBL, "MIN_RATE": STR, "FCT_OUTPUT_FILE": STR, "HAS_WIN": U32,
    "GLOBAL_T": U32, "MI_THRESH": U32, "VAR_WIN": U32, "FAST_REACT": U32, "U_TARGET": DBL,
    "INT_MULTI": U32, "RATE_BOUND": U32, "ACK_HIGH_PRIO": U32, "DCTCP_RATE_AI": STR,
    "PFC_OUTPUT_FILE": STR, "LINK_DOWN": "link_down", "ENABLE_TRACE": U32,
    "KMAX_MAP": "map_u32", "KMIN_MAP": "map_u32", "PMAX_MAP": "map_double", "BUFFER_SIZE": U32,
    "QLEN_MON_FILE": STR, "QLEN_MON_START": U64, "QLEN_MON_END": U64, "MULTI_RATE": U32,
    "SAMPLE_FEEDBACK": U32, "PINT_LOG_BASE": DBL, "PINT_PROB": DBL,
}


class Tokens:
    """`std::istream >> x` over whitespace tokens; a failed extraction is an error here."""

    def __init__(self, text: str):
        self.toks, self.i = text.split(), 0

    def more(self) -> bool:
        return self.i < len(self.toks)

    def word(self) -> str:
        if not self.more():
            raise ValueError("unexpected end of file")
        self.i += 1
        return self.toks[self.i - 1]

    def uint(self, bits: int) -> int:
        w = self.word()
        if not re.fullmatch(r"\d+", w) or int(w) >= 2**bits:
            raise ValueError(f"{w!r} is not a uint{bits}")
        return int(w)

    def double(self) -> float:
        w = self.word()
        if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", w):
            raise ValueError(f"{w!r} is not a double")
        return float(w)


def read_value(t: Tokens, kind: str):
    if kind == U32:
        return t.uint(32)
    if kind == U64:
        return t.uint(64)
    if kind == DBL:
        return t.double()
    if kind == STR:
        return t.word()
    if kind == "link_down":
        return (t.uint(64), t.uint(32), t.uint(32))
    n = t.uint(31)                                   # `int n_k; conf >> n_k;`
    return {t.uint(64): (t.uint(32) if kind == "map_u32" else t.double()) for _ in range(n)}


def read_hpcc_config(text: str) -> dict:
    t, conf = Tokens(text), {}
    while t.more():
        key = t.word()
        if key not in THIRD_CC_KEYS:
            raise ValueError(f"third.cc does not read key {key!r}")
        conf[key] = read_value(t, THIRD_CC_KEYS[key])
    return conf


def read_topology(text: str, simai: bool = False) -> dict:
    t = Tokens(text)
    if simai:   # node_num gpus_per_server nvswitch_num switch_num link_num gpu_type ngpus_per_node
        nodes, gps, nvsw, switches, links = (t.uint(32) for _ in range(5))
        gpu, gpn = t.word(), t.uint(31)
        nv_ids = [t.uint(32) for _ in range(nvsw)]
    else:
        nodes, switches, links = t.uint(32), t.uint(32), t.uint(32)
        nv_ids = []
    sw_ids = [t.uint(32) for _ in range(switches)]
    for sid in sw_ids + nv_ids:
        assert sid < nodes, f"switch id {sid} >= node count {nodes}"
    link_rows = []
    for _ in range(links):
        a, b, rate, delay, err = t.uint(32), t.uint(32), t.word(), t.word(), t.double()
        assert a < nodes and b < nodes
        link_rows.append((a, b, data_rate_bps(rate), time_ns(delay), err))
    assert not t.more(), "tokens left after the last link"
    out = {"nodes": nodes, "switches": set(sw_ids), "links": link_rows}
    if simai:
        out.update(gpus_per_server=gps, nvswitches=nv_ids, gpu_type=gpu, gpus_per_node=gpn)
    return out


def data_rate_bps(s: str) -> int:
    m = re.fullmatch(r"(\d+)(bps|Kbps|Mbps|Gbps)", s)
    assert m, f"bad DataRate {s!r}"
    return int(m[1]) * {"bps": 1, "Kbps": 10**3, "Mbps": 10**6, "Gbps": 10**9}[m[2]]


def time_ns(s: str) -> int:
    m = re.fullmatch(r"(\d+)(ns|us|ms|s)", s)
    assert m, f"bad Time {s!r}"
    return int(m[1]) * {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}[m[2]]


def read_flows(text: str, topo: dict) -> list[tuple]:
    t = Tokens(text)
    n = t.uint(32)
    flows = []
    for _ in range(n):
        # src dst pg dport maxPacketCount(uint32 in HPCC) start_time(double)
        src, dst, pg, dport, size = (t.uint(32) for _ in range(5))
        start_tok = t.word()
        assert re.fullmatch(r"\d+\.\d{9}", start_tok), f"start {start_tok!r} is not %.9f"
        for node in (src, dst):   # NS_ASSERT(GetNodeType() == 0)
            assert node < topo["nodes"] and node not in topo["switches"]
        flows.append((src, dst, pg, dport, size, Decimal(start_tok)))
    assert not t.more(), "tokens left after the last flow"
    starts = [f[5] for f in flows]
    assert starts == sorted(starts), "flow.txt is not sorted by start time"
    return flows


def read_trace(text: str) -> list[int]:
    t = Tokens(text)
    ids = [t.uint(32) for _ in range(t.uint(32))]
    assert not t.more()
    return ids


# ------------------------------------------------------------------ SimAI (dev/qp) reader
# config_map keys of scratch/common.h (two dev/qp versions: BW_MON_FILE became TX_/RX_BW_MON_FILE).
SIMAI_KEYS = {k: v for k, v in THIRD_CC_KEYS.items()
              if k not in ("DATA_RATE", "LINK_DELAY", "QLEN_MON_START", "QLEN_MON_END")}
SIMAI_KEYS.update({
    "DATA_RATE": STR, "LINK_DELAY": STR, "SEND_OUTPUT_FILE": STR, "SWITCH_FORWARD_DELAY": DBL,
    "QP_MON_INTERVAL": U32, "BW_MON_INTERVAL": U32, "QLEN_MON_INTERVAL": U32, "MON_START": U64,
    "MON_END": U64, "BW_MON_FILE": STR, "TX_BW_MON_FILE": STR, "RX_BW_MON_FILE": STR,
    "RATE_MON_FILE": STR, "CNP_MON_FILE": STR, "NIC_TOTAL_PAUSE_TIME": U32,
})
# Attributes a `ns3::Class::Attr value` line may set here (must exist in the dev/qp build).
SIMAI_NS3_ATTRS = {"ns3::SwitchNode::PfcEnabled": "bool", "ns3::QbbNetDevice::QbbEnabled": "bool"}


def read_simai_config(text: str) -> dict:
    conf = {}
    for line in text.split("\n"):
        if line == "" or line[0] == "#":
            continue
        key, _, value = line.partition(" ")
        if key.startswith("ns3::"):
            assert key in SIMAI_NS3_ATTRS, f"unexpected ns-3 attribute {key}"
            # ParseAndSetConfigDefault: only "true"/"false" become BooleanValue
            assert value in ("true", "false"), f"{key} {value!r} would not parse as a bool"
            conf[key] = value == "true"
            continue
        assert key in SIMAI_KEYS, f"SimAI config_map has no key {key!r}"
        t = Tokens(value)
        conf[key] = read_value(t, SIMAI_KEYS[key])
        assert not t.more(), f"{key}: extra tokens {value!r}"
    return conf


# ------------------------------------------------------------------ test data

def make_ops(specs, deps=None, gaps=None) -> CommOps:
    rows = np.zeros(len(specs), dtype=COMMOP_DTYPE)
    rows["op_id"] = np.arange(len(specs))
    rows["kind"] = [k for k, _ in specs]
    rows["dim"] = [d for _, d in specs]
    rows["phase"] = Phase.BWD
    rows["bytes"] = 1 << 20
    rows["gap_ns"] = gaps or 0
    return CommOps(rows, Ragged.from_lists([[0, 1]] * len(specs)),
                   Ragged.from_lists(deps) if deps else Ragged.empty(len(specs)))


def make_flows(fabric, specs, ops=None, op_times=None) -> Flows:
    """specs: (op_id, link, src_rank, dst_rank, bytes, start_ns, deps[, proto])"""
    rows = np.zeros(len(specs), dtype=FLOW_DTYPE)
    cols = list(zip(*[x[:6] for x in specs])) if specs else [()] * 6
    op, link, src, dst, nbytes, start = (np.array(c, dtype=np.int64) for c in cols)
    net = link == LinkKind.NET
    rows["transfer_id"] = np.arange(len(specs))
    rows["op_id"], rows["algo"], rows["link"] = op, Algo.RING, link
    rows["src_rank"], rows["dst_rank"] = src, dst
    rows["channel"], rows["step"], rows["chunk"] = rows["transfer_id"] % 2, rows["transfer_id"], 7
    rows["bytes"], rows["max_msg_bytes"] = nbytes, 1 << 20
    rows["proto"] = [x[7] if len(x) > 7 else Proto.SIMPLE for x in specs]
    rows["wire_bytes"] = wire_bytes(nbytes, rows["proto"])
    rows["src_nic"] = np.where(net, fabric.rank_nic[src], -1)
    rows["dst_nic"] = np.where(net, fabric.rank_nic[dst], -1)
    rows["start_ns"], rows["end_ns"] = start, start + 1000 + nbytes // 50
    ops = ops or make_ops([(CollKind.ALLREDUCE, Dim.DP), (CollKind.SENDRECV, Dim.PP),
                           (CollKind.ALLGATHER, Dim.TP)])
    return Flows(rows, Ragged.from_lists([list(x[6]) for x in specs]), ops,
                 *(np.array(t, dtype=np.int64) for t in (op_times or (None, None)))
                 if op_times else ())


NET, NVL = LinkKind.NET, LinkKind.NVLINK
BASE_SPECS = [   # Job(): rank r -> node r // 2, NIC r; (0,1) (2,3) ... share a node
    (0, NET, 0, 2, 1 << 20, 500, []),
    (0, NVL, 0, 1, 777_777, 0, []),          # NVLink: never on the fabric
    (0, NET, 2, 4, 1 << 20, 500, []),        # same start as row 0: file keeps row order
    (0, NET, 4, 6, 3_000_000, 100, []),
    (1, NET, 6, 0, 5_000_000_000, 2_000, [0, 2]),   # > uint32: split
    (0, NET, 0, 2, 1 << 19, 1_500, [0]),     # same host pair again: next sport
    (2, NVL, 5, 4, 123_456, 10, []),
    (2, NET, 1, 3, 0, 50, []),               # zero bytes: nothing to send
    (2, NET, 7, 5, 65_536, 1_000_000_001, [3]),
    (1, NET, 0, 4, 4_096, 1_200, [5]),       # host 0's second destination
]


@pytest.fixture
def job():
    return Job()


@pytest.fixture
def fabric(job):
    return build_fabric(job)


@pytest.fixture
def flows(fabric):
    return make_flows(fabric, BASE_SPECS)


def export(tmp_path, flows, fabric, job, name="scn"):
    d = tmp_path / name
    paths = write_ns3(flows, fabric, job, d)
    return d, paths


def load_all(d):
    topo = read_topology((d / "topology.txt").read_text())
    return dict(
        topo=topo,
        flows=read_flows((d / "flow.txt").read_text(), topo),
        trace=read_trace((d / "trace.txt").read_text()),
        config=read_hpcc_config((d / "config.txt").read_text()),
        topo_simai=read_topology((d / "topology_simai.txt").read_text(), simai=True),
        config_simai=read_simai_config((d / "config_simai.txt").read_text()),
        manifest=json.loads((d / "manifest.json").read_text()),
    )


def sim_ip_hex(host: int) -> str:
    return "%08x" % int(ipaddress.IPv4Address(f"11.{host // 256}.{host % 256}.1"))


def switch_port_rates(topo) -> set[int]:
    return {rate for a, b, rate, _, _ in topo["links"]
            if a in topo["switches"] or b in topo["switches"]}


def check_manifest(man, lines, flows):
    """Each manifest record agrees with its flow.txt line, the flow row, and the simulators'
    port counters replayed in file order."""
    rows = flows.rows
    pair_port, host_port = {}, {}
    for k, (m, f) in enumerate(zip(man, lines)):
        assert m["index"] == k
        row = rows[m["transfer_id"]]
        if row["proto"] == Proto.SIMPLE:
            assert (m["src_nic"], m["dst_nic"], m["bytes"]) == f[:2] + (f[4],)
        assert (m["src_nic"], m["dst_nic"], m["wire_bytes"]) == f[:2] + (f[4],)  # flow.txt: wire
        assert 0 < m["bytes"] <= m["wire_bytes"]
        assert m["op_id"] == row["op_id"]
        assert row["link"] == NET
        assert (m["src_rank"], m["dst_rank"]) == (row["src_rank"], row["dst_rank"])
        assert (m["src_nic"], m["dst_nic"]) == (row["src_nic"], row["dst_nic"])
        assert Decimal(2) + Decimal(m["start_ns"]) / Decimal(10**9) == f[5]
        assert (m["sip"], m["dip"]) == (sim_ip_hex(f[0]), sim_ip_hex(f[1]))
        assert m["deps"] == flows.deps[m["transfer_id"]].tolist()
        # third.cc:137 (master, since 2020-07) and dev/qp NormalNetwork: portNumber[src][dst]++
        # from 10000 per host pair; third.cc before 2020-07: per source host
        assert m["hpcc_sport"] == m["simai_sport"] == pair_port.setdefault(f[:2], 10000)
        pair_port[f[:2]] += 1
        assert m["host_sport"] == host_port.setdefault(f[0], 10000)
        host_port[f[0]] += 1


# ------------------------------------------------------------------ tests

def test_writes_every_file(tmp_path, flows, fabric, job):
    d, paths = export(tmp_path, flows, fabric, job)
    names = {p.name for p in paths}
    assert names == {"topology.txt", "flow.txt", "trace.txt", "config.txt", "topology_simai.txt",
                     "config_simai.txt", "manifest.json", "README.md"}
    assert all(p.parent == d and p.is_file() for p in paths)
    assert not list(d.glob(".*tmp")), "temporary files left behind"


def test_topology_matches_fabric(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    topo = s["topo"]
    assert topo["nodes"] == fabric.n_nics + fabric.n_switches == 12
    assert topo["switches"] == set(range(fabric.n_nics, topo["nodes"]))
    assert [(a, b) for a, b, *_ in topo["links"]] == list(zip(fabric.links["a"].tolist(),
                                                               fabric.links["b"].tolist()))
    assert all(rate == 400 * 10**9 and delay == 1000 for _, _, rate, delay, _ in topo["links"])
    # every host has exactly one link (third.cc gives each host interface 1 only)
    ends = [x for a, b, *_ in topo["links"] for x in (a, b) if x not in topo["switches"]]
    assert sorted(ends) == list(range(fabric.n_nics))


def test_simai_topology_header(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    ts, th = s["topo_simai"], s["topo"]
    assert ts["links"] == th["links"] and ts["switches"] == th["switches"]
    assert ts["nvswitches"] == [] and ts["nodes"] == th["nodes"]
    assert ts["gpus_per_server"] == ts["gpus_per_node"] == job.cluster.gpus_per_node
    assert ts["gpu_type"] == "H100"


def test_flows_are_net_rows_sorted_split(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    lines = load_all(d)["flows"]
    rows = flows.rows
    net_bytes = int(rows["bytes"][rows["link"] == LinkKind.NET].sum())
    assert sum(f[4] for f in lines) == net_bytes
    assert all(0 < f[4] <= UINT32_MAX for f in lines)
    assert all(f[2] == 3 and f[3] == 100 for f in lines)
    # 7 non-empty NET rows, the 5 GB one in two parts
    assert len(lines) == 8
    assert not any(f[4] in (777_777, 123_456) for f in lines), "NVLink bytes reached flow.txt"
    big = [f for f in lines if f[0] == 6 and f[1] == 0]
    assert [f[4] for f in big] == [2_500_000_000, 2_500_000_000]
    assert big[0][5] == big[1][5] == Decimal("2.000002000")
    # ties keep table order: row 0 (0->2) before row 2 (2->4), both at 500 ns
    assert [(f[0], f[1]) for f in lines[:3]] == [(4, 6), (0, 2), (2, 4)]
    # start = 2.0 s + start_ns, exact to the ns
    assert lines[-1][5] == Decimal(2) + Decimal(1_000_000_001) / Decimal(10**9)
    assert lines[-1][:2] == (7, 5)


def test_config_reads_with_third_cc_keys_and_covers_rates(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    conf, topo = s["config"], s["topo"]
    rates = switch_port_rates(topo)
    for key in ("KMAX_MAP", "KMIN_MAP", "PMAX_MAP"):
        assert rates <= set(conf[key]), f"{key} misses a port rate"
    assert conf["CC_MODE"] == 1
    assert conf["KMIN_MAP"][400 * 10**9] == 150 and conf["KMAX_MAP"][400 * 10**9] == 1500
    assert conf["PMAX_MAP"][400 * 10**9] == pytest.approx(0.2)
    assert conf["BUFFER_SIZE"] == 32
    assert conf["PACKET_PAYLOAD_SIZE"] == job.output.pmtu
    assert conf["LINK_DOWN"] == (0, 0, 0)
    # input names are relative and exist in the dir; outputs land in the dir too
    for key in ("TOPOLOGY_FILE", "FLOW_FILE", "TRACE_FILE"):
        assert "/" not in conf[key] and (d / conf[key]).is_file()
    for key in ("FCT_OUTPUT_FILE", "TRACE_OUTPUT_FILE", "PFC_OUTPUT_FILE", "QLEN_MON_FILE"):
        assert "/" not in conf[key]
    assert conf["FCT_OUTPUT_FILE"] == "fct.txt"
    last_end_s = Decimal(2) + Decimal(int(flows.rows["end_ns"].max())) / Decimal(10**9)
    assert conf["SIMULATOR_STOP_TIME"] > float(last_end_s)
    assert conf["QLEN_MON_START"] == 2_000_000_000 <= conf["QLEN_MON_END"]


def test_simai_config(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    conf, hpcc = s["config_simai"], s["config"]
    assert conf["TOPOLOGY_FILE"] == "topology_simai.txt" and conf["FLOW_FILE"] == "flow.txt"
    # keys SetupNetwork dereferences unconditionally
    for key in ("CC_MODE", "PACKET_PAYLOAD_SIZE", "ENABLE_QCN", "LINK_DOWN", "QLEN_MON_FILE",
                "TX_BW_MON_FILE", "RX_BW_MON_FILE", "BW_MON_FILE", "RATE_MON_FILE",
                "CNP_MON_FILE", "SEND_OUTPUT_FILE"):
        assert key in conf
    for key in ("QLEN_MON_FILE", "TX_BW_MON_FILE", "BW_MON_FILE", "FCT_OUTPUT_FILE"):
        assert "." in conf[key] and "/" not in conf[key]   # get_output_file_name needs a dot
    for key in ("CC_MODE", "KMAX_MAP", "KMIN_MAP", "PMAX_MAP", "BUFFER_SIZE", "RATE_AI",
                "EWMA_GAIN", "PACKET_PAYLOAD_SIZE", "HAS_WIN", "INT_MULTI"):
        assert conf[key] == hpcc[key]
    assert conf["ns3::SwitchNode::PfcEnabled"] is True
    assert conf["MON_START"] == 2_000_000 < conf["MON_END"]


@pytest.mark.parametrize("mode,number", [("dcqcn", 1), ("hpcc", 3), ("timely", 7),
                                         ("dctcp", 8), ("hpcc-pint", 10)])
def test_cc_modes(tmp_path, flows, fabric, mode, number):
    job = dataclasses.replace(Job(), network=Network(cc_mode=mode))
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    assert s["config"]["CC_MODE"] == number == s["config_simai"]["CC_MODE"]
    if mode.startswith("hpcc"):
        assert s["config"]["INT_MULTI"] == 400 // 25 and s["config"]["HAS_WIN"] == 1


def test_two_port_rates_scale_ecn(tmp_path):
    job = dataclasses.replace(Job(), fabric=FabricConfig(leaf_spine_gbps=800))
    fabric = build_fabric(job)
    d, _ = export(tmp_path, make_flows(fabric, BASE_SPECS), fabric, job)
    s = load_all(d)
    rates = switch_port_rates(s["topo"])
    assert rates == {400 * 10**9, 800 * 10**9}
    for conf in (s["config"], s["config_simai"]):
        for key in ("KMAX_MAP", "KMIN_MAP", "PMAX_MAP"):
            assert set(conf[key]) == rates
        assert conf["KMAX_MAP"][800 * 10**9] == 2 * conf["KMAX_MAP"][400 * 10**9]
        assert conf["KMIN_MAP"][800 * 10**9] == 2 * conf["KMIN_MAP"][400 * 10**9]


def test_pfc_off(tmp_path, flows, fabric):
    job = dataclasses.replace(Job(), network=Network(pfc=False))
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)       # HPCC config still only has third.cc keys
    assert s["config_simai"]["ns3::SwitchNode::PfcEnabled"] is False
    readme = (d / "README.md").read_text()
    assert "NS_ATTRIBUTE_DEFAULT='ns3::QbbNetDevice::QbbEnabled=false'" in readme
    assert any("PFC is off" in w for w in s["manifest"]["warnings"])


def test_warnings_for_hpcc_limits(tmp_path):
    # 33 nodes x 8 rails, one node per leaf: 264 leaves, so each spine has 264 ports
    job = Job(parallelism=Parallelism(dp=33, tp=8, pp=1, global_batch=33),
              cluster=Cluster(gpus_per_node=8), fabric=FabricConfig(nodes_per_leaf=1, leaf_spine_gbps=800),
              network=Network(cc_mode="hpcc"))
    fabric = build_fabric(job)
    d, _ = export(tmp_path, make_flows(fabric, [(0, NET, 0, 8, 4096, 0, [])]), fabric, job)
    s = load_all(d)
    warnings = s["manifest"]["warnings"]
    assert any("more than 256 ports" in w for w in warnings)
    assert any("INT line-rate" in w and "800" in w for w in warnings)
    assert "## Warnings" in (d / "README.md").read_text()
    assert not load_all(export(tmp_path, make_flows(build_fabric(Job()), BASE_SPECS),
                               build_fabric(Job()), Job(), "ok")[0])["manifest"]["warnings"]


def test_manifest_maps_every_line(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    lines, man = s["flows"], s["manifest"]["flows"]
    assert len(man) == len(lines)
    rows = flows.rows
    assert sum(m["bytes"] for m in man) == int(rows["bytes"][rows["link"] == NET].sum())
    check_manifest(man, lines, flows)
    first = man[0]
    assert (first["kind"], first["dim"], first["op_id"]) == ("AllReduce", "DP", 0)
    assert {m["kind"] for m in man} == {"AllReduce", "SendRecv", "AllGather"}
    big = [m for m in man if m["transfer_id"] == 4]
    assert [(m["part"], m["parts"]) for m in big] == [(0, 2), (1, 2)]
    assert s["manifest"]["skipped_zero_byte_transfers"] == [7]
    # host 0 sends 0->2, 0->4, 0->2: HPCC (since 2020-07) and SimAI count per pair, HPCC before
    # per source host
    host0 = [(m["dst_nic"], m["hpcc_sport"], m["simai_sport"], m["host_sport"])
             for m in man if m["src_nic"] == 0]
    assert host0 == [(2, 10000, 10000, 10000), (4, 10000, 10000, 10001),
                     (2, 10001, 10001, 10002)]


def test_flow_txt_sizes_are_wire_bytes(tmp_path, fabric, job):
    """LL/LL128 flag bytes are on the wire: flow.txt carries wire_bytes (split at uint32 by
    them), the manifest keeps the payload beside them."""
    specs = [(0, NET, 0, 2, 1 << 20, 0, [], Proto.LL),            # wire = 2x payload
             (0, NET, 2, 4, 1_200_000, 10, [0], Proto.LL128),     # 128 B lines of 120 B data
             (1, NET, 4, 6, 3_000_000_000, 20, [], Proto.LL),      # payload fits a uint32, wire not
             (1, NET, 6, 0, 4096, 30, [], Proto.SIMPLE)]
    flows = make_flows(fabric, specs)
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    lines, man = s["flows"], s["manifest"]["flows"]
    check_manifest(man, lines, flows)
    rows = flows.rows
    assert [f[4] for f in lines] == [2 << 20, 1_280_000, 3_000_000_000, 3_000_000_000, 4096]
    assert sum(f[4] for f in lines) == int(rows["wire_bytes"].sum()) == \
        s["manifest"]["net_wire_bytes"]
    assert sum(m["bytes"] for m in man) == int(rows["bytes"].sum()) == s["manifest"]["net_bytes"]
    big = [m for m in man if m["transfer_id"] == 2]
    assert [(m["part"], m["parts"], m["bytes"], m["wire_bytes"]) for m in big] == \
        [(0, 2, 1_500_000_000, 3_000_000_000), (1, 2, 1_500_000_000, 3_000_000_000)]
    assert f"{sum(f[4] for f in lines)} bytes on the wire" in (d / "README.md").read_text()


def test_manifest_ops_section(tmp_path, fabric, job):
    """Every CommOp is in `ops` (NVLink-only ops and markers too, so the chain never breaks),
    with deps, gap and the analytic release/completion; `local_transfers` holds the transfers
    of net ops that are not flow.txt lines."""
    ops = make_ops([(CollKind.ALLREDUCE, Dim.TP), (CollKind.SENDRECV, Dim.PP),
                    (CollKind.ALLREDUCE, Dim.DP), (CollKind.MARKER, Dim.NONE)],
                   deps=[[], [0], [1], [1, 2]], gaps=[100, 200, 0, 0])
    specs = [(0, NVL, 0, 1, 1000, 100, []),                 # op 0: NVLink only
             (1, NET, 1, 3, 1 << 20, 700, []),              # op 1: PP
             (2, NVL, 2, 3, 5000, 3000, []),                # op 2: NVLink step
             (2, NET, 3, 5, 1 << 20, 3100, [2]),            # ... then NET after it
             (2, NET, 5, 1, 0, 3200, [3]),                  # ... a zero-byte NET step
             (2, NET, 1, 3, 1 << 19, 3300, [4])]
    op_times = ([100, 500, 2900, 9000], [400, 2900, 9000, 9000])
    flows = make_flows(fabric, specs, ops, op_times)
    d, _ = export(tmp_path, flows, fabric, job)
    man = load_all(d)["manifest"]
    assert man["format"] == "tracegen-ns3/3"
    assert [o["op_id"] for o in man["ops"]] == [0, 1, 2, 3]
    assert [(o["kind"], o["dim"]) for o in man["ops"]] == [
        ("AllReduce", "TP"), ("SendRecv", "PP"), ("AllReduce", "DP"), ("Marker", "NONE")]
    assert [o["deps"] for o in man["ops"]] == [[], [0], [1], [1, 2]]
    assert [o["gap_ns"] for o in man["ops"]] == [100, 200, 0, 0]
    assert [(o["op_start_ns"], o["op_end_ns"]) for o in man["ops"]] == list(zip(*op_times))
    assert [o["net"] for o in man["ops"]] == [False, True, True, False]
    assert [(o["bytes"], o["ranks"]) for o in man["ops"]] == [
        (int(b), int(n)) for b, n in zip(ops.rows["bytes"], ops.groups.lengths())]
    assert {m["op_id"] for m in man["flows"]} == {1, 2}
    assert [m["deps"] for m in man["flows"] if m["op_id"] == 2] == [[2], [4]]
    # NVLink step and zero-byte NET step of net op 2; op 0's NVLink transfer is not needed
    assert man["local_transfers"] == [
        {"transfer_id": 2, "op_id": 2, "link": "NVLINK", "start_ns": 3000,
         "end_ns": int(flows.rows["end_ns"][2]), "deps": []},
        {"transfer_id": 4, "op_id": 2, "link": "NET", "start_ns": 3200,
         "end_ns": int(flows.rows["end_ns"][4]), "deps": [3]}]
    # without the schedule's op times: first transfer start / last transfer end
    d2, _ = export(tmp_path, make_flows(fabric, specs, ops), fabric, job, "no_times")
    man2 = load_all(d2)["manifest"]
    rows = flows.rows
    assert [(o["op_start_ns"], o["op_end_ns"]) for o in man2["ops"]] == [
        (100, int(rows["end_ns"][0])), (700, int(rows["end_ns"][1])),
        (3000, int(rows["end_ns"][2:].max())), (0, 0)]


def test_trace_lists_hosts(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    assert load_all(d)["trace"] == list(range(fabric.n_nics))


def test_byte_identical(tmp_path, flows, fabric, job):
    d1, p1 = export(tmp_path, flows, fabric, job, "a")
    d2, p2 = export(tmp_path, make_flows(fabric, BASE_SPECS), build_fabric(job), job, "b")
    for a, b in zip(p1, p2):
        assert a.name == b.name and a.read_bytes() == b.read_bytes(), a.name
    write_ns3(flows, fabric, job, d1)          # rewriting in place gives the same bytes
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(p1, p2))


def test_random_table(tmp_path, fabric, job):
    rng = np.random.default_rng(7)
    specs = []
    for _ in range(400):
        s, t = rng.choice(8, 2, replace=False)
        link = NVL if s // 2 == t // 2 else NET
        specs.append((int(rng.integers(3)), link, int(s), int(t),
                      int(rng.integers(1, 6 * 10**9)), int(rng.integers(0, 50)) * 1000, []))
    flows = make_flows(fabric, specs)
    d, _ = export(tmp_path, flows, fabric, job)
    s = load_all(d)
    lines, man = s["flows"], s["manifest"]["flows"]
    net = flows.rows["link"] == NET
    assert sum(f[4] for f in lines) == int(flows.rows["bytes"][net].sum())
    assert len(man) == len(lines) > int(net.sum())      # some transfers were split
    assert {m["transfer_id"] for m in man} == set(np.flatnonzero(net).tolist())
    check_manifest(man, lines, flows)
    # ties are in table order
    keys = [(m["start_ns"], m["transfer_id"], m["part"]) for m in man]
    assert keys == sorted(keys)


def test_unknown_cc_mode(tmp_path, flows, fabric):
    job = dataclasses.replace(Job(), network=Network(cc_mode="bbr"))
    with pytest.raises(ConfigError, match="cc_mode"):
        write_ns3(flows, fabric, job, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_no_net_rows_write_no_scenario(tmp_path, fabric, job):
    """NVLink only (a one-node job): ns-3 cannot run a scenario without flows - nothing is
    written, not even the folder; a bad cc_mode is still refused."""
    flows = make_flows(fabric, [(0, NVL, 0, 1, 100, 0, []), (0, NET, 1, 3, 0, 5, [])])
    d, paths = export(tmp_path, flows, fabric, job)
    assert paths == [] and not d.exists()
    with pytest.raises(ConfigError, match="cc_mode"):
        write_ns3(flows, fabric, dataclasses.replace(job, network=Network(cc_mode="x")), d)
    assert not d.exists()


def test_one_node_job_has_no_scenario(tmp_path):
    from tracegen.config import job_from_dict
    from tracegen.pipeline import run_pipeline
    job = job_from_dict({"cluster": {"nodes": 1, "gpus_per_node": 8}})
    run = run_pipeline(job)
    assert not run.flows.net.any()
    assert write_ns3(run.flows, run.fabric, job, tmp_path / "ns3") == []
    assert list(tmp_path.iterdir()) == []


def readme_switch_ids(text: str) -> dict[str, set[int]]:
    """'Switch ids: leaves 8..9 and 12, spines 10..11.' -> {'leaves': {8, 9, 12}, ...};
    'leaf 8, no spines' -> {'leaves': {8}, 'spines': set()}"""
    line = next(ln for ln in text.splitlines() if ln.startswith("Switch ids: "))
    out = {}
    for part in line[len("Switch ids: "):].rstrip(".").split(", "):
        name, _, spec = part.partition(" ")
        if name == "no":
            out[spec] = set()
            continue
        name = {"leaf": "leaves", "spine": "spines", "core": "cores"}.get(name, name)   # one switch
        ids = set()
        for run in spec.split(" and "):
            lo, _, hi = run.partition("..")
            ids |= set(range(int(lo), int(hi or lo) + 1))
        out[name] = ids
    return out


@pytest.mark.parametrize("fabric_cfg,spineless", [
    ({}, False),                                                  # rail-optimised, 2 spines
    ({"kind": "leaf-spine"}, True),                               # 4 nodes on one leaf
    ({"kind": "fat-tree", "k": 4}, False),                        # pods, aggregation, cores
    ({"preset": "multi-plane-2"}, False),                         # two planes
    ({"kind": "file"}, True),                                     # two leaves linked directly
])
def test_readme_names_every_switch_spineless_or_not(tmp_path, fabric_cfg, spineless):
    """The README lists exactly topology.txt's switch ids, by tier as the fabric names them;
    a fabric without a spine says so instead of failing."""
    from tracegen.config import job_from_dict
    if fabric_cfg.get("kind") == "file":
        path = tmp_path / "two.yaml"
        path.write_text("switches: {la: 1, lb: 1}\nlinks: [[la, lb, 200, 500]]\n"
                        "nics: [la, la, la, la, lb, lb, lb, lb]\n")
        fabric_cfg = {"kind": "file", "file": str(path)}
    job = job_from_dict({"fabric": fabric_cfg})
    fabric = build_fabric(job)
    d, _ = export(tmp_path, make_flows(fabric, BASE_SPECS[:1]), fabric, job)
    topo = read_topology((d / "topology.txt").read_text())
    ids = readme_switch_ids((d / "README.md").read_text())
    assert set().union(*ids.values()) == set(topo["switches"])
    assert (ids.get("spines") == set()) == spineless          # "no spines", said outright
    tier_of = {fabric.n_nics + i: t for i, t in enumerate(fabric.sw_tier.tolist())}
    for name, tier in (("leaves", 1), ("spines", 2), ("cores", 3)):
        assert ids.get(name, set()) == {n for n, t in tier_of.items() if t == tier}, name


# ------------------------------------------------------------------ the readers are strict

def test_reader_rejects_unknown_key():
    good = "CC_MODE 1\nKMAX_MAP 1 400000000000 1500\nLINK_DOWN 0 0 0\n"
    assert read_hpcc_config(good)["KMAX_MAP"] == {400 * 10**9: 1500}
    with pytest.raises(ValueError, match="does not read"):
        read_hpcc_config(good + "PFC_ENABLE 1\n")
    with pytest.raises(ValueError):
        read_hpcc_config("U_TARGET 0.95\nCC_MODE 0.5\n")   # uint32 key given a double
    with pytest.raises(AssertionError):
        read_simai_config("ns3::SwitchNode::PfcEnabled 1\n")


def test_reader_rejects_broken_files(tmp_path, flows, fabric, job):
    d, _ = export(tmp_path, flows, fabric, job)
    topo_text = (d / "topology.txt").read_text()
    topo = read_topology(topo_text)
    with pytest.raises((ValueError, AssertionError)):
        read_topology(topo_text.rsplit("\n", 2)[0] + "\n")     # one link line missing
    flow_lines = (d / "flow.txt").read_text().splitlines()
    swapped = [flow_lines[0], flow_lines[2], flow_lines[1]] + flow_lines[3:]
    with pytest.raises(AssertionError, match="sorted"):
        read_flows("\n".join(swapped) + "\n", topo)
    too_big = flow_lines[:1] + [f"0 2 3 100 {2**32} 2.000000000"] + flow_lines[2:]
    with pytest.raises(ValueError, match="uint32"):
        read_flows("\n".join(too_big) + "\n", topo)


def test_qps_are_the_pcap_writers_connections(tmp_path):
    """manifest `qps`: one RC QP per NCCL connection with the QPNs and UDP source port the pcap
    writer gives that connection, so the ns-3 packets hash like the captured ones; every line
    names its connection's QP."""
    from tracegen.emit.packets.plan_build import build
    from tracegen.pipeline import run_pipeline
    from tracegen.config import job_from_dict
    job = job_from_dict({"parallelism": {"dp": 4, "tp": 2, "pp": 2, "global_batch": 16},
                         "cluster": {"nodes_per_leaf": 2}})
    run = run_pipeline(job)
    d, _ = export(tmp_path, run.flows, run.fabric, job)
    man = load_all(d)["manifest"]
    plan = build(run.flows, run.fabric, job.output)
    pcap_conns = set(zip(plan.c_src.tolist(), plan.c_dst.tolist(), plan.c_qpn_src.tolist(),
                         plan.c_qpn_dst.tolist(), plan.c_sport.tolist()))
    qps = man["qps"]
    assert [q["qp"] for q in qps] == list(range(len(qps)))
    assert {(q["src"], q["dst"], q["sqpn"], q["dqpn"], q["sport"]) for q in qps} <= pcap_conns
    c = run.flows.conns                                        # and the schedule's (connections.py)
    assert pcap_conns == set(zip(c.src_nic.tolist(), c.dst_nic.tolist(), c.qpn_src.tolist(),
                                 c.qpn_dst.tolist(), c.sport.tolist()))
    rows = run.flows.rows
    dim_of = {o["op_id"]: o["dim"] for o in man["ops"]}
    conn = {}
    for m in man["flows"]:
        q = qps[m["qp"]]
        assert (q["src"], q["dst"]) == (m["src_nic"], m["dst_nic"])
        row = rows[m["transfer_id"]]
        key = (int(row["src_rank"]), int(row["dst_rank"]),
               {"SP": "TP"}.get(dim_of[m["op_id"]], dim_of[m["op_id"]]), int(row["channel"]))
        assert conn.setdefault(key, m["qp"]) == m["qp"]          # one QP per connection
    assert len(set(conn.values())) == len(conn)
    assert man["sim"]["nic_sharing"] == "fair"          # the fluid schedule: QPs share a NIC
    assert man["sim"]["pfc"]["enabled"] is True and man["sim"]["cnp_interval_ns"] == 4000


def test_network_keys_reach_config_txt(tmp_path):
    from tracegen.config import job_from_dict
    job = job_from_dict({"network": {"dcqcn_rate_ai_mbps": 40, "dcqcn_rate_hai_mbps": 400.5,
                                     "dcqcn_min_rate_mbps": 100, "dcqcn_g": 0.0625,
                                     "dcqcn_rp_timer_us": 55, "dcqcn_fast_recovery": 5,
                                     "pfc_xoff_bytes": 500_000, "cnp_interval_us": 50}})
    fabric = build_fabric(job)
    d, _ = export(tmp_path, make_flows(fabric, BASE_SPECS), fabric, job)
    s = load_all(d)
    cfg = s["config"]
    assert (cfg["RATE_AI"], cfg["RATE_HAI"], cfg["MIN_RATE"]) == ("40Mb/s", "400500Kb/s",
                                                                  "100Mb/s")
    assert (cfg["EWMA_GAIN"], cfg["RP_TIMER"], cfg["FAST_RECOVERY_TIMES"]) == (0.0625, 55, 5)
    sim = s["manifest"]["sim"]
    assert sim["pfc"]["xoff_bytes"] == 500_000 and sim["cnp_interval_ns"] == 50_000
    with pytest.raises(ConfigError, match="pfc_resume_offset_bytes"):
        job_from_dict({"network": {"pfc_xoff_bytes": 1000}})
    with pytest.raises(ConfigError, match="dcqcn_g"):
        job_from_dict({"network": {"dcqcn_g": 0}})


def test_fabric_qp_path_is_the_routing_seam(tmp_path, job):
    """The Fabric's qp_paths (the schedule's ECMP: routing.py's 5-tuple hash) puts each QP's path
    into the manifest; the scenario reader checks it against topology.txt."""
    import dataclasses
    from ns3_scenarios.inputs import load_scenario
    from tracegen.config import FabricConfig
    fabric = build_fabric(dataclasses.replace(job, fabric=FabricConfig(nodes_per_leaf=1, spines=2)))
    flows = make_flows(fabric, [(0, NET, 0, 2, 1 << 20, 500, []), (0, NET, 2, 4, 1 << 20, 500, [])])
    d, _ = export(tmp_path, flows, fabric, job)
    qps = load_all(d)["manifest"]["qps"]
    assert [q["path"] for q in qps] == [fabric.path(q["src"], q["dst"], q["sport"]) for q in qps]
    assert all(len(q["path"]) == 5 for q in qps)           # host, leaf, spine, leaf, host
    # the ACKs' way back: the reverse 5-tuple (same UDP source port, addresses swapped)
    assert [q["rpath"] for q in qps] == [fabric.path(q["dst"], q["src"], q["sport"]) for q in qps]
    sc = load_scenario(d)
    assert sc.qp_path == [q["path"] for q in qps]
    # with the qp ECMP hash the path follows each QP's DestQP (the receiver's QPN)
    fabric = build_fabric(dataclasses.replace(job, fabric=FabricConfig(nodes_per_leaf=1, spines=2, ecmp_hash="qp")))
    flows = make_flows(fabric, [(0, NET, 0, 2, 1 << 20, 500, []), (0, NET, 2, 4, 1 << 20, 500, [])])
    d, _ = export(tmp_path / "qp", flows, fabric, job)
    qps = load_all(d)["manifest"]["qps"]
    assert [q["path"] for q in qps] == [fabric.path(q["src"], q["dst"], 0, 0, q["dqpn"]) for q in qps]
    # and what the receiver returns, by the sender's QPN
    assert [q["rpath"] for q in qps] == [fabric.path(q["dst"], q["src"], 0, 0, q["sqpn"]) for q in qps]
    assert load_scenario(d).qp_rpath == [q["rpath"] for q in qps]


