"""One PNG comparing corpora (languages) and tokenizers: tokens per word, and the token premium
vs the reference. Written to a temp file beside the target and renamed (never half a PNG)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import OutputError
from ..output.ownership import PNG_SOFTWARE
from .stats import TokenRow


def plot_premiums(rows: Sequence[TokenRow], path: str | Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(dict.fromkeys(r.corpus for r in rows))
    tokenizers = list(dict.fromkeys(r.tokenizer for r in rows))
    by = {(r.corpus, r.tokenizer): r for r in rows}
    width = 0.8 / len(corpora)
    fig, axes = plt.subplots(1, 2, figsize=(5 + 2.2 * len(tokenizers), 4.2), dpi=120)
    ref = rows[0].reference
    same = "same tokenizer" if ref in corpora else "same corpus"
    panels = ((axes[0], "tokens per word", lambda r: r.tokens_per_word),
              (axes[1], f"token premium vs {ref} ({same})", lambda r: r.premium))
    for ax, label, value in panels:
        for k, c in enumerate(corpora):
            xs = [i + (k - (len(corpora) - 1) / 2) * width for i in range(len(tokenizers))]
            ys = [value(by[c, t]) if (c, t) in by else 0.0 for t in tokenizers]
            bars = ax.bar(xs, ys, width * 0.92, label=c)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(range(len(tokenizers)), tokenizers, fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.12)
    axes[1].axhline(1.0, color="grey", lw=0.8, ls="--", zorder=0)
    axes[0].legend(fontsize=8, title="corpus", title_fontsize=8)
    fig.suptitle(title or "Same text, different token counts", fontsize=11)
    fig.tight_layout()
    return _save(fig, Path(path))


def _save(fig, target: Path) -> Path:
    import matplotlib.pyplot as plt
    target = target.resolve()
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".png", dir=target.parent)
            os.close(fd)
        except OSError as e:
            raise OutputError(f"cannot write {target}: {e.strerror}") from None
        try:
            fig.savefig(tmp, metadata={"Software": PNG_SOFTWARE})   # marks it tracegen's (outdir)
            os.chmod(tmp, 0o644)   # mkstemp makes it private; a picture is for sharing
            os.replace(tmp, target)
        except BaseException as e:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise OutputError(f"cannot write {target}: {e.strerror}") from None
            raise
    finally:
        plt.close(fig)
    return target
