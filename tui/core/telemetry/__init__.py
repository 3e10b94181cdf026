"""Live telemetry: every GPU through NVML, every server's health and metrics.

- :mod:`.sampler`: the NVML GPU sampler (thread) → ``GpuSampled``; :mod:`.procmap` maps GPU processes to servers;
- :mod:`.poller`: the async ``/health`` and ``/metrics`` poller → ``ServerHealth``, ``ServerMetrics``;
- :mod:`.prom`: the Prometheus text-format parser; :mod:`.derive`: figures from successive scrapes;
- :mod:`.live`: both together (``collect_snapshot`` for ``status``, ``LiveTelemetry`` for ``watch``);
- :mod:`.view`: a tick as plain data (JSON) and as readable lines.
"""

from tui.core.telemetry.events import GpuSampled, ServerHealth, ServerMetrics
from tui.core.telemetry.live import LiveTelemetry, collect_snapshot, collect_snapshot_sync

__all__ = ["GpuSampled", "LiveTelemetry", "ServerHealth", "ServerMetrics", "collect_snapshot",
           "collect_snapshot_sync"]
