"""Every key of a job declared once (name, type, default, range or choices, doc; the unit in the
name): a module per job-file section, and `declare` with the `key()` they are written with and the
limits they share. config/schema.py assembles them into the tables everything else reads.
Imports nothing of tracegen outside this package.
"""
