"""Progress of long stages, for whoever shows it: a stage that knows how far it is calls
report(done, total); the CLI sets `hook` (a bar with rate and time left) while the pipeline runs.
Nothing is shown or computed when no hook is set."""
from __future__ import annotations

from typing import Callable

hook: Callable[[int, int], None] | None = None


def report(done: int, total: int) -> None:
    if hook is not None:
        hook(int(done), int(total))
