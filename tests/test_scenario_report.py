"""`tracegen report DIR` on a scenario's folder (generate --scenario): the jobs' slowdowns and
Jain's fairness printed from scenario.json, every picture redrawn from the folder's files; a
damaged scenario.json is one line, exit 2, nothing written.

Judges: slowdown = jct_ns / alone_jct_ns and Jain's index (sum x)^2 / (n sum x^2) computed here
from the JSON; the redrawn pictures are byte-identical to the ones generate drew.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
EXAMPLE = ROOT / "traces" / "examples" / "two-tenants"


def report(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tracegen.cli", "report", *map(str, args)],
                          capture_output=True, text=True, env=ENV, cwd=cwd)


def test_report_prints_slowdowns_and_jain_and_redraws_the_picture(tmp_path):
    d = tmp_path / "two-tenants"
    shutil.copytree(EXAMPLE, d)
    out = report(d, "-o", tmp_path / "pics")
    assert out.returncode == 0, out.stderr
    doc = json.loads((d / "scenario.json").read_text())
    x = [j["jct_ns"] / j["alone_jct_ns"] for j in doc["jobs"]]
    jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    assert re.search(r"Jain fairness of slowdowns\s*│\s*" + re.escape(f"{jain:.4f}"), out.stdout), out.stdout
    for j, s in zip(doc["jobs"], x):
        row = next(line for line in out.stdout.splitlines() if line.startswith(f"│ {j['name']} "))
        assert f"{s:.3f}" in row.split("│")[7], row
    pics = ["jobs_gantt.png", "link_load_by_job.png", "slowdowns.png"]     # every picture generate drew
    assert sorted(p.name for p in (tmp_path / "pics").iterdir() if not p.name.startswith(".")) == pics
    for name in pics:
        assert (tmp_path / "pics" / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
    again = report(d)                                    # into the folder itself (ours: its manifest)
    assert again.returncode == 0, again.stderr
    for name in pics:
        assert (d / name).read_bytes() == (EXAMPLE / name).read_bytes(), name


@pytest.mark.parametrize("text, key", [
    ("{", "line 1"),
    ("[]", "JSON object"),
    ('{"jobs": []}', "scenario"),
    ('{"scenario": "s", "jobs": []}', "jobs"),
    ('{"scenario": "s", "jobs": [{"name": "a"}]}', "nodes"),
    ('{"scenario": "s", "jobs": [{"name": "a", "nodes": [0], "start_ns": 0, "iterations": 1, "jct_ns": -5, '
     '"alone_jct_ns": 3, "busbw_pct": null, "alone_busbw_pct": null}]}', "jobs[0].jct_ns"),
    ('{"scenario": "s", "jobs": [{"name": "a", "nodes": [0], "start_ns": 0, "iterations": 1, "jct_ns": 5, '
     '"alone_jct_ns": 0, "busbw_pct": null, "alone_busbw_pct": null}]}', "jobs[0].alone_jct_ns"),
    ('{"scenario": "s", "jobs": [{"name": "a", "nodes": [0], "start_ns": 0, "iterations": 1, "jct_ns": 5, '
     '"alone_jct_ns": 3, "busbw_pct": "x", "alone_busbw_pct": null}]}', "jobs[0].busbw_pct"),
])
def test_a_damaged_scenario_json_is_one_line_exit_2(tmp_path, text, key):
    d = tmp_path / "s"
    d.mkdir()
    (d / "scenario.json").write_text(text)
    out = report(d, "-o", tmp_path / "pics")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and key in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert "scenario.json" in lines[0] and out.stdout == ""
    assert not (tmp_path / "pics").exists()


def test_only_names_a_scenario_picture(tmp_path):
    d = tmp_path / "two-tenants"
    shutil.copytree(EXAMPLE, d)
    out = report(d, "--only", "gantt")
    assert out.returncode == 2 and "--only" in out.stderr and "slowdowns" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
