"""pcap files written by a Dask cluster (`--workers`, emit/views/distributed.py) are byte-identical to
the single-process run's, for the host view and a switch view; an unreachable scheduler is one
line, exit 2, no output."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("distributed")
from tracegen.cli import main  # noqa: E402

JOB = ["--set", "parallelism.dp=4", "--set", "fabric=leaf-spine-2to1", "--no-ns3", "--collective", "pp,dp"]


def _files(d):
    return {p.name: p.read_bytes() for p in sorted((d / "pcap").iterdir())}


@pytest.mark.parametrize("view", [[], ["--switch", "leaf0"]])
def test_two_dask_workers_write_the_same_bytes(tmp_path, view):
    one = CliRunner().invoke(main, ["generate", "-q", *JOB, *view, "-o", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    two = CliRunner().invoke(main, ["generate", "-q", *JOB, *view, "--workers", "2", "-o", str(tmp_path / "two")])
    assert two.exit_code == 0, two.output
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert len(a) >= 2 and a == b


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    res = CliRunner().invoke(main, ["generate", "-q", *JOB, "--scheduler", "tcp://127.0.0.1:9", "-o",
                                    str(tmp_path / "x")])
    assert res.exit_code == 2 and "--scheduler" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_existing_scheduler_with_its_own_worker_processes_writes_the_same_bytes(tmp_path):
    """`--scheduler tcp://HOST:PORT`: a scheduler and 2 worker processes started with Dask's own
    command line (as a user runs them), tracegen run as a command; same files, same bytes."""
    import shutil
    import subprocess
    import sys
    from distributed import Client
    dask = shutil.which("dask")
    if dask is None:
        pytest.skip("the `dask` command is absent (pip install 'tracegen[dask]')")
    addr = f"tcp://127.0.0.1:{_free_port()}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", addr.rsplit(":", 1)[1],
                               "--no-dashboard"], **quiet)]
    try:
        procs.append(subprocess.Popen([dask, "worker", addr, "--nworkers", "2", "--nthreads", "1",
                                       "--no-dashboard"], **quiet))
        with Client(addr, timeout="30s") as c:
            c.wait_for_workers(2, timeout=60)
        cli = [sys.executable, "-c", "from tracegen.cli import main; main()", "generate", "-q", *JOB]
        one = subprocess.run(cli + ["-o", str(tmp_path / "one")], capture_output=True, text=True)
        assert one.returncode == 0, one.stderr
        two = subprocess.run(cli + ["--scheduler", addr, "-o", str(tmp_path / "two")], capture_output=True,
                             text=True)
        assert two.returncode == 0, two.stderr
        with Client(addr, timeout="30s") as c:         # the files were written by those workers
            ran = c.run(lambda dask_worker: dask_worker.state.executed_count)
        assert len(ran) == 2 and sum(ran.values()) >= len(_files(tmp_path / "two")), ran
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert len(a) >= 2 and a == b


def test_a_worker_dying_as_the_cluster_starts_is_one_line(tmp_path):
    """Every worker process exits as it starts (a preload that calls os._exit, as an OOM kill or
    a broken environment would): `distributed` raised "Nanny failed to start" through a
    traceback; now one line naming --workers, exit 1, no output folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    die = tmp_path / "die.py"
    die.write_text("import os\nos._exit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{die}"]'}
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-q", *JOB, "--workers", "2", "-o", "x"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: --workers 2: the local Dask cluster did not start"), lines
    assert sorted(os.listdir(tmp_path)) == ["die.py"]


@pytest.mark.parametrize("address", ["foo", "tcp://", "http://x:1", "tcp://[::1", "tcp://127.0.0.1:abc",
                                     "tcp://127.0.0.1:65536"])
def test_a_malformed_scheduler_address_is_refused_before_any_work(tmp_path, address):
    from tracegen.emit.views.distributed import check_scheduler
    from tracegen.errors import ConfigError
    with pytest.raises(ConfigError, match="give tcp://HOST:PORT"):
        check_scheduler(address)
    res = CliRunner().invoke(main, ["generate", "-q", *JOB, "--scheduler", address, "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and res.output.startswith("error: --scheduler") and res.output.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_well_formed_scheduler_addresses_pass():
    from tracegen.emit.views.distributed import check_scheduler
    for address in ("tcp://127.0.0.1:8786", "127.0.0.1:8786", "tls://sched-1.example.org:8786",
                    "tcp://[::1]:8786", "ws://host:1"):
        assert check_scheduler(address) == address
