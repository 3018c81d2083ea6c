"""tracegen's own mainline-ns-3 (pip `ns3`) scenario: a generated ns3/ dir, simulated packet by
packet with a RoCE-like NIC (C++ via cppyy) and dependency-aware replay.

  inputs.py        topology.txt / flow.txt / config.txt / manifest.json -> arrays, replay plan
  scenario.py      the ns-3 program (nodes -> stack -> links + queues -> routes -> NICs -> run)
  roce_nic.h       RoCEv2 NIC application and the replay (C++, loaded with cppyy.cppdef)
  ecmp_routing.h   per-flow ECMP routing (C++)
  run.py           run_scenario(): simulate and write ns3/sim/ atomically
Importing this package does not import ns-3 (that takes ~15 s); scenario.load_ns3() does.
"""
from .run import run_scenario

__all__ = ["run_scenario"]
