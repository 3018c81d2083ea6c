"""Flow table -> scenario dir for the HPCC-derived ns-3 RDMA simulators.

One directory serves two readers:
  HPCC  (alibaba-edu/High-Precision-Congestion-Control, simulation/scratch/third.cc):
        config.txt, topology.txt, flow.txt, trace.txt
  SimAI (aliyun/ns-3-alibabacloud, branch dev/qp, scratch/NormalNetwork):
        config_simai.txt, topology_simai.txt, and the same flow.txt / trace.txt
plus manifest.json (flow.txt line -> flow row, and the (sip, dip, sport) each line gets in the
simulators' fct files; the CommOps with their dependencies and the NCCL connections (QPs) each
line rides, for tracegen's dependency-aware replay) and README.md (how to run both).

flow.txt sizes are the transfers' `wire_bytes`: what the NIC carries, LL/LL128 flags included
(the schedule times the same bytes); the manifest keeps the payload as `bytes` beside
`wire_bytes`.

Reader facts this module relies on (checked against the C++ sources):
- third.cc reads config.txt as a stream of whitespace tokens `KEY value...` with no comments; a
  token it does not know is skipped and its value is then read as the next key, so only keys from
  its list may appear. Maps are `n rate_bps value ...`; every switch port rate must be in
  KMAX_MAP/KMIN_MAP/PMAX_MAP (NS_ASSERT). Kmin/Kmax are KB (x1000), BUFFER_SIZE is MB (x2^20).
- flow.txt: `src dst pg dport size start_s`, size read into a uint32 (HPCC), flows injected in
  file order and scheduled relative to the previous one, so the file must be sorted by start.
- Host i gets IP 11.(i/256).(i%256).1 (so at most 65536 hosts). Source ports: both simulators
  count from 10000 per (source, destination) pair, as uint16: HPCC's third.cc since commit
  ffd4ff2 (2020-07-01, `portNumder[src][dst]++`, third.cc:137 on master) and SimAI's
  NormalNetwork (`portNumber[src][dst]++`). HPCC before that counted per source host
  (`host_sport`, kept for fct files of old builds).

This module writes the files; ns3_lines.py picks flow.txt's lines and numbers the QPs,
ns3_config.py fills config.txt / config_simai.txt, ns3_manifest.py writes manifest.json.
"""
from __future__ import annotations

import os
from pathlib import Path
from string import Template

import numpy as np

from ... import __version__
from ...config import Job
from ...errors import OutputError
from ...shipped import template_text
from ...tables import Flows
from ...fabric.topology import Fabric
from .ns3_config import HPCC_FILES, SIMAI_FCT_FILE, SIMAI_FILES, config_values, scenario_warnings
from .ns3_lines import DPORT, PG, T0_NS, batches, flow_lines, seconds
from .ns3_manifest import manifest

MAX_HOSTS = 65536              # 11.(i/256).(i%256).1 has 16 bits of host id

NO_FLOWS_NOTE = ("no transfer crosses a NIC (they all stay on NVLink): no ns-3 scenario is written "
                 "(ns-3 has nothing to simulate without flows)")


