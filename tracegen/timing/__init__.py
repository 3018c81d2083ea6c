"""When each transfer starts and ends: NCCL connections and their QPs, the fluid max-min engine,
the chunk- and connection-level schedules, the granularity a job is timed at (detail) and the
work estimate. May import: config, workload, fabric, collectives and the shared modules. Must
not import report, pipeline, output, emit, corpus or cli.
"""
