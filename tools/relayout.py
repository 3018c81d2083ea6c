"""Move tracegen's modules into packages and rewrite every reference to them (issue 26).

    python tools/relayout.py ROOT tools/layout.map [--dry-run]

ROOT is a checkout (the lead's main after the merges, or a scratch copy). The map names moves,
one per line, `old.dotted.module new.dotted.module` (`new.pkg.__init__`: the module becomes the
package itself, its dotted name unchanged), `package NAME` followed by indented docstring lines
(written as NAME/__init__.py, or added to the docstring of a module that became that __init__),
and `main NAME` (a NAME/__main__.py, so `python -m NAME` keeps working).

What it does, for every move whose old file exists and whose new file does not (a line whose
module does not exist - yet, or any more - is skipped with a note, so the script can run again on
any tree; a second run changes nothing):
  * git mv old.py new.py (os.rename outside git), creating the package folders and __init__.py;
  * every `from ... import ...` of tracegen in every .py file of the tree (tracegen/, tests/, tools/,
    bench/, ns3_scenarios/, ...), read with `ast`: resolved to the module it names, re-rendered from
    the importer's new place (relative stays relative); a statement whose names now live in
    different packages is split; `from pkg import module` keeps binding the old name (`as`);
  * every dotted name `tracegen.a.b...` in any text file (import statements, mock/monkeypatch
    strings, `python -m ...`, docs, pyproject) and every path `tracegen/a/b.py` (and `emit/b.py`
    relative to tracegen/) in text: tools/mutate.py's mutation files, README, docs;
  * pyproject.toml's setuptools `packages` list gains every new package.
Never touched: the map, this script and its test (tests/test_relayout.py). Binary and non-UTF-8 files are left alone.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PKG = "tracegen"


# --- the map -----------------------------------------------------------------------------------

@dataclass
class Layout:
    moves: list[tuple[str, str]] = field(default_factory=list)      # (old dotted, new dotted incl. __init__)
    docs: dict[str, str] = field(default_factory=dict)              # package -> docstring
    mains: list[str] = field(default_factory=list)


def read_map(path: Path) -> Layout:
    lay, doc_of = Layout(), None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip() if not raw.startswith((" ", "\t")) else raw.rstrip()
        if not line.strip():
            if doc_of is not None and raw.strip() == "" and lay.docs.get(doc_of):
                lay.docs[doc_of] += "\n"
            continue
        if raw.startswith((" ", "\t")):
            if doc_of is None:
                sys.exit(f"{path}:{n}: an indented line belongs under `package NAME`")
            lay.docs[doc_of] += line.strip() + "\n"
            continue
        doc_of = None
        words = line.split()
        if words[0] == "package" and len(words) == 2:
            doc_of = words[1]
            lay.docs[doc_of] = ""
        elif words[0] == "main" and len(words) == 2:
            lay.mains.append(words[1])
        elif len(words) == 2 and all(re.fullmatch(r"[A-Za-z_][\w.]*", w) for w in words):
            lay.moves.append((words[0], words[1]))
        else:
            sys.exit(f"{path}:{n}: expected `old.module new.module`, `package NAME` or `main NAME`: {raw!r}")
    return lay


def dotted(name: str) -> str:
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def file_of(root: Path, name: str) -> Path:
    """The file of a module name as the map writes it (`a.b.__init__` -> a/b/__init__.py)."""
    return root.joinpath(*name.split(".")).with_suffix(".py")


# --- modules of a tree -------------------------------------------------------------------------

def modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in sorted((root / PKG).rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def text_files(root: Path, skip: set[Path]) -> list[Path]:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout.decode().split("\0")
        files = [root / f for f in out if f]
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = [f for f in root.rglob("*") if ".git" not in f.parts]
    keep = []
    for f in files:
        if f.resolve() in skip or not f.is_file() or f.is_symlink() or f.stat().st_size > 4 << 20:
            continue
        keep.append(f)
    return sorted(set(keep))


# --- rewriting ---------------------------------------------------------------------------------

class Rewriter:
    def __init__(self, root: Path, lay: Layout, active: list[tuple[str, str]]):
        self.root = root
        self.before = modules(root)
        self.rename = {old: dotted(new) for old, new in active if old != dotted(new)}
        self.where = {m: m for m in self.before}                  # module -> its name after the move
        self.where.update({old: dotted(new) for old, new in active})
        self.pkg_after = {m for m, f in self.before.items() if f.name == "__init__.py"}
        self.pkg_after |= {dotted(new) for _, new in active if new.endswith(".__init__")}
        for new in self.where.values():                           # every package above a module
            parts = new.split(".")
            self.pkg_after |= {".".join(parts[:k]) for k in range(1, len(parts))}
        self.pkg_after |= set(lay.docs)
        # children of a name that is also a package after the move: `tracegen.report.kpi` is
        # not the old module tracegen.report plus an attribute
        self.children: dict[str, set[str]] = {}
        for new in list(self.where.values()) + sorted(self.pkg_after):
            head, _, leaf = new.rpartition(".")
            self.children.setdefault(head, set()).add(leaf)
        rel = {}
        for old, new in self.rename.items():
            rel[self.path_of(old)] = self.path_of(new, new in self.pkg_after)
        self.paths = rel
        self.moved_files = {old for old, _ in active}           # their relative imports: from the new place

    def path_of(self, name: str, pkg: bool | None = None) -> str:
        pkg = name in self.pkg_after if pkg is None else pkg
        return "/".join(name.split(".")) + ("/__init__.py" if pkg else ".py")

    # dotted names and paths in any text
    def _dotted(self, m: re.Match) -> str:
        parts = m.group(0).split(".")
        for k in range(len(parts), 1, -1):
            head = ".".join(parts[:k])
            if head in self.rename:
                if k < len(parts) and parts[k] in self.children.get(head, ()):
                    return m.group(0)                 # already the new package's child
                return ".".join([self.rename[head]] + parts[k:])
        return m.group(0)

    def _path(self, m: re.Match) -> str:
        return self.paths.get(m.group(0), m.group(0))

    def _rel_path(self, m: re.Match) -> str:
        full = f"{PKG}/{m.group(0)}"
        return self.paths[full][len(PKG) + 1:] if full in self.paths else m.group(0)

    def text(self, s: str) -> str:
        s = re.sub(rf"(?<![\w./-]){PKG}(?:\.[A-Za-z_]\w*)+(?![\w/])", self._dotted, s)
        s = re.sub(rf"(?<![\w./-]){PKG}(?:/\w+)+\.py\b", self._path, s)
        return re.sub(r"(?<![\w./-])\w+(?:/\w+)+\.py\b", self._rel_path, s)

    # import statements of a .py file
    def imports(self, f: Path, src: str) -> str:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            return self.text(src)
        me_before = me_after = None
        is_pkg_file = f.name == "__init__.py"
        rel = f.relative_to(self.root).with_suffix("").parts
        if rel[0] == PKG:
            me_before = ".".join(rel[:-1] if is_pkg_file else rel)
            me_after = self.where.get(me_before, me_before)
        lines = src.encode().splitlines(keepends=True)
        starts = [0]
        for ln in lines:
            starts.append(starts[-1] + len(ln))
        data = src.encode()
        edits = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            new = self._from(node, me_before, me_after, is_pkg_file)
            if new is None:
                continue
            a = starts[node.lineno - 1] + node.col_offset
            b = starts[node.end_lineno - 1] + node.end_col_offset
            old = data[a:b].decode()
            line_end = data.find(b"\n", b)
            rest = data[b:line_end if line_end >= 0 else len(data)].decode()
            before_on_line = data[starts[node.lineno - 1]:a].decode()
            text = old if new is False else self._render(
                old, new, node.col_offset, one_line=bool(before_on_line.strip()) or bool(rest.split("#", 1)[0].strip()))
            edits.append((a, b, text))
        # the rest of the file gets the text pass; the statements rendered here do not (their new
        # names are final: `from tracegen.report import kpi` is the new package, not old report.py)
        out, at = [], 0
        for a, b, text in sorted(edits):
            out += [self.text(data[at:a].decode()), text]
            at = b
        out.append(self.text(data[at:].decode()))
        return "".join(out)

    def _from(self, node: ast.ImportFrom, me_before, me_after, is_pkg_file):
        """[(module text, [(name, asname)])] the statement should read, or None if not tracegen's."""
        if node.level:
            if me_before is None:
                return None
            base = me_before.split(".") if is_pkg_file else me_before.split(".")[:-1]
            if node.level - 1 > len(base) - 1:
                return None
            base = base[:len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not (target == PKG or target.startswith(PKG + ".")):
            return None
        if target not in self.before:
            return None
        groups: dict[str, list[tuple[str, str | None]]] = {}
        moved = me_before in self.moved_files or self.where[target] != target
        for al in node.names:
            sub = f"{target}.{al.name}"
            if sub in self.before:                                  # a module from its package
                new = self.where[sub]
                moved |= new != sub
                parent, _, leaf = new.rpartition(".")
                alias = al.asname or (al.name if leaf != al.name else None)
                groups.setdefault(parent, []).append((leaf, alias))
            else:
                groups.setdefault(self.where[target], []).append((al.name, al.asname))
        if not moved:
            return False                  # tracegen's, unchanged
        after_pkg = None
        if me_after is not None:
            mine = me_after in self.pkg_after
            after_pkg = me_after.split(".") if mine else me_after.split(".")[:-1]
        out = []
        for mod, names in groups.items():
            if node.level and after_pkg is not None:
                t = mod.split(".")
                c = 0
                while c < min(len(t), len(after_pkg)) and t[c] == after_pkg[c]:
                    c += 1
                text = "." * (len(after_pkg) - c + 1) + ".".join(t[c:])
            else:
                text = mod
            out.append((text, names))
        return out

    def _render(self, old: str, new, col: int, one_line: bool) -> str:
        m = re.match(r"from\s+([.\w]*)\s+import\b", old)
        olds = [(a.name, a.asname) for a in ast.parse(old.strip()).body[0].names]
        if len(new) == 1 and new[0][1] == olds:                 # only the module moved: keep the layout
            head, _, rest = (old[:m.start(1)] + new[0][0] + old[m.end(1):]).partition("\n")
            shift = len(new[0][0]) - len(m.group(1))                # continuation lines stay aligned
            if rest and shift:
                rest = "\n".join(" " * shift + ln if shift > 0 else ln[min(-shift, len(ln) - len(ln.lstrip())):]
                                 for ln in rest.split("\n"))
            return head + ("\n" + rest if rest else "")
        stmts = []
        for mod, names in new:
            body = ", ".join(n if a is None else f"{n} as {a}" for n, a in names)
            stmt = f"from {mod} import {body}"
            if len(stmt) + col > 110 and not one_line:
                stmt = f"from {mod} import ({body})"
                width, lines, cur = 110 - col, [], ""
                for word in stmt.split(" "):
                    if cur and len(cur) + 1 + len(word) > width:
                        lines.append(cur)
                        cur = " " * (len(f"from {mod} import (")) + word
                    else:
                        cur = f"{cur} {word}" if cur else word
                lines.append(cur)
                stmt = ("\n" + " " * col).join(lines)
            stmts.append(stmt)
        return ("; " if one_line else "\n" + " " * col).join(stmts)


# --- the run -----------------------------------------------------------------------------------

def git(root: Path, *args) -> bool:
    if not (root / ".git").exists():
        return False
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True).returncode == 0


