"""pcap files written by a Dask cluster (`--workers N`: a local one; `--scheduler tcp://host:port`:
an existing one). One task per capture file: the wire plan (packets.Plan, built once by the caller)
is scattered to every worker, each task writes one whole file with pcap.write_file, so the bytes
are those of a single-process run. Needs `pip install 'tracegen[dask]'`.

The scheduler's address is checked before any work (check_scheduler); a cluster that does not
start or a worker that dies is one line (a WriteError, exit 1: the system failed, not the user).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from ...config import show
from ...errors import ConfigError, WriteError

# Dask's comm schemes that reach another process (distributed.comm.registry): inproc is
# in-process only, ucx needs ucx-py.
SCHEMES = ("tcp", "tls", "ws", "wss")
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})")
_FIX = "give tcp://HOST:PORT (or tls://, ws://, wss://; an IPv6 host in brackets: tcp://[::1]:8786)"


def check_scheduler(address: str) -> str:
    """`--scheduler`: SCHEME://HOST:PORT or HOST:PORT (tcp), a port in 1..65535. Returns it."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in SCHEMES:
        raise ConfigError(f"--scheduler {show(address)}: scheme {show(scheme)} is not one of "
                          f"{', '.join(SCHEMES)}; {_FIX}")
    m = _HOST_PORT.fullmatch(rest)
    if not m or not 1 <= int(m.group("port")) <= 65535:
        raise ConfigError(f"--scheduler {show(address)}: not HOST:PORT with a port in 1..65535; {_FIX}")
    return address


def _client(workers: int, scheduler: str):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--workers/--scheduler need Dask: pip install 'tracegen[dask]'") from None
    if scheduler:
        check_scheduler(scheduler)
        try:
            return Client(scheduler, timeout="10s"), None
        except (OSError, ValueError) as e:
            raise ConfigError(f"--scheduler {show(scheduler)}: cannot reach the Dask scheduler "
                              f"({' '.join(str(e).split())[:160]})") from None
    try:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    except Exception as e:        # a worker process died as it started (RuntimeError "Nanny failed to start", ...)
        raise WriteError(f"--workers {workers}: the local Dask cluster did not start ({_why(e)}); "
                         "run without --workers, or with fewer") from None
    try:
        return Client(cluster), cluster
    except Exception as e:
        cluster.close()
        raise WriteError(f"--workers {workers}: cannot connect to the local Dask cluster ({_why(e)}); "
                         "run without --workers") from None


def _why(e: BaseException) -> str:
    """The exception and its causes, one short line."""
    parts = []
    while e is not None and len(parts) < 3:
        text = " ".join(str(e).split())
        parts.append(f"{type(e).__name__}: {text}" if text else type(e).__name__)
        e = e.__cause__ or e.__context__
    return "; ".join(parts)[:200]


def write_files(write_file: Callable, p, fset, specs, dest_dir: Path, total_bytes: int,
                progress: Callable[[int, int], None] | None, workers: int, scheduler: str) -> list[Path]:
    """Each capture file written whole by one worker, with the caller's
    write_file(plan, fset, spec, dest_dir) -> (path, bytes) (pcap.write_file: passed in, so this
    module never imports the writer that calls it)."""
    from distributed import as_completed
    client, cluster = _client(workers, scheduler)
    try:
        plan = client.scatter(p, broadcast=True)
        futures = {client.submit(write_file, plan, fset, spec, dest_dir, pure=False): k
                   for k, spec in enumerate(specs)}
        paths: list[Path | None] = [None] * len(specs)
        done = 0
        for fut in as_completed(futures):
            try:
                path, nbytes = fut.result()
            except OSError:
                raise                     # the worker's own write failed: ENOSPC, EROFS, ... (outdir)
            except Exception as e:        # KilledWorker, a lost scheduler, ...
                where = f"--scheduler {scheduler}" if scheduler else f"--workers {workers}"
                raise WriteError(f"{where}: a Dask worker failed while writing {specs[futures[fut]]!s:.60} "
                                 f"({_why(e)}); run again, or without Dask") from None
            paths[futures[fut]] = path
            done += nbytes
            if progress is not None:
                progress(done, total_bytes)
        return [path for path in paths if path is not None]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
