"""`tracegen collective`: nccl-tests' table from the schedule, against nccl-tests' definitions and
the measured DGX H100 anchors of ../shared/FORMULAS.md."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.cli.collective import busbw_factor, parse_size, run_collective, sizes
from tracegen.tables import CollKind

GiB = 1 << 30


def busbw(name, nodes, algorithm):
    rows, run = run_collective(name, "dgx-h100", nodes, GiB, GiB, algorithm=algorithm)
    (row,) = rows
    return row, run


@pytest.mark.parametrize("nodes", [4, 8, 16])
def test_ring_allreduce_busbw_in_the_measured_band(nodes):
    """FORMULAS.md: ring AllReduce busbw on 4+ DGX H100 nodes, large messages: 366-396 GB/s."""
    row, run = busbw("all_reduce", nodes, "ring")
    n = nodes * 8
    assert run.fabric.world == n and run.job.nccl.channels == 16      # 2 channels per NIC
    bus = row.algbw_gbps * 2 * (n - 1) / n
    assert 366 <= bus <= 396
    assert row.time_ns == int(run.flows.op_end_ns.max()) and row.count == GiB // 4


@pytest.mark.parametrize("nodes", [4, 8, 16])
def test_tree_allreduce_busbw_at_least_six_tenths_of_ring(nodes):
    ring, _ = busbw("all_reduce", nodes, "ring")
    tree, _ = busbw("all_reduce", nodes, "tree")
    assert tree.algbw_gbps >= 0.6 * ring.algbw_gbps


def test_table_columns_and_sweep():
    assert sizes(8 << 20, 1 << 30, 2, 0) == [8 << 20 << k for k in range(8)]
    assert sizes(100, 400, 1, 100) == [100, 200, 300, 400]
    assert (parse_size("8M", "-b"), parse_size("1G", "-e"), parse_size("64K", "-b"),
            parse_size("77", "-b")) == (8 << 20, 1 << 30, 64 << 10, 77)
    assert busbw_factor(CollKind.ALLREDUCE, 8) == 2 * 7 / 8
    assert busbw_factor(CollKind.ALLGATHER, 8) == 7 / 8 and busbw_factor(CollKind.BROADCAST, 8) == 1
    res = CliRunner().invoke(main, ["collective", "all_gather", "-b", "1M", "-e", "4M", "--nodes", "2"])
    assert res.exit_code == 0, res.output
    lines = [l.split() for l in res.output.splitlines() if not l.startswith("#")]
    assert [int(l[0]) for l in lines] == [1 << 20, 2 << 20, 4 << 20]
    assert [int(l[1]) for l in lines] == [(1 << 20) // 4 // 16 * k for k in (1, 2, 4)]   # per rank
    for size, _, typ, redop, root, time_us, algbw, bus in lines:
        assert (typ, redop, root) == ("float", "none", "-1")
        assert float(algbw) == pytest.approx(int(size) / (float(time_us) * 1e3), rel=2e-3, abs=0.011)
        assert float(bus) == pytest.approx(float(algbw) * 15 / 16, abs=0.011)


def test_sendrecv_and_bad_input():
    rows, run = run_collective("sendrecv", "dgx-h100", 2, 1 << 20, 1 << 20)
    ops = run.ops
    assert len(ops) == 16 and all(list(ops.groups[i]) == [i, (i + 1) % 16] for i in range(16))
    for argv, key in ((["all_reduce", "-b", "3X"], "-b"), (["all_reduce", "--nodes", "0"], "--nodes"),
                      (["all_reduce", "-b", "2G", "-e", "1G"], "-b"),
                      (["all_reduce", "--cluster", "dgx-z"], "cluster")):
        res = CliRunner().invoke(main, ["collective", *argv])
        assert res.exit_code == 2 and key in res.output and res.output.count("\n") == 1, res.output


def test_output_dir_holds_the_capture(tmp_path):
    res = CliRunner().invoke(main, ["collective", "all_reduce", "-b", "1M", "-e", "1M", "--nodes", "2",
                                    "-o", str(tmp_path / "ar")])
    assert res.exit_code == 0, res.output
    out = tmp_path / "ar"
    assert len(list((out / "pcap").glob("*.pcap"))) == 16                # 16 channels: every rail
    assert (out / "ns3" / "flow.txt").is_file() and (out / "flows.csv").is_file()
