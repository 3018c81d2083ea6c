"""`tracegen presets`: the shipped job, model and cluster presets, one line each."""
from __future__ import annotations

import click

from ..config import list_presets


@click.command("presets")
def presets():
    """List the shipped job, model and cluster presets."""
    for kind, items in list_presets().items():
        click.echo(f"{kind}:")
        for name, desc in items:
            click.echo(f"  {name:<14} {desc}")
