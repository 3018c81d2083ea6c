"""Topology files (`fabric.kind: file`): switches, links and each NIC's leaf from a YAML file,
read as strictly as a job file and checked whole before any fabric is built.

    switches: {leafA: 1, leafB: 1, s0: 2}       # name: tier (1 = leaf: NICs plug in there; 2, 3 above)
    links: [[leafA, s0, 400], [leafB, s0, 400, 500]]   # a, b, Gb/s (default: the NIC port), latency ns
    nics: [leafA, leafA, leafB, leafB]           # the leaf of each NIC, node-major; or {node0000-rail0: leafA, ...}
    description: "two leaves, one spine"         # optional

The file goes through config.read_yaml_file (size and depth caps, UTF-8, duplicate keys refused,
plain YAML only). Every value is checked for its type - a bool is not a number, a number is not a
name - and range (docs/limits.md's link rates and latencies); every link names two different
known switches; every NIC of the job sits on a tier-1 switch; every switch is linked, through some
chain, to the switches the NICs plug into. Each problem is one ConfigError naming the file, the
key and the fix.
"""
from __future__ import annotations

import re

import numpy as np

from ..config import FabricConfig, read_yaml_file, show_path
from ..errors import ConfigError

FILE_HELP = ("a topology file is a mapping with 'switches' ({name: tier}, tier 1 = leaf: NICs plug "
             "in there), 'links' ([[a, b, gbps, latency_ns], ...]; gbps and latency optional) and "
             "'nics' (the leaf of each NIC in NIC order, or {nic name: leaf})")
KEYS = ("switches", "links", "nics", "description")
MAX_GBPS = 10_000_000          # as fabric.leaf_spine_gbps (docs/limits.md)
MAX_LATENCY_NS = 100_000_000   # as fabric.link_latency_ns

_SWITCH_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)      # YAML's true is not 1 Gb/s


def _kind(v) -> str:
    return {bool: "a boolean", type(None): "empty", str: "text", int: "an integer", float: "a number",
            list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)


def _short(v, n: int = 40) -> str:
    text = repr(v) if isinstance(v, (str, int, float, bool)) or v is None else _kind(v)
    return text if len(text) <= n else text[:n - 3] + "..."


def read_topology(fc: FabricConfig, nodes: int, nics: int, port_gbps: int):
    """(names, tiers, links [[a, b, gbps, latency_ns]], nic_leaf [n_nics]) of a topology file,
    switches as indices into names."""
    if not fc.file:
        raise ConfigError("fabric.kind=file needs fabric.file: the path of a topology YAML")
    where = f"fabric.file {show_path(fc.file)}"
    try:
        doc = read_yaml_file(fc.file, "topology file")
    except ConfigError as e:
        raise ConfigError(f"fabric.file: {e}") from None
    missing = [k for k in KEYS[:3] if k not in doc]
    unknown = [str(k) for k in doc if k not in KEYS]
    if missing or unknown:
        what = (f"no {', '.join(repr(k) for k in missing)}" if missing else
                f"unknown key {_short(unknown[0])} (keys: {', '.join(KEYS)})")
        raise ConfigError(f"{where}: {what}; {FILE_HELP}")
    if "description" in doc and not isinstance(doc["description"], str):
        raise ConfigError(f"{where}: description is {_kind(doc['description'])}; make it text")
    names, tiers = _switches(doc["switches"], where)
    idx = {n: i for i, n in enumerate(names)}
    links = _links(doc["links"], idx, where, port_gbps, fc.link_latency_ns)
    nic_leaf = _nics(doc["nics"], idx, tiers, nodes, nics, where)
    _check_connected(names, links, nic_leaf, where)
    return names, tiers, links, nic_leaf


def _switches(sw, where: str) -> tuple[list[str], list[int]]:
    if not isinstance(sw, dict) or not sw:
        what = "an empty mapping" if isinstance(sw, dict) else _kind(sw)
        raise ConfigError(f"{where}: switches is {what}; map switch names to tiers, "
                          "e.g. {leaf0: 1, spine0: 2}")
    names, tiers = [], []
    for n, t in sw.items():
        # a name names files (switch views) and appears in reports: no paths, no NIC names
        if not isinstance(n, str) or not _SWITCH_NAME.fullmatch(n) or n.startswith("node"):
            raise ConfigError(f"{where}: switches: switch name {_short(n)}: use letters, digits, '.', "
                              "'_', '-' (a letter first, at most 64, not starting with 'node': NIC names do)")
        if not _is_int(t) or t not in (1, 2, 3):
            raise ConfigError(f"{where}: switches: {n} has tier {_short(t)}; use 1 (leaf), 2 or 3")
        names.append(n)
        tiers.append(t)
    if 1 not in tiers:
        raise ConfigError(f"{where}: switches: no tier-1 switch; NICs plug into tier 1 (leaves)")
    return names, tiers


