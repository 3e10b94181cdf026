"""Errors are values with a title and a hint, rendered once by the front end.

The CLI prints ``err.one_line()`` and exits with ``err.exit_code``; the console shows a notification. Nothing
the operator did wrong should ever surface as a traceback.
"""

from __future__ import annotations

from pathlib import Path

# the sink's: an error quotes a value from outside printable, and modules import it from here too
from tui.core.printable import printable as printable

EXIT_OK = 0
EXIT_FAILED = 1  # the thing ran and failed (a server died, a run failed, a failing check)
EXIT_BAD_INPUT = 2  # bad input (profile, flag, file) or a refused plan


#: characters of an error's title (or hint) as printed: a value quoted from a file is cut, never printed whole
MAX_ERROR_CHARS = 1000


def _capped(text: str) -> str:
    """One printable line of at most :data:`MAX_ERROR_CHARS` characters."""
    return printable(text, MAX_ERROR_CHARS)


class AppError(Exception):
    """An error meant for the operator: a title, an optional hint and an exit code. Always one printable line
    (a newline or an escape sequence in a value it quotes is escaped) of at most :data:`MAX_ERROR_CHARS`."""

    exit_code: int = EXIT_FAILED

    def __init__(self, title: str, hint: str | None = None, *, exit_code: int | None = None) -> None:
        title = _capped(title)
        hint = _capped(hint) if hint is not None else None
        super().__init__(title)
        self.title = title
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def one_line(self) -> str:
        return f"{self.title} (hint: {self.hint})" if self.hint else self.title


class InputError(AppError):
    """Bad input: a file, a flag or a value. Names the file, line and field where it can."""

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        self.message = message
        where = ""
        if self.file is not None:
            where = self.file + (f":{line}" if line is not None else "") + ": "
        elif line is not None:
            where = f"line {line}: "
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}{what}{message}", hint)


class PlanRefused(AppError):
    """The planner refuses a request it cannot honour on this host (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class LayoutBusy(AppError):
    """Another layout is active on this host, or the GPUs asked for are held by one."""

    exit_code = EXIT_BAD_INPUT


class RunFailed(AppError):
    """Something ran and failed: a server died, a start stalled, a run failed."""

    exit_code = EXIT_FAILED
