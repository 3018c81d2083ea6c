"""`tracegen tokens`: corpora x tokenizers -> token counts and premiums, joined with one epoch of a
training job on the fabric (and, on request, the seed tutorial's five-stage table and a PNG).

Registered on the main group in cli/__init__.py. User mistakes print one line and exit 2.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import load_job
from ..errors import ConfigError

DEFAULT_TOKENIZERS = ("cl100k_base", "bytes")


@click.command("tokens")
@click.argument("corpora", nargs=-1, required=True, metavar="CORPUS...")
@click.option("-t", "--tokenizer", "tokenizer_specs", multiple=True, metavar="NAME|PATH",
              help="cl100k_base, bytes, or a Hugging Face tokenizer.json (file or folder); "
                   "repeatable. Default: cl100k_base and bytes.")
@click.option("--reference", metavar="NAME",
              help="Premium relative to this corpus (same tokenizer) or tokenizer (same corpus). "
                   "Default: the first corpus, or the first tokenizer for a single corpus.")
@click.option("--train-bpe", "bpe_vocab", type=int, metavar="VOCAB",
              help="Also train a byte-level BPE of VOCAB tokens on each corpus itself.")
@click.option("--job", "job_file", type=click.Path(dir_okay=False), metavar="JOB.yaml",
              help="Training job whose epoch to size (default: the built-in default job).")
@click.option("--preset", metavar="NAME", help="A shipped job preset instead of --job.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job key (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
@click.option("--png", "png_path", type=click.Path(dir_okay=False),
              help="Write a PNG comparing tokens/word and premiums across corpora and tokenizers.")
@click.option("--five-stages", "five", is_flag=True,
              help="Add the tutorial's words → tokens → tensors → collectives → bytes table "
                   "(GPT-2 small, DP-8 / TP-8 / PP-8 / hybrid) for the first corpus.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def tokens(corpora, tokenizer_specs, reference, bpe_vocab, job_file, preset, sets, as_json, png_path,
           five, quiet):
    """Count tokens of CORPUS (files, folders, or the samples dante-it / dante-en) and size one
    epoch of training on them: sequences, iterations, bytes on the fabric, time on the wire."""
    from .common import command_errors
    with command_errors():
        res = run_tokens(list(corpora), list(tokenizer_specs) or list(DEFAULT_TOKENIZERS), reference,
                         bpe_vocab, job_file, preset, list(sets), png_path, five,
                         progress=not (quiet or as_json))
    if as_json:
        click.echo(json.dumps(to_json(res), indent=2))
    else:
        _print(res)


def run_tokens(corpus_specs, tokenizer_specs, reference, bpe_vocab, job_file, preset, sets,
               png_path=None, five=False, progress=False) -> dict:
    from ..corpus.five_stages import five_stages
    from ..corpus.reader import iter_chunks, open_corpus, rich_progress
    from ..corpus.stats import count_corpus, token_rows
    from ..corpus.tokenizers import resolve_tokenizer, train_bpe
    from ..corpus.traffic import epoch_traffic, iteration_traffic

    if png_path:                  # refused before reading: a corpus may take minutes
        from ..config import show_path
        from ..output.put import check_file
        check_file(Path(png_path), show_path(png_path))
    corpora = _distinct_corpora([open_corpus(s) for s in corpus_specs])
    toks = _distinct_tokenizers([resolve_tokenizer(s) for s in tokenizer_specs])
    names = [c.label for c in corpora] + [t.name for t in toks] + ([f"bpe-{bpe_vocab}"] if bpe_vocab else [])
    if reference and reference not in names:   # before reading: a corpus may take minutes
        raise ConfigError(f"--reference {reference!r}: neither a corpus nor a tokenizer of this run "
                          f"({', '.join(names)})")
    if job_file and not Path(job_file).is_file():
        raise ConfigError(f"job file {job_file!r} not found; give the path of a YAML job file")
    job = load_job(job_file, preset=preset, sets=sets)
    it = iteration_traffic(job)
    counts, vocab = [], {}
    passes = 2 if bpe_vocab else 1
    with rich_progress(passes * sum(c.total_bytes for c in corpora), "reading corpora", progress) as cb:
        for c in corpora:
            mine = list(toks)
            if bpe_vocab:   # the corpus trains its own tokenizer first: one more pass
                mine.append(train_bpe(iter_chunks(c, cb), bpe_vocab, c.label))
            counts.append(count_corpus(c, mine, cb))
            vocab.update({(c.label, t.name): t.vocab_size for t in mine})
    rows = token_rows(counts, reference)
    epochs = [epoch_traffic(r.tokens, it, r.corpus, r.tokenizer) for r in rows]
    res = {"job": job, "iteration": it, "counts": counts, "rows": rows, "epochs": epochs,
           "vocab": vocab, "five": None, "png": None}
    if five:
        first = rows[0]
        res["five"] = five_stages(first.words, first.tokens, first.corpus, first.tokenizer)
    if png_path:                  # over nothing or a picture tracegen wrote, by a rename (outdir)
        from ..config import show_path
        from ..corpus.plot import plot_premiums
        from ..output.put import write_file
        res["png"] = write_file(Path(png_path), show_path(png_path), lambda tmp: plot_premiums(rows, tmp))
    return res


def _distinct_corpora(corpora: list) -> list:
    """The same corpus twice counts once; two different ones with one name get '#2', '#3'."""
    import dataclasses
    out, seen = [], {}
    for c in corpora:
        if any(c.files == o.files for o in out):
            continue
        n = seen[c.label] = seen.get(c.label, 0) + 1
        out.append(c if n == 1 else dataclasses.replace(c, label=f"{c.label}#{n}"))
    return out


def _distinct_tokenizers(toks: list) -> list:
    out, seen = [], {}
    for t in toks:
        if any(t is o for o in out):   # built-ins are shared instances: `-t cl100k -t cl100k_base`
            continue
        n = seen[t.name] = seen.get(t.name, 0) + 1
        if n > 1:   # only tokenizer.json files (fresh objects) can share a name
            t.name = f"{t.name}#{n}"
        out.append(t)
    return out


def to_json(res: dict) -> dict:
    import dataclasses
    it, job = res["iteration"], res["job"]
    out = {
        "reference": res["rows"][0].reference,
        "corpora": [dataclasses.asdict(c) for c in res["counts"]],
        "rows": [{**dataclasses.asdict(r), "tokens_per_word": r.tokens_per_word,
                  "tokens_per_char": r.tokens_per_char, "vocab_size": res["vocab"][r.corpus, r.tokenizer],
                  "epoch": {k: v for k, v in dataclasses.asdict(e).items()
                            if k not in ("corpus", "tokenizer", "tokens")}}
                 for r, e in zip(res["rows"], res["epochs"])],
        "job": {"name": job.name, "model": job.model.name, "world": job.world,
                "seq_len": it.seq_len, "global_batch": it.global_batch,
                "tokens_per_iteration": it.tokens, "nic_gbps": it.nic_gbps,
                "iteration": {"nic_tx_bytes": list(it.nic_tx_bytes),
                              "aggregate_bytes": it.aggregate_bytes,
                              "busiest_nic_bytes": it.busiest_nic_bytes, "wire_ns": it.wire_ns,
                              "compute_ns": it.compute_ns, "scheduled_ns": it.scheduled_ns}},
        "png": str(res["png"]) if res["png"] else None,
    }
    if res["five"] is not None:
        fs = res["five"]
        out["five_stages"] = {
            "corpus": fs.corpus, "tokenizer": fs.tokenizer, "words": fs.words, "tokens": fs.tokens,
            "sequences": fs.sequences, "iterations": fs.iterations, "params": fs.params,
            "s_act_bytes": fs.s_act_bytes,
            "strategies": [{**dataclasses.asdict(s), "gpu_bytes": s.gpu_bytes} for s in fs.strategies]}
    return out


def _print(res: dict) -> None:
    """The tables at the terminal's width; into a pipe or a file each as wide as it needs, so no
    value is ever cut (`tracegen tokens ... | cat`, as `tracegen plan`)."""
    from rich.console import Console
    from rich.table import Table

    from .common import print_whole
    from ..corpus.five_stages import GLOBAL_BATCH, stage_table
    from ..corpus.traffic import fmt_bytes, fmt_ns
    console = Console()
    if not console.is_terminal:
        console = Console(width=100)
    rows, it, job = res["rows"], res["iteration"], res["job"]
    t = Table(title=f"Tokens (premium vs {rows[0].reference})", title_justify="left")
    for h in ("corpus", "tokenizer", "vocab", "characters", "words", "tokens", "tokens/word",
              "tokens/char", "premium"):
        t.add_column(h, justify="left" if h in ("corpus", "tokenizer") else "right", no_wrap=True)
    for r in rows:
        t.add_row(r.corpus, r.tokenizer, f"{res['vocab'][r.corpus, r.tokenizer]:,}", f"{r.chars:,}",
                  f"{r.words:,}", f"{r.tokens:,}", f"{r.tokens_per_word:.3f}", f"{r.tokens_per_char:.3f}",
                  f"{r.premium:.3f}")
    print_whole(console, t)
    par = job.parallelism
    t = Table(title=f"One epoch of job {job.name!r}: {job.model.name}, dp={par.dp} tp={par.tp} "
                    f"pp={par.pp}, s={it.seq_len}, global batch {it.global_batch} "
                    f"({it.tokens:,} tokens/iteration), {len(it.nic_tx_bytes)} NICs at {it.nic_gbps} Gb/s",
              title_justify="left",
              caption=f"per iteration (as `tracegen plan`): {it.aggregate_bytes:,} B all NICs, "
                      f"{it.busiest_nic_bytes:,} B busiest NIC; wire {fmt_ns(it.wire_ns)}, compute "
                      f"{fmt_ns(it.compute_ns)}, scheduled {fmt_ns(it.scheduled_ns)}\n"
                      "wire: busiest NIC's bytes at line rate; compute: busiest stage's GPU time; "
                      "scheduled: tracegen's schedule (bubble, exposed communication)",
              caption_justify="left")
    for h in ("corpus", "tokenizer", "sequences", "iterations (exact)", "all NICs", "busiest NIC",
              "wire", "compute", "scheduled"):
        t.add_column(h, justify="left" if h in ("corpus", "tokenizer") else "right", no_wrap=True)
    for e in res["epochs"]:
        t.add_row(e.corpus, e.tokenizer, f"{e.sequences:,}", f"{e.iterations:,} ({e.iterations_exact:,.2f})",
                  fmt_bytes(e.aggregate_bytes), fmt_bytes(e.busiest_nic_bytes), fmt_ns(e.wire_ns),
                  fmt_ns(e.compute_ns), fmt_ns(e.scheduled_ns))
    print_whole(console, t)
    if res["five"] is not None:
        fs = res["five"]
        header, stage_rows, notes = stage_table(fs)
        t = Table(title=f"Five stages, words → bits on the wire: GPT-2 small (Ψ={fs.params:,}, "
                        f"{fs.model.dtype}) on 8 GPUs, global batch {GLOBAL_BATCH} sequences, "
                        f"corpus {fs.corpus}", title_justify="left",
                  caption="per GPU: the tutorial's closed forms (FORMULAS.md), busiest GPU; "
                          "tracegen: its schedule, each GPU behind its own NIC"
                          + "".join("\n" + n for n in notes), caption_justify="left")
        for h in header:
            t.add_column(h, justify="left" if h in ("stage", "quantity") else "right", overflow="fold")
        for r in stage_rows:
            t.add_row(*r)
        print_whole(console, t)
    if res["png"]:
        console.print(f"wrote {res['png']}")
