"""Output folders (issue 13): never lose a user's file; faults leave the earlier trace intact.

Real subprocesses (`python -m tracegen.cli`, this checkout's code), real signals, real tmpfs
mounts (root only; skipped with the reason otherwise). Jobs are the tiny default, mostly without
pcaps or ns-3 files: what is tested is where and how files land, not what they hold.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracegen.output.ownership import MANIFEST, MARKER

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("NUMBA_DISABLE_JIT", None)
FAST = ["-q", "--no-ns3", "--no-pcap"]


def cli(*args, cwd, env=ENV, timeout=180):
    return subprocess.run([sys.executable, "-m", "tracegen.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def start(*args, cwd, env=ENV):
    return subprocess.Popen([sys.executable, "-m", "tracegen.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def digest(root: Path) -> dict[str, str]:
    """Every entry below root (dotfiles, .git, folders) with its content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def error_line(res, code: int = 2) -> str:
    assert res.returncode == code, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def consistent(d: Path) -> dict:
    """d holds exactly the files its manifest lists, with those sizes (never a mix)."""
    man = json.loads((d / MANIFEST).read_text())
    files = {str(p.relative_to(d)): p.stat().st_size for p in d.rglob("*")
             if p.is_file() and p.name != MANIFEST}
    assert files == man["files"]
    return man


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{name}."))


