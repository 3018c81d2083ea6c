"""Counts of one corpus (characters, words, UTF-8 bytes, tokens per tokenizer) in one streaming
pass, and the token premium: how many more tokens the same content costs than a reference.

Premium vs a reference *corpus* (Petrov et al. 2023, on parallel text): tokens(c, t) / tokens(ref, t)
for the same tokenizer t — "Italian costs 1.3x the tokens of the same passage in English".
Premium vs a reference *tokenizer*: tokens(c, t) / tokens(c, ref) for the same corpus.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .reader import Corpus, OnBytes, iter_chunks
from .tokenizers import Tokenizer


@dataclass(frozen=True)
class CorpusCounts:
    corpus: str
    files: int
    chars: int
    words: int                 # whitespace-separated, as str.split() counts them
    utf8_bytes: int
    tokens: dict[str, int]     # tokenizer name -> tokens


def count_corpus(corpus: Corpus, tokenizers: Sequence[Tokenizer],
                 on_bytes: OnBytes | None = None) -> CorpusCounts:
    """One pass over the corpus feeding every tokenizer; an empty corpus is a ConfigError."""
    chars = words = nbytes = 0
    tokens = {t.name: 0 for t in tokenizers}
    for chunk in iter_chunks(corpus, on_bytes):
        chars += len(chunk)
        words += len(chunk.split())
        nbytes += len(chunk.encode("utf-8"))
        for t in tokenizers:
            tokens[t.name] += t.count(chunk)
    if words == 0:
        where = corpus.files[0] if len(corpus.files) == 1 else f"{corpus.label} ({len(corpus.files)} files)"
        raise ConfigError(f"corpus {where} is empty: no words in {corpus.total_bytes:,} bytes")
    return CorpusCounts(corpus.label, len(corpus.files), chars, words, nbytes, tokens)


@dataclass(frozen=True)
class TokenRow:
    corpus: str
    tokenizer: str
    chars: int
    words: int
    utf8_bytes: int
    tokens: int
    premium: float     # tokens relative to the reference (see module doc)
    reference: str

    @property
    def tokens_per_word(self) -> float:
        return self.tokens / self.words

    @property
    def tokens_per_char(self) -> float:
        return self.tokens / self.chars


def default_reference(counts: Sequence[CorpusCounts]) -> str:
    """The first corpus when comparing corpora, else the first tokenizer."""
    return counts[0].corpus if len(counts) > 1 else next(iter(counts[0].tokens))


def token_rows(counts: Sequence[CorpusCounts], reference: str | None = None) -> list[TokenRow]:
    """One row per (corpus, tokenizer), with the premium vs `reference` (a corpus or tokenizer)."""
    ref = reference or default_reference(counts)
    by_corpus = {c.corpus: c for c in counts}
    tokenizers = list(dict.fromkeys(t for c in counts for t in c.tokens))
    if ref not in by_corpus and ref not in tokenizers:
        raise ConfigError(f"--reference {ref!r}: neither a corpus ({', '.join(by_corpus)}) nor a "
                          f"tokenizer ({', '.join(tokenizers)}) of this run")
    rows = []
    for c in counts:
        for name, n in c.tokens.items():
            base = by_corpus[ref].tokens.get(name) if ref in by_corpus else c.tokens[ref]
            rows.append(TokenRow(c.corpus, name, c.chars, c.words, c.utf8_bytes, n,
                                 n / base if base else float("nan"), ref))
    return rows
