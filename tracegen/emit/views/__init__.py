"""Which capture files a run writes and which copies of the wire plan each records: host,
switch and merged views (files), lab tester ports (lab), chunks placed into a connection-level
schedule (placed), the writers (pcap, distributed) and a switch view's expected port counters (counters). May import: emit.packets and everything
below it. Must not import emit.tables, emit.sims, emit.pictures, corpus or cli."""
