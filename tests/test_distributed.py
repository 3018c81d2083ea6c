"""pcap files written by a Dask cluster (`--workers`, emit/distributed.py) are byte-identical to
the single-process run's, for the host view and a switch view; an unreachable scheduler is one
line, exit 2, no output."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("distributed")
from tracegen.cli import main  # noqa: E402

JOB = ["--set", "parallelism.dp=4", "--set", "fabric=leaf-spine-2to1", "--no-ns3", "--collective", "pp,dp"]


def _files(d):
    return {p.name: p.read_bytes() for p in sorted((d / "pcap").iterdir())}


@pytest.mark.parametrize("view", [[], ["--switch", "leaf0"]])
def test_two_dask_workers_write_the_same_bytes(tmp_path, view):
    one = CliRunner().invoke(main, ["generate", "-q", *JOB, *view, "-o", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    two = CliRunner().invoke(main, ["generate", "-q", *JOB, *view, "--workers", "2", "-o", str(tmp_path / "two")])
    assert two.exit_code == 0, two.output
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert len(a) >= 2 and a == b


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", *JOB, "--scheduler", "tcp://127.0.0.1:9", "-o",
                                    str(tmp_path / "x")])
    assert res.exit_code == 2 and "--scheduler" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
