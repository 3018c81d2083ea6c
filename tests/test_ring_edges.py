"""The closed-form ring AllReduce edges (collectives/ring_edges.py) against the chunk template:
edge for edge, every summed quantity, over node layouts, loops, channels, protocols and sizes that
leave empty chunks."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.collectives import ring
from tracegen.collectives.edges import template_edges
from tracegen.collectives.ring_edges import RingShape, ring_allreduce_edges
from tracegen.tables import Proto


def _as_dict(e):
    order = np.lexsort((e.channel, e.dst, e.src))
    return {k: getattr(e, k)[order] for k in ("src", "dst", "channel", "transfers", "messages", "packets",
                                               "payload", "nvl_wire", "net_wire")}


@pytest.mark.parametrize("nodes,local", [(2, 1), (3, 1), (1, 4), (4, 2), (5, 8)])
@pytest.mark.parametrize("elems", [1, 7, 1000, 3 * 2**20 + 5])
@pytest.mark.parametrize("proto", [Proto.SIMPLE, Proto.LL, Proto.LL128])
def test_closed_form_edges_equal_the_templates(nodes, local, elems, proto):
    channels, chunk, max_msg, pmtu = 3, 64 << 10, 96 << 10, 4096
    shape = RingShape(nodes, local, elems, 2, channels, chunk)
    t = ring.allreduce(nodes, local, elems, 2, channels, chunk)
    assert len(t) <= shape.rows()
    want = _as_dict(template_edges(t, int(proto), max_msg, pmtu))
    got = _as_dict(ring_allreduce_edges(shape, int(proto), max_msg, pmtu))
    for k in want:
        assert np.array_equal(got[k], want[k]), k