def user_project(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.yaml").write_text("name: harmless\n")
    (d / "notes.txt").write_text("mine\n")
    (d / ".git").mkdir()
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (d / ".git" / "objects").mkdir()
    (d / ".git" / "objects" / "ab").write_bytes(os.urandom(64))
    return d


# --- refusals ------------------------------------------------------------------------------------

def test_foreign_folder_is_refused_and_untouched(tmp_path):
    proj = user_project(tmp_path / "proj")
    before = digest(proj)
    line = error_line(cli("generate", *FAST, "-o", "proj", cwd=tmp_path))
    assert "refusing to write into proj: it holds files tracegen did not write" in line
    assert ".git" in line and "--force" in line
    assert digest(proj) == before
    assert sorted(os.listdir(tmp_path)) == ["proj"]            # no temp folder, no lock


def test_current_folder_refused_force_writes_beside_and_keeps_everything(tmp_path):
    proj = user_project(tmp_path / "proj")
    before = digest(proj)
    line = error_line(cli("generate", "job.yaml", *FAST, "-o", ".", cwd=proj))
    assert "it is the current folder" in line
    assert digest(proj) == before
    for _ in range(2):                                          # again: replaces only its own files
        res = cli("generate", "job.yaml", *FAST, "-o", ".", "--force", cwd=proj)
        assert res.returncode == 0, res.stderr
        after = digest(proj)
        assert {k: v for k, v in after.items() if k in before} == before
        man = json.loads((proj / MANIFEST).read_text())
        assert set(after) == set(before) | set(man["files"]) | {MANIFEST} | set(man["dirs"])
        assert not [n for n in os.listdir(proj) if n.startswith(".tracegen.")]
    # --force never overwrites a user's file that sits where a trace file goes
    (proj / MANIFEST).unlink()
    res = cli("generate", "job.yaml", *FAST, "-o", ".", "--force", cwd=proj)
    assert "flows.csv there is not tracegen's" in error_line(res)


def test_folder_holding_the_job_file_home_and_root_are_refused(tmp_path):
    proj = user_project(tmp_path / "proj")
    before = digest(proj)
    assert "it holds job.yaml, which this run reads" in error_line(
        cli("generate", "proj/job.yaml", *FAST, "-o", "proj", cwd=tmp_path))
    home = user_project(tmp_path / "home")
    env = {**ENV, "HOME": str(home)}
    work = tmp_path / "work"
    work.mkdir()
    assert "it is your home folder" in error_line(cli("generate", *FAST, "-o", str(home), cwd=work, env=env))
    assert "it contains the current folder" in error_line(cli("generate", *FAST, "-o", "/", cwd=work))
    assert digest(proj) == before and os.listdir(work) == []


def test_output_dir_from_a_job_file_stays_below_the_current_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.yaml").write_text("name: harmless\noutput: {dir: ../somewhere}\n")
    victim = user_project(tmp_path / "somewhere")
    before = digest(victim)
    line = error_line(cli("generate", "job.yaml", *FAST, cwd=work))
    assert "output.dir='../somewhere'" in line and "-o ../somewhere" in line
    assert digest(victim) == before
    (work / "job.yaml").write_text("name: harmless\noutput: {dir: out/here}\n")
    assert cli("generate", "job.yaml", *FAST, cwd=work).returncode == 0
    consistent(work / "out" / "here")
    res = cli("generate", "job.yaml", *FAST, "-o", "../elsewhere", cwd=work)     # -o says otherwise
    assert res.returncode == 0, res.stderr
    consistent(tmp_path / "elsewhere")


def test_a_file_is_not_an_output_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    assert "'f' is a file" in error_line(cli("generate", *FAST, "-o", "f", cwd=tmp_path))
    assert (tmp_path / "f").read_text() == "x"


# --- our own output ---------------------------------------------------------------------------

def test_rerunning_into_our_own_output_replaces_it_whole(tmp_path):
    out = tmp_path / "t"
    for fmt in ("pcap", "pcapng"):
        res = cli("generate", "-q", "--no-ns3", "--format", fmt, "-o", "t", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        man = consistent(out)
        assert all(f.endswith(fmt) for f in man["files"] if f.startswith("pcap/"))   # old ones gone
    assert sorted(os.listdir(tmp_path)) == ["t"]               # no temp folder, no lock left
    # a file the user put there makes it not ours: refused, then --force keeps it
    (out / "pcap" / "mine.txt").write_text("keep me")
    line = error_line(cli("generate", *FAST, "-o", "t", cwd=tmp_path))
    assert "pcap/mine.txt" in line
    res = cli("generate", *FAST, "-o", "t", "--force", cwd=tmp_path)
    assert "pcap there is not tracegen's" in error_line(res)     # our pcap/ holds the user's file
    (out / "pcap" / "mine.txt").rename(out / "mine.txt")
    assert cli("generate", *FAST, "-o", "t", "--force", cwd=tmp_path).returncode == 0
    assert (out / "mine.txt").read_text() == "keep me"
    assert not (out / "pcap").exists()                          # ours, from the earlier run: gone


def test_a_modified_file_or_a_forged_manifest_is_not_ours(tmp_path):
    out = tmp_path / "t"
    assert cli("generate", *FAST, "-o", "t", cwd=tmp_path).returncode == 0
    with open(out / "summary.md", "a") as f:
        f.write("my notes\n")
    assert "summary.md" in error_line(cli("generate", *FAST, "-o", "t", cwd=tmp_path))
    # a manifest cannot make tracegen delete outside its folder
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "summary.md").unlink()
    man = json.loads((out / MANIFEST).read_text())
    man["files"]["../victim.txt"] = victim.stat().st_size
    (out / MANIFEST).write_text(json.dumps(man))
    before = digest(tmp_path)
    assert "flows.csv" in error_line(cli("generate", *FAST, "-o", "t", cwd=tmp_path))
    # a manifest naming ../ is no manifest: every file there is the user's, even with --force
    assert "flows.csv there is not tracegen's" in error_line(
        cli("generate", *FAST, "-o", "t", "--force", cwd=tmp_path))
    assert digest(tmp_path) == before and victim.read_text() == "precious"


def test_stale_temp_folders_of_killed_runs_are_cleaned_and_only_those(tmp_path):
    ours = tmp_path / ".t.tmp-abcd1234"
    (ours / "pcap").mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (ours / MARKER).write_text(f"{dead.pid}\n")                  # the run that wrote it is gone
    live = tmp_path / ".t.tmp-live5678"                          # a run still writing: left alone
    live.mkdir()
    (live / MARKER).write_text(f"{os.getpid()}\n")
    (ours / "pcap" / "x.pcap.part").write_bytes(b"\0" * 1000)
    users = [tmp_path / ".t.tmp-mine", tmp_path / ".t.backup"]
    for u in users:
        u.mkdir()
        (u / "keep.txt").write_text("mine")
    (tmp_path / ".t.lock").write_text("99999\n")                 # left by a SIGKILLed run: no flock
    res = cli("generate", *FAST, "-o", "t", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not ours.exists()
    assert all((u / "keep.txt").read_text() == "mine" for u in users)
    assert sorted(os.listdir(tmp_path)) == [".t.backup", ".t.tmp-live5678", ".t.tmp-mine", "t"]


def test_a_temp_folder_of_this_very_process_is_a_leftover(tmp_path, monkeypatch):
    """tracegen called in-process (a notebook, a test harness): a temp folder whose marker names
    this process's pid was left by an earlier call that died here - one process writes one trace
    at a time - so the next call removes it instead of taking it for a live run."""
    from click.testing import CliRunner
    from tracegen.cli import main
    ours = tmp_path / ".t.tmp-self1234"
    ours.mkdir()
    (ours / MARKER).write_text(f"{os.getpid()}\n")
    (ours / "flows.csv.part").write_bytes(b"\0" * 100)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["generate", *FAST, "-o", "t"])
    assert res.exit_code == 0, res.output
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_plan_says_where_generate_would_write(tmp_path):
    user_project(tmp_path / "proj")
    env = {**ENV, "COLUMNS": "200"}
    res = cli("plan", "-o", "new", cwd=tmp_path, env=env)
    assert res.returncode == 0 and "generate would write new/ (a new folder)" in res.stdout
    res = cli("plan", "-o", "proj", cwd=tmp_path, env=env)
    assert res.returncode == 0 and "generate would refuse: refusing to write into proj" in res.stdout
    res = cli("plan", cwd=tmp_path, env=env)
    assert "generate would write traces/default/" in res.stdout
    assert sorted(os.listdir(tmp_path)) == ["proj"]


# --- signals -----------------------------------------------------------------------------------

def wait_for(pred, proc, timeout=120.0, poll=0.002):
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = pred()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"exited before the moment came: {proc.returncode} {proc.stderr.read()}")
        time.sleep(poll)
    raise AssertionError("timed out")


