"""Inputs of other simulators and tools: the ns-3 scenario files, Chakra ET, SimAI workloads,
Open Traffic Generator configs, each rank's op order (rank_steps), and a simulator's results
joined back to the schedule (ns3_compare). May import: emit.packets, emit.views, emit.tables
and everything below them. Must not import emit.pictures, corpus or cli.
"""
