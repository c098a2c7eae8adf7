"""GPU models the simulator knows: limits and physics constants from ../shared/REFERENCE.md."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """Static properties of one GPU model."""

    name: str
    power_limit_w: float
    idle_power_w: float
    sm_clock_max_mhz: float
    sm_clock_idle_mhz: float
    mem_clock_mhz: float
    fb_total_mib: float
    pcie_gen_max: int
    pcie_width_max: int
    slowdown_c: float
    shutdown_c: float
    max_operating_c: float
    memory_max_c: float
    thermal_resistance_c_per_w: float
    """Core temperature rise per watt above inlet (fitted to REFERENCE's load temperatures)."""
    row_remapping: bool
    """Ampere and later remap rows; older GPUs retire pages."""
    nvlinks: int


MODELS: dict[str, GpuModel] = {
    # A100 SXM: 61-76 C at 340-400 W under training; slowdown 89, shutdown 92,
    # max operating 85, memory max 95 (REFERENCE.md "Thermal (SXM)").
    "NVIDIA A100-SXM4-80GB": GpuModel(
        "NVIDIA A100-SXM4-80GB", 400, 55, 1410, 210, 1593, 81920, 4, 16,
        89, 92, 85, 95, 0.095, True, 12,
    ),
    # H100 SXM: 54-68 C at ~690 W; slowdown 89, shutdown 92, max operating 87, memory 95.
    "NVIDIA H100 80GB HBM3": GpuModel(
        "NVIDIA H100 80GB HBM3", 700, 70, 1980, 345, 2619, 81559, 5, 16,
        89, 92, 87, 95, 0.042, True, 18,
    ),
    # H200: the H100's board limits with 141 GB of HBM3e (thermal limits as H100: our assumption).
    "NVIDIA H200": GpuModel(
        "NVIDIA H200", 700, 75, 1980, 345, 3201, 143771, 5, 16,
        89, 92, 87, 95, 0.042, True, 18,
    ),
}  # fmt: skip
DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"


def get_model(name: str) -> GpuModel:
    """Look a model up by its NVML name, with the known names in the error."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown GPU model {name!r}; known: {', '.join(MODELS)}") from None
