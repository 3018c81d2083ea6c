"""Routes of the wire plan's packets through the fabric, per item: the one place views and frames
ask which switches a packet crosses.

Today: NIC -> leaf -> NIC under one leaf (2 links), else NIC -> leaf -> spine -> leaf -> NIC
(4 links) with the spine chosen by topology.ecmp_spine on the UDP source port (CNPs: port 0),
exactly as Fabric.path. When the fabric gets real routes (and queueing), they come in here.
"""
from __future__ import annotations

import numpy as np

from ..topology import Fabric, ecmp_spine


def spine_of(fabric: Fabric, sport) -> np.ndarray:
    """The spine a 4-link route with UDP source port `sport` crosses (topology.ecmp_spine, the
    fabric's one ECMP rule, applied per element); 0 when the fabric has no spine."""
    sport = np.asarray(sport, dtype=np.int64)
    if fabric.n_spines == 0:
        return np.zeros(sport.shape, np.int64)
    ports, which = np.unique(sport, return_inverse=True)
    spine = np.array([ecmp_spine(int(s), fabric.n_spines) for s in ports.tolist()], np.int64)
    return spine[which].reshape(sport.shape)
