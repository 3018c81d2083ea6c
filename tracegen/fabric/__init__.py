"""Where each rank lives and which links a byte crosses: topology (Cluster + fabric config ->
Fabric), the fabric kinds' switch graphs, topology files, routing (shortest paths, ECMP).
May import: config, workload and the shared modules. Must not import collectives, timing,
report, pipeline, output, emit, corpus or cli.
"""
