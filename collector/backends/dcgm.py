"""DCGM backend: the catalogue's DCGM fields, watched in nv-hostengine (or an embedded engine).

Each NVLink link, the fabric and the NVSwitches are collector.backends.dcgm_links', read through this
backend's connection.

DCGM's Python bindings are not on PyPI; they ship with DCGM under
``bindings/python3``. They are located and imported only here, when the backend
is built, so nothing else in gpuhealth needs DCGM installed.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.backends.base import (
    BackendError,
    BackendUnavailable,
    CommonOptions,
    GpuInfo,
    GpuReading,
    ProbeRunner,
    XidEvent,
)
from collector.backends.dcgm_links import DcgmLinks, dcgm_number
from collector.backends.nvml_links import GpuLinks
from collector.nvswitch import SwitchInfo, SwitchReading
from collector.probes import SubprocessProbeRunner
from core.catalog import Field

log = logging.getLogger(__name__)

STANDARD_BINDING_DIRS: tuple[str, ...] = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",  # DCGM 4 packages
    "/usr/local/dcgm/bindings/python3",  # DCGM 3 packages
    "/usr/share/dcgm/bindings/python3",
)
"""Where DCGM packages install the Python bindings; $DCGM_HOME/bindings/python3 comes first."""

DCGM_PORT = 5555
"""nv-hostengine's default TCP port (dcgm_structs.DCGM_HE_PORT_NUMBER)."""
XID_FIELD_ID = 230
"""DCGM_FI_DEV_XID_ERRORS: the last XID; each XID is its own sample in DCGM's cache."""
PROFILING_FIELD_IDS = range(1001, 1100)
"""DCGM_FI_PROF_*: served by the profiling module, which may be missing or busy; watched apart
so their failure costs only the prof_* fields."""
KEEP_INTERVALS = 5
"""DCGM keeps samples for this many sampling intervals (enough to bridge a slow read)."""
LINK_CATALOGUE_FIELDS = frozenset({"nvlink_links_down", "gpu_fabric_state"})
"""Catalogue fields without a DCGM id that this backend fills from dcgm_links (link states, fabric)."""
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
DCGM_ENTITY_STATUS_LOST = 4
"""DcgmEntityStatusLost in dcgm_structs.h (Unknown, Ok, Unsupported, Inaccessible, Lost, ...)."""


@dataclass(frozen=True)
class DcgmModules:
    """The DCGM binding modules the backend uses (a test passes fakes)."""

    pydcgm: Any
    dcgm_structs: Any
    dcgm_fields: Any
    dcgmvalue: Any
    dcgm_field_helpers: Any


