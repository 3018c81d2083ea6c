"""The events of a scenario file (spec.py reads the rest): links or switches down, links degraded,
flapping links, straggler GPUs.

Fabric events (down, degrade, flap) take `at_ns` (default 0) and `until_ns` (> at_ns; default:
to the end of the run): the link or switch comes back up, the degraded link returns to its rate.
A flap is `count` down intervals of `down_ns`, `up_ns` apart, from `at_ns`: it is expanded here
into `count` down events (Event.at_ns/until_ns), so every consumer sees only down and degrade
intervals."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ..config import check_field, show
from ..errors import ConfigError
from .spec_values import MAX_START_NS, choice, mapping, unknown_key

EVENT_KEYS = ("type", "at_ns", "until_ns", "link", "switch", "gbps", "down_ns", "up_ns", "count", "job", "rank",
              "factor")
EVENT_TYPES = ("down", "degrade", "flap", "straggler")
MAX_EVENTS = 1024                  # events after flaps are expanded: each is 2 instants of the timeline


@dataclass(frozen=True)
class Event:
    """One event. Fabric events are 'down' (link or switch) or 'degrade' (link at gbps) over
    [at_ns, until_ns) (until_ns None: to the end of the run); a flap of the file is expanded into
    its down events. A 'straggler' (job, rank, factor) holds from t=0."""
    type: str
    where: str                     # 'events[2]' (a flap's k-th down: 'events[2] (flap 2/3)'), for messages
    link: str = ""
    switch: str = ""
    gbps: int = 0
    job: int = -1                  # index into Scenario.jobs
    rank: int = -1
    factor: float = 1.0
    at_ns: int = 0
    until_ns: int | None = None

    @property
    def timed(self) -> bool:
        """The event changes the fabric during the run (not only from t=0 to the end)."""
        return self.at_ns > 0 or self.until_ns is not None


def scenario_events(value: Any, jobs: tuple) -> tuple:
    """The file's `events:` list -> its Events, flaps expanded, in the file's order."""
    events: list = []
    for i, e in enumerate(_events_list(value)):
        events += _event(i, e, jobs)
        if len(events) > MAX_EVENTS:
            raise ConfigError(f"events: {len(events):,} events with the flaps expanded (a flap counts `count`) "
                              f"by events[{i}]; at most {MAX_EVENTS} — lower the flaps' count")
    return tuple(events)


def _events_list(value: Any) -> list:
    if not isinstance(value, list):
        raise ConfigError(f"events: expected a list of events ({{type: down, switch: spine1}}, ...), got {show(value)}")
    if len(value) > MAX_EVENTS:
        raise ConfigError(f"events: {len(value)} events; at most {MAX_EVENTS}")
    return value


def _event(i: int, item: Any, jobs: tuple) -> list:
    """events[i] -> its Event(s): one, or a flap's `count` down events."""
    where = f"events[{i}]"
    mapping(item, where)
    for key in item:
        if key not in EVENT_KEYS:
            raise unknown_key(f"{where}.", key, EVENT_KEYS)
    if "type" not in item:
        raise ConfigError(f"{where}: no `type:` — one of {', '.join(EVENT_TYPES)}")
    kind = choice(item["type"], f"{where}.type", EVENT_TYPES)
    need = {"down": (("link", "switch"),), "degrade": (("link",), ("gbps",)),
            "flap": (("link", "switch"), ("down_ns",), ("up_ns",), ("count",)),
            "straggler": (("job",), ("rank",), ("factor",))}[kind]
    timing = {"straggler": ("at_ns",), "flap": ("at_ns",)}.get(kind, ("at_ns", "until_ns"))
    allowed = {k for group in need for k in group} | {"type"} | set(timing)
    for key in item:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: has no meaning for type: {kind} (it takes "
                              + ", ".join(sorted(allowed - {'type'})) + ")")
    for group in need:
        given = [k for k in group if k in item]
        if len(given) != 1:
            raise ConfigError(f"{where}: type: {kind} needs " + " or ".join(f"`{k}:`" for k in group)
                              + (" (one of them)" if len(group) > 1 else ""))
    at = check_field(f"{where}.at_ns", item.get("at_ns", 0), int, 0, MAX_START_NS)
    until = None
    if "until_ns" in item:
        until = check_field(f"{where}.until_ns", item["until_ns"], int, 1, MAX_START_NS)
        if until <= at:
            raise ConfigError(f"{where}.until_ns: {until:,} is not after at_ns: {at:,} — the event holds over "
                              "[at_ns, until_ns): give until_ns > at_ns, or drop it (to the end of the run)")
    if kind in ("down", "flap"):
        key = "link" if "link" in item else "switch"
        target = {key: check_field(f"{where}.{key}", item[key], str)}
    if kind == "down":
        return [Event(kind, where, **target, at_ns=at, until_ns=until)]
    if kind == "degrade":
        return [Event(kind, where, link=check_field(f"{where}.link", item["link"], str),
                      gbps=check_field(f"{where}.gbps", item["gbps"], int, 1, 10_000_000), at_ns=at, until_ns=until)]
    if kind == "flap":
        down = check_field(f"{where}.down_ns", item["down_ns"], int, 1, MAX_START_NS)
        up = check_field(f"{where}.up_ns", item["up_ns"], int, 1, MAX_START_NS)
        count = check_field(f"{where}.count", item["count"], int, 1, MAX_EVENTS)
        if at + count * (down + up) > MAX_START_NS:
            raise ConfigError(f"{where}: the flap ends at {at + count * (down + up):,} ns, after "
                              f"{MAX_START_NS:,} ns — fewer or shorter flaps")
        return [Event("down", f"{where} (flap {k + 1}/{count})", **target, at_ns=at + k * (down + up),
                      until_ns=at + k * (down + up) + down) for k in range(count)]
    if at:
        raise ConfigError(f"{where}.at_ns: {at:,} — a straggler is slow from t=0 (at_ns: 0); a GPU slowing "
                          "during the run is not modelled")
    j = item["job"]
    names = [e.name for e in jobs]
    if isinstance(j, int) and not isinstance(j, bool):
        if not 0 <= j < len(jobs):
            raise ConfigError(f"{where}.job: {j} — jobs are 0..{len(jobs) - 1} (or their names: {', '.join(names)})")
        job = j
    else:
        check_field(f"{where}.job", j, str)
        if j not in names:
            close = difflib.get_close_matches(j[:100], names, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "jobs: " + ", ".join(names)
            raise ConfigError(f"{where}.job: no job named {show(j)} — {hint}")
        job = names.index(j)
    world = jobs[job].job.world
    rank = check_field(f"{where}.rank", item["rank"], int, 0, world - 1)
    factor = check_field(f"{where}.factor", item["factor"], float, 0.01, 1000.0)
    return [Event(kind, where, job=job, rank=rank, factor=factor)]
