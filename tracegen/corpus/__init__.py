"""Stage 0, words -> tokens: stream a text corpus through a tokenizer and join the token count
with the workload (sequences, iterations per epoch, bytes on the wire).

reader (files/folders -> text chunks) -> tokenizers (registry) -> stats (counts, premiums)
-> traffic (x run_pipeline(job).report) ; five_stages (the seed tutorial's table) ; plot (PNG).

May import: everything up to the pipeline and output (it runs the pipeline for a job's
epoch). Must not import emit or cli.
"""
from .reader import Corpus, open_corpus, sample_names
from .stats import CorpusCounts, TokenRow, count_corpus, token_rows
from .tokenizers import resolve_tokenizer, train_bpe

__all__ = ["Corpus", "open_corpus", "sample_names", "CorpusCounts", "TokenRow", "count_corpus",
           "token_rows", "resolve_tokenizer", "train_bpe"]
