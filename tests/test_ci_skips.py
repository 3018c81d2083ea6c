"""tests/conftest.py: skip reasons are printed, and under TRACEGEN_CI=1 a skip fails the run unless
it names a tool that is really absent."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

HERE = Path(__file__).resolve().parent
absent = lambda tool: None
present = lambda tool: f"/usr/bin/{tool}"


@pytest.mark.parametrize("reason,which,euid,allowed", [
    ("tshark is not installed", absent, 0, True),
    ("tshark is not installed", present, 0, False),               # installed: the skip hides a bug
    ("tshark/capinfos not installed", absent, 0, True),
    ("needs root (network namespaces)", present, 1000, True),
    ("needs root (network namespaces)", present, 0, False),
    ("needs tcpreplay (apt-get install tcpreplay tcpdump iproute2)", absent, 0, True),
    ("needs tcpreplay (apt-get install tcpreplay tcpdump iproute2)", present, 0, False),
    ("pip package ns3 (ns-3 Python bindings) is not installed: pip install 'ns3>=3.44'", absent, 0, False),
    ("ns-3 bindings do not load: SyntaxError: roce_nic.h:12", present, 0, False),
    ("could not import 'scapy.all': No module named 'scapy'", absent, 0, False),
])
def test_allow_list(reason, which, euid, allowed):
    bad = conftest.unexpected_skips([("t::x", reason)], which=which, euid=euid)
    assert (bad == []) == allowed


def _run(tmp_path: Path, ci: bool, body: str, collect_skip: bool = True):
    (tmp_path / "conftest.py").write_text((HERE / "conftest.py").read_text())
    (tmp_path / "test_some.py").write_text(body)
    if collect_skip:
        (tmp_path / "test_collect.py").write_text("import pytest\npytest.importorskip('no_such_module_tg18')\n")
    env = {k: v for k, v in os.environ.items() if k != conftest.CI_ENV}
    if ci:
        env[conftest.CI_ENV] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


BODY = """
import pytest

def test_ok():
    pass

def test_broken_build():
    pytest.skip("ns-3 bindings do not load: RuntimeError: roce_nic.h failed to compile")

@pytest.mark.xfail(reason="known", strict=True)
def test_known():
    assert False
"""


def test_skips_are_listed_and_pass_outside_ci(tmp_path):
    res = _run(tmp_path, ci=False, body=BODY)
    assert res.returncode == 0, res.stdout
    assert "skipped: 2" in res.stdout
    assert "ns-3 bindings do not load: RuntimeError: roce_nic.h failed to compile" in res.stdout
    assert "no_such_module_tg18" in res.stdout


def test_unexpected_skips_fail_ci(tmp_path):
    res = _run(tmp_path, ci=True, body=BODY)
    assert res.returncode == 1, res.stdout
    assert "not allowed in CI" in res.stdout and "test_broken_build" in res.stdout
    assert "no_such_module_tg18" in res.stdout.split("not allowed in CI")[1]   # collection skips too


def test_ci_passes_without_skips(tmp_path):
    res = _run(tmp_path, ci=True, body="def test_ok():\n    pass\n", collect_skip=False)
    assert res.returncode == 0, res.stdout


def test_ci_runs_the_readme_test_command_with_the_flag():
    """.ci/run exports TRACEGEN_CI, then runs the README's test command character for character."""
    root = HERE.parent
    cmd = 'pip install -e ".[test]" && python -m pytest -q'
    assert f"\n{cmd}\n" in (root / "README.md").read_text()
    lines = [ln for ln in (root / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == cmd
    assert f"export {conftest.CI_ENV}=1" in lines
