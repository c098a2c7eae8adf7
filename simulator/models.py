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


ALIASES = {"A100": "NVIDIA A100-SXM4-80GB", "H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}


def resolve(name: str) -> str:
    """The NVML name of a model given as its NVML name or a short alias (A100, H100, H200)."""
    full = ALIASES.get(name.strip().upper(), name.strip())
    if full not in MODELS:
        known = ", ".join([*ALIASES, *MODELS])
        raise ValueError(f"unknown GPU model {name!r}; known: {known}")
    return full


def get_model(name: str) -> GpuModel:
    """Look a model up by its NVML name or alias, with the known names in the error."""
    return MODELS[resolve(name)]


def parse_mix(text: str) -> dict[str, float]:
    """A model mix like "A100=0.3,H100=0.5,H200=0.2" (shares of nodes)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, sep, share = part.partition("=")
        try:
            mix[resolve(name)] = float(share) if sep else 1.0
        except ValueError as err:
            raise ValueError(f"model mix {text!r}: {err}") from None
    if any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"model mix {text!r}: shares must be >= 0 and not all zero")
    return mix
