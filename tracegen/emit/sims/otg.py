"""`tracegen export otg`: the job's RoCE traffic between tester ports as an Open Traffic Generator
config, built with snappi (the OTG Python client), for a closed-loop RoCEv2 tester.

The OTG objects, as open-traffic-generator/models defines them (RoCEv2 since its PR #415; snappi
1.62.0 generates its classes from models 1.62.0; IxNetwork runs them through snappi-ixnetwork,
snappi_ixnetwork/device/rocev2.py):
  * ports, layer1 (speed, MTU) and per host a device: ethernet (lab MAC, VLAN with the job's PCP),
    IPv4 / IPv6 address with prefix and gateway (device/ethernet, device/ipv4|ipv6);
  * device.rocev2 (device/rocev2/rocev2.yaml, rocev2ipv4.yaml, rocev2ipv6.yaml): per IP interface
    the IB MTU (output.pmtu) and a peer per other host, with the QPs NCCL opens between the two
    (device/rocev2/qps.yaml, Rocev2.QPParameters): source_qp_number = tracegen's QPN, the job's
    DSCP and ECN, the mlx5 UDP source port of the QP pair, initial PSN 0, and the address / R_Key
    its RDMA WRITEs target (the receive slot of its first message; a CTS QP: the FIFO slot);
  * options.per_port_options[].protocols[].rocev2 (port/rocev2.yaml): CNP DSCP 48 and its
    interval (network.cnp_interval_us), ACK/NAK DSCP, DCQCN (network.dcqcn_* mapped below);
  * stateful_flows.rocev2[].tx_ports[].transmit_type.target_line_rate (flow/statefulflow.yaml,
    flow/rocev2flow.yaml): per
    port the line-rate share (100 %) and its Rocev2.Flow list: tx_endpoint / rx_endpoint = the two
    QPs, rocev2_verb (data: write_with_immediate, imm = message size as NCCL's; CTS: write),
    message_size + message_size_unit.
The model has no message count and no start time for a Rocev2.Flow (its transmit type is a target
line rate, continuous), and message_size is at most 65,535 of its unit: counts and times go to
otg-schedule.json beside the config, keyed by flow name; sizes in whole bytes up to 65,535 B,
beyond in whole KiB ("kb" read as 1,024 B, "mb" 2^20, "gb" 2^30: the model names the units
without a base) - a group whose NCCL size is not whole KiB becomes messages of the two nearest
whole-KiB sizes in the proportion that keeps its bytes, plus one message of the remaining bytes
(< 1 KiB) when the group's total is not whole KiB either (`message_sizes`).

Flows: one per (QP, stream (data or CTS), iteration, phase, parallelism dimension, collective,
message size) - level "op". Beyond `max_flows`, level "qp-size" merges phases and collectives per
(QP, stream, size), then level "qp" gives each QP stream its messages at their average size (bytes
and message count kept); beyond that the export is refused (too many QPs for the cap). Each QP's
largest flow is named as the QP itself: snappi-ixnetwork binds a peer's message size and verb to
its QPs by that name (_configureFlowSettings).
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ...tables import CollKind, Dim, Phase
from ..packets import congestion
from ..views import lab
from ..packets.plan import CTS_BYTES, Plan

UNITS = (("bytes", 1), ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30))
UNIT_BYTES = dict(UNITS)
SIZE_MAX = 65_535              # Rocev2.Flow.message_size: uint32 with maximum 65535
DEFAULT_MAX_FLOWS = 4096
LEVELS = ("op", "qp-size", "qp")
ECN_NAME = {0: "non_ect", 1: "ect_1", 2: "ect_0", 3: "ce"}   # Rocev2.QPParameters.ecn (RFC 3168 codepoints)
SPEEDS = {10: "speed_10_gbps", 25: "speed_25_gbps", 40: "speed_40_gbps", 50: "speed_50_gbps",
          100: "speed_100_gbps", 200: "speed_200_gbps", 400: "speed_400_gbps", 800: "speed_800_gbps"}
SCHEDULE_FORMAT = "tracegen-otg-schedule/1"


def message_sizes(total_bytes: int, count: int) -> list[tuple[int, str, int, int]]:
    """`count` messages carrying `total_bytes` as OTG message sizes: [(bytes each, unit, value,
    messages)], sizes as equal as possible, each value <= SIZE_MAX of its unit; exactly `count`
    messages when the total divides into them, else one more with the remainder (< 1 unit)."""
    if count <= 0:
        return []
    if total_bytes == 0:
        return [(0, "bytes", 0, count)]
    avg_ceil = -(-total_bytes // count)
    name, u = next((n, b) for n, b in UNITS if -(-avg_ceil // b) <= SIZE_MAX)
    q, r = divmod(total_bytes, u)
    base, k = divmod(q, count)
    out = [((base + 1) * u, name, base + 1, k)] if k else []
    if base and count - k:
        out.append((base * u, name, base, count - k))
    if not base and count - k:       # fewer whole units than messages: the rest carry nothing
        out.append((0, name, 0, count - k))
    return out + (message_sizes(r, 1) if r else [])


@dataclass(frozen=True)
class Hosts:
    """The tester ports: the lab plan's hosts, or every NIC with traffic at the job's addresses."""
    nics: tuple[int, ...]
    ports: tuple[str, ...]
    mac: np.ndarray             # (n, 6)
    ipv4: np.ndarray            # (n,) IPv4 as integers (IPv6: fd00::<IPv4>)
    prefix: int                 # IPv4 prefix length (IPv6: 96 + it)
    gateway: np.ndarray         # (n,)

    def ip_text(self, addr: int, v: int) -> str:
        return str(ipaddress.IPv6Address((0xFD << 120) | int(addr))) if v == 6 else str(ipaddress.IPv4Address(int(addr)))


def hosts_of(job, fabric, p: Plan) -> Hosts:
    """The lab plan's hosts (its ports, MACs, addresses, gateways; bridged: the next host as the
    gateway OTG requires), or without one every NIC that sends or receives, with its own MAC and
    address in one 10.0.0.0/8 subnet (the job's plan has no subnets: a bridged setup)."""
    if job.output.lab:
        plan = lab.load(job.output, fabric)
        gw = plan.gateway if plan.gateway is not None else np.roll(plan.ipv4, -1)
        return Hosts(plan.nics, plan.ports, plan.mac, plan.ipv4, plan.prefix, gw)
    nics = tuple(int(x) for x in p.nics)
    ip = fabric.nic_ip[list(nics)].astype(np.int64)
    return Hosts(nics, tuple(fabric.nic_name(n) for n in nics), fabric.nic_mac[list(nics)], ip, 8, np.roll(ip, -1))


def _messages(p: Plan, chosen: np.ndarray) -> dict:
    """The RDMA WRITEs between chosen hosts that pass the filters, as columns: data messages and
    CTS (64 B, receiver -> sender on the connection's first QP, NCCL's ncclIbPostFifo)."""
    m = np.flatnonzero(chosen[p.m_src] & chosen[p.m_dst] & p.m_keep)
    c = p.cts_msg[chosen[p.m_src[p.cts_msg]] & chosen[p.m_dst[p.cts_msg]] & p.m_keep[p.cts_msg]]
    cts_t = np.zeros(p.n_msgs, np.int64)
    cts_t[p.cts_msg] = p.cts_base_ns
    cat = lambda a, b: np.concatenate([a, b])    # noqa: E731
    return dict(qp=cat(p.m_conn[m], p.m_conn[c] - p.m_q[c]), cts=cat(np.zeros(len(m), bool), np.ones(len(c), bool)),
                size=cat(p.m_size[m], np.full(len(c), CTS_BYTES, np.int64)),
                t=cat(p.m_nominal_ns[m], cts_t[c]), op=cat(p.m_op[m], p.m_op[c]))


def _groups(msgs: dict, ops_rows: np.ndarray, level: str):
    """(key columns, group id per message) at an aggregation level."""
    op = msgs["op"]
    ok = (op >= 0) & (op < len(ops_rows))
    field = lambda f: np.where(ok, ops_rows[f][np.where(ok, op, 0)].astype(np.int64), -1)   # noqa: E731
    cols = [msgs["qp"], msgs["cts"].astype(np.int64)]
    if level == "op":
        cols += [field("iteration"), field("phase"), field("dim"), field("kind"), msgs["size"]]
    elif level == "qp-size":
        cols += [msgs["size"]]
    keys = np.column_stack(cols)
    uniq, gid = np.unique(keys, axis=0, return_inverse=True)
    return uniq, gid.reshape(-1), field


def _label(values, names) -> str:
    return ",".join(names(int(v)) for v in sorted(set(int(x) for x in values)) if v >= 0) or "-"


def plan_flows(p: Plan, flows_ops, hosts: Hosts, max_flows: int):
    """The OTG flows (one entry per flow, sizes as message_sizes gives them) at the finest level
    within max_flows, and that level."""
    chosen = np.zeros(max(int(p.nics.max()) + 1, max(hosts.nics) + 1), bool)
    chosen[list(hosts.nics)] = True
    msgs = _messages(p, chosen)
    rows = flows_ops.rows
    for level in LEVELS:
        uniq, gid, field = _groups(msgs, rows, level)
        n = len(uniq)
        total = np.zeros(n, np.int64)
        np.add.at(total, gid, msgs["size"])
        count = np.bincount(gid, minlength=n)
        parts = [message_sizes(int(total[g]), int(count[g])) for g in range(n)]
        if sum(map(len, parts)) <= max_flows:
            break
    else:
        raise ConfigError(f"export otg: --max-flows {max_flows:,} is below the {sum(map(len, parts)):,} flows of the "
                          f"coarsest level (qp: each of {n:,} QP streams at its average size, up to 3 sizes to keep "
                          f"its bytes); raise --max-flows or choose fewer hosts in the lab plan")
    order = np.argsort(gid, kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(n + 1))
    out = []
    for g in range(n):
        idx = order[bounds[g]:bounds[g + 1]]
        t = msgs["t"][idx]
        info = dict(qp=int(uniq[g][0]), cts=bool(uniq[g][1]), nccl_bytes=int(total[g]), nccl_messages=int(count[g]),
                    nccl_sizes=sorted(set(int(x) for x in msgs["size"][idx])),
                    first_start_ns=int(t.min()), last_start_ns=int(t.max()),
                    iterations=_label(field("iteration")[idx], str),
                    phases=_label(field("phase")[idx], lambda v: Phase(v).name.lower()),
                    collectives=_label(field("dim")[idx] * 16 + field("kind")[idx],
                                       lambda v: f"{Dim(v // 16).name} {CollKind(v % 16).label}"))
        for k, (each, unit, value, cnt) in enumerate(parts[g]):
            out.append(dict(info, part=k, message_bytes=each, unit=unit, value=value, message_count=cnt))
    return out, level, int(msgs["size"].sum())


def _dcqcn(settings, network, nic_gbps: int) -> None:
    """port/rocev2.yaml Rocev2.DCQCN from the job's network keys (the reaction point the ns-3
    export and output.dcqcn use); rates in % of line rate, times in us. Fields without a
    counterpart there (initial_alpha, initial_rate_after_first_cnp, rate_increment_byte_counter,
    rate_increment_threshold, maximum_rate_decrement_at_time, clamp_target_rate) keep OTG's
    defaults."""
    line_mbps = nic_gbps * 1000.0
    ai = network.dcqcn_rate_ai_mbps or 5.0 * nic_gbps / 25
    hai = network.dcqcn_rate_hai_mbps or 50.0 * nic_gbps / 25
    pct = lambda mbps: min(100.0, round(100.0 * mbps / line_mbps, 6))      # noqa: E731
    settings.enable_dcqcn = network.cc_mode == "dcqcn"
    settings.alpha_g = int(min(1023, max(1, round(1024 * (1 - network.dcqcn_g)))))   # g = (1024 - alpha_g) / 1024
    settings.alpha_update_period = max(1, int(round(network.dcqcn_alpha_resume_us)))
    settings.rate_reduction_time_period = max(1, int(round(network.dcqcn_rate_decrease_us)))
    settings.rate_increment_time = max(1, int(round(network.dcqcn_rp_timer_us)))
    settings.minimum_rate_limmit = pct(network.dcqcn_min_rate_mbps)
    settings.additive_increment_rate = pct(ai)
    settings.hyper_increment_rate = pct(hai)


def build_config(job, fabric, p: Plan, hosts: Hosts, flows: list[dict]):
    """The snappi Config and the schedule entries (one per OTG flow, same order)."""
    import snappi
    out, v = job.output, job.output.ip_version
    cfg = snappi.Config()
    k_of = {nic: k for k, nic in enumerate(hosts.nics)}
    port = list(hosts.ports)
    mtu = 1500 if out.pmtu <= 1024 else 9000        # WIRE.md: PMTU 4096 with a 9000 B MTU, 1024 with 1500
    for name in port:
        cfg.ports.add(name=name)
    l1 = cfg.layer1.add(name="layer1", port_names=port, mtu=mtu)
    if fabric.nic_gbps in SPEEDS:
        l1.speed = SPEEDS[fabric.nic_gbps]
    # QP pairs between chosen hosts (plan order), both ends named by their NIC's QPN
    pairs = [c for c in range(len(p.c_src)) if p.c_src[c] in k_of and p.c_dst[c] in k_of]
    qp_name = lambda nic, qpn: f"{port[k_of[nic]]}-qp{int(qpn)}"            # noqa: E731
    first_msg = np.full(len(p.c_src), -1, np.int64)
    conns, first = np.unique(p.m_conn, return_index=True)    # each QP's first message (plan order)
    first_msg[conns] = first
    fifo = (out.dscp, out.ecn) if p.fifo_tc < 0 else (p.fifo_tc >> 2, p.fifo_tc & 3)
    peers: dict[tuple[int, int], list] = {}
    for c in pairs:
        s, d = int(p.c_src[c]), int(p.c_dst[c])
        m = int(first_msg[c])
        conn0 = c - int(p.m_q[m]) if m >= 0 else c
        m0 = int(first_msg[conn0])
        # the sender's end writes data into the receive slot; the receiver's end of QP 0 writes CTS into the FIFO
        peers.setdefault((s, d), []).append((p.c_qpn_src[c], p.c_qpn_dst[c], c, (out.dscp, out.ecn),
                                             (p.m_va[m], p.m_rkey[m]) if m >= 0 else None))
        peers.setdefault((d, s), []).append((p.c_qpn_dst[c], p.c_qpn_src[c], c, fifo,
                                             (p.m_cts_va[m0], p.m_cts_rkey[m0]) if m0 >= 0 and c == conn0 else None))
    for k, nic in enumerate(hosts.nics):
        dev = cfg.devices.add(name=f"{port[k]}-host")
        eth = dev.ethernets.add(name=f"{port[k]}-eth", mac=bytes(hosts.mac[k]).hex(":"), mtu=mtu)
        eth.connection.port_name = port[k]
        if out.vlan:
            eth.vlans.add(name=f"{port[k]}-vlan", id=out.vlan_id, priority=out.pcp)
        if v == 6:
            eth.ipv6_addresses.add(name=f"{port[k]}-ip", address=hosts.ip_text(hosts.ipv4[k], 6),
                                   prefix=96 + hosts.prefix, gateway=hosts.ip_text(hosts.gateway[k], 6))
            intf = dev.rocev2.ipv6_interfaces.add(ipv6_name=f"{port[k]}-ip", ib_mtu=out.pmtu)
        else:
            eth.ipv4_addresses.add(name=f"{port[k]}-ip", address=hosts.ip_text(hosts.ipv4[k], 4),
                                   prefix=hosts.prefix, gateway=hosts.ip_text(hosts.gateway[k], 4))
            intf = dev.rocev2.ipv4_interfaces.add(ipv4_name=f"{port[k]}-ip", ib_mtu=out.pmtu)
        for other in hosts.nics:
            # both ends list the pair's QPs in one order (plan order): the k-th QP of A's peer toward B
            # and the k-th of B's peer toward A are the two ends of one NCCL QP pair
            qps = sorted(peers.get((nic, other), []), key=lambda x: x[2])
            if not qps:
                continue
            peer = intf.peers.add(name=f"{port[k]}-to-{port[k_of[other]]}",
                                  destination_ip_address=hosts.ip_text(hosts.ipv4[k_of[other]], v))
            for qpn, _, c, (dscp, ecn), target in qps:
                rc = peer.qps.add(qp_name=qp_name(nic, qpn)).connection_type.reliable_connection
                rc.source_qp_number, rc.dscp, rc.ecn = int(qpn), int(dscp), ECN_NAME[int(ecn)]
                rc.udp_source_port, rc.initial_psn = int(p.c_sport[c]), 0
                if target is not None:
                    rc.virtual_address, rc.remote_key = f"{int(target[0]):016x}", f"{int(target[1]):08x}"
    net = job.network
    for name in port:
        r = cfg.options.per_port_options.add(port_name=name).protocols.add().rocev2
        r.cnp.ip_dscp.value, r.cnp.ecn_value = congestion.CNP_DSCP, ECN_NAME[out.ecn]
        r.cnp.cnp_delay_timer = int(min(255, max(0, round(net.cnp_interval_us))))
        rc = r.connection_type.reliable_connection
        rc.ack.ip_dscp.value, rc.ack.ecn_value = int(fifo[0]), ECN_NAME[int(fifo[1])]
        rc.nak.ip_dscp.value, rc.nak.ecn_value = int(fifo[0]), ECN_NAME[int(fifo[1])]
        _dcqcn(r.dcqcn_settings, net, fabric.nic_gbps)
    return cfg, _add_flows(cfg, p, flows, port, k_of, qp_name)


def _add_flows(cfg, p: Plan, flows: list[dict], port, k_of, qp_name) -> list[dict]:
    """One Rocev2.Flow per entry, per tx port in port order; each QP's largest flow named as the
    QP (snappi-ixnetwork's binding), the others <QP>.f1, .f2, ... in time order."""
    ends = []
    for f in flows:
        c = f["qp"]
        tx, rx = (p.c_dst[c], p.c_src[c]) if f["cts"] else (p.c_src[c], p.c_dst[c])
        qtx, qrx = (p.c_qpn_dst[c], p.c_qpn_src[c]) if f["cts"] else (p.c_qpn_src[c], p.c_qpn_dst[c])
        ends.append((k_of[int(tx)], qp_name(int(tx), qtx), k_of[int(rx)], qp_name(int(rx), qrx)))
    order = sorted(range(len(flows)), key=lambda i: (ends[i][0], ends[i][1], flows[i]["first_start_ns"], flows[i]["part"], i))
    top: dict[str, int] = {}
    for i in order:
        b = flows[i]["message_bytes"] * flows[i]["message_count"]
        j = top.get(ends[i][1])
        if j is None or b > flows[j]["message_bytes"] * flows[j]["message_count"]:
            top[ends[i][1]] = i
    lists, seen, schedule = {}, {}, []
    group = cfg.stateful_flows.rocev2.add()
    for i in order:
        f, (kt, qtx, kr, qrx) = flows[i], ends[i]
        if kt not in lists:
            tp = group.tx_ports.add(port_name=port[kt])
            tp.transmit_type.target_line_rate.value = 100
            lists[kt] = tp.transmit_type.target_line_rate.flows
        if top[qtx] == i:
            name = qtx
        else:
            seen[qtx] = seen.get(qtx, 0) + 1
            name = f"{qtx}.f{seen[qtx]}"
        fl = lists[kt].add(name=name, tx_endpoint=qtx, rx_endpoint=qrx, message_size=f["value"],
                           message_size_unit=f["unit"])
        if f["cts"]:
            fl.rocev2_verb.choice = "write"
        else:
            fl.rocev2_verb.write_with_immediate.immediate_data = f"{f['message_bytes'] & 0xFFFFFFFF:08x}"
        schedule.append(dict(name=name, tx_port=port[kt], tx_qp=qtx, rx_port=port[kr], rx_qp=qrx,
                             stream="cts" if f["cts"] else "data", message_bytes=f["message_bytes"],
                             message_count=f["message_count"], bytes=f["message_bytes"] * f["message_count"],
                             first_start_ns=f["first_start_ns"], last_start_ns=f["last_start_ns"],
                             iterations=f["iterations"], phases=f["phases"], collectives=f["collectives"],
                             nccl_message_bytes=f["nccl_sizes"], nccl_messages=f["nccl_messages"],
                             nccl_bytes=f["nccl_bytes"]))
    return schedule


def wire_plan(run) -> Plan:
    """The wire plan the job's pcaps are written from (timed per connection: the chunks of the
    lab plan's NICs placed in it, emit/views/placed.py), unscheduled: messages, QPs, nominal times."""
    from ..bundle import pcap_flows
    from ..packets.pacing import prepare
    flows = pcap_flows(run)
    if flows is None:
        raise ConfigError("export otg: this job is timed per connection (detail conn); give --lab PLAN.yaml "
                          "(e.g. hosts: leaf0) to export the hosts of one leaf")
    job = run.job
    p = prepare(flows, run.fabric, job.output, job.nccl.qps_per_connection, times=False, nccl=job.nccl,
                network=job.network)
    if p is None:
        raise ConfigError("export otg: no traffic crosses a NIC in this job (every transfer stays on NVLink)")
    return p


def write_otg(run, dest, max_flows: int = DEFAULT_MAX_FLOWS) -> str:
    """otg.json, otg.yaml (the snappi Config; snappi validates it as it serializes it, and it must
    read back to the same JSON) and otg-schedule.json into dest; returns a summary line."""
    import snappi
    p = wire_plan(run)
    hosts = hosts_of(run.job, run.fabric, p)
    flows, level, nccl_bytes = plan_flows(p, run.flows.ops, hosts, max_flows)
    if not flows:
        raise ConfigError("export otg: no RDMA WRITE between the chosen hosts (a lab plan's hosts exchange "
                          "nothing, or the collective/iteration filters select nothing)")
    cfg, schedule = build_config(run.job, run.fabric, p, hosts, flows)
    try:
        text = cfg.serialize(encoding=cfg.JSON)
        yaml_text = cfg.serialize(encoding=cfg.YAML)
    except (TypeError, ValueError) as e:         # snappi's validation: a bug here, not the user's
        raise RuntimeError(f"snappi refused the OTG config: {e}") from None
    if snappi.Config().deserialize(text).serialize(encoding=cfg.JSON) != text:
        raise RuntimeError("the OTG config does not read back to the same JSON")
    total = sum(f["bytes"] for f in schedule)
    assert total == nccl_bytes, (total, nccl_bytes)
    (dest / "otg.json").write_text(text + "\n")
    (dest / "otg.yaml").write_text(yaml_text)
    doc = dict(format=SCHEDULE_FORMAT, job=run.job.name, lab_plan=run.job.output.lab or None, level=level,
               max_flows=max_flows, unit_bytes=UNIT_BYTES,
               time="ns on the job's clock (as flows.csv): first/last nominal start of the flow's messages",
               ports=list(hosts.ports), flows=schedule,
               totals=dict(flows=len(schedule), messages=sum(f["message_count"] for f in schedule), bytes=total,
                           data_bytes=sum(f["bytes"] for f in schedule if f["stream"] == "data"),
                           cts_bytes=sum(f["bytes"] for f in schedule if f["stream"] == "cts")))
    (dest / "otg-schedule.json").write_text(json.dumps(doc, indent=1) + "\n")
    return (f"otg.json ({len(text):,} B), otg.yaml, otg-schedule.json: {len(hosts.ports)} ports, "
            f"{len(schedule):,} flows (level {level}), {total:,} B of RDMA WRITE payload")
