"""generate's folder safety for every other command that writes (issue 22): export, report,
collective -o, tokens --png, and sub-outputs written into a trace (ns3/sim/, chakra/, simai/).

Real subprocesses of this checkout; full and read-only disks are real tmpfs mounts (root; the
helpers of tests/test_outdir.py). What is checked is where files land and what survives.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_outdir import FAST, cli, digest, error_line, tmpfs, user_project
from tracegen.output.folder import write_folder
from tracegen.output.ownership import MANIFEST, MARKER
from tracegen.output.ownership import png_is_ours, read_manifest


def ours(d: Path) -> None:
    """Every file below d is listed, with its size, by d's manifest or a sub-output's."""
    man = read_manifest(d)
    assert man is not None, f"{d}: no manifest"
    subs = [p for p in d.rglob(MANIFEST) if p.parent != d]
    for p in d.rglob("*"):
        if not p.is_file() or p.name == MANIFEST:
            continue
        owner = next((s.parent for s in subs if s.parent in p.parents), d)
        listed = read_manifest(owner)["files"]
        rel = str(p.relative_to(owner))
        assert listed.get(rel) == p.stat().st_size, f"{p}: not in {owner}'s manifest"


def test_export_and_report_into_a_trace_keep_it_tracegens_and_go_with_it(tmp_path):
    """export's default folder is inside the job's trace folder; generate then replaces the
    trace (it refused it as foreign before) and says the exports went with it."""
    assert cli("export", "chakra", cwd=tmp_path).returncode == 0          # traces/default/chakra/
    assert cli("export", "simai", cwd=tmp_path).returncode == 0
    t = tmp_path / "traces" / "default"
    assert sorted(os.listdir(t)) == ["chakra", "simai"]
    for sub in ("chakra", "simai"):
        ours(t / sub)
    res = cli("generate", *FAST, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "chakra/, simai/" in res.stderr and "went with it" in res.stderr
    assert not (t / "chakra").exists()
    # into a generated trace: its sub-outputs and redrawn pictures keep it tracegen's
    for args in (["export", "simai", "-o", "traces/default/simai"], ["report", "traces/default"],
                 ["report", "traces/default", "--only", "gantt"]):
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    ours(t)
    res = cli("plan", cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]),
                                         "COLUMNS": "300"})
    assert "generate would write traces/default/ (replacing the trace tracegen wrote there before, " \
           "with simai/ written into it since)" in res.stdout
    res = cli("generate", *FAST, cwd=tmp_path)
    assert res.returncode == 0 and "simai/" in res.stderr, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["traces"] and sorted(os.listdir(tmp_path / "traces")) == ["default"]


def test_a_sub_output_folder_is_written_whole_like_a_trace(tmp_path):
    """write_folder (what `ns3 run` writes ns3/sim/ with): a new folder, then replaced whole;
    a user's file in it makes it foreign, and then the trace too."""
    assert cli("generate", "-q", "--no-pcap", "-o", "t", cwd=tmp_path).returncode == 0
    sim = tmp_path / "t" / "ns3" / "sim"
    for text in ("first", "second run"):
        write_folder(sim, "t/ns3/sim", lambda tmp, x=text: (tmp / "fct.txt").write_text(x), what="simulation")
        assert (sim / "fct.txt").read_text() == text
        ours(tmp_path / "t")
    assert not [n for n in os.listdir(sim.parent) if n.startswith(".")]    # no temp folder, no lock
    (sim / "mine.txt").write_text("keep")
    line = error_line(cli("generate", *FAST, "-o", "t", cwd=tmp_path))
    assert "ns3/sim/mine.txt" in line
    assert (sim / "mine.txt").read_text() == "keep"


