"""Where servers run and GPUs are read: the ``Host`` interface (``base``), the real machine (``local``), NVML access.
May import ``tui.core.plan`` and the shared modules; the simulated host plugs in from ``tui.sim.host``.
"""