def part_file(parent: Path, name: str):
    """A pcap being written inside the run's temp folder: the run is mid-write."""
    for d in parent.glob(f".{name}.tmp-*"):
        parts = list(d.glob("pcap/*.part"))
        if parts and (d / MARKER).exists():
            return parts[0]
    return None


BIG = ["--set", "parallelism.global_batch=16", "--no-ns3", "-q"]   # ~150 MB of pcaps: a write takes a while


@pytest.mark.parametrize("sig,earlier", [(signal.SIGTERM, False), (signal.SIGTERM, True),
                                         (signal.SIGHUP, True), (signal.SIGINT, False)],
                         ids=["SIGTERM-new", "SIGTERM-over-earlier", "SIGHUP-over-earlier", "SIGINT-new"])
def test_signal_mid_write_removes_the_temp_folder_and_keeps_the_earlier_trace(tmp_path, sig, earlier):
    if earlier:
        assert cli("generate", *FAST, "-o", "t", cwd=tmp_path).returncode == 0
    before = digest(tmp_path)
    proc = start("generate", *BIG, "-o", "t", cwd=tmp_path)
    wait_for(lambda: part_file(tmp_path, "t"), proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0 and signal.getsignal(sig) == signal.SIG_IGN:
        # Started from a shell without job control, the child inherits SIGINT ignored; a signal
        # that lands after the guarded section (handlers restored) is then lost - the run had
        # finished: the new trace is whole and nothing else is said.
        assert err.strip() == "" and leftovers(tmp_path, "t") == [], err
        consistent(tmp_path / "t")
        return
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"interrupted by {signal.Signals(sig).name}" in lines[0], err
    assert "Traceback" not in err
    assert leftovers(tmp_path, "t") == []                       # temp folder and lock removed
    if "already in place" in lines[0]:                           # it landed during the final rename:
        consistent(tmp_path / "t")                               # the new trace, whole (rare)
    else:
        assert "nothing was replaced" in lines[0]
        assert digest(tmp_path) == before                       # earlier trace intact / nothing new


def test_a_signal_inside_a_commit_waits_for_its_end():
    """In-process, real signals: outside a critical section a signal raises at once; inside
    (a commit, taking the lock) it raises when the section ends, never half-way."""
    from tracegen.errors import Interrupted
    from tracegen.output.guard import signals_as_interrupts, signals_deferred
    steps = []
    with pytest.raises(Interrupted) as e:
        with signals_as_interrupts():
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):                            # the handler runs, and waits
                    steps.append(1)
                steps.append("committed")
    assert e.value.signum == signal.SIGTERM and steps[-1] == "committed"
    with pytest.raises(Interrupted):
        with signals_as_interrupts():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):
                pass
            steps.append("not reached")
    assert steps[-1] == "committed"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL    # handlers restored