def test_leftovers_of_killed_runs_inside_a_trace_are_tracegens(tmp_path):
    """A sub-output's lock file and marked temp folder, left by a SIGKILLed run, do not make the
    trace foreign and go with it; a user's look-alike does."""
    assert cli("generate", *FAST, "-o", "t", cwd=tmp_path).returncode == 0
    t = tmp_path / "t"
    dead = subprocess.Popen(["true"])
    dead.wait()
    (t / ".simai.lock").write_text(f"{dead.pid}\n")
    (t / ".simai.tmp-abcd1234").mkdir()
    (t / ".simai.tmp-abcd1234" / MARKER).write_text(f"{dead.pid}\n")
    (t / ".simai.tmp-abcd1234" / "half.txt").write_text("cut")
    res = cli("generate", *FAST, "-o", "t", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not [n for n in os.listdir(t) if n.startswith(".simai")]
    (t / ".backup.lock").write_text("my own notes\n")                  # not a pid: the user's
    assert ".backup.lock" in error_line(cli("generate", *FAST, "-o", "t", cwd=tmp_path))


def test_export_and_report_never_write_over_a_users_file(tmp_path):
    proj = user_project(tmp_path / "proj")
    (proj / "comm_groups.json").write_text("{\"mine\": true}\n")
    (proj / "timeline.png").write_text("my picture")
    assert cli("generate", *FAST, "-o", "t", cwd=tmp_path).returncode == 0
    before = digest(proj)
    for args in (["export", "chakra", "-o", "."], ["export", "simai", "-o", "."], ["report", "../t", "-o", "."]):
        assert "it is the current folder" in error_line(cli(*args, cwd=proj))
    assert "comm_groups.json there is not tracegen's" in error_line(
        cli("export", "chakra", "-o", ".", "--force", cwd=proj))
    assert "timeline.png there is not tracegen's" in error_line(cli("report", "../t", "-o", ".", "--force", cwd=proj))
    assert digest(proj) == before
    # --force writes beside, and a second run replaces only its own files
    # (the default job has pp=2: SimAI gets one file per stage beside the busiest stage's default.txt)
    for args, mine in ((["report", "../t", "-o", ".", "--force", "--only", "gantt"], {"gantt.png"}),
                       (["export", "simai", "-o", ".", "--force"],
                        {"default.txt", "default.stage0.txt", "default.stage1.txt"})):
        for _ in range(2):
            res = cli(*args, cwd=proj)
            assert res.returncode == 0, res.stderr
            after = digest(proj)
            assert {k: v for k, v in after.items() if k in before} == before
            assert set(after) - set(before) == mine | {MANIFEST}      # the earlier output's files: gone
            assert not [n for n in os.listdir(proj) if n.startswith(".tracegen.")]


def test_tokens_png_replaces_only_a_picture_tracegen_wrote(tmp_path):
    for _ in range(2):
        res = cli("tokens", "dante-en", "-t", "bytes", "--png", "p.png", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert png_is_ours(tmp_path / "p.png")
    assert sorted(os.listdir(tmp_path)) == ["p.png"]
    (tmp_path / "q.png").write_bytes((tmp_path / "p.png").read_bytes().replace(b"tracegen", b"Tracegen"))
    assert not png_is_ours(tmp_path / "q.png")
    assert "refusing to overwrite q.png" in error_line(
        cli("tokens", "dante-en", "-t", "bytes", "--png", "q.png", cwd=tmp_path))
    # into a trace folder: listed in its manifest, the trace stays tracegen's
    assert cli("generate", *FAST, "-o", "t", cwd=tmp_path).returncode == 0
    assert cli("tokens", "dante-en", "-t", "bytes", "--png", "t/premium.png", cwd=tmp_path).returncode == 0
    assert "premium.png" in read_manifest(tmp_path / "t")["files"]
    ours(tmp_path / "t")


def test_collective_o_is_guarded_like_generate(tmp_path):
    proj = user_project(tmp_path / "proj")
    before = digest(proj)
    sweep = ["collective", "all_reduce", "-b", "1M", "-e", "1M", "--nodes", "2", "--nics", "0"]
    assert "holds files tracegen did not write" in error_line(cli(*sweep, "-o", "proj", cwd=tmp_path))
    assert digest(proj) == before
    for _ in range(2):
        res = cli(*sweep, "-o", "c", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        ours(tmp_path / "c")
    assert sorted(os.listdir(tmp_path)) == ["c", "proj"]


# --- the disk refuses ----------------------------------------------------------------------------

def test_a_completely_full_disk_leaves_no_lock_file(tmp_path):
    """The lock file can be created (an inode) but not written (no block): it used to stay,
    empty, after the one-line error."""
    with tmpfs(tmp_path / "mnt", "size=1m") as mnt:
        with open(mnt / "fill", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        for args in (["generate", *FAST, "-o", "mnt/t"], ["export", "simai", "-o", "mnt/s"]):
            line = error_line(cli(*args, cwd=tmp_path), code=1)
            assert "ENOSPC" in line and "nothing was written" in line
            assert os.listdir(mnt) == ["fill"]


def test_read_only_disk_is_one_line_exit_1_for_report_and_export(tmp_path):
    with tmpfs(tmp_path / "mnt", "size=4m") as mnt:
        assert cli("generate", *FAST, "-o", "mnt/t", cwd=tmp_path).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = digest(mnt)
        line = error_line(cli("report", "mnt/t", cwd=tmp_path), code=1)
        assert "cannot write mnt/t" in line and "EROFS" in line and "earlier pictures there are unchanged" in line
        for args in (["export", "chakra", "-o", "mnt/c"], ["export", "simai", "-o", "mnt/t/simai"],
                     ["tokens", "dante-en", "-t", "bytes", "--png", "mnt/p.png"],
                     ["collective", "all_reduce", "-b", "1M", "-e", "1M", "--nodes", "2", "-o", "mnt/c"]):
            line = error_line(cli(*args, cwd=tmp_path), code=1)
            assert "EROFS" in line and "read-only" in line, line
        assert digest(mnt) == before
