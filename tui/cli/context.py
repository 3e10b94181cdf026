"""What every command shares: global options, the catalogue, the host, and one-line output helpers."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from tui.cli.argtypes import bounded_int, nonneg_float, positive_float
from tui.cli.output import printable_stream
from tui.core.errors import InputError
from tui.core.plan.launchargs import add_vllm_argument

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tui.core.host.base import Host, HostOptions
    from tui.core.models import Catalog


class _SimFaults:
    """``--sim-fault``'s choices, read from the simulator when they are first needed (the option given, or help
    printed): a command that does not use the simulator does not load it."""

    @staticmethod
    def _names() -> tuple[str, ...]:
        from tui.hosts import SIM_FAULTS

        names: tuple[str, ...] = SIM_FAULTS
        return names

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def sim_gpu_count(text: str) -> int:
    """``--sim-gpus N``: 1 to the most GPUs a simulated host holds (the simulator says how many)."""
    from tui.hosts import MAX_SIM_GPUS

    return bounded_int(1, MAX_SIM_GPUS, " (a simulated host)")(text)


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """The options every command accepts (before or after the command name)."""
    default = None if top_level else argparse.SUPPRESS
    g = parser.add_argument_group("host")
    g.add_argument("--sim", action="store_true", default=False if top_level else argparse.SUPPRESS,
                   help="use the simulated host (automatic when no NVIDIA driver answers)")
    g.add_argument("--sim-gpu", choices=("b200", "h200"), default=default,
                   help="simulated GPU model (default b200)")
    g.add_argument("--sim-gpus", type=sim_gpu_count, default=default, metavar="N",
                   help="number of simulated GPUs (default 2; at most as many as one NVLink domain holds, GB200 "
                        "NVL72's)")
    g.add_argument("--sim-fault", action="append", choices=_SimFaults(), default=default, metavar="NAME",
                   help="inject a known failure into simulated servers (repeatable): %(choices)s")
    g.add_argument("--sim-startup", type=nonneg_float, default=default, metavar="SECONDS",
                   help="how long a simulated cold start takes (default compressed to ~4 s; 0 = real-time ~2-15 min)")
    g.add_argument("--sim-clock", type=positive_float, default=default, metavar="X",
                   help="simulated token pacing speed-up (default 1 = real time)")
    g.add_argument("--api-key", default=default, metavar="KEY",
                   help="vLLM's API key: servers started here require it, bench and run send it (default: "
                        "$VLLM_API_KEY); never shown in plans or written to state, logs or results")
    add_vllm_argument(g, default=default)


def add_hosts_option(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """``--hosts NAME,NAME|all`` (the console's; bare ``disagg-tui --hosts a,b`` opens the console with them)."""
    parser.add_argument("--hosts", default=None if top_level else argparse.SUPPRESS, metavar="NAMES",
                        help="the console also shows these hosts of hosts.yaml (comma-separated, or 'all'), each "
                             "over SSH")


def split_list(text: str, flag: str) -> list[str]:
    """A comma-separated flag value's items, stripped; an empty item (``a,,b``, a trailing comma) is refused, not
    skipped, and so is an empty value."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise InputError(f"empty; expected a comma-separated list, got {text!r}", field=flag)
    if not all(parts):
        where = next(i for i, t in enumerate(parts, 1) if not t)
        raise InputError(f"empty item {where} in {text!r}", field=flag)
    return parts


@dataclass
class CliContext:
    args: argparse.Namespace
    #: stdout and stderr behind the printable sink (tui.cli.output): nothing a command writes carries an escape
    out: TextIO = field(default_factory=lambda: printable_stream(sys.stdout))
    err: TextIO = field(default_factory=lambda: printable_stream(sys.stderr))
    _catalog: Catalog | None = None
    _host: Host | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CliContext:
        return cls(args=args)

    def host_options(self) -> HostOptions:
        from tui.core.host.base import HostOptions

        a = self.args
        return HostOptions(
            sim=bool(getattr(a, "sim", False)),
            sim_gpu=getattr(a, "sim_gpu", None),
            sim_gpus=getattr(a, "sim_gpus", None),
            sim_faults=tuple(getattr(a, "sim_fault", None) or ()),
            sim_startup_s=getattr(a, "sim_startup", None),
            sim_clock=getattr(a, "sim_clock", None),
            vllm=getattr(a, "vllm", None),
            api_key=self.api_key,
        )

    @property
    def api_key(self) -> str | None:
        key = getattr(self.args, "api_key", None) or os.environ.get("VLLM_API_KEY") or None
        if key is not None and (not key.strip() or any(c.isspace() for c in key)):
            raise InputError("must be one word without spaces", field="--api-key")
        return key

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            from tui.core.models import Catalog

            self._catalog = Catalog.load()
        return self._catalog

    @property
    def host(self) -> Host:
        if self._host is None:
            from tui.hosts import select_host

            self._host = select_host(self.host_options())
            for note in self._host.notes:
                self.warn(note)
        return self._host

    def nvml_or_none(self) -> Any:
        """The host's NVML, or None where it cannot be read (preflight and doctor report that themselves)."""
        try:
            return self.host.nvml()
        except Exception:  # noqa: BLE001 - any failure to open NVML means "not available" here
            return None

    def print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def print_json(self, data: Any) -> None:
        """Valid JSON whatever ``data`` holds: a NaN or an infinity (a figure of a file from outside) is null."""
        from tui.core import safeio

        print(safeio.dumps_strict(data, indent=2, default=str), file=self.out, flush=True)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.err, flush=True)

    def error(self, text: str) -> None:
        print(f"disagg-tui: error: {text}", file=self.err, flush=True)

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
