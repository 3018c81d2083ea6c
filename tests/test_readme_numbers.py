"""The README's numbers are what the code prints (issue 22: docs that cannot drift).

tools/readme_numbers.py writes the marked blocks; here it runs with --check, and the numbers are
re-derived on other paths so the test does not only compare the generator with itself: the
default row from `tracegen plan --json` in a subprocess, formatted here; every preset row from
the pipeline in-process; the samples' arithmetic (busbw = algbw x 2(n-1)/n, epoch bytes =
iterations x the bytes of one iteration, byte tokens = the file's UTF-8 length) from the README
text alone. deepseek-v3's pcap cell (~17 GB, minutes), bench_scale's counts (minutes), the leaf0
pcaps and the ns-3 cells of the k=8 fat-tree and bench_ns3's job (minutes): checked with
TRACEGEN_LONG=1 only (--quick otherwise); deepseek-v3's transfer count, the uplink waits and the
other ns-3 numbers always."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
LONG = os.environ.get("TRACEGEN_LONG") == "1"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "60"}
sys.path.insert(0, str(ROOT / "tools"))
import readme_numbers  # noqa: E402


def block(name: str, text: str = README) -> str:
    m = re.search(rf"<!-- readme_numbers: {name} begin -->(.*?)<!-- readme_numbers: {name} end -->", text, re.S)
    assert m, f"README.md has no block {name}"
    return m.group(1)


def preset_rows(text: str = README) -> dict[str, list[str]]:
    rows = {}
    for line in block("presets", text).strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def binary(n: int) -> str:
    """n bytes as plan prints them: 2 decimals of the largest binary unit that fits."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    k = 0
    while k < 4 and n >= 1 << (10 * (k + 1)):
        k += 1
    return f"{n:,} B" if k == 0 else f"{n / (1 << (10 * k)):,.2f} {units[k]}"


@pytest.mark.timeout(3600 if LONG else 900)
def test_every_block_is_what_the_code_prints():
    args = [sys.executable, str(ROOT / "tools" / "readme_numbers.py"), "--check"] + ([] if LONG else ["--quick"])
    res = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=3500 if LONG else 850)
    assert res.returncode == 0, res.stderr[-3000:]


def test_default_row_is_what_plan_json_says(tmp_path):
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", "--json"], cwd=tmp_path,
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    row = preset_rows()["default"]
    j = doc["job"]
    assert row[1] == f"{j['world']} ({j['nodes']} nodes × {j['world'] // j['nodes']})"
    assert row[3] == f"{doc['transfers']:,}"
    assert row[4] == binary(doc["pcap"]["bytes"])
    # the tokens sample sizes epochs of this same job from the bytes of one iteration
    net = sum(d["net_bytes"] for d in doc["dims"])
    assert f"per iteration (as `tracegen plan`): {net:,} B all NICs" in block("tokens")
    assert block("default-net-flows") == f"{doc['net_transfers']:,}"     # the ns-3 scenario's flows
    # the README's table of plan --json keys names exactly the keys plan prints
    keys = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|$", README.split("| key | what |")[1].split("\n\n")[0], re.M))
    names = lambda text: {k.strip() for k in re.sub(r"\(.*?\)", "", text).split(":")[-1].split(",")}
    assert set(doc) | {"corpus"} == {"schema", *keys, "transfers", "net_transfers", "pcap"}   # corpus: --corpus
    assert names(keys["output"]) == set(doc["output"]) and doc["output"]["dir"] == "traces/default"
    assert names(keys["job"]) == set(doc["job"])
    assert names(keys["memory"]) == set(doc["memory"])
    assert names(keys["dims"]) == set(doc["dims"][0]) - {"dim"}
    assert set(doc["ops"][0]) >= {"busiest_rank", "rank0"} and set(doc["pcap"]) == {"packets", "bytes"}


