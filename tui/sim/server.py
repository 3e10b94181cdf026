"""The serving half of a simulated ``vllm serve``: engines, uvicorn on the pre-bound socket, and what watches them.

After :mod:`tui.sim.startup` has printed the start-up and forked the engine processes, this builds one scheduler
per DP rank, serves the ASGI app of :mod:`tui.sim.httpapp` with uvicorn (vLLM's own server) on the socket bound at
start-up (so the port refused connections until now), logs the periodic stats line, keeps the GPU claims' utilisation
current, and watches the engine processes: if one dies, requests fail with vLLM's EngineDeadError, ``/health``
answers 503, and the server exits, as vLLM does with ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0``.
"""

from __future__ import annotations

from typing import Any

import uvicorn

from tui.sim.httpapp import App
from tui.sim.logfmt import Proc
from tui.sim.serverstate import ServerState


def uvicorn_log_config(api: Proc, level: str) -> dict[str, Any]:
    prefix = api.prefix.replace("%", "%%")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "uvicorn.logging.DefaultFormatter", "fmt": prefix + "%(levelprefix)s %(message)s",
                        "use_colors": False},
            "access": {"()": "uvicorn.logging.AccessFormatter",
                       "fmt": prefix + '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
                       "use_colors": False},
        },
        "handlers": {
            "default": {"formatter": "default", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
            "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }


async def serve(state: ServerState) -> int:
    cfg = state.cfg
    level = "warning" if cfg.uvicorn_log_level == "trace" else cfg.uvicorn_log_level
    config = uvicorn.Config(App(state), log_config=uvicorn_log_config(state.api, level), log_level=level,
                            access_log=cfg.access_log, timeout_keep_alive=5, timeout_graceful_shutdown=2,
                            lifespan="on", http="httptools", loop="asyncio", server_header=True, date_header=True)
    server = uvicorn.Server(config)
    state.uvicorn = server
    sock = state.started.http_sock
    assert sock is not None  # a headless host serves no HTTP (tui.sim.headless)
    await server.serve(sockets=[sock])
    return state.exit_code
