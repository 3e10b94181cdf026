"""Running the CLI in-process (``tui.cli.main.main(argv)``) with stdout and stderr captured: the bad-input corpus
runs hundreds of cases without one interpreter start each."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def run_cli(argv: Sequence[str]) -> CliResult:
    """``disagg-tui ARGV`` in this process: its exit code (argparse's SystemExit included), stdout and stderr."""
    from tui.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except Exception:  # an escaped exception is what the corpus looks for: record it as the operator sees it
            import traceback

            err.write(traceback.format_exc())
            code = -1
    return CliResult(code, out.getvalue(), err.getvalue())


def no_traceback(res: CliResult) -> bool:
    text = res.out + res.err
    return "Traceback (most recent call last)" not in text and 'File "' not in text
