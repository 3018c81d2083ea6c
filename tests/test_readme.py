"""The README a newcomer follows: every fenced `tracegen` command that writes under traces/ runs as
written (in a fresh folder, in README order, with the README's own job.yaml / lab.yaml), its
Python snippet for the tables runs, and it links nothing outside the repository."""
from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every ``` block."""
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)]


def tracegen_commands(text: str) -> list[list[str]]:
    """argv (after `tracegen`) of each command in the plain fenced blocks, comments cut."""
    out = []
    for info, body in fenced_blocks(text):
        if info not in ("", "sh", "bash", "console"):
            continue
        for line in body.splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("tracegen "):
                    out.append(shlex.split(part, comments=True)[1:])
    return out


def writes_under_traces(argv: list[str]) -> bool:
    if argv[0] == "generate":
        out = next((argv[i + 1] for i, a in enumerate(argv) if a in ("-o", "--out")), None)
        return out is None or out.startswith("traces/")
    if argv[:2] == ["ns3", "compare"] and "--fct" in argv:
        return False                 # another simulator's output: not something the README writes
    if argv[0] == "report" or argv[:2] in (["ns3", "run"], ["ns3", "compare"]):
        return any(a.startswith("traces/") for a in argv)
    return False


def test_readme_has_no_links_outside_the_repository():
    assert "../" not in README
    for target in re.findall(r"\]\(([^)]+)\)", README):
        assert target.startswith("#") or (ROOT / target).exists(), target


def test_readme_starts_with_a_venv_and_names_the_test_tools():
    blocks = [b for i, b in fenced_blocks(README) if i == ""]
    first = blocks[0].splitlines()
    assert first[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert "apt-get install -y tshark tcpreplay tcpdump iproute2" in blocks[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert blocks[1].splitlines()[-1] in ci          # CI runs the README's test command


def test_the_commands_found_are_the_ones_meant():
    cmds = [c for c in tracegen_commands(README) if writes_under_traces(c)]
    assert ["generate"] in cmds and any(c[:1] == ["report"] for c in cmds)
    assert any("gpt3-175b" in c for c in cmds)
    assert len(cmds) >= 15


@pytest.mark.slow
def test_every_readme_command_that_writes_under_traces_runs(tmp_path):
    for info, body in fenced_blocks(README):        # the README's own job.yaml and lab.yaml
        first = body.splitlines()[0] if body else ""
        m = re.fullmatch(r"# (\S+\.yaml)", first)
        if info == "yaml" and m:
            (tmp_path / m.group(1)).write_text(body)
    ran = []
    for argv in tracegen_commands(README):
        if not writes_under_traces(argv):
            continue
        if argv[:2] in (["ns3", "run"], ["ns3", "compare"]) and importlib.util.find_spec("ns3") is None:
            continue
        res = subprocess.run([sys.executable, "-m", "tracegen.cli", *argv], cwd=tmp_path, capture_output=True,
                             text=True, timeout=900, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                          "COLUMNS": "100", "HOME": str(tmp_path)})
        assert res.returncode == 0, f"tracegen {shlex.join(argv)}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        ran.append(argv)
    assert (tmp_path / "traces" / "default" / "perfetto.json").is_file()
    assert (tmp_path / "traces" / "tables" / "flows.parquet").is_file()
    assert (tmp_path / "traces" / "gpt3-8-layers" / "gantt.png").is_file()
    # the table snippet (pandas, polars, duckdb) on what the commands above wrote
    code = next(b for i, b in fenced_blocks(README) if i == "python")
    mods = [m for m in ("pandas", "polars", "duckdb") if importlib.util.find_spec(m) is None]
    if mods:
        pytest.skip(f"the README's table snippet needs {', '.join(mods)}")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "DP" in res.stdout and "tx_bytes" in res.stdout
