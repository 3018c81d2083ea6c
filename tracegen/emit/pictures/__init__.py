"""PNG pictures of a trace (matplotlib): the pictures (plots, timeline), what they are drawn from
(trace_view) and their shared style. May import: emit.tables, report and everything below.
Must not import emit.packets, emit.views, emit.sims, corpus or cli.
"""
