"""Errors a user can act on: the CLI prints one line and exits 2."""


class ConfigError(ValueError):
    """A bad job description: the message names the key and the fix."""


class OutputError(RuntimeError):
    """An output cannot be written as asked (too large, unwritable path)."""