def test_plan_json_corpus_key_names_what_it_holds(tmp_path):
    """`plan --json --corpus` carries the corpus under the key the README's table names; its
    numbers are the text plan's lines (tests/test_tokens.py checks them against tiktoken)."""
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", "--json", "--corpus", "dante-en",
                          "--tokenizer", "bytes"], cwd=tmp_path, capture_output=True, text=True, env=ENV,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    keys = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|$", README.split("| key | what |")[1].split("\n\n")[0], re.M))
    names = {k.strip() for k in re.sub(r"\(.*?\)", "", keys["corpus"]).split(":")[-1].split(",")}
    assert names == set(doc["corpus"])
    c = doc["corpus"]
    assert c["tokenizer"] == "bytes" and c["tokens"] == c["utf8_bytes"]


def test_the_long_commands_shown_are_the_ones_generated():
    """The leaf0 cell counts what the README's own command writes (its -o aside)."""
    assert "tracegen " + " ".join(readme_numbers.LEAF0_ARGS) in README
    # the DCQCN table's last row is the job tests/test_ns3_run.py calls OVERSUBSCRIBED, as it says
    from test_ns3_run import OVERSUBSCRIBED
    from tracegen.config import job_from_dict, load_job
    text, sets = readme_numbers.NS3_JOBS[-1]
    assert "OVERSUBSCRIBED" in text
    assert load_job(None, sets=list(sets)).fabric == job_from_dict(OVERSUBSCRIBED).fabric
    assert load_job(None, sets=list(sets)).parallelism == job_from_dict(OVERSUBSCRIBED).parallelism


def test_every_preset_row_is_what_the_pipeline_counts():
    """In-process, as `tracegen plan` runs it (pipeline, then the pcap estimate); deepseek-v3's
    pcap only with TRACEGEN_LONG=1, its transfers from the chunk templates (which must be
    plan's count on every preset timed chunk by chunk)."""
    from tracegen.config import load_job
    from tracegen.emit.bundle import with_pcap_estimate
    from tracegen.pipeline import run_pipeline
    rows = preset_rows()
    assert list(rows) == [p for p, _, _ in readme_numbers.PRESET_ROWS]
    for preset, cells in rows.items():
        job = load_job(None, preset=preset, sets=[])
        assert cells[1].split()[0] == str(job.world), preset
        if preset in readme_numbers.LONG_PRESETS and not LONG:
            assert cells[3] == f"{readme_numbers.chunk_transfers(preset):,}", preset
            continue
        run = with_pcap_estimate(run_pipeline(job, emit=False))
        assert cells[3] == f"{run.report.transfers:,}", preset
        assert cells[4] == binary(run.report.pcap_bytes), preset
        if run.flows.detail == "full":
            assert readme_numbers.chunk_transfers(preset) == run.report.transfers, preset
    gpt3 = block("gpt3-transfers")
    assert gpt3 == rows["gpt3-175b"][3]


def test_collective_sample_is_consistent():
    """Each row: algbw = size / time, busbw = algbw x 2(n-1)/n (nccl-tests' AllReduce factor),
    n = 16 nodes x 8 GPUs; the average line is the mean busbw."""
    text = block("collective")
    lines = text.strip().strip("`").strip().splitlines()
    assert lines[0] == "tracegen " + " ".join(readme_numbers.COLLECTIVE_ARGS)
    n = 16 * 8
    rows = [line.split() for line in lines if line.strip() and not line.startswith(("#", "tracegen"))]
    assert len(rows) == 8
    busbws = []
    for size, count, dtype, redop, root, time_us, algbw, busbw in rows:
        assert int(count) * 4 == int(size) and dtype == "float" and redop == "sum" and root == "-1"
        assert abs(int(size) / (float(time_us) * 1e3) - float(algbw)) < 0.01 + 1e-4 * float(algbw)
        assert abs(float(algbw) * 2 * (n - 1) / n - float(busbw)) < 0.02
        busbws.append(float(busbw))
    avg = float(lines[-1].split(":")[1])
    assert abs(avg - sum(busbws) / len(busbws)) < 0.01
    ring_tree = [line.split("|")[1:-1] for line in block("ring-tree").strip().splitlines()[2:]]
    for nodes, ring, tree, ratio in ring_tree:
        assert f"{float(tree) / float(ring):.2f}" == ratio.strip()
    assert float(ring_tree[-1][1]) == pytest.approx(float(rows[-1][-1]), abs=0.01)   # 16 nodes, 1 GiB
    assert "Ring sits in the measured 366–396 GB/s band" in README                      # nccl-tests' DGX H100
    assert all(366 <= float(ring) <= 396 for _, ring, _, _ in ring_tree)


