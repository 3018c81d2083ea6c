"""What ships in the wheel: the tracegen packages, the ns-3 programs (top-level `ns3_scenarios`)
and the templates (checkout `templates/` -> `tracegen/templates/`); and the README's install, in
the order it is written, in a fresh venv (slow):

    python3 -m venv .venv && . .venv/bin/activate
    pip install . && tracegen generate              # the wheel, non-editable
    pip install -e ".[test]"                        # the test line, over the used wheel
    tracegen plan                                   # still works (issue 22)

The venv is made by the base interpreter (`sys._base_executable`), so it sees no site-packages
but its own, inside or outside an outer venv. Its dependencies are the ones this interpreter
already has: a folder of links to this interpreter's site-packages entries (tracegen's own
excluded), named by a .pth file - no download but the build backend, offline after the first run.
"""
from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_of_the_tree_is_listed():
    st = pyproject()["tool"]["setuptools"]
    listed = set(st["packages"])
    tree = {".".join(p.parent.relative_to(ROOT).parts)
            for top in ("tracegen", "ns3_scenarios") for p in (ROOT / top).rglob("__init__.py")}
    assert tree <= listed, f"add to [tool.setuptools] packages: {sorted(tree - listed)}"
    assert st["package-dir"] == {"tracegen.templates": "templates"}
    assert listed - tree == {"tracegen.templates"}
    data = st["package-data"]
    assert "*.h" in data["ns3_scenarios"] and list((ROOT / "ns3_scenarios").glob("*.h"))
    assert data["tracegen.templates"] == ["*"]


def test_templates_resolve_from_the_checkout():
    from tracegen.shipped import template_text
    for name in ("hpcc_config.txt", "simai_config.txt", "ns3_readme.md"):
        assert template_text(name) == (ROOT / "templates" / name).read_text()


def test_numba_caches_go_to_the_user_cache_folder(tmp_path):
    """Importing tracegen points numba's cache at $XDG_CACHE_HOME/tracegen/numba (never the
    package's __pycache__), unless NUMBA_CACHE_DIR is set; a home it cannot write falls back to
    the temp folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["PYTHONPATH"] = str(ROOT)
    code = "import tracegen, numba.core.config as c, os; print(os.environ['NUMBA_CACHE_DIR']); print(c.CACHE_DIR)"
    ask = lambda **extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=tmp_path,
                                         capture_output=True, text=True, check=True).stdout.split("\n")[:2]
    assert ask(XDG_CACHE_HOME=str(tmp_path / "c")) == [str(tmp_path / "c" / "tracegen" / "numba")] * 2
    assert ask(NUMBA_CACHE_DIR=str(tmp_path / "mine")) == [str(tmp_path / "mine")] * 2
    home = tmp_path / "ro-home"
    home.mkdir(mode=0o555)
    if not os.access(home, os.W_OK):         # root writes anywhere: nothing to fall back from
        got = ask(HOME=str(home))
        assert got[0] == got[1] and got[0].startswith(tempfile.gettempdir()) and "tracegen" in got[0]
    # numba imported before tracegen: its config is pointed there too
    code2 = "import numba, tracegen, numba.core.config as c; print(c.CACHE_DIR)"
    out = subprocess.run([sys.executable, "-c", code2], env={**env, "XDG_CACHE_HOME": str(tmp_path / "d")},
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "d" / "tracegen" / "numba")


# --- the README's install, in a fresh venv -------------------------------------------------------

SKIP_TOP = {".git", "build", "dist", ".venv", ".pytest_cache", ".hypothesis"}


def _copy_checkout(dest: Path) -> None:
    """The checkout as a fresh clone has it (no build leftovers, no traces but the examples)."""
    def ignore(folder, names):
        here = Path(folder)
        drop = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if here == ROOT:
            drop |= SKIP_TOP & set(names)
        if here == ROOT / "traces":
            drop |= {n for n in names if n != "examples"}
        return drop
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def _site_dirs() -> list[Path]:
    """This interpreter's site-packages folders, in sys.path order (the checkout left out)."""
    out = []
    for p in sys.path:
        q = Path(p or ".").resolve()
        if q.name in ("site-packages", "dist-packages") and q.is_dir() and q not in out and q != ROOT:
            out.append(q)
    return out


def _ours(name: str) -> bool:
    n = name.lower()
    return (n.startswith(("tracegen", "__editable__", "ns3_scenarios")) or n.endswith(".pth")
            or n in ("__pycache__",))


def _dependency_farm(dest: Path) -> Path:
    """A folder of links to every entry of this interpreter's site-packages but tracegen's own
    (its package, dist-info, editable finder) and .pth hooks: the fresh venv's dependencies."""
    dest.mkdir()
    for site in _site_dirs():
        for entry in sorted(os.listdir(site)):
            if not _ours(entry) and not os.path.lexists(dest / entry):
                os.symlink(site / entry, dest / entry)
    return dest