def add_doc(src: str, doc: str) -> str:
    """Append the package's paragraph to a module docstring that became the package's __init__."""
    tree = ast.parse(src)
    first = tree.body[0] if tree.body else None
    para = doc.strip()
    if para.splitlines()[0] in src:
        return src
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)):
        return f'"""{para}\n"""\n' + src
    lines = src.splitlines(keepends=True)
    end_line = lines[first.end_lineno - 1]
    q = end_line.rstrip().rfind('"""')
    text = end_line[:q].rstrip()
    lines[first.end_lineno - 1] = (text + "\n\n" if text else "\n") + para + "\n" + end_line[q:]
    return "".join(lines)


def update_pyproject(root: Path, say) -> None:
    p = root / "pyproject.toml"
    if not p.exists():
        return
    s = p.read_text(encoding="utf-8")
    m = re.search(r"(?m)^packages\s*=\s*\[(.*?)\]", s, re.S)
    if not m:
        return
    listed = re.findall(r'"([^"]+)"', m.group(1))
    have = sorted(".".join(f.parent.relative_to(root).parts) for f in (root / PKG).rglob("__init__.py"))
    missing = [x for x in have if x not in listed]
    gone = [x for x in listed if x.startswith(PKG + ".") and x != f"{PKG}.templates" and x not in have]
    if not missing and not gone:
        return
    names = sorted([x for x in listed if x.startswith(PKG) and x not in gone] + missing,
                   key=lambda x: (x == f"{PKG}.templates", x)) + [x for x in listed if not x.startswith(PKG)]
    pad = " " * len("packages = [")
    lines, cur = [], ""
    for n in names:
        w = f'"{n}", '
        if cur and len(pad) + len(cur) + len(w) > 104:
            lines.append(cur.rstrip())
            cur = ""
        cur += w
    lines.append(cur.rstrip().rstrip(","))
    s = s[:m.start()] + "packages = [" + ("\n" + pad).join(lines) + "]" + s[m.end():]
    p.write_text(s, encoding="utf-8")
    say(f"pyproject.toml: packages + {', '.join(missing)}" + (f" - {', '.join(gone)}" if gone else ""))