def test_tokens_sample_is_consistent():
    """Byte tokens are the file's UTF-8 bytes, characters its code points; an epoch moves
    iterations x the per-iteration bytes."""
    from tracegen.corpus.reader import open_corpus
    text = block("tokens")
    cells = lambda line: [c.strip() for c in line.split("│")[1:-1]]
    rows = [cells(line) for line in text.splitlines() if line.startswith("│")]
    counts = [r for r in rows if len(r) == 9 and r[2].replace(",", "").isdigit()]
    for corpus in ("dante-it", "dante-en"):
        body = "".join(Path(f).read_bytes().decode("utf-8").removeprefix("\ufeff") for f in open_corpus(corpus).files)
        byte_row = next(r for r in counts if r[0] == corpus and r[1] == "bytes")
        assert byte_row[3] == f"{len(body):,}" and byte_row[5] == f"{len(body.encode()):,}", corpus
    per_it = int(re.search(r"([\d,]+) B all NICs", text).group(1).replace(",", ""))
    epochs = [r for r in rows if len(r) == 9 and re.fullmatch(r"\d+ \([\d.]+\)", r[3])]
    assert len(epochs) == 6
    for r in epochs:
        assert r[4] == binary(int(r[3].split()[0]) * per_it)


def test_example_frame_count_is_the_committed_capture():
    scapy = pytest.importorskip("scapy.utils", reason="scapy (pip [test] extra) not installed")
    path = readme_numbers.EXAMPLE_PCAP
    with scapy.RawPcapReader(str(path)) as r:
        frames = sum(1 for _ in r)
    assert block("example-frames") == f"{frames:,}"


