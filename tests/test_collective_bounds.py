"""`tracegen collective`'s bounds (issue 22): the size count is counted, not listed, and the
transfers estimate that --max-work compares follows what the collectives stage really makes."""
from __future__ import annotations

import pytest

from tracegen.errors import ConfigError
from tracegen.cli.collective import (COLLECTIVES, MAX_SIZES, build_ops, check_sweep, collective_job, count_sizes,
                                     parse_size, sizes, sweep_transfers)


@pytest.mark.parametrize("lo,hi,f,step", [(8, 8, 2, 0), (1, 1 << 40, 2, 0), (3, 1000, 3, 0), (8 << 20, 1 << 30, 2, 0),
                                          (100, 400, 1, 100), (100, 450, 1, 100), (1, 1000, 1, 1), (7, 7, 1, 5)])
def test_count_sizes_is_the_length_of_the_sweep(lo, hi, f, step):
    assert count_sizes(lo, hi, f, step) == len(sizes(lo, hi, f, step))


def test_a_huge_sweep_is_refused_before_it_is_listed():
    assert check_sweep(8, 8 + 999, 1, 1) == MAX_SIZES
    with pytest.raises(ConfigError, match=r"1,001 sizes, more than 1,000; narrow the range"):
        check_sweep(8, 8 + 1000, 1, 1)
    with pytest.raises(ConfigError, match=r"133,169,153 sizes"):       # -b 8M -e 1G -f 1 -i 8
        check_sweep(8 << 20, 1 << 30, 1, 8)
    with pytest.raises(ConfigError, match="at most 1T"):
        parse_size("1" * 31, "-e")
    assert parse_size("1T", "-e") == 1 << 40 and parse_size("0008M", "-b") == 8 << 20


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving_doubling", "hierarchical"])
def test_the_transfer_estimate_follows_the_collectives_stage(name, algorithm):
    from tracegen.collectives import expand
    from tracegen.fabric.topology import build_fabric
    job = collective_job("dgx-h100", 2, algorithm, 0, "simple", "x")
    fabric = build_fabric(job)
    size_list = sizes(8, 64 << 20, 8, 0)
    ops, _ = build_ops(COLLECTIVES[name], fabric.world, size_list, 4)
    real = len(expand(ops, fabric, job.nccl))
    est = sweep_transfers(COLLECTIVES[name], job, size_list, 4)
    assert 0.6 * real <= est <= 1.5 * real, (real, est)
