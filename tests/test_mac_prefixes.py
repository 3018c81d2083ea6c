"""Router MACs: locally administered prefixes Wireshark names after no vendor (02:01..02:20 are
Microsoft NLB's: Wireshark shows them as "MS-NLB-PhysServer-NN"). Leaf 02:4c ("L"), spine 02:53 ("S")."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAF_PREFIX, SPINE_PREFIX = (0x02, 0x4C), (0x02, 0x53)
TSHARK = shutil.which("tshark")


def _pcap(frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for f in frames:
        out += struct.pack("<IIII", 0, 0, len(f), len(f)) + f
    return out


def _frame(src: bytes, dst: bytes) -> bytes:
    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2])
    return dst + src + b"\x08\x00" + ip + struct.pack(">HHHH", 1, 2, 8, 0)


def test_readme_documents_the_router_prefixes():
    text = (ROOT / "README.md").read_text()
    assert "`02:4c:00:00:<leaf hi>:<leaf lo>`" in text and "`02:53:00:00:<hi>:<lo>`" in text
    assert not re.search(r"\b02:0[1-9a-f]:|\b02:1[0-9a-f]:|\b02:20:", text.lower())


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_wireshark_names_no_vendor_for_the_router_prefixes(tmp_path):
    macs = [bytes([*LEAF_PREFIX, 0, 0, 0, 1]), bytes([*SPINE_PREFIX, 0, 0, 1, 0]),
            bytes([0x02, 0x00, 0x01, 0x00, 0x02, 0x01]),      # a NIC (02:00:<rail>:<node>:01)
            bytes([0x02, 0x01, 0, 0, 0, 1])]                   # the old leaf prefix: named (the control)
    (tmp_path / "m.pcap").write_bytes(_pcap([_frame(m, m) for m in macs]))
    res = subprocess.run([TSHARK, "-r", str(tmp_path / "m.pcap"), "-T", "fields", "-e", "eth.src_resolved"],
                         capture_output=True, text=True, timeout=60)
    names = res.stdout.split()
    assert names[:3] == [":".join(f"{b:02x}" for b in m) for m in macs[:3]]   # shown as plain addresses
    assert names[3].startswith("MS-NLB-PhysServer")


def test_the_fabric_uses_the_router_prefixes():
    from tracegen.config import Job
    from tracegen.emit.views.pcap import spine_mac
    from tracegen.fabric.topology import build_fabric
    fab = build_fabric(Job())
    assert (fab.leaf_mac[:, :2] == LEAF_PREFIX).all()
    assert tuple(np.asarray(spine_mac(np.arange(2)))[0, :2]) == SPINE_PREFIX
