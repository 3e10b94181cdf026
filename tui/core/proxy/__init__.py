"""The 1P1D/XpYd proxy: its ASGI app, HTTP plumbing, upstream choice, its own metrics and the process entry point
(``python -m tui.core.proxy``). May import only the shared modules (events, errors, procs, http_transport).
"""
