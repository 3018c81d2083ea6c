"""The wire plan, scheduled (see plan.py for the rules): prepare builds it and runs the schedule
(schedule.py), with CE marks answered by CNPs (cnps.py) or, in output.ecn_marking=queue, marks
and pauses from the switch queues (queue_rounds.py)."""
from __future__ import annotations

from ...config import Nccl, Network, Output
from ...tables import Flows
from ...fabric.topology import Fabric
from . import congestion
from .cnps import add_cnps
from .plan import Plan
from .plan_build import build
from .queue_rounds import queue_marks_and_cnps
from .schedule import schedule


def prepare(flows: Flows, fabric: Fabric, out: Output, qps: int, times: bool, nccl: Nccl | None = None,
            network: Network | None = None) -> Plan | None:
    """The plan, scheduled (its CNPs chosen on the schedule) when `times`; else unscheduled, and
    a count needs cnp_estimate for its CNPs. network: the job's (DCQCN parameters for
    output.dcqcn)."""
    dcqcn = congestion.Dcqcn.for_job(network, fabric.port_gbps) if out.dcqcn else None   # a QP's port rate
    p = build(flows, fabric, out, qps, nccl)
    if p is None or not times:
        return p
    if out.ecn_marking == "queue":
        queue_marks_and_cnps(p, fabric, network if network is not None else Network(), dcqcn)
    elif len(p.ce_g):
        add_cnps(p, fabric, dcqcn)
    else:
        schedule(p)
    return p
