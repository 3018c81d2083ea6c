"""IPv6 RoCEv2 frames carry UDP checksum 0 (the ICRC protects them): Wireshark flags each frame
unless told with the preference the README names - checked with tshark on a written IPv6 trace."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracegen.cli import main

ROOT = Path(__file__).resolve().parents[1]
PREF = "udp.ignore_ipv6_zero_checksum:TRUE"


def expert_errors(pcap: Path, *opts: str) -> int:
    res = subprocess.run(["tshark", *opts, "-r", str(pcap), "-Y", "_ws.expert.severity >= error or _ws.malformed"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return len(res.stdout.splitlines())


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed (apt-get install tshark)")
def test_ipv6_frames_are_clean_with_the_readme_preference(tmp_path):
    assert f"-o {PREF}" in (ROOT / "README.md").read_text("utf-8")
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "output.ip_version=6", "--nics", "0",
                                    "--set", "output.pictures=false", "-o", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    pcap = sorted((tmp_path / "t" / "pcap").glob("*.pcap"))[0]
    frames = subprocess.run(["tshark", "-r", str(pcap), "-Y", "ipv6 and udp.dstport == 4791"],
                            capture_output=True, text=True, timeout=300).stdout.splitlines()
    assert len(frames) > 100
    assert expert_errors(pcap) >= len(frames) // 2      # without it: the zero checksum flagged
    assert expert_errors(pcap, "-o", PREF) == 0          # with it: no error, nothing malformed
    assert re.search(r"Ignore zero-value UDP checksums over IPv6", (ROOT / "README.md").read_text("utf-8"))
