"""The numbers of a schedule: the volume table (build), its tables and Markdown (render), the
`plan --json` document (plan_json) and the benchmark KPIs (kpi). Pure: no files. May import:
config .. timing and the shared modules. Must not import pipeline, output, emit, corpus or cli.
"""
