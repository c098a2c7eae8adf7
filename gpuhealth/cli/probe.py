"""`gpuhealth probe`: run the stress probes (kernels/) on this node's GPUs now."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from core.settings import Settings
from core.units import parse_duration
from gpuhealth.cli.backend import fail, load_settings

if TYPE_CHECKING:
    from collector.backends.base import Backend
    from collector.probes import ProbeRunner
    from kernels.runner import ProbeResult

probe_app = typer.Typer()
"""`gpuhealth probe`: top-level commands (`gpuhealth.cli` adds them)."""

NO_GPU = "no GPU to probe: {why} (try `gpuhealth probe --backend sim` for a simulated node)"


@probe_app.command("probe")
def probe(
    gpu: Annotated[list[int] | None, typer.Option("--gpu", help="GPU index to probe (repeat; default: all)")] = None,
    tests: Annotated[
        str | None,
        typer.Option(help="comma list of gemm, gemm_fp32, memtest, bandwidth, pcie (env GPUHEALTH_PROBE_TESTS)"),
    ] = None,
    budget: Annotated[
        str | None, typer.Option(help="time budget per GPU, e.g. 60s (env GPUHEALTH_PROBE_BUDGET)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the results as JSON (one object per test and GPU)")
    ] = False,
    backend: Annotated[str, typer.Option(help="nvml (real GPUs) or sim (a simulated node, to try it)")] = "nvml",
    force: Annotated[bool, typer.Option(help="probe even a GPU that is busy (a job's work may suffer)")] = False,
    inject: Annotated[bool, typer.Option(help="test mode: inject faults the probes must find")] = False,
    baseline: Annotated[bool, typer.Option(help="also time cuBLAS GEMM and CuPy's device copy (device check)")] = False,
    sim_gpus: Annotated[int, typer.Option(help="sim: GPUs on the simulated node", min=1)] = 8,
    seed: Annotated[int, typer.Option(help="sim: random seed")] = 0,
    sim_fault: Annotated[
        list[str] | None, typer.Option(help="sim: inject a fault, GPU:MODE[:HOURS] (ecc|thermal|pcie)")
    ] = None,
) -> None:
    """Run the stress probes (GEMM check, memtest, bandwidth, PCIe) on idle GPUs; exit 1 if one fails."""
    from kernels.runner import exit_code

    s = load_settings()
    chosen, budget_s = _plan(s, tests, budget)
    if backend not in ("nvml", "sim"):
        raise fail(f"--backend must be nvml or sim, not {backend!r}")
    if sim_fault and backend != "sim":
        raise fail("--sim-fault needs --backend sim")
    b, runner = _open_node(s, backend, sim_gpus, seed, sim_fault, inject=inject, baseline=baseline)
    try:
        results = _probe_gpus(s, b, runner, gpu, chosen, budget_s, force=force, quiet=as_json)
    finally:
        b.close()
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        _print_table(results)
    raise typer.Exit(exit_code(results))


def _plan(s: Settings, tests: str | None, budget: str | None) -> tuple[list[str], float]:
    """The tests to run and the budget per GPU in seconds (flags over settings), or one error line."""
    from kernels.expected import parse_tests

    try:
        chosen = parse_tests(tests or s.probe_tests)
        budget_s = parse_duration(budget or s.probe_budget)
        if budget_s <= 0:
            raise ValueError(f"--budget must be positive, not {budget!r}")
    except ValueError as e:
        raise fail(str(e)) from None
    return chosen, budget_s


def _open_node(
    s: Settings, backend: str, sim_gpus: int, seed: int, sim_fault: list[str] | None, *, inject: bool, baseline: bool
) -> tuple[Backend, ProbeRunner]:
    """This node's GPUs (or a simulated node) and the runner that probes them, or one error line."""
    import socket

    from collector.backends.base import BackendError
    from collector.backends.sim import SimProbeRunner
    from collector.probes import SubprocessProbeRunner

    try:
        if backend == "sim":
            from collector.backends.sim import SimBackend
            from simulator.fleet import FaultSpec

            sim = SimBackend(gpus_per_node=sim_gpus, seed=seed, faults=[FaultSpec.parse(f) for f in sim_fault or []])
            sim.fleet.workload[:] = 2  # between jobs, as a node probed by hand usually is
            for _ in range(360):  # an hour of simulated time at 10 s: faults under way, load settled
                sim.read()
            return sim, SimProbeRunner(sim.fleet, seed)
        from collector.backends.nvml import NvmlBackend

        nvml = NvmlBackend(hostname=s.hostname or socket.gethostname(), watch_xid=False)
        return nvml, SubprocessProbeRunner(inject=inject, baseline=baseline)
    except (BackendError, ValueError) as e:
        raise fail(NO_GPU.format(why=str(e).split(" use --backend sim")[0].rstrip(";: "))) from None


def _probe_gpus(
    s: Settings,
    b: Backend,
    runner: ProbeRunner,
    gpu: list[int] | None,
    chosen: list[str],
    budget_s: float,
    *,
    force: bool,
    quiet: bool,
) -> list[ProbeResult]:
    """Probe the chosen GPUs (all when `gpu` is None); a busy one is skipped unless forced."""
    from collector.probes import busy_reason
    from kernels.runner import ProbeResult

    infos = [g for g in b.gpus() if gpu is None or g.index in gpu]
    if not infos:
        found = ", ".join(str(g.index) for g in b.gpus()) or "none"
        raise fail(
            NO_GPU.format(why=f"GPU(s) {gpu} not found (found: {found})")
            if gpu
            else NO_GPU.format(why="NVML found no GPU")
        )
    results: list[ProbeResult] = []
    for info in infos:
        reason = None if force else busy_reason(b, info, s.probe_idle_util_pct)
        if reason is not None:
            results += [
                ProbeResult(t, "skipped", info.index, info.uuid, info.model_name, details={"reason": f"busy: {reason}"})
                for t in chosen
            ]
            continue
        if not quiet:
            Console(stderr=True).print(
                f"probing GPU {info.index} ({info.model_name}): {', '.join(chosen)}", highlight=False
            )
        results += runner.run(info, chosen, budget_s)
    return results


def _print_table(results: list[ProbeResult]) -> None:
    """The results as a table on stdout, one row per test and GPU."""
    table = Table("GPU", "test", "status", "value", "expected", "ratio", "errors", "time", "note")
    for r in results:
        note = str(r.details.get("reason", ""))
        if "injected" in r.details:
            note = f"found {r.details.get('injected_found')}/{r.details['injected']} injected " + note
        table.add_row(
            str(r.gpu_index), r.test, r.status,
            "-" if r.value is None else f"{r.value:g} {r.unit}",
            "-" if r.expected is None else f"{r.expected:g}",
            "-" if r.ratio is None else f"{r.ratio:.2f}",
            "-" if r.errors is None else str(r.errors),
            f"{r.duration_s:.1f}s", note,
        )  # fmt: skip
    Console(width=200).print(table)
