"""A controllable test process for supervisor tests (not a vLLM fake: the simulated vLLM lives in tui/sim).

Prints startup-like lines, then serves GET /health on --port (unless --hang); can crash, ignore signals, and
spawn children in its own process group (like vLLM's engine processes).
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--delay", type=float, default=0.5, help="seconds before listening")
p.add_argument("--crash-after", type=float, default=None, help="exit 1 after this many seconds")
p.add_argument("--hang", action="store_true", help="print a few lines, then never listen and never print")
p.add_argument("--ignore-sigint", action="store_true")
p.add_argument("--ignore-sigterm", action="store_true")
p.add_argument("--children", type=int, default=0, help="child processes that sleep in our group")
a = p.parse_args()

if a.ignore_sigint:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if a.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

kids = []
for _ in range(a.children):
    code = "import signal, time\n" \
           + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if a.ignore_sigint else "") \
           + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if a.ignore_sigterm else "") \
           + "time.sleep(3600)\n"
    kids.append(subprocess.Popen([sys.executable, "-c", code]))

pid = os.getpid()
print(f"(APIServer pid={pid}) INFO 11-29 07:26:38 [api_utils.py:273] non-default args: {{'port': {a.port}}}",
      flush=True)
print(f"(APIServer pid={pid}) INFO 11-29 07:26:59 [model.py:598] Resolved architecture: TestForCausalLM", flush=True)
if a.crash_after is not None:
    time.sleep(a.crash_after)
    print(f"(EngineCore pid={pid}) ERROR 11-29 07:27:00 [core.py:1231] EngineCore failed to start.", flush=True)
    print("RuntimeError: test crash", flush=True)
    sys.exit(1)
if a.hang:
    while True:
        time.sleep(3600)
time.sleep(a.delay)
print(f"(EngineCore pid={pid}) INFO 11-29 07:27:22 [model_runner.py:302] Model loading took 1.00 GiB and 0.1 seconds",
      flush=True)


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), H)
print(f"(APIServer pid={pid}) INFO:     Application startup complete.", flush=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()
while True:
    time.sleep(3600)
