"""The KV transfer rate: one definition, two figures, each labelled.

NixlConnector's histograms give the bytes moved and the seconds each transfer took (``vllm:nixl_bytes_transferred``
and ``vllm:nixl_xfer_time_seconds``, their ``_sum``). From them:

- **per transfer**: bytes / seconds spent transferring. How fast one transfer goes: what vLLM's own ``KV Transfer
  metrics`` log line calls ``Throughput (MB/s)`` (its "MB" are MiB), and what is held against the GPU-to-GPU link.
- **moved**: bytes / wall seconds of the window or the run. How much KV the layout moves per second, all transfers
  together (they overlap: 11 concurrent transfers at 22 MiB/s each move about 240 MiB/s).

On the H200 the bench printed the first (22.3 MB/s) and the dashboard the second (241 MB/s) for the same transfers,
both as "the" rate (issue 22, finding 16). Every front end says both, with these labels.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class KvRate:
    bytes: float
    transfer_s: float  # seconds spent transferring, summed over the transfers
    wall_s: float | None = None  # the wall time they happened in (a window, a run); None: not known

    @property
    def per_transfer_bps(self) -> float | None:
        """Bytes per second of transfer time (vLLM's ``Throughput``)."""
        return self.bytes / self.transfer_s if self.transfer_s > 0 else None

    @property
    def moved_bps(self) -> float | None:
        """Bytes per wall second, every transfer together."""
        return self.bytes / self.wall_s if self.wall_s and self.wall_s > 0 else None

    def describe(self) -> str:
        """``240.6 MiB/s moved, 22.3 MiB/s per transfer`` (what is not known left out)."""
        parts = []
        if self.moved_bps is not None:
            parts.append(f"{self.moved_bps / MIB:,.1f} MiB/s moved")
        if self.per_transfer_bps is not None:
            parts.append(f"{self.per_transfer_bps / MIB:,.1f} MiB/s per transfer")
        return ", ".join(parts) if parts else "no KV moved"
