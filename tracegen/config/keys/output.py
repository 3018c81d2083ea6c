"""The output section's keys: what generate writes - capture files, wire details, filters, views, tables."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import M, key


@dataclass(frozen=True)
class OutputKeys:
    dir: str = key("", "output folder; '': traces/<job name>")
    pcap: bool = key(True, "write the pcap files")
    ns3: bool = key(True, "write the ns-3 scenario")
    pmtu: int = key(4096, "RoCE path MTU (IB MTUs: RoCE has no other)", choices=(256, 512, 1024, 2048, 4096))
    vlan: bool = key(True, "an 802.1Q tag on every frame")
    vlan_id: int = key(100, "802.1Q VID", 1, 4094, count=False)
    pcp: int = key(3, "802.1Q priority", 0, 7)
    dscp: int = key(26, "6-bit DSCP", 0, 63)
    ecn: int = key(2, "2-bit ECN", 0, 3)
    snaplen: int = key(0, "libpcap's largest snaplen; 0: whole frames", 0, 262_144)
    payload: str = key("zero", "payload bytes: zeros, a pattern, or none (records end at the headers, "
                               "orig_len real)", choices=("zero", "pattern", "none"))
    ack_every: int = key(0, "packets per coalesced ACK; 0: one per message", 0, 16 * M)
    # pcap budget and filters (emit/packets/select.py)
    max_bytes: int = key(2 << 30, "pcap budget; 0: no limit", 0, 1 << 50)
    time_window: str = key("", "START_NS:END_NS: only packets starting in [START, END)")
    nics: str = key("", "'0,3' or 'node0001-rail0,...': only these NICs' files")
    ranks: str = key("", "'0,5': only the files of the NICs these ranks use")
    collectives: str = key("", "'dp,pp' (parallelism) or 'allreduce,sendrecv' (kind): only their packets")
    iteration: int = key(-1, "-1: every iteration (else < iterations)", -1, 999)
    # wire details
    qp_split: bool = key(False, "nccl.qps_per_connection > 1: every message split in 128 B-aligned parts, "
                                "one per QP; false: whole messages round-robin over the QPs (NCCL's default)")
    ip_version: int = key(4, "RoCEv2 over IPv4, or IPv6 (fd00::<IPv4 plan>)", choices=(4, 6))
    pkey: int = key(0xFFFF, "16-bit BTH P_Key", 1, 0xFFFF, count=False)
    # congestion artefacts (emit/packets/congestion.py): CE marks and the CNPs receivers send back
    ecn_marking: str = key("fraction", "where CE marks come from: fraction (ecn_mark_fraction, seeded) or queue "
                                       "(RED on each switch egress queue - switch-to-switch and a leaf's ports to "
                                       "NICs: network.kmin_bytes, kmax_bytes, pmax; with network.pfc PFC pauses "
                                       "to the NICs above Xoff; emit/packets/queue_marks.py)",
                           choices=("fraction", "queue"))
    ecn_mark_fraction: float = key(0.0, "a fraction of data packets", 0.0, 1.0)
    ecn_pattern: str = key("random", "where CE marks go: random (seeded by ecn_seed) or periodic",
                           choices=("random", "periodic"))
    ecn_seed: int = key(0, "32-bit seed", 0, 2**32 - 1)
    dcqcn: bool = key(False, "open loop: after a CNP a QP's later messages are paced at DCQCN's rate "
                             "(network.cc_mode dcqcn)")
    # capture files and views (emit/packets/capture_file.py, emit/views/files.py)
    format: str = key("pcap", "pcap (nanosecond) or pcapng (one interface block per NIC / port)",
                      choices=("pcap", "pcapng"))
    comments: bool = key(False, "pcapng: a comment per packet naming collective, op, step, chunk")
    merge: bool = key(False, "one merged file for the selected NICs instead of one per NIC")
    switch: str = key("", "'leaf3' / 'spine0': one file per port of that switch instead")
    lab: str = key("", "lab plan YAML: one replayable pcap per tester port; relative to the file naming it")
    # tables and pictures (emit/tables/flows.py, emit/tables/parquet.py, emit/tables/perfetto.py, emit/pictures/plots.py)
    tables: str = key("csv", "flow + op tables: csv, parquet (needs pyarrow) or csv,parquet")
    perfetto: bool = key(True, "perfetto.json: the schedule as a Chrome trace (ui.perfetto.dev)")
    pictures: bool = key(True, "gantt.png, traffic_matrix.png, timeline.png")
    lab_gbps: int = key(0, "testers' rate; 0: the NICs'", 0, 1_000_000)
    # a string or an integer (config.parse_start_time): the one key of two types
    start_time: str = key(0, "when the capture starts: ISO 8601 with a timezone (2026-12-04T09:00:00Z, ns "
                             "fractions kept) or integer epoch ns; every capture timestamp is it + schedule ns")
