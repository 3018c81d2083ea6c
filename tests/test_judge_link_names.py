"""Link directions are named from the sender to the receiver. summary.json lists every link
direction with its name 'A->B' and its tier ('NIC -> leaf', 'leaf -> spine', ...): the tier comes
from the fabric's link table, the name from Fabric.link_dir_name. Judged here from the text alone:
A's kind (a NIC name from nic_names, or a switch name's tier prefix) must be the tier's first word
and B's its second, and every direction appears once with its reverse."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tracegen.cli import main


def _kind(name: str, nics: set[str]) -> str:
    if name in nics:
        return "NIC"
    m = re.fullmatch(r"([a-z]+)\d+", name)
    assert m, f"not a NIC or switch name: {name}"
    return m.group(1)


@pytest.mark.parametrize("sets", [
    ["fabric.kind=leaf-spine", "fabric.nodes_per_leaf=2"],
    ["fabric.kind=fat-tree"],
], ids=["leaf-spine", "fat-tree"])
def test_link_names_run_from_sender_to_receiver(tmp_path, sets):
    args = ["generate", "-q", "--no-pcap", "--no-ns3", "-o", str(tmp_path / "t")]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "t" / "summary.json").read_text())
    nics = set(doc["nic_names"])
    links = doc["links"]
    tiers = set()
    for name, tier in zip(links["name"], links["tier"]):
        a, b = name.split("->")
        first, second = (w.strip() for w in tier.split("->"))
        assert (_kind(a, nics), _kind(b, nics)) == (first, second), (name, tier)
        tiers.add(tier)
    names = set(links["name"])
    assert len(names) == len(links["name"])
    assert all(f"{n.split('->')[1]}->{n.split('->')[0]}" in names for n in names)
    assert {"NIC -> leaf", "leaf -> NIC"} <= tiers and len(tiers) >= 4       # switch-to-switch links too
