"""scenario stage: several jobs on one cluster and fabric, with events on the fabric and the GPUs.

A scenario file (spec.py; its events: spec_events.py) lists jobs (a job file, a preset or a lab benchmark pattern - patterns.py:
incast, all-to-all, a steady noisy neighbour - with a start offset and iterations); they are
placed on the scenario's nodes (place.py), the fabric is built once and changed by the events
(events.py: links or switches down, links degraded, straggler GPUs), and every job's CommOps, its
ranks renamed to the GPUs it was placed on, join one table timed once by the ordinary engine
(run.py): interference comes from the engine sharing the links, not from a formula. Each job is
also timed alone on the same fabric and placement: its slowdown is the scenario's over that.
report.py turns the result into tables, JSON and file texts (link_split.py: each link's bytes over
time split between the jobs; the CLI writes them, with the pcaps and the ns-3 scenario of the mix,
through output/ and emit/); saved.py reads a written folder back (`tracegen report DIR`, pictures).

May import: config, workload, fabric, collectives, timing, report, pipeline (the stages before it),
and the shared modules. Must not import output, emit, corpus or cli.
"""
