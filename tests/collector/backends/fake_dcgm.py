"""A fake of DCGM's Python bindings, enough for DcgmBackend's start-up and reads.

It follows NVIDIA/DCGM's testing/python3 bindings (commit 72fa3fe): pydcgm.DcgmHandle/DcgmFieldGroup/
DcgmGroup, DcgmSystem.discovery (GetAllSupportedGpuIds, GetGpuAttributes, GetGpuStatus,
GetEntityGroupEntities, GetNvLinkLinkStatus returning a c_dcgmNvLinkStatus_v5), DcgmGroup.samples
(WatchFields, GetLatest_v2 -> .values[entityGroupId][entityId][fieldId] series) and
dcgm_field_helpers.DcgmFieldValueEntityCollection. The constants are copied from dcgmvalue.py,
dcgm_structs.py and dcgm_fields.py. DCGM's own behaviour for what a GPU lacks is copied from its host
engine (dcgmlib/src): a per-link counter NVML answers NOT_SUPPORTED is cached as DCGM_INT64_NOT_SUPPORTED
(DcgmCacheManager::ReadAndCacheNvLinkData, NvmlErrorToInt64Value), a link NVML does not know is
DcgmNvLinkLinkStateNotSupported (DcgmTopology.cpp), a value with a non-OK status is a sample with
isBlank set (dcgm_field_helpers.DcgmFieldValue). Nothing here proves the real bindings behave so.
"""

from __future__ import annotations

import types
from typing import Any

from collector.backends.dcgm import XID_FIELD_ID, DcgmBackend, DcgmModules
from core.catalog import FIELDS, Field

# --- dcgmvalue.py's constants and checks ------------------------------------------------------------

DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_INT64_NOT_SUPPORTED = DCGM_INT64_BLANK + 2
DCGM_FP64_BLANK = 140737488355328.0
DCGM_STR_NOT_SUPPORTED = "<<<NOT_SUPPORTED>>>"
dcgmvalue = types.SimpleNamespace(
    DCGM_INT32_BLANK=DCGM_INT32_BLANK,
    DCGM_INT64_BLANK=DCGM_INT64_BLANK,
    DCGM_FP64_BLANK=DCGM_FP64_BLANK,
    DCGM_INT64_NOT_FOUND=DCGM_INT64_BLANK + 1,
    DCGM_INT64_NOT_SUPPORTED=DCGM_INT64_NOT_SUPPORTED,
    DCGM_INT64_NOT_PERMISSIONED=DCGM_INT64_BLANK + 3,
    DCGM_FP64_NOT_FOUND=DCGM_FP64_BLANK + 1.0,
    DCGM_FP64_NOT_SUPPORTED=DCGM_FP64_BLANK + 2.0,
    DCGM_INT64_IS_BLANK=lambda v: v >= DCGM_INT64_BLANK,
    DCGM_FP64_IS_BLANK=lambda v: v >= DCGM_FP64_BLANK,
)

# --- dcgm_structs.py / dcgm_fields.py ---------------------------------------------------------------

CONNECTION_NOT_VALID = -21  # DCGM_ST_CONNECTION_NOT_VALID
NOT_SUPPORTED = -6  # DCGM_ST_NOT_SUPPORTED
LIBRARY_NOT_FOUND = -25  # DCGM_ST_LIBRARY_NOT_FOUND
GPU_ENTITY = 1  # DCGM_FE_GPU
SWITCH_ENTITY = 3  # DCGM_FE_SWITCH
ALL_GPUS = 0x7FFFFFFF  # DCGM_GROUP_ALL_GPUS
ALL_NVSWITCHES = 0x7FFFFFFE  # DCGM_GROUP_ALL_NVSWITCHES
MAX_NUM_DEVICES, MAX_LINKS_PER_GPU, MAX_NUM_SWITCHES, MAX_LINKS_PER_NVSWITCH = 32, 36, 12, 256
# dcgmNvLinkLinkState_t
LS_NOT_SUPPORTED, LS_DISABLED, LS_DOWN, LS_UP = 0, 1, 2, 3


class DCGMError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"DCGM error {value}")
        self.value = value


class Sample:
    """A DcgmFieldValue: isBlank where DCGM's status was not OK (value None here)."""

    def __init__(self, value: object, ts_us: int = 1_700_000_000_000_000) -> None:
        self.value = value
        self.ts = ts_us
        self.isBlank = value is None


