"""The UI-free core: it plans, launches, watches, benchmarks, matches and records. Front ends drive it.

May import: only itself and its libraries; never ``tui.sim``, ``tui.cli``, ``tui.console`` or Textual (lint-imports).
"""
