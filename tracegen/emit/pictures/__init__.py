"""PNG pictures of a trace (matplotlib): the pictures (plots, timeline) and their shared style,
drawn from emit.tables' TraceView. May import: emit.tables, report and everything below.
Must not import emit.packets, emit.views, emit.sims, corpus or cli.
"""
