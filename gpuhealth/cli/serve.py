"""`gpuhealth serve` and `gpuhealth demo`: the service in one process."""

from __future__ import annotations

import contextlib
import secrets
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from core.settings import Settings
from core.units import parse_duration, parse_listen
from gpuhealth.cli.actuate import ActuateOpt, ActuateTargetOpt, actuation_from_settings, actuator_plan
from gpuhealth.cli.backend import (
    BackendFlags,
    BackendOpt,
    DcgmAddressOpt,
    FieldsOpt,
    HistoryOpt,
    HostnameLabelOpt,
    HostnameOpt,
    IntervalOpt,
    LogLevelOpt,
    LoopOpt,
    OpenedBackend,
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
from gpuhealth.cli.db import retention_from_settings

if TYPE_CHECKING:
    from actuate.target import Target
    from api.server import ServerLimits
    from collector.backends.base import Backend
    from collector.kernel_log_source import KernelLogOptions
    from collector.probes import ProbeConfig
    from gpuhealth.serve import Service
    from predictor.model import RiskModel
    from service.actuator import ActuatorConfig
    from service.puller import PrometheusPuller
    from service.replicas import Replica
    from store import Store

out = Console(stderr=True)
serve_app = typer.Typer()
"""`gpuhealth serve` and `gpuhealth demo`: top-level commands (`gpuhealth.cli` adds them)."""

DbOpt = Annotated[
    str | None, typer.Option(help="database URL: sqlite:///FILE or postgresql+psycopg://… (GPUHEALTH_DB)")
]
ListenOpt = Annotated[str | None, typer.Option(help="HOST:PORT of the API and /metrics (GPUHEALTH_API_LISTEN)")]
ScoreOpt = Annotated[str | None, typer.Option(help="how often every GPU is scored, e.g. 5m")]
ModelOpt = Annotated[Path | None, typer.Option(help="risk model (.skops); default: the shipped model")]
TokenFileOpt = Annotated[
    Path | None, typer.Option(help="file holding the bearer token for writes (or set GPUHEALTH_TOKEN)")
]
SourceOpt = Annotated[
    str | None,
    typer.Option(
        help="local: collect on this box (--backend); prometheus: pull the fleet from --prometheus (GPUHEALTH_SOURCE)"
    ),
]
PrometheusOpt = Annotated[
    str | None, typer.Option("--prometheus", help="Prometheus base URL for --source prometheus, e.g. http://prom:9090")
]
PullEveryOpt = Annotated[str | None, typer.Option(help="--source prometheus: how often to pull, e.g. 1m")]
PullStepOpt = Annotated[str | None, typer.Option(help="--source prometheus: the resolution stored, e.g. 5m")]
BackfillOpt = Annotated[
    str | None, typer.Option(help="--source prometheus: how far the first pull (and a catch-up) reaches back, e.g. 2d")
]
ReplicaIdOpt = Annotated[
    str | None,
    typer.Option(
        help="--source prometheus: this replica's unique name among those sharing the database "
        "(default: hostname-pid; GPUHEALTH_REPLICA_ID)"
    ),
]
LeaseSecondsOpt = Annotated[
    float | None,
    typer.Option(
        help="--source prometheus: how long a replica's share outlives it, in seconds (default 60; "
        "GPUHEALTH_LEASE_SECONDS); replicas are on by default on PostgreSQL, on SQLite with this or --replica-id"
    ),
]

DEMO_NODES = 4
DEMO_GPUS = 8
DEMO_STEP_S = 600.0
"""Simulated seconds per demo sample: one real second is ten simulated minutes."""
DEMO_WARMUP_STEPS = 288
"""Two simulated days of history, stored before the service starts, so the model has something to read."""
DEMO_SPARE_NODES = 1
"""The last node is a spare pool: idle, so the collector probes it (GEMM, memtest, bandwidth, PCIe)."""
DEMO_PROBE_EVERY = "20s"
"""Probe each idle simulated GPU every 20 s, so the probe series and a slow GPU show within the minute."""
DEMO_FAULTS = (
    "11:ecc:50", "28:offbus:50.5", "17:pcie:62", "2:thermal:57", "21:ecc:55", "26:thermal:70",
    "24:remap:49", "29:gsp-reset:51", "4:fabric:49.5", "20:rail-flap:49", "30:log-xid:49.5",
)  # fmt: skip
"""GPU (global index: node × 8 + GPU) and fault times in simulated hours from the start of the (warm-up)
history: they ripen within the first minute; GPU 11 is sim-node-01's GPU 3, whose row remapping fails.
Two are cured by a reset: GPU 24 (sim-node-03's GPU 0) gets a pending row remap alone (reset at idle),
GPU 29 (sim-node-03's GPU 5) a GSP timeout, XID 119 (drain, reset now); both sit on the idle spare node,
so no job holds up their reset or verification probes, and at the demo's seed neither faults again within
the first simulated week (tests/simulator/test_remedies.py). Two are the node's (simulator.fabric): GPU 4's
node sim-node-00 loses Fabric Manager (fabric not ready on its 8 GPUs), and the rail of sim-node-02's GPUs
4 and 5 (GPU 20) flaps four times an hour; each demotes its node with its reason (predictor.fabric). GPU 30
(sim-node-03's GPU 6, the idle spare node) logs a GSP error, XID 120, in its node's kernel log only
(simulator.kernel_log): NVML's events never deliver it, the kernel-log reader does, and the rules drain
the GPU for a reset."""
DEMO_ACTUATE_EVERY = "5s"
DEMO_REMEDY_POLL_S = 2.0
"""The demo's node agent asks for its remedies this often (wall seconds: twenty simulated minutes)."""
"""The demo's actuator (dry-run on the simulated fleet) looks every 5 s: its plans show within the minute."""


def probe_config(s: Settings, every: str | None = None) -> ProbeConfig:
    """The probe schedule from settings (`every` overrides GPUHEALTH_PROBE_EVERY), or one error line."""
    from collector.probes import ProbeConfig

    try:
        return ProbeConfig.from_settings(s if every is None else s.model_copy(update={"probe_every": every}))
    except ValueError as e:
        raise fail(f"invalid probe setting: {e}") from None


def kernel_log_options(s: Settings) -> KernelLogOptions:
    """Which kernel log the in-process or per-node collector reads (GPUHEALTH_KERNEL_LOG*)."""
    from collector.kernel_log_source import JournalOptions, KernelLogOptions

    journal = JournalOptions(s.journalctl, s.kernel_log_journal_cursor, s.journal_directory)
    return KernelLogOptions(s.kernel_log, s.kernel_log_cursor, s.kernel_log_source, journal)


def sysfs_root(flag: str | None, backend: str) -> Path | None:
    """The sysfs to read ports from: the flag's, else /sys for live GPUs (a simulated fleet has no NICs)."""
    if flag is not None:
        return Path(flag) if flag else None
    return None if backend in ("sim", "replay") else Path("/sys")


def _open_store(url: str) -> Store:
    from store import Store, StoreError

    try:
        return Store.open(url)
    except StoreError as e:
        raise fail(str(e)) from None


def _token(s: Settings, token_file: Path | None) -> str | None:
    if token_file is None:
        return s.token
    try:
        tok = token_file.read_text().strip()
    except OSError as e:
        raise fail(f"cannot read --token-file {token_file}: {e.strerror or e}") from None
    if not tok:
        raise fail(f"--token-file {token_file} is empty")
    return tok


def check_port(host: str, port: int) -> None:
    """Fail with one line now, not after minutes of start-up, when host:port cannot be listened on."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def server_limits(s: Settings) -> ServerLimits:
    """What slow or many clients may hold, from settings (the body timeout is the API's own), or one error line."""
    from api.server import ServerLimits

    try:
        keep_alive_s = parse_duration(s.keep_alive_timeout)
    except ValueError as e:
        raise fail(f"invalid GPUHEALTH_KEEP_ALIVE_TIMEOUT: {e}") from None
    try:
        header_s = parse_duration(s.header_timeout)
    except ValueError as e:
        raise fail(f"invalid GPUHEALTH_HEADER_TIMEOUT: {e}") from None
    return ServerLimits(keep_alive_s, s.max_connections, header_s)


def _run(svc: Service, host: str, port: int, log_level: str, limits: ServerLimits | None = None) -> None:
    import uvicorn

    from api.server import uvicorn_config

    server = uvicorn.Server(uvicorn_config(svc.app, host, port, limits, log_level))
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind (a race with check_port)
        raise fail(f"cannot listen on {host}:{port}") from None


@serve_app.command()
def serve(
    backend: BackendOpt = None,
    dcgm_address: DcgmAddressOpt = None,
    db: DbOpt = None,
    listen: ListenOpt = None,
    interval: IntervalOpt = None,
    score_interval: ScoreOpt = None,
    model: ModelOpt = None,
    token_file: TokenFileOpt = None,
    no_collector: Annotated[bool, typer.Option(help="API and scoring only (samples arrive by other means)")] = False,
    hostname: HostnameOpt = None,
    hostname_label: HostnameLabelOpt = None,
    fields: FieldsOpt = None,
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
    source: SourceOpt = None,
    prometheus: PrometheusOpt = None,
    pull_every: PullEveryOpt = None,
    pull_step: PullStepOpt = None,
    backfill: BackfillOpt = None,
    replica_id: ReplicaIdOpt = None,
    lease_seconds: LeaseSecondsOpt = None,
    actuate: ActuateOpt = None,
    actuate_target: ActuateTargetOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Collect (or pull from Prometheus), keep history, score every GPU and answer over REST and /metrics."""
    from predictor.thresholds import Thresholds

    s = load_settings()
    level = log_level or s.log_level
    try:
        host, port = parse_listen(listen or s.api_listen)
        score_s = parse_duration(score_interval or s.score_interval)
        body_timeout_s = parse_duration(s.body_timeout)
        thresholds = Thresholds.from_settings(s)
    except ValueError as e:
        raise fail(str(e)) from None
    src, prom_url = _source(s, source, prometheus, backend=backend, no_collector=no_collector)
    pull = _pull_plan(s, src, pull_every, pull_step, backfill)
    lease = _lease_plan(s, src, replica_id, lease_seconds)
    retention = retention_from_settings(s)
    acting = actuator_plan(s, actuate, actuate_target)
    limits = server_limits(s)
    # The service's modules (the API, the store, the model) take seconds to load: only once the
    # flags are known good, so that a mistyped one is answered at once; and before the logging
    # is set up, as the checks above are, so that what the modules say as they load stays quiet.
    from api.app import ApiConfig
    from gpuhealth.serve import build_service
    from service.assemble import LoopConfig, build_loops

    setup_logging(level)
    check_port(host, port)
    token = _token(s, token_file)
    m = _load_model(s, model)
    store = _open_store(db or s.db)
    opened = puller = replica = None
    if pull is not None:
        assert prom_url is not None
        replica = _replica(store, lease, f"{host}:{port}")
        puller = _puller(store, prom_url, pull, replica)
    elif not no_collector:
        flags = BackendFlags(
            backend, interval, hostname, hostname_label, fields, sim_nodes, sim_gpus, seed, sim_model, sim_speed,
            sim_fault, history, speed, loop, sim_start=time.time() if (backend or s.backend) == "sim" else None,
            sim_spare_nodes=sim_spare_nodes, dcgm_address=dcgm_address, sim_kernel_log=sim_kernel_log,
        )  # fmt: skip
        opened = open_from_flags(flags, s)
    actuation = actuation_from_settings(s, store, acting)
    # The workloads on each GPU (pods, Slurm jobs) of a local collector, from GPUHEALTH_POD_RESOURCES_SOCKET
    # and GPUHEALTH_HPC_JOB_MAPPING_DIR; fleet mode reads them from the exporters' labels instead.
    attributors = attributors_from(None, None, s) if opened is not None else []
    config = LoopConfig(
        fields=opened.fields if opened else (),
        interval_s=opened.interval_s if opened else 10.0,
        score_interval_s=score_s,
        score_window_mb=s.score_window_mb,
        score_lanes=s.score_lanes,
        thresholds=thresholds,
        buffer_samples=s.buffer_samples,
        hostname_label=opened.hostname_label if opened else s.hostname_label,
        probes=probe_config(s),
        retention=retention,
        attributors=attributors,
        kernel_log=kernel_log_options(s) if opened else None,
        sysfs_root=sysfs_root(None, opened.backend.name) if opened else None,
    )
    loops = build_loops(
        store, m, config, backend=opened.backend if opened else None, puller=puller, replica=replica,
        actuation=actuation,
    )  # fmt: skip
    api = ApiConfig(
        token=token,
        read_open=s.read_open,
        metrics_open=s.metrics_open,
        max_request_bytes=s.max_request_bytes,
        body_timeout_s=body_timeout_s,
    )
    svc = build_service(loops, api)
    _announce(_feed(opened, pull, prom_url, replica), store, score_s, host, port, token)
    if actuation is not None:
        out.print(f"  actuator: {actuation[1].mode} on {actuation[0].name}; {host_url(host, port)}/v1/actions",
                  highlight=False, soft_wrap=True)  # fmt: skip
    _run(svc, host, port, level, limits)


PullPlan = tuple[float, float, timedelta]
"""--source prometheus: pull every (s), step stored (s), how far back the first pull reaches."""


def _source(
    s: Settings, source: str | None, prometheus: str | None, *, backend: str | None, no_collector: bool
) -> tuple[str, str | None]:
    """Where samples come from (local or prometheus) and the Prometheus URL, checked against the other flags."""
    src = source or s.source
    if src not in ("local", "prometheus"):
        raise fail(f"unknown --source {src!r}: use local or prometheus")
    prom_url = prometheus or s.prometheus_url
    if src == "prometheus" and not prom_url:
        raise fail("--source prometheus needs --prometheus URL (or GPUHEALTH_PROMETHEUS_URL)")
    if src == "local" and prometheus:
        raise fail("--prometheus is for --source prometheus (a local collector does not read Prometheus)")
    if src == "prometheus" and (backend is not None or no_collector):
        raise fail("--source prometheus has no local collector: drop --backend / --no-collector")
    return src, prom_url


def _pull_plan(
    s: Settings, src: str, pull_every: str | None, pull_step: str | None, backfill: str | None
) -> PullPlan | None:
    """The puller's schedule for --source prometheus (None for a local source), or one error line."""
    try:
        pull = (
            (parse_duration(pull_every or s.pull_every), parse_duration(pull_step or s.pull_step),
             timedelta(seconds=parse_duration(backfill or s.backfill)))
            if src == "prometheus" else None
        )  # fmt: skip
        if pull is not None:
            from service.puller import check_settings

            check_settings(*pull)
    except ValueError as e:
        raise fail(str(e)) from None
    return pull


LeasePlan = tuple[str | None, float | None, bool]
"""--source prometheus: replica id, lease seconds (None: the defaults) and whether they were asked for."""


def _lease_plan(s: Settings, src: str, replica_id: str | None, lease_seconds: float | None) -> LeasePlan:
    """The replica settings, checked: for --source prometheus only, a positive lease."""
    rid = replica_id or s.replica_id
    lease = lease_seconds if lease_seconds is not None else s.lease_seconds
    asked = rid is not None or lease is not None
    if asked and src != "prometheus":
        raise fail("--replica-id and --lease-seconds are for --source prometheus (replicas split what they pull)")
    if lease is not None and not lease > 0:
        raise fail(f"--lease-seconds must be positive, got {lease:g}")
    return rid, lease, asked


def _replica(store: Store, lease: LeasePlan, listen: str) -> Replica | None:
    """This replica's leases: always on PostgreSQL, on SQLite (one box) only when asked for."""
    from service.replicas import DEFAULT_LEASE_S, Replica

    rid, lease_s, asked = lease
    if store.dialect != "postgresql" and not asked:
        return None
    return Replica(store, rid, lease_s if lease_s is not None else DEFAULT_LEASE_S, info={"listen": listen})


def _load_model(s: Settings, model: Path | None) -> RiskModel:
    """The risk model (--model, else the setting, else the shipped one), or one error line."""
    from predictor.model import ModelError
    from predictor.score import load_model

    try:
        return load_model(model or s.model)
    except (ModelError, OSError, ValueError) as e:
        raise fail(f"cannot load the model: {e}") from None


def _puller(store: Store, prom_url: str, pull: PullPlan, replica: Replica | None) -> PrometheusPuller:
    """The worker that pulls the fleet (or the replica's share of it) from Prometheus into the store."""
    from service.puller import PrometheusPuller

    return PrometheusPuller(store, prom_url, every_s=pull[0], step_s=pull[1], backfill=pull[2], replica=replica)


def _feed(
    opened: OpenedBackend | None, pull: PullPlan | None, prom_url: str | None, replica: Replica | None = None
) -> str:
    """Where the service's samples come from, in words."""
    if opened is not None:
        return f"{opened.backend.name} backend, {len(opened.backend.gpus())} GPU(s)"
    if pull is None:
        return "no collector"
    share = f" (replica {replica.replica_id}, lease {replica.lease_s:g}s)" if replica is not None else ""
    return f"pulling from Prometheus at {prom_url} every {pull[0]:g}s{share}"


def host_url(host: str, port: int) -> str:
    """The URL a person on this machine opens for a listen address."""
    return f"http://{'localhost' if host in ('0.0.0.0', '::', '') else host}:{port}"


def _announce(what: str, store: Store, score_s: float, host: str, port: int, token: str | None) -> None:
    """Tell stderr what is served where, and whether writes are enabled."""
    base = host_url(host, port)
    out.print(
        f"gpuhealth serve: {what}, database {store.url}, scoring every {score_s:g}s\n"
        f"  API docs: {base}/docs\n  GPUs:     {base}/v1/gpus\n  metrics:  {base}/metrics",
        highlight=False,
        soft_wrap=True,
    )
    if token is None:
        out.print(
            "  writes are disabled: set GPUHEALTH_TOKEN or --token-file to enable them", highlight=False, soft_wrap=True
        )


def _demo_actuation(s: Settings, store: Store, backend: Backend, nodes: int) -> tuple[Target, ActuatorConfig] | None:
    """The demo's actuator: on, on the simulated scheduler, with the remediation loop; a reboot of a simulated
    node resets its GPUs. Its breaker lets every node go (a 4-node fleet would otherwise allow one an hour,
    and an open breaker stops every remedy until someone resets it)."""
    from dataclasses import replace

    from actuate.breaker import BreakerPolicy
    from actuate.memory import MemoryTarget
    from collector.backends.base import BackendError, Resettable
    from gpuhealth.cli.actuate import remediation_config

    plan = actuator_plan(s, "on", "sim", interval=DEMO_ACTUATE_EVERY)
    if plan is None:
        return None
    demo = replace(plan[1], remediation=remediation_config(s), breaker=BreakerPolicy(max_fraction=1.0, max_nodes=nodes))
    actuation = actuation_from_settings(s, store, (plan[0], demo))
    target = actuation[0] if actuation is not None else None
    if isinstance(target, MemoryTarget) and isinstance(backend, Resettable):
        sim = backend

        def reboot(host: str) -> None:
            for g in sim.gpus():
                if g.hostname == host:
                    with contextlib.suppress(BackendError):  # off the bus: a reboot leaves it lost in the sim
                        sim.reset_gpu(g)

        target.on_reboot = reboot
    return actuation


@serve_app.command()
def demo(
    listen: Annotated[
        str, typer.Option(help="HOST:PORT of the API and /metrics (`make demo DEMO_LISTEN=HOST:PORT` sets it)")
    ] = "127.0.0.1:8080",
    db: Annotated[Path, typer.Option(help="SQLite file for the demo (started afresh)")] = Path("build/demo.db"),
    nodes: Annotated[int, typer.Option(min=1, help="simulated nodes")] = DEMO_NODES,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node")] = DEMO_GPUS,
    seed: Annotated[int, typer.Option(help="random seed")] = 7,
    log_level: LogLevelOpt = None,
) -> None:
    """A simulated fleet with faults that ripen within a minute, served with an embedded SQLite database."""
    from api.app import ApiConfig
    from gpuhealth.serve import build_service
    from predictor.score import load_model
    from predictor.thresholds import Thresholds
    from service.assemble import LoopConfig, build_loops, warm_up

    s = load_settings()
    level = log_level or "WARNING"
    setup_logging(level)
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise fail(str(e)) from None
    check_port(host, port)
    token = s.token or secrets.token_urlsafe(16)
    db.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    faults = [f for f in DEMO_FAULTS if int(f.split(":")[0]) < nodes * gpus_per_node]
    interval_s = 1.0
    flags = BackendFlags(
        "sim", f"{interval_s}s", None, None, None, nodes, gpus_per_node, seed, None, DEMO_STEP_S / interval_s,
        faults, sim_start=time.time() - DEMO_WARMUP_STEPS * DEMO_STEP_S, sim_spare_nodes=DEMO_SPARE_NODES,
        sim_kernel_log=str(db.parent / f"{db.name}-kmsg"),  # each node's kernel log, beside the database
    )  # fmt: skip
    opened = open_from_flags(flags, s)
    store = _open_store(f"sqlite:///{db}")
    actuation = _demo_actuation(s, store, opened.backend, nodes)
    config = LoopConfig(
        fields=opened.fields,
        interval_s=interval_s,
        score_interval_s=5.0,
        thresholds=Thresholds.from_settings(s),
        hostname_label=opened.hostname_label,
        probes=probe_config(s, every=DEMO_PROBE_EVERY),
        allow_reset=True,  # simulated GPUs
        remedy_poll_s=DEMO_REMEDY_POLL_S,
    )
    loops = build_loops(store, load_model(s.model), config, backend=opened.backend, actuation=actuation)
    svc = build_service(loops, ApiConfig(token=token))
    out.print(
        f"gpuhealth demo: simulating two days of history for {nodes * gpus_per_node} GPUs …",
        highlight=False,
        soft_wrap=True,
    )
    warm_up(loops, DEMO_WARMUP_STEPS)
    base = f"http://{host}:{port}"
    out.print(
        f"""gpuhealth demo: {nodes} nodes × {gpus_per_node} GPUs, one second = ten simulated minutes.
Faults ripen within about a minute: watch it move GPUs to watch, demote, drain and rma.
  API docs:   {base}/docs
  GPUs:       {base}/v1/gpus  (what needs action first: rma, drain, demote, watch, then risk)
  RMA list:   {base}/v1/decisions?decision=rma
  actions:    {base}/v1/actions  (the actuator on the simulated scheduler: drains, resets, verifications, returns)
  remedies:   {base}/v1/remediations  (each GPU's way back: drain, reset or reboot, verify, return or rma)
  metrics:    {base}/metrics
  database:   {db} (SQLite)
  token:      {token}
  try:        curl -s '{base}/v1/gpus?decision=rma,drain,demote,watch' | python3 -m json.tool
              curl -s -X POST -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\
                   -d '{{"by": "me"}}' {base}/v1/decisions/1/ack
Stop with Ctrl-C.""",
        highlight=False,
        soft_wrap=True,
    )
    _run(svc, host, port, level)
