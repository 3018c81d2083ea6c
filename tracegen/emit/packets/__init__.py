"""The wire plan and its packets: QPs, messages and control frames (plan; built from the flows by
plan_build, messages paced along the schedule's rates by rate_curve), their packet-exact
times per NIC and switch port (pacing, ports, hops, port_queue; a scenario whose links change
mid-run: every frame on its epoch's route and rate, epoch_paths), ECN marks and CNPs (seeded, or
from the queues: queue_marks; PFC pauses: pfc), NCCL's
net_ib buffers, routes and MAC addresses, RoCEv2 headers as dtypes, frames, capture file
formats; what the user selected to write (select: NICs, switches, windows, the byte budget), the
copies of the plan a file can record (copies: sent, received, leaving each switch link) and a
file's packet items (items). May import: timing and everything below it. Must not import
emit.views, emit.tables, emit.sims, emit.pictures, output, corpus or cli."""