class Engine:
    """What nv-hostengine holds: GPUs, latest values, new XID samples, link states and NVSwitches."""

    def __init__(self) -> None:
        self.gpus = {0: "GPU-dcgm-0", 1: "GPU-dcgm-1"}
        self.latest: dict[int, dict[int, object]] = {
            0: {
                150: 45,
                155: 301.25,
                251: 40000,
                1002: 0.75,
                XID_FIELD_ID: 0,
                1523: 0,
                # dcgm-exporter's other defaults: FB_RESERVED, NVLINK_BANDWIDTH_TOTAL (MB/s), PCIE bytes/s, vGPU
                253: 529,
                449: 61234,
                1009: 2_000_000_000,
                1010: 3_000_000_000,
                526: 0,
            },
            1: {150: 47, 155: DCGM_FP64_BLANK, 251: DCGM_INT64_BLANK + 2, XID_FIELD_ID: 48},
        }
        self.link_states: dict[int, list[int]] = {}
        """gpuId -> dcgmNvLinkLinkState_t by link (missing GPUs: all NotSupported)."""
        self.switches: dict[int, dict[int, object]] = {}
        """switch entity id -> field id -> latest value."""
        self.switch_links: dict[int, list[int]] = {}
        self.switch_support = True
        self.link_status_error: int | None = None
        self.new_xids: dict[int, list[Sample]] = {}
        self.standalone = True
        self.embedded = True
        self.prof_ok = True
        self.refuse_watch: set[int] = set()
        """Field ids whose watch DCGM refuses (DCGM_ST_NOT_SUPPORTED)."""
        self.lost: set[int] = set()
        self.unknown_fields: set[int] = {1523}
        self.watches: list[tuple[list[int], int, float, int]] = []
        self.switch_watches: list[list[int]] = []
        self.deleted: list[str] = []
        self.shutdown = 0
        self.fail_reads = False
        self.status_calls = 0

    def link_status(self) -> Any:
        """A c_dcgmNvLinkStatus_v5 as dcgm_agent.dcgmGetNvLinkLinkStatus fills it (fixed-size arrays)."""
        self.status_calls += 1
        if self.link_status_error is not None:
            raise DCGMError(self.link_status_error)

        def entry(eid: int, states: list[int], size: int) -> Any:
            return types.SimpleNamespace(entityId=eid, linkState=states + [LS_NOT_SUPPORTED] * (size - len(states)))

        gpus = [entry(g, self.link_states.get(g, []), MAX_LINKS_PER_GPU) for g in self.gpus]
        sws = [entry(s, self.switch_links.get(s, []), MAX_LINKS_PER_NVSWITCH) for s in self.switches]
        return types.SimpleNamespace(
            numGpus=len(gpus),
            gpus=gpus + [entry(0, [], MAX_LINKS_PER_GPU)] * (MAX_NUM_DEVICES - len(gpus)),
            numNvSwitches=len(sws),
            nvSwitches=sws + [entry(0, [], MAX_LINKS_PER_NVSWITCH)] * (MAX_NUM_SWITCHES - len(sws)),
        )


def _series(v: object) -> list[Sample]:
    return [Sample(v)]


