"""The detached commands the console starts: ``disagg-tui ARGV`` in a session of its own, its output in a file.

Launching (``up``), stopping (``down``), benchmarks (``bench``) and campaigns (``run``) are the CLI's own commands:
the console only starts them and watches what they write (the state file, the logs, the run directories, a
benchmark's events). Whatever happens to the console (quit, a dropped SSH connection, a crash), a start goes on to
ready or failure, a stop completes, an overnight campaign keeps running, and a console opened later finds them.
No Textual here: the app calls these from workers.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tui.core import paths, safewrite
from tui.core.redact import redact_argv

#: where the detached commands' output goes
JOBS_DIR = "console-jobs"


def jobs_folder(jobs_dir: Path | None = None) -> Path:
    """The folder of the console's detached commands (``<state>/console-jobs``), made if missing."""
    folder = jobs_dir or (paths.state_dir() / JOBS_DIR)
    return paths.make_dirs(folder)  # in the state folder: checked, no link followed


@dataclass
class Job:
    """A detached CLI command: its argv, pid, and the file its output goes to."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else 0

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def shell(self) -> str:
        """The command as shown (a notification, the job's log), secrets redacted (``--env HF_TOKEN=...``)."""
        return " ".join(shlex.quote(a) for a in redact_argv(["disagg-tui", *self.argv]))

    def last_error(self) -> str:
        """The command's own one-line error (``disagg-tui: error: ...``), else its last non-empty line."""
        try:
            lines = [ln for ln in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        errors = [ln for ln in lines if "error:" in ln]
        return (errors or lines or [""])[-1].strip()


def start_job(name: str, argv: Sequence[str], *, jobs_dir: Path | None = None) -> Job:
    """``disagg-tui ARGV`` in its own session (an SSH drop or a crashed console leaves it running), stdin closed,
    stdout and stderr to ``<state>/console-jobs/<time>-<name>.log``. Blocking (a fork): call it from a thread."""
    log = jobs_folder(jobs_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{name}.log"
    job = Job(name=name, argv=list(argv), log=log)
    with safewrite.open_append(log, root=paths.root_for(log)) as out:
        out.write(f"$ {job.shell()}\n".encode())
        job.popen = subprocess.Popen([*paths.python_module_argv("tui"), *argv], env=paths.child_env(),
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, close_fds=True)
    return job
