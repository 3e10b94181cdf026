"""The pages ``disagg-tui web`` serves: the console's (textual-serve's xterm.js terminal) and its refusals.

The console's page is textual-serve's, made to work where the browser reaches the host through an SSH
port-forward and has no Internet: every URL in it is relative to the page (a forward to another local port, or
``localhost`` for ``127.0.0.1``, still works; the WebSocket URL is made from the page's own address), the font is
textual-serve's own copy (no Google Fonts), and the "session ended" notice is a bar under the console's last
screen instead of a dialog over it.
"""

from __future__ import annotations

import html

CONSOLE_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="preload" href="static/fonts/RobotoMono-VariableFont_wght.ttf" as="font" type="font/ttf" crossorigin>
<link rel="stylesheet" href="static/css/xterm.css">
<script src="static/js/textual.js"></script>
<style>
@font-face {{ font-family: "Roboto Mono"; src: url("static/fonts/RobotoMono-VariableFont_wght.ttf"); }}
html, body {{ margin: 0; height: 100%; background: #0c181f; overflow: hidden; }}
#terminal {{ position: absolute; inset: 0; }}
.ended {{ display: none; position: absolute; left: 0; right: 0; bottom: 0; z-index: 10; padding: 8px 16px;
  background: #5e0ba7; color: #fff; font: 15px "Roboto Mono", monospace; }}
body.-closed .ended {{ display: block; }}
.ended button {{ margin-left: 16px; font: inherit; }}
</style>
</head>
<body>
<div id="terminal" class="textual-terminal" data-font-size="{font_size}"></div>
<div class="ended">Session ended: the console quit, or the server stopped or is full ({max_sessions} consoles at
 once). <button type="button" onclick="location.reload()">Open a new console</button></div>
<script>
document.getElementById("terminal").dataset.sessionWebsocketUrl = (location.protocol === "https:" ? "wss://" : "ws://")
  + location.host + location.pathname.replace(/[^/]*$/, "") + "ws";
</script>
</body>
</html>
"""

REFUSAL_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title><link rel="icon" href="data:,"></head>
<body style="background:#0c181f;color:#eee;font:16px monospace;padding:32px">
<h2>{title}</h2><p>{message}</p></body></html>
"""


def console_page(*, title: str, font_size: int, max_sessions: int) -> str:
    return CONSOLE_PAGE.format(title=html.escape(title), font_size=font_size, max_sessions=max_sessions)


def refusal_page(title: str, message: str) -> str:
    return REFUSAL_PAGE.format(title=html.escape(title), message=html.escape(message))