def run(root: Path, map_path: Path, dry: bool = False) -> int:
    lay = read_map(map_path)
    say = print
    active = []
    for old, new in lay.moves:
        src, dst = file_of(root, old), file_of(root, new)
        if src.exists() and dst.exists():
            sys.exit(f"{old}: both {src.relative_to(root)} and {dst.relative_to(root)} exist; merge them by hand")
        if src.exists():
            active.append((old, new))
        elif not dst.exists():
            say(f"skip {old}: no {src.relative_to(root)} in this tree (yet)")
    # modules of tracegen/ that the map does not place (a new file of a merged branch)
    placed = {old for old, _ in lay.moves} | {dotted(new) for _, new in lay.moves}
    for m, f in modules(root).items():
        flat = m.count(".") == 1 or (m.startswith(f"{PKG}.emit.") and m.count(".") == 2)
        if m not in placed and f.name != "__init__.py" and flat and m.split(".", 1)[1] not in {
                "errors", "progress", "tables", "pipeline", "shipped", "emit.bundle"}:
            say(f"note: {f.relative_to(root)} is not in the map (stays where it is)")
    if not active and not lay.docs and not lay.mains:
        return 0
    rw = Rewriter(root, lay, active)
    skip = {map_path.resolve(), Path(__file__).resolve(),      # and the tree's own copies
            (root / "tools" / "relayout.py").resolve(), (root / "tools" / map_path.name).resolve(),
            (root / "tests" / "test_relayout.py").resolve()}            # its made-up tree stays as it is
    # 1. rewrite references, in the old places (ast positions are the files' own)
    changed = 0
    if active:
        for f in text_files(root, skip):
            try:
                s = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            t = rw.imports(f, s) if f.suffix == ".py" else rw.text(s)
            if t != s:
                changed += 1
                say(f"rewrite {f.relative_to(root)}")
                if not dry:
                    f.write_text(t, encoding="utf-8")
    # 2. move the files
    for old, new in active:
        src, dst = file_of(root, old), file_of(root, new)
        say(f"move {src.relative_to(root)} -> {dst.relative_to(root)}")
        if dry:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not git(root, "mv", str(src.relative_to(root)), str(dst.relative_to(root))):
            os.rename(src, dst)
    # 3. packages: __init__ docstrings, __main__
    needed = dict(lay.docs)
    for _, new in active:                         # every package a moved module lands in
        parts = dotted(new).split(".")
        for k in range(2, len(parts) + (new.endswith(".__init__"))):
            needed.setdefault(".".join(parts[:k]), f"{'.'.join(parts[:k])} (no docstring in the map yet).")
    for pkg, doc in needed.items():
        init = root.joinpath(*pkg.split(".")) / "__init__.py"
        if dry:
            continue
        if not init.parent.is_dir():
            continue                   # nothing of the package in this tree
        if init.exists():
            if pkg not in lay.docs:
                continue
            s = init.read_text(encoding="utf-8")
            t = add_doc(s, doc)
            if t != s:
                init.write_text(t, encoding="utf-8")
                say(f"docstring + {init.relative_to(root)}")
        else:
            init.write_text(f'"""{doc.strip()}\n"""\n', encoding="utf-8")
            git(root, "add", str(init.relative_to(root)))
            say(f"create {init.relative_to(root)}")
    for pkg in lay.mains:
        main = root.joinpath(*pkg.split(".")) / "__main__.py"
        if dry or main.exists() or not main.parent.is_dir():
            continue
        main.write_text(f'"""`python -m {pkg}`: the `{PKG}` command ({pkg}.main)."""\nfrom . import main\n\nmain()\n',
                        encoding="utf-8")
        git(root, "add", str(main.relative_to(root)))
        say(f"create {main.relative_to(root)}")
    # 4. the package list of the wheel
    if not dry:
        update_pyproject(root, say)
    say(f"{len(active)} modules moved, {changed} files rewritten")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("map", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="Say what would change; change nothing.")
    a = ap.parse_args(argv)
    return run(a.root.resolve(), a.map.resolve(), a.dry_run)


if __name__ == "__main__":
    sys.exit(main())
