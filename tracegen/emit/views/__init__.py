"""Which capture files a run writes and which copies of the wire plan each records: host,
switch, merged and lab views (files, copies, lab), the filters and byte budget (select), the
per-file packet plan (items), chunks placed into a connection-level schedule (placed), and
the writer (pcap, distributed). May import: emit.packets and everything below it. Must not
import emit.tables, emit.sims, emit.pictures, corpus or cli.
"""
