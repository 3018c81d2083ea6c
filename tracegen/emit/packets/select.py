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

import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...config import Output, parse_time_window, show, small_int
from ...errors import ConfigError, OutputError
from ...tables import CollKind, Dim, Flows
from ...fabric.topology import Fabric

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
            k = small_int(x)
            if k is not None and k < fabric.n_nics:
                pick.append(k)
            elif x in names:
                pick.append(names[x])
            else:
                raise ConfigError(f"output.nics: {show(x)} is no NIC of this fabric (0..{fabric.n_nics - 1} "
                                  f"or a name like {fabric.nic_name(0)})")
        nic_mask &= np.isin(np.arange(fabric.n_nics), pick)
    if out.ranks:
        ranks = []
        for x in _int_list(out.ranks, "ranks"):
            k = small_int(x)
            if k is None or k >= fabric.world:
                raise ConfigError(f"output.ranks: {show(x)} is no rank (0..{fabric.world - 1})")
            ranks.append(k)
        nic_mask &= np.isin(np.arange(fabric.n_nics), fabric.rank_nic[ranks])
    window = parse_time_window(out.time_window) if out.time_window else None
    dims = kinds = None
    if out.collectives:
        names = [x.lower() for x in _int_list(out.collectives, "collectives")]
        bad = [x for x in names if x not in _DIMS and x not in _KINDS]
        if bad:
            raise ConfigError(f"output.collectives: {show(bad[0])} is not accepted — use parallelism "
                              f"dims ({','.join(_DIMS)}) or kinds ({','.join(_KINDS)})")
        dims = frozenset(_DIMS[x] for x in names if x in _DIMS)
        kinds = frozenset(_KINDS[x] for x in names if x in _KINDS)
    return Selection(nic_mask, window, dims, kinds, out.iteration)


MAX_BYTES_LIMIT = 1 << 50     # output.max_bytes's upper bound (config/keys/output.py)


def parse_bytes(text: str) -> int:
    """'2GiB', '500MB', '1.5e9', '123' -> a whole number of bytes (the --max-bytes argument);
    0 means no limit. inf, nan, fractions of a byte and sizes beyond 1 PiB are refused."""
    units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
             "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    usage = f"--max-bytes {show(text)}: use bytes or a size like 500MB, 2GiB (0: no limit)"
    s = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]{1,3})?|\.[0-9]+(?:e[+-]?[0-9]{1,3})?)([a-z]*)", s)
    if not m or m.group(2) not in units or len(m.group(1)) > 40:
        raise ConfigError(usage)
    value = Fraction(m.group(1)) * units[m.group(2)]        # exact: no float rounding, no inf/nan
    if value > MAX_BYTES_LIMIT:
        raise ConfigError(f"--max-bytes {show(text)}: beyond {_human(MAX_BYTES_LIMIT)}; "
                          "use 0 for no limit")
    if value.denominator != 1:
        raise ConfigError(f"--max-bytes {show(text)} is not a whole number of bytes"
                          + (" (0 means no limit)" if value < 1 else ""))
    return int(value)


def _human(n: int) -> str:
    for unit, size in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def check_budget(packets: int, nbytes: int, out: Output) -> None:
    """Refuse (before anything is written) when the estimate exceeds output.max_bytes."""
    if out.max_bytes and nbytes > out.max_bytes:
        raise OutputError(f"pcap estimate {_human(nbytes)} ({nbytes:,} B, {packets:,} packets) exceeds "
                          f"--max-bytes {_human(out.max_bytes)}; {FILTER_HINT}")


# --- nothing selected: an error naming the filter and what the trace has ----------------------

def _plain(text: str, n: int = 40) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def _active_filters(out: Output) -> list[str]:
    f = []
    if out.time_window:
        f.append(f"--time-window {_plain(out.time_window)}")
    if out.nics:
        f.append(f"--nics {_plain(out.nics)}")
    if out.ranks:
        f.append(f"--ranks {_plain(out.ranks)}")
    if out.collectives:
        f.append(f"--collective {_plain(out.collectives)}")
    if out.iteration >= 0:
        f.append(f"--iteration {out.iteration}")
    if out.switch:
        f.append(f"--switch {_plain(out.switch)}")
    if out.lab:
        f.append(f"--lab {_plain(out.lab, 60)}")
    return f


