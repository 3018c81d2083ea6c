"""The committed example traces (traces/examples/) are what their command writes today: each is
regenerated into a temporary folder and compared file by file, byte for byte (timeline.png by its
pixel size only: its bytes depend on the matplotlib version). When the output legitimately
changes, regenerate the example with the command in EXAMPLES and commit it."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from tg_helpers import read_pcap
from tracegen.cli import main

ROOT = Path(__file__).resolve().parents[1]
# folder under traces/examples -> (tracegen arguments, frames its pcap holds per the README)
EXAMPLES = {
    "default-pp-nic0": (["generate", "--collective", "pp", "--nics", "0", "--no-ns3"], 304),
}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_committed_example_is_regenerated_identically(name, tmp_path):
    args, frames = EXAMPLES[name]
    committed = ROOT / "traces" / "examples" / name
    fresh = tmp_path / name
    res = CliRunner().invoke(main, [*args, "-q", "-o", str(fresh)])
    assert res.exit_code == 0, res.output
    how = f"regenerate it: tracegen {' '.join(args)} -o traces/examples/{name}"
    files = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert files(fresh) == files(committed), how
    for rel in files(committed):
        if rel.endswith(".png"):
            assert png_size(fresh / rel) == png_size(committed / rel), f"{rel} differs; {how}"
        else:
            assert (fresh / rel).read_bytes() == (committed / rel).read_bytes(), f"{rel} is stale; {how}"
    pcaps = sorted(committed.glob("pcap/*.pcap"))
    assert sum(len(read_pcap(p)) for p in pcaps) == frames
