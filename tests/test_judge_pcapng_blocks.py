"""pcapng files walked block by block with this file's own reader (the pcapng spec,
draft-ietf-opsawg-pcapng: every block = type, total length, body padded to 32 bits, the total
length again): lengths agree at both ends, blocks tile the file, an Enhanced Packet Block's data
is padded to 4 bytes and its captured length fits; the interfaces' and packets' counts add up."""
from __future__ import annotations

import struct
from pathlib import Path

from click.testing import CliRunner

from tracegen.cli import main

SHB, IDB, EPB = 0x0A0D0D0A, 0x00000001, 0x00000006


def walk(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        assert len(data) - pos >= 12, f"{path.name}: {len(data) - pos} trailing bytes at {pos}"
        btype, total = struct.unpack_from("<II", data, pos)
        assert total >= 12 and total % 4 == 0, f"{path.name}: block at {pos} of length {total}"
        assert pos + total <= len(data), f"{path.name}: block at {pos} runs past the end"
        (trailer,) = struct.unpack_from("<I", data, pos + total - 4)
        assert trailer == total, f"{path.name}: block at {pos}: lengths {total} and {trailer}"
        out.append((btype, data[pos + 8:pos + total - 4]))
        pos += total
    return out


def test_pcapng_blocks_tile_the_file_with_both_lengths(tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "output.format=pcapng", "--nics", "0,1",
                                    "--set", "output.pictures=false", "-o", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "t" / "pcap").glob("*.pcapng"))
    assert files
    packets = 0
    for f in files:
        blocks = walk(f)
        assert blocks[0][0] == SHB and struct.unpack_from("<I", blocks[0][1])[0] == 0x1A2B3C4D
        n_if = sum(b == IDB for b, _ in blocks)
        assert n_if >= 1
        for btype, body in blocks:
            if btype != EPB:
                continue
            iface, _, _, caplen, origlen = struct.unpack_from("<IIIII", body)
            assert iface < n_if and 0 < caplen <= origlen
            # data padded to 32 bits, then options (each padded) - at least the padded data is there
            assert len(body) >= 20 + ((caplen + 3) & ~3), (f.name, caplen, len(body))
            opts = body[20 + ((caplen + 3) & ~3):]
            while opts:                               # options: code, length, value padded; end 0/0
                code, olen = struct.unpack_from("<HH", opts)
                if code == 0:
                    break
                opts = opts[4 + ((olen + 3) & ~3):]
            packets += 1
    assert packets > 100