def test_check_names_the_block_that_differs(tmp_path, capsys):
    readme = tmp_path / "README.md"
    frames = block("example-frames")
    readme.write_text(README.replace(f"begin -->{frames}<!--", "begin -->303<!--"), "utf-8")
    assert readme_numbers.main(["--check", "--only", "example-frames", "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert "'example-frames'" in err and "differs" in err
    assert "begin -->303<!--" in readme.read_text("utf-8")            # --check writes nothing
    assert readme_numbers.main(["--only", "example-frames", "--readme", str(readme)]) == 0
    assert readme.read_text("utf-8") == README                          # regenerated: as committed
    readme.write_text(README.replace("<!-- readme_numbers: tokens end -->", ""), "utf-8")
    with pytest.raises(SystemExit, match="missing"):
        readme_numbers.main(["--check", "--only", "example-frames", "--readme", str(readme)])


def test_tokens_into_a_pipe_never_cuts_a_value(tmp_path):
    """As plan: no terminal, so each table is as wide as it needs, whatever COLUMNS says."""
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "tokens", "dante-it", "-t", "bytes"],
                         cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    table = [line.rstrip() for line in res.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table) >= 8
    for line in table:
        assert line[-1] in "┓┃┩│┘", line
    assert "iterations (exact)" in res.stdout and "tokens/char" in res.stdout


def test_ecmp_spread_from_an_independent_hash_model():
    """The spine each of 1,000 consecutive QPs takes, from test_fabric's zlib model of the ECMP
    hash (not routing.py): the busiest or idlest spine's distance from its share, seeds 0-5."""
    import numpy as np
    from test_fabric import _choice, fabric_job
    from tracegen.timing.connections import udp_sport
    from tracegen.fabric.topology import build_fabric
    parts = []
    for spines in (4, 8):
        devs = []
        for seed in range(6):
            f = build_fabric(fabric_job({"nodes_per_leaf": 1, "spines": spines, "ecmp_seed": seed}, dp=4, gpn=1))
            src_leaf = f.node_id(f.nic_port_leaf[0, 0]) - f.n_nics
            qpn = np.arange(0x100, 0x100 + 1000)
            picks = [_choice(int(f.nic_ip[0]), int(f.nic_ip[3]), int(sp), src_leaf, seed, spines)
                     for sp in udp_sport(qpn, qpn + 0x40)]
            counts = np.bincount(picks, minlength=spines)
            devs.append(np.abs(counts - 1000 / spines).max() / (1000 / spines) * 100)
        parts.append(f"{min(devs):.0f}-{max(devs):.0f} % ({spines} spines)")
    assert block("ecmp-spread") == " or ".join(parts)


def test_the_jobs_the_readme_describes():
    """"a 4-layer model, dp=2 × tp=2 × pp=2 on 4 nodes × 2 H100s, 400 Gb/s rails"; "Every
    preset fits its GPU's memory except deepseek-v3"; "llama3-405b (16,384 H100: tp 8, pp 16,
    dp 128 ...)"."""
    from tracegen.config import list_presets, load_job
    from tracegen.workload.memory import memory_estimate
    job = load_job(None, preset="default", sets=[])
    p, c = job.parallelism, job.cluster
    described = f"a {job.model.layers}-layer model, dp={p.dp} × tp={p.tp} × pp={p.pp} on {job.nodes} nodes × " \
                f"{c.gpus_per_node} {c.gpu.upper()}s, {c.nic_gbps} Gb/s rails"
    assert described in " ".join(README.split())
    assert "Every preset fits its GPU's memory except\n`deepseek-v3`" in README
    unfit = [name for name, _ in list_presets()["jobs"]
             if not memory_estimate(load_job(None, preset=name, sets=[])).fits]
    assert unfit == ["deepseek-v3"]
    big = load_job(None, preset="llama3-405b", sets=[])
    assert (big.world, big.parallelism.tp, big.parallelism.pp, big.parallelism.dp) == (16384, 8, 16, 128)
    assert "`llama3-405b` (16,384 H100: tp 8, pp 16, dp 128" in README
    assert (big.parallelism.sp, big.parallelism.zero, big.parallelism.global_batch, big.model.seq_len) == \
        (True, 1, 2048, 8192) and "SP,\nZeRO-1, 2,048 × 8K sequences" in README
    # the preset table's "what it shows" column (prose kept in tools/readme_numbers.py)
    what = {p: w for p, w, _ in readme_numbers.PRESET_ROWS}
    j = load_job(None, preset="gpt3-175b", sets=[]).parallelism
    assert f"tp={j.tp}, pp={j.pp}, dp={j.dp}" in what["gpt3-175b"]
    j = load_job(None, preset="llama3-70b", sets=[]).parallelism
    assert f"(vpp={j.vpp}), SP, ZeRO-{j.zero}" in what["llama3-70b"] and j.sp
    ds = load_job(None, preset="deepseek-v3", sets=[])
    assert f"{ds.model.experts} experts over ep={ds.parallelism.ep}, pp={ds.parallelism.pp}, " \
           f"ZeRO-{ds.parallelism.zero}" in what["deepseek-v3"]
    su_job = load_job(None, sets=["fabric=dgx-h100-su"])
    su = su_job.fabric
    assert f"`dgx-h100-su` ({su.nodes_per_leaf}-node scalable units, {su.spines} × {su.leaf_spine_gbps}G " \
           "spines, non-blocking)" in README
    assert su.nodes_per_leaf * su_job.cluster.nic_gbps <= su.spines * su.leaf_spine_gbps   # a rail leaf's NICs


def test_a_table_into_a_pipe_keeps_every_value_whole():
    """cli.print_whole (plan, tokens): numbers in no_wrap columns stay whole however wide the
    table gets; a text column (overflow fold, as plan's) wraps and nothing is elided."""
    import io
    from rich.console import Console
    from rich.table import Table
    from tracegen.cli.common import print_whole
    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=False)
    t = Table(title="t")
    t.add_column("what", overflow="fold")
    for k in range(9):
        t.add_column(f"column {k}", justify="right", no_wrap=True)
    values = [f"{123_456_789 * (k + 1):,} B" for k in range(9)]
    t.add_row("a few words of text", *values)
    print_whole(console, t)
    text = out.getvalue()
    assert "…" not in text
    for v in values:
        assert v in text, v
    assert console.width == 60                            # restored
    rows = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert len({len(line.rstrip()) for line in rows}) == 1 and len(rows[0].rstrip()) > 60
