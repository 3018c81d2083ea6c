"""The numbers of a schedule: the volume table (build) and the benchmark KPIs (kpi). Pure: no
files. May import: config .. timing and the shared modules. Must not import pipeline, output,
emit, corpus or cli.
"""
