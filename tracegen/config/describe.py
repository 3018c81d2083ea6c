"""What the key declarations give besides checks: docs/limits.md's key table and the JSON Schema of
job files (`python -m tracegen.config --limits [FILE] | --schema`, tracegen/config/__main__.py).
May import: config.schema, config.presets.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .presets import preset_names
from .schema import PRESET_DIRS, limits_markdown


# --- docs/limits.md and the JSON Schema for job files (tracegen/schema/job.schema.json) -------

def limits_doc(doc: str) -> str:
    """`doc` (docs/limits.md's text) with its key table - from the '| key |' header to the first
    blank line - replaced by the one the declarations give; the prose around it stays."""
    start = doc.index("| key | accepted | note |")
    end = doc.find("\n\n", start)
    return doc[:start] + limits_markdown() + (doc[end + 1:] if end >= 0 else "")


def job_schema_text() -> str:
    """The JSON Schema of job files, from the key declarations and the shipped presets' names."""
    from .schema import schema_text
    kinds = {"jobs": "jobs", **PRESET_DIRS}
    return schema_text({sec: preset_names(kind) for sec, kind in kinds.items()})


def job_schema_path() -> Path:
    """Where the shipped schema is (point an editor at it: README, 'Editing job files')."""
    from .schema import SCHEMA_PATH
    return SCHEMA_PATH


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tracegen.config --limits [docs/limits.md] | --schema`: print the limits table (or
    rewrite it in place in the doc named), or rewrite the shipped schema (tests check both are current)."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--limits"]:
        sys.stdout.write(limits_markdown())
    elif args[:1] == ["--limits"] and len(args) == 2:
        doc_path = Path(args[1])
        doc_path.write_text(limits_doc(doc_path.read_text("utf-8")), "utf-8")
    elif args == ["--schema"]:
        job_schema_path().parent.mkdir(exist_ok=True)
        job_schema_path().write_text(job_schema_text(), "utf-8")
        print(job_schema_path())
    else:
        sys.exit("usage: python -m tracegen.config --limits [docs/limits.md] | --schema")
