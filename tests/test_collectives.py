"""Ring AllReduce and p2p expansion against closed forms and a simulated data movement."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.collectives.p2p import p2p_template
from tracegen.collectives.ring import ring_allreduce_template


def simulate_ring(t, n):
    """Replay the transfers step by step on contribution counters: counts[rank][chunk] is a vector of
    how many times each rank's input is summed in. Reduce-scatter steps add, all-gather steps copy.
    Returns the final counters."""
    chunks = np.unique(t["chunk"])
    counts = {r: {c: np.eye(n, dtype=int)[r].copy() for c in chunks} for r in range(n)}
    steps = t["step"]
    for k in range(steps.max() + 1):
        snap = {r: {c: v.copy() for c, v in d.items()} for r, d in counts.items()}
        for i in np.nonzero(steps == k)[0]:
            src, dst, c = t["pos"][i], (t["pos"][i] + 1) % n, t["chunk"][i]
            if k < n - 1:
                counts[dst][c] = counts[dst][c] + snap[src][c]
            else:
                counts[dst][c] = snap[src][c].copy()
    return counts


@pytest.mark.parametrize("n", range(2, 10))
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_ring_bytes_per_rank_equal_closed_form(n, channels):
    elem = 2
    S = n * channels * elem * 3000          # divisible: every chunk the same size
    t = ring_allreduce_template(n, S // elem, elem, channels, 2 << 20)
    sent = np.bincount(t["pos"], weights=t["bytes"], minlength=n)
    recv = np.bincount((t["pos"] + 1) % n, weights=t["bytes"], minlength=n)
    assert (sent * n == 2 * (n - 1) * S).all()
    assert (recv * n == 2 * (n - 1) * S).all()
    assert t["step"].max() == 2 * (n - 1) - 1


@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 9])
@pytest.mark.parametrize("S", [2, 1000, 6 * 1024 * 1024 + 10, 40 << 20])
def test_ring_moves_every_byte_and_reduces_once(n, S):
    elem = 2
    t = ring_allreduce_template(n, S // elem, elem, 2, 2 << 20)
    # every chunk crosses 2(n-1) links: total = 2(n-1) S for any size
    assert t["bytes"].sum() == 2 * (n - 1) * S
    counts = simulate_ring(t, n)
    for r in range(n):
        for c, v in counts[r].items():
            assert (v == 1).all(), f"rank {r} chunk {c}: contributions {v}"
    # chunks never exceed NCCL's 2 MiB chunk size
    assert t["bytes"].max() <= 2 << 20


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_ring_dependencies_carry_the_same_chunk(n):
    t = ring_allreduce_template(n, 3 * n * 2 * (1 << 20) // 2 + 17, 2, 2, 2 << 20)
    dep = t["dep"]
    first = t["step"] == 0
    assert (dep[first] == -1).all()
    d = dep[~first]
    assert (d >= 0).all() and (d < np.nonzero(~first)[0]).all(), "deps point to earlier rows"
    # the transfer this one waits for delivered this very chunk to this rank one step earlier
    assert ((t["pos"][d] + 1) % n == t["pos"][~first]).all()
    assert (t["chunk"][d] == t["chunk"][~first]).all()
    assert (t["step"][d] == t["step"][~first] - 1).all()
    assert (t["channel"][d] == t["channel"][~first]).all()


@pytest.mark.parametrize("elems,channels", [(1, 2), (5, 2), (65536, 2), (1000001, 4)])
def test_p2p_split_covers_buffer(elems, channels):
    t = p2p_template(elems, 2, channels)
    assert t["bytes"].sum() == elems * 2
    assert len(t["channel"]) == min(channels, elems)
