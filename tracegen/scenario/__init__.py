"""scenario stage: several jobs on one cluster and fabric, with events on the fabric and the GPUs.

A scenario file (spec.py) lists jobs (a job file or a preset, a start offset, iterations); they are
placed on the scenario's nodes (place.py), the fabric is built once and changed by the events
(events.py: links or switches down, links degraded, straggler GPUs), and every job's CommOps, its
ranks renamed to the GPUs it was placed on, join one table timed once by the ordinary engine
(run.py): interference comes from the engine sharing the links, not from a formula. Each job is
also timed alone on the same fabric and placement: its slowdown is the scenario's over that.

May import: config, workload, fabric, collectives, timing, report, pipeline (the stages before it),
and the shared modules. Must not import output, emit, corpus or cli.
"""
