"""Datasheet leads for the GPUs the app knows, used by the planner's fit checks and the simulator.

Figures are dense (no sparsity) peak rates; the simulator applies its own calibrated efficiencies. ``measured_*``
hold what a real machine gave where we measured one (H200: device-to-device copy and a bf16 matmul).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    key: str
    name: str  # what NVML reports
    compute_capability: float
    memory_total_mib: int  # what NVML reports as total
    hbm_bandwidth: float  # bytes/s, datasheet
    flops: dict[str, float]  # dense FLOP/s by dtype: bf16, fp8, nvfp4
    nvlink_bandwidth: float  # bytes/s per GPU, one direction
    nvlink_links: int
    power_limit_w: float
    idle_power_w: float
    sm_clock_max_mhz: int
    mem_clock_mhz: int
    measured_hbm_bandwidth: float | None = None
    measured_bf16_flops: float | None = None

    @property
    def arch(self) -> str:
        if self.compute_capability >= 10.0:
            return "blackwell"
        if self.compute_capability >= 9.0:
            return "hopper"
        return "ampere-or-older"


B200 = GpuSpec(
    key="b200", name="NVIDIA B200", compute_capability=10.0, memory_total_mib=183_359,
    hbm_bandwidth=8.0e12, flops={"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "nvfp4": 9.0e15},
    nvlink_bandwidth=0.9e12, nvlink_links=18, power_limit_w=1000.0, idle_power_w=140.0,
    sm_clock_max_mhz=1965, mem_clock_mhz=3996,
)
H200 = GpuSpec(
    key="h200", name="NVIDIA H200", compute_capability=9.0, memory_total_mib=143_771,
    hbm_bandwidth=4.8e12, flops={"bf16": 0.99e15, "fp16": 0.99e15, "fp8": 1.98e15},
    nvlink_bandwidth=0.45e12, nvlink_links=18, power_limit_w=700.0, idle_power_w=75.0,
    sm_clock_max_mhz=1980, mem_clock_mhz=3201,
    measured_hbm_bandwidth=4.3e12, measured_bf16_flops=0.79e15,
)

PRESETS: dict[str, GpuSpec] = {"b200": B200, "h200": H200}


def spec_for_name(name: str) -> GpuSpec | None:
    """The preset whose NVML name matches (``NVIDIA H200``, ``NVIDIA B200``, ``NVIDIA H200 NVL`` ...)."""
    low = name.lower()
    for spec in PRESETS.values():
        if spec.key in low:
            return spec
    return None
