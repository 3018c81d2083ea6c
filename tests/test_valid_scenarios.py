"""Every valid scenario runs (issue 23's robustness): Hypothesis draws small scenario files that
are valid by construction - the jobs first (lab patterns incast / alltoall / allreduce, and a tiny
model job), their nodes, then the fabric (leaf-spine with 1..4 spines and oversubscription, down
to one leaf; rail-optimised; fat-tree of small k; a topology file), placements (contiguous,
interleaved, random with a seed, explicit node lists), start offsets, iterations, per-job traffic
classes, and events (links and spines down, degraded, flapping, from t=0 or timed; stragglers)
that never cut a leaf off (a protected spine and its links stay up), ECMP rehash or resilient.
Each goes through `generate --scenario F --no-ns3` in-process and must hold, judged from the files
with closed forms and parsers of this file (never the numbers tracegen computed for itself):

* exit 0, only `warning:` lines on stderr; scenario.json, ops.csv, flows.csv, link_time.csv,
  summary.md written, and every NIC's pcap that has traffic;
* scenario.json: every job's end >= its start, jct = end - start, as many iteration times as
  iterations asked, their sum the jct; a job alone on a non-blocking fabric (one leaf, no fabric
  events) or on one node (NVLink only) is not slowed: slowdown 1 within 1e-9;
* link_time.csv: per link direction and bin, the jobs' bytes fit in the integral of the link's
  rate over the bin, that rate given by the scenario's own events as parsed here (down: 0,
  degraded: the lowest degrade holding, flaps expanded here): no byte on a link while it is down;
* pcaps: tests/wire_check.py 0 violations; with a parser of this file, every (destination IP,
  destination QPN) of every RoCEv2 frame of every capture is reached from one source IP only
  (one QP plan across jobs: no two connections share a QP), and each capture's NIC sends from
  one address of its own;
* the schedule validator (tests/schedule_validator.py) over the scenario's flows on the NIC ports;
* one example in four: the same file twice -> byte-identical folders, and `plan --scenario
  --json` says what generate's scenario.json says.

A second sweep breaks one key of a valid scenario at a time (out-of-range numbers, unknown keys,
unknown job names in events, overlapping explicit placements, links that do not exist, a leaf
down, ...): exit 2, one `error:` line naming the key, no traceback, no output folder.

CI runs a derandomized budget (SCENARIO_EXAMPLES); TRACEGEN_LONG=1 runs 8x as many random ones.
"""
from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import os
import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tracegen.cli import main
from tracegen.tables import LinkKind

LONG = os.environ.get("TRACEGEN_LONG") == "1"
SCENARIO_EXAMPLES = int(os.environ.get("TRACEGEN_SCENARIO_EXAMPLES", 100))
INVALID_EXAMPLES = int(os.environ.get("TRACEGEN_INVALID_SCENARIO_EXAMPLES", 6))   # per kind of breakage
PROFILE = settings(derandomize=not LONG, database=None, deadline=None,
                   max_examples=SCENARIO_EXAMPLES * (8 if LONG else 1), suppress_health_check=list(HealthCheck),
                   phases=[Phase.explicit, Phase.generate, Phase.shrink], report_multiple_bugs=False)
BAD_PROFILE = settings(PROFILE, max_examples=INVALID_EXAMPLES * (8 if LONG else 1))

WIRE_CHECK = Path(__file__).with_name("wire_check.py")
wire_check = importlib.import_module("wire_check") if WIRE_CHECK.exists() else None

TINY = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32}
NIC_GBPS = 400
BYTES = [4096, 65536, 262144]
TIMES_NS = [0, 2_000, 20_000, 60_000]      # event instants: before, inside and after tiny jobs' traffic


# --- the fabric, as this file sees it: switch names and links by closed form ---------------------