def _links(links, idx: dict, where: str, port_gbps: int, latency_ns: int) -> list[tuple[int, int, int, int]]:
    if not isinstance(links, list):
        raise ConfigError(f"{where}: links is {_kind(links)}; give a list of [a, b, gbps, latency_ns]")
    out = []
    for k, ln in enumerate(links):
        at = f"{where}: links[{k}]"
        if not isinstance(ln, list) or not 2 <= len(ln) <= 4:
            raise ConfigError(f"{at} is {_short(ln) if not isinstance(ln, list) else f'a list of {len(ln)}'}; "
                              "give [a, b], [a, b, gbps] or [a, b, gbps, latency_ns]")
        for end in ln[:2]:
            if not isinstance(end, str) or end not in idx:
                raise ConfigError(f"{at}: {_short(end)} is not a switch named in 'switches'; "
                                  "name two of them")
        if ln[0] == ln[1]:
            raise ConfigError(f"{at}: links {ln[0]} to itself; name two different switches")
        gbps = ln[2] if len(ln) > 2 else port_gbps
        lat = ln[3] if len(ln) > 3 else latency_ns
        if not _is_int(gbps) or not 1 <= gbps <= MAX_GBPS:
            raise ConfigError(f"{at}: gbps is {_short(gbps)}; give an integer 1 .. {MAX_GBPS:,}")
        if not _is_int(lat) or not 0 <= lat <= MAX_LATENCY_NS:
            raise ConfigError(f"{at}: latency_ns is {_short(lat)}; give an integer 0 .. {MAX_LATENCY_NS:,}")
        out.append((idx[ln[0]], idx[ln[1]], gbps, lat))
    return out


def _nics(spec, idx: dict, tiers: list[int], nodes: int, nics: int, where: str) -> np.ndarray:
    n_nics = nodes * nics
    job = f"this job has {n_nics} NICs ({nodes} nodes x {nics})"
    if isinstance(spec, dict):
        names_of = {f"node{n // nics:04d}-rail{n % nics}": n for n in range(n_nics)}
        leaf: list = [None] * n_nics
        for k, v in spec.items():
            if not isinstance(k, str) or k not in names_of:
                raise ConfigError(f"{where}: nics: {_short(k)} is not a NIC of this job "
                                  f"(node0000-rail0 .. {list(names_of)[-1]})")
            leaf[names_of[k]] = v
        if None in leaf:
            first = list(names_of)[leaf.index(None)]
            raise ConfigError(f"{where}: nics places {len(spec)} of the NICs, not {first}; {job}: "
                              "give each its leaf")
    elif isinstance(spec, list):
        if len(spec) != n_nics:
            raise ConfigError(f"{where}: nics lists {len(spec)} leaves; {job}: list one leaf per NIC, "
                              "node-major")
        leaf = spec
    else:
        raise ConfigError(f"{where}: nics is {_kind(spec)}; give the leaf of each NIC as a list "
                          "(node-major) or {nic name: leaf}")
    out = np.zeros(n_nics, np.int64)
    for n, v in enumerate(leaf):
        if not isinstance(v, str) or v not in idx or tiers[idx[v]] != 1:
            raise ConfigError(f"{where}: nics: NIC {n} (node{n // nics:04d}-rail{n % nics}) on "
                              f"{_short(v)}, which is not a tier-1 switch of 'switches'; name a leaf")
        out[n] = idx[v]
    return out


def _check_connected(names: list[str], links, nic_leaf: np.ndarray, where: str) -> None:
    """Every switch reaches the NICs' leaves through links (union-find)."""
    parent = list(range(len(names)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b, _, _ in links:
        parent[root(a)] = root(b)
    home = root(int(nic_leaf[0]))
    cut = [n for i, n in enumerate(names) if root(i) != home]
    if cut:
        more = f" (and {len(cut) - 1} more)" if len(cut) > 1 else ""
        raise ConfigError(f"{where}: links: {cut[0]}{more} has no chain of links to "
                          f"{names[int(nic_leaf[0])]}, where NIC 0 plugs in; link it or remove it")
