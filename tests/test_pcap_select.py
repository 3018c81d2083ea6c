"""Bounded output: filters (NICs/ranks, time window, collective, iteration), payload 'none', the
byte budget (library and CLI: one line, exit 2, nothing left behind), and exact estimates.

Oracle: filters never change the schedule, so a filtered file must hold exactly those records of
the unfiltered file that the filter predicate (evaluated here from decoded packets) accepts."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402

from tracegen.config import Output  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps  # noqa: E402
from tracegen.errors import ConfigError, OutputError  # noqa: E402
from tracegen.tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Ragged  # noqa: E402

MiB = tp.MiB
# (src, dst, channel, bytes, max_msg, start, link, op_id); each op on its own NIC pair so a
# decoded packet names its op by its IP pair.
SPEC = [
    (0, 2, 0, MiB + 100, MiB, 10_000, tp.NET, 0),
    (4, 6, 0, 300_000, 128 << 10, 5_000, tp.NET, 1),
    (3, 5, 1, 2 * 4096, MiB, 40_000, tp.NET, 2),
    (1, 7, 0, 50_000, MiB, 0, tp.NET, 3),
]
OPS = [  # (dim, kind, iteration)
    (Dim.DP, CollKind.ALLREDUCE, 0), (Dim.PP, CollKind.SENDRECV, 0),
    (Dim.DP, CollKind.ALLREDUCE, 1), (Dim.TP, CollKind.ALLGATHER, 1),
]
PAIR_OP = {frozenset(r[:2]): r[7] for r in SPEC}


def flows_with_ops():
    f = tp.make_flows([r[:7] for r in SPEC])
    f.rows["op_id"] = [r[7] for r in SPEC]
    ops = np.zeros(len(OPS), COMMOP_DTYPE)
    ops["op_id"] = np.arange(len(OPS))
    ops["dim"], ops["kind"], ops["iteration"] = zip(*[(int(d), int(k), i) for d, k, i in OPS])
    return type(f)(f.rows, f.deps, CommOps(ops, Ragged.empty(len(OPS)), Ragged.empty(len(OPS))))


FLOWS = flows_with_ops()


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    return {p.name: tp.read_pcap(p)[1] for p in write_pcaps(FLOWS, tp.FABRIC, Output(), d)}


def op_of(frame):
    p = tp.decode(frame, Output(), 0, len(frame))
    return PAIR_OP[frozenset((p.src, p.dst))]


def nic_of(name):
    return next(n for n in range(tp.FABRIC.n_nics) if tp.FABRIC.nic_name(n) + ".pcap" == name)


CASES = {
    "nics": (dict(nics="0,node0001-rail0,5"), lambda nic, t, fr: nic in (0, 2, 5)),
    "ranks": (dict(ranks="4,7"), lambda nic, t, fr: nic in (4, 7)),
    "window": (dict(time_window="20000:60000"), lambda nic, t, fr: 20_000 <= t < 60_000),
    "open-window": (dict(time_window=":15000"), lambda nic, t, fr: t < 15_000),
    "dp": (dict(collectives="dp"), lambda nic, t, fr: OPS[op_of(fr)][0] == Dim.DP),
    "pp+allgather": (dict(collectives="pp,allgather"),
                     lambda nic, t, fr: OPS[op_of(fr)][0] == Dim.PP or OPS[op_of(fr)][1] == CollKind.ALLGATHER),
    "iteration1": (dict(iteration=1), lambda nic, t, fr: OPS[op_of(fr)][2] == 1),
    "all-at-once": (dict(collectives="dp", iteration=0, nics="0,2", time_window="10000:400000"),
                    lambda nic, t, fr: nic in (0, 2) and 10_000 <= t < 400_000 and op_of(fr) == 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_filtered_files_are_exactly_the_matching_records(tmp_path, full, case):
    kw, keep = CASES[case]
    out = Output(**kw)
    paths = write_pcaps(FLOWS, tp.FABRIC, out, tmp_path)
    got = {p.name: tp.read_pcap(p)[1] for p in paths}
    want = {name: [r for r in recs if keep(nic_of(name), r[0], r[3])] for name, recs in full.items()}
    want = {k: v for k, v in want.items() if v}           # a NIC with nothing selected gets no file
    assert got == want and got
    assert estimate_pcap(FLOWS, tp.FABRIC, out) == (sum(map(len, got.values())),
                                                    sum(p.stat().st_size for p in paths))


def test_payload_none_records_end_at_the_headers(tmp_path, full):
    out = Output(payload="none")
    paths = write_pcaps(FLOWS, tp.FABRIC, out, tmp_path)
    assert estimate_pcap(FLOWS, tp.FABRIC, out) == (sum(len(tp.read_pcap(p)[1]) for p in paths),
                                                    sum(p.stat().st_size for p in paths))
    for p in paths:
        for (t, incl, orig, fr), (tf, inf, origf, ff) in zip(tp.read_pcap(p)[1], full[p.name], strict=True):
            assert (t, orig) == (tf, origf) and fr == ff[:incl]
            op = fr[18 + 20 + 8]                    # headers complete, nothing after them
            ext = (16 if op in tp.RETH_OPS else 0) + (4 if op in tp.IMM_OPS else 0) + (4 if op == tp.OP_ACK else 0)
            assert incl == 18 + 20 + 8 + 12 + ext
            assert orig == len(ff) > incl


def test_budget_refuses_before_writing(tmp_path):
    n_pkts, n_bytes = estimate_pcap(FLOWS, tp.FABRIC, Output())
    with pytest.raises(OutputError) as e:
        write_pcaps(FLOWS, tp.FABRIC, Output(max_bytes=n_bytes - 1), tmp_path)
    msg = str(e.value)
    assert f"{n_bytes:,} B" in msg and "--time-window" in msg and "--collective" in msg and "\n" not in msg
    assert list(tmp_path.iterdir()) == []
    assert write_pcaps(FLOWS, tp.FABRIC, Output(max_bytes=n_bytes), tmp_path)        # at the limit: fine
    (tmp_path / "nolimit").mkdir()
    assert write_pcaps(FLOWS, tp.FABRIC, Output(max_bytes=0), tmp_path / "nolimit")  # 0: no limit


@pytest.mark.parametrize("kw,key", [(dict(nics="99"), "output.nics"), (dict(ranks="x"), "output.ranks"),
                                    (dict(time_window="5:1"), "time_window"), (dict(time_window="abc"), "time_window"),
                                    (dict(collectives="zz"), "collectives"), (dict(payload="junk"), "payload")])
def test_bad_filters_name_the_key(tmp_path, kw, key):
    with pytest.raises(ConfigError, match=key):
        write_pcaps(FLOWS, tp.FABRIC, Output(**kw), tmp_path)


def test_collective_filter_needs_ops(tmp_path):
    with pytest.raises(ConfigError, match="CommOps"):
        write_pcaps(tp.FLOWS, tp.FABRIC, Output(collectives="dp"), tmp_path)


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-q", "--no-ns3",
                           "-o", str(tmp_path / "out"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,words", [
    (["--max-bytes", "1MB"], ["pcap estimate", "--max-bytes", "--time-window", "--collective"]),
    (["--max-bytes", "lots"], ["--max-bytes"]),
    (["--time-window", "9:3"], ["time_window"]),
    (["--collective", "dp,nope"], ["nope"]),
    (["--nics", "node9999-rail0"], ["output.nics"]),
])
def test_cli_refuses_with_one_line_exit_2_and_no_output(tmp_path, args, words):
    res = _cli(tmp_path, *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert list(tmp_path.iterdir()) == [], "no output dir, no temp dir"


def test_cli_filters_and_payload_none(tmp_path):
    res = _cli(tmp_path, "--nics", "0,2", "--collective", "dp", "--payload", "none", "--max-bytes", "2GiB")
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "out" / "pcap").iterdir())
    assert names == [tp.FABRIC.nic_name(0) + ".pcap", tp.FABRIC.nic_name(2) + ".pcap"]
    for p in (tmp_path / "out" / "pcap").iterdir():
        recs = tp.read_pcap(p)[1]
        assert recs and all(incl < orig or orig <= 80 for _, incl, orig, _ in recs)
