"""Progress of long stages, for whoever shows it: a stage that knows how far it is calls
report(done, total); a phase deep in the pipeline names itself with stage(text, unit) (the
connection table, the pcap estimate, each output file...). The CLI sets `hook` (a bar with rate
and time left) and `stage_hook` (a new line for the phase) while the pipeline runs.
Nothing is shown or computed when no hook is set: callers report per block of rows or per op,
never per row, and test `active()` before computing anything only the bar needs."""
from __future__ import annotations

from typing import Callable

hook: Callable[[int, int], None] | None = None
stage_hook: Callable[..., None] | None = None

BLOCK_ROWS = 1 << 16        # rows between two reports of a row-by-row writer
BLOCK_OPS = 1024            # ops between two reports of a loop over ops (progress.counted)


def report(done: int, total: int) -> None:
    if hook is not None:
        hook(int(done), int(total))


def stage(text: str, unit: str = "") -> None:
    """The phase that runs next, counted in `unit` (ops, rows, bytes...: "bytes" shows sizes)."""
    if stage_hook is not None:
        stage_hook(text, unit)


def active() -> bool:
    return hook is not None


def counted(items, total: int | None = None, done: int = 0, block: int | None = None):
    """Iterate a list, telling (done + how many so far, total) after each block of items: for
    loops over ops whose body is Python anyway. No hook: the list itself, untouched."""
    if hook is None:
        yield from items
        return
    n, block = len(items), block or BLOCK_OPS
    total = done + n if total is None else total
    for lo in range(0, n, block):
        yield from items[lo:lo + block]
        report(done + min(n, lo + block), total)


class muted:
    """No reports inside (an inner loop whose own counts would fight the stage's bar)."""

    def __enter__(self):
        global hook
        self.saved, hook = hook, None
        return self

    def __exit__(self, *exc):
        global hook
        hook = self.saved
        return False
