"""The headless commands (``disagg-tui plan|up|down|status|watch|bench|run|results|...``): print, exit with a code.

May import ``tui.core`` and the composition root ``tui.hosts``; never the console or ``tui.sim`` directly.
"""