def write_ns3(flows: Flows, fabric: Fabric, job: Job, dest_dir: Path, *,
              trace_nodes=None, enable_trace: bool = True, warnings_out: list | None = None) -> list[Path]:
    """Write the scenario files into dest_dir (created if missing); returns the paths written.
    A job without NIC traffic (one node: NVLink only) has no scenario: nothing is written and
    the list is empty (the caller says NO_FLOWS_NOTE).

    trace_nodes: node ids listed in trace.txt (default: every NIC host). A fabric that changes
    during the run (a scenario's timed events, Fabric.epochs) is written as manifest link_events
    and, what HPCC can take, config.txt's LINK_DOWN (ns3_events.py); warnings_out receives what a
    simulator cannot apply of it."""
    if fabric.n_nics > MAX_HOSTS:
        raise OutputError(f"ns3: {fabric.n_nics} NICs, but the simulators' 11.x.y.1 host "
                          f"addressing holds at most {MAX_HOSTS}")
    lines = flow_lines(flows, fabric)
    if len(lines) == 0:
        config_values(flows, fabric, job, enable_trace)   # a bad cc_mode is still refused
        return []
    trace_nodes = range(fabric.n_nics) if trace_nodes is None else [int(x) for x in trace_nodes]
    values = config_values(flows, fabric, job, enable_trace)   # checks cc_mode before any write
    warnings = scenario_warnings(fabric, job)
    from .ns3_events import link_events
    events, event_warnings, values["link_down"] = link_events(flows, fabric)
    warnings += event_warnings
    if warnings_out is not None:
        warnings_out += event_warnings
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)

    files = {
        "topology.txt": _topology(fabric, simai_header=None),
        "flow.txt": _flow_txt(lines),
        "trace.txt": f"{len(trace_nodes)}\n" + "".join(f"{x}\n" for x in trace_nodes),
        "config.txt": _template("hpcc_config.txt").substitute(values, **HPCC_FILES),
        "topology_simai.txt": _topology(fabric, simai_header=_simai_header(fabric, job)),
        "config_simai.txt": _template("simai_config.txt").substitute(
            values, **SIMAI_FILES, fct_simai_file=SIMAI_FCT_FILE,
            pfc_enabled="true" if job.network.pfc else "false"),
        "manifest.json": manifest(flows, fabric, job, lines, warnings, link_events=events),
        "README.md": _readme(fabric, job, lines, warnings),
    }
    return [_write_atomic(dest_dir / name, body) for name, body in files.items()]


# ---------------------------------------------------------------- file bodies

def _topology(fabric: Fabric, simai_header: str | None) -> str:
    n_nodes = fabric.n_nics + fabric.n_switches
    switches = " ".join(str(fabric.n_nics + i) for i in range(fabric.n_switches))
    header = simai_header or f"{n_nodes} {fabric.n_switches} {len(fabric.links)}"
    body = "".join(f"{a} {b} {g}Gbps {lat}ns 0.000000\n" for a, b, g, lat in
                   zip(*(fabric.links[k].tolist() for k in ("a", "b", "gbps", "latency_ns"))))
    return f"{header}\n{switches}\n{body}"


def _simai_header(fabric: Fabric, job: Job) -> str:
    # dev/qp: node_num gpus_per_server nvswitch_num switch_num link_num gpu_type ngpus_per_node.
    # No NVSwitch nodes: NVLink traffic is not in flow.txt, every host is a NIC on the fabric.
    gpu = "".join(job.cluster.gpu.split()).upper() or "GPU"
    gpn = fabric.gpus_per_node
    return (f"{fabric.n_nics + fabric.n_switches} {gpn} 0 {fabric.n_switches} "
            f"{len(fabric.links)} {gpu} {gpn}")


def _flow_txt(lines: np.ndarray):
    yield f"{len(lines)}\n"
    for part in batches(lines):
        rows = zip(part["src"].tolist(), part["dst"].tolist(), part["wire_bytes"].tolist(),
                   part["start_ns"].tolist())
        yield "".join(f"{s} {d} {PG} {DPORT} {b} {seconds(T0_NS + t)}\n" for s, d, b, t in rows)


def _readme(fabric: Fabric, job: Job, lines: np.ndarray, warnings: list[str]) -> str:
    pfc_off = not job.network.pfc
    return _template("ns3_readme.md").substitute(
        job_name=job.name, version=__version__, n_flows=len(lines),
        n_bytes=int(lines["wire_bytes"].sum()), n_hosts=fabric.n_nics,
        n_switches=fabric.n_switches, n_links=len(fabric.links),
        switch_ids=fabric.switch_ids_text(),   # per tier; says "no spines"
        hpcc_env="NS_ATTRIBUTE_DEFAULT='ns3::QbbNetDevice::QbbEnabled=false' " if pfc_off else "",
        hpcc_pfc_note=("\nPFC is off in this job. HPCC's config has no PFC key, so the command "
                       "sets the\nQbbNetDevice attribute QbbEnabled=false through ns-3's "
                       "NS_ATTRIBUTE_DEFAULT: devices\nignore PAUSE frames (switches still "
                       "send them).\n" if pfc_off else ""),
        warnings="".join(["\n## Warnings\n\n"] + [f"- {w}\n" for w in warnings])
        if warnings else "",
    )


def _template(name: str) -> Template:
    return Template(template_text(name))


def _write_atomic(path: Path, body) -> Path:
    """Write a str or an iterable of str chunks to a temp name, then rename into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for chunk in ([body] if isinstance(body, str) else body):
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
