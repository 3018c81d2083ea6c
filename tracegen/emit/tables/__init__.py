"""The flow and op tables as data: columns (flows), CSV (csv_text), Parquet, Perfetto, summary.md
/ summary.json, and reading a written trace back (read). May import: report, pipeline and
everything below it. Must not import emit.packets, emit.views, emit.sims, emit.pictures,
corpus or cli.
"""
