"""output.start_time: every capture timestamp is start_time_ns + the schedule's ns.

Judged without tracegen's writers: the pcap and pcapng records are split here with struct, and
tshark reads the files. A run with a start time must be the run without one with every timestamp
shifted by exactly start_time_ns and every other byte the same; the ISO and epoch spellings of
one instant give identical files; start_time 0 is the run without the key."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tracegen.config import ConfigError, parse_start_time

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# 2026-12-04T09:00:00.123456789+01:00, worked out by hand: 20,791 days from 1970-01-01 to
# 2026-12-04 (56 years, 14 leap days: 56 x 365 + 14 = 20,454 to 2026-01-01, + 337 days to 4 Dec),
# 08:00 UTC.
ISO = "2026-12-04T09:00:00.123456789+01:00"
EPOCH_NS = (20_791 * 86_400 + 8 * 3600) * 10**9 + 123_456_789


def read_pcap(path: Path) -> list[tuple[int, bytes]]:
    """Nanosecond pcap (magic 0xa1b23c4d) -> [(t_ns, record header after the time + data)]."""
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B23C4D
    off, out = 24, []
    while off < len(data):
        sec, nsec, incl, _ = struct.unpack_from("<IIII", data, off)
        assert nsec < 10**9
        out.append((sec * 10**9 + nsec, data[off + 8:off + 16 + incl]))
        off += 16 + incl
    assert off == len(data)
    return out


def read_pcapng(path: Path) -> tuple[bytes, list[tuple[int, bytes]]]:
    """pcapng -> (the blocks before the first EPB, [(t_ns, the EPB without its timestamp)]);
    every interface must say if_tsresol = 9 (ns units), so the 64-bit count is ns."""
    data = path.read_bytes()
    off, head, out = 0, b"", []
    while off < len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        if btype == 1:      # IDB: options from body offset 8; find if_tsresol (code 9)
            o, resol = off + 16, None
            while o < off + blen - 4:
                code, n = struct.unpack_from("<HH", data, o)
                if code == 9:
                    resol = data[o + 4]
                o += 4 + ((n + 3) & ~3)
            assert resol == 9
        if btype == 6:
            hi, lo = struct.unpack_from("<II", data, off + 12)
            out.append(((hi << 32) | lo, data[off:off + 12] + data[off + 20:off + blen]))
        else:
            assert not out
            head += data[off:off + blen]
        off += blen
    return head, out


def generate(tmp: Path, name: str, *args: str) -> Path:
    o = tmp / name
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-q", "--no-ns3", "-o", str(o),
                          "--set", "output.pictures=false", "--set", "output.nics=0,5", *args],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    return o


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("start")
    return {
        "none": generate(tmp, "none"),
        "zero": generate(tmp, "zero", "--set", "output.start_time=0"),
        "epoch": generate(tmp, "epoch", "--set", f"output.start_time={EPOCH_NS}"),
        "iso": generate(tmp, "iso", "--set", f"output.start_time={ISO}"),
        "ng": generate(tmp, "ng", "--format", "pcapng"),
        "ng_iso": generate(tmp, "ng_iso", "--format", "pcapng", "--set", f"output.start_time={ISO}"),
    }


def captures(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((d / "pcap").iterdir())}


def test_parse_start_time_by_hand():
    assert parse_start_time(ISO) == EPOCH_NS == parse_start_time(EPOCH_NS) == parse_start_time(str(EPOCH_NS))
    assert parse_start_time("1970-01-01T00:00:00Z") == 0 == parse_start_time(0)
    assert parse_start_time("1970-01-01T01:00:00.000000001+01:00") == 1
    assert parse_start_time("2000-03-01T00:00:00.5-00:30") == (951_868_800 + 1800) * 10**9 + 500_000_000
    for bad in ("2026-12-04T09:00:00", "2026-02-30T00:00:00Z", "2026-12-04T24:00:00Z", "1969-12-31T23:59:59Z",
                "2100-01-01T00:00:00Z", -1, 1.5, True, "", "soon", "2026-12-04T09:00:00.1234567890Z"):
        with pytest.raises(ConfigError, match=r"output\.start_time.*ISO 8601.*epoch ns"):
            parse_start_time(bad)


def test_every_pcap_timestamp_shifted_by_exactly_start_time(runs):
    base, shifted = captures(runs["none"]), captures(runs["epoch"])
    assert base.keys() == shifted.keys() and base
    for name in base:
        a, b = read_pcap(runs["none"] / "pcap" / name), read_pcap(runs["epoch"] / "pcap" / name)
        assert len(a) == len(b) > 0
        assert all(tb == ta + EPOCH_NS and ra == rb for (ta, ra), (tb, rb) in zip(a, b))


def test_first_packet_counts_from_the_schedule(runs):
    """The earliest packet of the run: start_time + the earliest flow's start (flows.csv) + the
    nanoseconds the stack puts before a flow's first packet - the same in the run without it."""
    first = lambda d: min(read_pcap(p)[0][0] for p in (d / "pcap").iterdir())
    t0 = first(runs["none"])
    lines = (runs["none"] / "flows.csv").read_text().splitlines()
    col = lines[0].split(",").index("start_ns")
    earliest_flow_ns = min(int(x.split(",")[col]) for x in lines[1:])
    assert 0 <= t0 - earliest_flow_ns < 10**6
    assert first(runs["epoch"]) == EPOCH_NS + t0


