"""The order in which a pipeline stage runs forward (F) and backward (B) passes (Megatron schedules)."""
from __future__ import annotations


def one_f_one_b(pp: int, stage: int, m: int) -> list[tuple[str, int]]:
    """Non-interleaved 1F1B: warm-up forwards, steady F/B pairs, cool-down backwards."""
    return [(d, mb) for d, _chunk, mb in interleaved_1f1b(pp, stage, m, 1)]


def interleaved_1f1b(pp: int, stage: int, m: int, vpp: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B over `vpp` model chunks per stage: (direction, chunk, micro-batch).

    Virtual micro-batch k runs chunk (k mod pp·v) // pp of micro-batch (k // (pp·v))·pp + k mod pp;
    backward visits chunks in reverse. Warm-up is (pp − stage − 1)·2 + (v − 1)·pp forwards
    (pp − stage − 1 without interleaving); then one forward and one backward alternate.
    """
    total = m * vpp
    group = pp * vpp

    def unit(k: int, forward: bool) -> tuple[int, int]:
        if vpp == 1:            # plain 1F1B: one chunk, micro-batches in order
            return 0, k
        chunk = (k % group) // pp
        if not forward:
            chunk = vpp - 1 - chunk
        return chunk, (k // group) * pp + k % pp

    if vpp == 1:
        warm = min(pp - stage - 1, m)
    elif m == pp:   # Megatron runs every forward first when there is exactly one round
        warm = total
    else:
        warm = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    order = [("F", *unit(k, True)) for k in range(warm)]
    for i in range(total - warm):
        order.append(("F", *unit(warm + i, True)))
        order.append(("B", *unit(i, False)))
    order += [("B", *unit(k, False)) for k in range(total - warm, total)]
    return order
