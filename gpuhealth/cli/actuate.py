"""`gpuhealth actuate` and `gpuhealth slurm-healthcheck`, and the actuator's flags of `serve`.

Settings become a scheduler client and an `ActuatorConfig` here, and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from core.settings import Settings
from core.units import parse_duration
from gpuhealth.cli.backend import LogLevelOpt, fail, load_settings, setup_logging

if TYPE_CHECKING:
    from collections.abc import Sequence

    from actuate.slurm import SlurmTarget
    from actuate.target import Target
    from service.actuator import ActuatorConfig, PassReport
    from service.remediation import RemediationConfig
    from store import Store

out = Console()
actuate_app = typer.Typer()
"""`gpuhealth actuate` and `gpuhealth slurm-healthcheck`: top-level commands (`gpuhealth.cli` adds them)."""
TARGETS = ("slurm", "kubernetes", "sim")

ActuateOpt = Annotated[
    str | None,
    typer.Option(help="act on the scheduler: off (default), dry-run (record only) or on (GPUHEALTH_ACTUATE)"),
]
ActuateTargetOpt = Annotated[
    str | None,
    typer.Option(help="the scheduler: slurm, kubernetes, or sim (the simulated fleet) (GPUHEALTH_ACTUATE_TARGET)"),
]


def actuator_plan(
    s: Settings, mode: str | None, target: str | None, *, interval: str | None = None
) -> tuple[str, ActuatorConfig] | None:
    """The scheduler's name and how to act on it, from flags over settings (None when off), or one error
    line; checked before anything is opened."""
    from actuate.breaker import BreakerPolicy
    from service.actuator import MODES, ActuatorConfig

    chosen = mode or s.actuate
    if chosen not in MODES:
        raise fail(f"unknown --actuate {chosen!r}: use off, dry-run or on")
    if chosen == "off":
        return None
    where = target or s.actuate_target
    if where is None:
        raise fail("--actuate needs --actuate-target slurm, kubernetes or sim (GPUHEALTH_ACTUATE_TARGET)")
    if where not in TARGETS:
        raise fail(f"unknown --actuate-target {where!r}: use slurm, kubernetes or sim")
    try:
        config = ActuatorConfig(
            mode=chosen,
            settle=timedelta(seconds=parse_duration(s.actuate_settle)),
            breaker=BreakerPolicy(
                s.breaker_max_fraction, s.breaker_max_nodes, timedelta(seconds=parse_duration(s.breaker_window))
            ),
            interval_s=parse_duration(interval or s.actuate_interval),
            remediation=remediation_config(s) if s.remediate else None,
        )
    except ValueError as e:
        raise fail(f"invalid actuator setting: {e}") from None
    return where, config


def remediation_config(s: Settings) -> RemediationConfig:
    """How the remediation loop acts, from settings (raises ValueError on a bad duration)."""
    from service.remediation import RemediationConfig

    return RemediationConfig(
        remedy_now=timedelta(seconds=parse_duration(s.remediate_deadline)),
        remedy_idle=timedelta(seconds=parse_duration(s.remediate_idle_deadline)),
        max_concurrent=s.remediate_max_concurrent,
    )


def actuation_from_settings(
    s: Settings, store: Store, plan: tuple[str, ActuatorConfig] | None
) -> tuple[Target, ActuatorConfig] | None:
    """The scheduler client for a plan of `actuator_plan` (None stays None)."""
    return None if plan is None else (_target(s, store, plan[0]), plan[1])


def slurm_target(s: Settings, *, env: dict[str, str] | None = None, unmanaged: Sequence[str] = ()) -> SlurmTarget:
    """The Slurm client from settings: scontrol and squeue from GPUHEALTH_SLURM_BIN_DIR, else PATH."""
    from actuate.slurm import SlurmTarget

    bin_dir = Path(s.slurm_bin_dir) if s.slurm_bin_dir else None
    return SlurmTarget(
        scontrol=str(bin_dir / "scontrol") if bin_dir else "scontrol",
        squeue=str(bin_dir / "squeue") if bin_dir else "squeue",
        env=env,
        reliable_feature=s.slurm_reliable_feature,
        demoted_weight=s.slurm_demoted_weight,
        unmanaged=unmanaged,
    )


def _target(s: Settings, store: Store, where: str) -> Target:
    from actuate.target import expand_hostlist

    try:
        unmanaged = expand_hostlist(s.unmanaged_nodes)
    except ValueError as e:
        raise fail(f"invalid GPUHEALTH_UNMANAGED_NODES: {e}") from None
    if where == "slurm":
        return slurm_target(s, unmanaged=unmanaged)
    if where == "kubernetes":
        from actuate.kubernetes import KubeTarget, client_for

        try:
            client = client_for(s.kube_server, s.kubeconfig)
        except Exception as e:  # lightkube: no kubeconfig, not in a cluster, a bad file
            raise fail(f"cannot configure the Kubernetes client: {e}") from None
        return KubeTarget(client, event_namespace=s.kube_event_namespace, unmanaged=unmanaged)
    if where == "sim":
        from actuate.memory import MemoryTarget

        return MemoryTarget(store.actuation.hostnames, unmanaged=unmanaged)
    raise AssertionError(where)  # actuator_plan checked it


@actuate_app.command()
def actuate(
    once: Annotated[bool, typer.Option("--once", help="one reconciliation pass, then exit (cron, debugging)")] = False,
    mode: Annotated[str, typer.Option(help="dry-run (record only) or on")] = "dry-run",
    target: ActuateTargetOpt = None,
    db: Annotated[str | None, typer.Option(help="database URL (GPUHEALTH_DB)")] = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Act on the scheduler from the stored decisions: one pass with --once, else a loop until Ctrl-C."""
    from actuate.target import TargetUnavailable
    from service.actuator import Actuator
    from store import Store, StoreError

    s = load_settings()
    setup_logging(log_level or s.log_level)
    if mode not in ("dry-run", "on"):
        raise fail(f"unknown --mode {mode!r}: use dry-run or on")
    checked = actuator_plan(s, mode, target)
    try:
        store = Store.open(db or s.db)
    except StoreError as e:
        raise fail(str(e)) from None
    try:
        plan = actuation_from_settings(s, store, checked)
        assert plan is not None
        actuator = Actuator(store, *plan)
        if not once:
            out.print(
                f"gpuhealth actuate: {mode} on {plan[0].name}, a pass every {plan[1].interval_s:g} s; Ctrl-C stops"
            )
            with contextlib.suppress(KeyboardInterrupt):
                actuator.run()
            return
        try:
            report = actuator.reconcile_once()
        except (TargetUnavailable, StoreError) as e:
            raise fail(str(e), code=1) from None
        _print_report(report, plan[0].name, mode)
    finally:
        store.close()


