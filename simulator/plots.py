"""Plots of what each simulated fault mode looks like before its failure (docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in CI
import matplotlib.pyplot as plt
import pandas as pd

from simulator.fleet import SimConfig
from simulator.run import simulate

PANELS: dict[str, list[tuple[str, str]]] = {
    "ecc": [
        ("ecc_sbe_volatile", "SBE (volatile)"),
        ("remapped_rows_correctable", "correctable remaps"),
        ("row_remap_pending", "remap pending"),
        ("xid", "XID in interval"),
    ],
    "thermal": [
        ("gpu_temp_c", "core temp (C)"),
        ("memory_temp_c", "memory temp (C)"),
        ("thermal_violation_us", "thermal violation (us)"),
        ("gpu_util_pct", "utilisation (%)"),
    ],
    "pcie": [
        ("pcie_replay_count", "PCIe replays"),
        ("pcie_link_width", "link width (lanes)"),
        ("pcie_link_gen", "link gen"),
        ("xid", "XID in interval"),
    ],
    "other": [
        ("gpu_temp_c", "core temp (C)"),
        ("ecc_sbe_volatile", "SBE (volatile)"),
        ("pcie_replay_count", "PCIe replays"),
        ("xid", "XID in interval"),
    ],
}
DAYS_BEFORE = 10


def fault_mode_plots(out_dir: Path, seed: int = 1, nodes: int = 32, days: float = 90) -> list[Path]:
    """Simulate a fleet and plot, per failure mode, one GPU's signals before it failed."""
    cfg = SimConfig(
        nodes=nodes,
        gpus_per_node=8,
        seed=seed,
        random_failures=True,
        models={"NVIDIA A100-SXM4-80GB": 0.3, "NVIDIA H100 80GB HBM3": 0.5, "NVIDIA H200": 0.2},
    )
    frame, failures = simulate(cfg, days)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    start = frame["timestamp"].min()
    for mode, panels in PANELS.items():
        # The first failure of this mode with a full window of history before it.
        cands = failures[(failures["mode"] == mode) & (failures["failed_at"] > start + pd.Timedelta(days=DAYS_BEFORE))]
        if cands.empty:
            raise RuntimeError(f"seed {seed}: no {mode} failure with {DAYS_BEFORE} days of history; try another seed")
        f = cands.iloc[0]
        g = frame[frame["gpu_uuid"] == f["gpu_uuid"]]
        g = g[g["timestamp"] >= f["failed_at"] - pd.Timedelta(days=DAYS_BEFORE)]
        hours = (g["timestamp"] - f["failed_at"]).dt.total_seconds() / 3600.0
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.8 * len(panels)), sharex=True)
        for ax, (col, label) in zip(axes, panels, strict=True):
            ax.plot(
                hours,
                g[col],
                lw=1.2,
                drawstyle="steps-post" if col in ("xid", "pcie_link_width") else "default",
            )
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
            onset_h = (f["precursor_onset"] - f["failed_at"]).total_seconds() / 3600.0
            if onset_h < 0:
                ax.axvspan(max(onset_h, hours.min()), 0, color="orange", alpha=0.12)
        axes[-1].set_xlabel("hours before failure")
        fig.suptitle(
            f"{mode} failure ({f['fault']}, XID {f['xid']}) of {f['gpu_uuid'][:12]}… on {f['hostname']}"
            " — shaded: precursor window",
            fontsize=9,
        )
        fig.tight_layout()
        path = out_dir / f"sim-{mode}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written
