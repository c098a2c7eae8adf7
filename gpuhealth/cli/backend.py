"""Backend flags shared by `gpuhealth collect` and `gpuhealth serve`, and opening the backend they name."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from core import catalog
from core.labels import HOST_LABELS
from core.settings import Settings
from core.units import parse_duration

if TYPE_CHECKING:
    from collections.abc import Sequence

    from collector.attribution import Attributor
    from collector.backends.base import Backend
    from simulator.config import FaultSpec

err = Console(stderr=True)
log = logging.getLogger("gpuhealth.collect")

BackendOpt = Annotated[str | None, typer.Option(help="auto | nvml | dcgm | sim | replay (env GPUHEALTH_BACKEND)")]
DcgmAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="dcgm: nv-hostengine's HOST:PORT, e.g. the GPU Operator's nvidia-dcgm.gpu-operator:5555"
        " (GPUHEALTH_DCGM_ADDRESS; default localhost, or an embedded engine)"
    ),
]
IntervalOpt = Annotated[str | None, typer.Option(help="sampling interval, e.g. 10s")]
HostnameOpt = Annotated[str | None, typer.Option(help="host label value (default: this host)")]
HostnameLabelOpt = Annotated[str | None, typer.Option(help="Hostname (dcgm-exporter < 2026) or hostname")]
FieldsOpt = Annotated[str | None, typer.Option(help='"default", "all" or comma-separated short names')]
CollectorsOpt = Annotated[
    Path | None,
    typer.Option(
        help="a dcgm-exporter counters CSV (its -f/--collectors file, unchanged): the fields it lists that gpuhealth"
        " knows, and its `label` rows; --fields adds to it (GPUHEALTH_COLLECTORS)"
    ),
]
SimNodesOpt = Annotated[int, typer.Option(help="sim: nodes to simulate", min=1)]
SimGpusOpt = Annotated[int, typer.Option(help="sim: GPUs per node", min=1)]
SimSpareOpt = Annotated[int, typer.Option(help="sim: the last N nodes stay idle (a spare pool, probed)", min=0)]
SimKernelLogOpt = Annotated[
    str,
    typer.Option(help="sim: write each node's kernel log (/dev/kmsg records) into this directory and count XIDs "
                 "from it, those NVML's events miss too (the log-xid fault)"),
]  # fmt: skip
SeedOpt = Annotated[int, typer.Option(help="sim: random seed")]
SimModelOpt = Annotated[str | None, typer.Option(help="sim: GPU model name")]
SimSpeedOpt = Annotated[float, typer.Option(help="sim: simulated seconds per real second", min=0.001)]
SimFaultOpt = Annotated[
    list[str] | None,
    typer.Option(help="sim: inject a fault, GPU:MODE[:HOURS] (ecc|thermal|pcie|offbus|gsp|sram|remap|gsp-reset)"),
]
HistoryOpt = Annotated[Path | None, typer.Option(help="replay: the history file to serve")]
SpeedOpt = Annotated[
    float, typer.Option(help="replay: history seconds per real second (3600 = an hour a second)", min=0.001)
]
LoopOpt = Annotated[bool, typer.Option(help="replay: start over at the end")]
LogLevelOpt = Annotated[str | None, typer.Option(help="DEBUG, INFO, WARNING")]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one line to stderr and return the exit to raise."""
    # escaped: a message quotes user input, and "[/x]" in it would be read as rich markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def load_settings() -> Settings:
    """Settings from the environment and .env, or one clear error line."""
    try:
        return Settings()
    except Exception as e:  # pydantic's message names the variable and the allowed values
        raise fail(f"invalid GPUHEALTH_* setting: {' '.join(str(e).split())}") from None


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: a pull from Prometheus is dozens of them a minute.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


@dataclass(frozen=True)
class BackendFlags:
    """The backend flags as given (None: take the setting)."""

    backend: str | None = None
    interval: str | None = None
    hostname: str | None = None
    hostname_label: str | None = None
    fields: str | None = None
    sim_nodes: int = 1
    sim_gpus: int = 8
    seed: int = 0
    sim_model: str | None = None
    sim_speed: float = 1.0
    sim_fault: list[str] | None = None
    history: Path | None = None
    speed: float = 1.0
    loop: bool = True
    sim_start: float | None = None
    """Simulated start time (epoch seconds); None: the simulator's fixed start."""
    sim_spare_nodes: int = 0
    sim_kernel_log: str = ""
    """--sim-kernel-log: a directory for each simulated node's kernel log ("": none; collector.backends.sim)."""
    collectors: Path | None = None
    """A dcgm-exporter counters CSV choosing the fields (with --fields: their union)."""
    dcgm_address: str | None = None
    """nv-hostengine's HOST:PORT for the dcgm backend (None: the setting, else localhost)."""


@dataclass
class OpenedBackend:
    backend: Backend
    fields: list[catalog.Field]
    interval_s: float
    hostname_label: str
    labels: list[catalog.LabelField] = field(default_factory=lambda: list(catalog.default_labels()))
    """The label fields on every series of a GPU (DCGM_FI_DRIVER_VERSION)."""


