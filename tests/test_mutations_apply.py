"""tools/mutate.py's mutations must still apply to the code: a refactor that moves a mutated line
fails here (update the mutation's text), not silently in the next mutation run."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mutate():
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "tools" / "mutate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_mutation_text_is_found_once():
    mutate = _mutate()
    assert len(mutate.MUTATIONS) >= 60
    assert mutate.check_mutations(ROOT) == []


def test_check_fails_loudly_on_a_stale_mutation(tmp_path, monkeypatch):
    """The check itself can fail: an old text that is not in the file is named."""
    mutate = _mutate()
    (tmp_path / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(mutate, "MUTATIONS", [("gone", "m.py", "x = 2", "x = 3"),
                                              ("ok", "m.py", "x = 1", "x = 0")])
    problems = mutate.check_mutations(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("gone: m.py: the old text occurs 0 times")
