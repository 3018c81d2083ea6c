"""timing/order.stable_order (the edge table's order by op, a counting sort) against numpy's
stable comparison sort: the same permutation, ties in row order."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.timing.order import stable_order


@pytest.mark.parametrize("seed", range(6))
def test_stable_order_is_numpys_stable_argsort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    keys = rng.integers(0, int(rng.integers(1, 50)), n)          # many ties: stability matters
    if seed % 2:
        keys = keys.astype(np.int32)
    got = stable_order(keys)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.argsort(keys, kind="stable"))


def test_stable_order_edges():
    assert stable_order(np.zeros(0, np.int64)).tolist() == []
    assert stable_order(np.array([3, 0, 3, 0, 7])).tolist() == [1, 3, 0, 2, 4]
    with pytest.raises(ValueError, match="negative"):
        stable_order(np.array([1, -1]))