def open_from_flags(flags: BackendFlags, s: Settings) -> OpenedBackend:
    """Check the flags and open the backend they name; every problem is one `error:` line."""
    from collector.backends.base import BackendError, CommonOptions
    from collector.backends.factory import names, open_backend
    from simulator.config import FaultSpec

    backend = flags.backend or s.backend
    if backend not in names():
        raise fail(f"unknown backend {backend!r}; choose one of {', '.join(names())}")
    label = flags.hostname_label or s.hostname_label
    if label not in HOST_LABELS:
        raise fail(f"--hostname-label must be {' or '.join(HOST_LABELS)}, not {label!r}")
    try:
        interval_s = parse_duration(flags.interval or s.interval)
        chosen, labels = select_fields(flags, s)
        faults = [FaultSpec.parse(f) for f in flags.sim_fault or []]
    except ValueError as e:
        raise fail(str(e)) from None
    if faults and backend != "sim":
        raise fail("--sim-fault needs --backend sim")
    options = backend_options(backend, flags, faults, s)
    if (backend == "replay") != (flags.history is not None):
        raise fail("--backend replay needs --history FILE (and --history needs --backend replay)")
    common = CommonOptions(flags.hostname or s.hostname or socket.gethostname(), chosen, interval_s)
    try:
        b = open_backend(backend, options, common)
    except (BackendError, ValueError) as e:
        raise fail(str(e)) from None
    return OpenedBackend(b, list(chosen), interval_s, label, list(labels))


def select_fields(flags: BackendFlags, s: Settings) -> tuple[tuple[catalog.Field, ...], tuple[catalog.LabelField, ...]]:
    """The fields and label fields to export: --fields alone; or a counters file, plus what --fields adds.

    With a counters file, --fields (or GPUHEALTH_FIELDS when set) adds to the file's fields, in catalogue
    order; the labels are the file's. Names gpuhealth does not know are one warning, not an error.
    ValueError (one line) for a bad name or a malformed file.
    """
    from core import counters_csv

    collectors = flags.collectors or (Path(s.collectors) if s.collectors else None)
    extra = flags.fields or (s.fields if "fields" in s.model_fields_set else None)
    if collectors is None:
        return catalog.select(extra or s.fields), catalog.default_labels()
    picked = counters_csv.read(collectors)
    if picked.unknown:
        log.warning(
            "counters file %s: %d field(s) gpuhealth does not export, skipped: %s",
            collectors, len(picked.unknown), ", ".join(picked.unknown),
        )  # fmt: skip
    if picked.retyped:
        log.warning("counters file %s: exported with the catalogue's type: %s", collectors, "; ".join(picked.retyped))
    added = {f.name for f in catalog.select(extra)} if extra else set()
    fields = tuple(f for f in catalog.FIELDS if f in picked.fields or f.name in added)
    return fields, picked.labels


def backend_options(backend: str, flags: BackendFlags, faults: Sequence[FaultSpec], s: Settings) -> object | None:
    """The options of the backend named from its flags (None: a backend without flags, its defaults);
    a bad or misplaced --dcgm-address is one `error:` line."""
    from collector.backends.dcgm import DcgmOptions, parse_address

    address = flags.dcgm_address or s.dcgm_address
    if address and backend != "dcgm":
        # auto would fall back to NVML when that address does not answer: name the backend instead
        raise fail(f"--dcgm-address (GPUHEALTH_DCGM_ADDRESS) needs --backend dcgm, not {backend}")
    if backend == "dcgm":
        try:
            return DcgmOptions(host=parse_address(address) if address else "localhost", diag_level=s.probe_dcgm_diag)
        except ValueError as e:
            raise fail(str(e)) from None

    # Each backend's module is imported only when it is the one chosen: sim needs numpy, replay
    # pandas and pyarrow, and `collect` on a GPU node loads neither (docs/decisions/0076).
    if backend == "sim":
        from collector.backends.sim import SimOptions

        return SimOptions(
            nodes=flags.sim_nodes,
            gpus_per_node=flags.sim_gpus,
            seed=flags.seed,
            model=flags.sim_model,
            speed=flags.sim_speed,
            faults=tuple(faults),
            start=flags.sim_start,
            spare_nodes=flags.sim_spare_nodes,
            kernel_log=flags.sim_kernel_log,
        )
    if backend == "replay":
        from collector.backends.replay import ReplayOptions

        return ReplayOptions(history=flags.history, speed=flags.speed, loop=flags.loop)
    return None


def attributors_from(
    pod_resources_socket: str | None, hpc_job_mapping_dir: Path | None, s: Settings
) -> list[Attributor]:
    """The sources of workload labels the sampler asks each sample (collector.attribution): flags over settings."""
    from collector.attribution import HpcJobAttributor
    from collector.podresources.client import DEFAULT_SOCKET, PodResourcesAttributor, resource_patterns

    found: list[Attributor] = []
    socket = pod_resources_socket if pod_resources_socket is not None else s.pod_resources_socket
    if socket is None and DEFAULT_SOCKET.exists():  # a Kubernetes node: on unless turned off
        socket = str(DEFAULT_SOCKET)
    if socket:
        try:
            resources = resource_patterns(s.pod_resources_resource_names)
        except ValueError as e:
            raise fail(str(e)) from None
        found.append(PodResourcesAttributor(Path(socket), resources=resources))
    directory = hpc_job_mapping_dir or (Path(s.hpc_job_mapping_dir) if s.hpc_job_mapping_dir else None)
    if directory is not None:
        found.append(HpcJobAttributor(directory))
    return found
