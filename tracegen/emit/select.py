"""Which packets a pcap run keeps (filters) and how much it may write (the byte budget).

Filters never change the schedule: every packet keeps the time and headers it has in the full
trace, so a filtered file is exactly a subset of the records of the unfiltered one.
  * NICs (`output.nics`, `output.ranks`): only these NICs' files;
  * collectives (`output.collectives`: parallelism dims dp,tp,pp,sp,cp,ep,emb,edp or kinds
    allreduce,reducescatter,allgather,alltoall,broadcast,reduce,sendrecv) and `output.iteration`:
    only the messages of matching CommOps, with their CTS and ACK frames;
  * `output.time_window` "START_NS:END_NS": only packets that start in [START, END).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Output
from ..errors import ConfigError, OutputError
from ..tables import CollKind, Dim, Flows
from ..topology import Fabric

_DIMS = {d.name.lower(): int(d) for d in Dim if d != Dim.NONE}
_KINDS = {k.label.lower(): int(k) for k in CollKind if k != CollKind.MARKER}
FILTER_HINT = ("narrow it with --time-window START_NS:END_NS, --nics/--ranks, --collective dp,pp, "
               "--iteration N, or cut records with --snaplen 128 / --payload none; "
               "or raise --max-bytes")


@dataclass(frozen=True)
class Selection:
    nic_mask: np.ndarray                 # bool [n_nics]: NICs that may get a file
    window_ns: tuple[int, int] | None    # [start, end) of packet start times
    dims: frozenset[int] | None          # Dim values kept (None: all)
    kinds: frozenset[int] | None         # CollKind values kept
    iteration: int                       # -1: all

    @property
    def by_op(self) -> bool:
        return self.dims is not None or self.kinds is not None or self.iteration >= 0

    def keep_rows(self, flows: Flows, rows: np.ndarray) -> np.ndarray:
        """Bool per flow row: does its CommOp pass the collective/iteration filters?"""
        keep = np.ones(len(rows), bool)
        if not self.by_op:
            return keep
        ops = flows.ops.rows
        op_id = rows["op_id"].astype(np.int64)
        if len(ops) == 0 or (op_id < 0).any() or (op_id >= len(ops)).any():
            raise ConfigError("collective/iteration filters need flows that name their CommOps "
                              "(op_id); this flow table has none")
        op = ops[op_id]
        if self.dims is not None or self.kinds is not None:
            keep &= (np.isin(op["dim"], list(self.dims or ()))
                     | np.isin(op["kind"], list(self.kinds or ())))
        if self.iteration >= 0:
            keep &= op["iteration"] == self.iteration
        return keep


def _int_list(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"output.{what}: give a comma list, e.g. 0,3")
    return items


def parse(out: Output, fabric: Fabric) -> Selection:
    nic_mask = np.ones(fabric.n_nics, bool)
    if out.nics:
        names = {fabric.nic_name(n): n for n in range(fabric.n_nics)}
        pick = []
        for x in _int_list(out.nics, "nics"):
            if x.isdigit() and int(x) < fabric.n_nics:
                pick.append(int(x))
            elif x in names:
                pick.append(names[x])
            else:
                raise ConfigError(f"output.nics: {x!r} is no NIC of this fabric (0..{fabric.n_nics - 1} "
                                  f"or a name like {fabric.nic_name(0)})")
        nic_mask &= np.isin(np.arange(fabric.n_nics), pick)
    if out.ranks:
        ranks = []
        for x in _int_list(out.ranks, "ranks"):
            if not x.isdigit() or int(x) >= fabric.world:
                raise ConfigError(f"output.ranks: {x!r} is no rank (0..{fabric.world - 1})")
            ranks.append(int(x))
        nic_mask &= np.isin(np.arange(fabric.n_nics), fabric.rank_nic[ranks])
    window = None
    if out.time_window:
        a, sep, b = out.time_window.partition(":")
        try:
            window = (int(a) if a.strip() else 0, int(b) if b.strip() else np.iinfo(np.int64).max)
        except ValueError:
            window = None
        if not sep or window is None or not 0 <= window[0] < window[1]:
            raise ConfigError(f"output.time_window={out.time_window!r}: use START_NS:END_NS with "
                              "0 <= START < END (integer ns, either side may be left empty)")
    dims = kinds = None
    if out.collectives:
        names = [x.lower() for x in _int_list(out.collectives, "collectives")]
        bad = [x for x in names if x not in _DIMS and x not in _KINDS]
        if bad:
            raise ConfigError(f"output.collectives: {bad[0]!r} is not accepted — use parallelism "
                              f"dims ({','.join(_DIMS)}) or kinds ({','.join(_KINDS)})")
        dims = frozenset(_DIMS[x] for x in names if x in _DIMS)
        kinds = frozenset(_KINDS[x] for x in names if x in _KINDS)
    return Selection(nic_mask, window, dims, kinds, out.iteration)


def parse_bytes(text: str) -> int:
    """'2GiB', '500MB', '123' -> bytes (the --max-bytes argument)."""
    units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
             "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    s = text.strip().lower().replace(" ", "")
    num = s.rstrip("kmgtib")
    try:
        value = float(num) * units[s[len(num):]]
    except (ValueError, KeyError):
        raise ConfigError(f"--max-bytes {text!r}: use bytes or a size like 500MB, 2GiB (0: no limit)") from None
    if value < 0:
        raise ConfigError("--max-bytes must be >= 0 (0: no limit)")
    return int(value)


def _human(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def check_budget(packets: int, nbytes: int, out: Output) -> None:
    """Refuse (before anything is written) when the estimate exceeds output.max_bytes."""
    if out.max_bytes and nbytes > out.max_bytes:
        raise OutputError(f"pcap estimate {_human(nbytes)} ({nbytes:,} B, {packets:,} packets) exceeds "
                          f"--max-bytes {_human(out.max_bytes)}; {FILTER_HINT}")
