"""The flow and op tables as data: columns (flows), CSV (csv_text), Parquet, the port counters (counters), Perfetto, summary.md
/ summary.json, reading a written trace back (read), and the view of a run or a written trace
that pictures and summaries are drawn from (trace_view). May import: report, pipeline and
everything below it. Must not import emit.packets, emit.views, emit.sims, emit.pictures,
corpus or cli.
"""
