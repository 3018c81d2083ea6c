"""Session hooks for the whole suite: no silent skips.

Every run ends with the reasons of the tests it skipped, counted. Under CI (`.ci/run` exports
TRACEGEN_CI=1) a skip fails the session unless its reason is on ALLOWED *and* the tool it names is
really absent on this machine, checked at the end of the run: a missing apt tool that CI could not
install (not root, no apt-get) may skip; anything CI installs (the pip `[test]` extras: scapy,
ns3) and every other reason - a failing ns-3 build, a broken binding - fails CI.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter

import pytest

CI_ENV = "TRACEGEN_CI"


def _missing(*tools):
    return lambda which, euid: any(which(t) is None for t in tools)


def _not_root(which, euid):
    return euid != 0


def _no_netns(which, euid):
    if which("unshare") is None:
        return True
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0


# (reason pattern, is the thing it names really absent here?)
ALLOWED = [
    (r"\btshark\b.*not installed|tshark/capinfos not installed", _missing("tshark", "capinfos")),
    (r"^needs root\b", _not_root),
    (r"^needs [\w, ]+ \(apt-get install", _missing("tcpreplay", "tcpdump", "ip")),
    (r"^no network namespace here", _no_netns),
]

_skips: list[tuple[str, str]] = []


def _reason(report) -> str:
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text.removeprefix("Skipped: ")


def unexpected_skips(skips, which=shutil.which, euid=None) -> list[tuple[str, str]]:
    """The (nodeid, reason) skips CI must not accept."""
    euid = os.geteuid() if euid is None else euid
    ok = lambda reason: any(re.search(p, reason) and absent(which, euid) for p, absent in ALLOWED)
    return [(node, reason) for node, reason in skips if not ok(reason)]


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _reason(report)))
    if report.failed:
        _failed_modules.add(report.nodeid.split("::")[0])


# Disk: the whole suite writes ~20 GB of pcaps and folders (a CI run once died of a full disk). Every
# module's temporary folders (tmp_path_factory's, so the module-scoped fixtures' too) are removed when
# the module ends without a failure, so the suite holds one module's files at a time; a failing
# module's stay for inspection (and per-test tmp_path follows tmp_path_retention_policy = "failed").
_failed_modules: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def _module_tmp_cleanup(request, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    before = set(os.listdir(base))
    yield
    if request.node.nodeid.split("::")[0] in _failed_modules:
        return
    for name in set(os.listdir(base)) - before:
        shutil.rmtree(base / name, ignore_errors=True)


def pytest_collectreport(report):
    if report.skipped:
        _skips.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(CI_ENV) and unexpected_skips(_skips) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _skips:
        return
    tr = terminalreporter
    tr.section(f"skipped: {len(_skips)}")
    for reason, n in Counter(r for _, r in _skips).most_common():
        first = next(node for node, r in _skips if r == reason)
        tr.write_line(f"{n:4d} x {reason}  (e.g. {first})")
    if os.environ.get(CI_ENV):
        bad = unexpected_skips(_skips)
        if bad:
            tr.write_line(f"{CI_ENV}: {len(bad)} skip(s) not allowed in CI (a tool CI installs, or not a "
                          "missing tool at all) - failing the run:", red=True, bold=True)
            for node, reason in bad[:20]:
                tr.write_line(f"  {node}: {reason}", red=True)
        else:
            tr.write_line(f"{CI_ENV}: every skip names a tool that is absent on this machine")
