"""Corpora as streams of text chunks: files or folders, GB-scale, in bounded memory.

A file is read in blocks and decoded strictly as UTF-8 (a bad byte is a ConfigError naming the
file and its byte offset). Chunks end only where every shipped tokenizer's pre-tokenizer splits
anyway, so counting chunk by chunk equals counting the whole file (see `_cut`). Memory is one
block plus the unfinished tail of a line: the corpus is never held whole.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

BLOCK_BYTES = 256 << 10      # read size: bounds each chunk's word and token lists too
MAX_CARRY_CHARS = 4 << 20    # text with no clean cut for this long is cut anyway (counts approximate)

# Shipped samples (package data): Inferno I–III, Italian (Petrocchi's text) and Longfellow's
# 1867 English translation, line for line (414 verses each) — both public domain.
SAMPLES = {
    "dante-it": "Dante, Inferno I–III, Italian",
    "dante-en": "Dante, Inferno I–III, English (Longfellow 1867)",
}

OnBytes = Callable[[int], None]


@dataclass(frozen=True)
class Corpus:
    label: str                 # how tables name it: sample name, file stem or folder name
    files: tuple[Path, ...]
    total_bytes: int


def sample_names() -> list[str]:
    return list(SAMPLES)


def sample_path(name: str) -> Path:
    return Path(str(resources.files("tracegen") / "corpus" / "samples" / f"{name}.txt"))


def open_corpus(spec: str | Path) -> Corpus:
    """A shipped sample name (dante-it, dante-en) or a text file / folder of text files."""
    text = str(spec)
    path = Path(text)
    if text in SAMPLES and not path.exists():
        path, label = sample_path(text), text
    else:
        label = path.stem if path.is_file() else (path.name or path.resolve().name)
    if path.is_file():
        files: tuple[Path, ...] = (path,)
    elif path.is_dir():
        # hidden files and folders (.git, .DS_Store) are not text the user meant
        files = tuple(sorted(p for p in path.rglob("*") if p.is_file()
                             and not any(part.startswith(".") for part in p.relative_to(path).parts)))
        if not files:
            raise ConfigError(f"corpus {text}: the folder holds no files (hidden ones are skipped)")
    else:
        raise ConfigError(f"corpus {text!r}: no such file or folder "
                          f"(shipped samples: {', '.join(SAMPLES)})")
    return Corpus(label, files, sum(f.stat().st_size for f in files))


def iter_chunks(corpus: Corpus, on_bytes: OnBytes | None = None) -> Iterator[str]:
    """The corpus as text chunks, file after file (a chunk never spans two files)."""
    for path in corpus.files:
        yield from _file_chunks(path, on_bytes)


def _file_chunks(path: Path, on_bytes: OnBytes | None) -> Iterator[str]:
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ConfigError(f"corpus file {path}: cannot read ({e.strerror})") from None
    with f:
        carry, pending, offset, start = "", b"", 0, True
        while True:
            block = f.read(BLOCK_BYTES)
            data = pending + block
            text, pending = _decode(data, offset, not block, path)
            offset += len(data) - len(pending)
            if on_bytes and block:
                on_bytes(len(block))
            if start and text:
                text, start = text.removeprefix("\ufeff"), False   # a BOM is no character of the text
            if not block:
                if carry + text:
                    yield carry + text
                return
            buf = carry + text
            cut = _cut(buf, max(0, len(carry) - 1))
            if cut:
                yield buf[:cut]
            carry = buf[cut:]


def _decode(data: bytes, offset: int, final: bool, path: Path) -> tuple[str, bytes]:
    """(text, undecoded tail): a character split by the block edge waits for the next block."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        if not final and e.reason == "unexpected end of data":
            return data[:e.start].decode("utf-8"), data[e.start:]
        raise ConfigError(f"corpus file {path}: not UTF-8 at byte offset {offset + e.start:,} "
                          f"(byte 0x{data[e.start]:02x}); convert it first, e.g. "
                          f"iconv -f latin1 -t utf-8") from None


def _cut(buf: str, start: int) -> int:
    """Where to end a chunk (0: not yet), searching only text after `start` (the rest had none).

    Before a space between two letters: every pre-tokenizer shipped (cl100k's and GPT-2's regexes,
    byte-level BPE, whitespace, Metaspace) starts a new piece with " word", and the letter run
    before it ends there. Failing that (scripts without spaces), after a newline with non-space on
    both sides ("x\\ny": cl100k keeps "\\n" with what precedes it, GPT-2 splits it off alone).
    """
    end = len(buf) - 1
    j = buf.rfind(" ", start, end)
    while j > 0:
        if buf[j - 1].isalpha() and buf[j + 1].isalpha():
            return j
        j = buf.rfind(" ", start, j)
    j = buf.rfind("\n", start, end)
    while j > 0:
        if not buf[j - 1].isspace() and not buf[j + 1].isspace():
            return j + 1
        j = buf.rfind("\n", start, j)
    return len(buf) if len(buf) > MAX_CARRY_CHARS else 0


@contextlib.contextmanager
def rich_progress(total_bytes: int, description: str, enabled: bool = True):
    """A transient rich progress bar on stderr over `total_bytes`; yields the on_bytes callback.
    Only on a terminal: piped stderr stays free of bar residue (errors remain one line)."""
    from rich.console import Console
    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=total_bytes)
        yield lambda n: bar.advance(task, n)
