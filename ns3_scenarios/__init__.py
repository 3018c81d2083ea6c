"""tracegen's own mainline-ns-3 (pip `ns3`) scenario: a generated ns3/ dir, simulated packet by
packet with RoCE NICs and lossless switches (C++ via cppyy) and a dependency-aware replay.
Shipped as the top-level package `ns3_scenarios` (the design card's `ns3_scenarios/`).

  inputs.py        topology.txt / flow.txt / config.txt / manifest.json -> arrays, replay plan
  checks.py        strict reading: a damaged input file is one error naming it
  scenario.py      the ns-3 program (nodes -> stack -> links + queues -> routes -> buffers/PFC ->
                   NICs -> run)
  roce_nic.h       RoCEv2 NIC (QPs, fifo / round-robin send arbitration, DCQCN per QP) and the
                   replay (C++, loaded with cppyy.cppdef)
  dcqcn.h          the DCQCN reaction point of one QP (ConnectX defaults), a pure state machine
  stop.h           SIGINT / SIGTERM / SIGHUP stop a running simulation
  roce_switch.h    switch egress queues (CNP lane, ECN marking, PFC) and the shared-buffer MMU
  ecmp_routing.h   per-QP routing: explicit paths or ECMP by a 5-tuple hash (C++)
  capture.h        Ethernet pcaps of the host NICs, PFC frames included, within a byte budget
  run.py           run_scenario(): simulate and write ns3/sim/ atomically
Importing this package does not import ns-3 (that takes ~15 s); scenario.load_ns3() does.
"""
from .run import run_scenario

__all__ = ["run_scenario"]
