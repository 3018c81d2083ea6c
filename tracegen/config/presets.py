"""Presets: named jobs, models, clusters and fabrics shipped as package data (tracegen/presets/),
read through importlib.resources so an installed wheel works.
May import: config.paths, config.values, config.yaml_files, errors.
"""
from __future__ import annotations

import difflib
from importlib import resources
from typing import Any

from .paths import rebase
from .values import show
from .yaml_files import parse_yaml
from ..errors import ConfigError


def preset_dir(kind: str):
    return resources.files("tracegen") / "presets" / kind


def preset_names(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in preset_dir(kind).iterdir() if p.name.endswith(".yaml"))


def read_preset(kind: str, name: Any, stack: tuple) -> dict:
    names = preset_names(kind)
    what = kind[:-1]    # "models" -> "model"
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(name[:100], names, n=1) if isinstance(name, str) else []
        hint = f"did you mean '{close[0]}'?" if close else "available: " + ", ".join(names)
        raise ConfigError(f"unknown {what} preset {show(name)} — {hint}")
    if (kind, name) in stack:
        raise ConfigError(f"{what} preset '{name}' includes itself")
    where = f"preset {kind}/{name}.yaml"
    doc = parse_yaml((preset_dir(kind) / f"{name}.yaml").read_text("utf-8"), where)
    doc.pop("description", None)
    sec = {"jobs": "", "fabrics": "fabric"}.get(kind)
    return doc if sec is None else rebase(doc, str(preset_dir(kind)), sec)


def list_presets() -> dict[str, list[tuple[str, str]]]:
    """{"jobs"|"models"|"clusters"|"fabrics": [(name, one-line description)]}, sorted by name."""
    def describe(kind: str, name: str) -> str:
        text = (preset_dir(kind) / f"{name}.yaml").read_text("utf-8")
        desc = parse_yaml(text, f"preset {kind}/{name}.yaml").get("description", "")
        return " ".join(str(desc).split())
    return {kind: [(n, describe(kind, n)) for n in preset_names(kind)]
            for kind in ("jobs", "models", "clusters", "fabrics")}
