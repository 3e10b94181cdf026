"""A simulated ``vllm`` executable: ``python -m tui.sim.vllm serve MODEL [vllm serve flags]``.

It parses the real flags, reads the environment vLLM reads, prints vLLM 0.24's start-up log with its real pace
(compressed by ``DISAGG_SIM_STARTUP_S``, default 4 s; 0 = real time), forks engine processes that hold simulated
GPU memory, and then serves vLLM's HTTP API on loopback with tokens paced by a performance model of the GPU, the
model and the topology (``DISAGG_SIM_CLOCK`` speeds that up). Known failures are injected with
``DISAGG_SIM_FAULTS`` (see :mod:`tui.sim.faults`). Never imports Textual.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from tui.core.procs import reset_ignored_sigint
from tui.sim import cli, faults
from tui.sim.claims import ClaimWriter
from tui.sim.config import ConfigError, build, load_profile
from tui.sim.headless import HeadlessStartup
from tui.sim.logfmt import Proc, VllmLog
from tui.sim.startup import Startup
from tui.sim.startup_ctx import ChildDied, StartFailed
from tui.sim.timeline import cold_start


def _import_delay(t0: float) -> None:
    """What importing torch and vLLM costs before any output (scaled like the rest of the start)."""
    try:
        startup = float(os.environ.get("DISAGG_SIM_STARTUP_S", "4") or 0)
        times = cold_start(load_profile(dict(os.environ)))
    except (ValueError, OSError, TypeError):
        return
    scale = startup / times.total if startup > 0 else 1.0
    time.sleep(max(0.0, t0 + times.imports * scale - time.monotonic()))


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signum)


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    reset_ignored_sigint()  # like a real vLLM started by us: SIGINT stops it
    args = sys.argv[1:] if argv is None else argv
    parser, ns, order, extras = cli.parse(args)
    if extras:
        _import_delay(t0)
        parser.error("unrecognized arguments: " + " ".join(extras))
    try:
        cfg = build(ns, order, dict(os.environ))
    except ConfigError as exc:
        _import_delay(t0)
        cli.serve_parser(parser).error(str(exc))
    except (ValueError, KeyError) as exc:
        _import_delay(t0)
        print(f"ValueError: {exc}", file=sys.stderr)
        return 1
    log = VllmLog()
    fp = faults.plan(cfg)
    claims = ClaimWriter(cfg.state_dir, cfg.server_name, cfg.port)
    startup: Startup | HeadlessStartup = (HeadlessStartup if cfg.headless else Startup)(cfg, log, fp, claims, t0=t0)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        started = startup.run()
    except StartFailed as exc:
        startup.cleanup()
        return exc.code
    except ChildDied as exc:
        child = exc.child
        log.raw(Proc(startup.api.name, startup.api.pid),
                faults.api_init_failed("{" + f"'{child.name}': {child.exit_code}" + "}"))
        startup.cleanup()
        return 1
    except KeyboardInterrupt as exc:
        startup.cleanup()
        return 128 + (exc.args[0] if exc.args and isinstance(exc.args[0], int) else signal.SIGINT)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tui.sim import headless
    from tui.sim.server import serve
    from tui.sim.serverstate import ServerState

    state = ServerState(cfg, started, log, fp, claims)
    code = 0
    try:
        code = asyncio.run(headless.serve(state, log) if cfg.headless else serve(state))
    except KeyboardInterrupt:
        code = 130
    finally:
        startup.cleanup()
        for sock in ([started.http_sock] if started.http_sock else []) + [p.sock for p in started.peers]:
            sock.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
