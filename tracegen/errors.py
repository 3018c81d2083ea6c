"""Errors a user can act on: the CLI prints one line and exits with `exit_code`.

  ConfigError  a bad job, topology file, lab plan or argument: the message names the key and
               the fix (exit 2);
  OutputError  an output cannot be written as asked: too large, a folder tracegen will not
               replace, an unusable path (exit 2);
  WriteError   the system refused a write that was asked correctly: disk full, read-only file
               system, permission, busy mount point (exit 1); an earlier trace is left intact;
  Interrupted  SIGINT / SIGTERM / SIGHUP arrived: the temp folder is removed (exit 128 + signal).
"""


class ConfigError(ValueError):
    """A bad job description: the message names the key and the fix."""
    exit_code = 2


class OutputError(RuntimeError):
    """An output cannot be written as asked (too large, a folder that is not ours, bad path)."""
    exit_code = 2


class WriteError(OutputError):
    """The operating system refused a write (ENOSPC, EROFS, EACCES, EBUSY, ...)."""
    exit_code = 1


class Interrupted(BaseException):
    """A signal asked tracegen to stop (BaseException, like KeyboardInterrupt: cleanup runs)."""

    def __init__(self, signum: int):
        import signal
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        self.written: str | None = None      # set when it arrived during a commit that completed
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
