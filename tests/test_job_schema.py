"""The JSON Schema for job files (tracegen/schema/job.schema.json), checked with the `jsonschema`
package: current with the key declarations, accepts every shipped preset and job, refuses what
the loader refuses key by key - a wrong type, a value out of range, an unknown key - at that
key's path."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tracegen import config
from tracegen.config import job_to_dict, load_job
from tracegen.config.schema import KEYS, TIME_KEYS, TIME_MAX_NS
from tracegen.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "tracegen" / "presets"
SCHEMA = json.loads(config.job_schema_path().read_text("utf-8"))
CHECK = jsonschema.Draft7Validator(SCHEMA)


def errors(doc) -> list[jsonschema.ValidationError]:
    return sorted(CHECK.iter_errors(doc), key=lambda e: list(e.absolute_path))


def test_the_shipped_schema_is_current_and_valid():
    assert config.job_schema_path().read_text("utf-8") == config.job_schema_text(), \
        "stale: python -m tracegen.config --schema"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert config.job_schema_path().is_relative_to(ROOT / "tracegen")      # package data (pyproject)


@pytest.mark.parametrize("path", sorted((PRESETS / "jobs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_job_and_its_resolved_form_is_valid(path):
    assert errors(yaml.safe_load(path.read_text("utf-8"))) == []
    resolved = job_to_dict(load_job(preset=path.stem))      # job.resolved.yaml: every key
    assert errors(json.loads(json.dumps(resolved))) == []


@pytest.mark.parametrize("path", sorted(p for kind in ("models", "clusters", "fabrics")
                                        for p in (PRESETS / kind).glob("*.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_shipped_section_preset_is_valid(path):
    sec = {"models": "model", "clusters": "cluster", "fabrics": "fabric"}[path.parent.name]
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc.pop("description")                              # the preset's own line, not a key
    assert errors({sec: doc}) == [] and errors({sec: path.stem}) == []


def test_wrong_type_and_unknown_key_are_refused_at_the_key():
    (e,) = errors({"model": {"layers": "four"}})
    assert list(e.absolute_path) == ["model", "layers"] and "'four' is not of type 'integer'" in e.message
    (e,) = errors({"cluster": {"mfu": True}})          # a bool is no number, as for the loader
    assert list(e.absolute_path) == ["cluster", "mfu"]
    (e,) = errors({"parallelism": {"tp": 2, "tpp": 2}})
    assert list(e.absolute_path) == ["parallelism"] and "'tpp' was unexpected" in e.message
    (e,) = errors({"modle": {}})
    assert list(e.absolute_path) == [] and "'modle' was unexpected" in e.message
    (e,) = errors({"fabric": {"kind": "torus"}})
    assert list(e.absolute_path) == ["fabric", "kind"]
    (e,) = errors({"model": "llama3-8c"})               # a preset name that is not shipped
    assert list(e.absolute_path) == ["model"]
    assert errors({"model": {"num_layers": 8}, "cluster": {"spines": 4}}) == []   # aliases, moved keys


def _bad_values(name, d):
    if name in TIME_KEYS:       # ISO 8601 with a timezone or epoch ns (an integer or digits)
        return [-1, 1.5, True, TIME_MAX_NS, "2026-12-04T09:00:00", "2026-12-04 09:00Z", "-5", "x" * 65]
    if d.choices:
        return ["no-such-choice" if isinstance(d.choices[0], str) else 3]
    if d.typ is bool:
        return ["yes", 1]
    if d.typ is str:
        return [3, "x" * 65_537]
    bad = ["3", True, d.hi * 2 + 1] + ([2.5] if d.typ is int else [])
    if d.lo is not None and d.lo > -1:
        bad.append(d.lo - 1)
    if d.zero_or:
        bad.append(d.zero_or[0] / 2)
    return bad


@pytest.mark.parametrize("name", list(KEYS))
def test_schema_and_loader_refuse_the_same_bad_values(name):
    sec, _, k = name.rpartition(".")
    d = KEYS[name]
    for bad in _bad_values(name, d):
        doc = {sec: {k: bad}} if sec else {k: bad}
        assert errors(doc), (name, bad)
        with pytest.raises(ConfigError, match=rf"^{name}"):
            config.job_from_dict(doc)
    goods = ["2026-12-04T09:00:00.123456789+01:00", "1970-01-01T00:00:00Z", "17", 17] if name in TIME_KEYS else []
    for good in ([d.lo, d.hi] if d.lo is not None else []) + list(d.choices) + [d.default] + goods:
        assert errors({sec: {k: good}} if sec else {k: good}) == [], (name, good)


def test_readme_points_editors_at_the_schema():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "# yaml-language-server: $schema=" in readme and "job.schema.json" in readme
    text = readme.split("**Editing job files.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    first = text.splitlines()[0]
    ref = first.partition("$schema=")[2]
    # the example's relative path, from a job file at the top of the checkout, reaches the shipped file
    assert (ROOT / ref).resolve() == config.job_schema_path().resolve(), first
    doc = yaml.safe_load(text)
    assert errors(doc) == []
    config.job_from_dict(doc)                           # and the loader takes it


# tests/bad_configs: the expected message on each file's first line says whether the loader
# refuses one key alone (its type, range or choices; an unknown key) or a rule between keys.
BAD = ROOT / "tests" / "bad_configs"
_ONE_KEY = re.compile(r"# expect: (?:[\w.]+: (?:must be|expected an? |'[^']*' is not accepted|\d+ is not accepted"
                      r"|a string of|\d+ characters|'[^']*' is not usable)|unknown key|did you mean)")
_BETWEEN = re.compile(r"# expect: [\w.]+=\S+ (?:has no effect with|does not divide|exceeds|needs|is above)")


def _bad(pattern):
    out = []
    for path in sorted(BAD.glob("*.yaml")):             # lab-*: the lab plan it names is at fault
        if not path.name.startswith("lab-") and pattern.match(path.read_text("utf-8", "replace")):
            out.append(path)
    return out


ONE_KEY, BETWEEN = _bad(_ONE_KEY), _bad(_BETWEEN)


def test_the_bad_config_corpus_is_sorted_into_both_kinds():
    assert len(ONE_KEY) >= 40 and len(BETWEEN) >= 40, (len(ONE_KEY), len(BETWEEN))


@pytest.mark.parametrize("path", ONE_KEY, ids=lambda p: p.stem)
def test_schema_refuses_each_bad_config_the_loader_refuses_for_one_key(path):
    assert errors(yaml.safe_load(path.read_text("utf-8"))), "the schema accepts it"


@pytest.mark.parametrize("path", BETWEEN, ids=lambda p: p.stem)
def test_schema_accepts_each_bad_config_refused_only_between_keys(path):
    # each key is in range alone: a schema that refused these would be stricter than the loader
    assert errors(yaml.safe_load(path.read_text("utf-8"))) == []


def test_the_command_prints_the_table_and_rewrites_a_stale_doc(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "tracegen.config", *a], env=env, cwd=tmp_path,
                                    capture_output=True, text=True)
    res = run("--limits")
    assert res.returncode == 0 and res.stdout == config.limits_markdown()
    doc = (ROOT / "docs" / "limits.md").read_text("utf-8")
    stale = tmp_path / "limits.md"
    stale.write_text(doc.replace("| 1 .. 1,000 |", "| 1 .. 999 |", 1), "utf-8")
    assert stale.read_text("utf-8") != doc
    assert run("--limits", str(stale)).returncode == 0 and stale.read_text("utf-8") == doc
    res = run("--bogus")
    assert res.returncode == 1 and res.stderr.strip().startswith("usage: python -m tracegen.config")