def check_not_empty(packets: int, flows: Flows, fabric: Fabric, out: Output) -> None:
    """A filter or view that selects no packet is a mistake (ConfigError, exit 2): the message
    names the filter that selected nothing and what the trace has. A job whose traffic all stays
    on NVLink, unfiltered, is not an error (its pcaps are just empty)."""
    filters = _active_filters(out)
    if packets > 0 or not filters or not out.pcap:
        return
    rows = flows.rows
    net = rows[rows["link"] == 1]                        # LinkKind.NET: what reaches the wire
    ops = flows.ops.rows if flows.ops is not None else None
    have = []
    if ops is not None and len(ops):
        n_it = int(ops["iteration"].max()) + 1
        have.append("iteration 0" if n_it == 1 else f"iterations 0..{n_it - 1}")
    if len(net):
        have.append(f"packets in {int(net['start_ns'].min()):,}..{int(net['end_ns'].max()):,} ns")
    have.append(f"switches {switch_names(fabric)}")
    on_wire = []
    if ops is not None and len(net):
        op = ops[net["op_id"].astype(np.int64)]
        names = {v: k for k, v in _DIMS.items()}
        on_wire = [names[d] for d in sorted(set(op["dim"].tolist())) if d in names]
        have.append("on the wire: " + (",".join(on_wire) or "nothing"))
    culprit = None
    if not len(net):
        culprit = "this job sends nothing over the network (all traffic stays on NVLink)"
    elif out.time_window:
        a, b = parse_time_window(out.time_window)
        lo, hi = int(net["start_ns"].min()), int(net["end_ns"].max())
        if a > hi or b <= lo:
            culprit = f"--time-window {_plain(out.time_window)} (output.time_window) holds no packet"
    if culprit is None and out.collectives and ops is not None:
        wanted = [x.strip().lower() for x in out.collectives.split(",") if x.strip()]
        op = ops[net["op_id"].astype(np.int64)]
        if not any((x in _DIMS and (op["dim"] == _DIMS[x]).any()) or
                   (x in _KINDS and (op["kind"] == _KINDS[x]).any()) for x in wanted):
            culprit = f"--collective {_plain(out.collectives)} (output.collectives) has no traffic on the wire"
    if culprit is None and (out.nics or out.ranks):
        culprit = "the selected NICs (--nics/--ranks) send and receive nothing selected"
    if culprit is None and out.switch:
        culprit = f"no selected packet crosses --switch {_plain(out.switch)} (output.switch)"
    if culprit is None and out.lab:
        culprit = f"the hosts of lab plan {_plain(out.lab, 60)} exchange no selected traffic"
    if culprit is None:
        culprit = "the filters " + " ".join(filters) + " together select no packet"
    raise ConfigError(f"nothing to write: {culprit}; this trace has " + "; ".join(have))


def switch_names(fabric: Fabric, most: int = 12) -> str:
    """'leaf0..leaf7, spine0..spine3, p1-leaf0..p1-leaf7': the fabric's switches, runs of one
    stem numbered 0, 1, 2... shortened (a file fabric's other names listed, at most `most`)."""
    runs: list[list[str]] = []
    for name in fabric.sw_name:
        stem = name.rstrip("0123456789")
        last = runs[-1] if runs else None
        if last and stem != name and last[0].rstrip("0123456789") == stem and \
                last[-1][len(stem):].isdigit() and int(name[len(stem):]) == int(last[-1][len(stem):]) + 1:
            last.append(name)
        else:
            runs.append([name])
    shown = [f"{r[0]}..{r[-1]}" if len(r) > 1 else ", ".join(r) for r in runs]
    return ", ".join(shown[:most]) + (f", ... ({fabric.n_switches} switches)" if len(shown) > most else "")
