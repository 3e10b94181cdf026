"""The simulated host: fake NVML and simulated vLLM servers over real loopback HTTP, plugged into the core.

May import ``tui.core``; never ``tui.cli``, ``tui.console`` or Textual (lint-imports).
"""
