"""pcap files written by a Dask cluster (`--workers N`: a local one; `--scheduler tcp://host:port`:
an existing one). One task per capture file: the wire plan (packets.Plan, built once by the caller)
is scattered to every worker, each task writes one whole file with pcap.write_file, so the bytes
are those of a single-process run. Needs `pip install 'tracegen[dask]'`."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import ConfigError


def _client(workers: int, scheduler: str):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--workers/--scheduler need Dask: pip install 'tracegen[dask]'") from None
    if scheduler:
        try:
            return Client(scheduler, timeout="10s"), None
        except OSError as e:
            raise ConfigError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({e})") from None
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster), cluster


def write_files(p, fset, specs, dest_dir: Path, total_bytes: int,
                progress: Callable[[int, int], None] | None, workers: int, scheduler: str) -> list[Path]:
    from distributed import as_completed
    from .pcap import write_file
    client, cluster = _client(workers, scheduler)
    try:
        plan = client.scatter(p, broadcast=True)
        futures = {client.submit(write_file, plan, fset, spec, dest_dir, pure=False): k
                   for k, spec in enumerate(specs)}
        paths: list[Path | None] = [None] * len(specs)
        done = 0
        for fut in as_completed(futures):
            path, nbytes = fut.result()
            paths[futures[fut]] = path
            done += nbytes
            if progress is not None:
                progress(done, total_bytes)
        return [path for path in paths if path is not None]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