def _print_report(report: PassReport, target: str, mode: str) -> None:
    table = Table(title=f"{target}, {mode}: {report.nodes} nodes, {len(report.outcomes)} step(s)")
    for col in ("node", "from", "to", "result", "why", "workloads", "error"):
        table.add_column(col)
    for o in report.outcomes:
        s = o.step
        table.add_row(s.hostname, s.from_state, s.to_state, o.result, s.why, ", ".join(o.workloads), o.error or "")
    out.print(table)
    if report.breaker_open:
        out.print("[bold red]the breaker is open[/]: POST /v1/actuator/reset once you checked why")


@actuate_app.command("slurm-healthcheck")
def slurm_healthcheck(
    service_url: Annotated[
        str | None, typer.Option(help="the gpuhealth service (GPUHEALTH_SERVICE_URL; default http://127.0.0.1:8080)")
    ] = None,
    node: Annotated[str | None, typer.Option(help="this node's name in Slurm (default: the short hostname)")] = None,
    token_file: Annotated[Path | None, typer.Option(help="file with the bearer token, when reads need it")] = None,
    slurm_conf: Annotated[Path | None, typer.Option(help="slurm.conf (slurmd runs us without SLURM_CONF)")] = None,
) -> None:
    """Slurm's HealthCheckProgram: drain this node with a `gpuhealth:` reason when one of its GPUs needs it.

    Exit status 0: all is well; 1: the node needs draining (drained now, or already drained); 2: the
    service or slurmctld could not be asked (the node is left as it is)."""
    from actuate.plan import GpuDecision, desired_states
    from actuate.target import TargetError, TargetUnavailable
    from core.decisions import SEVERITY
    from core.service_client import ServiceError, node_gpus

    s = load_settings()
    url = service_url or s.service_url or "http://127.0.0.1:8080"
    host = node or socket.gethostname().split(".")[0]
    token = token_file.read_text().strip() if token_file else s.service_token
    env = dict(os.environ)
    if slurm_conf is not None:
        env["SLURM_CONF"] = str(slurm_conf)
    try:
        view = node_gpus(url, host, token=token)
    except ServiceError as e:
        raise fail(f"slurm-healthcheck: {e}", code=2) from None
    gpus = [GpuDecision(host, g.uuid, g.gpu_index, g.decision, g.reasons) for g in view.gpus if g.decision]
    want = desired_states(gpus).get(host)
    if want is None or SEVERITY[want.state] < SEVERITY["drain"]:
        return
    slurm = slurm_target(s, env=env)
    try:
        drained = slurm.drain(host, want.state, want.why)
    except (TargetError, TargetUnavailable) as e:
        raise fail(f"slurm-healthcheck: {e}", code=2) from None
    out.print(f"{host}: {want.state}, {'drained now' if drained else 'already drained'}: {want.why}")
    raise typer.Exit(1)
