"""A scenario's timed link events in its ns-3 scenario: what each simulator can apply of them.

Input: the fabric at every instant a timed event changes it (scenario.run.link_epochs: links down
removed, degraded links at their rate, routes rebuilt as `ecmp_on_failure` says). Written:

- manifest.json `link_events` (tracegen ns3 run, ns3_scenarios/scenario.py): per instant, the
  links of topology.txt whose rate changes (gbps 0: down, the rate again: up or restored) and
  the QPs whose path changes then (`repin`: QP, its new data path and ACK path as node ids - the
  epoch's own routes, so the run moves exactly the flows the schedule moves). Times are ns from
  the trace's start (flow.txt time = t0_ns + at_ns).
- config.txt / config_simai.txt `LINK_DOWN us A B`: HPCC's third.cc reads one link going down for
  good (main(): `conf >> link_down_time >> link_down_A >> link_down_B`, then, when
  link_down_time > 0, Simulator::Schedule(Seconds(2) + MicroSeconds(link_down_time),
  &TakeDownLink, ...): the link's two QbbNetDevices TakeDown() and every route is computed again
  (CalculateRoutes / SetRoutingEntries, RedistributeQp). Seconds(2) is flow.txt's t0 (T0_NS).
  It has no key for a link coming back, a rate change, or a second link: those are named in one
  warning line.
"""
from __future__ import annotations

from ...tables import Flows
from ...fabric.topology import Fabric
from .ns3_lines import qp_table


def _states(fabric: Fabric) -> dict:
    """(a, b) node pair (a < b) -> the rates of its links, in topology order."""
    out: dict[tuple[int, int], list[int]] = {}
    for a, b, g in zip(*(fabric.links[k].tolist() for k in ("a", "b", "gbps"))):
        out.setdefault((min(a, b), max(a, b)), []).append(int(g))
    return out


def link_events(epochs: list, flows: Flows, fabric: Fabric) -> tuple[list[dict], list[str], str]:
    """(manifest records, warnings, config.txt LINK_DOWN value) of the fabric's epochs after t=0.
    fabric: the one the flows were timed on (topology.txt's links, the QPs' first paths)."""
    if not epochs:
        return [], [], "0 0 0"
    _, qps = qp_table(flows, fabric)
    args = (qps["src"], qps["dst"], qps["sport"], qps["sqpn"], qps["dqpn"])
    paths = fabric.qp_paths(*args)
    rpaths = fabric.qp_paths(*args, reverse=True)
    before = _states(fabric)
    name = lambda a, b: f"{fabric.node_name(a)}-{fabric.node_name(b)}"   # noqa: E731
    records, missing, hpcc, not_hpcc = [], [], None, []
    for t, fab in epochs:
        now = _states(fab)
        changed = []
        for (a, b), rates in before.items():
            new = now.get((a, b), [])
            for k, g in enumerate(rates):
                g2 = new[k] if k < len(new) else 0
                if g2 != g:
                    changed.append([a, b, g2])
        missing += [f"{name(a, b)} at {t:,} ns" for (a, b), r in now.items() if len(r) > len(before.get((a, b), []))]
        new_paths = fab.qp_paths(*args) if len(qps) else []
        new_rpaths = fab.qp_paths(*args, reverse=True) if len(qps) else []
        repin = [[q, p, rp] for q, (p, rp) in enumerate(zip(new_paths, new_rpaths))
                 if p != paths[q] or rp != rpaths[q]]
        records.append({"at_ns": int(t), "links": changed, "repin": repin})
        for a, b, g2 in changed:
            if g2 == 0 and hpcc is None and t % 1000 == 0:
                hpcc = f"{t // 1000} {a} {b}"           # HPCC's clock: whole µs after t0
                continue
            what = "down" if g2 == 0 else f"at {g2} Gb/s"
            not_hpcc.append(f"{name(a, b)} {what} at {t:,} ns")
        before, paths, rpaths = {k: now.get(k, [0] * len(v)) for k, v in before.items()}, new_paths, new_rpaths
    warnings = []
    if missing:
        warnings.append("ns-3: links down at t=0 that come back later are not in topology.txt, so no ns-3 run "
                        "brings them up: " + ", ".join(missing))
    if not_hpcc:
        warnings.append("config.txt / config_simai.txt: HPCC's LINK_DOWN takes one link down for good (whole µs "
                        "after t0); not expressed there (tracegen ns3 run applies them): " + ", ".join(not_hpcc))
    return records, warnings, hpcc or "0 0 0"