class Venv:
    """A fresh venv of the base interpreter, used as the README's `. .venv/bin/activate` would."""

    def __init__(self, work: Path):
        self.dir = work / "venv"
        self.cache = work / "cache"            # XDG_CACHE_HOME: where numba's files must go
        self.log: list[tuple[str, float]] = []
        base = getattr(sys, "_base_executable", None) or sys.executable
        env = self.env()
        env.pop("VIRTUAL_ENV", None)
        subprocess.run([base, "-m", "venv", str(self.dir)], check=True, timeout=300, env=env)
        self.site = Path(subprocess.run(
            [str(self.dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, env=env).stdout.strip())
        assert self.site.is_relative_to(self.dir), self.site
        (self.site / "tracegen-test-deps.pth").write_text(f"{_dependency_farm(work / 'deps')}\n")

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "NUMBA_CACHE_DIR", "PYTHONDONTWRITEBYTECODE")}
        # pip keeps its cache where it was (the build backend downloads once); tracegen's goes to
        # the fresh XDG_CACHE_HOME, where the test looks for it
        pip_cache = os.environ.get("PIP_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pip")
        env.update(VIRTUAL_ENV=str(self.dir), PATH=f"{self.dir / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                   XDG_CACHE_HOME=str(self.cache), PIP_CACHE_DIR=pip_cache, PIP_DISABLE_PIP_VERSION_CHECK="1")
        return env

    def run(self, line: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
        """One shell line, as typed in the activated venv."""
        t0 = time.monotonic()
        res = subprocess.run(["bash", "-c", line], cwd=cwd, env=self.env(), capture_output=True,
                             text=True, timeout=timeout)
        self.log.append((line, time.monotonic() - t0))
        return res

    def record(self) -> set[str]:
        """Files the installed wheel's RECORD lists (relative to site-packages)."""
        info = next(self.site.glob("tracegen-*.dist-info"))
        with open(info / "RECORD", newline="") as f:
            return {row[0] for row in csv.reader(f) if row}

    def package_files(self) -> set[str]:
        out = set()
        for top in ("tracegen", "ns3_scenarios"):
            for p in (self.site / top).rglob("*"):
                if not p.is_dir():
                    out.add(str(p.relative_to(self.site)))
        return out


def _fetch_failed(res) -> bool:
    return res.returncode != 0 and bool(re.search(r"(?i)network|connection|resolve|No matching dist",
                                                 res.stdout + res.stderr))


@pytest.fixture(scope="module")
def readme_venv():
    """The README's two commands in a fresh venv: `pip install . && tracegen generate`, in a copy
    of the checkout. The folder has no "test" in its name: pip ns3 drops libraries from such paths."""
    work = Path(tempfile.mkdtemp(prefix="tg-wheel-"))
    assert "test" not in str(work)
    try:
        src = work / "tracegen-src"
        _copy_checkout(src)
        v = Venv(work)
        v.src = src
        v.installed = v.run("pip install .", cwd=src)
        if _fetch_failed(v.installed):
            pytest.skip(f"cannot fetch the build backend: {v.installed.stderr.strip()[-200:]}")
        assert v.installed.returncode == 0, v.installed.stderr[-3000:]
        v.generated = v.run("tracegen generate", cwd=src)
        yield v
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_install_runs_from_its_own_files_and_writes_nothing_inside_the_package(readme_venv):
    """`pip install .` is a real wheel install (tracegen from the venv, templates, presets and
    the ns-3 programs in its RECORD); `tracegen generate` writes the default trace and leaves no
    file in the installed package that pip would not remove (numba's cache is in
    $XDG_CACHE_HOME/tracegen/numba); `tracegen ns3 run` uses the installed ns-3 programs."""
    v = readme_venv
    assert v.generated.returncode == 0, v.generated.stderr[-3000:]
    assert (v.src / "traces" / "default" / "flows.csv").is_file()
    where = v.run("python -c 'import tracegen, ns3_scenarios; print(tracegen.__file__); "
                  "print(ns3_scenarios.__file__)'", cwd=v.src.parent)
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(v.site) for p in where.stdout.split()), where.stdout
    record = v.record()
    for f in ("ns3_scenarios/roce_nic.h", "ns3_scenarios/scenario.py", "tracegen/templates/hpcc_config.txt",
              "tracegen/presets/jobs/default.yaml", "tracegen/schema/job.schema.json"):
        assert f in record, f
    sim = v.src.parent / "sim-copy"          # a copy: the README's own trace stays as generate wrote it
    shutil.copytree(v.src / "traces" / "default", sim)
    run = v.run(f"tracegen ns3 run {sim}", cwd=v.src.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r" (\d+)/\1 flows", run.stdout) and "materialize" not in run.stderr
    extra = v.package_files() - record
    assert not extra, f"written inside the installed package: {sorted(extra)[:5]}"
    assert list((v.cache / "tracegen" / "numba").rglob("*.nbi")), "numba's cache is in the user's cache folder"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_order_then_the_test_extra_keeps_tracegen_working(readme_venv):
    """After the README's two commands, its test line `pip install -e ".[test]"` replaces the
    wheel by the editable checkout, and every command still works (it failed with "cannot
    import name '__version__' from 'tracegen' (unknown location)": numba's cache files kept
    site-packages/tracegen/ alive as a namespace package)."""
    v = readme_venv
    assert v.generated.returncode == 0, v.generated.stderr[-3000:]
    res = v.run('pip install -e ".[test]"', cwd=v.src)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (v.site / "tracegen").exists(), sorted(p.name for p in (v.site / "tracegen").rglob("*"))[:5]
    where = v.run("python -c 'import tracegen; print(tracegen.__file__)'", cwd=v.src.parent)
    assert where.returncode == 0 and Path(where.stdout.strip()) == v.src / "tracegen" / "__init__.py", \
        where.stdout + where.stderr
    plan = v.run("tracegen plan", cwd=v.src)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "generate would write traces/default/" in plan.stdout
    print("\n".join(f"{s:6.1f} s  {line}" for line, s in v.log))