def test_pcapng_timestamps_shifted_and_nothing_else(runs):
    for name in captures(runs["ng"]):
        ha, a = read_pcapng(runs["ng"] / "pcap" / name)
        hb, b = read_pcapng(runs["ng_iso"] / "pcap" / name)
        assert ha == hb and len(a) == len(b) > 0
        assert all(tb == ta + EPOCH_NS and ra == rb for (ta, ra), (tb, rb) in zip(a, b))


def test_iso_and_epoch_identical_and_zero_is_no_key(runs):
    assert captures(runs["iso"]) == captures(runs["epoch"])
    assert captures(runs["zero"]) == captures(runs["none"])
    for f in ("perfetto.json", "flows.csv", "ops.csv"):
        assert (runs["zero"] / f).read_bytes() == (runs["none"] / f).read_bytes()


def test_summary_and_perfetto_record_the_start(runs):
    assert json.loads((runs["iso"] / "summary.json").read_text())["start_time_ns"] == EPOCH_NS
    assert json.loads((runs["none"] / "summary.json").read_text())["start_time_ns"] == 0
    other = json.loads((runs["iso"] / "perfetto.json").read_text())["otherData"]
    assert other["start_time_ns"] == EPOCH_NS and other["start_time"] == "2026-12-04T08:00:00.123456789Z"
    assert "start_time_ns" not in json.loads((runs["none"] / "perfetto.json").read_text())["otherData"]
    # ts stay relative: the slices are those of the run without a start time
    events = lambda d: json.loads((d / "perfetto.json").read_text())["traceEvents"]
    assert events(runs["iso"]) == events(runs["none"])


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
@pytest.mark.parametrize("run", ["iso", "ng_iso"])
def test_tshark_shows_the_date_to_the_ns(runs, run):
    name = sorted(captures(runs[run]))[0]
    first_ns = (read_pcap if run == "iso" else lambda p: read_pcapng(p)[1])(runs[run] / "pcap" / name)[0][0]
    res = subprocess.run(["tshark", "-r", str(runs[run] / "pcap" / name), "-c", "1", "-T", "fields",
                          "-e", "frame.time_epoch"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    sec, frac = res.stdout.strip().split(".")
    assert int(sec) * 10**9 + int(frac.ljust(9, "0")) == first_ns
    assert EPOCH_NS < first_ns < EPOCH_NS + 10**9 and sec.startswith("17963712")


def test_lab_ports_count_from_the_start(tmp_path):
    """A lab plan's per-port pcaps: the same files, every timestamp + start_time_ns."""
    lab = tmp_path / "lab.yaml"
    lab.write_text("hosts: leaf0\n")
    out = {}
    for name, extra in (("a", []), ("b", ["--set", f"output.start_time={ISO}"])):
        out[name] = generate(tmp_path, name, "--lab", str(lab), "--set", "output.nics=", *extra)
    names = sorted(p.name for p in (out["a"] / "pcap").iterdir())
    assert names == sorted(p.name for p in (out["b"] / "pcap").iterdir()) and names
    for n in names:
        a, b = read_pcap(out["a"] / "pcap" / n), read_pcap(out["b"] / "pcap" / n)
        assert len(a) == len(b) > 0
        assert all(tb == ta + EPOCH_NS and ra == rb for (ta, ra), (tb, rb) in zip(a, b))
