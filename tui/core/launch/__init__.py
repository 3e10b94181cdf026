"""Launching: the supervisor (own-session processes, logs, stops), the state file, startup phases read from logs,
and the lifecycle (up/down) with its events. May import ``host``, ``plan`` and the shared modules.
"""
