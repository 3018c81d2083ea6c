"""Exporters: read the flow table (the IR) and write what users' tools open.

Its rooms: packets (the wire plan and its packets), views (which files, what each records;
the pcap writer), tables, sims, pictures; bundle (the whole trace set in one folder) here.
May import: config .. timing, report, pipeline (its Run), output and the shared modules.
Must not import corpus or cli; timing and the stages below never import emit.
"""
