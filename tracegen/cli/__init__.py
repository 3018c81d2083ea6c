"""Command line: argv -> the pipeline stages, progress, exit codes.

User mistakes (ConfigError, OutputError, bad arguments) print one line and exit 2; a write the
system refuses (disk full, read-only, ...) exits 1; SIGINT/SIGTERM/SIGHUP exit 128 + signal.
Where `generate` writes, what it may replace and how (a temp folder swapped into place, a lock,
a manifest of our files): output/folder.py. Work is estimated and bounded before the pipeline:
timing/work.py.

The package: the group `main` here; a module per command (generate, plan, presets, ns3, tokens,
collective, report, export); what they share in common. Commands import common, never each other
or this package. The pipeline, numba and matplotlib load only once a job is valid: a mistake costs
~0.5 s.
"""
from __future__ import annotations

import sys

import click

from .. import __version__
from . import collective, export, generate, ns3, plan, presets, report, tokens
from .common import stages as _stages  # noqa: F401  (tests/test_stage_progress.py reads it here)


class _OneLineErrors(click.Group):
    """Usage errors (bad option values, unknown options) as one `error:` line, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except getattr(click.exceptions, "NoArgsIsHelpError", ()) as e:
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            click.echo(f"error: {' '.join(e.format_message().split())}{where}", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"error: {' '.join(e.format_message().split())}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_OneLineErrors)
@click.version_option(__version__)
def main() -> None:
    """tracegen: LLM training jobs -> timed collective flows -> RoCEv2 pcaps and ns-3 scenarios."""


# In this order (`tracegen --help` lists them sorted by name all the same).
for _command in (generate.generate, plan.plan, presets.presets, ns3.ns3_group, tokens.tokens,
                 collective.collective, report.report, export.export):
    main.add_command(_command)