def test_sigterm_during_the_pipeline(tmp_path):
    proc = start("generate", *BIG, "-o", "t", cwd=tmp_path)
    wait_for(lambda: (tmp_path / ".t.lock").exists(), proc)     # taken before the pipeline runs
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err
    assert os.listdir(tmp_path) == []


def test_sigkill_leaves_a_temp_folder_the_next_run_removes(tmp_path):
    proc = start("generate", *BIG, "-o", "t", cwd=tmp_path)
    wait_for(lambda: part_file(tmp_path, "t"), proc)
    proc.kill()
    proc.communicate(timeout=60)
    stale = leftovers(tmp_path, "t")
    assert any(".t.tmp-" in n for n in stale) and ".t.lock" in stale
    res = cli("generate", *FAST, "-o", "t", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["t"]
    consistent(tmp_path / "t")


# --- full, read-only and busy file systems -------------------------------------------------------

@contextlib.contextmanager
def tmpfs(path: Path, opts: str):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs ({r.stderr.strip() or r.returncode}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_full_disk_is_one_line_exit_1_and_the_earlier_trace_survives(tmp_path):
    with tmpfs(tmp_path / "mnt", "size=2m") as mnt:
        assert cli("generate", *FAST, "-o", "mnt/t", cwd=tmp_path).returncode == 0   # ~200 KB: fits
        before = digest(mnt)
        res = cli("generate", "-q", "--no-ns3", "-o", "mnt/t", cwd=tmp_path)       # ~70 MB of pcaps
        line = error_line(res, code=1)
        assert "cannot write mnt/t" in line and "ENOSPC" in line and "earlier trace there is unchanged" in line
        assert digest(mnt) == before
        consistent(mnt / "t")
        res = cli("generate", "-q", "--no-ns3", "-o", "mnt/fresh", cwd=tmp_path)
        assert "nothing was written" in error_line(res, code=1)
        assert digest(mnt) == before


def test_read_only_target_is_one_line_exit_1(tmp_path):
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        line = error_line(cli("generate", *FAST, "-o", "ro/t", cwd=tmp_path), code=1)
        assert "EROFS" in line and "read-only" in line
        assert os.listdir(ro) == []


def test_mount_point_is_refused_force_writes_inside(tmp_path):
    with tmpfs(tmp_path / "mnt", "size=4m") as mnt:
        (mnt / "data.bin").write_bytes(b"1" * 100)
        line = error_line(cli("generate", *FAST, "-o", "mnt", cwd=tmp_path))
        assert "it is a mount point" in line
        res = cli("generate", *FAST, "-o", "mnt", "--force", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert (mnt / "data.bin").read_bytes() == b"1" * 100 and (mnt / "flows.csv").is_file()


# --- two runs at once ----------------------------------------------------------------------------

def test_two_concurrent_runs_one_wins_the_other_is_told(tmp_path):
    a = start("generate", *BIG, "-o", "t", cwd=tmp_path)
    wait_for(lambda: (tmp_path / ".t.lock").exists(), a)
    b = cli("generate", *FAST, "-o", "t", cwd=tmp_path)
    line = error_line(b)
    assert f"another tracegen run (pid {a.pid}) is writing t" in line
    _, err = a.communicate(timeout=300)
    assert a.returncode == 0, err
    man = consistent(tmp_path / "t")
    assert any(f.startswith("pcap/") for f in man["files"])     # a's trace, whole
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_two_runs_started_together_never_mix(tmp_path):
    procs = [start("generate", "-q", "--no-ns3", *extra, "-o", "t", cwd=tmp_path)
             for extra in (["--format", "pcap"], ["--format", "pcapng"])]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for rc, err in results:
        if rc == 2:
            assert "another tracegen run" in err and len(err.strip().splitlines()) == 1
    man = consistent(tmp_path / "t")
    kinds = {Path(f).suffix for f in man["files"] if f.startswith("pcap/")}
    assert len(kinds) == 1                                      # all .pcap or all .pcapng
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_sigterm_reaches_a_run_whose_parent_blocked_it(tmp_path):
    """The signal mask survives fork and exec: a parent (a test runner, a supervisor) that hands
    SIGTERM down blocked would have it wait unseen until the run ends (exit 0, the signal lost).
    The guarded section unblocks the signals it handles."""
    proc = subprocess.Popen([sys.executable, "-m", "tracegen.cli", "generate", *BIG, "-o", "t"], cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM]))
    wait_for(lambda: (tmp_path / ".t.lock").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err, (proc.returncode, err)
    assert os.listdir(tmp_path) == []
