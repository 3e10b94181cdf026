"""``disagg-tui proxy``: the disaggregated prefill/decode proxy, in the foreground until Ctrl-C.

``disagg-tui up`` starts the same thing (``python -m tui.core.proxy``) under the supervisor; this command is for
running it by hand in front of servers started some other way.
"""

from __future__ import annotations

import argparse
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core.proxy.main import add_proxy_arguments, serve, settings_from_args


def register(sub: Any) -> None:
    p = sub.add_parser(
        "proxy", help="run the prefill/decode proxy in front of vLLM servers (foreground)",
        description="Serve /v1/completions and /v1/chat/completions by sending each request to a prefill server "
                    "(one token, KV kept for remote decode) and then to a decode server with the KV-transfer "
                    "parameters it returned, streaming the decode server's answer back unchanged. /health is 200 "
                    "only while every server is healthy; /metrics is the proxy's own.")
    add_proxy_arguments(p)
    add_global_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    return serve(settings_from_args(args), out=ctx.out)
