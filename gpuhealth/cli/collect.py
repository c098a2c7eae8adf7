"""`gpuhealth collect`: the per-node exporter, with its NFD labels and workload sources."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from core.settings import Settings
from core.units import parse_duration, parse_listen
from gpuhealth.cli.backend import (
    BackendFlags,
    BackendOpt,
    CollectorsOpt,
    DcgmAddressOpt,
    FieldsOpt,
    HistoryOpt,
    HostnameLabelOpt,
    HostnameOpt,
    IntervalOpt,
    LogLevelOpt,
    LoopOpt,
    SeedOpt,
    SimFaultOpt,
    SimGpusOpt,
    SimKernelLogOpt,
    SimModelOpt,
    SimNodesOpt,
    SimSpareOpt,
    SimSpeedOpt,
    SpeedOpt,
    attributors_from,
    fail,
    load_settings,
    open_from_flags,
    setup_logging,
)
from gpuhealth.cli.serve import kernel_log_options, probe_config
from gpuhealth.cli.serve import sysfs_root as sysfs_root_of

if TYPE_CHECKING:  # imported when `evaluate` runs: the CLI loads the predictor only for its commands
    from collector.attribution import Attributor
    from collector.backends.base import Backend
    from collector.kernel_log import KernelLog
    from collector.nfd import NfdConfig
    from collector.remediate import RemedyAgent
    from collector.remedy import Resetter
    from collector.run import RunningCollector

err = Console(stderr=True)
collect_app = typer.Typer()
"""`gpuhealth collect`: top-level commands (`gpuhealth.cli` adds them)."""


@collect_app.command()
def collect(
    backend: BackendOpt = None,
    dcgm_address: DcgmAddressOpt = None,
    listen: Annotated[str | None, typer.Option(help="HOST:PORT to serve /metrics on")] = None,
    interval: IntervalOpt = None,
    hostname: HostnameOpt = None,
    hostname_label: HostnameLabelOpt = None,
    fields: FieldsOpt = None,
    collectors: CollectorsOpt = None,
    sim_nodes: SimNodesOpt = 1,
    sim_gpus: SimGpusOpt = 8,
    sim_spare_nodes: SimSpareOpt = 0,
    sim_kernel_log: SimKernelLogOpt = "",
    seed: SeedOpt = 0,
    sim_model: SimModelOpt = None,
    sim_speed: SimSpeedOpt = 1.0,
    sim_fault: SimFaultOpt = None,
    history: HistoryOpt = None,
    speed: SpeedOpt = 1.0,
    loop: LoopOpt = True,
    log_level: LogLevelOpt = None,
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            help="exporter-toolkit web config (TLS, client certificates, basic auth), as dcgm-exporter's"
            " (GPUHEALTH_WEB_CONFIG_FILE)"
        ),
    ] = None,
    nfd_features_dir: Annotated[
        Path | None,
        typer.Option(
            help="write this node's decision from --service-url as Kubernetes labels through Node Feature Discovery:"
            " the feature file 'gpuhealth' in this directory, e.g. /etc/kubernetes/node-feature-discovery/features.d"
            " (GPUHEALTH_NFD_FEATURES_DIR)"
        ),
    ] = None,
    service_url: Annotated[
        str | None,
        typer.Option(help="the central gpuhealth serve, e.g. http://gpuhealth:8080 (GPUHEALTH_SERVICE_URL)"),
    ] = None,
    service_token: Annotated[
        str | None,
        typer.Option(
            help="bearer token for the service's reads, when it closes them; better GPUHEALTH_SERVICE_TOKEN"
            " (a flag shows in ps)"
        ),
    ] = None,
    nfd_interval: Annotated[
        str | None,
        typer.Option(
            help="how often to ask the service; labels expire after 3 intervals (60s; GPUHEALTH_NFD_INTERVAL)"
        ),
    ] = None,
    pod_resources_socket: Annotated[
        str | None,
        typer.Option(
            help="the kubelet's pod-resources socket: pod, namespace, container labels on each GPU's series; default:"
            " /var/lib/kubelet/pod-resources/kubelet.sock when it exists, '' turns it off"
            " (GPUHEALTH_POD_RESOURCES_SOCKET)"
        ),
    ] = None,
    hpc_job_mapping_dir: Annotated[
        Path | None,
        typer.Option(
            help="dcgm-exporter's HPC job mapping directory (one file per GPU index holding job ids, written by a"
            " Slurm prolog, deploy/slurm/): hpc_job labels (GPUHEALTH_HPC_JOB_MAPPING_DIR)"
        ),
    ] = None,
    sysfs_root: Annotated[
        str | None,
        typer.Option(
            help="where sysfs is, for the InfiniBand/RoCE ports under class/infiniband (gpuhealth_infiniband_*);"
            " default: /sys with a live backend, none with sim or replay; '' turns it off"
        ),
    ] = None,
    allow_reset: Annotated[
        bool,
        typer.Option(
            "--allow-reset",
            help="let this agent reset an idle GPU of its node with nvidia-smi (needs root or CAP_SYS_ADMIN);"
            " off: every reset is refused (GPUHEALTH_ALLOW_RESET)",
        ),
    ] = False,
    remedies: Annotated[
        bool | None,
        typer.Option(
            "--remedies/--no-remedies",
            help="ask --service-url for remedies to this node's GPUs and carry them out: reset (--allow-reset),"
            " reboot (--reboot-sentinel), verify (the probes); reports need --service-token, the service's write"
            " token; default: on when both are given (GPUHEALTH_REMEDIES)",
            show_default=False,
        ),
    ] = None,
    reboot_sentinel: Annotated[
        str | None,
        typer.Option(
            help="kured's sentinel file to write when the service asks for a node reboot, e.g."
            " /run/gpuhealth/reboot-required; '' or unset: reboots are refused (GPUHEALTH_REBOOT_SENTINEL)"
        ),
    ] = None,
) -> None:
    """Sample GPUs and serve them to Prometheus, dcgm-exporter compatible (port 9400)."""
    from collector.run import build_collector, run_until_signalled
    from collector.webconfig import WebConfigError, WebConfigFile

    s = load_settings()
    setup_logging(log_level or s.log_level)
    service = _service_flags(service_url, service_token, s)
    nfd_flags = _nfd_flags(nfd_features_dir, service, nfd_interval, s)
    agent_flags = _remedy_flags(remedies, service, s)
    try:
        host, port = parse_listen(listen or s.listen)
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        web_file = web_config_file or (Path(s.web_config_file) if s.web_config_file else None)
        web = WebConfigFile(web_file) if web_file is not None else None
    except WebConfigError as e:
        raise fail(str(e)) from None
    flags = BackendFlags(
        backend, interval, hostname, hostname_label, fields, sim_nodes, sim_gpus, seed, sim_model, sim_speed,
        sim_fault, history, speed, loop, sim_spare_nodes=sim_spare_nodes, collectors=collectors,
        dcgm_address=dcgm_address, sim_kernel_log=sim_kernel_log,
    )  # fmt: skip
    opened = open_from_flags(flags, s)
    b, interval_s = opened.backend, opened.interval_s
    try:
        nfd = _nfd_config(nfd_flags, b, hostname or s.hostname) if nfd_flags is not None else None
        attributors = attributors_from(pod_resources_socket, hpc_job_mapping_dir, s)
        running = build_collector(
            b, opened.fields, interval_s, host, port, opened.hostname_label, probes=probe_config(s),
            web=web, nfd=nfd, attributors=attributors, label_fields=opened.labels,
            sysfs_root=sysfs_root_of(sysfs_root, b.name),
        )  # fmt: skip
        running.resetter = _resetter(b, allow_reset or s.allow_reset, s)
        if agent_flags is not None:
            sentinel = s.reboot_sentinel if reboot_sentinel is None else reboot_sentinel
            running.remedies = _remedy_agent(running, agent_flags, sentinel, opened.interval_s, s)
        kernel_log = _kernel_log(running, b, s, opened.hostname_label, sysfs_root_of(sysfs_root, b.name))
    except typer.Exit:
        b.close()
        raise
    except OSError as e:
        b.close()
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    shown = "localhost" if host in ("0.0.0.0", "::", "") else host
    base = f"{running.server.scheme}://{shown}:{running.server.port}"
    guard = f" ({web.summary})" if web is not None else ""
    n = len(b.gpus())
    labels = (
        escape(f"\n  labels:  {nfd.path} (NFD), node {nfd.hostname} from {nfd.service_url} every {nfd.interval_s:g}s")
        if nfd is not None
        else ""
    )
    err.print(
        f"gpuhealth collect: {b.name} backend, {n} GPU(s), sampling every {interval_s:g}s\n"
        f"  metrics: {base}/metrics{guard}\n"
        f"  health:  {base}/healthz{guard}{labels}{_workload_sources(attributors)}{_reset_line(running.resetter)}"
        f"{_remedies_line(running.remedies, service)}",
        highlight=False,
        soft_wrap=True,
    )
    if kernel_log is not None:
        kernel_log.start()
    try:
        run_until_signalled(running)
    finally:
        if kernel_log is not None:
            kernel_log.stop()


def _kernel_log(
    running: RunningCollector, backend: Backend, s: Settings, label: str, sysfs: Path | None = None
) -> KernelLog | None:
    """XIDs and SXIDs from the kernel log (GPUHEALTH_KERNEL_LOG), for live GPUs: a simulated fleet has its own."""
    from collector.kernel_log import attach_for_backend

    return attach_for_backend(running.registry, running.sampler, backend, kernel_log_options(s), label, sysfs)


def _resetter(backend: Backend, allow: bool, s: Settings) -> Resetter:
    """The GPU resetter: refusing everything unless `allow`; nvidia-smi from the settings on NVML."""
    from collector.backends.nvml_reset import NvidiaSmi
    from collector.remedy import Resetter, resettable

    try:
        timeout_s = parse_duration(s.reset_timeout)
    except ValueError as e:
        raise fail(f"GPUHEALTH_RESET_TIMEOUT: {e}") from None
    return Resetter(resettable(backend, NvidiaSmi(s.nvidia_smi, timeout_s)), allow=allow)


def _reset_line(resetter: Resetter | None) -> str:
    """The start-up line saying whether GPU resets may run ("" when they may not)."""
    if resetter is None or not resetter.allow:
        return ""
    if resetter.backend is None:
        return "\n  reset:   allowed, but this backend cannot reset GPUs"
    smi = getattr(resetter.backend, "smi", None)
    how = f"{smi.path} --gpu-reset, {smi.timeout_s:g}s at most" if smi is not None else "simulated"
    return escape(f"\n  reset:   allowed on idle GPUs ({how})")


def _workload_sources(attributors: list[Attributor]) -> str:
    """The start-up line naming where workload labels come from ("" without any)."""
    named = ", ".join(f"{a.name} from {a.source}" for a in attributors)
    return escape(f"\n  workloads: {named}") if named else ""


def _service_flags(service_url: str | None, service_token: str | None, s: Settings) -> tuple[str, str | None] | None:
    """(the service's URL, the token) when a service is given; checked before the backend opens."""
    import re

    url = service_url or s.service_url
    if not url:
        return None
    if not re.match(r"https?://[^/\s]", url):
        raise fail(f"--service-url {url!r}: use an http:// or https:// URL, e.g. http://gpuhealth:8080")
    return url, (service_token or "").strip() or s.service_token


def _nfd_flags(
    features_dir: Path | None, service: tuple[str, str | None] | None, interval: str | None, s: Settings
) -> tuple[Path, str, str | None, float] | None:
    """(directory, service URL, token, interval) for NFD labels, None when off; checked before the backend opens."""
    import os

    directory = features_dir or (Path(s.nfd_features_dir) if s.nfd_features_dir else None)
    if directory is None:
        return None
    if service is None:
        raise fail("--nfd-features-dir needs --service-url: the central gpuhealth serve, e.g. http://gpuhealth:8080")
    try:
        interval_s = parse_duration(interval or s.nfd_interval)
    except ValueError as e:
        raise fail(f"--nfd-interval: {e}") from None
    if not directory.is_dir():
        raise fail(
            f"--nfd-features-dir {directory}: no such directory (nfd-worker reads"
            " /etc/kubernetes/node-feature-discovery/features.d on the host; mount it into the collector)"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise fail(f"--nfd-features-dir {directory}: not writable by this user")
    url, token = service
    return directory, url, token, interval_s


def _remedy_flags(
    flag: bool | None, service: tuple[str, str | None] | None, s: Settings
) -> tuple[str, str, float] | None:
    """(service URL, write token, poll interval) when the agent carries out remedies, None when off.

    On by default where a service and a token are given; asked for (the flag, GPUHEALTH_REMEDIES) without
    them, an error: reports are writes, a remedy whose outcome cannot be reported is not carried out."""
    if flag is False or (flag is None and not s.remedies):
        return None
    asked = flag is True or "remedies" in s.model_fields_set
    if service is None or not service[1]:
        if not asked:
            return None
        need = "--service-url: the central gpuhealth serve" if service is None else "--service-token"
        raise fail(f"--remedies needs {need} (reports go to the service with its write token, GPUHEALTH_TOKEN)")
    try:
        poll_s = parse_duration(s.remedies_interval)
    except ValueError as e:
        raise fail(f"GPUHEALTH_REMEDIES_INTERVAL: {e}") from None
    return service[0], service[1], poll_s


def _remedy_agent(
    running: RunningCollector, flags: tuple[str, str, float], sentinel: str, interval_s: float, s: Settings
) -> RemedyAgent:
    """The loop carrying out the service's remedies, its series on the collector's /metrics."""
    from collector.probes import snapshot_util
    from collector.remediate import RemedyAgent, RemedyCollector
    from collector.verify import Verifier, verify_runner
    from core.service_client import HttpRemedies

    if sentinel.strip() and not Path(sentinel).parent.is_dir():
        raise fail(
            f"--reboot-sentinel {sentinel}: no folder {Path(sentinel).parent} (mount the host's, e.g. /run/gpuhealth)"
        )
    url, token, poll_s = flags
    b = running.backend
    util = snapshot_util(lambda: running.sampler.latest, interval_s)
    agent = RemedyAgent(
        HttpRemedies(url, token=token), b, reboot_sentinel=sentinel, poll_s=poll_s, resetter=running.resetter,
        verifier=Verifier(b, verify_runner(b), probe_config(s), fallback_util=util),
    )  # fmt: skip
    running.registry.register(RemedyCollector(agent))
    return agent


def _remedies_line(agent: RemedyAgent | None, service: tuple[str, str | None] | None) -> str:
    """The start-up line saying what the agent does with remedies ("" when nothing needs saying)."""
    from collector.dcgm_diag import DcgmDiagRunner

    if agent is None:
        if service is not None and not service[1]:
            return "\n  remedies: off: no --service-token (the service's write token) to report with"
        return ""
    url = service[0] if service is not None else "the service"
    reset = "allowed" if agent.resetter.allow else "refused (--allow-reset)"
    reboot = f"through {agent.reboot_sentinel}" if agent.reboot_sentinel else "refused (--reboot-sentinel)"
    runner = agent.verifier.runner
    verify = ",".join(agent.verifier.config.tests) if runner is not None else "refused (no probes here)"
    if isinstance(runner, DcgmDiagRunner):
        verify += f" + dcgmi diag -r {runner.level}"
    return escape(f"\n  remedies: from {url} every {agent.poll_s:g}s; reset {reset}, reboot {reboot}, verify {verify}")


def _nfd_config(flags: tuple[Path, str, str | None, float], backend: Backend, hostname: str | None) -> NfdConfig:
    """The NFD labeler's config; the node is the host the backend reports its GPUs under (the host label)."""
    import socket

    from collector.nfd import NfdConfig

    hosts = sorted({g.hostname for g in backend.gpus()})
    if len(hosts) > 1:
        raise fail(
            f"--nfd-features-dir labels one node, but the {backend.name} backend reports {len(hosts)} hosts"
            f" ({', '.join(hosts[:3])}{', …' if len(hosts) > 3 else ''}); run one collector per node"
        )
    directory, url, token, interval_s = flags
    node = hosts[0] if hosts else (hostname or socket.gethostname())
    return NfdConfig(directory=directory, service_url=url, hostname=node, token=token, interval_s=interval_s)
