"""The work estimate (tracegen/timing/work.py) against what the pipeline really builds, counted here:
network messages (an upper estimate) are NCCL's cut of each network transfer into messages of at most max_msg_bytes
(ceil(wire bytes / max_msg_bytes), net_ib), and the units are the module doc's documented sum
(transfers + 4 x ops + 1.3 x messages: 430 B per message over 330 B per unit)."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.collectives import expand
from tracegen.config import load_job
from tracegen.tables import LinkKind
from tracegen.fabric.topology import build_fabric
from tracegen.timing.work import estimate
from tracegen.workload import build_commops


@pytest.mark.parametrize("sets", [[], ["nccl.algorithm=tree"], ["model.experts=4", "model.top_k=2",
                                                                 "parallelism.ep=2",
                                                                 "parallelism.sp=true"]])
def test_messages_and_units_follow_the_pipeline(sets):
    job = load_job(preset="default", sets=["iterations=1", *sets])
    w = estimate(job, emit=True)
    assert w.detail == "full"
    tr = expand(build_commops(job), build_fabric(job), job.nccl).rows
    net = tr["link"] == LinkKind.NET
    size = tr["wire_bytes"][net].astype(np.int64)
    cap = np.where(tr["max_msg_bytes"][net] > 0, tr["max_msg_bytes"][net], np.maximum(size, 1))
    messages = int(np.maximum(1, -(-size // cap)).sum())
    assert messages > 0
    assert messages <= w.messages <= 2 * messages      # an upper estimate (one more per transfer), not far off
    assert 0.8 * len(tr) <= w.transfers <= 1.25 * len(tr)
    assert w.units == w.transfers + 4 * w.ops + w.messages * 430 // 330 + w.cnp_units
