"""Every command but generate/plan's job files, on bad input: one line on stderr, the right exit
code, no traceback, nothing written and nothing lost (issue 22).

tests/bad_configs/commands/*.yaml: one case per file (tests/test_bad_input.py runs the job files
beside them through generate and plan; this runner knows other commands and other inputs):

    # expect: <a piece of the one error line>
    argv: [report, trace]            # after `tracegen`
    exit: 2                          # default 2
    trace: csv                       # optional: a copy of a small trace folder at ./trace: csv, parquet
                                     #   (tables) or ns3 (csv tables and the ns-3 scenario in trace/ns3/)
    files: {mine.txt: "text"}        # optional: the user's files, made before the run
    edit:                            # optional: damage the copied trace, in order
      - {file: trace/flows.csv, keep_bytes: 5000}       # cut it
      - {file: trace/flows.csv, hex: "00ff"}            # its whole content, as bytes
      - {file: trace/flows.csv, line: 3, text: "1,2"}   # one line (1 = header), as text
      - {file: trace/flows.csv, row: 1, column: src_rank, value: "99"}   # one CSV field
      - {file: trace/summary.json, json_set: {world: "8"}, json_del: [nic_names]}
      - {file: trace/ops.csv, delete: true}

Each case runs in a fresh folder holding only what the case made; the folder's every byte is the
same after the run (the trace, the user's files: nothing written, nothing lost), stdout is empty
(everything is checked before any work), stderr is one `error:` line naming what to fix.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted((ROOT / "tests" / "bad_configs" / "commands").glob("*.yaml"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
ENV.pop("NUMBA_DISABLE_JIT", None)
pytestmark = pytest.mark.timeout(1500)      # the first test waits for the whole corpus (~2 min on 2 cores)


def load_case(path: Path) -> dict:
    text = path.read_text("utf-8")
    first = text.split("\n", 1)[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: ...'"
    case = yaml.safe_load(text) or {}
    assert set(case) <= {"argv", "exit", "trace", "files", "edit"}, f"{path.name}: {sorted(case)}"
    case["expect"] = first[len("# expect: "):]
    return case


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"/")
            for p in sorted(d.rglob("*"))}


def _edit(cwd: Path, e: dict) -> None:
    p = cwd / e["file"]
    if e.get("delete"):
        p.unlink()
    elif "keep_bytes" in e:
        p.write_bytes(p.read_bytes()[:e["keep_bytes"]])
    elif "hex" in e:
        p.write_bytes(bytes.fromhex(e["hex"]))
    elif "text" in e and "line" not in e:
        p.write_text(e["text"])
    elif "line" in e:
        lines = p.read_text().split("\n")
        lines[e["line"] - 1] = e["text"]
        p.write_text("\n".join(lines))
    elif "column" in e:
        lines = p.read_text().split("\n")
        header = lines[0].split(",")
        row = lines[e["row"]].split(",")
        row[header.index(e["column"])] = str(e["value"])
        lines[e["row"]] = ",".join(row)
        p.write_text("\n".join(lines))
    elif "json_set" in e or "json_del" in e:
        doc = json.loads(p.read_text())
        doc.update(e.get("json_set", {}))
        for k in e.get("json_del", []):
            doc.pop(k)
        p.write_text(json.dumps(doc))
    else:
        raise AssertionError(f"unknown edit {e}")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """Small trace folders written by generate (tables and pictures, no pcaps; ns3: the scenario too)."""
    root = tmp_path_factory.mktemp("traces")
    kinds = {"csv": ["--no-ns3"], "parquet": ["--no-ns3", "--set", "output.tables=parquet"], "ns3": []}

    def make(kind: str) -> Path:
        res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-q", "--no-pcap", *kinds[kind],
                              "-o", str(root / kind)], env=ENV, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return root / kind
    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        return dict(zip(kinds, pool.map(make, kinds)))


def _run(path: Path, root: Path, traces: dict[str, Path]):
    case = load_case(path)
    cwd = root / path.stem
    cwd.mkdir()
    if case.get("trace"):
        shutil.copytree(traces[case["trace"]], cwd / "trace")
    for name, content in (case.get("files") or {}).items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(content)
    for e in case.get("edit") or []:
        _edit(cwd, e)
    before = tree(cwd)
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", *map(str, case["argv"])], cwd=cwd, env=ENV,
                         capture_output=True, timeout=300)
    return case, res, before, tree(cwd)


@pytest.fixture(scope="module")
def results(tmp_path_factory, traces):
    root = tmp_path_factory.mktemp("commands")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        done = list(pool.map(lambda p: _run(p, root, traces), CASES))
    return {p.name: r for p, r in zip(CASES, done)}


def test_the_command_corpus_covers_every_command_that_reads_or_writes():
    argv0 = {load_case(p)["argv"][0] for p in CASES}
    assert {"report", "export", "collective", "generate", "plan", "tokens"} <= argv0
    assert len(CASES) >= 40


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_command(results, path):
    case, res, before, after = results[path.name]
    err = res.stderr.decode("utf-8", "replace")
    out = res.stdout.decode("utf-8", "replace")
    assert res.returncode == case.get("exit", 2), (res.returncode, err[-3000:])
    assert "Traceback" not in err + out, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    assert case["expect"] in lines[0], lines[0]
    assert out == "", "nothing on stdout: every check comes before any work"
    assert after == before, "nothing written, nothing changed"
