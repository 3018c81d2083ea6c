"""What ships in the wheel: the tracegen packages, the ns-3 programs (top-level `ns3_scenarios`)
and the templates (checkout `templates/` -> `tracegen/templates/`), and a non-editable install
that runs `tracegen ns3 run` from its own files (slow: builds a wheel into a fresh venv)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
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


@pytest.mark.slow
def test_wheel_installs_and_runs_ns3_from_its_own_files():
    """pip wheel . -> a fresh venv (system site-packages for numpy, ns3 etc.) -> pip install the
    wheel (not editable) -> from a dir outside the checkout, `tracegen generate` and
    `tracegen ns3 run` use the installed templates and ns-3 programs. The venv lives under a
    path without "test" in it: pip ns3 drops libraries from such paths."""
    if importlib_missing("ns"):
        pytest.skip("pip package ns3 is not installed")
    work = Path(tempfile.mkdtemp(prefix="tg-wheel-"))
    assert "test" not in str(work)
    try:
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                                "-q", "-w", str(work / "dist")], capture_output=True, text=True,
                               timeout=900)
        if build.returncode and re.search(r"(?i)network|connection|resolve|No matching dist",
                                          build.stderr):
            pytest.skip(f"cannot fetch the build backend: {build.stderr.strip()[-200:]}")
        assert build.returncode == 0, build.stderr
        wheel = next((work / "dist").glob("tracegen-*.whl"))
        names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)],
                               capture_output=True, text=True).stdout
        for f in ("ns3_scenarios/roce_nic.h", "ns3_scenarios/scenario.py",
                  "tracegen/templates/hpcc_config.txt", "tracegen/presets/"):
            assert f in names, f
        # nothing of the checkout on the path: what runs is what the wheel installed
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                        str(work / "venv")], check=True, timeout=300, env=env)
        py = work / "venv" / "bin" / "python"
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                        str(wheel)], check=True, timeout=600, env=env, cwd=work)
        where = subprocess.run(
            [str(py), "-c", "import tracegen, ns3_scenarios; print(tracegen.__file__); "
             "print(ns3_scenarios.__file__)"], capture_output=True, text=True, cwd=work,
            env=env)
        assert where.returncode == 0, where.stderr
        where = where.stdout.split()
        assert all(p.startswith(str(work / "venv")) for p in where), where
        exe = work / "venv" / "bin" / "tracegen"
        subprocess.run([str(exe), "generate", "-q", "--no-pcap", "-o", str(work / "trace")],
                       cwd=work, env=env, check=True, timeout=600)
        run = subprocess.run([str(exe), "ns3", "run", str(work / "trace")], cwd=work, env=env,
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr
        assert re.search(r" (\d+)/\1 flows", run.stdout) and "materialize" not in run.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def importlib_missing(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is None
