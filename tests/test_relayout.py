"""tools/relayout.py on a made-up tree: files moved, every kind of reference rewritten, the moved
package imports and runs, and a second run changes nothing."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "relayout.py"

FILES = {
    "tracegen/__init__.py": "",
    "tracegen/errors.py": "class ConfigError(Exception):\n    pass\n",
    "tracegen/topology.py": "from .errors import ConfigError\n\nFABRIC = 'fabric'\n",
    "tracegen/report.py": "from . import topology\n\nWHAT = topology.FABRIC + ' report'\n",
    "tracegen/kpi.py": "from .report import WHAT\n\nKPI = WHAT + ' kpi'\n",
    "tracegen/cli.py": ('"""The command."""\nfrom . import kpi, report, topology as topo\n'
                        "from .kpi import KPI; X = 1\n\n\ndef main():\n    print(KPI, topo.FABRIC)\n"),
    "tracegen/emit/__init__.py": "",
    "tracegen/emit/pcap.py": ("def f():\n    from ..topology import FABRIC\n    from .. import kpi as k\n"
                              "    return FABRIC, k.KPI\n"),
    "tests/test_x.py": ('from tracegen import kpi\nfrom tracegen.report import WHAT\n'
                        'PATCH = "tracegen.topology.FABRIC"\nCMD = "python -m tracegen.cli"\n'),
    "README.md": "See tracegen/topology.py and emit/pcap.py; `tracegen.kpi.KPI`; schema tracegen.report/1.\n",
    "pyproject.toml": '[tool.setuptools]\npackages = ["tracegen", "tracegen.emit"]\n',
}
MAP = """tracegen.topology  tracegen.fabric.topology
tracegen.report    tracegen.report.build
tracegen.kpi       tracegen.report.kpi
tracegen.cli       tracegen.cli.__init__
tracegen.emit.pcap tracegen.emit.views.pcap
tracegen.later     tracegen.fabric.later
main tracegen.cli
package tracegen.report
    The numbers of a schedule.
package tracegen.cli
    The package: commands.
"""


def relayout(root: Path, map_file: Path) -> str:
    res = subprocess.run([sys.executable, str(SCRIPT), str(root), str(map_file)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_relayout_moves_rewrites_and_is_idempotent(tmp_path):
    root = tmp_path / "tree"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    map_file = tmp_path / "layout.map"
    map_file.write_text(MAP)
    out = relayout(root, map_file)
    assert "skip tracegen.later" in out
    t = lambda name: (root / name).read_text()
    assert not (root / "tracegen/topology.py").exists() and not (root / "tracegen/cli.py").exists()
    assert t("tracegen/report/build.py").startswith("from ..fabric import topology\n")
    assert t("tracegen/report/kpi.py").startswith("from .build import WHAT\n")
    cli = t("tracegen/cli/__init__.py")
    assert "The package: commands." in cli
    assert "from ..report import kpi, build as report\nfrom ..fabric import topology as topo\n" in cli
    assert "from ..report.kpi import KPI; X = 1\n" in cli
    pcap = t("tracegen/emit/views/pcap.py")
    assert "    from ...fabric.topology import FABRIC\n    from ...report import kpi as k\n" in pcap
    assert t("tests/test_x.py") == ('from tracegen.report import kpi\nfrom tracegen.report.build import WHAT\n'
                                    'PATCH = "tracegen.fabric.topology.FABRIC"\nCMD = "python -m tracegen.cli"\n')
    assert t("README.md") == ("See tracegen/fabric/topology.py and emit/views/pcap.py; `tracegen.report.kpi.KPI`; "
                              "schema tracegen.report/1.\n")
    assert t("tracegen/report/__init__.py") == '"""The numbers of a schedule.\n"""\n'
    assert '"tracegen.emit.views"' in t("pyproject.toml") and '"tracegen.fabric"' in t("pyproject.toml")
    # the moved package runs, `python -m tracegen.cli` too
    res = subprocess.run([sys.executable, "-m", "tracegen.cli"], cwd=root, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout == "fabric report kpi fabric\n", res.stderr
    res = subprocess.run([sys.executable, "-c", "from tracegen.emit.views.pcap import f; print(f())"], cwd=root,
                         capture_output=True, text=True)
    assert res.stdout == "('fabric', 'fabric report kpi')\n", res.stderr
    # again: nothing to do
    snapshot = {f: f.read_bytes() for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts}
    assert "0 modules moved" in relayout(root, map_file) or "modules moved" not in relayout(root, map_file)
    assert snapshot == {f: f.read_bytes() for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts}
