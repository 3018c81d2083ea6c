"""The command line end to end: outputs, determinism, bad input (one line, exit 2, nothing written)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracegen.cli import main


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def default_trace(tmp_path_factory) -> Path:
    """`tracegen generate` with no arguments, run as a user would, in an empty folder."""
    cwd = tmp_path_factory.mktemp("cwd")
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate"], cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = cwd / "traces" / "default"
    assert out.is_dir()
    return out


def test_default_generate_writes_the_trace_set(default_trace):
    names = {p.name for p in default_trace.iterdir()}
    assert {"pcap", "flows.csv", "ns3", "summary.md", "timeline.png"} <= names
    pcaps = sorted((default_trace / "pcap").glob("*.pcap"))
    assert len(pcaps) == 8                        # 4 nodes x 2 rails, all carry DP or PP traffic
    for f in ("topology.txt", "flow.txt", "config.txt", "trace.txt"):
        assert (default_trace / "ns3" / f).stat().st_size > 0
    summary = (default_trace / "summary.md").read_text()
    assert "S_act" in summary and "| DP |" in summary and "| PP |" in summary
    assert (default_trace / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing but the trace folder was left in traces/
    assert [p.name for p in default_trace.parent.iterdir()] == ["default"]


def test_same_input_byte_identical_output(default_trace, tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", "-o", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    assert tree_digest(default_trace) == tree_digest(tmp_path / "again")


def test_regenerate_replaces_atomically(tmp_path):
    out = tmp_path / "t"
    for _ in range(2):
        res = CliRunner().invoke(main, ["generate", "-q", "--no-pcap", "-o", str(out)])
        assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


BAD = [
    (["--set", "parallelism.tp=3"], "parallelism.tp"),                 # heads 8 % 3
    (["--set", "cluster.nodes=3"], "cluster.nodes"),                   # world size 8 vs 3 x 2 GPUs
    (["--set", "model.layers=3"], "parallelism.pp"),                   # layers % pp
    (["--set", "cluster.gpus_per_node=3"], "gpus_per_node"),           # GPUs not filling nodes
    (["--set", "parallelism.tpp=2"], "parallelism.tp"),                # unknown key, suggestion
    (["--set", "model.hidden=abc"], "model.hidden"),                   # wrong type
    (["--set", "model.hidden=-256"], "model.hidden"),                  # non-positive
    (["--set", "model.seq_len=0"], "model.seq_len"),
    (["--preset", "nope"], "nope"),
    (["missing.yaml"], "missing.yaml"),
    (["--snaplen", "-1"], "snaplen"),
]


@pytest.mark.parametrize("args,key", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, key):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-o", str(out), *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == [], "no partial output"


def test_bad_yaml_file(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: {layers: 4\n")
    res = CliRunner().invoke(main, ["plan", str(job)])
    assert res.exit_code == 2 and "job.yaml" in res.output


def test_plan_writes_nothing_and_reports_volumes(tmp_path):
    before = set(os.listdir(tmp_path))
    res = CliRunner().invoke(main, ["plan", "--set", "parallelism.dp=2"], catch_exceptions=False,
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "pcap estimate" in res.output and "s to write" in res.output and "closed form" in res.output
    assert set(os.listdir(tmp_path)) == before


def test_presets_lists_models_and_jobs():
    res = CliRunner().invoke(main, ["presets"])
    assert res.exit_code == 0
    for name in ("gpt2-small", "llama3-8b", "gpt3-175b", "dgx-h100"):
        assert name in res.output


def test_snaplen_header_only(tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--snaplen", "128", "-o", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    import struct
    for f in (tmp_path / "s" / "pcap").glob("*.pcap"):
        data = f.read_bytes()
        off = 24
        while off < len(data):
            _, _, incl, orig = struct.unpack_from("<IIII", data, off)
            assert incl <= 128 and orig >= incl
            off += 16 + incl


def test_plan_into_a_pipe_never_cuts_a_value(tmp_path):
    """`tracegen plan | cat`: no terminal width to respect, so every table is as wide as it needs;
    it used to be cut at 80 columns inside values (`41.16 Mi`). Checked against plan --json, and
    whatever COLUMNS says."""
    import json
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "COLUMNS": "60"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", *a], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=300)
    text, doc = run().stdout, json.loads(run("--json").stdout)
    assert "…" not in text and "..." not in text
    tables = [line for line in text.splitlines() if line[:1] in "┌│├└"]
    assert len(tables) > 20
    for line in tables:                      # every row closed by its border: nothing cropped
        assert line.rstrip()[-1] in "┐│┤┘", line
    mib = lambda n: f"{n / (1 << 20):.2f} MiB"
    for d in doc["dims"]:
        assert f"│ {d['dim']:<3} │" in text
        assert mib(d["net_bytes"]) in text or d["net_bytes"] < 1 << 20, d
    assert f"{doc['transfers']:,}" in text
    assert os.listdir(tmp_path) == []