def two_tier(kind: str, nodes: int, nics: int, npl: int, spines: int, planes: int) -> tuple[list, list]:
    """(leaf names, leaf-spine links) of a rail-optimised / leaf-spine fabric: every leaf to every
    spine of its plane; one leaf (per plane) has no spine."""
    groups = -(-nodes // npl)
    n_leaves = nics * groups if kind == "rail-optimised" else groups
    leaves, links = [], []
    for p in range(planes):
        pre = f"p{p}-" if p else ""
        lv = [f"{pre}leaf{i}" for i in range(n_leaves)]
        leaves += lv
        if n_leaves > 1:
            links += [(a, f"{pre}spine{s}") for a in lv for s in range(spines)]
    return leaves, links


def fat_tree(n_nics: int, k: int, planes: int) -> tuple[list, list]:
    """(leaf names, switch links) of a k-ary fat-tree holding n_nics ports (k = 0: the smallest):
    leaf i to the k/2 spines of its pod, spine j of a pod to cores j*k/2 .. j*k/2 + k/2 - 1."""
    if not k:
        k = 2
        while k ** 3 // 4 < n_nics:
            k += 2
    half = k // 2
    n_leaves = -(-n_nics // half)
    pods = -(-n_leaves // half)
    leaves, links = [], []
    for p in range(planes):
        pre = f"p{p}-" if p else ""
        leaves += [f"{pre}leaf{i}" for i in range(n_leaves)]
        if n_leaves == 1:
            continue
        for i in range(n_leaves):
            pod = i // half
            links += [(f"{pre}leaf{i}", f"{pre}spine{pod * half + j}") for j in range(half)]
        if pods > 1:
            for s in range(pods * half):
                j = s % half
                links += [(f"{pre}spine{s}", f"{pre}core{j * half + c}") for c in range(half)]
    return leaves, links


def protected(name: str, half: int = 0) -> bool:
    """The switches that stay up, with their links, so that no event cuts a leaf off: spine0 of a
    two-tier plane, spine j=0 of every fat-tree pod (half = k/2) and core0 (every pod's spine 0
    reaches it), agg0 of a topology file (every leaf links to it)."""
    base = name[3:] if name.startswith("p1-") else name
    if base in ("spine0", "core0", "agg0"):
        return True
    return bool(half) and base.startswith("spine") and int(base[5:]) % half == 0


@st.composite
def hardware(draw, nodes: int, gpn: int) -> dict:
    """cluster, fabric (and a topology file), the fabric's leaves and switch links, and whether it
    is non-blocking by construction (one leaf per plane: no link between switches)."""
    nics = draw(st.sampled_from([0, 1] if gpn > 1 else [0]))       # 0: one NIC per GPU
    n_per_node = nics or gpn
    n_nics = nodes * n_per_node
    cluster = {"gpus_per_node": gpn, "nics_per_node": nics, "nic_gbps": NIC_GBPS}
    kind = draw(st.sampled_from(["leaf-spine", "leaf-spine", "rail-optimised", "fat-tree", "file"]))
    fab = {"kind": kind, "ecmp_hash": draw(st.sampled_from(["5-tuple", "qp"])), "ecmp_seed": draw(st.integers(0, 3))}
    half = 0
    topo = None
    if kind == "file":
        leaves = [f"tor{i}" for i in range(draw(st.integers(1, 3)))]
        aggs = [f"agg{i}" for i in range(draw(st.integers(0, 2)))]
        rate = st.sampled_from([100, 200, 400, 800])
        links3 = []
        if not aggs:                       # leaves linked in a line
            links3 = [[a, b, draw(rate)] for a, b in zip(leaves, leaves[1:])]
        elif len(leaves) > 1:
            for leaf in leaves:            # agg0 over every leaf, the other aggs over some
                up = ["agg0"] + [a for a in aggs[1:] if draw(st.booleans())]
                links3 += [[leaf, a, draw(rate)] for a in up]
        used = {x for a, b, _ in links3 for x in (a, b)}
        aggs = [a for a in aggs if a in used]
        topo = {"switches": {**{x: 1 for x in leaves}, **{a: 2 for a in aggs}}, "links": links3,
                "nics": [draw(st.sampled_from(leaves)) for _ in range(n_nics)]}
        links = [(a, b) for a, b, _ in links3]
        one_leaf = len(set(topo["nics"])) == 1
        # leaves linked in a line: no link may go down (each is a bridge)
        downable = [(a, b) for a, b in links if aggs and b != "agg0"]
        switches_down = [a for a in aggs if a != "agg0"]
    else:
        planes = draw(st.sampled_from([1, 1, 2]))
        fab["planes"] = planes
        if kind == "fat-tree":
            one_pod = 2
            while (one_pod // 2) ** 2 < n_nics:
                one_pod += 2
            k = draw(st.sampled_from([0, one_pod, 2 * n_nics, 2, 4]))
            if k and k ** 3 // 4 < n_nics:
                k = 0
            fab["k"] = k
            fab["placement"] = draw(st.sampled_from(["node", "rail"]))
            leaves, links = fat_tree(n_nics, k, planes)
            half = (k or _auto_k(n_nics)) // 2
            one_leaf = not links
        else:
            fab["nodes_per_leaf"] = npl = draw(st.sampled_from([1, 2, 16]))
            fab["spines"] = spines = draw(st.integers(1, 4))
            fab["oversubscription"] = draw(st.sampled_from([0, 1, 2, 4]))
            leaves, links = two_tier(kind, nodes, n_per_node, npl, spines, planes)
            one_leaf = not links
        downable = [(a, b) for a, b in links if not protected(a, half) and not protected(b, half)]
        switches_down = sorted({x for ln in links for x in ln if "leaf" not in x and not protected(x, half)})
    return {"cluster": cluster, "fabric": fab, "topo": topo, "links": links, "downable": downable, "n_nics": n_nics,
            "switches_down": switches_down, "non_blocking": one_leaf}


def _auto_k(n: int) -> int:
    k = 2
    while k ** 3 // 4 < n:
        k += 2
    return k


# --- scenarios, valid by construction ---------------------------------------------------------------

@st.composite
def timing(draw, flap: bool = False) -> dict:
    at = draw(st.sampled_from(TIMES_NS))
    if flap:
        return {"at_ns": at, "down_ns": draw(st.sampled_from([1_000, 5_000])),
                "up_ns": draw(st.sampled_from([1_000, 5_000])), "count": draw(st.integers(1, 3))}
    out = {"at_ns": at} if at or draw(st.booleans()) else {}
    if draw(st.booleans()):
        out["until_ns"] = at + draw(st.sampled_from([1_000, 10_000, 50_000]))
    return out


@st.composite
def valid_scenarios(draw) -> dict:
    """{'scenario': the file as a dict, 'job': the model job file or None, 'topo': the topology
    file or None, 'non_blocking': bool, 'links': switch links}."""
    gpn = draw(st.sampled_from([1, 2]))
    n_jobs = draw(st.integers(1, 3))
    model_at = draw(st.sampled_from([None, None] + list(range(n_jobs))))   # which job is the model job
    jobs, sizes = [], []
    for i in range(n_jobs):
        n_nodes = draw(st.integers(1 if gpn > 1 or i == model_at else 2, 2))    # a model job may be one GPU
        sizes.append(n_nodes)
        item: dict = {}
        if i == model_at:
            item["job"] = "model.yaml"
        else:
            item["pattern"] = draw(st.sampled_from(["incast", "alltoall", "allreduce"]))
            item["ranks"] = n_nodes * gpn
            item["bytes"] = draw(st.sampled_from(BYTES))
            if draw(st.booleans()):
                item["gap_ns"] = draw(st.sampled_from([0, 3_000]))
        if draw(st.booleans()):
            item["iterations"] = draw(st.integers(1, 2))
        if draw(st.booleans()):
            item["start_ns"] = draw(st.sampled_from([0, 1_000, 30_000]))
        if draw(st.booleans()):
            item["name"] = f"j{i}"
        if draw(st.integers(0, 2)) == 0:
            item["dscp"] = draw(st.integers(0, 63))
        if draw(st.integers(0, 2)) == 0:
            item["pcp"] = draw(st.integers(0, 7))     # output.vlan is on (the default, and the model job's)
        jobs.append(item)
    spare = draw(st.sampled_from([0, 0, 1]))
    nodes = sum(sizes) + spare
    hw = draw(hardware(nodes, gpn))
    sc: dict = {"name": "sweep", "cluster": hw["cluster"], "fabric": dict(hw["fabric"])}
    if spare or draw(st.booleans()):
        sc["nodes"] = nodes
    placement = draw(st.sampled_from(["contiguous", "interleaved", "random", "explicit"]))
    if placement != "contiguous" or draw(st.booleans()):
        sc["placement"] = placement
    if placement == "random":
        sc["seed"] = draw(st.integers(0, 2**32 - 1))
    if placement == "explicit":
        perm = draw(st.permutations(range(nodes)))
        at = 0
        for item, n in zip(jobs, sizes):
            item["nodes"] = list(perm[at:at + n])
            at += n
    if draw(st.booleans()):
        sc["ecmp_on_failure"] = draw(st.sampled_from(["rehash", "resilient"]))
    sc["jobs"] = jobs
    names = [j.get("name") for j in jobs]
    events = []
    for _ in range(draw(st.integers(0, 3))):
        kinds = ["straggler"]
        if hw["links"]:
            kinds.append("degrade")
        if hw["downable"]:
            kinds += ["down", "flap"]
        if hw["switches_down"]:
            kinds.append("down-switch")
        kind = draw(st.sampled_from(kinds))
        if kind == "straggler":
            j = draw(st.integers(0, n_jobs - 1))
            ref = names[j] if names[j] and draw(st.booleans()) else j
            world = sizes[j] * gpn
            events.append({"type": "straggler", "job": ref, "rank": draw(st.integers(0, world - 1)),
                           "factor": draw(st.sampled_from([1.5, 2.0, 0.5]))})
        elif kind == "down-switch":
            events.append({"type": "down", "switch": draw(st.sampled_from(hw["switches_down"])), **draw(timing())})
        else:
            a, b = draw(st.sampled_from(hw["downable"] if kind in ("down", "flap") else hw["links"]))
            link = f"{a}-{b}" if draw(st.booleans()) else f"{b}-{a}"
            if kind == "degrade":
                # below every link's rate of the sweep (a degrade must be: the slowest uplink is a 4:1
                # leaf of one 200G port under 4 spines, 13 Gb/s)
                events.append({"type": "degrade", "link": link, "gbps": draw(st.sampled_from([1, 5, 10])),
                               **draw(timing())})
            elif kind == "flap":
                events.append({"type": "flap", "link": link, **draw(timing(flap=True))})
            else:
                events.append({"type": "down", "link": link, **draw(timing())})
    if events or draw(st.booleans()):
        sc["events"] = events
    if hw["topo"] is not None:
        sc["fabric"]["file"] = "fabric.yaml"
    model = None
    if model_at is not None:
        ranks = sizes[model_at] * gpn
        tp = draw(st.sampled_from([1, 2])) if gpn == 2 else 1
        model = {"name": "model", "model": dict(TINY),
                 "parallelism": {"dp": ranks // tp, "tp": tp, "pp": 1, "micro_batch": 1, "global_batch": ranks // tp},
                 "nccl": {"algorithm": draw(st.sampled_from(["ring", "tree", "auto"])),
                          "qps_per_connection": draw(st.sampled_from([1, 2]))},
                 "detail": draw(st.sampled_from(["auto", "full", "conn"])),
                 "output": {"pictures": False, "format": draw(st.sampled_from(["pcap", "pcapng"])),
                            "ip_version": draw(st.sampled_from([4, 6])), "vlan": draw(st.booleans()),
                            "ack_every": draw(st.sampled_from([0, 4])),
                            "ecn_mark_fraction": (ecn := draw(st.sampled_from([0.0, 0.0, 0.2]))),
                            "dcqcn": ecn > 0 and draw(st.booleans())}}
        if model["nccl"]["qps_per_connection"] > 1:
            model["output"]["qp_split"] = draw(st.booleans())
        timed = any(e.get("at_ns") or "until_ns" in e or e["type"] == "flap" for e in events)
        if ecn and draw(st.booleans()):
            # marks from the switch queues along each epoch's routes (emit/packets/epoch_paths.py);
            # with timed events only without PFC (its pass holds t=0's rates: refused)
            model["output"]["ecn_marking"] = "queue"
            del model["output"]["ecn_mark_fraction"]      # inert with queue marks: refused
            if timed or draw(st.booleans()):
                model["network"] = {"pfc": False}
        # pictures (matplotlib, ~3 s): one model scenario in six
        model["output"]["pictures"] = draw(st.integers(0, 5)) == 0
        if hw["n_nics"] > 1 and draw(st.integers(0, 2)) == 0:        # host pcaps of two NICs only
            model["output"]["nics"] = f"0,{hw['n_nics'] - 1}"
        if not model["output"]["vlan"]:          # no 802.1Q tag to carry a pcp
            for item in jobs:
                item.pop("pcp", None)
        if hw["topo"] is None and draw(st.integers(0, 2)) == 0:
            # no cluster or fabric in the scenario: every job runs on the model job's, as written
            model["cluster"], model["fabric"] = sc.pop("cluster"), sc.pop("fabric")
            sc = {"name": sc.pop("name"), **sc}
    fabric_events = any(e["type"] != "straggler" for e in events)
    return {"scenario": sc, "job": model, "topo": hw["topo"], "links": hw["links"],
            "non_blocking": hw["non_blocking"] and not fabric_events, "gpn": gpn}


def write_files(tmp: Path, drawn: dict) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    if drawn["job"] is not None:
        (tmp / "model.yaml").write_text(yaml.safe_dump(drawn["job"]))
    if drawn["topo"] is not None:
        (tmp / "fabric.yaml").write_text(yaml.safe_dump(drawn["topo"]))
    (tmp / "s.yaml").write_text(yaml.safe_dump(drawn["scenario"], sort_keys=False))
    return tmp / "s.yaml"


# --- judges of this file ------------------------------------------------------------------------------

def down_and_rates(events: list) -> tuple[list, list]:
    """The scenario's fabric events as intervals: (down: [(names, at, until)], degrade: [(names,
    gbps, at, until)]); names is the switch, or the link's two switches; flaps expanded here;
    until None: to the end."""
    down, degrade = [], []
    for e in events:
        if e["type"] == "straggler":
            continue
        names = (e["switch"],) if "switch" in e else tuple(_split_link(e["link"]))
        if e["type"] == "flap":
            for k in range(e["count"]):
                t = e.get("at_ns", 0) + k * (e["down_ns"] + e["up_ns"])
                down.append((names, t, t + e["down_ns"]))
        elif e["type"] == "down":
            down.append((names, e.get("at_ns", 0), e.get("until_ns")))
        else:
            degrade.append((names, e["gbps"], e.get("at_ns", 0), e.get("until_ns")))
    return down, degrade


def _split_link(name: str) -> list[str]:
    # switch names of this sweep hold no '-' but a plane prefix ('p1-leaf0-p1-spine1')
    parts = name.split("-")
    out, k = [], 0
    while k < len(parts):
        if parts[k] == "p1":
            out.append(f"p1-{parts[k + 1]}")
            k += 2
        else:
            out.append(parts[k])
            k += 1
    assert len(out) == 2, name
    return out


def _hits(names: tuple, a: str, b: str) -> bool:
    """Whether an event on `names` (a switch, or a link's two switches) holds link direction a->b."""
    return names[0] in (a, b) if len(names) == 1 else set(names) == {a, b}


def rate_integral_bits(a: str, b: str, nominal: float, lo: int, hi: int, down: list, degrade: list) -> float:
    """Bits the link direction a->b can carry over [lo, hi) given the events: the rate over time is
    0 while any down holds, else the lowest degrade holding, else nominal."""
    cuts = {lo, hi}
    for _, t0, t1 in down:
        cuts |= {min(max(t0, lo), hi)} | ({min(max(t1, lo), hi)} if t1 is not None else set())
    for _, _, t0, t1 in degrade:
        cuts |= {min(max(t0, lo), hi)} | ({min(max(t1, lo), hi)} if t1 is not None else set())
    cuts = sorted(cuts)
    total = 0.0
    for x, y in zip(cuts, cuts[1:]):
        if any(_hits(n, a, b) and t0 <= x and (t1 is None or x < t1) for n, t0, t1 in down):
            continue
        r = min([g for n, g, t0, t1 in degrade if _hits(n, a, b) and t0 <= x and (t1 is None or x < t1)],
                default=nominal)
        total += r * (y - x)
    return total


def check_link_time(path: Path, events: list) -> int:
    """link_time.csv: per link direction and bin, the jobs' bytes fit in the rate's integral over
    the bin (Gb/s x ns = bits). Returns the number of (link, bin) cells judged."""
    rows = list(csv.reader(path.open()))
    head, body = rows[0], rows[1:]
    assert head[:3] == ["link", "job", "link_gbps"], head[:3]
    bins = [tuple(int(x) for x in h.split("_")[1:]) for h in head[3:]]
    assert all(a < b for a, b in bins) and all(p[1] == q[0] for p, q in zip(bins, bins[1:])), bins[:3]
    per_link: dict = defaultdict(lambda: [0.0] * len(bins))
    nominal = {}
    jobs_on = defaultdict(int)
    for row in body:
        link = row[0]
        nominal[link] = float(row[2])
        jobs_on[link] += 1
        for k, x in enumerate(row[3:]):
            assert float(x) >= 0, (link, row[1], k, x)
            per_link[link][k] += float(x) * (bins[k][1] - bins[k][0])      # Gb/s x ns = bits
    down, degrade = down_and_rates(events)
    n = 0
    for link, bits in per_link.items():
        a, _, b = link.partition("->")
        for k, (lo, hi) in enumerate(bins):
            cap = rate_integral_bits(a, b, nominal[link], lo, hi, down, degrade)
            slack = 0.0005 * (hi - lo) * jobs_on[link] + 1e-6 * cap      # the csv's 3 decimals of Gb/s
            assert bits[k] <= cap + slack, (f"{link} bin {lo}..{hi}: {bits[k]:.1f} bits, the link can carry "
                                            f"{cap:.1f} (nominal {nominal[link]} Gb/s, events {events})")
            n += 1
    return n


def roce_frames(path: Path, classes: bool = False):
    """(src IP, dst IP, opcode, dest QPN) - with classes, (pcp or None, dscp) after them - of every RoCEv2 frame of a pcap or pcapng capture, parsed
    here: Ethernet (802.1Q optional), IPv4 or IPv6, UDP 4791, BTH."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    frames = []
    if magic == 0x0A0D0D0A:                  # pcapng: Enhanced Packet Blocks
        at = 0
        while at + 12 <= len(data):
            kind, size = struct.unpack_from("<II", data, at)
            if kind == 6:
                cap = struct.unpack_from("<I", data, at + 20)[0]
                frames.append(data[at + 28:at + 28 + cap])
            at += size
    else:
        at = 24
        while at + 16 <= len(data):
            incl = struct.unpack_from("<I", data, at + 8)[0]
            frames.append(data[at + 16:at + 16 + incl])
            at += 16 + incl
    for f in frames:
        off, et, pcp = 14, struct.unpack_from("!H", f, 12)[0], None
        if et == 0x8100:
            off, et, pcp = 18, struct.unpack_from("!H", f, 16)[0], struct.unpack_from("!H", f, 14)[0] >> 13
        if et == 0x0800:
            dscp = f[off + 1] >> 2
            ihl = (f[off] & 15) * 4
            if f[off + 9] != 17:
                continue
            src, dst, udp = bytes(f[off + 12:off + 16]), bytes(f[off + 16:off + 20]), off + ihl
        elif et == 0x86DD:
            dscp = (((f[off] & 0x0F) << 4) | (f[off + 1] >> 4)) >> 2
            if f[off + 6] != 17:
                continue
            src, dst, udp = bytes(f[off + 8:off + 24]), bytes(f[off + 24:off + 40]), off + 40
        else:
            continue
        if struct.unpack_from("!H", f, udp + 2)[0] != 4791 or len(f) < udp + 20:
            continue
        bth = udp + 8
        head = (src, dst, f[bth], struct.unpack_from("!I", f, bth + 4)[0] & 0xFFFFFF)
        yield head + (pcp, dscp) if classes else head


def check_classes(pcaps: list[Path], doc: dict) -> None:
    """Each job's frames carry its class (scenario.json's dscp/pcp, as the file asked): a NIC's
    capture is its node's (node0003-rail0.pcap), the node is one job's. CNPs are the congestion
    class's, not the job's: left out."""
    job_of = {n: j for j in doc["jobs"] for n in j["nodes"]}
    for p in pcaps:
        j = job_of[int(p.stem[4:8])]
        got = {(pcp, dscp) for _, _, op, _, pcp, dscp in roce_frames(p, classes=True) if op != 0x81}
        assert got <= {(j["pcp"], j["dscp"])}, (p.name, j["name"], got, j["pcp"], j["dscp"])


def check_qpns(pcaps: list[Path]) -> int:
    """One QP plan across jobs: each (dst IP, dest QPN) is reached from one source address only,
    and each capture's NIC sends from one address no other capture sends from."""
    reached: dict = defaultdict(set)
    own: dict = {}
    n = 0
    for p in pcaps:
        for src, dst, _, qpn in roce_frames(p):
            reached[(dst, qpn)].add(src)
            n += 1
        # a NIC's capture holds what it sent and received: its own address is in every frame (a
        # NIC talking to one peer only shows two: theirs can't be told apart from the frames alone)
        frames = list(roce_frames(p))
        mine = set.intersection(*({s, d} for s, d, _, _ in frames)) if frames else set()
        assert 1 <= len(mine) <= 2, (p.name, len(mine))
        if len(mine) == 1:
            addr = next(iter(mine))
            assert addr not in own, f"{p.name} and {own[addr]} share the address {addr.hex()}"
            own[addr] = p.name
    shared = {k: v for k, v in reached.items() if len(v) > 1}
    assert not shared, f"{len(shared)} (dst, QPN) reached from several sources, e.g. {next(iter(shared.items()))}"
    return n


def check_scenario_json(doc: dict, drawn: dict) -> None:
    sc = drawn["scenario"]
    assert len(doc["jobs"]) == len(sc["jobs"])
    for item, j in zip(sc["jobs"], doc["jobs"]):
        its = item.get("iterations", 1)
        assert j["start_ns"] == item.get("start_ns", 0), j
        assert j["end_ns"] >= j["start_ns"], j
        assert j["jct_ns"] == j["end_ns"] - j["start_ns"], j
        assert j["iterations"] == its and len(j["iteration_ns"]) == its and len(j["alone_iteration_ns"]) == its, j
        assert sum(j["iteration_ns"]) == j["jct_ns"] and sum(j["alone_iteration_ns"]) == j["alone_jct_ns"], j
        assert min(j["iteration_ns"]) >= 0, j
        if "nodes" in item:
            assert j["nodes"] == item["nodes"], (j["nodes"], item["nodes"])
        if "dscp" in item:
            assert j["dscp"] == item["dscp"], j
        if "pcp" in item:
            assert j["pcp"] == item["pcp"], j
        one_node = len(j["nodes"]) == 1
        if (drawn["non_blocking"] or one_node) and j["alone_jct_ns"]:
            assert abs(j["slowdown"] - 1) <= 1e-9, (f"{j['name']} slowed {j['slowdown']} on a non-blocking fabric"
                                                    f" / one node: {j}")
    nodes = [n for j in doc["jobs"] for n in j["nodes"]]
    assert len(nodes) == len(set(nodes)) and all(0 <= n < doc["nodes"] for n in nodes), nodes


class _Fastest:
    """A fabric whose packet time P is the fastest link's: a store-and-forward switch sends the last
    packet at its egress link's rate, and an uplink can be faster than the NIC (a 1:1 leaf of one
    node of two NICs under one spine has 800G uplinks); the NIC's P would overstate the latency."""

    def __init__(self, fabric):
        self._f = fabric
        self.nic_gbps = int(max(int(fabric.links["gbps"].max()), fabric.nic_gbps))

    def __getattr__(self, name):
        return getattr(self._f, name)


def switch_hops(flows, fabric) -> np.ndarray:
    """Per flow, the fewest links a NET flow crosses: its NICs' leaves' distance in the switch graph
    (breadth first over fabric.links between switches; links down only lengthen a path) + 2 -
    a file fabric's leaves linked directly are 3 apart, a fat-tree's pods 6; NVLink rows 0."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path
    n, m = fabric.n_nics, fabric.n_switches
    sw = (fabric.links["a"] >= n) & (fabric.links["b"] >= n)
    a, b = fabric.links["a"][sw].astype(np.int64) - n, fabric.links["b"][sw].astype(np.int64) - n
    dist = shortest_path(csr_matrix((np.ones(len(a)), (a, b)), shape=(m, m)), directed=False, unweighted=True)
    r = flows.rows
    net = r["link"] == LinkKind.NET
    src, dst = np.maximum(r["src_nic"], 0), np.maximum(r["dst_nic"], 0)
    leaf = fabric.nic_port_leaf
    d = np.min([dist[leaf[src, p], leaf[dst, p]] for p in range(leaf.shape[1])], axis=0)
    assert np.isfinite(d[net]).all(), "a flow between leaves that no path joins"
    return np.where(net, 2 + np.where(np.isfinite(d), d, 0), 0).astype(np.int64)


def nic_ports(flows, fabric, out):
    """schedule_validator.nic_links - a NET flow holds its NICs' tx and rx ports, an NVLink flow its
    GPUs' ports - with this file's hop counts (switch_hops) and the fastest link's packet time
    (_Fastest) for the store-and-forward latency."""
    from schedule_validator import _endpoint_ids, _endpoint_name, paths_from_routes
    net, tx, rx = _endpoint_ids(flows, fabric)
    n = len(flows.rows)
    hops = switch_hops(flows, fabric)
    ids = np.column_stack([tx, rx]).ravel()
    pos = np.column_stack([np.zeros(n, np.int64), np.where(net, hops - 1, 1)]).ravel()
    gbps = np.r_[np.full(2 * fabric.n_nics, fabric.nic_gbps), np.full(2 * fabric.world, fabric.nvlink_gbps)]
    return paths_from_routes(flows, _Fastest(fabric), out, np.arange(0, 2 * n + 1, 2), ids, gbps, hops=hops,
                             pos=pos, name=_endpoint_name(fabric))


def strict_json(text: str):
    """JSON as any consumer reads it: NaN and Infinity are not JSON (Python writes them, jq and
    browsers refuse them)."""
    def refuse(name):
        raise AssertionError(f"scenario.json holds {name}: not JSON")
    return json.loads(text, parse_constant=refuse)


def folder_bytes(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def generate(s: Path, out: Path):
    return CliRunner().invoke(main, ["generate", "--scenario", str(s), "-o", str(out), "--no-ns3", "-q"])


TOTAL: dict = defaultdict(int)


def check_scenario(tmp: Path, drawn: dict, twice: bool) -> None:
    from schedule_validator import validate
    from tracegen.scenario.run import run_scenario
    from tracegen.scenario.spec import load_scenario
    s = write_files(tmp, drawn)
    out = tmp / "out"
    res = generate(s, out)
    what = yaml.safe_dump(drawn["scenario"], sort_keys=False) + f"topo: {drawn['topo']}\njob: {drawn['job']}"
    assert res.exit_code == 0, f"exit {res.exit_code}: {res.output[-3000:]}\n{what}"
    assert "Traceback" not in res.output
    assert all(x.startswith("warning: ") for x in res.stderr.strip().splitlines() if x), res.stderr
    files = set(os.listdir(out))
    assert {"scenario.json", "ops.csv", "flows.csv", "summary.md"} <= files, files
    if drawn["job"] is not None and drawn["job"]["output"].get("pictures"):
        assert {"jobs_gantt.png", "slowdowns.png"} <= files, files
        # `report DIR` redraws them from the files alone, byte for byte (README: Scenarios)
        again = tmp / "redrawn"
        got = CliRunner().invoke(main, ["report", str(out), "-o", str(again)])
        assert got.exit_code == 0, got.output
        for name in {"jobs_gantt.png", "slowdowns.png", "link_load_by_job.png"} & files:
            assert (again / name).read_bytes() == (out / name).read_bytes(), name
        TOTAL["pictures"] += 1
    doc = strict_json((out / "scenario.json").read_text())
    check_scenario_json(doc, drawn)
    # ops.csv: every op of a job within [its start, its end], its iteration one it was asked for
    jobs = {j["name"]: j for j in doc["jobs"]}
    for r in csv.DictReader((out / "ops.csv").open()):
        j = jobs[r["job"]]
        assert j["start_ns"] <= int(r["start_ns"]) <= int(r["end_ns"]) <= j["end_ns"], (r, j)
        assert 0 <= int(r["iteration"]) < j["iterations"], (r, j)
    events = drawn["scenario"].get("events", [])
    if (out / "link_time.csv").exists():
        TOTAL["link_bins"] += check_link_time(out / "link_time.csv", events)
    pcaps = sorted((out / "pcap").iterdir()) if (out / "pcap").exists() else []
    if pcaps:
        TOTAL["frames"] += check_qpns(pcaps)
        check_classes(pcaps, doc)
        TOTAL["pcaps"] += len(pcaps)
        if wire_check is not None:
            fabric = drawn["scenario"].get("fabric") or drawn["job"]["fabric"]
            port = NIC_GBPS // fabric.get("planes", 1)
            bad = wire_check.check_wire(out / "pcap", port_rate_gbps=port)
            assert not bad, f"{len(bad)} wire violations {dict(wire_check.tags(bad))}: " + "\n".join(bad[:6]) + "\n" + what
    # the schedule validator on the scenario's flows (NIC ports and NVLink: their rates never change)
    run = run_scenario(load_scenario(s))
    bad = validate(run.flows, run.fabric, run.scenario.hardware.output, links_of=nic_ports,
                   exact=False) if len(run.flows.rows) else []
    assert not bad, f"{len(bad)} schedule violations: " + "\n".join(map(str, bad[:6])) + "\n" + what
    if twice:
        again = tmp / "again"
        res2 = generate(s, again)
        assert res2.exit_code == 0, res2.output
        a, b = folder_bytes(out), folder_bytes(again)
        assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a.get(k) != b.get(k)][:5]
        res3 = CliRunner().invoke(main, ["plan", "--scenario", str(s), "--json"])
        assert res3.exit_code == 0, res3.output
        assert strict_json(res3.stdout) == doc, "plan --scenario --json differs from generate's scenario.json"
        TOTAL["twice"] += 1
    TOTAL["scenarios"] += 1
    TOTAL["events"] += len(events)
    TOTAL["jobs"] += len(doc["jobs"])


# The acceptance shapes of issue 23, always run first: two jobs on one leaf; a spine of four down
# from t=0 under an interleaved pair; a timed flap and a straggler; a topology file.
def _two(fabric: dict, events=None, placement="interleaved", topo=None, gpn=1, **extra) -> dict:
    jobs = [{"pattern": "allreduce", "ranks": 2, "bytes": 65536, "name": "a", "iterations": 2},
            {"pattern": "incast", "ranks": 2, "bytes": 65536, "name": "b", "start_ns": 1000, "dscp": 34}]
    sc = {"name": "sweep", "cluster": {"gpus_per_node": gpn, "nics_per_node": 0, "nic_gbps": NIC_GBPS},
          "fabric": fabric, "placement": placement, "jobs": jobs, **extra}
    if events is not None:
        sc["events"] = events
    return {"scenario": sc, "job": None, "topo": topo, "links": [], "gpn": gpn,
            "non_blocking": fabric.get("nodes_per_leaf") == 16 and not events}


@pytest.mark.timeout(900)
def test_every_valid_scenario_runs(tmp_path):
    seen = {"n": 0}

    @PROFILE
    @given(valid_scenarios())
    @example(_two({"kind": "leaf-spine", "nodes_per_leaf": 16}))
    @example(_two({"kind": "leaf-spine", "nodes_per_leaf": 2, "spines": 4, "oversubscription": 1},
                  [{"type": "down", "switch": "spine1"}], ecmp_on_failure="resilient"))
    @example(_two({"kind": "leaf-spine", "nodes_per_leaf": 1, "spines": 2},
                  [{"type": "flap", "link": "leaf0-spine1", "at_ns": 2000, "down_ns": 5000, "up_ns": 1000, "count": 2},
                   {"type": "degrade", "link": "spine0-leaf1", "gbps": 100, "at_ns": 1000, "until_ns": 30000},
                   {"type": "straggler", "job": "a", "rank": 1, "factor": 1.5}]))
    # an uplink faster than the NIC (1:1 leaf of one 2-NIC node under one spine: 800G): the judge's
    # store-and-forward latency takes the egress rates (nic_ports)
    @example({"scenario": {"name": "sweep", "cluster": {"gpus_per_node": 2, "nics_per_node": 0, "nic_gbps": NIC_GBPS},
                           "fabric": {"kind": "leaf-spine", "nodes_per_leaf": 1, "spines": 1, "oversubscription": 1},
                           "placement": "interleaved", "jobs": [{"job": "model.yaml", "dscp": 0}]},
              "job": {"name": "model", "model": dict(TINY), "output": {"pictures": False},
                      "parallelism": {"dp": 4, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 4}},
              "topo": None, "links": [], "non_blocking": False, "gpn": 2})
    # a link degraded over [0, 1000) only: link_time.csv's link_gbps is its rate over the run (400),
    # not t=0's 1 Gb/s (the load after 1000 ns was over the rate written)
    @example(_two({"kind": "leaf-spine", "nodes_per_leaf": 1, "spines": 1},
                  [{"type": "degrade", "link": "spine0-leaf0", "gbps": 1, "until_ns": 1000}], placement="contiguous"))
    # leaves linked directly (a file fabric): 3 links apart (switch_hops)
    @example(_two({"kind": "file", "file": "fabric.yaml"}, placement="contiguous",
                  topo={"switches": {"tor0": 1, "tor1": 1}, "links": [["tor0", "tor1", 100]],
                        "nics": ["tor0", "tor0", "tor0", "tor1"]}))
    def sweep(drawn):
        seen["n"] += 1
        check_scenario(tmp_path / f"s{seen['n']:04d}", json.loads(json.dumps(drawn)), twice=seen["n"] % 4 == 1)

    sweep()
    assert seen["n"] >= PROFILE.max_examples, seen
    assert TOTAL["link_bins"] > 0 and TOTAL["frames"] > 0 and TOTAL["twice"] > 0, dict(TOTAL)
    print(f"valid-scenario sweep: {dict(TOTAL)}")


# --- one key broken at a time: exit 2, one `error:` line naming the key, nothing written ------------

BAD_BASE = {
    "name": "bad", "cluster": {"gpus_per_node": 1, "nics_per_node": 0, "nic_gbps": NIC_GBPS},
    "fabric": {"kind": "leaf-spine", "nodes_per_leaf": 2, "spines": 2}, "placement": "explicit",
    "ecmp_on_failure": "rehash",
    "jobs": [{"job": "model.yaml", "name": "m", "nodes": [0, 2], "iterations": 1},
             {"pattern": "incast", "ranks": 2, "bytes": 65536, "name": "b", "nodes": [1, 3], "start_ns": 1000,
              "dscp": 10, "pcp": 2}],
    "events": [{"type": "down", "link": "leaf0-spine1", "at_ns": 1000, "until_ns": 5000},
               {"type": "degrade", "link": "leaf1-spine0", "gbps": 100},
               {"type": "flap", "link": "leaf1-spine1", "at_ns": 2000, "down_ns": 1000, "up_ns": 1000, "count": 2},
               {"type": "straggler", "job": "b", "rank": 1, "factor": 1.5}]}
BAD_MODEL = {"name": "model", "model": dict(TINY), "output": {"pictures": False},
             "parallelism": {"dp": 2, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 2}}

_word = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
_too_big_ns = st.integers(10**15 + 1, 10**18)


def _set(path: str, value):
    """A mutation: the key at `path` ('jobs.1.ranks') set to value; expects the error to name `key`."""
    def apply(sc):
        *head, last = path.split(".")
        node = sc
        for p in head:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value
    return apply


def _drop_nodes(sc):
    for j in sc["jobs"]:
        j.pop("nodes", None)


@st.composite
def broken(draw, what: str) -> tuple[dict, str, str]:
    """(scenario with `what` broken, the text the error line must hold, what)."""
    sc = json.loads(json.dumps(BAD_BASE))
    k = draw(st.integers(0, 1))
    e = draw(st.integers(0, 3))
    cases = {
        "unknown top key": lambda: (w := draw(_word.filter(lambda x: x not in (
            "name", "description", "cluster", "fabric", "nodes", "placement", "seed", "ecmp_on_failure", "jobs",
            "events")))) and (_set(w, 1), f"'{w}'"),
        "unknown job key": lambda: (w := draw(_word.filter(lambda x: x not in (
            "job", "preset", "pattern", "name", "start_ns", "iterations", "nodes", "ranks", "bytes", "gap_ns",
            "dscp", "pcp")))) and (_set(f"jobs.{k}.{w}", 1), f"jobs[{k}].{w}"),
        "unknown event key": lambda: (w := draw(_word.filter(lambda x: x not in (
            "type", "at_ns", "until_ns", "link", "switch", "gbps", "down_ns", "up_ns", "count", "job", "rank",
            "factor")))) and (_set(f"events.{e}.{w}", 1), f"events[{e}].{w}"),
        "start_ns": lambda: (_set(f"jobs.{k}.start_ns", draw(st.integers(-10**6, -1) | _too_big_ns
                                                             | st.just("soon") | st.just(1.5))),
                             f"jobs[{k}].start_ns"),
        "ranks": lambda: (_set("jobs.1.ranks", draw(st.integers(-5, 1) | st.integers(4097, 10**6))), "jobs[1].ranks"),
        "bytes": lambda: (_set("jobs.1.bytes", draw(st.integers(-5, 0) | st.integers(2**40 + 1, 2**50)
                                                     | st.just(True))), "jobs[1].bytes"),
        "gap_ns": lambda: (_set("jobs.1.gap_ns", draw(st.integers(-9, -1) | _too_big_ns)), "jobs[1].gap_ns"),
        "pattern iterations": lambda: (_set("jobs.1.iterations", draw(st.integers(-3, 0) | st.integers(1001, 10**5))),
                                       "jobs[1].iterations"),
        "dscp": lambda: (_set(f"jobs.{k}.dscp", draw(st.integers(-9, -1) | st.integers(64, 999))), f"jobs[{k}].dscp"),
        "pcp": lambda: (_set(f"jobs.{k}.pcp", draw(st.integers(-9, -1) | st.integers(8, 99))), f"jobs[{k}].pcp"),
        "pattern kind": lambda: (_set("jobs.1.pattern", draw(_word.filter(
            lambda x: x not in ("incast", "alltoall", "allreduce")))), "jobs[1].pattern"),
        "placement": lambda: (_set("placement", draw(_word.filter(
            lambda x: x not in ("contiguous", "interleaved", "random", "explicit")))), "placement"),
        "ecmp_on_failure": lambda: (_set("ecmp_on_failure", draw(_word.filter(
            lambda x: x not in ("rehash", "resilient")))), "ecmp_on_failure"),
        "seed without random": lambda: (lambda s: (_drop_nodes(s), s.update(
            placement=draw(st.sampled_from(["contiguous", "interleaved"])), seed=3)), "seed"),
        "seed out of range": lambda: (lambda s: (_drop_nodes(s), s.update(
            placement="random", seed=draw(st.integers(-9, -1) | st.integers(2**32, 2**40)))), "seed"),
        "name": lambda: (_set("name", draw(st.sampled_from(["a/b", "..", "", "x" * 101, "spa ce"]))), "name"),
        "job name": lambda: (_set(f"jobs.{k}.name", draw(st.sampled_from(["a/b", "", "x" * 101]))), f"jobs[{k}].name"),
        "straggler job": lambda: (_set("events.3.job", draw(st.sampled_from(["nobody", "c", 2, -1, 7]))),
                                  "events[3].job"),
        "straggler rank": lambda: (_set("events.3.rank", draw(st.integers(-9, -1) | st.integers(2, 99))),
                                   "events[3].rank"),
        "straggler factor": lambda: (_set("events.3.factor", draw(st.sampled_from([0, 0.001, -1.5, 1001, 1e9]))),
                                     "events[3].factor"),
        "straggler at_ns": lambda: (_set("events.3.at_ns", draw(st.integers(1, 10**9))), "events[3].at_ns"),
        "no such link": lambda: (_set(f"events.{draw(st.sampled_from([0, 1, 2]))}.link",
                                      draw(st.sampled_from(["leaf0-leaf1", "leaf0-spine7", "leaf9-spine0",
                                                            "spine0-spine1", "foo", "leaf0", "node0000-rail0-leaf0"]))),
                                 "link"),
        "no such switch": lambda: (lambda s: s["events"].__setitem__(0, {"type": "down", "switch": draw(
            st.sampled_from(["spine7", "leaf0", "leaf1", "core0", "nothing"]))}), "events[0].switch"),
        "until before at": lambda: (_set("events.0.until_ns", draw(st.integers(-5, 1000))), "events[0].until_ns"),
        "degrade gbps": lambda: (_set("events.1.gbps", draw(st.integers(-9, 0) | st.integers(10**7 + 1, 10**9))),
                                 "events[1].gbps"),
        # a degrade at or above the link's rate (400 Gb/s, timed or from t=0) models no degrading
        "degrade not below the rate": lambda: (lambda s: s["events"][1].update(
            gbps=draw(st.sampled_from([400, 401, 800, 10**7])), **draw(st.sampled_from([{}, {"at_ns": 3000}]))),
            "events[1].gbps"),
        "flap count": lambda: (_set("events.2.count", draw(st.integers(-3, 0) | st.integers(1025, 10**6))),
                               "events[2]"),
        "flap down_ns": lambda: (_set("events.2.down_ns", draw(st.integers(-3, 0) | _too_big_ns)), "events[2].down_ns"),
        "event type": lambda: (_set(f"events.{e}.type", draw(_word.filter(
            lambda x: x not in ("down", "degrade", "flap", "straggler")))), f"events[{e}].type"),
        "overlapping nodes": lambda: (_set("jobs.1.nodes", draw(st.sampled_from([[0, 1], [1, 2], [3, 0], [2, 3]]))),
                                      "jobs[1].nodes"),
        "node out of range": lambda: (lambda s: (s.update(nodes=4), s["jobs"][1].update(
            nodes=[1, draw(st.integers(4, 100))])), "jobs[1].nodes"),
        "nodes listed": lambda: (_set("jobs.1.nodes", draw(st.sampled_from([[1], [1, 3, 4], []]))), "jobs[1].nodes"),
        "too few nodes": lambda: (_set("nodes", draw(st.integers(1, 3))), "nodes"),
        "every spine down": lambda: (lambda s: s["events"].extend(
            [{"type": "down", "switch": "spine0"}, {"type": "down", "switch": "spine1"}]), "events"),
        "every uplink of a leaf down": lambda: (lambda s: s["events"].extend(
            [{"type": "down", "link": "leaf1-spine0", "at_ns": 3000}, {"type": "down", "link": "spine1-leaf1"}]),
            "events"),
        "two sources": lambda: (_set(f"jobs.{k}." + ("pattern" if k == 0 else "job"),
                                     "incast" if k == 0 else "model.yaml"), f"jobs[{k}]"),
        "pattern key on a job file": lambda: (_set(f"jobs.0.{draw(st.sampled_from(['ranks', 'bytes', 'gap_ns']))}", 2),
                                              "jobs[0]."),
        "nodes without explicit": lambda: (lambda s: s.update(placement=draw(st.sampled_from(
            ["contiguous", "interleaved", "random"]))), "nodes"),
        "missing job file": lambda: (_set("jobs.0.job", draw(st.sampled_from(["nope.yaml", "sub/model.yaml"]))),
                                     "nope.yaml|sub/model.yaml"),
        "unknown preset": lambda: (lambda s: s["jobs"].__setitem__(0, {"preset": "no_" + draw(_word), "nodes": [0, 2]}),
                                   "preset"),
        "jobs": lambda: (_set("jobs", draw(st.sampled_from([[], "model.yaml", None, {"job": "model.yaml"}]))), "jobs"),
    }
    assert set(cases) == set(BREAKAGES)
    change, key = cases[what]()
    change(sc)
    return sc, key, what


BREAKAGES = ("unknown top key", "unknown job key", "unknown event key", "start_ns", "ranks", "bytes", "gap_ns",
             "pattern iterations", "dscp", "pcp", "pattern kind", "placement", "ecmp_on_failure",
             "seed without random", "seed out of range", "name", "job name", "straggler job", "straggler rank",
             "straggler factor", "straggler at_ns", "no such link", "no such switch", "until before at",
             "degrade gbps", "flap count", "flap down_ns", "event type", "overlapping nodes", "node out of range",
             "nodes listed", "too few nodes", "every spine down", "every uplink of a leaf down", "jobs",
             "two sources", "pattern key on a job file", "nodes without explicit", "missing job file",
             "unknown preset", "degrade not below the rate")


def run_bad(tmp: Path, sc: dict, command: str):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "model.yaml").write_text(yaml.safe_dump(BAD_MODEL))
    (tmp / "s.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    args = ["plan", "--scenario", str(tmp / "s.yaml")] if command == "plan" else \
        ["generate", "--scenario", str(tmp / "s.yaml"), "-o", str(tmp / "out"), "--no-ns3", "-q"]
    return CliRunner().invoke(main, args)


def test_the_bad_base_is_valid(tmp_path):
    """The invalid sweep breaks a scenario that runs: its errors come from the key broken."""
    res = run_bad(tmp_path, BAD_BASE, "generate")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "scenario.json").is_file()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", BREAKAGES)
def test_every_invalid_scenario_is_one_line(tmp_path, what):
    seen = {"n": 0}

    @BAD_PROFILE
    @given(broken(what), st.sampled_from(["generate", "plan"]))
    def sweep(case, command):
        sc, key, _ = case
        seen["n"] += 1
        tmp = tmp_path / f"b{seen['n']:04d}"
        res = run_bad(tmp, sc, command)
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert res.exit_code == 2, f"{what}: exit {res.exit_code}: {res.output[-2000:]}\n{sc}"
        assert "Traceback" not in res.output, res.output
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {res.stderr}"
        assert any(k in lines[0] for k in key.split("|")), f"{what}: the error does not name {key!r}: {lines[0]}"
        assert not (tmp / "out").exists(), f"{what}: an output folder was created"
        assert res.stdout.strip() == "", res.stdout

    sweep()
    assert seen["n"] >= BAD_PROFILE.max_examples


# --- the judges of this file can fail ---------------------------------------------------------------

def _link_time(tmp: Path, rows: list[list]) -> Path:
    p = tmp / "link_time.csv"
    p.write_text("link,job,link_gbps,gbps_0_1000,gbps_1000_2000,gbps_2000_3000\n"
                 + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return p


def test_link_time_judge_sees_bytes_on_a_link_down_and_over_its_rate(tmp_path):
    ok = _link_time(tmp_path, [["leaf0->spine1", "a", 400, 200, 0, 400], ["leaf0->spine1", "b", 400, 200, 0, 0]])
    down = [{"type": "down", "link": "spine1-leaf0", "at_ns": 1000, "until_ns": 2000}]
    assert check_link_time(ok, down) == 3
    with pytest.raises(AssertionError, match="bin 1000..2000"):        # 1 Gb/s while down
        check_link_time(_link_time(tmp_path, [["leaf0->spine1", "a", 400, 0, 1, 0]]), down)
    with pytest.raises(AssertionError, match="bin 0..1000"):           # two jobs over 400 Gb/s
        check_link_time(_link_time(tmp_path, [["leaf0->spine1", "a", 400, 300, 0, 0],
                                              ["leaf0->spine1", "b", 400, 101, 0, 0]]), [])
    degrade = [{"type": "degrade", "link": "leaf0-spine1", "gbps": 100, "at_ns": 2000}]
    with pytest.raises(AssertionError, match="bin 2000..3000"):        # 101 on a link at 100 from 2000
        check_link_time(_link_time(tmp_path, [["leaf0->spine1", "a", 400, 0, 0, 101]]), degrade)
    flap = [{"type": "flap", "link": "leaf0-spine1", "at_ns": 500, "down_ns": 500, "up_ns": 1000, "count": 2}]
    with pytest.raises(AssertionError, match="bin 0..1000"):           # down over [500, 1000): 200 at most
        check_link_time(_link_time(tmp_path, [["leaf0->spine1", "a", 400, 201, 0, 0]]), flap)
    spine = [{"type": "down", "switch": "spine1", "at_ns": 2000}]
    with pytest.raises(AssertionError, match="bin 2000..3000"):        # a switch down: every link of it
        check_link_time(_link_time(tmp_path, [["spine1->leaf3", "a", 400, 0, 0, 5]]), spine)
    assert check_link_time(_link_time(tmp_path, [["spine2->leaf3", "a", 400, 0, 0, 5]]), spine) == 3


def test_link_time_rate_is_the_links_rate_over_the_run_not_t0s(tmp_path):
    """A degrade over [0, T) only: link_time.csv's link_gbps is the rate the link runs at after T
    (it was epoch 0's degraded rate, and the load after T exceeded it)."""
    drawn = _two({"kind": "leaf-spine", "nodes_per_leaf": 1, "spines": 1},
                 [{"type": "degrade", "link": "spine0-leaf0", "gbps": 1, "until_ns": 1000},
                  {"type": "degrade", "link": "leaf1-spine0", "gbps": 100}], placement="contiguous")
    s = write_files(tmp_path, drawn)
    res = CliRunner().invoke(main, ["generate", "--scenario", str(s), "-o", str(tmp_path / "out"), "--no-ns3",
                                    "--no-pcap", "-q"])
    assert res.exit_code == 0, res.output
    rate = {r[0]: float(r[2]) for r in csv.reader((tmp_path / "out" / "link_time.csv").open()) if r[0] != "link"}
    assert rate["leaf0->spine0"] == rate["spine0->leaf0"] == NIC_GBPS          # back at 400 from 1000 ns
    assert rate["leaf1->spine0"] == rate["spine0->leaf1"] == 100                # degraded the whole run
    check_link_time(tmp_path / "out" / "link_time.csv", drawn["scenario"]["events"])


def test_qpn_judge_sees_two_connections_on_one_qp(tmp_path):
    from scapy.all import IP, UDP, Dot1Q, Ether, Raw, wrpcap

    def frame(src, dst, qpn):
        bth = bytes([4, 0, 0xFF, 0xFF]) + qpn.to_bytes(4, "big") + bytes(4)
        return Ether() / Dot1Q(vlan=100) / IP(src=src, dst=dst) / UDP(sport=49152, dport=4791) / Raw(bth + bytes(4))
    d = tmp_path / "pcap"
    d.mkdir()
    wrpcap(str(d / "n0.pcap"), [frame("10.0.0.1", "10.0.0.2", 7), frame("10.0.0.1", "10.0.0.3", 7)])
    wrpcap(str(d / "n1.pcap"), [frame("10.0.0.4", "10.0.0.2", 8), frame("10.0.0.4", "10.0.0.3", 9)])
    assert check_qpns([d / "n0.pcap"]) == 2
    assert check_qpns([d / "n0.pcap", d / "n1.pcap"]) == 4
    wrpcap(str(d / "n2.pcap"), [frame("10.0.0.5", "10.0.0.2", 7), frame("10.0.0.5", "10.0.0.3", 1)])
    with pytest.raises(AssertionError, match="reached from several sources"):
        check_qpns([d / "n0.pcap", d / "n2.pcap"])
    wrpcap(str(d / "n3.pcap"), [frame("10.0.0.1", "10.0.0.7", 3), frame("10.0.0.1", "10.0.0.8", 3)])
    with pytest.raises(AssertionError, match="share the address"):
        check_qpns([d / "n0.pcap", d / "n3.pcap"])


def test_scenario_json_judge_sees_a_slowdown_and_a_lost_iteration():
    drawn = _two({"kind": "leaf-spine", "nodes_per_leaf": 16})
    job = {"name": "a", "nodes": [0, 2], "start_ns": 0, "end_ns": 100, "jct_ns": 100, "iterations": 2,
           "iteration_ns": [60, 40], "alone_jct_ns": 100, "alone_iteration_ns": [50, 50], "slowdown": 1.0}
    other = {**job, "name": "b", "nodes": [1, 3], "start_ns": 1000, "end_ns": 1100, "iterations": 1,
             "iteration_ns": [100], "alone_iteration_ns": [100], "dscp": 34}
    doc = {"nodes": 4, "jobs": [job, other]}
    check_scenario_json(json.loads(json.dumps(doc)), drawn)
    slowed = json.loads(json.dumps(doc))
    slowed["jobs"][0].update(alone_jct_ns=90, alone_iteration_ns=[45, 45], slowdown=100 / 90)
    with pytest.raises(AssertionError, match="slowed"):
        check_scenario_json(slowed, drawn)
    lost = json.loads(json.dumps(doc))
    lost["jobs"][0].update(iteration_ns=[100])
    with pytest.raises(AssertionError):
        check_scenario_json(lost, drawn)
    twice = json.loads(json.dumps(doc))
    twice["jobs"][1]["nodes"] = [1, 2]
    with pytest.raises(AssertionError):
        check_scenario_json(twice, drawn)