def fake_modules(engine: Engine) -> DcgmModules:
    class Group:
        def __init__(self, group_id: int = ALL_GPUS) -> None:
            self.samples = self
            self.group_id = group_id

        def WatchFields(self, fg: Any, freq: int, age: float, keep: int) -> None:
            if not engine.prof_ok and any(1001 <= i < 1100 for i in fg.fieldIds):
                raise DCGMError(-33)
            if engine.refuse_watch & set(fg.fieldIds):
                raise DCGMError(NOT_SUPPORTED)
            if self.group_id == ALL_NVSWITCHES:
                engine.switch_watches.append(list(fg.fieldIds))
            else:
                engine.watches.append((list(fg.fieldIds), freq, age, keep))

        def GetLatest_v2(self, fg: Any) -> Any:
            if engine.fail_reads:
                raise DCGMError(CONNECTION_NOT_VALID)
            entity, held = (
                (SWITCH_ENTITY, engine.switches) if self.group_id == ALL_NVSWITCHES else (GPU_ENTITY, engine.latest)
            )
            per = {eid: {f: _series(v) for f, v in vals.items() if f in fg.fieldIds} for eid, vals in held.items()}
            return types.SimpleNamespace(values={entity: per})

    class Discovery:
        def GetAllSupportedGpuIds(self) -> list[int]:
            return list(engine.gpus)

        def GetGpuAttributes(self, gid: int) -> Any:
            ident = types.SimpleNamespace(
                uuid=engine.gpus[gid].encode(),
                deviceName=b"NVIDIA H200",
                pciBusId=f"00000000:{0x18 + gid:02X}:00.0".encode(),
                serial=b"1650000000009",
                driverVersion=b"570.86.15",
            )
            return types.SimpleNamespace(identifiers=ident)

        def GetGpuStatus(self, gid: int) -> int:
            return 4 if gid in engine.lost else 1

        def GetEntityGroupEntities(self, group: int, only_supported: bool) -> list[int]:
            if group != SWITCH_ENTITY:
                return []
            if not engine.switch_support:
                raise DCGMError(NOT_SUPPORTED)  # no NSCQ / NVSDM library: DCGM cannot see switches
            return list(engine.switches)

        def GetNvLinkLinkStatus(self) -> Any:
            return engine.link_status()

    class System:
        discovery = Discovery()

        def GetDefaultGroup(self) -> Group:
            return Group()

        def UpdateAllFields(self, wait: bool) -> None:
            pass

    class Handle:
        def __init__(self, handle: Any = None, ipAddress: str | None = None, opMode: int = 0):
            if ipAddress is not None and not engine.standalone:
                raise DCGMError(CONNECTION_NOT_VALID)
            if ipAddress is None and not engine.embedded:
                raise DCGMError(-30)
            self.handle = object()
            self.embedded = ipAddress is None

        def GetSystem(self) -> System:
            return System()

        def Shutdown(self) -> None:
            engine.shutdown += 1

    class FieldGroup:
        def __init__(self, handle: Any, name: str = "", fieldIds: list[int] | None = None):
            self.name = name
            self.fieldIds = list(fieldIds or [])

        def Delete(self) -> None:
            engine.deleted.append(self.name)

    class History:
        def __init__(self, handle: Any, group_id: int) -> None:
            self.values: dict[int, dict[int, dict[int, list[Sample]]]] = {}

        def GetAllSinceLastCall(self, fg: Any) -> int:
            for gid, samples in engine.new_xids.items():
                per = self.values.setdefault(GPU_ENTITY, {}).setdefault(gid, {})
                per.setdefault(XID_FIELD_ID, []).extend(samples)
            engine.new_xids = {}
            return 0

        def EmptyValues(self) -> None:
            self.values = {}

    def dcgm_group(handle: Any, groupId: int | None = None, groupName: str | None = None) -> Group:
        return Group(ALL_GPUS if groupId is None else groupId)

    return DcgmModules(
        pydcgm=types.SimpleNamespace(DcgmHandle=Handle, DcgmFieldGroup=FieldGroup, DcgmGroup=dcgm_group),
        dcgm_structs=types.SimpleNamespace(
            DCGMError=DCGMError,
            DCGM_OPERATION_MODE_AUTO=1,
            DCGM_GROUP_ALL_GPUS=ALL_GPUS,
            DCGM_GROUP_ALL_NVSWITCHES=ALL_NVSWITCHES,
            DCGM_ST_LIBRARY_NOT_FOUND=LIBRARY_NOT_FOUND,
            DCGM_ST_NOT_SUPPORTED=NOT_SUPPORTED,
        ),
        dcgm_fields=types.SimpleNamespace(
            DCGM_FE_GPU=GPU_ENTITY,
            DCGM_FE_SWITCH=SWITCH_ENTITY,
            DcgmFieldGetById=lambda i: None if i in engine.unknown_fields else object(),
        ),
        dcgmvalue=dcgmvalue,
        dcgm_field_helpers=types.SimpleNamespace(DcgmFieldValueEntityCollection=History),
    )


def make(engine: Engine, host: str = "localhost", fields: list[Field] | None = None) -> DcgmBackend:
    """A DcgmBackend over `engine` (the whole catalogue unless `fields`)."""
    return DcgmBackend("node-01", FIELDS if fields is None else fields, 10.0, host, loader=lambda: fake_modules(engine))
