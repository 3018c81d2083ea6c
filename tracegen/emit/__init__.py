"""Exporters: read the flow table (the IR) and write what users' tools open."""