def binding_dirs(env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Candidate binding folders, each with how to name it in a message."""
    env = os.environ if env is None else env
    dirs: list[tuple[str, Path]] = []
    home = env.get("DCGM_HOME")
    if home:
        path = Path(home) / "bindings" / "python3"
        dirs.append((f"DCGM_HOME={home} ({path})", path))
    dirs += [(d, Path(d)) for d in STANDARD_BINDING_DIRS]
    return dirs


def load_bindings(dirs: Sequence[tuple[str, Path]] | None = None) -> DcgmModules:
    """Import the DCGM bindings from the first folder that has them."""
    dirs = binding_dirs() if dirs is None else dirs
    for _, path in dirs:
        if not (path / "pydcgm.py").is_file():
            continue
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
        try:
            mods = {
                name: importlib.import_module(name)
                for name in (
                    "pydcgm",
                    "dcgm_structs",
                    "dcgm_fields",
                    "dcgmvalue",
                    "dcgm_field_helpers",
                )
            }
        except Exception as err:  # broken or mismatched bindings: any import error
            raise BackendUnavailable(
                f"DCGM Python bindings in {path} do not import ({type(err).__name__}: "
                f"{_one_line(err)}): reinstall datacenter-gpu-manager or use --backend nvml"
            ) from err
        return DcgmModules(**mods)
    looked = ", ".join(label for label, _ in dirs)
    raise BackendUnavailable(
        f"DCGM Python bindings not found (looked in {looked}): install datacenter-gpu-manager or use --backend nvml"
    )


def field_names(fields: Sequence[Field]) -> dict[int, str]:
    """DCGM field id -> catalogue short name, for the fields that have a DCGM id."""
    return {f.dcgm_id: f.name for f in fields if f.dcgm_id is not None}


def sample_value(sample: Any, dcgmvalue: Any) -> float | None:
    """The number in a dcgm_field_helpers.DcgmFieldValue, or None when it is blank."""
    if getattr(sample, "isBlank", False):
        return None
    return dcgm_number(getattr(sample, "value", None), dcgmvalue)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


@dataclass(frozen=True)
class DcgmOptions:
    """The `dcgm` backend's options."""

    host: str = "localhost"
    """nv-hostengine's address, host or host:port (port 5555 by default); on this host, DCGM
    runs an embedded engine when no nv-hostengine answers."""
    diag_level: int = 0
    """`dcgmi diag -r` level (1 quick, 2 medium) run as a probe after the CUDA ones; 0: none."""


def parse_address(text: str) -> str:
    """nv-hostengine's address as DCGM takes it: HOST, HOST:PORT or [IPv6]:PORT (port 5555 when left
    out); ValueError (one line) for anything else, such as a URL, no host, or a port outside 1-65535."""
    value = text.strip()
    problem = f"the DCGM address must be HOST or HOST:PORT, e.g. nvidia-dcgm.gpu-operator:{DCGM_PORT}, not {text!r}"
    if "://" in value:
        raise ValueError(f"{problem} (no URL scheme: nv-hostengine speaks DCGM's own protocol)")
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        sep, port = rest[:1], rest[1:]
        if rest and sep != ":":
            raise ValueError(problem)
    elif value.count(":") > 1:
        raise ValueError(f"{problem} (an IPv6 address goes in brackets: [ADDRESS]:PORT)")
    else:
        host, sep, port = value.partition(":")
    if not host or "/" in host or any(c.isspace() for c in host):
        raise ValueError(problem)
    if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{problem} (the port must be 1-65535)")
    return value


class DcgmBackend:
    """GPU telemetry from DCGM: latest values of watched fields, XIDs from the field history."""

    name = "dcgm"

    def __init__(
        self,
        hostname: str,
        fields: Sequence[Field],
        interval_s: float,
        host: str = "localhost",
        *,
        loader: Callable[[], DcgmModules] | None = None,
        diag_level: int = 0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"sampling interval must be positive, got {interval_s}")
        self.hostname = hostname
        self.host = host
        self.diag_level = diag_level
        self.address = host if ":" in host else f"{host}:{DCGM_PORT}"
        self._m = (loader or load_bindings)()
        self._error: type[BaseException] = self._m.dcgm_structs.DCGMError
        self._names = field_names(fields)
        self._link_fields = LINK_CATALOGUE_FIELDS & {f.name for f in fields}
        self._links_failing = False
        self._events: list[XidEvent] = []
        self._lock = threading.Lock()
        self._field_groups: list[Any] = []
        self._closed = False
        self._handle = self._connect()
        try:
            self._setup(interval_s)
        except self._error as err:
            self.close()
            raise BackendError(f"setting up DCGM field watches on {self.address}: {_one_line(err)}") from err
        except BaseException:
            self.close()
            raise

    # --- start-up ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        structs = self._m.dcgm_structs
        new_handle = self._m.pydcgm.DcgmHandle
        try:
            return new_handle(ipAddress=self.host, opMode=structs.DCGM_OPERATION_MODE_AUTO)
        except self._error as err:
            if getattr(err, "value", None) == getattr(structs, "DCGM_ST_LIBRARY_NOT_FOUND", None):
                raise BackendUnavailable(
                    "DCGM library libdcgm.so not found: install datacenter-gpu-manager or use --backend nvml"
                ) from err
            standalone = err
        also = ""
        if self.host in LOCAL_HOSTS:
            # No nv-hostengine running: DCGM can run its engine inside this process instead.
            try:
                handle = new_handle(ipAddress=None, opMode=structs.DCGM_OPERATION_MODE_AUTO)
            except self._error as err:
                also = f" (starting an embedded engine failed too: {_one_line(err)})"
            else:
                log.info("nv-hostengine not reachable at %s; using embedded DCGM", self.address)
                return handle
        raise BackendUnavailable(
            f"cannot reach nv-hostengine at {self.address}: {_one_line(standalone)}{also}; "
            "start nv-hostengine or use --backend nvml"
        ) from standalone

    def _setup(self, interval_s: float) -> None:
        m = self._m
        self._system = self._handle.GetSystem()
        discovery = self._system.discovery
        self._gpus = {int(gid): self._info(discovery, int(gid)) for gid in discovery.GetAllSupportedGpuIds()}
        if not self._gpus:
            log.warning("DCGM at %s found no supported GPUs", self.address)
        self._group = self._system.GetDefaultGroup()
        update_us = int(interval_s * 1_000_000)
        keep_s = KEEP_INTERVALS * interval_s
        ids = [i for i in sorted(set(self._names) | {XID_FIELD_ID}) if self._known(i)]
        base = [i for i in ids if i not in PROFILING_FIELD_IDS]
        prof = [i for i in ids if i in PROFILING_FIELD_IDS]
        self._base = self._watch("base", base, update_us, keep_s)
        self._prof: Any = None
        if prof:
            try:
                self._prof = self._watch("prof", prof, update_us, keep_s)
            except self._error as err:
                log.warning(
                    "DCGM profiling fields unavailable (%s): prof_* metrics will be absent",
                    _one_line(err),
                )
        self._xid = self._watch("xid", [XID_FIELD_ID], update_us, keep_s)

        def watch(label: str, ids: list[int], group: Any) -> Any:
            known = [i for i in ids if self._known(i)]
            return self._watch(label, known, update_us, keep_s, group) if known else None

        self._links = DcgmLinks(m, self._handle, self._system, self._group, self._gpus, watch)
        # Fill the cache once so the first read has values rather than blanks.
        self._system.UpdateAllFields(True)
        self._history = m.dcgm_field_helpers.DcgmFieldValueEntityCollection(
            self._handle.handle, m.dcgm_structs.DCGM_GROUP_ALL_GPUS
        )
        # Prime: XIDs cached before we started are history, not new events.
        self._history.GetAllSinceLastCall(self._xid)
        self._history.EmptyValues()

    def _info(self, discovery: Any, gid: int) -> GpuInfo:
        ident = discovery.GetGpuAttributes(gid).identifiers
        return GpuInfo(
            index=gid,
            uuid=_text(ident.uuid),
            model_name=_text(ident.deviceName),
            hostname=self.hostname,
            pci_bus_id=_text(ident.pciBusId),
            serial=_text(ident.serial),
            driver_version=_text(ident.driverVersion),
        )

    def _known(self, field_id: int) -> bool:
        """Whether this DCGM version knows the field (1523 needs DCGM 4): unknown ids fail
        the whole field group."""
        try:
            known = self._m.dcgm_fields.DcgmFieldGetById(field_id) is not None
        except Exception:  # metadata lookup is best-effort; let the watch decide
            return True
        if not known:
            log.info("DCGM at %s does not know field %d; it will be absent", self.address, field_id)
        return known

    def _watch(self, label: str, ids: list[int], update_us: int, keep_s: float, entities: Any = None) -> Any:
        """Watch `ids` on `entities` (a DcgmGroup; the GPUs' by default)."""
        name = f"gpuhealth-{os.getpid()}-{id(self):x}-{label}"
        group = self._m.pydcgm.DcgmFieldGroup(self._handle, name=name, fieldIds=ids)
        self._field_groups.append(group)
        # maxKeepSamples 0: bounded by age alone.
        (self._group if entities is None else entities).samples.WatchFields(group, update_us, keep_s, 0)
        return group

    # --- reading ----------------------------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        """The GPUs DCGM supports, found at start."""
        return list(self._gpus.values())

    def read(self) -> list[GpuReading]:
        """Latest watched values per GPU; raises BackendError only if nv-hostengine fails."""
        m = self._m
        gpu_entity = m.dcgm_fields.DCGM_FE_GPU
        try:
            latest = [self._group.samples.GetLatest_v2(self._base).values]
            if self._prof is not None:
                latest.append(self._group.samples.GetLatest_v2(self._prof).values)
            self._history.GetAllSinceLastCall(self._xid)
            history = self._history.values
            self._history.EmptyValues()
        except self._error as err:
            raise BackendError(f"reading field values from nv-hostengine at {self.address}: {_one_line(err)}") from err
        self._queue_xids(history.get(gpu_entity, {}))
        linked = self._link_values()
        readings = []
        for gid, info in self._gpus.items():
            values: dict[str, float] = dict(linked.get(gid, {}))
            for collection in latest:
                for field_id, series in collection.get(gpu_entity, {}).get(gid, {}).items():
                    name = self._names.get(field_id, "xid" if field_id == XID_FIELD_ID else None)
                    if name is None or not len(series):
                        continue
                    value = sample_value(series[-1], m.dcgmvalue)
                    if value is not None:
                        values[name] = value
            if self._is_lost(gid):
                readings.append(GpuReading(info, lost=True, error=f"DCGM reports GPU {gid} lost"))
            else:
                readings.append(GpuReading(info, values))
        return readings

    def _link_values(self) -> dict[int, dict[str, float]]:
        """`nvlink_links_down` and `gpu_fabric_state` per GPU; none when DCGM fails to say (logged)."""
        if not self._link_fields:
            return {}
        try:
            values = self._links.catalogue_values()
        except BackendError as err:
            if not self._links_failing:  # said once until it recovers, not at every sample
                log.warning("%s: nvlink_links_down and gpu_fabric_state absent until it recovers", err)
            self._links_failing = True
            return {}
        self._links_failing = False
        return {gid: {k: v for k, v in vals.items() if k in self._link_fields} for gid, vals in values.items()}

    def read_links(self) -> list[GpuLinks]:
        """Each GPU's NVLink links and fabric (collector.nvlink's source); BackendError when DCGM fails."""
        return self._links.read()

    def read_switches(self) -> list[SwitchReading]:
        """Each NVSwitch's values and port states (collector.nvswitch's source); BackendError when DCGM fails."""
        return self._links.switch_readings()

    def switches(self) -> list[SwitchInfo]:
        """The NVSwitches DCGM lists, with their PCI ids (collector.nvswitch.SwitchLister)."""
        return self._links.switches()

    def _queue_xids(self, history: Mapping[int, Any]) -> None:
        """One XidEvent per nonzero XID sample since the last read."""
        events = []
        for gid, by_field in history.items():
            info = self._gpus.get(gid)
            if info is None:
                continue
            for sample in by_field.get(XID_FIELD_ID, ()):
                code = sample_value(sample, self._m.dcgmvalue)
                if code:
                    # DCGM timestamps are microseconds since the epoch.
                    events.append(XidEvent(info.uuid, int(code), sample.ts / 1_000_000))
        events.sort(key=lambda e: e.timestamp)
        with self._lock:
            self._events += events

    def _is_lost(self, gid: int) -> bool:
        get_status = getattr(self._system.discovery, "GetGpuStatus", None)
        if get_status is None:  # bindings older than DCGM 2.x
            return False
        try:
            status = get_status(gid)
        except self._error:
            return False
        status = getattr(status, "value", status)
        return bool(status == DCGM_ENTITY_STATUS_LOST)

    def drain_xid_events(self) -> list[XidEvent]:
        """XID events seen by the reads since the last call, oldest first."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def data_time(self) -> None:
        """None: live readings are as of the wall clock."""
        return None

    def probe_runner(self) -> ProbeRunner:
        """The CUDA kernels in a child process per GPU, then `dcgmi diag` at its level when one is set."""
        if not self.diag_level:
            return SubprocessProbeRunner()
        from collector.dcgm_diag import DcgmDiagRunner

        return DcgmDiagRunner(SubprocessProbeRunner(), self.diag_level, self.host)

    def close(self) -> None:
        """Drop the field groups and the connection (or embedded engine); errors ignored."""
        if self._closed:
            return
        self._closed = True
        for group in self._field_groups:
            try:
                group.Delete()
            except Exception as err:  # the engine may already be gone
                log.debug("deleting DCGM field group failed: %s", err)
        self._field_groups = []
        try:
            self._handle.Shutdown()
        except Exception as err:
            log.debug("closing the DCGM connection failed: %s", err)


def open_dcgm(options: DcgmOptions, common: CommonOptions) -> DcgmBackend:
    """The DCGM backend (BackendUnavailable without the bindings or a host engine)."""
    return DcgmBackend(
        hostname=common.hostname, fields=common.fields, interval_s=common.interval_s, host=options.host,
        diag_level=options.diag_level,
    )  # fmt: skip
