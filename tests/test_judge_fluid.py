"""Judge of the timing engine (tracegen/timing/fluid.py) by an independent solver written here from the
module's documented rules, sharing no code with it:

- rates: max-min fair with link weights (progressive filling: every unfrozen item's rate rises
  together; an item freezes when a link it crosses is full - sum of weight x rate = capacity -
  or when it reaches its own rate cap), recomputed whenever an item starts or ends;
- an op is released gap_ns after the last of its dependency ops ends (an op ends with its last
  item's end); an item is ready once its op is released and the items it needs have ended;
- an item ends extra_ns after its last byte; items of one queue run one at a time, first ready
  first served (ties by item id).

The reference runs in continuous time (exact float events); the engine rounds every finish up to
a whole ns, so times agree within a few ns per event - far below what a wrong rule moves."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.timing import fluid
from tracegen.tables import Ragged


def maxmin(active, links, cap, rate_cap):
    """{item: rate} by progressive filling. links[i]: [(link, weight)]."""
    rate, frozen = {}, set()
    left = {ln: c for ln, c in cap.items()}
    level = 0.0
    todo = [i for i in active if links[i]]
    for i in active:
        if not links[i]:
            rate[i] = rate_cap[i]
    while todo:
        load = {}
        for i in todo:
            for ln, w in links[i]:
                load[ln] = load.get(ln, 0.0) + w
        step = min([left[ln] / w for ln, w in load.items() if w > 0] + [rate_cap[i] - level for i in todo])
        step = max(step, 0.0)
        level += step
        for ln, w in load.items():
            left[ln] -= step * w
        full = {ln for ln in load if left[ln] <= 1e-9 * cap[ln]}
        done = [i for i in todo if level >= rate_cap[i] * (1 - 1e-12) or any(ln in full for ln, _ in links[i])]
        for i in done:
            rate[i] = level
            frozen.add(i)
        todo = [i for i in todo if i not in frozen]
    return rate


def reference(gap, op_deps, op_of, item_deps, nbytes, extra, links, cap, rate_cap, queue):
    n_ops, n = len(gap), len(op_of)
    items_of = [[i for i in range(n) if op_of[i] == o] for o in range(n_ops)]
    op_release = [None] * n_ops
    op_end = [None] * n_ops
    start, finish, end = [None] * n, [None] * n, [None] * n
    rem = list(map(float, nbytes))
    waiting: dict[int, float] = {}            # item -> ready time (released, deps ended)
    active: list[int] = []
    busy: set[int] = set()
    t = 0.0

    def settle():
        changed = True
        while changed:
            changed = False
            for o in range(n_ops):
                if op_release[o] is None and all(op_end[d] is not None for d in op_deps[o]):
                    op_release[o] = max([op_end[d] for d in op_deps[o]], default=0.0) + gap[o]
                    changed = True
                    if not items_of[o]:
                        op_end[o] = op_release[o]
            for i in range(n):
                if (start[i] is None and i not in waiting and op_release[op_of[i]] is not None
                        and all(end[d] is not None for d in item_deps[i])):
                    waiting[i] = max([op_release[op_of[i]]] + [end[d] for d in item_deps[i]])
                    changed = True

    settle()
    while waiting or active:
        # start every item that is ready now and whose queue is free (first ready first)
        for i in sorted(waiting, key=lambda i: (waiting[i], i)):
            if waiting[i] <= t + 1e-9 and (queue[i] < 0 or queue[i] not in busy):
                del waiting[i]
                start[i] = t
                active.append(i)
                if queue[i] >= 0:
                    busy.add(queue[i])
        rate = maxmin(active, links, cap, rate_cap)
        t_fin = min([t + rem[i] / rate[i] for i in active if rate[i] > 0], default=np.inf)
        t_arr = min([r for r in waiting.values() if r > t + 1e-9], default=np.inf)
        assert t_arr < np.inf or t_fin < np.inf, "reference: nothing can move"
        t_next = min(t_fin, t_arr)
        for i in active:
            rem[i] -= rate[i] * (t_next - t)
        t = t_next
        for i in [i for i in active if rem[i] <= 1e-6 * max(nbytes[i], 1)]:
            active.remove(i)
            finish[i], end[i] = t, t + extra[i]
            busy.discard(queue[i])
            o = op_of[i]
            if all(end[k] is not None for k in items_of[o]):
                op_end[o] = max(end[k] for k in items_of[o])
        settle()
    return (np.array(start), np.array(finish), np.array(end), np.array(op_release), np.array(op_end))


def random_case(seed):
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(2, 5))
    cap = {ln: float(rng.choice([1.0, 2.0, 4.0, 12.5])) for ln in range(n_links)}
    n_ops = 3
    gap = [int(rng.integers(0, 3000)) for _ in range(n_ops)]
    op_deps = [[], [0], [0, 1]] if seed % 2 else [[], [], [1]]
    op_of, item_deps, nbytes, extra, links, rate_cap, queue = [], [], [], [], [], [], []
    for o in range(n_ops):
        first = len(op_of)
        for k in range(int(rng.integers(2, 6))):
            i = len(op_of)
            op_of.append(o)
            # an item needs an earlier item of its op, sometimes
            item_deps.append([int(rng.integers(first, i))] if i > first and rng.random() < 0.4 else [])
            nbytes.append(float(rng.integers(2_000, 40_000)))
            extra.append(int(rng.integers(100, 900)))
            chosen = rng.choice(n_links, size=int(rng.integers(1, n_links + 1)), replace=False)
            links.append([(int(ln), float(rng.choice([1.0, 0.5, 1 / 3]))) for ln in sorted(chosen)])
            rate_cap.append(float(rng.choice([np.inf, np.inf, 0.75, 3.0])))
            # queue 0 / 1: items without deps that share a QP (served in turn)
            queue.append(int(rng.integers(0, 2)) if not item_deps[-1] and rng.random() < 0.4 else -1)
    return gap, op_deps, op_of, item_deps, nbytes, extra, links, cap, rate_cap, queue


def engine(gap, op_deps, op_of, item_deps, nbytes, extra, links, cap, rate_cap, queue, jit):
    ptr = np.r_[0, np.cumsum([len(x) for x in links])]
    lk = np.array([ln for x in links for ln, _ in x], np.int64)
    w = np.array([w for x in links for _, w in x], np.float64)
    caps = np.array([cap[k] for k in sorted(cap)])
    return fluid.run(np.array(gap, np.int64), Ragged.from_lists(op_deps), np.array(op_of, np.int64),
                     Ragged.from_lists(item_deps), np.array(nbytes), np.array(extra, np.int64), ptr, lk, w,
                     caps, jit=jit, rate_cap=np.array(rate_cap), queue=np.array(queue, np.int64))


@pytest.mark.parametrize("seed", range(24))
def test_engine_matches_an_independent_max_min_solver(seed):
    case = random_case(seed)
    want = reference(*case)
    got = engine(*case, jit=True)
    n_events = 2 * len(case[2]) + len(case[0])
    tol = 2.0 * n_events + 2                # each event rounds a finish up by < 1 ns
    for name, g, w in zip(("start", "finish", "end", "op_start", "op_end"), got, want):
        err = np.abs(np.asarray(g, float) - w.astype(float))
        assert err.max() <= tol, (f"seed {seed}: {name} off by {err.max():.0f} ns "
                                  f"(item/op {int(err.argmax())}: engine {g[err.argmax()]}, reference "
                                  f"{w[err.argmax()]:.1f})")


def test_weighted_sharing_closed_form():
    """Two items on one 4 B/ns link, weights 1 and 1/2 (a connection spread over 2 QPs): both rise
    to r with r + r/2 = 4, r = 8/3 B/ns: 8000 B take 3000 ns. Alone, an item of weight 1/2 puts
    half its rate on the link: 8 B/ns, 8000 B in 1000 ns."""
    case = ([0], [[]], [0, 0], [[], []], [8000.0, 8000.0], [0, 0], [[(0, 1.0)], [(0, 0.5)]], {0: 4.0},
            [np.inf, np.inf], [-1, -1])
    _, finish, *_ = engine(*case, jit=True)
    assert finish.tolist() == [3000, 3000]
    alone = ([0], [[]], [0], [[]], [8000.0], [0], [[(0, 0.5)]], {0: 4.0}, [np.inf], [-1])
    assert engine(*alone, jit=True)[1].tolist() == [1000]


def test_a_queue_serves_in_order_and_the_cap_limits():
    """One queue, three items of 1000 B on a 10 B/ns link, item 1 capped at 1 B/ns: 0 runs
    [0, 100), 1 [100, 1100), 2 [1100, 1200) - each then reaches its end 50 ns later."""
    case = ([0], [[]], [0, 0, 0], [[], [], []], [1000.0] * 3, [50] * 3, [[(0, 1.0)]] * 3, {0: 10.0},
            [np.inf, 1.0, np.inf], [0, 0, 0])
    start, finish, end, _, op_end = engine(*case, jit=True)
    assert start.tolist() == [0, 100, 1100] and finish.tolist() == [100, 1100, 1200]
    assert end.tolist() == [150, 1150, 1250] and op_end.tolist() == [1250]
