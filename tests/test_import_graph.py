"""The house rules of ../shared/ARCHITECTURE.md, read off the source: tracegen's import graph (parsed
with `ast` here, nothing of tracegen is imported) has

  (a) no import circle between modules (lazy imports inside functions count: a circle is a circle),
  (b) no `_private` name imported from another module,
  (c) no import that goes up the stage order
        shared (errors, progress, tables, shipped, the package itself) < config < workload < fabric
        < collectives < timing < report (the volume table, KPIs: pure) < pipeline
        < scenario (several jobs on one fabric: runs the stages before it) < output (the output-folder guard) < emit < corpus (tokens: runs the pipeline) < cli.
      The pipeline sits below emit, not above: emit reads its `Run` (emit/bundle.py).

KNOWN lists today's exceptions, each by name. It can only shrink: an entry that no longer occurs
fails too (take it out), so a fixed circle cannot come back unnoticed. `python tests/test_import_graph.py`
prints the graph and every finding.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tracegen"

# Stage of a module: the longest matching prefix (whole dotted components) wins. Old (flat) and new
# (packages, tools/layout.map) names are both listed, so the table holds before and after the move.
STAGES = ["shared", "config", "workload", "fabric", "collectives", "timing", "report", "pipeline",
          "scenario", "output", "emit", "corpus", "cli"]
STAGE_OF = {
    "tracegen": "shared", "tracegen.errors": "shared", "tracegen.progress": "shared",
    "tracegen.tables": "shared", "tracegen.shipped": "shared",
    "tracegen.config": "config", "tracegen.config.schema": "config",
    "tracegen.workload": "workload",
    "tracegen.fabric": "fabric", "tracegen.fabric.topology": "fabric", "tracegen.fabric.kinds": "fabric",
    "tracegen.fabric.routing": "fabric", "tracegen.fabric.topology_file": "fabric",
    "tracegen.collectives": "collectives",
    "tracegen.timing": "timing", "tracegen.timing.connections": "timing", "tracegen.timing.fluid": "timing",
    "tracegen.timing.schedule": "timing", "tracegen.timing.schedule_conn": "timing", "tracegen.timing.work": "timing",
    "tracegen.timing.detail": "timing",
    "tracegen.output": "output", "tracegen.output.folder": "output", "tracegen.output.ownership": "output",
    "tracegen.output.guard": "output",
    "tracegen.report": "report", "tracegen.report.build": "report", "tracegen.report.kpi": "report",
    "tracegen.emit": "emit", "tracegen.emit.sims.ns3_compare": "emit",
    "tracegen.pipeline": "pipeline",
    "tracegen.scenario": "scenario",
    "tracegen.corpus": "corpus",
    "tracegen.cli": "cli", "tracegen.cli.common": "cli", "tracegen.cli.export": "cli",
    "tracegen.cli.tokens": "cli", "tracegen.cli.report": "cli", "tracegen.cli.collective": "cli",
    "tracegen.cli.generate": "cli", "tracegen.cli.plan": "cli", "tracegen.cli.presets": "cli", "tracegen.cli.ns3": "cli",
}

# Exceptions allowed: none - the package has no circle and no private crossing; add none. Circles: by
# edge: "a -> b" is an import of b in a that lies on a circle. Private names: "a -> b._name".
# Upward imports: "a -> b" (a's stage below b's).
KNOWN: set[str] = set()      # every circle and private crossing is gone; keep it so


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package (a package is its __init__)."""
    out = {}
    for f in sorted((root / PACKAGE).rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(root: Path = ROOT) -> list[tuple[str, str, str | None, int]]:
    """(importer, imported module, name taken from it or None, line) for every import of a
    tracegen module anywhere in a tracegen file, function-level ones included."""
    mods = module_files(root)
    out = []
    for mod, f in mods.items():
        is_pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                        out.append((mod, _deepest(a.name, mods), None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:                     # `from pkg import module`
                        out.append((mod, sub, None, node.lineno))
                    else:
                        out.append((mod, _deepest(target, mods), a.name, node.lineno))
    return out


def _deepest(name: str, mods: dict) -> str:
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def stage(mod: str) -> str | None:
    parts = mod.split(".")
    for n in range(len(parts), 0, -1):
        s = STAGE_OF.get(".".join(parts[:n]))
        if s is not None:
            return s
    return None


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _path(graph: dict[str, set[str]], a: str, b: str, within: set[str]) -> list[str]:
    """A shortest import path a -> ... -> b inside one circle (breadth first)."""
    prev, todo = {a: None}, [a]
    for v in todo:
        for w in sorted(graph.get(v, ())):
            if w in within and w not in prev:
                prev[w] = v
                todo.append(w)
    path, v = [], b
    while v is not None:
        path.append(v)
        v = prev[v]
    return path[::-1]


def findings(root: Path = ROOT) -> dict[str, str]:
    """Every finding -> why (the circle it lies on, the line)."""
    edges = imports(root)
    graph: dict[str, set[str]] = {m: set() for m in module_files(root)}
    where = {}
    for a, b, _, line in edges:
        if a != b:
            graph[a].add(b)
            where.setdefault((a, b), line)
    out = {}
    for comp in _sccs(graph):
        for a in sorted(comp):
            for b in sorted(graph[a] & comp):
                back = _path(graph, b, a, comp)
                out[f"circle: {a} -> {b}"] = f"line {where[a, b]}; circle {' -> '.join([a] + back)}"
    for a, b, name, line in edges:
        if name and name.startswith("_") and not name.startswith("__") and a != b:
            out[f"private: {a} -> {b}.{name}"] = f"line {line}"
    for a, b, _, line in edges:
        sa, sb = stage(a), stage(b)
        if sa is None or sb is None:
            out[f"unstaged: {a if sa is None else b}"] = "add its stage to STAGE_OF"
        elif STAGES.index(sb) > STAGES.index(sa):
            out[f"upward: {a} -> {b}"] = f"line {line}: {sa} imports {sb}"
    return out


def test_no_circle_private_name_or_upward_import():
    found = findings()
    new = {k: v for k, v in found.items() if k not in KNOWN}
    assert not new, "import rules broken (../shared/ARCHITECTURE.md, Rules of the house):\n" + "\n".join(
        f"  {k}  ({v})" for k, v in sorted(new.items()))


def test_known_exceptions_only_shrink():
    gone = sorted(KNOWN - set(findings()))
    assert not gone, "fixed - take out of KNOWN in tests/test_import_graph.py:\n" + "\n".join(f"  {k}" for k in gone)


def test_the_judge_sees_what_it_judges(tmp_path):
    """A circle, a private name and an upward import in a made-up package are all found."""
    pkg = tmp_path / PACKAGE
    (pkg / "emit").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "emit" / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def f():\n    from .emit import a\n")
    (pkg / "emit" / "a.py").write_text("from . import b\n")
    (pkg / "emit" / "b.py").write_text("from .a import _x\n")
    found = findings(tmp_path)
    assert {"circle: tracegen.emit.a -> tracegen.emit.b", "circle: tracegen.emit.b -> tracegen.emit.a",
            "private: tracegen.emit.b -> tracegen.emit.a._x",
            "upward: tracegen.config -> tracegen.emit.a"} <= set(found)


if __name__ == "__main__":
    for k, v in sorted(findings().items()):
        print(f"{'known ' if k in KNOWN else 'NEW   '}{k}  ({v})")


# emit's rooms (their package docstrings): what each may import of emit. The bundle (emit's own
# modules) writes them all and may import any.
EMIT_ROOMS_MAY_IMPORT = {
    "packets": {"packets"},
    "views": {"packets", "views"},
    "tables": {"tables"},
    "pictures": {"tables", "pictures"},
    "sims": {"packets", "views", "tables", "sims"},
}


def emit_room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["tracegen", "emit"] else None


def emit_room_findings(root: Path = ROOT) -> list[str]:
    out = []
    for a, b, _, line in imports(root):
        ra, rb = emit_room(a), emit_room(b)
        if ra in EMIT_ROOMS_MAY_IMPORT and rb is not None and rb not in EMIT_ROOMS_MAY_IMPORT[ra]:
            out.append(f"{a} -> {b} (line {line}): emit.{ra} may import only {sorted(EMIT_ROOMS_MAY_IMPORT[ra])}")
    return sorted(set(out))


def test_emit_rooms_import_only_the_rooms_below():
    bad = emit_room_findings()
    assert not bad, "emit's rooms (their __init__ docstrings):\n" + "\n".join(f"  {x}" for x in bad)


def test_the_emit_room_judge_sees_an_upward_import(tmp_path):
    pkg = tmp_path / PACKAGE
    for d in ("", "emit", "emit/packets", "emit/views"):
        (pkg / d).mkdir(parents=True, exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "emit" / "packets" / "plan.py").write_text("from ..views import files\n")
    (pkg / "emit" / "views" / "files.py").write_text("X = 1\n")
    assert [x.split(" (")[0] for x in emit_room_findings(tmp_path)] == [
        "tracegen.emit.packets.plan -> tracegen.emit.views.files"]


# cli/__init__'s rule: the commands' modules import common, never each other or the package (which
# imports them all to register them); common imports no command. __main__ runs the package's group.
def cli_findings(root: Path = ROOT) -> list[str]:
    out = []
    for a, b, _, line in imports(root):
        if a in ("tracegen.cli", "tracegen.cli.__main__") or not a.startswith("tracegen.cli."):
            continue
        if b == "tracegen.cli" or (b.startswith("tracegen.cli.") and b != "tracegen.cli.common"):
            out.append(f"{a} -> {b} (line {line}): a command's module imports only tracegen.cli.common")
    return sorted(set(out))


def test_cli_commands_import_common_only():
    bad = cli_findings()
    assert not bad, "tracegen/cli/__init__.py's rule:\n" + "\n".join(f"  {x}" for x in bad)


def test_the_cli_judge_sees_a_command_importing_another(tmp_path):
    pkg = tmp_path / PACKAGE / "cli"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import plan, generate\n")
    (pkg / "common.py").write_text("X = 1\n")
    (pkg / "plan.py").write_text("from .common import X\n")
    (pkg / "generate.py").write_text("def f():\n    from .plan import X\n    from . import main\n")
    assert [x.split(" (")[0] for x in cli_findings(tmp_path)] == [
        "tracegen.cli.generate -> tracegen.cli", "tracegen.cli.generate -> tracegen.cli.plan"]
